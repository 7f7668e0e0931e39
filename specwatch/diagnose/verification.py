"""Doctor: a speculative config whose verifier is not lossless.

Speculative decoding pays only if it keeps the target model's outputs, and accept lengths and
speedups compare across configs only under one acceptance rule. Two engine settings relax the
rule; a config served with one is measured correctly but answers another question
(`lossy_verification`, warning):

- SGLang `speculative_accept_threshold_single` / `speculative_accept_threshold_acc` below 1.0
  (server_args; sglang/srt/arg_groups/fields/spec.py, 0.5.23: a draft token is accepted when its
  target probability exceeds `threshold_single`, else with probability min(1, p / threshold_acc)).
  At the default 1.0 both are exact rejection sampling. Only sampled requests are affected:
  greedy verification compares argmaxes either way.
- vLLM `rejection_sample_method='fly'` (0.33+, its `non-default args:` line;
  vllm/config/speculative.py: "FLy's lossy, entropy-gated deferred window"). `standard` and
  `block` (block verification) are lossless; `synthetic` is simulated acceptance (`simulated`).

Which configs are lossy is `views.lossy_sql`'s one definition (config_summary's
`lossy_verification`, which `check` reads; `recommend` and the verdict reasons read the same column
of config_stats). `load(db, ctx)` reads the settings behind it from `server_configs.args` once, as
the finding's numbers and evidence. A setting the log does not show says nothing.
"""
from __future__ import annotations

from specwatch.db import views
from specwatch.diagnose.context import Context, select
from specwatch.diagnose.finding import Evidence, Finding, Ref

def load(db, ctx: Context) -> dict:
    """The settings behind a lossy rule, as (numbers, the config line): by (run_id, offset) for
    each SGLang server_args line up to the end of a run in scope, and by run_id for its last
    such line and its last vLLM `non-default args:` line (numbers: only what the line printed)."""
    out: dict = {}
    ids = sorted({r["run_id"] for r in ctx.scope})
    if not ids:
        return out
    marks = ", ".join("?" * len(ids))
    for r in select(db, f"""
            SELECT rs.run_id, c.source_id, c.byte_offset, c.line_no, c.config_kind,
              TRY_CAST(c.args->>'{views.SGLANG_THRESHOLDS[0]}' AS DOUBLE) AS th_single,
              TRY_CAST(c.args->>'{views.SGLANG_THRESHOLDS[1]}' AS DOUBLE) AS th_acc,
              {views.method_sql('c')} AS method
            FROM server_configs c JOIN run_sources rs ON c.source_id = rs.source_id
             AND (rs.offset_to IS NULL OR c.byte_offset < rs.offset_to)
            WHERE c.config_kind IN ('server_args', 'vllm_args') AND c.args IS NOT NULL
              AND rs.run_id IN ({marks})
            ORDER BY rs.run_id, c.source_id, c.byte_offset""", ids):
        path = ctx.paths.get(r["source_id"], r["source_id"])
        if r["config_kind"] == "server_args":
            numbers = {k: v for k, v in zip(views.SGLANG_THRESHOLDS,
                                            (r["th_single"], r["th_acc"])) if v is not None}
            got = (numbers, Ref("server_configs", path, r["line_no"], r["byte_offset"],
                                r["run_id"], "server_args line"))
            out[(r["run_id"], r["byte_offset"])] = out[r["run_id"]] = got
        elif r["method"] is not None:
            out[r["run_id"]] = ({"rejection_sample_method": r["method"]},
                                Ref("server_configs", path, r["line_no"], r["byte_offset"],
                                    r["run_id"], "vLLM's non-default args line"))
    return out


def check(row: dict, lossy: dict) -> list[Finding]:
    """`lossy_verification` for one speculative config row (config_summary) that has it."""
    if not row.get("lossy_verification"):
        return []
    numbers, ref = lossy.get((row["run_id"], row["config_offset"])) or \
        lossy.get(row["run_id"]) or ({}, None)
    acc = row.get("accept_len")
    said = f" (accept length {acc:.2f})" if acc is not None else ""
    relaxed = {k: v for k, v in numbers.items() if k in views.SGLANG_THRESHOLDS and v < 1.0}
    if numbers.get("rejection_sample_method") in views.VLLM_LOSSY_METHODS:
        m = numbers["rejection_sample_method"]
        title = (f"vLLM verified drafts with rejection_sample_method='{m}' "
                 f"({views.VLLM_LOSSY_METHODS[m]}): "
                 f"this config's acceptance{said} and speedup are not those of lossless "
                 "speculative decoding, and its outputs are not the target model's")
        hint = ("before deploying it, measure the same config with rejection_sample_method "
                "'standard' (the default) or 'block' (both lossless) and judge the lossy one's "
                "output quality separately")
    else:
        rule = ", ".join(f"{k}={v:g}" for k, v in relaxed.items()) or "accept thresholds below 1.0"
        title = (f"SGLang accepted draft tokens by a relaxed rule ({rule}): sampled requests kept "
                 f"tokens exact verification rejects, so this config's acceptance{said} and "
                 "speedup are not those of lossless speculative decoding, and its outputs are not "
                 "the target model's")
        hint = ("before deploying it, measure the same config at 1.0 (the default: exact "
                "rejection sampling) and judge the relaxed one's output quality separately; greedy "
                "requests (temperature 0) are verified exactly either way")
    return [Finding(row["run_id"], row["run_name"], "lossy_verification", "warning", title,
                    Evidence({**numbers, "accept_len": acc}, (ref,) if ref else ()), hint,
                    row.get("config_offset"))]
