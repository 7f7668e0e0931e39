"""The per-chunk fold of run_window_sums computed with numpy from the rows just inserted
(`summaries.fold_windows`, what ingest uses) equals the definition, the SQL fold over the stored
windows (`summaries.fold_appended`, SPECWATCH_SQL_FOLD=1), chunk after chunk; and ingest's
row-group-aligned chunks (`rows.parse_chunk(align=)`) store exactly what unaligned chunks store.

Real DuckDB files, real log files. Two stores receive the same rows through the same
`store.append_with_checkpoint` calls, one folding each way; after every chunk their
run_window_sums are compared row by row (counts, integer sums, offsets and timestamps exactly;
float sums to 1e-12 relative), and each must equal a from-scratch sum (`summaries.differences`).
The random windows cover what the fold's semantics turn on: NULL ts / accept_len / running_req /
ranks, idle gaps (also across a chunk boundary and before 1970), several server configs in one
chunk (and non-server_args config kinds, which do not start a segment), runs holding a part of a
chunk, one run holding a window twice (overlapping ranges), runs re-scoped between chunks, and a
chunk given partly as Arrow and partly as column lists (not in byte order).
"""
from __future__ import annotations

import datetime as dt
import random
import sys

import duckdb
import pytest

from conftest import ROOT, SAMPLES, assert_rows_close, drain
from specwatch.logs import fastscan, ingest
from specwatch.db import schema, store, stream, summaries

sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_ingest import generate  # noqa: E402

KEY = summaries.KEY


def sums(db) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(f"SELECT * FROM run_window_sums ORDER BY {', '.join(KEY)}").fetchall()
    finally:
        con.close()


def assert_same_sums(a: list[tuple], b: list[tuple]) -> None:
    assert_rows_close(a, b, names=schema.column_names("run_window_sums"))


def assert_fresh(db) -> None:
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert summaries.differences(con, rel_tol=1e-12) == []
    finally:
        con.close()


# ---------------------------------------------------------------- random windows, chunk by chunk

def _ts(rng: random.Random, t: list) -> dt.datetime | None:
    """Mostly 1-5 s steps, now and then an idle gap, a step back, or NULL."""
    r = rng.random()
    if r < 0.06:
        return None
    if r < 0.12:
        t[0] += dt.timedelta(seconds=rng.choice([59, 60, 61, 60.5, 61.2, 90, 3600]))
    elif r < 0.15:
        t[0] -= dt.timedelta(seconds=rng.randint(1, 100))
    else:
        t[0] += dt.timedelta(microseconds=rng.randint(0, 5_000_000))
    return t[0]


def _chunk(rng: random.Random, start: int, n: int, t: list, source_id: str) -> tuple[dict, int]:
    """({table: rows}, end offset) for n decode windows from byte `start`, with server configs
    between some of them."""
    d = {c: [] for c in schema.column_names("decode_windows")}
    c = {c: [] for c in schema.column_names("server_configs")}
    off = start
    for i in range(n):
        off += rng.randint(1, 300)
        if rng.random() < 0.01:
            cfg = {"source_id": source_id, "byte_offset": off, "line_no": off,
                   "config_kind": rng.choice(["server_args", None, "vllm_args",
                                              "vllm_engine_config"])}
            for k, v in c.items():
                v.append(cfg.get(k))
            off += rng.randint(1, 50)
        row = {"source_id": source_id, "byte_offset": off, "line_no": off,
               "ts": _ts(rng, t),
               "dp_rank": rng.choice([0, 1, 1, 0, None, 7]),
               "pp_rank": rng.choice([None, None, 0, 1]),
               "running_req": rng.choice([None, 0, -3, 2 ** 31 - 1, *range(1, 65)]),
               "accept_len": rng.choice([None, 1.0, 2.5, 0.1, 3.3333333333333335, 1e-300,
                                         rng.uniform(1, 4)]),
               "accept_rate_printed": rng.choice([None, 0.5, rng.random()]),
               "gen_throughput_tok_s": rng.choice([None, 0.0, rng.uniform(0, 5000), 1e300]),
               "graph_enabled": rng.choice([None, True, False])}
        for k, v in d.items():
            v.append(row.get(k))
    end = off + rng.randint(1, 300)
    out = {"decode_windows": d}
    if c["byte_offset"]:
        out["server_configs"] = c
    return out, end


def _split(rng: random.Random, rows: dict) -> list:
    """The decode rows as an Arrow table and column lists (the fast and the Python path's
    shapes), in either order."""
    n = len(rows["byte_offset"])
    k = rng.randint(0, n)
    idx = list(range(n))
    rng.shuffle(idx)
    a = sorted(idx[:k])
    b = sorted(idx[k:])
    tbl = store.arrow_table("decode_windows", {c: [v[i] for i in a] for c, v in rows.items()})
    lists = {c: [v[i] for i in b] for c, v in rows.items()}
    return [tbl, lists] if rng.random() < 0.5 else [lists, tbl]


def _rescope(con, rng: random.Random, source_id: str, upto: int) -> None:
    runs = ["r2", "r3", "r4"]
    rid = rng.choice(runs)
    con.execute("BEGIN")
    con.execute("DELETE FROM run_sources WHERE run_id = ?", [rid])
    for _ in range(rng.choice([1, 1, 2])):   # two ranges: overlapping ones hold windows twice
        lo = rng.randint(0, max(1, upto))
        hi = rng.choice([None, lo + rng.randint(1, 200_000)])
        store.attach_source(con, rid, source_id, lo, hi)
    con.execute("COMMIT")


def _each_fold(dbs: dict, monkeypatch):
    """(mode, writer connection) for each of `dbs` ({"fast": db, "sql": db}), the "sql" one
    with SPECWATCH_SQL_FOLD=1 set while its connection is open."""
    for mode, db in dbs.items():
        if mode == "sql":
            monkeypatch.setenv("SPECWATCH_SQL_FOLD", "1")
        try:
            with store.writer(db) as con:
                yield mode, con
        finally:
            monkeypatch.delenv("SPECWATCH_SQL_FOLD", raising=False)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_numpy_fold_equals_sql_fold_chunk_by_chunk(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    dbs = {"fast": tmp_path / "fast.duckdb", "sql": tmp_path / "sql.duckdb"}
    src = schema.Source(source_id="s1", path="/x.log", device=1, inode=1, fingerprint="f",
                        fingerprint_len=1024, offset_bytes=0, lines_done=0, first_seen=None,
                        updated_at=None, tail_fingerprint="t")
    t = [dt.datetime(2026, 3, 1, 12) if seed != 2 else dt.datetime(1969, 12, 31, 0, 0)]
    offset = 0
    for db in dbs.values():
        with store.writer(db) as con:
            for rid in ("r1", "r2", "r3", "r4"):
                store.upsert_run(con, {"run_id": rid, "run_name": rid, "origin": "ingest"})
    for k in range(10):
        batches, end = _chunk(rng, offset, rng.choice([1, 2, 40, 400, 1500]), t, "s1")
        decode = _split(rng, batches["decode_windows"])
        if k and rng.random() < 0.4:
            for db in dbs.values():
                with store.writer(db) as con:
                    _rescope(con, random.Random(seed * 100 + k), "s1", offset)
        for mode, con in _each_fold(dbs, monkeypatch):
            store.append_with_checkpoint(
                con, src, offset, end, k + 1, {**batches, "decode_windows": decode},
                run_id="r1" if k == 0 else None)
        offset = end
        a, b = sums(dbs["fast"]), sums(dbs["sql"])
        assert a
        assert_same_sums(a, b)
    for db in dbs.values():
        assert_fresh(db)
    con = duckdb.connect(str(dbs["fast"]), read_only=True)
    # the random data reached the cases the fold distinguishes
    got = con.execute("""SELECT count(DISTINCT config_offset), count(*) FILTER (WHERE dp_rank IS NULL),
        count(*) FILTER (WHERE pp_rank IS NOT NULL), sum(windows_all) - sum(windows_k),
        count(DISTINCT run_id) FROM run_window_sums""").fetchone()
    con.close()
    assert got[0] >= 2 and got[1] >= 1 and got[2] >= 1 and got[3] > 10 and got[4] >= 2, got


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_streamed_pieces_fold_equals_sql_fold(tmp_path, monkeypatch, seed):
    """Several pieces per transaction (`stream.append_stream_with_checkpoint`, a one-shot
    ingest's path): each piece's numpy fold reads its predecessors and server configs from the
    pieces before it, none stored yet, and the deltas are merged as one. Equals the SQL fold over
    the stored windows at each transaction's end (the definition), transaction after transaction,
    with runs rescoped between them."""
    rng = random.Random(seed)
    dbs = {"fast": tmp_path / "fast.duckdb", "sql": tmp_path / "sql.duckdb"}
    srcs = {m: schema.Source(source_id="s1", path="/x.log", device=1, inode=1, fingerprint="f",
                             fingerprint_len=1024, offset_bytes=0, lines_done=0, first_seen=None,
                             updated_at=None, tail_fingerprint="t") for m in dbs}
    t = [dt.datetime(2026, 3, 1, 12) if seed != 2 else dt.datetime(1969, 12, 31, 0, 0)]
    offset, lines = 0, 0
    for db in dbs.values():
        with store.writer(db) as con:
            for rid in ("r1", "r2", "r3", "r4"):
                store.upsert_run(con, {"run_id": rid, "run_name": rid, "origin": "ingest"})
    for k in range(6):
        pieces, start = [], offset
        for _ in range(rng.choice([1, 2, 3, 5])):
            batches, end = _chunk(rng, offset, rng.choice([0, 1, 40, 400, 1500]), t, "s1")
            lines += 1
            pieces.append(stream.Piece({**batches, "decode_windows": _split(
                rng, batches["decode_windows"])}, end, lines))
            offset = end
        if k and rng.random() < 0.5:
            for db in dbs.values():
                with store.writer(db) as con:
                    _rescope(con, random.Random(seed * 100 + k), "s1", start)
        for mode, con in _each_fold(dbs, monkeypatch):
            n, last = stream.append_stream_with_checkpoint(
                con, srcs[mode], start, iter(pieces), run_id="r1" if k == 0 else None)
            assert last is pieces[-1]
            srcs[mode].offset_bytes = last.offset
        assert_same_sums(sums(dbs["fast"]), sums(dbs["sql"]))
    assert len(sums(dbs["fast"])) >= 4
    for db in dbs.values():
        assert_fresh(db)
        con = duckdb.connect(str(db), read_only=True)
        assert con.execute("SELECT offset_bytes, lines_done FROM sources").fetchall() == \
            [(offset, lines)]
        con.close()


def test_a_failing_piece_stores_nothing_of_its_transaction(tmp_path):
    """What the pieces' iterator raises (a read error mid-file) is raised as it is, and the
    transaction's earlier pieces, checkpoint and sums are rolled back."""
    db = tmp_path / "s.duckdb"
    src = schema.Source(source_id="s1", path="/x.log", device=1, inode=1, fingerprint="f",
                        fingerprint_len=1024, offset_bytes=0, lines_done=0, first_seen=None,
                        updated_at=None, tail_fingerprint="t")
    rng = random.Random(5)
    t = [dt.datetime(2026, 3, 1, 12)]
    first, end = _chunk(rng, 0, 300, t, "s1")
    with store.writer(db) as con:
        store.upsert_run(con, {"run_id": "r1", "run_name": "r1", "origin": "ingest"})
        store.append_with_checkpoint(con, src, 0, end, 1, first, run_id="r1")
    before = sums(db)

    def pieces():
        batches, e = _chunk(rng, end, 400, t, "s1")
        yield stream.Piece(batches, e, 2)
        raise OSError("the disk went away")

    with store.writer(db) as con:
        with pytest.raises(OSError, match="disk went away"):
            stream.append_stream_with_checkpoint(con, src, end, pieces())
    assert sums(db) == before
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT offset_bytes, lines_done FROM sources").fetchall() == [(end, 1)]
    assert con.execute("SELECT count(*) FROM decode_windows").fetchone()[0] == 300
    con.close()


# ------------------------------------------------------------------------- whole files, both folds

def _both(tmp_path, monkeypatch, files, **kw):
    fast, slow = tmp_path / "fast.duckdb", tmp_path / "sql.duckdb"
    for db, mode in ((fast, None), (slow, "1")):
        if mode:
            monkeypatch.setenv("SPECWATCH_SQL_FOLD", mode)
        if kw:
            ingest.ensure_run(db, "r")
            drain(db, files[0], **kw)
        else:
            ingest.ingest_paths(db, [str(f) for f in files])
        monkeypatch.delenv("SPECWATCH_SQL_FOLD", raising=False)
    return fast, slow


def test_sample_logs_both_folds(tmp_path, monkeypatch):
    fast, slow = _both(tmp_path, monkeypatch, sorted(SAMPLES.glob("*.log")))
    a = sums(fast)
    assert len(a) >= 8
    assert_same_sums(a, sums(slow))
    assert_fresh(fast)


def test_generated_log_in_small_chunks_both_folds(tmp_path, monkeypatch):
    """Many folds per file, chunks cut to whole 'row groups' of 64 windows, samples appended
    (several server configs, DP ranks, NULL fields)."""
    log = tmp_path / "gen.log"
    generate(log, 4000, seed=9)
    with open(log, "ab") as f:
        for s in sorted(SAMPLES.glob("*.log")):
            f.write(s.read_bytes())
    fast, slow = _both(tmp_path, monkeypatch, [log], chunk_bytes=40_000, overlap=True,
                       align_rows=64)
    a = sums(fast)
    assert_same_sums(a, sums(slow))
    assert_fresh(fast)
    assert sum(r[5] for r in a) > 3000


# ------------------------------------------------------------------------ row-group-aligned chunks

TABLES = ["decode_windows", "prefill_windows", "server_configs", "events", "rejected_lines",
          "vllm_spec_windows", "vllm_throughput_windows", "sources"]


def dump(db) -> dict[str, list]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        out = {}
        for t in TABLES:
            order = "byte_offset" if t != "sources" else "source_id"
            cols = "* EXCLUDE (first_seen, updated_at)" if t == "sources" else "*"
            out[t] = con.execute(f"SELECT {cols} FROM {t} ORDER BY {order}").fetchall()
        return out
    finally:
        con.close()


@pytest.mark.skipif(not fastscan.available(), reason="C accelerator not built")
def test_aligned_chunks_store_what_one_chunk_stores(tmp_path):
    """Every chunk but the last commits a multiple of align_rows decode windows, and the rows,
    checkpoint and sums equal one unaligned pass; also with hard-wrapped records, rejected lines
    and the samples' odd lines around the cuts."""
    log = tmp_path / "gen.log"
    generate(log, 3000, seed=4)
    with open(log, "ab") as f:
        for s in sorted(SAMPLES.glob("*.log")):
            f.write(s.read_bytes())
        f.write(b"[2026-01-01 00:00:00 DP0] Decode batch, #running-req: 99999999999, "
                b"gen throughput (token/s): 1.0, #queue-req: 0\n")
    generate(tmp_path / "more.log", 800, seed=6)
    with open(log, "ab") as f:
        f.write((tmp_path / "more.log").read_bytes())
    whole, aligned = tmp_path / "whole.duckdb", tmp_path / "aligned.duckdb"
    for db, kw in ((whole, dict(chunk_bytes=1 << 30, align_rows=0)),
                   (aligned, dict(chunk_bytes=50_000, align_rows=97))):
        ingest.ensure_run(db, "r")
        ing = ingest.FileIngestor(db, log, "r", overlap=True, **kw)
        res = ing.poll()
        ing.close()
        assert res.lines == log.read_bytes().count(b"\n")
    a, b = dump(whole), dump(aligned)
    assert len(a["decode_windows"]) > 3000 and a["rejected_lines"]
    assert a == b
    assert_same_sums(sums(whole), sums(aligned))
    # the chunks themselves: read one by one as ingest does
    ing = ingest.FileIngestor(tmp_path / "c.duckdb", log, chunk_bytes=50_000, align_rows=97)
    ing._fh = ing._open()
    src = ing._identify()
    size, at, lines, counts = log.stat().st_size, 0, 0, []
    while at < size:
        chunk = ing._read(src, at, lines, size)
        n = sum(t.num_rows for t in chunk.batches.arrow.get("decode_windows", [])) + len(
            chunk.batches.tables.get("decode_windows", {}).get("byte_offset", []))
        counts.append((n, bool(chunk.notes.warnings)))
        at, lines = chunk.end, lines + chunk.batches.lines
    ing.close()
    assert lines == a["sources"][0][7]
    # cut unless it has too few windows, is the last, or warned (a warning cannot be split)
    assert all(n % 97 == 0 or n < 97 or warned for n, warned in counts[:-1]), counts
    assert sum(n >= 97 and n % 97 == 0 for n, _ in counts) > 10, counts
    assert sum(n for n, _ in counts) == len(a["decode_windows"])


def test_idle_gaps_around_1970_and_at_whole_seconds(tmp_path, monkeypatch):
    """date_diff('second', a, b) counts second boundaries (floor of epoch seconds, also before
    1970): 23:59:59.5 -> 00:01:00.2 is 61 s (idle), 00:01:00.2 -> 00:02:00.9 is 60 s (not).
    The expected count is worked out by hand below, not by either fold."""
    base = dt.datetime(1970, 1, 1)
    times = [base - dt.timedelta(seconds=0.5), base + dt.timedelta(seconds=60.2),
             base + dt.timedelta(seconds=120.9), base + dt.timedelta(seconds=181),
             base - dt.timedelta(seconds=3600), base - dt.timedelta(seconds=3540.5),
             base - dt.timedelta(seconds=3480.5)]
    rows = {c: [] for c in schema.column_names("decode_windows")}
    for i, ts in enumerate(times):
        row = {"source_id": "s1", "byte_offset": 100 + i * 10, "line_no": i + 1, "ts": ts,
               "dp_rank": 0, "running_req": 1, "accept_len": 2.0}
        for k, v in rows.items():
            v.append(row.get(k))
    src = schema.Source(source_id="s1", path="/x.log", device=1, inode=1, fingerprint="f",
                        fingerprint_len=1024, offset_bytes=0, lines_done=0, first_seen=None,
                        updated_at=None, tail_fingerprint="t")
    got = {}
    for mode in ("fast", "sql"):
        if mode == "sql":
            monkeypatch.setenv("SPECWATCH_SQL_FOLD", "1")
        db = tmp_path / f"{mode}.duckdb"
        with store.writer(db) as con:
            store.upsert_run(con, {"run_id": "r", "run_name": "r", "origin": "ingest"})
            store.append_with_checkpoint(con, src, 0, 200, 7, {"decode_windows": rows}, run_id="r")
        monkeypatch.delenv("SPECWATCH_SQL_FOLD", raising=False)
        got[mode] = sums(db)
    assert_same_sums(got["fast"], got["sql"])
    cols = schema.column_names("run_window_sums")
    row = dict(zip(cols, got["fast"][0]))
    # epoch seconds, floored: -1, 60, 120, 181, -3600, -3541, -3481. After idle: #0 (first),
    # #1 (61 s), #3 (61 s); not #2 (60 s), #4 (back in time), #5 (59 s), #6 (60 s). Truncated
    # instead (0, 60, 120, ...), #1 would be 60 s and kept.
    assert (row["windows_all"], row["windows_k"]) == (7, 4), row


# ------------------------------------------------------------------------ the prefetched chunk

def test_prefetched_first_chunk_dropped_when_the_file_changed_or_resumes(tmp_path):
    """ingest_paths scans a file's first chunk while the run is set up (`prefetch`); it is
    used only for a new source that still starts with the bytes read: a file rewritten in place
    meanwhile, or one resumed from its checkpoint, stores what the file holds, once."""
    log = tmp_path / "server.log"
    generate(log, 2000, seed=1)
    other = tmp_path / "other.log"
    generate(other, 2500, seed=2)
    db = tmp_path / "p.duckdb"
    size = log.stat().st_size
    body = other.read_bytes()
    body = body[:body.rfind(b"\n", 0, size) + 1]
    body += b"x" * (size - len(body) - 1) + b"\n"   # the same size: only the bytes tell
    other.write_bytes(body)
    ing = ingest.FileIngestor(db, log, "r", chunk_bytes=1 << 20, overlap=True)
    ing.prefetch()
    ing._prefetch[0].result()                  # the old bytes are read and scanned
    with open(log, "r+b") as f:                # rewritten in place (same inode and size)
        f.write(body)
    ingest.ensure_run(db, "r")
    res = ing.poll()
    ing.close()
    assert res.lines == body.count(b"\n")
    want = tmp_path / "want.duckdb"
    ingest.ingest_paths(want, [str(other)], run="r")
    a, b = dump(db), dump(want)
    assert a["decode_windows"] and [r[1:] for r in a["decode_windows"]] == \
        [r[1:] for r in b["decode_windows"]]
    # resumed: the prefetch (from offset 0) is dropped, the rest is read from the checkpoint
    with open(log, "ab") as f:
        f.write(b"".join(other.read_bytes().splitlines(keepends=True)[1:301]))
    got = ingest.ingest_paths(db, [str(log)], run="r")
    assert got[0].lines == 300
    con = duckdb.connect(str(db), read_only=True)
    n, distinct = con.execute("SELECT count(*), count(DISTINCT (source_id, byte_offset)) "
                              "FROM decode_windows").fetchone()
    con.close()
    assert n == distinct == len(a["decode_windows"]) + sum(
        b"Decode batch" in x for x in other.read_bytes().splitlines()[1:301])
    assert_fresh(db)
