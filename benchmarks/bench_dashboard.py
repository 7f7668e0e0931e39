"""Dashboard benchmark: server-side time of the comparison view's first render at 1M decode windows.

Builds a store in seconds with DuckDB `INSERT ... SELECT FROM range(...)` (sources, runs,
run_sources, server_configs, decode_windows: 4 sweeps x (baseline + 4 EAGLE-3 configs) x 4
concurrencies, 2 DP ranks, windows spread evenly), then times, with Streamlit's cache empty:
  - each query the Compare view issues, through `specwatch.db.query.run_sql` (what the server waits on);
  - the whole first render of the Compare view under Streamlit's AppTest (queries + pandas + Altair).
Target (issue 7): comparison view's first render under 2 s of server-side query time; issue 16:
at most 1 s at 10M windows (run_metrics reads run_window_sums, kept up to date as windows are
stored, instead of every window); issue 32: the whole first render at most 1 s median at 10M
(the pooled views read run_metrics once per query: stats.py `_once`).

Example: python benchmarks/bench_dashboard.py --windows 1000000 --repeat 3
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "dashboards" / "app.py"

SWEEPS, CONFIGS, CONCURRENCIES, DP = 4, 5, (1, 4, 16, 64), 2   # config 0 of each sweep = baseline


def build(db: Path, windows: int) -> int:
    """A store with `windows` decode windows over SWEEPS*CONFIGS*len(CONCURRENCIES) runs."""
    from specwatch.db import store, summaries
    runs = SWEEPS * CONFIGS * len(CONCURRENCIES)
    nc = len(CONCURRENCIES)
    conc_list = "[" + ",".join(map(str, CONCURRENCIES)) + "]"
    with store.writer(db) as con:
        # run i: sweep i // (CONFIGS*nc), config (i // nc) % CONFIGS, concurrency index i % nc
        con.execute(f"""
        INSERT INTO runs (run_id, run_name, origin, created_at, sweep_name, config_name, engine,
          is_baseline, concurrency, repeat_idx, status, output_tok_s, ttft_ms_p50, ttft_ms_p99,
          itl_ms_p50, itl_ms_p99, requests_ok, requests_failed)
        SELECT 'run' || i, 'sweep' || (i // {CONFIGS * nc}) || '-cfg' || ((i // {nc}) % {CONFIGS})
            || '-c' || {conc_list}[i % {nc} + 1], 'sweep',
          TIMESTAMP '2026-11-01 00:00:00' + to_minutes(i::BIGINT),
          'sweep' || (i // {CONFIGS * nc}),
          CASE WHEN (i // {nc}) % {CONFIGS} = 0 THEN 'baseline' ELSE 'eagle3-cfg' || ((i // {nc}) % {CONFIGS}) END,
          'sglang', (i // {nc}) % {CONFIGS} = 0, {conc_list}[i % {nc} + 1], 0, 'ok',
          100.0 * {conc_list}[i % {nc} + 1] * (1 + ((i // {nc}) % {CONFIGS}) * 0.2),
          40 + i % 7, 120 + i % 11, 8 + i % 3, 30 + i % 5, 64, 0
        FROM range({runs}) t(i)""")
        con.execute(f"""
        INSERT INTO sources (source_id, path, device, inode, fingerprint, fingerprint_len,
          offset_bytes, lines_done, first_seen, updated_at)
        SELECT 'src' || i, '/bench/run' || i || '.log', 0, i, 'fp' || i, 1024,
          0, 0, now()::TIMESTAMP, now()::TIMESTAMP FROM range({runs}) t(i)""")
        con.execute(f"INSERT INTO run_sources SELECT 'run' || i, 'src' || i, 0, NULL FROM range({runs}) t(i)")
        con.execute(f"""
        INSERT INTO server_configs (source_id, byte_offset, line_no, ts, form, model_path,
          draft_model_path, speculative_algorithm, speculative_num_steps, speculative_eagle_topk,
          speculative_num_draft_tokens, tp_size, dp_size, decode_log_interval, sglang_version)
        SELECT 'src' || i, 0, 1, TIMESTAMP '2026-11-01 00:00:00', 'dict', '/models/llama-8b',
          CASE WHEN (i // {nc}) % {CONFIGS} > 0 THEN '/models/eagle3-8b' END,
          CASE WHEN (i // {nc}) % {CONFIGS} > 0 THEN 'EAGLE3' END,
          CASE WHEN (i // {nc}) % {CONFIGS} > 0 THEN 3 END,
          CASE WHEN (i // {nc}) % {CONFIGS} > 0 THEN 1 END,
          CASE WHEN (i // {nc}) % {CONFIGS} > 0 THEN 4 END, 1, {DP}, 40, '0.5.23'
        FROM range({runs}) t(i)""")
        # window j of run r = j % runs: byte offsets ascending per source, alternating DP ranks
        con.execute(f"""
        INSERT INTO decode_windows (source_id, byte_offset, line_no, ts, ts_text, rank, dp_rank,
          tp_rank, forward_iter, running_req, kv_tokens, token_usage_frac, accept_len,
          accept_rate_printed, graph_enabled, graph_device, gen_throughput_tok_s, queue_req)
        SELECT 'src' || (j % {runs}), 1000 + (j // {runs}) * 200, 2 + j // {runs},
          TIMESTAMP '2026-11-01 00:00:01' + to_seconds((j // {runs})::BIGINT),
          NULL, 'DP' || ((j // {runs}) % {DP}), (j // {runs}) % {DP}, 0, j // {runs},
          8 + j % 5, 4096, 0.3,
          CASE WHEN ((j % {runs}) // {nc}) % {CONFIGS} > 0 THEN 1.2 + ((j % {runs}) // {nc}) % {CONFIGS} * 0.5 + (j % 10) * 0.01 END,
          CASE WHEN ((j % {runs}) // {nc}) % {CONFIGS} > 0 THEN 0.3 + (j % 10) * 0.01 END,
          true, 'cuda', 900 + (j % 97), 0
        FROM range({windows}) t(j)""")
        n = con.execute("SELECT count(*) FROM decode_windows").fetchone()[0]
        # filled by SQL, not through the store's append path: sum every run's windows once, as a
        # schema upgrade does (ingest/tail/sweeps keep them up to date as they store windows)
        t = time.perf_counter()
        summaries.rebuild(con)
        print(f"run_window_sums rebuilt from scratch in {time.perf_counter() - t:.1f} s "
              f"({con.execute('SELECT count(*) FROM run_window_sums').fetchone()[0]} partitions)")
    return n


def _timed(fn):
    """(result, wall s, CPU s of this process, all DuckDB threads included)."""
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def time_queries(db: Path) -> list[tuple[str, float, float, int]]:
    """The Compare view's queries in page order, each through query.run_sql (a fresh read-only
    connection, as the dashboard does): [(step, wall s, CPU s, rows)]."""
    sys.path.insert(0, str(APP.parent))
    import queries as Q

    from specwatch.db import query
    out = []
    res, w, c = _timed(lambda: query.run_sql(db, Q.STAMP))
    out.append(("stamp", w, c, len(res.rows)))
    res, w, c = _timed(lambda: query.run_sql(db, Q.RUNS, max_rows=100_000))
    out.append(("runs (sidebar)", w, c, len(res.rows)))
    ids = sorted(r[0] for r in res.rows)
    res, w, c = _timed(lambda: query.run_sql(db, Q.STATS, [ids], max_rows=100_000))
    out.append(("compare table (config_verdicts)", w, c, len(res.rows)))
    res, w, c = _timed(lambda: query.run_sql(db, Q.COMPARE, [ids], max_rows=100_000))
    out.append(("per-run rows (config_summary)", w, c, len(res.rows)))
    return out


def time_summary_alone(db: Path) -> tuple[float, float]:
    """For the record: one evaluation of config_summary alone (COMPARE adds a runs join)."""
    from specwatch.db import query
    _, w, c = _timed(lambda: query.run_sql(db, "SELECT * FROM config_summary", max_rows=100_000))
    return w, c


_COMPONENTS = None


def time_render(db: Path) -> float:
    """Wall time of the Compare view's first render under AppTest, Streamlit's cache emptied.
    A Streamlit server scans the installed packages for components once, at its start
    (Runtime.__init__); AppTest does it in every new AppTest's first run (0.4 s here, 342
    distributions' metadata), so that scan is done once beforehand and shared, not timed."""
    global _COMPONENTS
    import streamlit as st
    from streamlit.components.v2.component_manager import BidiComponentManager
    from streamlit.testing.v1 import AppTest
    if _COMPONENTS is None:
        _COMPONENTS = BidiComponentManager()
        _COMPONENTS.discover_and_register_components(start_file_watching=False)
    st.cache_data.clear()
    os.environ["SPECWATCH_DB"] = str(db)
    at = AppTest.from_file(str(APP), default_timeout=120)
    at._bidi_component_manager = _COMPONENTS     # what the server's Runtime holds
    t = time.perf_counter()
    at.run()
    elapsed = time.perf_counter() - t
    if at.exception:
        raise SystemExit(f"render failed: {[e.value for e in at.exception]}")
    if not any("speedup_text" in d.value.columns and len(d.value) for d in at.dataframe):
        raise SystemExit("render produced no comparison table")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--windows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--db", default=None, help="keep the store here (default: a temporary file)")
    args = ap.parse_args()
    db = Path(args.db or Path(tempfile.mkdtemp()) / "bench_dashboard.duckdb")
    if db.exists():
        db.unlink()
    t = time.perf_counter()
    n = build(db, args.windows)
    print(f"built {db} with {n:,} decode windows in {time.perf_counter() - t:.1f} s "
          f"({db.stat().st_size / 1e6:.0f} MB)\n")
    wall: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    counts: dict[str, int] = {}

    def record(name: str, w: float, c: float | None) -> None:
        wall.setdefault(name, []).append(w)
        if c is not None:
            cpu.setdefault(name, []).append(c)

    for _ in range(args.repeat):
        steps = time_queries(db)
        for name, w, c, k in steps:
            record(name, w, c)
            counts[name] = k
        record("= queries, total", sum(s[1] for s in steps), sum(s[2] for s in steps))
        record("(config_summary alone, not in total)", *time_summary_alone(db))
    for _ in range(args.repeat):
        record("first render, whole script (AppTest)", time_render(db), None)
    print(f"{'step':<42} {'rows':>5} {'wall med':>9} {'wall max':>9} {'CPU med':>8}")
    for name, v in wall.items():
        c = f"{statistics.median(cpu[name]):>8.3f}" if name in cpu else f"{'':>8}"
        print(f"{name:<42} {counts.get(name, ''):>5} {statistics.median(v):>9.3f} {max(v):>9.3f} {c}")
    worst = max(wall["= queries, total"])
    load = os.getloadavg()[0]
    print(f"\ntarget: comparison view's first render < 2 s of server-side query time: "
          f"{'PASS' if worst < 2 else 'FAIL'} (worst wall {worst:.3f} s, median "
          f"{statistics.median(wall['= queries, total']):.3f} s; {n:,} windows; "
          f"{os.cpu_count()} CPUs, load average {load:.1f} while measuring)")
    render = statistics.median(wall["first render, whole script (AppTest)"])
    print(f"target (issue 32): first render <= 1 s median: {'PASS' if render <= 1 else 'FAIL'} "
          f"(median {render:.3f} s over {args.repeat} renders, {n:,} windows)")

if __name__ == "__main__":
    main()
