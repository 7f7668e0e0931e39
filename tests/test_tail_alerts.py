"""`specwatch tail` speaks (issue 16): status lines on a terminal, warnings when a rule fires, and
the warnings in the `alerts` table. Real `specwatch tail` processes follow real log files that are
appended line by line; the rules are also run on real stored sample logs."""
from __future__ import annotations

import datetime as dt
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from specwatch.logs import alerts, ingest
from specwatch.db import store
from tests.conftest import ROOT, SAMPLES, Spawned

ARGS = ("[2026-10-31 09:30:00] server_args=ServerArgs(model_path='/m/t', speculative_algorithm="
        "'EAGLE3', speculative_draft_model_path='/m/d', speculative_num_steps=3, "
        "speculative_eagle_topk=1, speculative_num_draft_tokens=4, tp_size=1, dp_size={dp})\n")


def decode(i: int, al: float, ar: float | None = None, dp: int | None = None, running: int = 8) -> str:
    ar = (al - 1) / 3 if ar is None else ar
    t = dt.datetime(2026, 10, 31, 9, 31) + dt.timedelta(seconds=i)
    tag = f" DP{dp} TP{dp}" if dp is not None else ""
    return (f"[{t:%Y-%m-%d %H:%M:%S}{tag}] Decode batch, #running-req: {running}, #token: "
            f"{4096 + 40 * i}, token usage: 0.01, accept len: {al:.2f}, accept rate: {ar:.2f}, "
            f"cuda graph: True, gen throughput (token/s): {300 * al:.2f}, #queue-req: 0\n")


def alert_rows(db) -> list[tuple]:
    if not Path(db).exists():
        return []
    try:
        with store.reader(db) as con:
            return con.execute("SELECT rule, line_no, value, dp_rank, message FROM alerts "
                               "ORDER BY line_no, rule").fetchall()
    except (store.StoreError, duckdb.CatalogException):
        return []


def stored_windows(db) -> int:
    if not Path(db).exists():
        return 0
    try:
        with store.reader(db) as con:
            return con.execute("SELECT count(*) FROM decode_windows").fetchone()[0]
    except (store.StoreError, duckdb.CatalogException):
        return 0


def wait_for(cond, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


_started = Spawned()


@pytest.fixture(autouse=True)
def _no_tail_left_behind():
    """Whatever a test asserts, no `specwatch tail` it started outlives it."""
    yield
    _started.reap()


class TailProc:
    """`specwatch tail` as a real process; its stderr on a pipe, or on a pseudo-terminal."""

    def __init__(self, db, log, *extra, tty=False):
        cmd = [sys.executable, "-m", "specwatch.cli", "tail", str(log), "--db", str(db),
               "--poll-interval", "0.1", *extra]
        self.master = None
        if tty:
            self.master, slave = pty.openpty()
            self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=slave)
            os.close(slave)
        else:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True)
        self.screen = ""
        _started.append(self.proc)

    def read_tty(self, seconds=0.5) -> str:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            r, _, _ = select.select([self.master], [], [], 0.05)
            if r:
                try:
                    self.screen += os.read(self.master, 65536).decode(errors="replace")
                except OSError:
                    break
        return self.screen

    def stop(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGTERM)
        try:
            if self.master is None:
                _, err = self.proc.communicate(timeout=60)
            else:
                self.proc.wait(60)
                err = self.read_tty(0.3)
                os.close(self.master)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        return self.proc.returncode, err


def test_collapse_from_2_9_to_1_1_warns_within_two_windows_and_stores_an_alert(tmp_path):
    db, log = tmp_path / "a.duckdb", tmp_path / "server.log"
    log.write_text(ARGS.format(dp=1))
    tail = TailProc(db, log)
    try:
        with open(log, "a") as f:
            for i in range(8):
                f.write(decode(i, 2.9))
            f.flush()
            wait_for(lambda: stored_windows(db) == 8, what="healthy windows stored")
            assert alert_rows(db) == []
            first_bad_line = 1 + 8 + 1
            for k in range(4):
                f.write(decode(8 + k, 1.1))
                f.flush()
                wait_for(lambda: stored_windows(db) == 9 + k, what=f"collapsed window {k + 1}")
                if k == 1:   # the second collapsed window has been stored: the warning is there
                    rows = wait_for(lambda: alert_rows(db), timeout=10, what="alert row")
    finally:
        code, err = tail.stop()
    assert code == 0, err
    assert [r[0] for r in rows] == ["low_accept_len"]
    rule, line_no, value, _, message = rows[0]
    assert first_bad_line <= line_no <= first_bad_line + 1
    assert value == pytest.approx(1.1)
    assert "accept length 1.10 < 1.50 for 2 consecutive windows" in message
    assert "it was 2.90 before" in message
    # once per collapse, not once per window
    assert [r[0] for r in alert_rows(db)] == ["low_accept_len"]
    warnings = [ln for ln in err.splitlines() if "WARNING" in ln]
    assert len(warnings) == 1 and "accept length 1.10 < 1.50" in warnings[0], err
    assert "Traceback" not in err


HEALTHY = ["sglang-0.5.23-llama8b-eagle3-s3k1.log", "sglang-0.5.23-llama8b-eagle3-s5k4.log",
           "sglang-0.5.23-llama8b-baseline.log", "sglang-0.5.9-dp2-tp8-eagle3.log",
           "sglang-0.5.4-iter-eagle3.log", "sglang-0.4.2-tp2-eagle.log", "sglang-0.5.1-baseline.log"]


def consumed(db, logs) -> bool:
    """Every byte of every log is behind a stored checkpoint."""
    if not Path(db).exists():
        return False
    try:
        with store.reader(db) as con:
            done = dict(con.execute("SELECT path, max(offset_bytes) FROM sources GROUP BY path").fetchall())
    except (store.StoreError, duckdb.CatalogException):
        return False
    return all(done.get(str(p)) == p.stat().st_size for p in logs)


def test_healthy_sample_logs_raise_nothing(tmp_path):
    """One tail follows every healthy sample (speculative at several SGLang versions, DP 2,
    baselines): not one warning, not one alert row."""
    db = tmp_path / "h.duckdb"
    logs = []
    for name in HEALTHY:
        logs.append(tmp_path / name)
        logs[-1].write_bytes((SAMPLES / name).read_bytes())
    tail = TailProc(db, logs[0], *map(str, logs[1:]))
    try:
        wait_for(lambda: consumed(db, logs), timeout=60, what="every sample stored")
        time.sleep(0.5)
        assert stored_windows(db) > 100
    finally:
        code, err = tail.stop()
    assert code == 0 and "WARNING" not in err and "Traceback" not in err, err
    assert alert_rows(db) == []


def test_wrong_aux_ids_sample_warns(tmp_path):
    name = "sglang-0.5.23-llama8b-eagle3-wrong-aux-ids.log"
    db, log = tmp_path / "w.duckdb", tmp_path / name
    log.write_bytes((SAMPLES / name).read_bytes())
    tail = TailProc(db, log)
    try:
        wait_for(lambda: alert_rows(db), what="alert")
    finally:
        code, err = tail.stop()
    rows = alert_rows(db)
    assert {r[0] for r in rows} == {"low_accept_len"} and len(rows) == 1
    assert rows[0][1] == 16   # the second decode window of the log (lines 15, 16)
    assert "WARNING" in err


def test_status_line_on_a_terminal_and_quiet_keeps_silence(tmp_path):
    db, log = tmp_path / "t.duckdb", tmp_path / "server.log"
    log.write_text(ARGS.format(dp=1) + "".join(decode(i, 2.5) for i in range(5)))
    tail = TailProc(db, log, tty=True)
    try:
        wait_for(lambda: stored_windows(db) == 5, what="windows stored")
        screen = wait_for(lambda: "5 windows" in tail.read_tty(0.3) and tail.screen,
                          what="status line")
    finally:
        code, _ = tail.stop()
    assert code == 0
    last = [ln for ln in screen.replace("\r", "\n").split("\n") if "5 windows" in ln][-1]
    assert "server.log: 5 windows" in last and "accept len 2.50" in last
    assert "accept rate 0.50" in last and "gen 750.0 tok/s" in last and "lag " in last
    # --quiet: not a byte, even on a terminal and with a collapse; the alert is still stored
    db2, log2 = tmp_path / "q.duckdb", tmp_path / "quiet.log"
    log2.write_text(ARGS.format(dp=1) + "".join(decode(i, 1.05) for i in range(4)))
    tail = TailProc(db2, log2, "--quiet", tty=True)
    try:
        wait_for(lambda: alert_rows(db2), what="alert stored while quiet")
    finally:
        code, out = tail.stop()
    assert code == 0 and out == ""


def test_restarted_tail_does_not_repeat_old_warnings(tmp_path):
    db, log = tmp_path / "r.duckdb", tmp_path / "server.log"
    log.write_text(ARGS.format(dp=1) + "".join(decode(i, 2.9) for i in range(4))
                   + "".join(decode(4 + i, 1.1) for i in range(4)))
    for n in (8, 9):
        tail = TailProc(db, log)
        try:
            if n == 9:   # the collapse goes on after the restart: still the same one warning
                with open(log, "a") as f:
                    f.write(decode(8, 1.1))
            wait_for(lambda: stored_windows(db) == n, what="stored")
            wait_for(lambda: alert_rows(db), what="alert")
            time.sleep(0.5)
        finally:
            code, err = tail.stop()
        assert code == 0
    assert len(alert_rows(db)) == 1
    assert "WARNING" not in err   # the second tail saw nothing new


def _judge(tmp_path, lines: list[str], rules=None) -> list[alerts.Alert]:
    """Ingest a real log file, then run the rules as tail does (Monitor on the real store)."""
    db, log = tmp_path / "m.duckdb", tmp_path / "server.log"
    log.write_text("".join(lines))
    ingest.ensure_run(db, "r")
    mon = alerts.Monitor(db, [(str(log), "r")], rules)
    mon.update()   # before anything is stored: nothing to seed
    ing = ingest.FileIngestor(db, log, "r")
    try:
        ing.poll()
    finally:
        ing.close()
    return mon.update()


def test_stuck_signature_is_its_own_warning(tmp_path):
    lines = [ARGS.format(dp=1)] + [decode(i, 2.6) for i in range(3)] + \
        [decode(3 + i, 1.0, 0.0) for i in range(3)]
    fired = _judge(tmp_path, lines)
    assert [a.rule for a in fired] == ["no_accept"]
    assert "accept len 1.00, accept rate 0.00 with 8 running requests" in fired[0].message
    # the same numbers with nothing running are an idle server, not a stuck draft
    lines = [ARGS.format(dp=1)] + [decode(i, 1.0, 0.0, running=0) for i in range(4)]
    (tmp_path / "idle").mkdir()
    assert "no_accept" not in [a.rule for a in _judge(tmp_path / "idle", lines)]


def test_slow_decline_over_uptime_warns_once(tmp_path):
    als = [3.0] * 11 + [3.0 - 0.08 * i for i in range(1, 16)]
    lines = [ARGS.format(dp=1)] + [decode(i, a) for i, a in enumerate(als)]
    fired = _judge(tmp_path, lines)
    assert [a.rule for a in fired] == ["accept_len_trend"]
    assert "trending down" in fired[0].message
    steady = [ARGS.format(dp=1)] + [decode(i, 3.0 + 0.05 * (i % 3)) for i in range(40)]
    (tmp_path / "s").mkdir()
    assert _judge(tmp_path / "s", steady) == []


def test_dp_rank_disagreeing_warns_naming_the_rank(tmp_path):
    lines = [ARGS.format(dp=2)]
    for i in range(8):
        lines += [decode(i, 2.8, dp=0), decode(i, 1.9 if i >= 1 else 2.8, dp=1)]
    fired = _judge(tmp_path, lines)
    assert [(a.rule, a.window.dp_rank) for a in fired] == [("dp_rank_disagree", 1)]
    assert "DP rank 1 accept length" in fired[0].message
    # the sample DP log (ranks within a few percent) is quiet: see the healthy samples above


def test_rule_flags_reach_the_rules(tmp_path):
    db, log = tmp_path / "f.duckdb", tmp_path / "server.log"
    log.write_text(ARGS.format(dp=1) + "".join(decode(i, 2.0) for i in range(3)))
    tail = TailProc(db, log, "--alert-accept-len", "2.5", "--alert-windows", "3")
    try:
        wait_for(lambda: stored_windows(db) == 3, what="stored")
        rows = wait_for(lambda: alert_rows(db), what="alert")
    finally:
        tail.stop()
    assert rows[0][0] == "low_accept_len" and rows[0][1] == 4   # the third window (lines 2-4)
    assert "< 2.50 for 3 consecutive windows" in rows[0][4]


def vllm(i: int, mal: float) -> str:
    acc = int((mal - 1) * 3000)
    return (f"(APIServer pid=1) INFO 10-20 09:{i // 6:02d}:{i % 6 * 10:02d} [metrics.py:96] "
            f"SpecDecoding metrics: Mean acceptance length: {mal:.2f}, Accepted throughput: "
            f"{acc / 10:.2f} tokens/s, Drafted throughput: 900.00 tokens/s, Accepted: {acc} tokens, "
            f"Drafted: 9000 tokens, Per-position acceptance rate: 0.800, 0.600, 0.400, "
            f"Avg Draft acceptance rate: {acc / 90:.1f}%\n")


def test_vllm_logs_are_judged_too(tmp_path):
    fired = _judge(tmp_path, [vllm(i, 2.8) for i in range(4)] + [vllm(4 + i, 1.1) for i in range(3)])
    assert [a.rule for a in fired] == ["low_accept_len"]
    assert "accept length 1.10 < 1.50 for 2 consecutive windows" in fired[0].message
    (tmp_path / "h").mkdir()
    healthy = (SAMPLES / "vllm-0.11-eagle3.log").read_text().splitlines(keepends=True)
    assert _judge(tmp_path / "h", healthy) == []
