"""What a sweep file's config means on SGLang (and the built-in engine, which follows its rules).

`invalid(merged, data)` says why a merged grid/config combination cannot run: SGLang would refuse
it or silently change it (draft tokens > steps*topk+1, topk = 1 with draft tokens != steps+1,
topk > 1 without draft tokens, DP attention with dp not dividing tp), or None. The sweep skips such
a combination with the reason.

Not here: parsing TOML (sweepfile), asking SGLang's own parser (sglang_check), vLLM's keys
(vllm_config).
"""
from __future__ import annotations


def invalid(v: dict, data: dict) -> str | None:
    """Why this combination cannot run (SGLang would refuse or silently change it), or None."""
    if not v.get("draft_model"):
        return "draft_model: missing; set draft_model at the top level or in this grid/config"
    steps = v.get("speculative_num_steps")
    topk = v.get("speculative_eagle_topk")
    draft = v.get("speculative_num_draft_tokens")
    if steps is None or topk is None:
        return ("speculative_num_steps and speculative_eagle_topk are required (SGLang's "
                "auto-choice depends on the model; pin them so the sweep measures what it says)")
    flags = list(data.get("server_flags", [])) + list(v.get("server_flags", []))
    if "--enable-dp-attention" in flags and v.get("tp_size", 1) % v.get("dp_size", 1):
        return (f"dp_size={v.get('dp_size', 1)} with --enable-dp-attention must divide "
                f"tp_size={v.get('tp_size', 1)} (SGLang asserts tp_size % dp_size == 0)")
    if draft is None:
        if topk > 1:
            return (f"speculative_eagle_topk={topk} needs speculative_num_draft_tokens (at most "
                    f"steps*topk+1={steps * topk + 1})")
        return None
    if topk == 1 and draft != steps + 1:
        return (f"speculative_num_draft_tokens={draft} with speculative_eagle_topk=1 must equal "
                f"steps+1={steps + 1} (SGLang would silently change it); drop it or set it to "
                f"{steps + 1}")
    if draft > steps * topk + 1:
        return (f"speculative_num_draft_tokens={draft} exceeds steps*topk+1={steps * topk + 1} "
                f"(steps={steps}, topk={topk}); lower it or raise speculative_eagle_topk")
    return None
