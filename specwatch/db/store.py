"""Owns the DuckDB file: schema, idempotent appends with their checkpoint, derived views.

Concurrency (ARCHITECTURE decision 2): DuckDB lets one process hold a database file for writing and
no other process open it meanwhile. Writers therefore hold the file only for short bursts
(`writer()`), readers open it read-only (`reader()`), and both retry while another process holds
the lock. Readers never break writers: a reader may hold the file at most READ_WAIT_S + MAX_READ_S
(query.py enforces the query part, killing a query that does not stop), writers wait LOCK_WAIT_S,
longer than that, and while a writer waits it holds `<db>.gate`, so readers arriving meanwhile queue
behind it instead of keeping the file busy forever. A writer that still cannot get in (a foreign
DuckDB client holds the file) raises StoreLocked; callers retry (tail at its next wake-up, the
sweep's writer for writer.RETRY_S): the log file is the buffer. A full disk is StoreFull, a damaged
file StoreCorrupt, each with a message that says what to do.

Readers are sandboxed (READER_CONFIG): no file or network access beyond the database, no
extensions, no settings changed once open.

Exactly-once: rows from a source are appended in the same transaction that advances the source's
checkpoint, and only if the checkpoint is still where the rows were read from (a compare-and-set),
so two writers racing on one file cannot store a line twice.

Metric formulas live in `views.py` and nowhere else; the CLI, report and dashboard read them.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import threading
import datetime as dt
import json
import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import duckdb
import pyarrow as pa

from specwatch.db import schema, slo_views, stats, summaries, template, views

VIEWS = [*views.VIEWS, *stats.VIEWS, *slo_views.VIEWS]  # creation order: per-run views first

DEFAULT_DB = "specwatch.duckdb"
# Readers never break writers: a reader holds the file at most READ_WAIT_S (opening) plus its query
# limit (query.MAX_TIMEOUT_S), and a writer waits longer than that, holding the gate (below) so that
# no new reader can start meanwhile. Writers that still time out (another writer, or a foreign
# DuckDB client holding the file) raise StoreLocked; `tail` retries at its next wake-up and the
# sweep's writer retries (writer.RETRY_S), so a measured run is never lost over a lock.
READ_WAIT_S = 10.0
MAX_READ_S = 60.0          # the longest a reader may run a query (query.MAX_TIMEOUT_S)
LOCK_WAIT_S = READ_WAIT_S + MAX_READ_S + 20.0
# Retry delays while another process holds the file grow to at most this. Short on purpose: `tail`
# leaves the file free >= 100 ms between ~50 ms write bursts, and a reader that sleeps longer than
# that gap keeps missing it (bench_tail_latency: with a 100 ms cap, reader open wait p99 ~640 ms).
LOCK_RETRY_MAX_S = 0.025
# What a reader's connection may do: nothing outside the database file (no files, no network, no
# ATTACH, no COPY), no extension loading, no Python-variable scans, no settings changed afterwards.
READER_CONFIG = {
    "enable_external_access": False, "autoload_known_extensions": False,
    "autoinstall_known_extensions": False, "python_enable_replacements": False,
    "lock_configuration": True,
}

# A writer's connection: checkpoint when it closes (every writer is short-lived: a bulk ingest
# hands its writer back every few seconds), not each time the WAL passes DuckDB's default 16 MB,
# which a bulk ingest did in the middle of a chunk's commit (2M-line ingest: 3.1 vs 3.5-3.9 s).
# A memory limit, so that DuckDB's buffer pool does not grow with the database during a long
# ingest (peak RSS at 8M lines: 1019 MB without, 779 MB with; 2M lines: unchanged, but ~0.2-0.4 s
# slower); what needs more (a from-scratch run_window_sums over 7.6M windows) spills to disk
# (7.8 s, 355 MB peak). 384 MB rather than 256 MB: inserts under 256 MB evicted the chunk being
# appended (2M lines, interleaved medians 4.41 vs 4.07 s; peak RSS 767 vs 774 MB at 2M lines,
# 777 vs 847 MB at 8M; 512 MB: 907 MB at 8M and no faster).
WRITER_CONFIG = {"checkpoint_threshold": "1GB", "memory_limit": "384MB"}
# DuckDB's row group size (rows): the unit its threads insert, compress and checkpoint
ROW_GROUP_ROWS = 122880

_ARROW = {
    "VARCHAR": pa.string(), "JSON": pa.string(), "BIGINT": pa.int64(), "INTEGER": pa.int32(),
    "DOUBLE": pa.float64(), "BOOLEAN": pa.bool_(), "TIMESTAMP": pa.timestamp("us"),
    "DOUBLE[]": pa.list_(pa.float64()), "INTEGER[]": pa.list_(pa.int32()),
}


class StoreError(RuntimeError):
    """A database problem the user can act on (locked too long, not a specwatch file, ...)."""


class StoreLocked(StoreError):
    """Another process held the database for longer than this one could wait. Transient."""


class StoreFull(StoreError):
    """The file system holding the database is full. Transient once space is freed."""


class StoreCorrupt(StoreError):
    """The file is not a readable DuckDB database (corrupt, truncated, or something else)."""


class CheckpointMoved(StoreError):
    """Another writer advanced this source's checkpoint first; nothing was written."""


def _is_lock_error(exc: Exception) -> bool:
    msg = str(exc)
    if "different configuration than existing connections" in msg:
        # This process already has the file open the other way (read-only vs read-write), e.g. a
        # `tail.follow` thread inside the sweep while a reader opens: as short-lived as a lock.
        return True
    return "lock" in msg.lower() and ("Conflicting" in msg or "Could not set lock" in msg)


_CORRUPT = ("not a valid DuckDB database file", "Corrupt database file", "Could not read enough bytes",
            "does not match stored checksum", "Serialization Error")


def explain(path: str | Path, exc: BaseException) -> StoreError | None:
    """The StoreError a DuckDB (or OS) error stands for, or None when it is none of ours (a bad
    query, a bug): full disk, corrupt file, lock held."""
    msg = str(exc)
    first = msg.strip().splitlines()[0] if msg.strip() else type(exc).__name__
    if "No space left on device" in msg or getattr(exc, "errno", None) == 28:
        return StoreFull(f"{path}: No space left on device while writing the database; free space "
                         "on its file system (nothing is lost: the logs are read again from the "
                         "last stored checkpoint)")
    if any(k in msg for k in _CORRUPT):
        return StoreCorrupt(f"{path}: the database file is corrupt or not a DuckDB database "
                            f"({first}); restore it from a backup, or move it away and re-ingest "
                            "the logs into a new --db")
    if isinstance(exc, (duckdb.IOException, duckdb.ConnectionException)) and _is_lock_error(exc):
        return StoreLocked(f"{path}: database is locked: another process (reader or writer) holds "
                           "it; try again, or find it with `fuser` and stop it")
    return None


@contextlib.contextmanager
def _gate(path: str, exclusive: bool, wait_s: float):
    """A lock file next to the database that decides who goes next: a writer holds it exclusively
    while it waits for the database, so readers arriving meanwhile queue behind it instead of
    keeping the file busy forever. Readers hold it (shared) only while they open the database.
    Yields False when the gate could not be taken in time (the caller then reports the lock)."""
    gate = path + ".gate"
    try:   # readers never create it: no writer has come yet, so there is nobody to queue behind
        fd = os.open(gate, (os.O_RDWR | os.O_CREAT if exclusive else os.O_RDONLY) | os.O_CLOEXEC,
                     0o666)
    except OSError:
        yield True   # no gate yet (reader), or a read-only directory: nobody writes there
        return
    try:
        deadline = time.monotonic() + wait_s
        delay = 0.002
        while True:
            try:
                fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 1.6, LOCK_RETRY_MAX_S)
        yield True
    finally:
        os.close(fd)   # releases the flock


def _locked(path: str, wait_s: float, who: str) -> StoreLocked:
    return StoreLocked(f"{path}: database is locked: another process (reader or writer) held it for "
                       f"more than {wait_s:.0f} s while this {who} waited; try again, or find it "
                       "with `fuser` and stop it")


def connect(path: str | Path, read_only: bool, wait_s: float | None = None,
            config: dict | None = None) -> duckdb.DuckDBPyConnection:
    """Open the database, retrying with jittered backoff while another process holds its lock.
    Readers get READER_CONFIG (see there); writers wait behind the gate (see `_gate`)."""
    path = str(path)
    if wait_s is None:
        wait_s = READ_WAIT_S if read_only else LOCK_WAIT_S
    try:
        st = os.stat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISREG(st.st_mode):
            raise StoreError(f"{path}: not a regular file (a FIFO, device or directory?); --db "
                             "names a DuckDB database file")
    if read_only and config is None:
        config = dict(READER_CONFIG)
    deadline = time.monotonic() + wait_s
    delay = 0.005
    who = "reader" if read_only else "writer"
    if read_only:
        while True:   # the gate only while opening; never while the query runs
            with _gate(path, False, max(0.0, deadline - time.monotonic())) as ok:
                if not ok:
                    raise _locked(path, wait_s, who)
                try:
                    return _open(path, read_only, config)
                except StoreLocked:
                    pass
            if time.monotonic() >= deadline:
                raise _locked(path, wait_s, who)
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 1.6, LOCK_RETRY_MAX_S)
    config = {**WRITER_CONFIG, **(config or {})}
    with _gate(path, True, wait_s) as ok:
        if not ok:
            raise _locked(path, wait_s, who)
        # a new database: a copy of the empty one (schema in place) instead of building it here
        placed = not os.path.lexists(path) and template.place(path, _build_empty)
        while True:
            try:
                return _open(path, read_only, config)
            except StoreLocked:
                if time.monotonic() >= deadline:
                    raise _locked(path, wait_s, who) from None
            except StoreError:
                if not placed:
                    raise
                template.forget(path)   # a damaged cached copy: build this one from scratch
                placed = False
                continue
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 1.6, LOCK_RETRY_MAX_S)


def _build_empty(path: str) -> None:
    """An empty database at this schema (`template`'s cached copy is built with it)."""
    con = duckdb.connect(path, config=WRITER_CONFIG)
    try:
        ensure_schema(con)
    finally:
        con.close()


def _open(path: str, read_only: bool, config: dict | None) -> duckdb.DuckDBPyConnection:
    try:
        return duckdb.connect(path, read_only=read_only, config=config or {})
    except duckdb.Error as exc:
        err = explain(path, exc)
        if err is None:
            parent = Path(path).parent
            hint = (f"; the directory {parent} does not exist: create it or pick another --db"
                    if not read_only and not parent.exists() else "")
            raise StoreError(f"{path}: cannot open database: {str(exc).splitlines()[0]}{hint}") from None
        raise err from None


@contextlib.contextmanager
def writer(path: str | Path, wait_s: float = LOCK_WAIT_S) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short-lived read-write connection with the schema in place. Keep the block short.

    Writers in one process take turns (DuckDB 2.0 fails two read-write connections of one process
    to one file with catalog write-write conflicts); other processes are kept out by the file lock.
    Raises StoreLocked after `wait_s` (LOCK_WAIT_S, longer than any specwatch reader may hold the
    file), StoreFull when the disk is full, StoreCorrupt for a damaged file; these errors raised
    inside the block are translated too (a transaction that failed is rolled back by DuckDB)."""
    with _process_lock(path):
        con = connect(path, read_only=False, wait_s=wait_s)
        try:
            ensure_schema(con)
            yield con
        except (duckdb.Error, OSError) as exc:
            err = explain(path, exc)
            if err is None:
                raise
            raise err from None
        finally:
            try:
                con.close()
            except duckdb.Error as exc:  # the checkpoint at close can hit a full disk
                err = explain(path, exc)
                if err is None:
                    raise
                raise err from None


_locks: dict[str, threading.RLock] = {}
_locks_guard = threading.Lock()


def _process_lock(path: str | Path) -> threading.RLock:
    key = os.path.realpath(path)
    with _locks_guard:
        return _locks.setdefault(key, threading.RLock())


@contextlib.contextmanager
def reader(path: str | Path, wait_s: float = READ_WAIT_S,
           config: dict | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only, sandboxed connection (READER_CONFIG, plus `config`: e.g. memory_limit). A
    missing file is an error that says how to create one."""
    if not Path(path).exists():
        raise StoreError(f"{path}: no such database; create it with `specwatch ingest LOG --db {path}` "
                         "or `specwatch run-sweep`")
    _bring_up_to_date(path)
    cfg = {**(config or {}), **READER_CONFIG}   # lock_configuration last: it locks what precedes
    con = connect(path, read_only=True, wait_s=wait_s, config=cfg)
    try:
        yield con
    finally:
        con.close()


_current: set[str] = set()   # the databases this process found at SCHEMA_VERSION


def _bring_up_to_date(path: str | Path) -> None:
    """A database written by an older specwatch lacks the newer views and columns its readers
    query: one writer burst (ensure_schema) brings it up to date, as the next ingest would. Once
    per process and file. Best effort: a file that is not specwatch's, one this process may not
    write, or one a writer holds (which brings it up to date itself) is read as it is."""
    key = os.path.realpath(path)
    if key in _current:
        return
    try:
        con = connect(path, read_only=True, config=dict(READER_CONFIG))
        try:
            version = con.execute("SELECT max(schema_version) FROM specwatch_meta").fetchall()[0][0]
        except duckdb.CatalogException:
            return                      # not specwatch's database: never written to from here
        finally:
            con.close()
        if version is not None and version < schema.SCHEMA_VERSION:
            with writer(path, wait_s=READ_WAIT_S):
                pass
    except StoreError:
        return
    _current.add(key)


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    # Runs at every write burst, while the lock is held: one cheap query when all is in place
    # (reading specwatch_meta directly takes ~0.5 ms; listing duckdb_tables() took ~5 ms).
    try:
        # fetchall: a result left open (fetchone) makes the caller's next con.register fail
        # with "connection has an unfinished result" (DuckDB 2.0)
        version = con.execute("SELECT max(schema_version) FROM specwatch_meta").fetchall()[0][0]
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
    summaries.rebuild(con)   # partial sums of every run's windows (new table or new definition)
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


def one_table(table: str, parts) -> pa.Table:
    """Column lists ({column: [values]}), an Arrow table in schema order, or a list of either ->
    one Arrow table in schema order, in one contiguous chunk. DuckDB inserts an Arrow table's
    chunks on its threads, each thread into row groups of its own, so a chunk of a few rows (a
    line the Python parser read beside the scanner's rows: a piece's or a chunk's last line, a
    captured line) leaves a partial row group that the next checkpoint re-packs (2M lines, one
    1-row chunk per INSERT: 2.0 s instead of 1.05 s to store, a 56 MB file instead of 30 MB).
    The parts are cast to one schema (`_common_schema`), then copied once (~15 ms per 245K
    decode windows)."""
    tables = _as_tables(table, parts)
    tables = [t for t in tables if t.num_rows] or tables[:1]
    if not tables:
        return arrow_table(table, {})
    if len(tables) == 1 and tables[0].column(0).num_chunks <= 1:
        return tables[0]
    target = _common_schema(table, tables)
    return pa.concat_tables([t if t.schema == target else t.cast(target) for t in tables]
                            ).unify_dictionaries().combine_chunks()


def stream_parts(table: str, parts) -> tuple[pa.Schema | None, list[pa.Table]]:
    """What `one_table` joins, cast to one schema but not copied into one chunk: (that schema,
    the tables that have rows); (None, []) when none has. For an Arrow stream, where a small
    part (the Python parser's rows) costs no partial row group, and copying a chunk's worth of
    scanner rows to append a few cost 0.07 s per 256 MB."""
    tables = [t for t in _as_tables(table, parts) if t.num_rows]
    if not tables:
        return None, []
    target = tables[0].schema if len(tables) == 1 else _common_schema(table, tables)
    return target, [t if t.schema == target else t.cast(target) for t in tables]


def _as_tables(table: str, parts) -> list[pa.Table]:
    """Column lists, an Arrow table, or a list of either -> Arrow tables (`arrow_table`)."""
    return [p if isinstance(p, pa.Table) else arrow_table(table, p)
            for p in (parts if isinstance(parts, list) else [parts])]


def _common_schema(table: str, tables: list[pa.Table]) -> pa.Schema:
    """The types the parts of one INSERT are cast to: per column, the one type all parts that are
    not all-NULL share (the scanner's dictionary-coded strings stay so, and only the few rows of
    the other parts are converted), else the schema's type. Every pair this meets casts without
    loss (null to any, string to dictionary, dictionary to string); a value that does not fit a
    type raises an Arrow error and the caller stores the chunk line by line."""
    fields = []
    for name, sql in schema.columns(schema.TABLES[table]):
        types = {t.schema.field(name).type for t in tables}
        typed = {ty for ty in types if ty != pa.null()}
        coded = {ty for ty in typed if pa.types.is_dictionary(ty)}
        if len(coded) == 1 and typed - coded <= {pa.string()}:
            fields.append(pa.field(name, coded.pop()))   # strings join the dictionary
        elif len(typed) == 1:
            fields.append(pa.field(name, typed.pop()))
        elif not typed:
            fields.append(pa.field(name, pa.null()))
        else:
            fields.append(pa.field(name, _ARROW[sql.split()[0]]))
    return pa.schema(fields)


def insert(con: duckdb.DuckDBPyConnection, table: str, rows) -> int:
    """Insert column lists ({column: [values]}), an Arrow table in schema order, or a list of
    either, in one INSERT (`one_table`)."""
    tbl = one_table(table, rows)
    if tbl.num_rows == 0:
        return 0
    insert_by_name(con, table, tbl)
    return tbl.num_rows


def insert_by_name(con: duckdb.DuckDBPyConnection, table: str,
                   rows: pa.Table | pa.RecordBatchReader) -> None:
    """One INSERT of an Arrow table or record-batch stream into `table`, column by name (a
    database made by an older version has its newer columns last: ALTER ADD)."""
    con.register("_specwatch_batch", rows)
    try:
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _specwatch_batch")
    finally:
        con.unregister("_specwatch_batch")


def checkpoint_at(con: duckdb.DuckDBPyConnection, source: schema.Source,
                   expect_offset: int) -> bool:
    """Whether the source has a stored row, after checking that its checkpoint is at
    `expect_offset` (no row: only 0 is expected); raises CheckpointMoved otherwise."""
    rows = con.execute("SELECT offset_bytes FROM sources WHERE source_id = ?",
                       [source.source_id]).fetchall()   # (a fetchone leaves the result open)
    row = rows[0] if rows else None
    if row is None and expect_offset != 0:
        raise CheckpointMoved(f"source {source.source_id} vanished")
    if row is not None and row[0] != expect_offset:
        raise CheckpointMoved(f"{source.path}: checkpoint is at {row[0]}, expected {expect_offset}")
    return row is not None


def set_checkpoint(con: duckdb.DuckDBPyConnection, source: schema.Source, exists: bool,
                    new_offset: int, new_lines_done: int, now: dt.datetime) -> None:
    """The source's row, with its checkpoint at `new_offset` and its fingerprints as `source`
    holds them."""
    if not exists:
        con.execute("INSERT INTO sources (source_id, path, device, inode, fingerprint, "
                    "fingerprint_len, offset_bytes, lines_done, first_seen, updated_at, "
                    "tail_fingerprint) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [source.source_id, source.path, source.device, source.inode,
                     source.fingerprint, source.fingerprint_len, new_offset, new_lines_done,
                     now, now, source.tail_fingerprint])
        return
    con.execute("UPDATE sources SET offset_bytes = ?, lines_done = ?, updated_at = ?, path = ?,"
                " fingerprint = ?, fingerprint_len = ?, device = ?, inode = ?, "
                "tail_fingerprint = ? WHERE source_id = ?",
                [new_offset, new_lines_done, now, source.path, source.fingerprint,
                 source.fingerprint_len, source.device, source.inode,
                 source.tail_fingerprint, source.source_id])


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
        set_checkpoint(con, source, checkpoint_at(con, source, expect_offset), new_offset,
                        new_lines_done, now)
        if run_id is not None:
            # before the rows: the from-scratch sum at attach then covers only what was stored
            # before this range (nothing, for a new source), and the fold below adds this range
            # to every run holding it, this one included (was: after the rows, summing the first
            # chunk twice: 0.2 s at the first 64 MB chunk)
            attach_source(con, run_id, source.source_id)
        n = 0
        windows = one_table("decode_windows", batches.get("decode_windows", []))
        for table, cols in batches.items():
            if table != "decode_windows":   # decode windows last: summed from the Arrow table
                n += insert(con, table, cols)
        # the runs holding this range get the new windows in their partial sums: by SQL over the
        # stored windows (the definition), or with numpy from the rows, computed on a thread
        # while DuckDB inserts them (it releases the GIL; 2M-line log: ~0.3 s of folds)
        if not windows.num_rows:
            pass   # nothing to insert or fold
        elif not numpy_fold():
            n += insert(con, "decode_windows", windows)
            summaries.fold_appended(con, source.source_id, expect_offset)
        else:
            reads = summaries.fold_reads(con, source.source_id, expect_offset)
            with ThreadPoolExecutor(1, thread_name_prefix="specwatch-fold") as pool:
                delta = pool.submit(summaries.fold_delta, reads, [windows])
                n += insert(con, "decode_windows", windows)
            summaries.merge_delta(con, delta.result())
        con.execute("COMMIT")
        return n
    except BaseException:
        rollback(con)
        raise


def numpy_fold() -> bool:
    """Run sums folded with numpy from the rows being stored (`summaries.fold_delta`), unless
    env SPECWATCH_SQL_FOLD=1 or the numpy fold no longer sums what the views define."""
    return os.environ.get("SPECWATCH_SQL_FOLD") != "1" and summaries.IN_STEP


def rollback(con: duckdb.DuckDBPyConnection) -> None:
    """Roll back the open transaction, if DuckDB still has one: after an I/O error (a full disk)
    DuckDB has already aborted it, and a failing ROLLBACK must not hide the error that matters."""
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass


def upsert_run(con: duckdb.DuckDBPyConnection, run: dict) -> None:
    """Create or update a run row; keys not given keep their stored values."""
    cols = schema.column_names("runs")
    unknown = set(run) - set(cols)
    if unknown:
        raise ValueError(f"unknown run fields: {sorted(unknown)}")
    # by name: an upgraded database has its ALTER-added columns last, not in schema order
    existing = con.execute(f"SELECT {', '.join(cols)} FROM runs WHERE run_id = ?",
                           [run["run_id"]]).fetchone()
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
    summaries.rebuild(con, run_id, source_id)   # this run's windows on this source, from scratch


def dumps(value) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)
