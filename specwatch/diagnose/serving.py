"""Is the server healthy while it serves? doctor's serving checks over a run's decode windows: DP
ranks that disagree, CUDA graph off, a growing queue, KV pressure with retractions, a summary
resting on the first window after idle; and a config whose server died, with its cause and a hint.

Not here: aux-layer ids (auxids; a death inside the aux capture is explained with its help), speed.
"""
from __future__ import annotations

import re
import statistics

from specwatch.db import views
from specwatch.diagnose import flags
from specwatch.diagnose.auxids import (capture_crash, describe_shift, index0_ids, served_ids,
                                       sibling)
from specwatch.diagnose.context import Context, config_ref, window_ref
from specwatch.diagnose.finding import MAX_EVIDENCE_ROWS, Evidence, Finding, Ref
from specwatch import aux_layers

# DP ranks serve the same config; accept lengths differing by more than this fraction of their mean,
# or gen throughput by more than this ratio, point at an unbalanced router or a sick GPU.
DP_ACCEPT_SPREAD = 0.15
DP_TPUT_RATIO = 1.3
# Queue growth: mean #queue-req of the last third of a rank's windows exceeds the first third's by at
# least this many requests and by QUEUE_GROWTH_FACTOR (needs QUEUE_MIN_WINDOWS windows to say "trend").
QUEUE_MIN_WINDOWS = 6
QUEUE_GROWTH_MIN_REQ = 4
QUEUE_GROWTH_FACTOR = 1.5
# KV pool near full: token usage at or above this, together with retractions, means requests are
# being evicted and recomputed; spec decoding's extra KV (draft tokens) makes it worse.
KV_USAGE_HIGH = 0.95
# CUDA graph off in at least this fraction of a run's windows (on a CUDA device).
GRAPH_OFF_FRACTION = 0.5


def check_dp(ctx: Context, row: dict, ws: list[dict]) -> list[Finding]:
    """Per-rank accept length and gen throughput as `run_rank_metrics` defines them; the windows
    only point at each rank's first kept line."""
    per = {r["dp_rank"]: r for r in ctx.ranks.get((row["run_id"], row["config_offset"]), [])}
    if len(per) < 2:
        return []
    als = [r["accept_len"] for r in per.values() if r["accept_len"] is not None]
    tps = [r["rank_gen_tok_s"] for r in per.values() if r["rank_gen_tok_s"] is not None]
    spread = (max(als) - min(als)) / statistics.fmean(als) if len(als) > 1 and statistics.fmean(als) else 0
    ratio = max(tps) / min(tps) if len(tps) > 1 and min(tps) > 0 else 1
    if spread <= DP_ACCEPT_SPREAD and ratio <= DP_TPUT_RATIO:
        return []
    nums = {f"dp{k}": {"accept_len": r["accept_len"], "gen_throughput_tok_s": r["rank_gen_tok_s"],
                       "windows": r["windows"]} for k, r in per.items()}
    nums.update(accept_len_spread=round(spread, 4), gen_throughput_ratio=round(ratio, 4))
    first = {}
    for w in ws:
        if views.kept_window(w) and w["dp_rank"] in per:
            first.setdefault(w["dp_rank"], w)
    rows = tuple(window_ref(ctx, w, f"first kept window of DP{k}") for k, w in sorted(first.items()))
    return [Finding(row["run_id"], row["run_name"], "dp_ranks_disagree", "warning",
                    f"DP ranks disagree: accept length spread {spread:.0%}, gen throughput max/min {ratio:.2f}",
                    Evidence(nums, rows[:MAX_EVIDENCE_ROWS]),
                    "check the router's balance (#running-req per rank) and each rank's GPU; a rank "
                    "with a lower accept length may run another draft or config", row["config_offset"])]


def check_graph(ctx: Context, row: dict, ws: list[dict]) -> list[Finding]:
    cuda = [w for w in ws if views.kept_window(w) and w["graph_device"] == "cuda"
            and w["graph_enabled"] is not None]
    off = [w for w in cuda if not w["graph_enabled"]]
    disabled = any(w["cfg_disable_cuda_graph"] for w in ws)
    if not (cuda and len(off) >= GRAPH_OFF_FRACTION * len(cuda)) and not disabled:
        return []
    nums = {"windows_graph_off": len(off), "windows_on_cuda": len(cuda), "disable_cuda_graph": disabled}
    rows = tuple(window_ref(ctx, w, "cuda graph: False") for w in off[:MAX_EVIDENCE_ROWS]) + config_ref(ctx, row)
    return [Finding(row["run_id"], row["run_name"], "cuda_graph_off", "warning",
                    f"CUDA graph off in {len(off)} of {len(cuda)} decode windows"
                    + (" (--disable-cuda-graph)" if disabled else ""),
                    Evidence(nums, rows),
                    "speculative decoding launches many small kernels per step; without CUDA graphs "
                    "the launch overhead eats the gain. Remove --disable-cuda-graph, or raise "
                    "--cuda-graph-max-bs-decode (before SGLang 0.5.23: --cuda-graph-max-bs) above the "
                    "running batch size", row["config_offset"])]


def check_queue(ctx: Context, row: dict, ws: list[dict]) -> list[Finding]:
    out = []
    by = {}
    for w in ws:
        if not views.kept_window(w):
            continue
        by.setdefault((w["dp_rank"], w["pp_rank"]), []).append(w)
    for (dp, _), rs in sorted(by.items(), key=lambda kv: str(kv[0])):
        rs = [w for w in rs if w["queue_req"] is not None]
        if len(rs) < QUEUE_MIN_WINDOWS:
            continue
        third = len(rs) // 3
        q0 = statistics.fmean(w["queue_req"] for w in rs[:third])
        q1 = statistics.fmean(w["queue_req"] for w in rs[-third:])
        if q1 - q0 >= QUEUE_GROWTH_MIN_REQ and q1 >= QUEUE_GROWTH_FACTOR * q0:
            nums = {"queue_req_first_third_mean": q0, "queue_req_last_third_mean": q1,
                    "windows": len(rs), "dp_rank": dp}
            rows = (window_ref(ctx, rs[0], f"#queue-req {rs[0]['queue_req']}"),
                    window_ref(ctx, rs[-1], f"#queue-req {rs[-1]['queue_req']}"))
            out.append(Finding(row["run_id"], row["run_name"], "queue_growing", "warning",
                               f"waiting queue grows from {q0:.1f} to {q1:.1f} requests over the run",
                               Evidence(nums, rows),
                               "the server cannot keep up with the offered load: throughput and "
                               "latency numbers are not steady-state; lower the request rate or "
                               f"concurrency, or raise {flags.words(row)['max_running']}",
                               row["config_offset"]))
            break
    return out


def check_kv(ctx: Context, row: dict, ws: list[dict]) -> list[Finding]:
    kept = [w for w in ws if w["token_usage_frac"] is not None]
    if not kept:
        return []
    top = max(kept, key=lambda w: w["token_usage_frac"])
    events = ctx.retracts.get(row["run_id"], [])
    retracted = [w for w in ws if (w["retracted_req"] or 0) > 0]
    if top["token_usage_frac"] < KV_USAGE_HIGH or not (events or retracted):
        return []
    nums = {"max_token_usage_frac": top["token_usage_frac"], "retract_events": len(events),
            "windows_with_retracted_req": len(retracted)}
    rows = (window_ref(ctx, top, f"token usage {top['token_usage_frac']:.2f}"),) + tuple(
        Ref("events", ctx.paths.get(e["source_id"], e["source_id"]), e["line_no"], e["byte_offset"],
            note="KV cache pool is full. Retract requests.") for e in events[:MAX_EVIDENCE_ROWS - 1])
    return [Finding(row["run_id"], row["run_name"], "kv_pressure_retractions", "warning",
                    f"KV cache {top['token_usage_frac']:.0%} full with {len(events) + len(retracted)} retraction(s)",
                    Evidence(nums, rows),
                    "retracted requests are recomputed, which hides the speculation gain; lower "
                    f"{flags.words(row)['max_running']} or --speculative-num-draft-tokens, or raise "
                    f"{flags.words(row)['memory_fraction']}", row["config_offset"])]


def check_first_window(ctx: Context, row: dict, ws: list[dict]) -> list[Finding]:
    # kept although after idle: the only window of its rank (the window rule, views.kept_window)
    only = [w for w in ws if w["after_idle"] and views.kept_window(w)]
    if not only:
        return []
    nums = {"ranks_with_one_window": len(only),
            # per rank, the only window's values: not the run's summary (named apart from it)
            "first_window_gen_throughput_tok_s": [w["gen_throughput_tok_s"] for w in only],
            "first_window_accept_len": [w["accept_len"] for w in only]}
    return [Finding(row["run_id"], row["run_name"], "first_window_contaminated", "warning",
                    "the summary rests on a single decode window per rank, the first after idle, whose "
                    "throughput includes warm-up/idle time and whose accept length can mix earlier steps",
                    Evidence(nums, tuple(window_ref(ctx, w, "only window (after idle)") for w in only[:MAX_EVIDENCE_ROWS])),
                    "run longer (more output tokens or prompts) or lower "
                    f"{flags.words(row)['log_interval']} so each rank prints several windows",
                    row["config_offset"])]


# Known causes of a server that died before it was ready -> what to do (first match wins), in the
# words of the engine that served it ({name} fields: flags.SGLANG / flags.VLLM).
FAILURE_HINTS = (
    (re.compile(r"No module named '([\w.]+)'"),
     "the launch interpreter's environment lacks the Python module {0}: install it there (the "
     "interpreter of launch_command), or pick flags whose code paths do not import it"),
    # the KV cache does not fit at start-up: vLLM 0.32 v1/core/kv_cache_utils.py
    # _check_enough_kv_cache_memory and the auto-fit of max_model_len; SGLang 0.5.23
    # model_executor/pool_configurator.py
    (re.compile(r"No available memory for the cache blocks|KV cache is needed, which is larger "
                r"than the available KV cache memory|not enough GPU memory available to serve "
                r"even a single token|Not enough memory\. Please try to increase "
                r"--mem-fraction-static"),
     "the KV cache does not fit beside the weights (a draft model's included): raise "
     "{memory_fraction} or lower {context}, or give the config more GPUs (tp_size)"),
    # vLLM 0.32 llama_eagle3.py load_weights: a d2t tensor is loaded as draft_id_to_target_id,
    # a parameter that exists only when the draft config's draft_vocab_size differs from the
    # target's vocabulary (t2d is skipped); SGLang-layout EAGLE-3 drafts carry d2t/t2d
    (re.compile(r"no module or parameter named '(draft_id_to_target_id|d2t)'"),
     "vLLM found a draft-to-target vocabulary map ({0}) in the draft's weights but the draft's "
     "config.json sets no smaller draft_vocab_size, so vLLM made no place for it: set "
     "draft_vocab_size to the map's length in a copy of the draft's config.json, or, when the map "
     "is the identity, serve a copy of the draft without its d2t and t2d tensors"),
    (re.compile(r"out of memory|OutOfMemoryError|CUDA error: out of memory", re.I),
     "the GPU ran out of memory: lower {memory_fraction} or {max_running}, shorten "
     "{context}, or give the config more GPUs (tp_size)"),
    (re.compile(r"NCCL", re.I),
     "an NCCL (multi-GPU communication) error: check that the config's GPUs are free and see "
     "each other (run with NCCL_DEBUG=INFO), and that no other server holds its ports"),
    (re.compile(r"unrecognized arguments|ambiguous option|invalid choice|error: argument"),
     "{engine}'s parser rejected a flag: fix it in server_flags (run-sweep checks flags before "
     "launching; {help} lists them)"),
    (re.compile(r"Address already in use|port .* (in use|not free)", re.I),
     "a port was taken: stop the process holding it, or let specwatch pick ports (no `port`)"),
)


def failure_hint(reason: str | None, row: dict) -> str:
    for pat, text in FAILURE_HINTS:
        m = pat.search(reason or "")
        if m:
            return text.format(*m.groups(), **flags.words(row))
    return "read the server log named here: its last exception says why it died"


def check_failed(ctx: Context, row: dict) -> list[Finding]:
    """A config whose server died (or never got ready): its real cause, its log, and a hint. A
    death inside the target's EAGLE-3 aux capture names the ids behind it and the fix."""
    reason = row["failure_reason"]
    logs = ctx.logs.get(row["run_id"], [])
    refs = tuple(Ref("sources", p, note="server log") for p in logs) + config_ref(ctx, row)
    nums = {"status": row["status"], "failure_reason": reason, "server_logs": logs or None}
    name = row["config_name"] or row["run_name"]
    title, hint = f"config {name} failed: {reason or 'no cause recorded'}", failure_hint(reason, row)
    crash = capture_crash(ctx, row)   # the capture code runs only with EAGLE-3 / DFlash on
    if crash is not None:
        ids = served_ids(row)
        bad, rule_name = index0_ids(row, crash.module)
        where = f"sglang/srt/models/{crash.module}.py:{crash.line_no}"
        nums.update(aux_layer_ids=ids, crash_frame=where, crash_code=crash.code,
                    sglang_version=row["sglang_version"])
        version = f"SGLang {row['sglang_version']}" if row["sglang_version"] else "SGLang"
        title = f"config {name} failed in the target's EAGLE-3 aux capture: "
        if bad:
            none_yet = ("NoneType" in crash.exception
                        and f", where {version}'s {crash.module}.py has no residual yet")
            title += (f"aux id {bad[0]} of {ids} maps" if len(bad) == 1 else
                      f"aux ids {bad} of {ids} map") + (
                f" to capture index 0, the input of the first layer{none_yet or ''}, so ")
        title += (f"`{crash.code}` ({where}) raised {crash.exception}"
                  + (f" [rule: {aux_layers.RULE_TEXT[rule_name]}]" if bad else ""))
        sib = sibling(ctx, row)
        if sib is not None:
            want = served_ids(sib)
            hint = (f"serve eagle_aux_hidden_state_layer_ids = {want} (as in run "
                    f"{sib['run_name']}: the same draft weights, accept length "
                    f"{sib['accept_len']:.2f}); {ids} vs {want}: {describe_shift(ids, want)}")
            refs += (Ref("runs", run_id=sib["run_id"], note="sibling run"),)
        elif bad:
            hint = (f"serve ids that each name a layer of the target (no id in {bad}): the ids "
                    f"the draft was trained with are in its training config; a list holding "
                    f"{bad} is often the trained one slid by one slot toward the embedding")
        else:
            served = f"the served ids {ids}" if ids is not None else (
                "the served ids (not recorded for this run: see the draft's config.json)")
            hint = (f"{served} reach the capture code at {where}; check that they name layers "
                    f"of this target and that the draft's hidden size matches it")
    return [Finding(row["run_id"], row["run_name"], "config_failed", "error", title,
                    Evidence(nums, refs), hint, row["config_offset"])]
