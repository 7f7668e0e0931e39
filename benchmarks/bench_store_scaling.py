"""How bulk ingest's two halves scale with cores: DuckDB inserting specwatch's decode rows (threads x
row groups per INSERT statement, one transaction each, the writer's settings) and the C scan of a
log's 64 MB chunks on N threads. Reads the rows back from a database `specwatch ingest` made of the
same log. Prints one line per setting; seconds are the best of two.

    python benchmarks/bench_store_scaling.py LOG DB_MADE_FROM_LOG
"""
from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import duckdb
import pyarrow as pa

from specwatch.db import store
from specwatch.logs import bulk, ingest, rows

ROW_GROUP = ingest.ROW_GROUP_ROWS


def insert_s(dec, threads: int, groups: int, db: str = "/tmp/bench_store_scaling.duckdb",
             batches: str = "as read") -> float:
    """Seconds to insert `dec` in statements of `groups` row groups; `batches`: the Arrow record
    batches of each statement as DuckDB returned them ("as read"), one contiguous batch ("one",
    what the scanner makes) or one per row group ("row group", what store.insert hands DuckDB)."""
    for f in (db, db + ".wal"):
        if os.path.exists(f):
            os.unlink(f)
    t0 = time.perf_counter()
    con = duckdb.connect(db, config=store.WRITER_CONFIG)
    con.execute("SET preserve_insertion_order = false")
    con.execute(f"SET threads = {threads}")
    con.execute("CREATE TABLE t AS SELECT * FROM dec LIMIT 0")
    for i in range(0, dec.num_rows, groups * ROW_GROUP):
        part = dec.slice(i, groups * ROW_GROUP)
        if batches != "as read":
            part = part.combine_chunks()
        if batches == "row group":
            part = pa.Table.from_batches(part.to_batches(max_chunksize=ROW_GROUP))
        con.execute("INSERT INTO t SELECT * FROM part")
    con.close()
    return time.perf_counter() - t0


def main() -> None:
    log, src = sys.argv[1], sys.argv[2]
    with duckdb.connect(src, read_only=True) as c:
        dec = c.sql("SELECT * FROM decode_windows ORDER BY byte_offset").to_arrow_table()
    cpus = os.cpu_count()
    print(f"cpus {cpus}, decode rows {dec.num_rows}")
    for th in (t for t in (1, 2, 4, 8, 16) if t <= cpus):
        print(f"insert threads={th:2d}: " + "  ".join(
            f"groups/insert={g}: {min(insert_s(dec, th, g) for _ in range(2)):.3f}s" for g in (2, 4, 8)))
    for th in (t for t in (2, 8, 16) if t <= cpus):
        for g in (2, 8):
            print(f"insert threads={th:2d} groups/insert={g}: " + "  ".join(
                f"{b}: {min(insert_s(dec, th, g, batches=b) for _ in range(2)):.3f}s"
                for b in ("one", "row group")))
    data = open(log, "rb").read()
    chunks, at = [], 0
    while at < len(data):
        cut = data.rfind(b"\n", at, at + bulk.BULK_CHUNK_BYTES) + 1
        cut = cut if cut > at else len(data)
        chunks.append((at, data[at:cut]))
        at = cut

    def scan(chunk):
        b = rows.Batches()
        rows.parse_chunk(chunk[1], "s", log, chunk[0], 0, b, ingest.IngestResult(log))
        return b

    scan(chunks[0])   # warm: caches and first-touch pages out of the timings
    for workers in (w for w in (1, 2, 4, 8) if w <= cpus):
        t0 = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(scan, chunks))
        print(f"scan {len(chunks)} chunks on {workers} threads: {time.perf_counter() - t0:.3f}s")


if __name__ == "__main__":
    main()
