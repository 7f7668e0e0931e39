"""A one-shot ingest's streamed transaction (`specwatch.db.stream`): decode windows reach DuckDB
in batches of whole row groups whatever the chunks' sizes, so a transaction leaves at most one
partial row group for the checkpoint to compress; the rows and their order are the chunks'.
Real DuckDB files, real Arrow tables. (Its run sums: tests/test_fold.py.)"""
from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from specwatch.db import schema, store, stream


def _windows(start: int, n: int, source_id: str = "s1") -> pa.Table:
    """n decode windows at byte offsets start, start+1, ... (the other columns NULL)."""
    off = np.arange(start, start + n, dtype=np.int64)
    cols = {"source_id": pa.array([source_id] * n), "byte_offset": pa.array(off),
            "line_no": pa.array(off + 1), "accept_len": pa.array((off % 7) / 2.0),
            "running_req": pa.array((off % 5).astype(np.int32))}
    return pa.table(
        [cols.get(name, pa.nulls(n, store._ARROW[sql.split()[0]]))
         for name, sql in schema.columns(schema.TABLES["decode_windows"])],
        names=schema.column_names("decode_windows"))


@pytest.mark.parametrize("sizes", [[1000], [999, 1, 2500], [3, 4000, 0, 7, 1993], [2000, 2000]])
def test_batches_are_whole_row_groups_in_order(monkeypatch, sizes):
    monkeypatch.setattr(store, "ROW_GROUP_ROWS", 1000)
    tables, at = [], 0
    for n in sizes:
        tables.append(_windows(at, n))
        at += n
    batches = list(stream._whole_groups(iter(t for t in tables if t.num_rows)))
    assert [b.num_rows for b in batches[:-1]] == [1000] * (len(batches) - 1)
    assert 0 < batches[-1].num_rows <= 1000
    got = pa.Table.from_batches(batches)
    assert got.column("byte_offset").to_pylist() == list(range(at))
    assert got.column("accept_len").to_pylist() == [(x % 7) / 2.0 for x in range(at)]


def test_a_streamed_transaction_leaves_at_most_one_partial_row_group(tmp_path):
    """Chunks of odd sizes, one transaction, 16 DuckDB threads: every row group but one is full.
    Batches cut at each chunk's end left a partial group per thread and chunk, which the commit
    gathered and the checkpoint at close compressed on one thread (2M lines on 16 CPUs: 0.34 s),
    and some of which it left partial."""
    db = tmp_path / "s.duckdb"
    src = schema.Source(source_id="s1", path="/x.log", device=1, inode=1, fingerprint="f",
                        fingerprint_len=1024, offset_bytes=0, lines_done=0, first_seen=None,
                        updated_at=None, tail_fingerprint="t")
    sizes = [30_001, 77_777, 150_000, 5, 123_456, 61_440, 200_000, 99_999, 250_000]
    pieces, at = [], 0
    for k, n in enumerate(sizes):
        pieces.append(stream.Piece({"decode_windows": [_windows(at, n)]}, at + n, k + 1))
        at += n
    with store.writer(db) as con:
        con.execute("SET threads = 16")   # a partial group per thread was what hurt
        con.execute("SET preserve_insertion_order = false")
        rows, last = stream.append_stream_with_checkpoint(con, src, 0, iter(pieces))
    assert rows == at and last is pieces[-1]
    with duckdb.connect(str(db), read_only=True) as con:
        per_group = [r[0] for r in con.execute(
            "SELECT sum(count) FROM pragma_storage_info('decode_windows') "
            "WHERE column_name = 'byte_offset' AND segment_type = 'BIGINT' "
            "GROUP BY row_group_id").fetchall()]
        assert con.execute("SELECT count(*), count(DISTINCT byte_offset), min(byte_offset), "
                           "max(byte_offset) FROM decode_windows").fetchone() == (at, at, 0, at - 1)
        assert con.execute("SELECT offset_bytes, lines_done FROM sources").fetchall() == \
            [(at, len(sizes))]
    assert sum(per_group) == at
    partial = [n for n in per_group if n < store.ROW_GROUP_ROWS]
    assert len(per_group) >= 3 and len(partial) <= 1, per_group
