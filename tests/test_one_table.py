"""store.one_table: a chunk's parts (the scanner's Arrow rows, the rows Python parsed) become one
contiguous Arrow table, so that DuckDB gets them in one INSERT with no row group of a few rows
(benchmarks/results/ingest_16core_issue28_s37.md). The rows stored must be those the parts give
inserted one by one."""
from __future__ import annotations

import sys

import duckdb
import pyarrow as pa
import pytest

from conftest import ROOT
from specwatch.db import schema, store
from specwatch.logs import fastscan, ingest, rows

sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_ingest import generate  # noqa: E402

pytestmark = pytest.mark.skipif(not fastscan.available(), reason="C accelerator not built")


def _parts(tmp_path, extra: list[str]) -> dict[str, list]:
    """A chunk's batches: generated lines for the scanner, `extra` lines among them for Python."""
    log = tmp_path / "server.log"
    generate(log, 3000, seed=4)
    lines = log.read_text().splitlines(keepends=True)
    for k, line in enumerate(extra):
        lines.insert(200 + 300 * k, line)
    data = "".join(lines).encode()
    b = rows.Batches()
    rows.parse_chunk(data, "src-1", str(log), 0, 0, b, ingest.IngestResult(str(log)))
    return b.all()


def _stored(db, table: str, parts, one: bool) -> list[tuple]:
    con = duckdb.connect(str(db))
    con.execute(schema.ddl(table))
    if one:
        store.insert(con, table, parts)
    else:   # each part on its own (what insert did before one_table)
        for p in parts:
            t = p if isinstance(p, pa.Table) else store.arrow_table(table, p)  # noqa: F841 - read by the SQL
            con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM t")
    got = con.execute(f"SELECT * FROM {table} ORDER BY byte_offset").fetchall()
    con.close()
    return got


@pytest.mark.parametrize("extra", [
    [],
    # read by Python beside the scanner's rows: a capture prefix of no known shape, a
    # hard-wrapped record, a line with an extra field
    ["note: [2026-10-31 08:00:09 DP1 TP4] Decode batch, #running-req: 3, #token: 120, token "
     "usage: 0.10, accept len: 2.10, accept rate: 0.40, cuda graph: True, gen throughput "
     "(token/s): 10.00, #queue-req: 0\n",
     "[2026-10-31 08:00:10 DP0 TP0] Decode batch, #running-req: 4, #token: 121, token usage: "
     "0.11, accept len: 2.20,\n accept rate: 0.41, cuda graph: False, gen throughput (token/s): "
     "11.00, #queue-req: 1\n",
     "[2026-10-31 08:00:11 DP0 TP0] Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, "
     "token usage: 0.01, #running-req: 0, #queue-req: 0, #weird [x]: 3\n"],
])
def test_one_table_stores_what_the_parts_store(tmp_path, extra):
    batches = _parts(tmp_path, extra)
    for table in ("decode_windows", "prefill_windows"):
        parts = batches[table]
        tbl = store.one_table(table, parts)
        n = sum(p.num_rows if isinstance(p, pa.Table) else len(p["byte_offset"]) for p in parts)
        assert tbl.num_rows == n and tbl.column(0).num_chunks == 1
        assert tbl.column_names == schema.column_names(table)
        assert _stored(tmp_path / f"{table}-one.duckdb", table, parts, True) == \
            _stored(tmp_path / f"{table}-parts.duckdb", table, parts, False)
    if extra:
        assert len(batches["decode_windows"]) == 2   # the scanner's and Python's, both there
