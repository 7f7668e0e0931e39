"""`specwatch tail` as a real process: a writer appending ~200 lines/s with rename and copy-truncate
rotations, SIGKILL and restart of tail, and a reader process polling `specwatch sql` every 100 ms.

Checks: every line written is stored exactly once with its content and inside its run; the reader
never fails and never sees the count go down; tail exits 0 on SIGTERM.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from specwatch.db import store

REPO = str(Path(__file__).resolve().parents[1])
ENV = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
RUN = "stress"


def line(seq: int) -> bytes:
    return (f"[2025-10-27 16:40:02] Decode batch [{seq}], #running-req: {seq % 97}, #token: {seq}, "
            "token usage: 0.04, accept len: 3.12, accept rate: 0.78, cuda graph: True, "
            "gen throughput (token/s): 911.30, #queue-req: 0, \n").encode()


def cli(*args) -> list[str]:
    return [sys.executable, "-m", "specwatch.cli", *args]


class Writer(threading.Thread):
    """Appends `rate` lines/s; at scheduled times rotates the log (logrotate-style: shift .N to
    .N+1, then `rename` + create or `copytruncate`), always between complete lines. Every 37th
    line is written in two parts 30 ms apart (a partial last line completed later)."""

    def __init__(self, log: Path, duration_s: float, rotations: list[tuple[float, str]],
                 rate: int = 200):
        super().__init__(daemon=True)
        self.log, self.duration_s, self.rate = log, duration_s, rate
        self.rotations = sorted(rotations)
        self.written = 0
        self.rotated: list[str] = []

    def _shift(self):
        n = 1
        while os.path.exists(f"{self.log}.{n}"):
            n += 1
        for i in range(n - 1, 0, -1):
            os.rename(f"{self.log}.{i}", f"{self.log}.{i + 1}")

    def run(self):
        f = open(self.log, "ab", buffering=0)
        t0 = time.monotonic()
        pending = list(self.rotations)
        while (now := time.monotonic() - t0) < self.duration_s:
            if pending and now >= pending[0][0]:
                kind = pending.pop(0)[1]
                self._shift()
                if kind == "rename":
                    os.rename(self.log, f"{self.log}.1")
                    f.close()
                    f = open(self.log, "ab", buffering=0)
                else:
                    shutil.copyfile(self.log, f"{self.log}.1")
                    os.truncate(self.log, 0)
                self.rotated.append(kind)
            due = int(now * self.rate)
            while self.written < due:
                data = line(self.written)
                if self.written % 37 == 0:
                    f.write(data[:50])
                    time.sleep(0.03)
                    f.write(data[50:])
                else:
                    f.write(data)
                self.written += 1
            time.sleep(0.01)
        f.close()


class Reader(threading.Thread):
    """Runs `specwatch sql` every 100 ms (each a new process) and records failures and counts."""

    def __init__(self, db: str):
        super().__init__(daemon=True)
        self.db = db
        self.stop = threading.Event()
        self.counts: list[int] = []
        self.errors: list[str] = []

    def run(self):
        while not self.stop.is_set():
            p = subprocess.run(cli("sql", "SELECT count(*) AS n FROM decode_windows", "--db",
                                   self.db, "--format", "json"),
                               capture_output=True, text=True, env=ENV, timeout=60)
            if p.returncode != 0 or p.stderr.strip():
                self.errors.append(f"rc={p.returncode}: {p.stderr.strip()[-500:]}")
            else:
                self.counts.append(json.loads(p.stdout)[0]["n"])
            self.stop.wait(0.1)


class Tail:
    def __init__(self, db: str, log: Path, errlog: Path):
        self.db, self.log, self.errlog = db, log, errlog
        self.proc = None
        self.kills = 0

    def start(self):
        err = open(self.errlog, "ab")
        self.proc = subprocess.Popen(cli("tail", str(self.log), "--db", self.db, "--run", RUN,
                                         "--poll-interval", "0.25"),
                                     stdout=subprocess.DEVNULL, stderr=err, env=ENV)
        err.close()

    def kill(self):
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.kills += 1

    def terminate(self) -> int:
        os.kill(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(timeout=30)


def count(db: str) -> int:
    with store.reader(db) as con:
        return con.execute("SELECT count(*) FROM decode_windows").fetchone()[0]


def stress(tmp_path: Path, duration_s: float, rotations, kills: list[tuple[float, float]]):
    """Run the scenario; `kills` = [(at_s, down_s)]: SIGKILL tail at `at_s`, restart after `down_s`."""
    logs = tmp_path / "logs"
    logs.mkdir()
    log, db, errlog = logs / "server.log", str(tmp_path / "t.duckdb"), tmp_path / "tail.stderr"
    tl = Tail(db, log, errlog)
    tl.start()
    deadline = time.monotonic() + 30
    while True:  # the reader starts once tail has created the database
        try:
            count(db)
            break
        except store.StoreError:
            assert time.monotonic() < deadline, errlog.read_text()
            time.sleep(0.05)
    reader = Reader(db)
    writer = Writer(log, duration_s, rotations)
    reader.start()
    writer.start()
    t0 = time.monotonic()
    try:
        for at_s, down_s in sorted(kills):
            time.sleep(max(0.0, t0 + at_s - time.monotonic()))
            tl.kill()
            time.sleep(down_s)
            tl.start()
        writer.join()
        deadline = time.monotonic() + 30
        while count(db) < writer.written and time.monotonic() < deadline:
            time.sleep(0.1)
        rc = tl.terminate()
    finally:
        reader.stop.set()
        if tl.proc.poll() is None:
            tl.proc.kill()
        reader.join(timeout=60)
    stderr = errlog.read_text()
    assert rc == 0, stderr
    assert "Traceback" not in stderr, stderr
    assert tl.kills == len(kills)
    assert sorted(writer.rotated) == sorted(k for _, k in rotations)

    n = writer.written
    with store.reader(db) as con:
        total, distinct, lo, hi, bad = con.execute(
            "SELECT count(*), count(DISTINCT kv_tokens), min(kv_tokens), max(kv_tokens), "
            "count(*) FILTER (WHERE forward_iter IS DISTINCT FROM kv_tokens "
            "  OR running_req IS DISTINCT FROM kv_tokens % 97 OR accept_len IS DISTINCT FROM 3.12)"
            " FROM decode_windows").fetchone()
        scoped = con.execute("SELECT count(*) FROM decode_windows_scoped WHERE run_id = ?",
                             [RUN]).fetchone()[0]
        rejected = con.execute("SELECT count(*) FROM rejected_lines").fetchone()[0]
    assert (total, distinct, lo, hi) == (n, n, 0, n - 1), stderr
    assert bad == 0 and rejected == 0
    assert scoped == n

    assert reader.errors == [], reader.errors[:3]
    # It really polled throughout (each poll is a new process: ~0.6 s here, more when loaded).
    assert len(reader.counts) >= duration_s / 4
    assert reader.counts == sorted(reader.counts)  # a consistent answer never goes backwards
    return n, reader


@pytest.mark.slow  # ~10 s on 2 cores; .ci/run runs the slow tier
def test_tail_process_rotations_and_sigkill(tmp_path):
    """Short version for the default suite: one SIGKILL during which a rename rotation happens
    (drained from `server.log.1` on restart), one copy-truncate while tail runs."""
    n, reader = stress(tmp_path, duration_s=7.0, rotations=[(2.6, "rename"), (5.0, "copytruncate")],
                       kills=[(2.2, 0.8)])
    assert n >= 1300


@pytest.mark.slow
def test_tail_process_stress(tmp_path):
    """~25 s at 200 lines/s, rotations of both kinds every ~3 s, 4 SIGKILLs at random moments."""
    seed = int(os.environ.get("SPECWATCH_STRESS_SEED", random.randrange(1 << 30)))
    rnd = random.Random(seed)
    print(f"SPECWATCH_STRESS_SEED={seed}")
    rotations = [(1.5 + 3 * i + rnd.random(), ("rename", "copytruncate")[i % 2]) for i in range(8)]
    kills = []
    t = 1.0
    for _ in range(4):
        t += rnd.uniform(2.0, 5.0)
        down = rnd.uniform(0.0, 1.0)
        kills.append((t, down))
        t += down
    n, reader = stress(tmp_path, duration_s=25.0, rotations=rotations, kills=kills)
    assert n >= 4900


@pytest.mark.slow
def test_tail_process_rapid_sigkills(tmp_path):
    """~15 s with a SIGKILL every 0.3-1.2 s (so many land inside a commit or a startup) and
    rotations of both kinds."""
    seed = int(os.environ.get("SPECWATCH_STRESS_SEED", random.randrange(1 << 30)))
    rnd = random.Random(seed)
    print(f"SPECWATCH_STRESS_SEED={seed}")
    rotations = [(1.0 + 2.5 * i + rnd.random(), ("copytruncate", "rename")[i % 2]) for i in range(5)]
    kills, t = [], 0.5
    while t < 14.0:
        t += rnd.uniform(0.3, 1.2)
        down = rnd.uniform(0.0, 0.3)
        kills.append((t, down))
        t += down
    n, reader = stress(tmp_path, duration_s=15.0, rotations=rotations, kills=kills)
    assert n >= 2900
