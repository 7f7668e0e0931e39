"""Run SQL against the store read-only, sandboxed, row-capped and time-limited; the named reports.

Everything the CLI and the dashboard show goes through here, so a reader never writes, never sees
a lock error (it waits briefly instead), and never recomputes a metric: metrics come from the
store's views (`store.VIEWS`).

The sandbox (what `specwatch sql` and the dashboard's SQL box get; issue 13, after datasette):
  - at most MAX_SQL_CHARS characters (DuckDB's parser needs ~3 us and up to ~2 KB per character
    of some texts, 35 s and 5 GB for 10 MB), refused before anything parses it;
  - exactly one statement, checked with DuckDB's own parser: SELECT / WITH / FROM / VALUES /
    DESCRIBE / SHOW / SUMMARIZE, EXPLAIN of one of those, or a read-only PRAGMA (READ_PRAGMAS);
    every other statement type, also one newer than this code or than DuckDB's Python enum
    (`UPDATE EXTENSIONS` is type 29, which it cannot name), is refused by its first keyword;
  - the connection cannot reach anything outside the database file, load extensions, scan Python
    variables or change settings (`store.READER_CONFIG`);
  - user SQL (`isolate=True`) runs in a child process with DuckDB's memory_limit and a resident-
    memory cap, interrupted at its time limit and killed shortly after if DuckDB does not stop
    (a single huge expression such as repeat('x', 2e9) ignores both interrupt and memory_limit);
    killing the child releases the database, so a reader never holds writers out past
    `MAX_TIMEOUT_S` (store.LOCK_WAIT_S is longer). The statement is parsed in that child too,
    and the caller watches the child's memory as well: parsing holds the child's GIL, so its own
    watchdog cannot run then.
"""
from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb

from specwatch.db import store

DEFAULT_MAX_ROWS = 1000
DEFAULT_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = store.MAX_READ_S
DEFAULT_MEMORY_MB = 1024
KILL_GRACE_S = 2.0          # after the interrupt, before the child is killed
MAX_SQL_CHARS = 100_000     # parsed in ~0.5 s and < 250 MB whatever the text (parens, lists)
MAX_ROWS = 1_000_000        # a row cap above this is refused: the rows cross a pipe, pickled
MAX_MEMORY_MB = (os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")) >> 20
_RSS_SLACK_MB = 512         # Python + DuckDB + Arrow resident before any query runs, with margin

ALLOWED_KINDS = "SELECT/WITH, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN or a read-only PRAGMA"
READ_PRAGMAS = frozenset({
    "table_info", "show", "show_tables", "show_tables_expanded", "show_databases", "database_list",
    "database_size", "storage_info", "version", "platform", "functions", "collations",
    "metadata_info", "user_agent"})


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


def check_sql(sql: str | None) -> str:
    """The one statement `sql` holds, if it is one the sandbox runs; else QueryError saying why."""
    hint = f"give one {ALLOWED_KINDS} statement, e.g. \"SELECT run_name, accept_len FROM config_summary\""
    if sql is None or not sql.strip():
        raise QueryError(f"empty query: {hint}")
    check_length(sql)
    try:
        stmts = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(str(exc).strip().splitlines()[0]) from None
    if not stmts:
        raise QueryError(f"no statement in the query (only comments or ';'): {hint}")
    if len(stmts) > 1:
        raise QueryError(f"{len(stmts)} statements given; specwatch runs exactly one per query "
                         f"({ALLOWED_KINDS})")
    stmt = stmts[0]
    text = stmt.query.strip().rstrip(";")
    kind = _kind(stmt)
    if kind == duckdb.StatementType.EXPLAIN:
        inner = re.sub(r"(?is)^\s*EXPLAIN\s+(ANALY[SZ]E\s+)?", "", text)
        try:
            inner_stmts = duckdb.extract_statements(inner)
        except duckdb.Error:
            inner_stmts = []
        if len(inner_stmts) == 1 and _kind(inner_stmts[0]) == duckdb.StatementType.SELECT:
            return text
    elif kind == duckdb.StatementType.SELECT:
        return text
    elif kind == duckdb.StatementType.PRAGMA and (
            m := re.match(r"(?is)\s*PRAGMA\s+([a-z_][a-z0-9_]*)", text)):
        if m.group(1).lower() in READ_PRAGMAS:
            return text
        raise QueryError(f"PRAGMA {m.group(1)} is not allowed: the store is read here; "
                         f"read-only PRAGMAs: {', '.join(sorted(READ_PRAGMAS))}")
    # Anything else by the word it starts with: DuckDB's type names mislead (INSTALL is LOAD,
    # IMPORT DATABASE is PRAGMA, PIVOT without IN is MULTI) and may be missing (None).
    word = re.match(r"[\s(]*([A-Za-z_]+)", re.sub(r"(?s)--[^\n]*|/\*.*?\*/", " ", text))
    name = word.group(1).upper() if word else getattr(kind, "name", "this kind of")
    raise QueryError(f"{name} statements are not allowed: specwatch sql is read-only and runs "
                     f"{ALLOWED_KINDS} only (the store is written only by ingest/tail/run-sweep)")


def _kind(stmt) -> duckdb.StatementType | None:
    """The statement's type, or None for one DuckDB's Python enum cannot name (`.type` raises
    ValueError `29 is not a valid StatementType` for UPDATE EXTENSIONS in DuckDB 1.1-2.0)."""
    try:
        return stmt.type
    except ValueError:
        return None


def check_length(sql: str) -> None:
    """QueryError unless `sql` is at most MAX_SQL_CHARS long (checked before any parsing)."""
    if len(sql) > MAX_SQL_CHARS:
        raise QueryError(f"query is {len(sql):,} characters; at most {MAX_SQL_CHARS:,} are "
                         "parsed (DuckDB needs seconds and gigabytes for megabytes of SQL): "
                         "shorten it, e.g. a long IN (...) list as a range or a join")


def run_sql(db: str | Path, sql: str, params: list | None = None, max_rows: int = DEFAULT_MAX_ROWS,
            timeout_s: float = DEFAULT_TIMEOUT_S, isolate: bool = False,
            memory_mb: int = DEFAULT_MEMORY_MB) -> Result:
    """Execute one statement read-only (see the module docstring). Returns at most `max_rows`
    rows and says if it cut. `isolate`: run it in a child process whose time and memory limits
    always hold (for SQL typed by a user), which also parses it; else in this process
    (specwatch's own queries)."""
    if not 0 < timeout_s <= MAX_TIMEOUT_S:   # (NaN fails too)
        raise QueryError(f"timeout must be between 0 and {MAX_TIMEOUT_S:.0f} s: a reader may hold "
                         "the database only that long, so that writers (tail, run-sweep) waiting "
                         "behind it never give up")
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or not 1 <= max_rows <= MAX_ROWS:
        raise QueryError(f"row cap {max_rows!r} is not in 1..{MAX_ROWS:,}; add LIMIT or aggregate "
                         "for fewer rows")
    if isolate:
        if not 64 <= memory_mb <= MAX_MEMORY_MB:
            raise QueryError(f"memory limit {memory_mb!r} MB is not in 64..{MAX_MEMORY_MB} (this "
                             "machine's memory)")
        if sql is not None:
            check_length(sql)   # before it is pickled; the child parses it
        return _run_child(dict(db=str(db), sql=sql, params=params, max_rows=max_rows,
                               timeout_s=timeout_s, memory_mb=memory_mb))
    text = check_sql(sql)
    with store.reader(db) as con:
        return _execute(con, text, params, max_rows, timeout_s)


def _execute(con: duckdb.DuckDBPyConnection, sql: str, params, max_rows: int,
             timeout_s: float, memory_mb: int | None = None) -> Result:
    timer = threading.Timer(timeout_s, con.interrupt)
    timer.start()
    try:
        cur = con.execute(sql, params or [])
        if cur.description is None:
            return Result([], [], False, max_rows)
        cols = [d[0] for d in cur.description]
        rows = cur.fetchmany(max_rows + 1)
    except duckdb.InterruptException:
        raise QueryError(f"query ran longer than {timeout_s:g} s and was stopped; add a WHERE or "
                         "LIMIT, or raise --timeout") from None
    except duckdb.OutOfMemoryException as exc:
        limit = f" of {memory_mb} MB" if memory_mb else ""
        raise QueryError(f"query needs more than its memory limit{limit} and was stopped "
                         f"({str(exc).splitlines()[0]}); aggregate more, select fewer columns, or "
                         "raise --memory-limit") from None
    except duckdb.Error as exc:
        err = store.explain("database", exc)
        if isinstance(err, store.StoreCorrupt):
            raise err from None
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "read-only" in msg.lower() or "disabled by configuration" in msg:
            msg += (" (specwatch sql reads only the database: no files, no network, no writes; the "
                    "store is written only by ingest/tail/run-sweep)")
        raise QueryError(msg) from None
    finally:
        timer.cancel()
    return Result(cols, rows[:max_rows], len(rows) > max_rows, max_rows)


def _run_child(req: dict) -> Result:
    """Run `req` in `python -m specwatch.db.query` and return its Result (or raise its error)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    repo = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen([sys.executable, "-m", "specwatch.db.query"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    budget = store.READ_WAIT_S + req["timeout_s"] + KILL_GRACE_S + 10.0  # + interpreter start
    stop, over = threading.Event(), []

    def watch():   # the child's own watchdog cannot run while a C call (the parser) holds its GIL
        while not stop.wait(0.05):
            if _rss(proc.pid) > (req["memory_mb"] + _RSS_SLACK_MB) << 20:
                over.append(True)
                proc.kill()
                return

    threading.Thread(target=watch, daemon=True).start()
    try:
        out, err = proc.communicate(pickle.dumps(req), timeout=budget)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise QueryError(f"query ran longer than {req['timeout_s']:g} s and was stopped") from None
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        stop.set()
    if over:
        raise _over_memory(req["memory_mb"])
    try:
        status, value = pickle.loads(out)
    except Exception:
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        raise QueryError(f"query process failed: {tail[0]}") from None
    if status == "ok":
        return value
    raise value


def _rss(pid: int | str = "self") -> int:
    """Resident bytes of a process (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return 0


def _over_memory(limit_mb: int) -> QueryError:
    return QueryError(f"query used more than {limit_mb + _RSS_SLACK_MB} MB of memory and was "
                      f"stopped (memory limit {limit_mb} MB); aggregate more, or raise "
                      "--memory-limit")


def _child_main() -> None:
    """The isolated reader: one request (pickled) on stdin, ("ok", Result) or ("err", exc) out."""
    req = pickle.loads(sys.stdin.buffer.read())
    out = sys.stdout.buffer
    done = threading.Lock()    # the first of main thread and watchdog to answer wins

    def answer(status, value, code: int) -> None:
        if done.acquire(blocking=False):
            out.write(pickle.dumps((status, value)))
            out.flush()
            os._exit(code)

    parent = os.getppid()
    limit_mb = req["memory_mb"]
    rss_cap = (limit_mb + _RSS_SLACK_MB) << 20
    # Until the database is open: its wait plus the query's; from then on the query's alone.
    kill_at = [time.monotonic() + store.READ_WAIT_S + req["timeout_s"] + KILL_GRACE_S]

    def watchdog():
        while True:
            time.sleep(0.02)
            if os.getppid() != parent:
                os._exit(3)          # the caller is gone: nobody wants the answer
            if _rss() > rss_cap:
                answer("err", _over_memory(limit_mb), 4)
            if time.monotonic() > kill_at[0]:
                answer("err", QueryError(f"query ran longer than {req['timeout_s']:g} s and was "
                                         "stopped (it did not answer the interrupt)"), 5)

    threading.Thread(target=watchdog, daemon=True).start()
    try:
        sql = check_sql(req["sql"])    # here, under this process's limits, not in the caller
        cfg = {"memory_limit": f"{limit_mb}MB", "threads": 2, "max_temp_directory_size": "0KB"}
        with store.reader(req["db"], config=cfg) as con:
            kill_at[0] = time.monotonic() + req["timeout_s"] + KILL_GRACE_S
            res = _execute(con, sql, req["params"], req["max_rows"], req["timeout_s"],
                           memory_mb=limit_mb)
        answer("ok", res, 0)
    except (QueryError, store.StoreError) as exc:
        answer("err", exc, 0)
    except BaseException as exc:  # noqa: BLE001 - tell the parent, in one line
        answer("err", QueryError(f"query failed: {type(exc).__name__}: {exc}"), 0)


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

# ------------------------------------------------------------------------------- verdicts

# The columns of `config_stats` (stats.py defines every one, with its formula) in reading order:
# what a person compares first, then the evidence behind it, then identity.
STATS_COLUMNS = [
    "sweep_name", "config", "concurrency", "request_rate", "rate_search_only", "repeats",
    "gen_repeats", "runs_failed", "runs_interrupted",
    "accept_len", "accept_len_sd", "accept_len_min", "accept_len_max",
    "accept_len_request_weighted", "accept_rate", "accept_rate_printed",
    "output_tok_s_mean", "output_tok_s_median", "output_tok_s_sd", "output_tok_s_cv",
    "output_tok_s_ci_low", "output_tok_s_ci_high",
    "speedup", "speedup_ci_low", "speedup_ci_high", "speedup_basis", "speedup_method",
    "speedup_df",
    "verdict", "verdict_reason", "baseline_match", "baseline_config", "baseline_sweep_name",
    "baseline_repeats", "baseline_output_tok_s_mean",
    "gen_throughput_tok_s_mean", "baseline_gen_throughput_tok_s_mean",
    "ttft_ms_p50_mean", "ttft_ms_p99_mean", "itl_ms_p50_mean", "itl_ms_p99_mean",
    "joules_per_output_token_mean", "joules_per_token_vs_baseline", "energy_repeats",
    "baseline_joules_per_output_token_mean",
    "config_name", "is_baseline", "simulated", "speculative_algorithm", "speculative_num_steps",
    "speculative_eagle_topk", "speculative_num_draft_tokens", "model_path", "draft_model_path",
    "tp_size", "dp_size", "pp_size", "sglang_version", "engine", "sampling_fingerprint",
    "failure_reasons", "group_id", "baseline_group_id",
]
WINNER_COLUMNS = [
    "sweep_name", "concurrency", "request_rate", "winner", "note", "losers", "configs",
    "best_config",
    "best_speedup", "best_speedup_ci_low", "best_speedup_ci_high", "runner_up", "simulated",
]


@dataclass
class StatsReport:
    """Per (config, concurrency) statistics and verdicts (`config_stats`), the winner of each
    sweep and concurrency (`concurrency_winners`), and the per-run rows they pool (`report`)."""

    configs: Result
    winners: Result
    runs: Result
    # traffic and SLOs (slo_views.py): per group under an SLO, per config its max rate under it
    # and its crossover load, adaptive-repeat status, accept length / speedup by category, and
    # per open-loop group whether its sends kept the arrival schedule
    slo: Result | None = None
    max_rate: Result | None = None
    crossover: Result | None = None
    repeats: Result | None = None
    categories: Result | None = None
    schedule: Result | None = None

    @property
    def single_repeat(self) -> bool:
        """Some compared config has fewer than 2 repeats (or its baseline has): no interval."""
        return any(r["verdict"] == "unclear" and r["speedup"] is not None
                   and r["speedup_ci_low"] is None for r in self.configs.dicts())

    def payload(self) -> dict:
        """The JSON document of `specwatch report --format json`."""
        out = {"configs": self.configs.dicts(), "concurrency": self.winners.dicts(),
               "runs": self.runs.dicts()}
        for key in ("slo", "max_rate", "crossover", "repeats", "categories", "schedule"):
            res = getattr(self, key)
            out[key] = res.dicts() if res is not None else []
        return out


def stats_report(db: str | Path, run: str | None = None, sweep: str | None = None,
                 max_rows: int = 10_000) -> StatsReport:
    """Statistics over repeats with 95% intervals, verdicts and winners (stats.py, config_stats).
    `run` keeps the groups that contain that run (name or id); `sweep` one sweep."""
    where, params = [], []
    if run:
        where.append("group_id IN (SELECT group_id FROM run_metrics"
                     " WHERE run_id = ? OR run_name = ?)")
        params += [run, run]
    if sweep:
        where.append("sweep_name = ?")
        params.append(sweep)
    cond = f" WHERE {' AND '.join(where)}" if where else ""
    sql = (f"SELECT {', '.join(STATS_COLUMNS)} FROM config_stats{cond}"
           " ORDER BY sweep_name NULLS FIRST, concurrency NULLS LAST, request_rate NULLS FIRST,"
           " is_baseline DESC, config,"
           " group_id")
    wsql = (f"SELECT {', '.join(WINNER_COLUMNS)} FROM concurrency_winners"
            + (" WHERE sweep_name = ?" if sweep else "")
            + " ORDER BY sweep_name, concurrency NULLS LAST, request_rate")
    with store.reader(db) as con:
        configs = _execute(con, sql, params, max_rows, DEFAULT_TIMEOUT_S)
        winners = _execute(con, wsql, [sweep] if sweep else [], max_rows, DEFAULT_TIMEOUT_S)
        if run:  # winners of the sweeps the kept groups belong to
            keep = {(r["sweep_name"], r["concurrency"], r["request_rate"])
                    for r in configs.dicts()}
            winners.rows = [w for w in winners.rows if (w[0], w[1], w[2]) in keep]
        # the per-config views have no group_id: the configs of the kept groups
        per_config = cond.replace("group_id IN (SELECT group_id FROM run_metrics",
                                  "(sweep_name, config) IN (SELECT sweep_name, config_name "
                                  "FROM run_metrics")
        traffic = {key: _execute(con, f"SELECT * FROM {view}"
                                 f"{per_config if view.startswith('config_') else cond} "
                                 f"ORDER BY {order}", params, max_rows, DEFAULT_TIMEOUT_S)
                   for key, view, order in SLO_REPORTS}
    return StatsReport(configs, winners, report(db, run=run, sweep=sweep, max_rows=max_rows),
                       **traffic)


# (StatsReport field, slo_views view, order): what report adds for traffic and SLOs; each
# view has sweep_name, and group_id (config_* views: sweep_name, config) for the filters.
SLO_REPORTS = [
    ("slo", "group_slo", "sweep_name, config, concurrency NULLS LAST, request_rate"),
    ("max_rate", "config_max_rate", "sweep_name, is_baseline DESC, config"),
    ("crossover", "config_crossover", "sweep_name, load_kind, config"),
    ("repeats", "group_repeats", "sweep_name, config, concurrency NULLS LAST, request_rate"),
    ("categories", "category_stats", "sweep_name, category, is_baseline DESC, config, "
                                     "concurrency NULLS LAST, request_rate"),
    ("schedule", "group_schedule", "sweep_name, request_rate, is_baseline DESC, config"),
]



# What each `baseline_match` (stats.py, group_baselines) means for the speedup, for doctor.
BASELINE_MATCH_NOTES = {
    "other-sweep": "its baseline was measured in another sweep ({baseline_sweep_name}): trust the "
                   "speedup only if both ran on the same machine, software and load; add a "
                   "baseline to this sweep to be sure",
    "same-log": "its baseline is another server config in the same log",
    "other-log": "its baseline comes from another log file: the two may have run on different "
                 "machines, loads or days",
    "other-version": "its baseline ran another SGLang version",
    "other-day": "its baseline was measured on another day",
    "other-machine": "its baseline ran on another machine",
    "sampling-unknown": "the sampling settings of one side are unknown (an ingested log has no "
                        "sampling_fingerprint): it may have generated different tokens",
    "simulated-vs-real": "not compared: its acceptance is simulated (SGLANG_SIMULATE_ACC_LEN or "
                         "vLLM synthetic rejection sampling) and the only baseline's is real",
    "real-vs-simulated": "not compared: the only baseline ran with simulated acceptance",
    "sampling-differs": "not compared: the only baseline of the same model, TP/DP/PP and "
                        "concurrency ran other sampling settings (differs in: {differs}); measure "
                        "a baseline with the same workload",
}


def baseline_match_notes(db: str | Path, run: str | None = None) -> list[dict]:
    """One note per (config, concurrency) whose speedup is not against a same-sweep baseline:
    {sweep_name, config, concurrency, baseline_match, baseline_config, message}. For doctor,
    which lists them; the dashboard may show the same messages."""
    from specwatch.db import sampling

    where, params = ["baseline_match NOT IN ('self', 'same-sweep')"], []
    if run:
        where.append("s.group_id IN (SELECT group_id FROM run_metrics WHERE run_id = ? OR "
                     "run_name = ?)")
        params += [run, run]
    sql = ("SELECT s.sweep_name, s.config, s.concurrency, s.baseline_match, s.baseline_config,"
           " s.baseline_sweep_name, s.sampling_fingerprint,"
           " d.sampling_fingerprint AS other_fingerprint"
           " FROM config_stats s LEFT JOIN run_groups d"
           "   ON d.group_id = s.differing_baseline_group_id"
           f" WHERE {' AND '.join(where)} ORDER BY s.sweep_name, s.concurrency, s.config")
    notes = []
    for r in run_sql(db, sql, params, max_rows=10_000).dicts():
        differs = ", ".join(sampling.fingerprint_diff(r["sampling_fingerprint"],
                                                      r["other_fingerprint"])) or "?"
        parts = [BASELINE_MATCH_NOTES.get(kind, kind).format(
                     baseline_sweep_name=r["baseline_sweep_name"], differs=differs)
                 for kind in r["baseline_match"].split("+") if kind not in ("same-sweep",)]
        notes.append({k: r[k] for k in ("sweep_name", "config", "concurrency", "baseline_match",
                                        "baseline_config")} | {"message": "; ".join(parts)})
    return notes

if __name__ == "__main__":
    # Run the module's own copy (not __main__'s), so Result and the errors unpickle as
    # specwatch.db.query classes in the parent.
    from specwatch.db import query
    query._child_main()

