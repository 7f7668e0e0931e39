"""A new database is a copy of a cached empty one (specwatch/db/template.py): it must hold exactly
what building the schema in place gives, never replace a file, and fall back to building the
schema when the cache is missing, unwritable, damaged or of an older schema."""
from __future__ import annotations

import os
import threading

import duckdb
import pytest

from specwatch.db import schema, store, template


def catalog(path) -> dict:
    """Everything a database's schema consists of, as DuckDB reports it."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {
            "tables": con.execute("SELECT table_name, sql FROM duckdb_tables() "
                                  "WHERE database_name = current_database() ORDER BY 1").fetchall(),
            "columns": con.execute("SELECT table_name, column_index, column_name, data_type "
                                   "FROM duckdb_columns() WHERE database_name = current_database() "
                                   "ORDER BY 1, 2").fetchall(),
            "views": con.execute("SELECT view_name, sql FROM duckdb_views() WHERE NOT internal "
                                 "AND database_name = current_database() ORDER BY 1").fetchall(),
            "meta": con.execute("SELECT schema_version FROM specwatch_meta").fetchall(),
            "rows": {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in schema.TABLES},
        }
    finally:
        con.close()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("SPECWATCH_CACHE_DIR", str(d))
    return d / "schema"


def built_in_place(tmp_path):
    ref = tmp_path / "built.duckdb"
    store._build_empty(str(ref))
    return catalog(ref)


def test_a_new_database_is_the_cached_empty_one_and_equals_one_built_in_place(tmp_path, cache):
    want = built_in_place(tmp_path)
    assert want["meta"] == [(schema.SCHEMA_VERSION,)] and len(want["views"]) == len(store.VIEWS)
    for name in ("a.duckdb", "b.duckdb"):
        with store.writer(tmp_path / name):
            pass
        assert catalog(tmp_path / name) == want
    cached = list(cache.iterdir())
    assert [p.name for p in cached] == [f"empty-{template.key()}.duckdb"]   # built once, reused
    # the copy is a file of its own with the mode DuckDB gives a file it creates
    assert os.stat(tmp_path / "a.duckdb").st_ino != os.stat(cached[0]).st_ino
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(tmp_path / "a.duckdb").st_mode & 0o777 == 0o666 & ~umask
    # and it is written to like any other
    with store.writer(tmp_path / "a.duckdb") as con:
        store.upsert_run(con, {"run_id": "r", "run_name": "r", "origin": "ingest", "status": "ok"})
    assert catalog(tmp_path / "a.duckdb")["rows"]["runs"] == 1
    assert catalog(tmp_path / "b.duckdb")["rows"]["runs"] == 0


def test_an_existing_file_is_never_replaced(tmp_path, cache):
    db = tmp_path / "x.duckdb"
    with store.writer(db) as con:
        store.upsert_run(con, {"run_id": "r", "run_name": "r", "origin": "ingest", "status": "ok"})
    assert template.place(str(db), store._build_empty) is False
    assert catalog(db)["rows"]["runs"] == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".specwatch-new-")]


def test_writers_racing_to_create_one_database_all_see_one_schema(tmp_path, cache):
    db = tmp_path / "race.duckdb"
    errors = []

    def write(i):
        try:
            with store.writer(db) as con:
                store.upsert_run(con, {"run_id": f"r{i}", "run_name": f"r{i}", "origin": "ingest",
                                       "status": "ok"})
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    got = catalog(db)
    assert got["rows"]["runs"] == 6 and got["meta"] == [(schema.SCHEMA_VERSION,)]


def test_an_unwritable_cache_builds_the_schema_in_place(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory would go")
    monkeypatch.setenv("SPECWATCH_CACHE_DIR", str(blocker))
    want = built_in_place(tmp_path)
    with store.writer(tmp_path / "n.duckdb"):
        pass
    assert catalog(tmp_path / "n.duckdb") == want
    assert blocker.read_text().startswith("a file")


def test_a_damaged_cached_copy_is_dropped_and_the_database_built_in_place(tmp_path, cache):
    want = built_in_place(tmp_path)
    cache.mkdir(parents=True)
    bad = cache / f"empty-{template.key()}.duckdb"
    bad.write_bytes(os.urandom(1 << 16))
    with store.writer(tmp_path / "d.duckdb"):
        pass
    assert catalog(tmp_path / "d.duckdb") == want
    assert not bad.exists() or catalog(bad) == want   # dropped (or rebuilt whole by a later writer)


def test_a_cached_copy_of_an_older_schema_is_brought_up_to_date(tmp_path, cache):
    want = built_in_place(tmp_path)
    cache.mkdir(parents=True)
    old = cache / f"empty-{template.key()}.duckdb"
    store._build_empty(str(old))
    con = duckdb.connect(str(old))
    con.execute("DROP VIEW group_schedule")
    con.execute("UPDATE specwatch_meta SET schema_version = ?", [schema.SCHEMA_VERSION - 1])
    con.close()
    with store.writer(tmp_path / "o.duckdb"):
        pass
    assert catalog(tmp_path / "o.duckdb") == want
