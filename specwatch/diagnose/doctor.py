"""Explain why a speculative config underperforms, with the stored numbers and log lines behind it.

`diagnose(db, run)` loads the store once, read-only (context), and runs the checks of each concern:
aux-layer ids (auxids), speed (speed), serving health and failed configs (serving), the acceptance
rule (verification); a finding and its renderings are in `finding`, exit codes in the CLI. It never
recomputes a metric the views define.
Each finding names its run, a code, a severity, the numbers and the exact log lines (file, line
number, byte offset) or request rows behind it, and a next step. A check whose inputs
are NULL says nothing: a missing number is never replaced by a default.

Codes (severity):
  accept_len_near_1 (error)        accept length < LOW_ACCEPT_LEN: the draft is not predicting.
  accept_len_below_sibling (error|warning) same draft, same spec shape, other aux ids did much
                                   better (error), or a little better in every repeat (warning).
  aux_ids_mismatch (error|warning) built-in engine only: the draft's weights agree with the target
                                   better under other aux ids (measured by `align.probe_draft_ids`).
  slower_than_baseline (error|warning) speedup < 1 at equal concurrency / batch size; a sweep
                                   config with repeats is judged once on its pooled speedup and
                                   interval (error when it lies below 1, warning when it holds 1).
  accept_rate_not_comparable (info) the printed accept rate uses an older SGLang definition.
  dp_ranks_disagree, cuda_graph_off, queue_growing, kv_pressure_retractions,
  first_window_contaminated (warning).
  engine_aux_capture (warning|info) vLLM captures at the ids as given, SGLang at id + 1: the same
                                   draft config feeds other layers on the other engine (engines.py).
  lossy_verification (warning)     the engine accepted drafts by a relaxed, lossy rule (SGLang accept
                                   thresholds < 1, vLLM FLy): acceptance and speedup are not those of
                                   lossless speculative decoding (verification.py).
  config_failed (error)            the server died before it was ready: its real cause, its log, a hint.
  schedule_dropped_under_dp, adaptive_steps0_cold_draft (warning|info)  a batch-size schedule
                                   hits an engine limit (schedule.py).

Not a tuner: it says what is wrong and where to look, not which config is best (see `report`).
"""
from __future__ import annotations

import json

from specwatch.diagnose import auxids, context, engines, schedule, serving, speed, verification
from specwatch.diagnose.finding import SEVERITY_ORDER, Finding


def is_speculative(row: dict) -> bool:
    return row["speculative_algorithm"] is not None


def diagnose(db, run: str | None = None) -> tuple[list[Finding], list[dict]]:
    """(findings, speculative config rows checked) for every run in the store, or only `run`."""
    ctx = context.load(db, run)
    findings, checked, cache = [], [], {}
    schedules = schedule.load(db, ctx)
    logged_aux = engines.logged_ids(db, ctx)
    for r in ctx.summary:   # what vLLM logged it served is what it served (auxids.served_ids)
        if r["aux_layer_ids"] is None and r["run_id"] in logged_aux:
            r["aux_layer_ids"] = json.dumps(logged_aux[r["run_id"]][0])
    lossy = verification.load(db, ctx)
    for row in ctx.scope:
        if row["status"] == "failed":
            checked.append(row)
            findings += serving.check_failed(ctx, row)
            continue
        if not is_speculative(row) or row["status"] not in (None, "ok"):
            continue
        checked.append(row)
        ws = ctx.windows.get((row["run_id"], row["config_offset"]), [])
        probe = auxids.probe_ids(ctx, row, cache)
        acc = auxids.check_accept(ctx, row, ws, probe) + auxids.check_probe(ctx, row, probe)
        findings += acc
        findings += engines.check(row, logged_aux)
        findings += verification.check(row, lossy)
        blocker = next((f.code for f in acc if f.severity == "error"), None)
        findings += speed.check_speed(ctx, row, blocker)
        findings += speed.check_accept_rate(ctx, row)
        findings += serving.check_dp(ctx, row, ws)
        findings += serving.check_graph(ctx, row, ws)
        findings += serving.check_queue(ctx, row, ws)
        findings += serving.check_kv(ctx, row, ws)
        findings += serving.check_first_window(ctx, row, ws)
        findings += schedule.check_schedule(ctx, row, schedules)
    findings.sort(key=lambda f: (f.run, f.config_offset or 0, SEVERITY_ORDER[f.severity], f.code))
    return findings, checked
