"""Owns the DuckDB file: schema, idempotent appends with their checkpoint, derived views.

Concurrency (ARCHITECTURE decision 2): DuckDB lets one process hold a database file for writing and
no other process open it meanwhile. Writers therefore hold the file only for short bursts
(`writer()`), readers open it read-only (`reader()`), and both retry briefly while another process
holds the lock. Because the log file is the buffer, a writer that cannot get the lock in time just
ingests more next time.

Exactly-once: rows from a source are appended in the same transaction that advances the source's
checkpoint, and only if the checkpoint is still where the rows were read from (a compare-and-set),
so two writers racing on one file cannot store a line twice.

Metric formulas live in `views.py` and nowhere else; the CLI, report and dashboard read them.
"""
from __future__ import annotations

import contextlib
import os
import threading
import datetime as dt
import json
import random
import time
from pathlib import Path
from typing import Iterator

import duckdb
import pyarrow as pa

from specwatch import schema
from specwatch.views import VIEWS

DEFAULT_DB = "specwatch.duckdb"
LOCK_WAIT_S = 10.0
# Retry delays while another process holds the file grow to at most this. Short on purpose: `tail`
# leaves the file free >= 100 ms between ~50 ms write bursts, and a reader that sleeps longer than
# that gap keeps missing it (bench_tail_latency: with a 100 ms cap, reader open wait p99 ~640 ms).
LOCK_RETRY_MAX_S = 0.025

_ARROW = {
    "VARCHAR": pa.string(), "JSON": pa.string(), "BIGINT": pa.int64(), "INTEGER": pa.int32(),
    "DOUBLE": pa.float64(), "BOOLEAN": pa.bool_(), "TIMESTAMP": pa.timestamp("us"),
    "DOUBLE[]": pa.list_(pa.float64()), "INTEGER[]": pa.list_(pa.int32()),
}


class StoreError(RuntimeError):
    """A database problem the user can act on (locked too long, not a specwatch file, ...)."""


class CheckpointMoved(StoreError):
    """Another writer advanced this source's checkpoint first; nothing was written."""


def _is_lock_error(exc: Exception) -> bool:
    msg = str(exc)
    if "different configuration than existing connections" in msg:
        # This process already has the file open the other way (read-only vs read-write), e.g. a
        # `tail.follow` thread inside the sweep while a reader opens: as short-lived as a lock.
        return True
    return "lock" in msg.lower() and ("Conflicting" in msg or "Could not set lock" in msg)


def connect(path: str | Path, read_only: bool, wait_s: float = LOCK_WAIT_S) -> duckdb.DuckDBPyConnection:
    """Open the database, retrying with jittered backoff while another process holds its lock."""
    path = str(path)
    deadline = time.monotonic() + wait_s
    delay = 0.005
    while True:
        try:
            return duckdb.connect(path, read_only=read_only)
        except (duckdb.IOException, duckdb.ConnectionException) as exc:
            if not _is_lock_error(exc) or time.monotonic() >= deadline:
                if _is_lock_error(exc):
                    raise StoreError(f"{path}: database is locked by another process for more than "
                                     f"{wait_s:.0f} s; try again, or stop the other writer") from None
                raise StoreError(f"{path}: cannot open database: {exc}") from None
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 1.6, LOCK_RETRY_MAX_S)


@contextlib.contextmanager
def writer(path: str | Path, wait_s: float = LOCK_WAIT_S) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short-lived read-write connection with the schema in place. Keep the block short.

    Writers in one process take turns (DuckDB 2.0 fails two read-write connections of one process
    to one file with catalog write-write conflicts); other processes are kept out by the file lock."""
    with _process_lock(path):
        con = connect(path, read_only=False, wait_s=wait_s)
        try:
            ensure_schema(con)
            yield con
        finally:
            con.close()


_locks: dict[str, threading.RLock] = {}
_locks_guard = threading.Lock()


def _process_lock(path: str | Path) -> threading.RLock:
    key = os.path.realpath(path)
    with _locks_guard:
        return _locks.setdefault(key, threading.RLock())


@contextlib.contextmanager
def reader(path: str | Path, wait_s: float = LOCK_WAIT_S) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection. A missing file is an error that says how to create one."""
    if not Path(path).exists():
        raise StoreError(f"{path}: no such database; create it with `specwatch ingest LOG --db {path}` "
                         "or `specwatch run-sweep`")
    con = connect(path, read_only=True, wait_s=wait_s)
    try:
        yield con
    finally:
        con.close()


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    # Runs at every write burst, while the lock is held: one cheap query when all is in place
    # (reading specwatch_meta directly takes ~0.5 ms; listing duckdb_tables() took ~5 ms).
    try:
        version = con.execute("SELECT max(schema_version) FROM specwatch_meta").fetchone()[0]
    except duckdb.CatalogException:
        version = None
    else:
        if version == schema.SCHEMA_VERSION:
            return
        if version is not None and version > schema.SCHEMA_VERSION:
            raise StoreError(f"database schema version {version} is newer than this specwatch "
                             f"({schema.SCHEMA_VERSION}); upgrade specwatch")
    con.execute("BEGIN")
    for table in schema.TABLES:
        con.execute(schema.ddl(table))
        # an older database: add the columns this version declares (new columns start NULL)
        have = {r[0] for r in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = ?", [table]).fetchall()}
        for name, sql in schema.columns(schema.TABLES[table]):
            if name not in have:
                con.execute(f"ALTER TABLE {table} ADD COLUMN {name} {sql.replace(' PRIMARY KEY', '')}")
    for sql in VIEWS:
        con.execute(sql)
    con.execute("CREATE TABLE IF NOT EXISTS specwatch_meta (schema_version INTEGER)")
    con.execute("DELETE FROM specwatch_meta")
    con.execute("INSERT INTO specwatch_meta VALUES (?)", [schema.SCHEMA_VERSION])
    con.execute("COMMIT")


def arrow_table(table: str, rows: dict[str, list]) -> pa.Table:
    """Column lists (missing columns = all NULL) -> an Arrow table typed by the schema."""
    n = max((len(v) for v in rows.values()), default=0)
    arrays, names = [], []
    for name, sql in schema.columns(schema.TABLES[table]):
        base = sql.split()[0]
        values = rows.get(name)
        arrays.append(pa.array(values if values is not None else [None] * n, type=_ARROW[base]))
        names.append(name)
    return pa.Table.from_arrays(arrays, names=names)


def insert(con: duckdb.DuckDBPyConnection, table: str, rows) -> int:
    """Insert column lists ({column: [values]}), an Arrow table in schema order, or a list of either."""
    if isinstance(rows, list):
        return sum(insert(con, table, r) for r in rows)
    tbl = rows if isinstance(rows, pa.Table) else arrow_table(table, rows)
    if tbl.num_rows == 0:
        return 0
    con.register("_specwatch_batch", tbl)
    try:
        con.execute(f"INSERT INTO {table} SELECT * FROM _specwatch_batch")
    finally:
        con.unregister("_specwatch_batch")
    return tbl.num_rows


def arrow_from_columns(table: str, cols: dict[str, pa.Array], n: int, **constants) -> pa.Table:
    """An Arrow table in schema order from typed arrays; absent columns are NULL, `constants` fill."""
    arrays, names = [], []
    for name, sql in schema.columns(schema.TABLES[table]):
        typ = _ARROW[sql.split()[0]]
        if name in constants:
            arr = pa.array([constants[name]] * n, type=typ)
        elif name in cols:
            arr = cols[name].cast(typ)
        else:
            arr = pa.nulls(n, type=typ)
        arrays.append(arr)
        names.append(name)
    return pa.Table.from_arrays(arrays, names=names)


def append_with_checkpoint(con: duckdb.DuckDBPyConnection, source: schema.Source, expect_offset: int,
                           new_offset: int, new_lines_done: int, batches: dict[str, dict[str, list]],
                           run_id: str | None = None) -> int:
    """Insert `batches` ({table: columns}) and move the source checkpoint from `expect_offset` to
    `new_offset`, atomically. Raises CheckpointMoved (and writes nothing) if another writer moved it.
    With `run_id`, the source is attached to that run in the same transaction, so a writer killed
    right after the commit cannot leave stored rows outside their run."""
    now = dt.datetime.now()
    con.execute("BEGIN")
    try:
        row = con.execute("SELECT offset_bytes FROM sources WHERE source_id = ?",
                          [source.source_id]).fetchone()
        if row is None:
            if expect_offset != 0:
                raise CheckpointMoved(f"source {source.source_id} vanished")
            con.execute("INSERT INTO sources (source_id, path, device, inode, fingerprint, "
                        "fingerprint_len, offset_bytes, lines_done, first_seen, updated_at, "
                        "tail_fingerprint) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [source.source_id, source.path, source.device, source.inode,
                         source.fingerprint, source.fingerprint_len, new_offset, new_lines_done,
                         now, now, source.tail_fingerprint])
        elif row[0] != expect_offset:
            raise CheckpointMoved(f"{source.path}: checkpoint is at {row[0]}, expected {expect_offset}")
        else:
            con.execute("UPDATE sources SET offset_bytes = ?, lines_done = ?, updated_at = ?, path = ?,"
                        " fingerprint = ?, fingerprint_len = ?, device = ?, inode = ?, "
                        "tail_fingerprint = ? WHERE source_id = ?",
                        [new_offset, new_lines_done, now, source.path, source.fingerprint,
                         source.fingerprint_len, source.device, source.inode,
                         source.tail_fingerprint, source.source_id])
        n = 0
        for table, cols in batches.items():
            n += insert(con, table, cols)
        if run_id is not None:
            attach_source(con, run_id, source.source_id)
        con.execute("COMMIT")
        return n
    except BaseException:
        con.execute("ROLLBACK")
        raise


def upsert_run(con: duckdb.DuckDBPyConnection, run: dict) -> None:
    """Create or update a run row; keys not given keep their stored values."""
    cols = schema.column_names("runs")
    unknown = set(run) - set(cols)
    if unknown:
        raise ValueError(f"unknown run fields: {sorted(unknown)}")
    existing = con.execute("SELECT * FROM runs WHERE run_id = ?", [run["run_id"]]).fetchone()
    merged = dict(zip(cols, existing)) if existing else {"created_at": dt.datetime.now()}
    merged.update(run)
    con.execute("DELETE FROM runs WHERE run_id = ?", [run["run_id"]])
    insert(con, "runs", {c: [merged.get(c)] for c in cols})


def attach_source(con: duckdb.DuckDBPyConnection, run_id: str, source_id: str,
                  offset_from: int = 0, offset_to: int | None = None) -> None:
    """Scope [offset_from, offset_to) of a source to a run (idempotent for identical ranges)."""
    con.execute("DELETE FROM run_sources WHERE run_id = ? AND source_id = ? AND offset_from = ?",
                [run_id, source_id, offset_from])
    con.execute("INSERT INTO run_sources VALUES (?, ?, ?, ?)", [run_id, source_id, offset_from, offset_to])


def dumps(value) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)
