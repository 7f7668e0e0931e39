"""Sweeps end to end on the built-in engine: real servers, real HTTP, a real DuckDB file.

Default suite: failures become rows and the sweep goes on (bad flag, never ready, port in use,
killed mid-load, requests that error), resume, Ctrl-C. Slow: the README's example sweep, with the
stored numbers checked against what the server itself reported."""
from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import duckdb
import pytest

from specwatch.run import sweep, sweepfile

ROOT = Path(__file__).resolve().parent.parent


def leftovers(tmp_path: Path) -> list[int]:
    """Live processes started by a sweep under tmp_path (sweep tags each server's environment)."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            env = open(f"/proc/{p}/environ", "rb").read()
            state = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and f"SPECWATCH_RUN_DIR={tmp_path}".encode() in env:
            out.append(int(p))
    return out


def rows(db: Path, sql: str, params=()) -> list[dict]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        cur = con.execute(sql, list(params))
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]
    finally:
        con.close()


class DbOpeners:
    """Samples /proc/*/fd while a sweep runs: which processes had the DuckDB file open."""

    def __init__(self, db: Path):
        self.db = str(db)
        self.pids: set[int] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while not self.stop.wait(0.1):
            for p in os.listdir("/proc"):
                if not p.isdigit():
                    continue
                try:
                    for fd in os.listdir(f"/proc/{p}/fd"):
                        if os.readlink(f"/proc/{p}/fd/{fd}").startswith(self.db):
                            self.pids.add(int(p))
                except OSError:
                    continue

    def close(self) -> set[int]:
        self.stop.set()
        self.thread.join()
        return self.pids


MODELS = ROOT / "specwatch" / "engine" / "models"


def check_model_facts(runs: list[dict]) -> None:
    """Each run records what the model files said where its server ran: the target's
    architecture and depth from its config.json, the draft's weights as sha1 over the weight
    files' names and bytes (computed here independently; an aux-id override links the same
    weights, so its hash is the draft's)."""
    tcfg = json.loads((MODELS / "target" / "config.json").read_text())
    h = hashlib.sha1()
    for f in sorted((MODELS / "draft-eagle3").glob("*.safetensors")):
        h.update(f.name.encode() + b"\0")
        h.update(f.read_bytes())
    for r in runs:
        assert (r["target_architecture"], r["target_num_layers"]) == (
            tcfg["architectures"][0], tcfg["num_hidden_layers"]), r["run_id"]
        assert r["draft_weights_sha1"] == (h.hexdigest() if r["draft_model_path"] else None), \
            r["run_id"]


def quiet() -> sweep.Progress:
    return sweep.Progress(stream=io.StringIO(), tty=False)


HEAD = """\
name = "{name}"
model = "builtin:target"
draft_model = "builtin:draft-eagle3"
server_flags = ["--decode-log-interval", "4", "--context-length", "160"]
concurrency = {conc}
startup_timeout_s = {startup}
stop_grace_s = 5
env = {{OMP_NUM_THREADS = "1"}}
{top}
[workload]
prompts = "prompts.jsonl"
num_prompts = {n}
warmup_requests = 1
output_tokens = 8
"""

PROMPTS = ["def add(a, b):\n", "Summarise: lists are mutable.", "What is 2 + 2?",
           "Name a prime."]
TOO_LONG = "x" * 300          # longer than the context (160): the server refuses it


def make(tmp_path: Path, name: str, extra: str = "", conc: str = "[2]", startup: int = 120,
         top: str = "", prompts: list[str] = PROMPTS, n: int = 4):
    (tmp_path / "prompts.jsonl").write_text(
        "".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    p = tmp_path / f"{name}.toml"
    p.write_text(HEAD.format(name=name, conc=conc, startup=startup, top=top, n=n) + extra)
    return sweepfile.load(p)


def test_bad_flag_and_request_errors_are_rows_then_resume(tmp_path):
    db = tmp_path / "s.duckdb"
    bad_flag = """
[[config]]
name = "bad-flag"
speculative_num_steps = 2
speculative_eagle_topk = 1
server_flags = ["--decode-log-interval", "0"]
"""
    s = make(tmp_path, "fail", bad_flag, prompts=PROMPTS[:3] + [TOO_LONG])
    res = sweep.run_sweep(s, str(db), str(tmp_path / "runs"), progress=quiet())
    by = {o.config: o for o in res.outcomes}
    assert set(by) == {"baseline", "bad-flag"}
    got = {r["config_name"]: r for r in rows(db, "SELECT * FROM runs")}
    base, bad = got["baseline"], got["bad-flag"]
    # the prompt longer than the context fails as a request row; the run is measured, but a run
    # with a failed request is not `ok` (its numbers cover other requests than the other configs')
    assert base["status"] == "failed" and (base["requests_ok"], base["requests_failed"]) == (3, 1), \
        base
    assert "1 of 4 requests failed: HTTP 400" in base["failure_reason"]
    assert base["output_tokens"] == 3 * 8 and base["output_tok_s"] > 0
    reqs = rows(db, "SELECT * FROM requests WHERE run_id = ? AND NOT is_warmup ORDER BY "
                    "request_idx", [base["run_id"]])
    assert len(reqs) == 4 and sum(not r["success"] for r in reqs) == 1
    assert all(r["output_tokens"] == 8 and len(r["itl_ms"]) == 7 for r in reqs if r["success"])
    assert bad["status"] == "failed"
    assert "server exited with code 2 before it was ready" in bad["failure_reason"]
    assert "--decode-log-interval 0: must be >= 1" in bad["server_log_tail"]
    # the failed launch's log is ingested anyway and scoped to its runs (doctor's evidence)
    ev = rows(db, """SELECT count(*) AS n FROM run_sources rs JOIN sources s USING (source_id)
                     WHERE rs.run_id = ? AND rs.offset_from = 0 AND rs.offset_to > 0""",
              [bad["run_id"]])
    assert ev[0]["n"] == 1
    assert all(o.stop_clean for o in res.outcomes if o.stop_clean is not None)
    assert leftovers(tmp_path) == []
    # the baseline's decode windows are scoped to its run by byte range
    rng = rows(db, "SELECT * FROM run_sources WHERE run_id = ?", [base["run_id"]])[0]
    assert 0 < rng["offset_from"] < rng["offset_to"]
    # resume retries what failed; what ended ok is kept (unless --force); a changed config
    # measures again
    assert {c.name for c, _ in sweep.plan(s, str(db), force=False)} == {"baseline", "bad-flag"}
    good = make(tmp_path, "fail", bad_flag.replace('"0"]', '"1"]'))
    again = sweep.run_sweep(good, str(db), str(tmp_path / "runs"), progress=quiet())
    assert {o.config: o.status for o in again.outcomes} == {"baseline": "ok", "bad-flag": "ok"}
    assert sweep.plan(good, str(db), force=False) == []
    assert {c.name for c, _ in sweep.plan(good, str(db), force=True)} == {"baseline", "bad-flag"}
    assert [c.name for c, _ in sweep.plan(s, str(db), force=False)] == ["bad-flag"]
    # each request row is stored once, whatever was stored and re-stored on the way
    dup = rows(db, "SELECT run_id, request_idx, count(*) AS n FROM requests GROUP BY ALL "
                   "HAVING n > 1")
    assert dup == []
    assert leftovers(tmp_path) == []


def test_run_sweep_exits_nonzero_while_a_config_is_failed(tmp_path):
    """The CLI: exit 1 when a config fails; a re-run retries it and exits 1 again."""
    db = tmp_path / "s.duckdb"
    make(tmp_path, "exit", """
[[config]]
name = "bad-flag"
speculative_num_steps = 2
speculative_eagle_topk = 1
server_flags = ["--decode-log-interval", "0"]
""", top='engine = "builtin"')
    cmd = [sys.executable, "-m", "specwatch.cli", "run-sweep", str(tmp_path / "exit.toml"),
           "--db", str(db), "--out-dir", str(tmp_path / "runs")]
    first = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert first.returncode == 1, first.stderr[-2000:]
    assert "failed configs" in first.stderr and "bad-flag" in first.stderr
    second = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert second.returncode == 1, second.stderr[-2000:]
    assert "1 configs, 1 runs to measure" in second.stderr      # the failed one is retried
    assert "already measured" in second.stderr and "baseline" in second.stderr
    assert leftovers(tmp_path) == []


STUB = textwrap.dedent("""
    import subprocess, sys, time
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    time.sleep(300)
""")


def test_never_ready_and_port_in_use_are_rows(tmp_path):
    db = tmp_path / "s.duckdb"
    (tmp_path / "stub.py").write_text(STUB)
    launch_cmd = json.dumps([sys.executable, str(tmp_path / "stub.py")])
    s = make(tmp_path, "stuck", startup=2, top=f"launch_command = {launch_cmd}")
    res = sweep.run_sweep(s, str(db), str(tmp_path / "runs"), progress=quiet())
    (o,) = res.outcomes
    assert o.status == "failed" and "not ready after 2 s" in o.failure_reason
    assert o.stop_clean and leftovers(tmp_path) == []

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        res = sweep.run_sweep(make(tmp_path, "busy", top=f"port = {port}"), str(db),
                              str(tmp_path / "runs"), progress=quiet())
    finally:
        busy.close()
    (o,) = res.outcomes
    assert o.status == "failed" and f"port {port} is already in use" in o.failure_reason
    got = rows(db, "SELECT status, failure_reason FROM runs WHERE sweep_name = 'busy'")
    assert got == [{"status": "failed", "failure_reason": o.failure_reason}]


class KillAtFirstRequest(sweep.Progress):
    """Kills the server's whole process group when the first measured request completes."""

    def __init__(self):
        super().__init__(stream=io.StringIO(), tty=False)
        self.pid = None
        self.killed = False

    def note(self, name, text):
        m = re.search(r"launched pid (\d+)", text)
        if m:
            self.pid = int(m.group(1))
        super().note(name, text)

    def request_done(self, name, ok):
        if not self.killed:
            self.killed = True
            os.killpg(self.pid, signal.SIGKILL)
        super().request_done(name, ok)


def test_server_killed_mid_load_fails_its_runs_and_leaves_nothing(tmp_path):
    db = tmp_path / "s.duckdb"
    s = make(tmp_path, "killed", conc="[1, 2]")
    res = sweep.run_sweep(s, str(db), str(tmp_path / "runs"), progress=KillAtFirstRequest())
    (o,) = res.outcomes
    got = {r["concurrency"]: r for r in rows(db, "SELECT * FROM runs")}
    assert got[1]["status"] == "failed"
    assert "server exited with code -9 during the load" in got[1]["failure_reason"]
    assert got[1]["requests_failed"] >= 1 and got[1]["server_log_tail"]
    assert got[2]["status"] == "failed" and "code -9" in got[2]["failure_reason"]
    assert leftovers(tmp_path) == [] and o.stop_clean


@pytest.mark.parametrize("sig", [pytest.param(signal.SIGINT, marks=pytest.mark.slow), signal.SIGTERM,
                                 pytest.param(signal.SIGHUP, marks=pytest.mark.slow)],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])  # ~15 s each: SIGTERM in the default tier
def test_ctrl_c_stops_cleanly_keeps_measured_runs_and_exits_130(tmp_path, sig):
    """Ctrl-C, SIGTERM (a scheduler's kill) and SIGHUP (the terminal went away) all stop the
    sweep the same way: what was measured is kept, nothing is left `running`, no server."""
    db = tmp_path / "s.duckdb"
    # c=2 first (~2 s), then c=1, twice as long (~4 s on a quiet box): the signal, sent when the
    # first run is stored, must land inside the second even when this reader is slow to see the
    # line (a clean-clone CI once saw 48 prompts at c=2 finish before the signal took effect)
    make(tmp_path, "ctrlc", conc="[2, 1]", n=160)
    proc = subprocess.Popen(
        [sys.executable, "-m", "specwatch.cli", "run-sweep", str(tmp_path / "ctrlc.toml"),
         "--db", str(db), "--out-dir", str(tmp_path / "runs")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if "c=2 r=0 ok" in line:          # the first run is stored: interrupt the second
            sent_at = dt.datetime.now()   # the clock measure.py stamps ended_at with
            proc.send_signal(sig)
            break
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(lines) + err
    got = {r["concurrency"]: r for r in rows(db, "SELECT * FROM runs")}
    evidence = f"signal sent at {sent_at}; runs: " + repr(rows(
        db, "SELECT concurrency, status, failure_reason, requests_ok, started_at, ended_at FROM runs")) \
        + "\n" + "".join(lines) + err
    assert got[2]["status"] == "ok", evidence
    # c=1 must be cut by the signal. The one other honest outcome: this reader saw the c=2 line
    # so late (a loaded 2-core box) that c=1 had already finished whole; then it is a complete
    # run that ended before the signal. An `ok` run that ended after it kept loading past a stop.
    if got[1]["status"] == "ok":
        assert got[1]["requests_ok"] == 160 and got[1]["ended_at"] < sent_at, evidence
    else:
        assert got[1]["status"] == "interrupted", evidence
    assert signal.Signals(sig).name in "".join(lines) + err     # said what stopped it
    # the cut config is listed as interrupted (re-run to measure), never as failed
    assert "failed configs" not in err, err
    assert ("interrupted configs (re-run to measure): baseline" in err) == \
        (got[1]["status"] == "interrupted"), err
    # the verdict table is still printed (baseline row at c=2)
    assert any(ln.split()[:2] == ["baseline", "2"] for ln in out.splitlines()), out
    assert leftovers(tmp_path) == []


@pytest.mark.slow  # 12-15 s on 2 cores
def test_repeats_interleave_with_one_server_per_config(tmp_path):
    """Repeats alternate between configs in a seeded order (stored per run), one run loads at a
    time, and each config keeps one server across all its repeats (one log, one launch)."""
    db = tmp_path / "s.duckdb"
    s = make(tmp_path, "inter", """
[[config]]
name = "s2"
speculative_num_steps = 2
speculative_eagle_topk = 1
""", conc="[1, 2]", top="repeats = 3")
    res = sweep.run_sweep(s, str(db), str(tmp_path / "runs"), progress=quiet())
    assert {o.status for o in res.outcomes} == {"ok"}
    got = sorted(rows(db, "SELECT * FROM runs"), key=lambda r: r["run_order"])
    assert [r["run_order"] for r in got] == list(range(12))
    assert {r["order_seed"] for r in got} == {s.workload.seed}
    blocks = [(r["repeat_idx"], r["concurrency"]) for r in got]
    assert blocks == sorted(blocks, key=lambda b: (b[0], [1, 2].index(b[1])))
    assert all(sorted(r["config_name"] for r in got[i:i + 2]) == ["baseline", "s2"]
               for i in range(0, 12, 2))                    # every block has both configs
    assert all(a["ended_at"] <= b["started_at"] for a, b in zip(got, got[1:]))
    assert got == sorted(got, key=lambda r: r["started_at"])   # measured in the stored order
    # the order is the seeded shuffle, so both configs lead some block (not one always first)
    assert len({got[i]["config_name"] for i in range(0, 12, 2)}) == 2
    check_model_facts(got)
    for name in ("baseline", "s2"):
        logs = list((tmp_path / "runs" / "inter" / name).glob("server-*.log"))
        assert len(logs) == 1 and logs[0].read_text().count("specwatch: launching") == 1
    # a Parquet file per run beside the database, readable by any DuckDB client
    pq = duckdb.sql(f"""SELECT run_id, status, output_tok_s, len(requests) AS n,
                               list_count(list_filter(requests, lambda r: NOT r.is_warmup)) AS m
                        FROM read_parquet('{tmp_path / "runs"}/**/*.parquet')""").fetchall()
    assert sorted((r[0], r[1], r[2], r[4]) for r in pq) == sorted(
        (r["run_id"], r["status"], r["output_tok_s"], 4) for r in got)
    assert sorted(r[3] for r in pq) == [4] * 10 + [6] * 2    # the first run keeps the warm-ups
    assert sweep.interleave(s, sweep.plan(s, str(tmp_path / "none.duckdb"), False),
                            s.workload.seed) == [(r["config_name"], sweep.RunKey(
                                r["concurrency"], r["repeat_idx"])) for r in got]
    assert leftovers(tmp_path) == []


@pytest.mark.slow  # 12-15 s on 2 cores
def test_driver_killed_loses_nothing_stored_and_resume_measures_the_rest(tmp_path):
    """SIGKILL of run-sweep (no handler runs) after its first run was stored: that run is kept
    as it was, the one in progress stays `running`, a re-run measures only what is missing."""
    db = tmp_path / "s.duckdb"
    s = make(tmp_path, "crash", conc="[1, 2]", n=16)
    cmd = [sys.executable, "-m", "specwatch.cli", "run-sweep", str(tmp_path / "crash.toml"),
           "--db", str(db), "--out-dir", str(tmp_path / "runs")]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    for line in proc.stderr:
        if "c=1 r=0 ok" in line:
            proc.kill()
            break
    proc.wait(30)
    before = {r["concurrency"]: r for r in rows(db, "SELECT * FROM runs")}
    assert before[1]["status"] == "ok" and before[2]["status"] == "running"
    n1 = rows(db, "SELECT count(*) AS n FROM requests WHERE run_id = ?",
              [before[1]["run_id"]])[0]["n"]
    assert [(c.name, keys) for c, keys in sweep.plan(s, str(db), False)] == [
        ("baseline", [sweep.RunKey(2, 0)])]
    end = time.monotonic() + 15                  # the server dies with its parent (watchdog)
    while leftovers(tmp_path) and time.monotonic() < end:
        time.sleep(0.2)
    assert leftovers(tmp_path) == []
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    after = {r["concurrency"]: r for r in rows(db, "SELECT * FROM runs")}
    assert after[1] == before[1] and after[2]["status"] == "ok"
    assert rows(db, "SELECT count(*) AS n FROM requests WHERE run_id = ?",
                [before[1]["run_id"]])[0]["n"] == n1
    assert leftovers(tmp_path) == []


class RecordEnv(sweep.Progress):
    """Reads each server's CUDA_VISIBLE_DEVICES from /proc while it runs."""

    def __init__(self):
        super().__init__(stream=io.StringIO(), tty=False)
        self.devices = {}
        self.pids = {}

    def note(self, name, text):
        m = re.search(r"launched pid (\d+)", text)
        if m:
            self.pids[name] = m.group(1)
        if text.startswith("ready"):   # exec'd by now (right after fork it is still our env)
            self.max_alive = max(getattr(self, "max_alive", 0), sum(
                os.path.exists(f"/proc/{p}/environ") for p in self.pids.values()))
            env = open(f"/proc/{self.pids[name]}/environ", "rb").read().split(b"\0")
            self.devices[name] = next((e.split(b"=", 1)[1].decode() for e in env
                                       if e.startswith(b"CUDA_VISIBLE_DEVICES=")), None)
        super().note(name, text)


def test_configs_run_in_parallel_on_disjoint_gpu_sets(tmp_path):
    """--gpus 0,1: two tp=1 configs at once, each with its own device and port; a tp=4 config
    cannot be placed and becomes a failed row. (On --gpus the built-in engine runs on CUDA;
    `--device cpu` keeps it on this GPU-less box, so placement is real here even without GPUs.)"""
    db = tmp_path / "s.duckdb"
    s = make(tmp_path, "par", """
[[config]]
name = "s2"
speculative_num_steps = 2
speculative_eagle_topk = 1

[[config]]
name = "s2-tp4"
speculative_num_steps = 2
speculative_eagle_topk = 1
tp_size = 4
""")
    s = dataclasses.replace(s, configs=tuple(dataclasses.replace(
        c, server_flags=c.server_flags + ("--device", "cpu")) for c in s.configs))
    prog = RecordEnv()
    res = sweep.run_sweep(s, str(db), str(tmp_path / "runs"), gpus=(0, 1), progress=prog)
    by = {o.config: o for o in res.outcomes}
    assert by["baseline"].status == by["s2"].status == "ok"
    assert sorted([by["baseline"].gpus, by["s2"].gpus]) == [[0], [1]]
    assert sorted(prog.devices.values()) == ["0", "1"]
    assert by["baseline"].port != by["s2"].port
    assert "needs 4 GPUs (tp_size=4) but --gpus lists 2" in by["s2-tp4"].failure_reason
    assert by["baseline-tp4"].status == "failed"
    assert prog.max_alive == 2                           # both servers were up at once
    assert leftovers(tmp_path) == []


@pytest.mark.slow
def test_example_sweep_numbers_match_the_server(tmp_path):
    """The README main job: baseline + chain S=2/S=3 + tree + shifted aux ids, 2 concurrency
    levels. Stored numbers are checked against the server's /server_info, the responses'
    meta_info and the decode windows in the log."""
    db = tmp_path / "e2e.duckdb"
    proc = subprocess.run(
        [sys.executable, "-m", "specwatch.cli", "run-sweep", str(ROOT / "examples" /
                                                                  "builtin_sweep.toml"),
         "--db", str(db), "--out-dir", str(tmp_path / "runs"), "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    s = sweepfile.load(ROOT / "examples" / "builtin_sweep.toml")
    interval = int(s.configs[0].server_flags[s.configs[0].server_flags.index(
        "--decode-log-interval") + 1])
    n_out = s.workload.output_tokens.max
    assert s.workload.output_tokens.min == n_out
    report = {r["run_name"]: r for r in out["report"]}
    n_runs = len(s.configs) * len(s.concurrency) * s.repeats
    assert len(report) == n_runs == 50
    all_runs = rows(db, "SELECT * FROM runs")
    check_model_facts(all_runs)   # the shifted config serves the same draft weights
    by_id = {r["run_id"]: r for r in all_runs}
    # interleaved: in every (repeat, concurrency) block each config runs once, in the stored order
    order = sorted(all_runs, key=lambda r: r["run_order"])
    blocks = [(r["repeat_idx"], s.concurrency.index(r["concurrency"])) for r in order]
    assert blocks == sorted(blocks)
    for b in set(blocks):
        assert sorted(r["config_name"] for r, rb in zip(order, blocks) if rb == b) == sorted(
            c.name for c in s.configs)
    assert [r["run_order"] for r in order] == list(range(n_runs))
    assert all(a["ended_at"] <= b["started_at"] for a, b in zip(order, order[1:]))  # one at a time
    for run in all_runs:
        name, conc = run["config_name"], run["concurrency"]
        assert run["status"] == "ok", run
        reqs = rows(db, "SELECT * FROM requests WHERE run_id = ? AND NOT is_warmup",
                    [run["run_id"]])
        assert len(reqs) == s.workload.num_prompts and all(r["success"] for r in reqs)
        assert all(r["output_tokens"] == n_out for r in reqs)
        assert run["output_tokens"] == sum(r["output_tokens"] for r in reqs)
        # the run's windows: exactly those its byte range holds in the stored decode lines
        wins = rows(db, """SELECT d.* FROM decode_windows d JOIN run_sources rs
                           ON d.source_id = rs.source_id AND d.byte_offset >= rs.offset_from
                           AND d.byte_offset < rs.offset_to WHERE rs.run_id = ?
                           ORDER BY d.byte_offset""", [run["run_id"]])
        assert len(wins) >= 3, (name, conc)
        if name == "baseline":
            assert run["server_accept_len"] is None and all(r["spec_verify_ct"] is None
                                                            for r in reqs)
            if conc == 1:  # one request at a time: a decode step per token after the prefill's
                assert len(wins) == sum(r["output_tokens"] - 1 for r in reqs) // interval
            continue
        # per response: SGLang's spec_accept_length = completion_tokens / spec_verify_ct
        for r in reqs:
            assert r["spec_accept_length"] == pytest.approx(n_out / r["spec_verify_ct"])
        if conc == 1:
            # /flush_cache reset the counters, so the server's lifetime average covers exactly
            # the windows in this run's range; at batch size 1 it is their plain mean
            assert len(wins) == sum(r["spec_verify_ct"] for r in reqs) // interval
            mean = sum(w["accept_len"] for w in wins) / len(wins)
            assert run["server_accept_len"] == pytest.approx(mean, abs=0.006)
        # the summary (windows after the first, batch-weighted) agrees with the server's
        rep = report[run["run_name"]]
        assert rep["accept_len"] == pytest.approx(run["server_accept_len"], rel=0.1)
        assert rep["accept_rate"] == pytest.approx(
            (rep["accept_len"] - 1) / (run["speculative_num_draft_tokens"] - 1))
        # speedup: over the baseline of the same concurrency, from the client numbers
        base = by_id[rep["baseline_run_id"]]
        assert base["config_name"] == "baseline" and base["concurrency"] == conc
        assert rep["speedup_client"] == pytest.approx(run["output_tok_s"] / base["output_tok_s"])
    # the shifted aux ids cripple the draft: accept length well below the correct draft's
    for run in all_runs:
        if run["config_name"] == "eagle3-s3k1d4":
            good = report[run["run_name"]]["accept_len"]
            bad = report[run["run_name"].replace("s3k1d4", "s3k1d4-shifted")]["accept_len"]
            assert bad < good - 0.3, (good, bad)
    assert all(c["stop_clean"] for c in out["configs"])
    assert leftovers(tmp_path) == []
    print(proc.stderr)
