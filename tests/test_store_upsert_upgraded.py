"""upsert_run on a database an older specwatch created: columns a schema upgrade added sit last
in the file (ALTER TABLE ADD COLUMN), so a stored run must be read back by column name."""
from __future__ import annotations

import duckdb
import pytest

from specwatch.db import schema, store


@pytest.mark.parametrize("moved", ["concurrency", "output_tok_s", "sweep_name"])
def test_update_keeps_the_other_columns_when_columns_were_added_last(tmp_path, moved):
    db = tmp_path / "old.duckdb"
    with store.writer(db) as con:
        store.upsert_run(con, {"run_id": "r1", "run_name": "a", "sweep_name": "s",
                               "concurrency": 4, "output_tok_s": 123.5, "status": "running"})
    # what an upgrade leaves: the column dropped and added again is now the table's last one
    con = duckdb.connect(str(db))
    kind = dict(schema.columns(schema.TABLES["runs"]))[moved]
    value = con.execute(f"SELECT {moved} FROM runs").fetchone()[0]
    con.execute(f"ALTER TABLE runs DROP COLUMN {moved}")
    con.execute(f"ALTER TABLE runs ADD COLUMN {moved} {kind}")
    con.execute(f"UPDATE runs SET {moved} = ?", [value])
    assert con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = 'runs' "
                       "ORDER BY column_index DESC LIMIT 1").fetchone()[0] == moved
    con.close()
    with store.writer(db) as con:
        store.upsert_run(con, {"run_id": "r1", "status": "ok"})
        got = con.execute("SELECT run_name, sweep_name, concurrency, output_tok_s, status "
                          "FROM runs").fetchall()
    assert got == [("a", "s", 4, 123.5, "ok")]
