"""Reading a database an older specwatch wrote: it lacks the views (and columns) added since, so
every reader (report, sql, doctor, the dashboard) brings it up to date once, as the next ingest
would, instead of failing with "Table ... does not exist". A DuckDB file that is not
specwatch's is never written to by a reader."""
from __future__ import annotations

import hashlib
import json

import duckdb

from specwatch.db import schema, store
from conftest import run_cli


def older(db, version: int = schema.SCHEMA_VERSION - 1) -> None:
    """What the previous release left: its version in specwatch_meta, a newer view absent."""
    with store.writer(db) as con:
        store.upsert_run(con, {"run_id": "r1", "run_name": "r1", "origin": "sweep",
                               "sweep_name": "s", "config_name": "baseline", "status": "ok",
                               "request_rate": 2.0})
    con = duckdb.connect(str(db))
    con.execute("DROP VIEW group_schedule")
    con.execute("UPDATE specwatch_meta SET schema_version = ?", [version])
    con.close()


def test_readers_bring_an_older_database_up_to_date(tmp_path):
    db = tmp_path / "old.duckdb"
    older(db)
    got = json.loads(run_cli("sql", "--db", db, "--format", "json",
                             "SELECT count(*) AS n FROM group_schedule").stdout)
    assert got == [{"n": 0}]
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT max(schema_version) FROM specwatch_meta").fetchone()[0] == \
        schema.SCHEMA_VERSION
    assert con.execute("SELECT run_name, status FROM runs").fetchall() == [("r1", "ok")]
    con.close()
    # report reads every traffic view: it runs on the other older file too
    db2 = tmp_path / "old2.duckdb"
    older(db2)
    doc = json.loads(run_cli("report", "--db", db2, "--format", "json").stdout)
    assert doc["schedule"] == []


def test_a_duckdb_file_that_is_not_specwatchs_is_read_as_it_is(tmp_path):
    db = tmp_path / "other.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE t AS SELECT 42 AS x")
    con.close()
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    got = json.loads(run_cli("sql", "--db", db, "--format", "json", "SELECT x FROM t").stdout)
    assert got == [{"x": 42}]
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
