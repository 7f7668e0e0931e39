"""The C bulk-ingest path stores exactly what the Python parser (the definition) stores."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

from conftest import ROOT, SAMPLES, assert_rows_close, drain
from specwatch.logs import bulk, fastscan, formats, ingest
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
    drain(small, log, chunk_bytes=32768, overlap=True)
    a, b = dump(whole), dump(small)
    assert len(a["decode_windows"]) > 2000
    for t in TABLES:
        assert a[t] == b[t], t


@pytest.mark.parametrize("stream_bytes", [9000, 50_000])
def test_streamed_chunks_stay_within_stream_bytes_and_store_what_one_chunk_stores(
        tmp_path, monkeypatch, stream_bytes):
    # A one-shot ingest streams chunks of at most stream_bytes (the first half that) however
    # large its chunk_bytes, and what it stores is what one chunk of the whole file stores.
    # (No value here makes the store refuse a line: that ends the stream, `_drain`.)
    log = tmp_path / "gen.log"
    generate(log, 12000, seed=stream_bytes)
    whole, streamed = tmp_path / "whole.duckdb", tmp_path / "streamed.duckdb"
    drain(whole, log, chunk_bytes=1 << 30, overlap=False)
    sizes = []
    real = ingest.FileIngestor._read

    def read(self, *a, **kw):
        chunk = real(self, *a, **kw)
        if chunk is not None:
            sizes.append(chunk.end - chunk.offset)
        return chunk

    monkeypatch.setattr(ingest.FileIngestor, "_read", read)
    ing = ingest.FileIngestor(streamed, log, "r", chunk_bytes=1 << 20, overlap=True,
                              stream_bytes=stream_bytes)
    assert ing.stream_bytes == stream_bytes
    try:
        ing.prefetch()
        res = ing.poll()
    finally:
        ing.close()
    assert res.bytes_read == log.stat().st_size
    longest = max(len(line) for line in log.read_bytes().split(b"\n")) + 1
    assert len(sizes) >= log.stat().st_size // stream_bytes
    assert sizes[0] <= stream_bytes // 2 + longest        # a chunk ends at its last whole line
    assert max(sizes) <= stream_bytes + longest
    a, b = dump(whole), dump(streamed)
    assert len(a["decode_windows"]) > 4000
    for t in TABLES:
        assert a[t] == b[t], t


def test_a_streamed_chunk_feeds_every_scan_thread_a_piece(monkeypatch):
    for threads, want in ((1, 24 << 20), (2, 24 << 20), (3, 24 << 20), (4, 32 << 20),
                          (8, 64 << 20), (16, 128 << 20)):
        monkeypatch.setenv("SPECWATCH_SCAN_THREADS", str(threads))
        assert bulk.stream_chunk_bytes() == want, threads
    # never more than the chunks of a statement of their own
    assert ingest.FileIngestor("x.duckdb", "x.log", chunk_bytes=4096,
                               overlap=True).stream_bytes == 4096


def _mixed_log(path, seed: int):
    """Generated lines, every sample log, captured (prefixed) cases, lookalikes, declared samples,
    bad UTF-8 and binary lines, and a compose-prefixed stretch."""
    import capture_cases as cc
    generate(path, 4000, seed=seed)
    rng = random.Random(seed)
    with open(path, "ab") as f:
        for s in sorted(SAMPLES.glob("*.log")):
            f.write(s.read_bytes())
        lines = [c.line for c in cc.cases(seed=seed)] + cc.lookalikes(seed=seed, n=100)
        lines += [v.rstrip("\r") for fmt in formats.load().lines.values()
                  for v in (s.text for s in fmt.samples)]
        rng.shuffle(lines)
        f.write(("\n".join(lines) + "\n").encode())
        f.write(b"[2026-01-01 00:00:00] Decode batch, #running-req: 1, bad \xff utf8\n\x00\x01\n")
        more = path.with_suffix(".more")
        generate(more, 1500, seed=seed + 1)
        f.write(b"".join(b"sglang-1  | " + ln for ln in more.read_bytes().splitlines(True)))


def _count_piece_scans(monkeypatch) -> list:
    calls = []
    real = fastscan._scan_pieces
    monkeypatch.setattr(fastscan, "_scan_pieces", lambda *a: calls.append(a[-1]) or real(*a))
    return calls


@pytest.mark.parametrize("threads", [2, 5])
def test_a_chunk_scanned_in_pieces_on_threads_stores_what_one_scan_stores(tmp_path, monkeypatch,
                                                                         threads):
    # The whole file is one chunk cut into `threads` pieces: the rows, the rejected lines and the
    # warnings (with their line numbers) are those of one scan.
    log = tmp_path / "mixed.log"
    _mixed_log(log, threads)
    whole, pieces = tmp_path / "whole.duckdb", tmp_path / "pieces.duckdb"
    monkeypatch.setenv("SPECWATCH_SCAN_THREADS", "1")
    one = ingest.ingest_paths(whole, [str(log)], run="r")
    monkeypatch.setenv("SPECWATCH_SCAN_THREADS", str(threads))
    monkeypatch.setattr(fastscan, "PIECE_BYTES", 4096)
    calls = _count_piece_scans(monkeypatch)
    many = ingest.ingest_paths(pieces, [str(log)], run="r")
    assert calls and max(calls) == threads          # the pieces path ran, on that many threads
    assert [r.warnings for r in many] == [r.warnings for r in one]
    assert any("invalid UTF-8" in w for r in one for w in r.warnings)
    assert [(r.lines, r.rows, r.rejected) for r in many] == [(r.lines, r.rows, r.rejected)
                                                              for r in one]
    a, b = dump(whole), dump(pieces)
    assert len(a["decode_windows"]) > 4000 and a["rejected_lines"]
    for t in TABLES:
        assert a[t] == b[t], t
    assert sums(whole) == sums(pieces)


def test_piece_ends_anywhere_store_what_one_scan_stores(tmp_path, monkeypatch):
    # 40 KB chunks of 5 pieces each: a piece ends every ~8 KB, inside hard-wrapped records,
    # between a record and its continuation, in captured lines, in fuzzed and binary lines.
    log = tmp_path / "mixed.log"
    _mixed_log(log, 7)
    whole, pieces = tmp_path / "whole.duckdb", tmp_path / "pieces.duckdb"
    monkeypatch.setenv("SPECWATCH_SCAN_THREADS", "1")
    ingest.ingest_paths(whole, [str(log)], run="r")
    monkeypatch.setenv("SPECWATCH_SCAN_THREADS", "5")
    monkeypatch.setattr(fastscan, "PIECE_BYTES", 4096)
    calls = _count_piece_scans(monkeypatch)
    drain(pieces, log, chunk_bytes=40960, overlap=True)
    assert len(calls) > 20 and max(calls) == 5
    a, b = dump(whole), dump(pieces)
    assert len(a["decode_windows"]) > 4000
    for t in TABLES:
        assert a[t] == b[t], t


def test_buffers_of_a_scan_that_failed_are_written_again():
    # A scan that raises built no column from the buffers it took: they are free for the next
    # chunk (they stayed taken for good, and a bulk ingest's reuse list filled with them).
    line = b"[2026-01-01 00:00:00] Decode batch, #running-req: 3, #token: 5, token usage: 0.10, " \
           b"accept len: 2.50, gen throughput (token/s): 1.0, #queue-req: 0\n"
    bufs = fastscan.Buffers(1 << 16)
    assert not bufs.dec.free() and not bufs.pre.free()        # taken for a scan
    with pytest.raises(TypeError):
        fastscan.scan(line.decode(), 0, 0, buffers=bufs)      # str is not a buffer
    assert bufs.dec.free() and bufs.pre.free()
    again = fastscan.Buffers(1 << 16, dec=bufs.dec, pre=bufs.pre)
    assert again.dec is bufs.dec and again.pre is bufs.pre
    res = fastscan.scan(line * 3, 0, 0, buffers=again)
    # (the last line of a buffer goes to Python, which reads on past it)
    assert res.decode["accept_len"].to_pylist() == [2.5] * 2 and len(res.slow_lines) == 1
    assert not bufs.dec.free()                                # its columns are alive
    del res
    assert bufs.dec.free()


def test_scan_threads_setting_is_checked(monkeypatch):
    monkeypatch.setenv("SPECWATCH_SCAN_THREADS", "0")
    with pytest.raises(ValueError, match="SPECWATCH_SCAN_THREADS='0'"):
        fastscan.scan_threads()
    monkeypatch.setenv("SPECWATCH_SCAN_THREADS", "3")
    assert fastscan.scan_threads() == 3
    monkeypatch.delenv("SPECWATCH_SCAN_THREADS")
    # default: half the CPUs the process may run on, 1 to 8 (this host's own count in a child
    # whose affinity is one CPU, then hosts this test cannot run on)
    one_cpu = subprocess.run(
        [sys.executable, "-c", "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))});"
         "from specwatch.logs import fastscan; print(fastscan.usable_cpus(), fastscan.scan_threads())"],
        capture_output=True, text=True, check=True, env={**os.environ, "SPECWATCH_SCAN_THREADS": ""})
    assert one_cpu.stdout.split() == ["1", "1"]
    for cpus, threads in ((2, 1), (3, 1), (4, 2), (5, 2), (16, 8), (64, 8)):
        monkeypatch.setattr(fastscan, "usable_cpus", lambda cpus=cpus: cpus)
        assert fastscan.scan_threads() == threads, cpus


@pytest.mark.parametrize("glued", [
    "[2026-01-02 10:00:01 TP0] Cache flushed: 3",
    "[2026-01-02 10:00:01] Scheduler hit: 1",
    "INFO 01-02 10:00:01 [loggers.py:123] Engine 000: 1",
    "[pod/sglang-0/server] hits: 7",
    "x]y: 2",
])
def test_a_key_with_a_bracket_is_another_record_for_python(glued):
    """A decode line with another record glued after its last field: the scanner never takes it
    (its key would land in `fields`); Python cuts it off or rejects it (logs/glued.py)."""
    head = ("[2026-01-02 10:00:00 TP0] Decode batch, #running-req: 3, #token: 100, token usage: "
            "0.01, accept len: 2.50, gen throughput (token/s): 120.5, #queue-req: 0, ")
    plain = head.removesuffix(", ") + "\n"
    data = (head + glued + "\n" + plain + plain).encode()
    sr = fastscan.scan(data, 0, 0)
    assert sr.decode["line_no"].to_pylist() == [2]          # the plain line between them
    assert sr.slow_lines[:, 1].tolist() == [1, 3]          # the glued line and the last line
    # a key without one is still the scanner's own (an extra field, kept in `fields`)
    sr = fastscan.scan((head + "cache hit: 3\n" + plain + plain).encode(), 0, 0)
    assert sr.decode["line_no"].to_pylist() == [1, 2]


@pytest.mark.skipif(not fastscan.available(), reason="C accelerator not built")
def test_scan_buffers_are_written_again_only_once_no_row_of_theirs_is_alive(tmp_path):
    """A streamed ingest hands a chunk's rows (views of the scanner's buffers) to DuckDB, which
    lets them go whenever it has stored them: the pool gives a chunk's decode or prefill buffers
    to the next scan only once every Arrow array built from them is gone."""
    import gc
    from specwatch.logs import bulk
    log = tmp_path / "gen.log"
    generate(log, 3000, seed=3)
    data = bytearray(log.read_bytes())
    pool = bulk.Buffers(len(data), reuse=True)
    first = pool.scan_buffers()
    r1 = fastscan.scan(data, 0, 0, first)
    want = r1.decode["accept_len"].to_pylist()
    assert len(want) > 1000 and r1.prefill["new_seq"].to_pylist()
    keep_dec = r1.decode["accept_len"]          # one decode column alive, the rest dropped
    del r1
    gc.collect()
    second = pool.scan_buffers()
    assert second.dec is not first.dec and second.pre is first.pre
    other = bytearray(b"".join(x.replace(b"accept len: ", b"accept len: 1")
                               for x in data.splitlines(keepends=True)))
    fastscan.scan(other, 0, 0, second)
    assert keep_dec.to_pylist() == want        # not overwritten
    del keep_dec
    gc.collect()
    third = pool.scan_buffers()
    assert third.dec is first.dec
    # taken for a scan: not handed out again before its columns exist and are gone
    assert pool.scan_buffers().dec is not first.dec


@pytest.mark.parametrize("with_c", [True, False])
def test_read_buffers_are_sized_reused_and_never_resized_while_exported(with_c, monkeypatch):
    """bulk.Buffers hands out read buffers of exactly the size asked, without writing their bytes
    where the C module is built (its new_buffer/resize_buffer), reuses given-back ones, and never
    resizes one still exported (a memoryview of a chunk's data alive elsewhere)."""
    from specwatch.logs import bulk
    if not with_c:
        monkeypatch.setattr(fastscan, "_fastscan", None)
    elif not fastscan.available():
        pytest.skip("C accelerator not built")
    bufs = bulk.Buffers(1 << 20, reuse=True)
    a = bufs.read_buffer(1000)
    assert type(a) is bytearray and len(a) == 1000
    a[:] = b"x" * 1000
    bufs.give_back(a)
    b = bufs.read_buffer(5000)              # grown in place: the same object
    assert b is a and len(b) == 5000 and bytes(b[:1000]) == b"x" * 1000
    bufs.give_back(b)
    c = bufs.read_buffer(10)
    assert c is a and bytes(c) == b"x" * 10
    view = memoryview(c)                    # exported: cannot be resized, so not handed out
    bufs.give_back(c)
    d = bufs.read_buffer(20)
    assert d is not c and len(d) == 20 and len(c) == 10
    view.release()
    with pytest.raises(BufferError):
        with memoryview(d):
            fastscan.resize_buffer(d, 30)
    with pytest.raises((ValueError, TypeError)):
        fastscan.new_buffer(-1)
