"""The rows doctor's checks read, loaded once per `diagnose` call through the read-only
`query.run_sql`: config_summary and config_stats rows, each run's scoped decode windows, retract
events, request histograms, log paths and what a sweep launched. Plus the references that point a
finding at one stored row.

Not here: judging the rows (auxids, speed, serving).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from specwatch.db import query, views
from specwatch.diagnose.finding import Ref


@dataclass


class Context:
    summary: list[dict]
    scope: list[dict]
    windows: dict = field(default_factory=dict)     # (run_id, config_offset) -> [window dicts]
    batch: dict = field(default_factory=dict)       # (run_id, config_offset) -> (median batch, first ts)
    retracts: dict = field(default_factory=dict)    # run_id -> [event dicts]
    hist: dict = field(default_factory=dict)        # run_id -> (summed histogram, request refs)
    paths: dict = field(default_factory=dict)       # source_id -> path
    logs: dict = field(default_factory=dict)        # run_id -> [server log paths]
    launched: dict = field(default_factory=dict)    # run_id -> runs row (what a sweep launched)
    stats: dict = field(default_factory=dict)       # group_id -> config_stats row (repeats pooled)
    ranks: dict = field(default_factory=dict)       # (run_id, config_offset) -> run_rank_metrics rows


class DoctorError(RuntimeError):
    """The run asked for is not in the store."""


def select(db, sql, params=None, max_rows=1_000_000) -> list[dict]:
    return query.run_sql(db, sql, params, max_rows=max_rows).dicts()


def load(db, run: str | None) -> Context:
    summary = select(db, "SELECT * FROM config_summary ORDER BY run_id, config_offset NULLS FIRST")
    scope = [r for r in summary if run is None or run in (r["run_id"], r["run_name"])]
    if run is not None and not scope:
        raise DoctorError(f"no run named {run!r} in {db}; `specwatch report --db {db}` lists runs")
    ids = sorted({r["run_id"] for r in scope})
    ctx = Context(summary, scope)
    ctx.stats = {r["group_id"]: r for r in select(db, """
        SELECT group_id, sweep_name, config_name, concurrency, repeats, verdict,
          speedup, speedup_ci_low, speedup_ci_high, speedup_basis, accept_len_min, accept_len_max
        FROM config_stats""")}
    if not ids:
        return ctx
    marks = ", ".join("?" * len(ids))
    for w in select(db, f"""
        SELECT run_id, config_offset, source_id, byte_offset, line_no, dp_rank, pp_rank, ts,
          running_req, queue_req, token_usage_frac, accept_len, accept_rate_printed,
          gen_throughput_tok_s, graph_enabled, graph_device, retracted_req, after_idle,
          rank_windows, cfg_disable_cuda_graph
        FROM decode_windows_scoped WHERE run_id IN ({marks})
        ORDER BY run_id, source_id, byte_offset""", ids):
        ctx.windows.setdefault((w["run_id"], w["config_offset"]), []).append(w)
    for r in select(db, f"""
        SELECT run_id, config_offset, dp_rank, windows, accept_len, rank_gen_tok_s
        FROM run_rank_metrics WHERE run_id IN ({marks}) AND dp_rank IS NOT NULL
        ORDER BY run_id, config_offset, dp_rank""", ids):
        ctx.ranks.setdefault((r["run_id"], r["config_offset"]), []).append(r)
    for b in select(db, f"""
        SELECT run_id, config_offset, median(running_req) AS batch, min(ts) AS first_ts
        FROM decode_windows_scoped WHERE {views.KEPT_WINDOW_SQL} GROUP BY ALL"""):
        ctx.batch[(b["run_id"], b["config_offset"])] = (b["batch"], b["first_ts"])
    for e in select(db, f"""
        SELECT rs.run_id, e.source_id, e.byte_offset, e.line_no, e.message FROM events e
        JOIN run_sources rs ON e.source_id = rs.source_id AND e.byte_offset >= rs.offset_from
         AND (rs.offset_to IS NULL OR e.byte_offset < rs.offset_to)
        WHERE e.kind = 'retract' AND rs.run_id IN ({marks}) ORDER BY e.byte_offset""", ids):
        ctx.retracts.setdefault(e["run_id"], []).append(e)
    for q in select(db, f"""
        SELECT run_id, request_idx, spec_accept_histogram FROM requests
        WHERE run_id IN ({marks}) AND success AND NOT coalesce(is_warmup, false)
          AND spec_accept_histogram IS NOT NULL ORDER BY run_id, request_idx""", ids):
        h = ctx.hist.setdefault(q["run_id"], ([], []))
        for i, n in enumerate(q["spec_accept_histogram"]):
            if i >= len(h[0]):
                h[0].append(0)
            h[0][i] += n or 0
        h[1].append(q["request_idx"])
    ctx.paths = {s["source_id"]: s["path"] for s in select(db, "SELECT source_id, path FROM sources")}
    for r in select(db, f"""SELECT DISTINCT rs.run_id, s.path FROM run_sources rs
                          JOIN sources s USING (source_id) WHERE rs.run_id IN ({marks})
                          ORDER BY s.path""", ids):
        ctx.logs.setdefault(r["run_id"], []).append(r["path"])
    ctx.launched = {r["run_id"]: r for r in select(
        db, f"""SELECT run_id, model_path, draft_model_path, server_log_tail FROM runs
                WHERE run_id IN ({marks})""", ids)}
    return ctx


def window_ref(ctx: Context, w: dict, note: str | None = None, table: str = "decode_windows") -> Ref:
    return Ref(table, ctx.paths.get(w["source_id"], w["source_id"]), w["line_no"], w["byte_offset"],
               note=note)


def config_ref(ctx: Context, row: dict) -> tuple[Ref, ...]:
    if row["config_offset"] is None:
        return ()
    return (Ref("server_configs", ctx.paths.get(row["config_source_id"], row["config_source_id"]),
                None, row["config_offset"], note="server_args line (effective spec config)"),)
