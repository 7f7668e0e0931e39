"""Owns the DuckDB file: schema, idempotent appends with their checkpoint, derived views.

Concurrency (ARCHITECTURE decision 2): DuckDB lets one process hold a database file for writing and
no other process open it meanwhile. Writers therefore hold the file only for short bursts
(`writer()`), readers open it read-only (`reader()`), and both retry briefly while another process
holds the lock. Because the log file is the buffer, a writer that cannot get the lock in time just
ingests more next time.

Exactly-once: rows from a source are appended in the same transaction that advances the source's
checkpoint, and only if the checkpoint is still where the rows were read from (a compare-and-set),
so two writers racing on one file cannot store a line twice.

Metric formulas live in `VIEWS` below and nowhere else; the CLI, report and dashboard read them.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import json
import random
import time
from pathlib import Path
from typing import Iterator

import duckdb
import pyarrow as pa

from specwatch import schema

DEFAULT_DB = "specwatch.duckdb"
LOCK_WAIT_S = 10.0

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
            delay = min(delay * 1.6, 0.1)


@contextlib.contextmanager
def writer(path: str | Path, wait_s: float = LOCK_WAIT_S) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short-lived read-write connection with the schema in place. Keep the block short."""
    con = connect(path, read_only=False, wait_s=wait_s)
    try:
        ensure_schema(con)
        yield con
    finally:
        con.close()


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
    have = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'specwatch_meta'"
                       ).fetchone()[0]
    if have:
        version = con.execute("SELECT max(schema_version) FROM specwatch_meta").fetchone()[0]
        if version == schema.SCHEMA_VERSION:
            return
        if version is not None and version > schema.SCHEMA_VERSION:
            raise StoreError(f"database schema version {version} is newer than this specwatch "
                             f"({schema.SCHEMA_VERSION}); upgrade specwatch")
    con.execute("BEGIN")
    for table in schema.TABLES:
        con.execute(schema.ddl(table))
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


def insert(con: duckdb.DuckDBPyConnection, table: str, rows: dict[str, list]) -> int:
    tbl = arrow_table(table, rows)
    if tbl.num_rows == 0:
        return 0
    con.register("_specwatch_batch", tbl)
    try:
        con.execute(f"INSERT INTO {table} SELECT * FROM _specwatch_batch")
    finally:
        con.unregister("_specwatch_batch")
    return tbl.num_rows


def append_with_checkpoint(con: duckdb.DuckDBPyConnection, source: schema.Source, expect_offset: int,
                           new_offset: int, new_lines_done: int, batches: dict[str, dict[str, list]]
                           ) -> int:
    """Insert `batches` ({table: columns}) and move the source checkpoint from `expect_offset` to
    `new_offset`, atomically. Raises CheckpointMoved (and writes nothing) if another writer moved it."""
    now = dt.datetime.now()
    con.execute("BEGIN")
    try:
        row = con.execute("SELECT offset_bytes FROM sources WHERE source_id = ?",
                          [source.source_id]).fetchone()
        if row is None:
            if expect_offset != 0:
                raise CheckpointMoved(f"source {source.source_id} vanished")
            con.execute("INSERT INTO sources VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [source.source_id, source.path, source.device, source.inode,
                         source.fingerprint, source.fingerprint_len, new_offset, new_lines_done,
                         now, now])
        elif row[0] != expect_offset:
            raise CheckpointMoved(f"{source.path}: checkpoint is at {row[0]}, expected {expect_offset}")
        else:
            con.execute("UPDATE sources SET offset_bytes = ?, lines_done = ?, updated_at = ?, path = ?,"
                        " fingerprint = ?, fingerprint_len = ?, device = ?, inode = ? "
                        "WHERE source_id = ?",
                        [new_offset, new_lines_done, now, source.path, source.fingerprint,
                         source.fingerprint_len, source.device, source.inode, source.source_id])
        n = 0
        for table, cols in batches.items():
            n += insert(con, table, cols)
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


# ---------------------------------------------------------------------------------------------
# Derived views: every metric specwatch reports is defined here, once, with its formula.
#
# decode_windows_scoped: each decode window of each run (via run_sources byte ranges) with the
#   effective server config (the latest server_args line before it in the same file, an ASOF join)
#   and `after_idle`: the window is the first of its (run, file, config, DP rank, PP rank) or
#   follows the previous one by more than 60 s. Such a window's gen throughput divides by a time
#   that includes warm-up/idle, and its accept length can mix in steps from before the run
#   (LOG_FORMATS §4.3), so summaries drop it unless it is the only window of its rank.
#
# config_summary (one row per run and server config):
#   accept_len          = Σ(accept_len_w · running_req_w) / Σ running_req_w over kept windows.
#                         A window's accept_len is Σ tokens / Σ batch sizes over its steps; weighting
#                         by the batch size printed at the window's end approximates Σ batch sizes.
#   accept_rate         = (accept_len − 1) / (speculative_num_draft_tokens − 1): the fraction of
#                         proposed draft tokens accepted (SGLang 0.5.11+ definition), recomputed from
#                         accept_len so that logs of every version compare. NULL without draft tokens.
#   accept_rate_printed = the same weighting over the printed `accept rate` (its definition depends on
#                         the SGLang version: 0.5.4-0.5.5 /(steps+1), 0.5.6-0.5.10 /draft_tokens incl.
#                         bonus, 0.5.11+ as accept_rate). For display only.
#   gen_throughput_tok_s = Σ over DP ranks of the mean `gen throughput` of that rank's kept windows
#                         (each scheduler prints its own; system throughput is their sum).
#   output_tok_s, ttft/itl/tpot/e2e percentiles: client-side, from the run's load (sweeps only).
#   baseline_run_id     = a run of the same model without speculation: same sweep and concurrency
#                         preferred, then same concurrency, then any; latest first.
#   speedup_gen         = gen_throughput_tok_s / baseline's gen_throughput_tok_s.
#   speedup_client      = output_tok_s / baseline's output_tok_s (equal concurrency only).
# ---------------------------------------------------------------------------------------------
IDLE_GAP_S = 60

VIEWS = [
    f"""
CREATE OR REPLACE VIEW decode_windows_scoped AS
WITH scoped AS (
  SELECT rs.run_id, d.*
  FROM decode_windows d
  JOIN run_sources rs
    ON d.source_id = rs.source_id AND d.byte_offset >= rs.offset_from
   AND (rs.offset_to IS NULL OR d.byte_offset < rs.offset_to)
), cfg AS (
  SELECT s.*, c.byte_offset AS config_offset,
         c.model_path AS cfg_model_path, c.draft_model_path AS cfg_draft_model_path,
         c.speculative_algorithm AS cfg_speculative_algorithm,
         c.speculative_num_steps AS cfg_speculative_num_steps,
         c.speculative_eagle_topk AS cfg_speculative_eagle_topk,
         c.speculative_num_draft_tokens AS cfg_speculative_num_draft_tokens,
         c.tp_size AS cfg_tp_size, c.dp_size AS cfg_dp_size,
         c.decode_log_interval AS cfg_decode_log_interval, c.sglang_version AS cfg_sglang_version,
         c.disable_cuda_graph AS cfg_disable_cuda_graph
  FROM scoped s ASOF LEFT JOIN server_configs c
    ON s.source_id = c.source_id AND s.byte_offset >= c.byte_offset
)
SELECT *,
  (row_number() OVER w = 1
   OR coalesce(date_diff('second', lag(ts) OVER w, ts) > {IDLE_GAP_S}, false)) AS after_idle,
  count(*) OVER (PARTITION BY run_id, source_id, config_offset, dp_rank, pp_rank) AS rank_windows
FROM cfg
WINDOW w AS (PARTITION BY run_id, source_id, config_offset, dp_rank, pp_rank ORDER BY byte_offset)
""",
    """
CREATE OR REPLACE VIEW config_summary AS
WITH kept AS (
  SELECT * FROM decode_windows_scoped WHERE NOT after_idle OR rank_windows = 1
), per_rank AS (
  SELECT run_id, source_id AS config_source_id, config_offset, dp_rank,
    any_value(cfg_model_path) AS cfg_model_path,
    any_value(cfg_draft_model_path) AS cfg_draft_model_path,
    any_value(cfg_speculative_algorithm) AS cfg_speculative_algorithm,
    any_value(cfg_speculative_num_steps) AS cfg_speculative_num_steps,
    any_value(cfg_speculative_eagle_topk) AS cfg_speculative_eagle_topk,
    any_value(cfg_speculative_num_draft_tokens) AS cfg_speculative_num_draft_tokens,
    any_value(cfg_tp_size) AS cfg_tp_size, any_value(cfg_dp_size) AS cfg_dp_size,
    any_value(cfg_sglang_version) AS cfg_sglang_version,
    count(*) AS windows,
    sum(accept_len * running_req) AS al_num,
    sum(CASE WHEN accept_len IS NOT NULL THEN running_req END) AS al_den,
    sum(accept_rate_printed * running_req) AS ar_num,
    sum(CASE WHEN accept_rate_printed IS NOT NULL THEN running_req END) AS ar_den,
    avg(gen_throughput_tok_s) AS rank_gen_tok_s,
    bool_or(graph_enabled) AS graph_enabled
  FROM kept GROUP BY ALL
), per_cfg AS (
  SELECT run_id, config_source_id, config_offset,
    any_value(cfg_model_path) AS cfg_model_path,
    any_value(cfg_draft_model_path) AS cfg_draft_model_path,
    any_value(cfg_speculative_algorithm) AS cfg_speculative_algorithm,
    any_value(cfg_speculative_num_steps) AS cfg_speculative_num_steps,
    any_value(cfg_speculative_eagle_topk) AS cfg_speculative_eagle_topk,
    any_value(cfg_speculative_num_draft_tokens) AS cfg_speculative_num_draft_tokens,
    any_value(cfg_tp_size) AS cfg_tp_size, any_value(cfg_dp_size) AS cfg_dp_size,
    any_value(cfg_sglang_version) AS cfg_sglang_version,
    count(*) AS dp_ranks,
    sum(windows) AS windows,
    sum(al_num) / nullif(sum(al_den), 0) AS accept_len,
    sum(ar_num) / nullif(sum(ar_den), 0) AS accept_rate_printed,
    sum(rank_gen_tok_s) AS gen_throughput_tok_s,
    bool_or(graph_enabled) AS graph_enabled
  FROM per_rank GROUP BY ALL
), rows AS (
  SELECT
    r.run_id, r.run_name, r.origin, r.sweep_name, r.config_name, r.engine, r.concurrency,
    r.repeat_idx, r.status, r.failure_reason, r.created_at,
    p.config_source_id, p.config_offset,
    coalesce(p.cfg_model_path, r.model_path) AS model_path,
    coalesce(p.cfg_draft_model_path, r.draft_model_path) AS draft_model_path,
    CASE WHEN p.config_offset IS NOT NULL THEN p.cfg_speculative_algorithm
         ELSE r.speculative_algorithm END AS speculative_algorithm,
    coalesce(p.cfg_speculative_num_steps, r.speculative_num_steps) AS speculative_num_steps,
    coalesce(p.cfg_speculative_eagle_topk, r.speculative_eagle_topk) AS speculative_eagle_topk,
    coalesce(p.cfg_speculative_num_draft_tokens, r.speculative_num_draft_tokens)
      AS speculative_num_draft_tokens,
    coalesce(p.cfg_tp_size, r.tp_size) AS tp_size,
    coalesce(p.cfg_dp_size, r.dp_size) AS dp_size,
    p.cfg_sglang_version AS sglang_version,
    r.aux_layer_ids,
    p.dp_ranks, coalesce(p.windows, 0) AS windows,
    p.accept_len, p.accept_rate_printed, p.gen_throughput_tok_s, p.graph_enabled,
    r.output_tok_s, r.request_per_s, r.requests_ok, r.requests_failed,
    r.ttft_ms_p50, r.ttft_ms_p90, r.ttft_ms_p99, r.itl_ms_p50, r.itl_ms_p90, r.itl_ms_p99,
    r.tpot_ms_p50, r.tpot_ms_p99, r.e2e_ms_p50, r.e2e_ms_p99,
    r.client_accept_len, r.server_accept_len
  FROM runs r LEFT JOIN per_cfg p USING (run_id)
), with_rate AS (
  SELECT *,
    CASE WHEN speculative_algorithm IS NOT NULL AND speculative_num_draft_tokens > 1
         THEN (accept_len - 1) / (speculative_num_draft_tokens - 1) END AS accept_rate
  FROM rows
), matched AS (
  SELECT s.run_id, s.config_offset, b.run_id AS baseline_run_id,
    b.gen_throughput_tok_s AS baseline_gen_tok_s, b.output_tok_s AS baseline_output_tok_s,
    row_number() OVER (PARTITION BY s.run_id, s.config_offset ORDER BY
      (b.sweep_name IS NOT DISTINCT FROM s.sweep_name) DESC,
      (b.concurrency IS NOT DISTINCT FROM s.concurrency) DESC,
      b.created_at DESC, b.run_id) AS pick
  FROM with_rate s JOIN with_rate b
    ON b.speculative_algorithm IS NULL AND b.model_path = s.model_path
   AND coalesce(b.status, 'ok') = 'ok'
   AND (b.gen_throughput_tok_s IS NOT NULL OR b.output_tok_s IS NOT NULL)
)
SELECT w.*, m.baseline_run_id,
  w.gen_throughput_tok_s / nullif(m.baseline_gen_tok_s, 0) AS speedup_gen,
  CASE WHEN (SELECT concurrency FROM runs WHERE run_id = m.baseline_run_id)
            IS NOT DISTINCT FROM w.concurrency
       THEN w.output_tok_s / nullif(m.baseline_output_tok_s, 0) END AS speedup_client
FROM with_rate w LEFT JOIN matched m
  ON m.run_id = w.run_id AND m.config_offset IS NOT DISTINCT FROM w.config_offset AND m.pick = 1
""",
]
