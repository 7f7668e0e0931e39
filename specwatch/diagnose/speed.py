"""Does speculation pay? doctor's speed checks: speedup below 1 against the run's baseline (pooled
over repeats when a sweep has them, else at equal concurrency or batch size), and a printed accept
rate that uses an older SGLang definition.

Not here: why the accept length is low (auxids), serving health (serving).
"""
from __future__ import annotations

from specwatch.diagnose import flags
from specwatch.diagnose.context import Context, config_ref
from specwatch.diagnose.finding import Evidence, Finding, Ref

# Speedup below 1 means speculation loses; no margin, because the number is already a window-weighted
# mean over the whole run, and the user asked "is it slower", not "is it much slower".
SLOWER_SPEEDUP = 1.0
# Gen throughput of ingested logs compares only at the same batch size: median running requests within
# this factor (decode throughput scales roughly with batch size at small batches).
BATCH_MATCH_RATIO = 1.25
# Without SGLang versions on both sides, an ingested baseline must be from within this many hours:
# a baseline from another day may be another SGLang, driver or GPU.
BASELINE_MAX_GAP_H = 24

# Printed accept rate vs the comparable (0.5.11+) one: a difference above this (2 decimals printed,
# plus weighting) means the printing version used another definition.
RATE_DEF_TOL = 0.015


def _comparable_baseline(ctx: Context, row: dict, base: dict) -> tuple[bool, dict]:
    me = ctx.batch.get((row["run_id"], row["config_offset"]))
    other = ctx.batch.get((base["run_id"], base["config_offset"]))
    info = {}
    if row["concurrency"] is not None or base["concurrency"] is not None:
        info.update(concurrency=row["concurrency"], baseline_concurrency=base["concurrency"])
        return row["concurrency"] == base["concurrency"], info
    if not me or not other or me[0] is None or other[0] is None:
        return False, info
    info.update(median_running_req=me[0], baseline_median_running_req=other[0])
    if max(me[0], other[0]) > BATCH_MATCH_RATIO * max(min(me[0], other[0]), 1e-9):
        return False, info
    v1, v2 = row["sglang_version"], base["sglang_version"]
    if v1 is not None or v2 is not None:
        info.update(sglang_version=v1, baseline_sglang_version=v2)
        return v1 == v2, info
    if me[1] is None or other[1] is None:
        return False, info
    gap_h = abs((me[1] - other[1]).total_seconds()) / 3600
    info["hours_apart"] = round(gap_h, 2)
    return gap_h <= BASELINE_MAX_GAP_H, info


def _speed_suggestion(row: dict, blocker: str | None, at: str, paying: list[int]) -> str:
    """What to try, in the flags of the engine that served the run."""
    if blocker is not None:
        return f"fix the accept length first (see {blocker}): with a working draft this config may pay"
    vllm = flags.engine_of(row) == "vllm"
    steps, topk, n = (row["speculative_num_steps"], row["speculative_eagle_topk"],
                      row["speculative_num_draft_tokens"])
    shape = ("" if steps is None else
             f"each step drafts {steps} tokens" + ("" if vllm or topk is None else
                                                   f" (topk {topk}, {n} verified)"))
    sugg = f"overhead dominates{at}"
    if row["accept_len"] is not None:
        sugg += f": {shape} for an accept length of {row['accept_len']:.2f}" if shape else \
            f": accept length {row['accept_len']:.2f}"
    sugg += ("; try a smaller num_speculative_tokens in --speculative-config" if vllm else
             "; try fewer --speculative-num-steps, a smaller --speculative-eagle-topk / "
             "num-draft-tokens")
    if paying:
        above = max(paying)
        sugg += (f", or serve without speculation above batch size {above} (it pays at "
                 f"concurrency {', '.join(map(str, paying))}: "
                 + ("num_speculative_tokens_per_batch_size in --speculative-config, vLLM 0.26+"
                    if vllm else "--speculative-adaptive with a schedule, SGLang 0.5.13+")
                 + f"; `specwatch recommend --engine {row['served_by'] or 'sglang'}` writes it)")
    else:
        sugg += ", or disable speculation at this batch size"
    return sugg


def _check_speed_repeats(ctx: Context, row: dict, st: dict, base: dict, blocker: str | None) -> list[Finding]:
    """A sweep config with repeats: judged once per (config, concurrency) on its pooled speedup
    and 95 % interval (config_stats), never on one repeat's dip. 'loses' -> error; a point
    estimate below 1 whose interval contains 1 -> warning; anything else says nothing."""
    # one finding per group: on its first run among those diagnosed (`doctor --run` may name any)
    first = min(r["run_id"] for r in ctx.scope if r["group_id"] == row["group_id"])
    if st["verdict"] == "pays" or st["speedup"] >= SLOWER_SPEEDUP or row["run_id"] != first:
        return []
    at = f" at concurrency {st['concurrency']}" if st["concurrency"] is not None else ""
    by_conc = {r["concurrency"]: r for r in ctx.stats.values()
               if r["sweep_name"] == st["sweep_name"] and r["config_name"] == st["config_name"]
               and r["concurrency"] is not None and r["speedup"] is not None}
    nums = {"baseline_run": base["run_name"], "speedup": st["speedup"],
            "speedup_ci_low": st["speedup_ci_low"], "speedup_ci_high": st["speedup_ci_high"],
            "repeats": st["repeats"], "verdict": st["verdict"], "speedup_basis": st["speedup_basis"],
            "concurrency": st["concurrency"]}
    others = {str(c): r["speedup"] for c, r in sorted(by_conc.items()) if c != st["concurrency"]}
    if others:
        nums["speedup_by_concurrency"] = others
    paying = sorted(c for c, r in by_conc.items() if r["verdict"] == "pays")
    interval = f"{st['speedup']:.2f} [95% CI {st['speedup_ci_low']:.2f}, {st['speedup_ci_high']:.2f}] over {st['repeats']} repeats"
    sugg = _speed_suggestion(row, blocker, at, paying)
    rows = config_ref(ctx, row) + (Ref("runs", run_id=base["run_id"], note="baseline run"),)
    if st["verdict"] == "loses":
        return [Finding(row["run_id"], row["run_name"], "slower_than_baseline", "error",
                        f"speculation is slower than no speculation{at}: speedup {interval}",
                        Evidence(nums, rows), sugg, row["config_offset"])]
    return [Finding(row["run_id"], row["run_name"], "slower_than_baseline", "warning",
                    f"speculation may be slower than no speculation{at}: speedup {interval}; the "
                    f"interval contains 1, so this is within noise",
                    Evidence(nums, rows), "add repeats to tell; if it stays below 1: " + sugg,
                    row["config_offset"])]


def check_speed(ctx: Context, row: dict, blocker: str | None = None) -> list[Finding]:
    """`blocker`: the code of an accept-length finding on the same run, to be fixed first."""
    base = next((r for r in ctx.summary if r["run_id"] == row["baseline_run_id"]), None)
    if base is None:
        return []
    st = ctx.stats.get(row["group_id"])
    if st is not None and st["speedup_ci_low"] is not None and st["speedup"] is not None \
            and st["verdict"] in ("pays", "loses", "unclear"):
        return _check_speed_repeats(ctx, row, st, base, blocker)
    nums = {"baseline_run": base["run_name"]}
    if row["speedup_client"] is not None:
        if row["speedup_client"] >= SLOWER_SPEEDUP:
            return []
        nums.update(speedup_client=row["speedup_client"], output_tok_s=row["output_tok_s"],
                    baseline_output_tok_s=base["output_tok_s"], concurrency=row["concurrency"])
        what = f"client output {row['output_tok_s']:.1f} tok/s vs {base['output_tok_s']:.1f} without speculation"
    elif row["speedup_gen"] is not None and row["speedup_gen"] < SLOWER_SPEEDUP:
        ok, info = _comparable_baseline(ctx, row, base)
        if not ok:
            return []
        nums.update(speedup_gen=row["speedup_gen"], gen_throughput_tok_s=row["gen_throughput_tok_s"],
                    baseline_gen_throughput_tok_s=base["gen_throughput_tok_s"], **info)
        what = (f"gen throughput {row['gen_throughput_tok_s']:.1f} tok/s vs "
                f"{base['gen_throughput_tok_s']:.1f} without speculation")
    else:
        return []
    speedup = nums.get("speedup_client", nums.get("speedup_gen"))
    at = f" at concurrency {row['concurrency']}" if row["concurrency"] is not None else ""
    others = sorted((r["concurrency"], r["speedup_client"]) for r in ctx.summary
                    if r["sweep_name"] is not None and r["sweep_name"] == row["sweep_name"]
                    and r["config_name"] == row["config_name"] and r["run_id"] != row["run_id"]
                    and r["concurrency"] is not None and r["speedup_client"] is not None)
    if others:
        nums["speedup_client_by_concurrency"] = {str(c): s for c, s in others}
    paying = sorted({c for c, s in others if s >= SLOWER_SPEEDUP})
    rows = config_ref(ctx, row) + (Ref("runs", run_id=base["run_id"], note="baseline run"),)
    return [Finding(row["run_id"], row["run_name"], "slower_than_baseline", "error",
                    f"speculation is slower than no speculation{at}: speedup {speedup:.2f} ({what})",
                    Evidence(nums, rows), _speed_suggestion(row, blocker, at, paying),
                    row["config_offset"])]


def check_accept_rate(ctx: Context, row: dict) -> list[Finding]:
    al, pr, ar = row["accept_len"], row["accept_rate_printed"], row["accept_rate"]
    ndt, steps = row["speculative_num_draft_tokens"], row["speculative_num_steps"]
    # Without the draft-token count the comparable rate is not SGLang's (accept_len-1)/(N-1) (a
    # pasted log mixing vLLM windows, say): nothing to compare the printed rate with.
    if None in (al, pr, ar, ndt) or abs(pr - ar) <= RATE_DEF_TOL:
        return []
    if steps is not None and abs(pr - al / (steps + 1)) <= RATE_DEF_TOL:
        how = f"accept_len / (steps+1) = {al:.3f}/{steps + 1}, bonus token included (SGLang 0.5.4-0.5.5"
        how += ", or 0.5.6-0.5.10 when draft tokens = steps+1)" if ndt == steps + 1 else ")"
    elif ndt and abs(pr - al / ndt) <= RATE_DEF_TOL:
        how = f"accept_len / num_draft_tokens = {al:.3f}/{ndt}, bonus token included (SGLang 0.5.6-0.5.10)"
    else:
        how = "a definition that matches none of SGLang's three"
    return [Finding(
        row["run_id"], row["run_name"], "accept_rate_not_comparable", "info",
        f"printed accept rate {pr:.3f} is {how}; the comparable rate is {ar:.3f}",
        Evidence({"accept_rate_printed": pr, "accept_rate": ar, "accept_len": al,
                  "speculative_num_steps": steps, "speculative_num_draft_tokens": ndt},
                 config_ref(ctx, row)),
        "compare runs of different SGLang versions by accept_rate ((accept_len-1)/(draft tokens-1)) "
        "or accept_len, never by the printed rate", row["config_offset"])]
