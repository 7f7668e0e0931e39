"""Run SQL against the store read-only, row-capped and time-limited; the named reports.

Everything the CLI and the dashboard show goes through here, so a reader never writes, never sees
a lock error (it waits briefly instead), and never recomputes a metric: metrics come from the
store's views (`store.VIEWS`).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import duckdb

from specwatch import store

DEFAULT_MAX_ROWS = 1000
DEFAULT_TIMEOUT_S = 30.0


class QueryError(RuntimeError):
    """The query failed: bad SQL, a write attempted, or it ran past its time limit."""


@dataclass
class Result:
    columns: list[str]
    rows: list[tuple]
    truncated: bool         # more rows existed than the cap
    max_rows: int

    def dicts(self) -> list[dict]:
        return [dict(zip(self.columns, r)) for r in self.rows]


def run_sql(db: str | Path, sql: str, params: list | None = None, max_rows: int = DEFAULT_MAX_ROWS,
            timeout_s: float = DEFAULT_TIMEOUT_S) -> Result:
    """Execute one statement read-only. Returns at most `max_rows` rows and says if it cut."""
    with store.reader(db) as con:
        return _execute(con, sql, params, max_rows, timeout_s)


def _execute(con: duckdb.DuckDBPyConnection, sql: str, params, max_rows: int,
             timeout_s: float) -> Result:
    timer = threading.Timer(timeout_s, con.interrupt)
    timer.start()
    try:
        cur = con.execute(sql, params or [])
        if cur.description is None:
            return Result([], [], False, max_rows)
        cols = [d[0] for d in cur.description]
        rows = cur.fetchmany(max_rows + 1)
    except duckdb.InterruptException:
        raise QueryError(f"query ran longer than {timeout_s:.0f} s and was stopped; add a WHERE or "
                         "LIMIT, or raise --timeout") from None
    except duckdb.Error as exc:
        msg = str(exc).splitlines()[0]
        if "read-only" in msg.lower():
            msg += " (specwatch sql is read-only; the store is written only by ingest/tail/run-sweep)"
        raise QueryError(msg) from None
    finally:
        timer.cancel()
    return Result(cols, rows[:max_rows], len(rows) > max_rows, max_rows)


REPORT_COLUMNS = [
    "run_name", "sweep_name", "config_name", "concurrency", "model_path", "speculative_algorithm",
    "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens", "tp_size",
    "dp_size", "windows", "accept_len", "accept_rate", "accept_rate_printed",
    "gen_throughput_tok_s", "output_tok_s", "ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50", "itl_ms_p99",
    "speedup_gen", "speedup_client", "baseline_run_id", "status", "failure_reason",
]


def report(db: str | Path, run: str | None = None, sweep: str | None = None,
           max_rows: int = 10_000) -> Result:
    """One row per run and server config from `config_summary` (see store.VIEWS for formulas)."""
    where, params = [], []
    if run:
        where.append("(run_id = ? OR run_name = ?)")
        params += [run, run]
    if sweep:
        where.append("sweep_name = ?")
        params.append(sweep)
    sql = (f"SELECT {', '.join(REPORT_COLUMNS)} FROM config_summary"
           + (f" WHERE {' AND '.join(where)}" if where else "")
           + " ORDER BY sweep_name NULLS FIRST, model_path, concurrency NULLS FIRST,"
             " speculative_algorithm NULLS FIRST, run_name, config_offset NULLS FIRST")
    return run_sql(db, sql, params, max_rows=max_rows)
