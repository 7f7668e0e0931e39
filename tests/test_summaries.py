"""Per-run partial sums (specwatch/db/summaries.py) equal the from-scratch views after every way
windows reach the store: one-shot ingest, a live `specwatch tail` process, a tail that stops and
resumes (small chunks: many folds, an idle gap straddling a chunk boundary), re-ingest of the same
files, and a sweep writer's byte ranges (re-scoped runs). Real DuckDB files, real log files, real
processes. The expected values come from a from-scratch SQL over `decode_windows_scoped` written
here with the documented formula (views.py run_metrics), not from the code under test.
"""
from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from specwatch.logs import ingest
from specwatch.db import store, summaries

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_logs"

ARGS = ("[{ts}] server_args=ServerArgs(model_path='/m', tp_size=1, dp_size=2, "
        "speculative_algorithm='EAGLE3', speculative_num_steps=3, speculative_eagle_topk=1, "
        "speculative_num_draft_tokens=4, decode_log_interval=40)\n")
LINE = ("[{ts} DP{dp} TP0] Decode batch, #running-req: {r}, #token: 100, token usage: 0.01, "
        "accept len: {al:.2f}, accept rate: 0.50, cuda graph: True, gen throughput (token/s): "
        "{t:.2f}, #queue-req: 0\n")

# The documented formula, from scratch over every scoped window (views.py, run_metrics).
SCRATCH = """
WITH kept AS (SELECT * FROM decode_windows_scoped WHERE NOT after_idle OR rank_windows = 1),
per_rank AS (
  SELECT run_id, config_offset, dp_rank, count(*) AS windows,
    sum(accept_len * running_req) AS al_num,
    sum(CASE WHEN accept_len IS NOT NULL THEN running_req END) AS al_den,
    avg(gen_throughput_tok_s) AS g
  FROM kept GROUP BY ALL)
SELECT run_id, config_offset, sum(windows), sum(al_num) / nullif(sum(al_den), 0), sum(g), count(*)
FROM per_rank GROUP BY ALL ORDER BY ALL
"""
KEPT = """SELECT run_id, config_offset, windows, accept_len, gen_throughput_tok_s, dp_ranks
FROM run_metrics WHERE config_source_id IS NOT NULL ORDER BY ALL"""


def log_text(start: dt.datetime, n: int, gap_at: int | None = None, seed: int = 0) -> str:
    """A server_args line, then n decode windows alternating DP0/DP1, 1 s apart, with a 90 s
    pause before window `gap_at` (an idle gap: that window is after idle)."""
    out, t = [ARGS.format(ts=start.strftime("%Y-%m-%d %H:%M:%S"))], start
    for i in range(n):
        t += dt.timedelta(seconds=90 if i == gap_at else 1)
        out.append(LINE.format(ts=t.strftime("%Y-%m-%d %H:%M:%S"), dp=i % 2, r=4 + (i + seed) % 5,
                               al=1.5 + ((i * 7 + seed) % 13) / 10, t=800 + (i * 31) % 97))
    return "".join(out)


def assert_agree(db: Path) -> int:
    """The kept sums equal a from-scratch sum, and run_metrics equals the from-scratch formula.
    Returns the number of runs compared."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert summaries.differences(con) == []
        got, want = con.execute(KEPT).fetchall(), con.execute(SCRATCH).fetchall()
    finally:
        con.close()
    assert len(got) == len(want) and want
    for g, w in zip(got, want):
        assert g[:3] == w[:3] and g[5] == w[5]
        for a, b in ((g[3], w[3]), (g[4], w[4])):
            assert (a is None and b is None) or a == pytest.approx(b, rel=1e-12)
    return len(got)


def test_ingest_of_every_sample_log_and_reingest(tmp_path):
    db = tmp_path / "s.duckdb"
    logs = sorted(str(p) for p in SAMPLES.glob("*.log"))
    ingest.ingest_paths(db, logs)
    n = assert_agree(db)
    assert n >= 8
    before = duckdb.connect(str(db), read_only=True).execute(KEPT).fetchall()
    ingest.ingest_paths(db, logs)             # re-ingest: nothing new, nothing doubled
    assert assert_agree(db) == n
    assert duckdb.connect(str(db), read_only=True).execute(KEPT).fetchall() == before


@pytest.mark.slow  # ~10 s on 2 cores; .ci/run runs the slow tier
def test_tail_in_small_chunks_resumed_with_an_idle_gap_on_a_chunk_boundary(tmp_path):
    db, log = tmp_path / "s.duckdb", tmp_path / "live.log"
    text = log_text(dt.datetime(2026, 5, 1, 10, 0, 0), 400, gap_at=150)
    lines = text.splitlines(keepends=True)
    cut = sum(len(x) for x in lines[:151])    # the file ends right before the window after the gap
    log.write_text(text[:cut])
    ingest.ensure_run(db, "live")
    ing = ingest.FileIngestor(db, log, "live", chunk_bytes=700)   # a few windows per chunk
    ing.poll()
    ing.close()
    assert_agree(db)
    # resume: a new ingestor (a restarted tail) continues where the checkpoint is
    with open(log, "a") as f:
        f.write(text[cut:])
    ing = ingest.FileIngestor(db, log, "live", chunk_bytes=1300)
    ing.poll()
    ing.close()
    assert_agree(db)
    con = duckdb.connect(str(db), read_only=True)
    # not kept: each rank's first window, and each rank's first window after the 90 s gap
    assert con.execute("SELECT windows FROM run_metrics WHERE run_id = 'live'").fetchone()[0] == 396
    con.close()


def test_live_specwatch_tail_process(tmp_path):
    db, log = tmp_path / "s.duckdb", tmp_path / "server.log"
    text = log_text(dt.datetime(2026, 5, 2, 9, 0, 0), 120, gap_at=70, seed=3)
    lines = text.splitlines(keepends=True)
    log.write_text("".join(lines[:30]))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "specwatch.cli", "tail", str(log), "--db", str(db),
                             "--quiet"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        for k in range(30, len(lines), 9):    # the server writes in bursts while tail follows
            with open(log, "a") as f:
                f.write("".join(lines[k:k + 9]))
            time.sleep(0.3)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                con = duckdb.connect(str(db), read_only=True)
                n = con.execute("SELECT count(*) FROM decode_windows").fetchone()[0]
                con.close()
            except duckdb.Error:
                n = -1
            if n == 120:
                break
            time.sleep(0.5)
        assert n == 120
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert_agree(db)


def test_sweep_byte_ranges_rescoped_and_appended(tmp_path):
    """A sweep's writer scopes byte ranges of one server log to runs, re-scopes a run on retry
    (delete + attach), and windows keep arriving for a run whose range is open."""
    db, log = tmp_path / "s.duckdb", tmp_path / "server.log"
    text = log_text(dt.datetime(2026, 5, 3, 8, 0, 0), 300, gap_at=200, seed=5)
    lines = text.splitlines(keepends=True)
    log.write_text("".join(lines[:251]))
    ingest.ingest_paths(db, [str(log)], run="whole")
    offs = [0]
    for x in lines:
        offs.append(offs[-1] + len(x))
    with store.writer(db) as con:
        store.upsert_run(con, {"run_id": "a", "run_name": "a", "origin": "sweep"})
        store.upsert_run(con, {"run_id": "b", "run_name": "b", "origin": "sweep"})
        src = con.execute("SELECT source_id FROM sources").fetchone()[0]
        store.attach_source(con, "a", src, offs[1], offs[101])
        store.attach_source(con, "b", src, offs[101], None)
    assert_agree(db)
    with store.writer(db) as con:   # a retry re-scopes run a to another range
        con.execute("DELETE FROM run_sources WHERE run_id = 'a'")
        store.attach_source(con, "a", src, offs[41], offs[181])
    assert_agree(db)
    with open(log, "a") as f:
        f.write("".join(lines[251:]))
    ingest.ingest_paths(db, [str(log)], run="whole")   # appended: runs whole and b grow
    assert assert_agree(db) == 3


def test_schema_upgrade_rebuilds_the_sums(tmp_path):
    """A store filled before the sums existed (here: the table emptied) gets them rebuilt."""
    db = tmp_path / "s.duckdb"
    ingest.ingest_paths(db, [str(SAMPLES / "sglang-0.5.9-dp2-tp8-eagle3.log")])
    with store.writer(db) as con:
        want = con.execute(KEPT).fetchall()
        con.execute("DELETE FROM run_window_sums")
        con.execute("UPDATE specwatch_meta SET schema_version = schema_version - 1")
    with store.writer(db) as con:
        store.ensure_schema(con)
        assert con.execute(KEPT).fetchall() == want and want
