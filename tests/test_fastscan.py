"""The C bulk-ingest path stores exactly what the Python parser (the definition) stores."""
from __future__ import annotations

import json
import random
import sys

import pytest

from conftest import ROOT, SAMPLES, assert_rows_close
from specwatch.logs import fastscan, formats, ingest
from specwatch.db import store

pytestmark = pytest.mark.skipif(not fastscan.available(), reason="C accelerator not built")

sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_ingest import generate  # noqa: E402

TABLES = ["decode_windows", "prefill_windows", "server_configs", "events", "rejected_lines",
          "vllm_spec_windows", "vllm_throughput_windows"]


def dump(db):
    out = {}
    with store.reader(db) as con:
        for t in TABLES:
            cur = con.execute(f"SELECT * EXCLUDE (source_id) FROM {t} ORDER BY source_id, byte_offset")
            cols = [d[0] for d in cur.description]
            rows = []
            for r in cur.fetchall():
                d = dict(zip(cols, r))
                for k in ("fields", "args"):
                    if d.get(k) is not None:
                        d[k] = json.loads(d[k])
                rows.append(d)
            out[t] = rows
    return out


def sums(db):
    with store.reader(db) as con:
        return con.execute("SELECT * FROM run_window_sums ORDER BY ALL").fetchall()


def both(tmp_path, files, monkeypatch):
    """Both paths' rows; the slow one is also folded by SQL (the definition of the sums), and
    the run sums must agree (floats to 1e-12)."""
    fast, slow = tmp_path / "fast.duckdb", tmp_path / "slow.duckdb"
    ingest.ingest_paths(fast, [str(f) for f in files], run="r")
    monkeypatch.setenv("SPECWATCH_NO_FASTSCAN", "1")
    monkeypatch.setenv("SPECWATCH_SQL_FOLD", "1")
    assert not fastscan.available()
    ingest.ingest_paths(slow, [str(f) for f in files], run="r")
    monkeypatch.delenv("SPECWATCH_NO_FASTSCAN")
    monkeypatch.delenv("SPECWATCH_SQL_FOLD")
    a, b = sums(fast), sums(slow)
    assert a and len(a) == len(b)
    assert_rows_close(a, b)
    return dump(fast), dump(slow)


def test_sample_logs_identical(tmp_path, monkeypatch):
    a, b = both(tmp_path, sorted(SAMPLES.glob("*.log")), monkeypatch)
    assert sum(len(v) for v in a.values()) > 200
    for t in TABLES:
        assert a[t] == b[t], t


def test_generated_and_declared_lines_identical(tmp_path, monkeypatch):
    log = tmp_path / "gen.log"
    generate(log, 3000, seed=3)
    rng = random.Random(0)
    variants = [s.text for f in formats.load().lines.values() for s in f.samples]
    variants += [t for t, _ in formats.load().malformed] + list(formats.load().noise)
    # edge shapes the fast path must hand back or take identically
    variants += [
        "[2026-01-01 00:00:00] Decode batch, #running-req: 007, gen throughput (token/s): 1.00, #queue-req: 0",
        "[2026-01-01 00:00:00] Decode batch, #token: 5, #running-req: 3, gen throughput (token/s): 1.0, #queue-req: 0",
        "[2026-01-01 00:00:00 TP0 TP1] Decode batch, #running-req: 3, gen throughput (token/s): 1.0, #queue-req: 0",
        "[2026-01-01 00:00:00] Decode batch, #running-req: 3, gen throughput (token/s): 1e3, #queue-req: 0",
        "[2026-01-01 00:00:00] Decode batch, #running-req: 3, gen throughput (token/s): 1.5, #queue-req: 0, new: 99.10%, x: -3, y: True",
        "[2026-01-01 00:00:00.5] Prefill batch [7], #new-seq: 1, #new-token: 2, #cached-token: 0, cache hit rate: 12.50%, #queue-req: 0",
        "[2026-01-01 00:00:00] Decode batch, #running-req: 3, gen throughput (token/s): 1.5, #queue-req: 0, Fwd  Occupancy!: 3",
    ]
    with open(log, "a") as f:
        for v in rng.sample(variants, len(variants)):
            f.write(v.rstrip("\r") + "\n")
    a, b = both(tmp_path, [log], monkeypatch)
    assert len(a["decode_windows"]) > 2000
    for t in TABLES:
        assert a[t] == b[t], t


def test_small_chunks_store_what_one_chunk_stores(tmp_path, monkeypatch):
    # Chunk boundaries fall everywhere, also inside hard-wrapped records (the reassembler holds
    # a record at a chunk's end and the next chunk starts at it): the rows are the same.
    log = tmp_path / "gen.log"
    generate(log, 3000, seed=5)
    with open(log, "ab") as f:
        for s in sorted(SAMPLES.glob("*.log")):
            f.write(s.read_bytes())
    whole, small = tmp_path / "whole.duckdb", tmp_path / "small.duckdb"
    ingest.ingest_paths(whole, [str(log)], run="r")
    ing = ingest.FileIngestor(small, log, "r", chunk_bytes=32768, overlap=True)
    while ing.poll().lines:
        pass
    ing.close()
    a, b = dump(whole), dump(small)
    assert len(a["decode_windows"]) > 2000
    for t in TABLES:
        assert a[t] == b[t], t
