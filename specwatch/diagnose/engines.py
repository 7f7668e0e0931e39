"""Doctor across engines: the same EAGLE-3 aux ids capture different layers on vLLM and SGLang.

SGLang captures at id + 1 (id k feeds the output of layer k), vLLM at the ids as given (id k feeds
the output of layer k − 1; aux_layers.AS_GIVEN, read from vLLM 0.32's model code). A draft trained
against one engine's capture and served on the other with the same config.json therefore gets
every hidden state one layer off. From a vLLM run's logged aux-layer line (`Using auxiliary layers
from speculative config: (0, 1, 2)`, server_configs.aux_layer_ids) and the draft's config ids,
`check(db, ctx, row)` says what vLLM captured, what SGLang would have captured with the same
file, and which ids make vLLM capture what SGLang does:

  engine_aux_capture (warning when the run's accept length is low, else info)

Nothing is said when the ids, the target's architecture and depth, or vLLM's rule for it are not
known: a missing fact is never guessed.

Not here: which ids a draft wants (align probes the built-in engine), SGLang-only checks (auxids).
"""
from __future__ import annotations

import json

from specwatch import aux_layers, modelinfo
from specwatch.db import views
from specwatch.diagnose import auxids
from specwatch.diagnose.context import Context, select
from specwatch.diagnose.finding import Evidence, Finding, Ref


def logged_ids(db, ctx: Context) -> dict[str, tuple[list[int], Ref]]:
    """run_id -> (ids of the last vLLM aux-layer line logged before the run's range ends, its
    line), for the runs in scope."""
    out = {}
    for r in select(db, """
            SELECT rs.run_id, arg_max(c.aux_layer_ids, c.byte_offset) AS ids,
                   max(c.byte_offset) AS byte_offset, arg_max(c.line_no, c.byte_offset) AS line_no,
                   any_value(c.source_id) AS source_id
            FROM server_configs c JOIN run_sources rs ON c.source_id = rs.source_id
             AND (rs.offset_to IS NULL OR c.byte_offset < rs.offset_to)
            WHERE c.aux_layer_ids IS NOT NULL GROUP BY rs.run_id"""):
        try:
            ids = [int(i) for i in json.loads(r["ids"])]
        except (TypeError, ValueError):
            continue
        out[r["run_id"]] = (ids, Ref("server_configs", ctx.paths.get(r["source_id"]),
                                     r["line_no"], r["byte_offset"], r["run_id"],
                                     "vLLM's aux-layer line"))
    return out


def _outputs(outputs: list) -> str:
    return "[" + ", ".join("nothing" if o is None else ("embedding" if o == -1 else f"layer {o}")
                           for o in outputs) + "]"


def check(row: dict, logged: dict) -> list[Finding]:
    """The cross-engine capture finding for one speculative run served by vLLM."""
    if row["run_id"] not in logged:
        return []
    served, ref = logged[row["run_id"]]
    arch, layers = auxids.target_of(row)
    rule = aux_layers.vllm_rule(arch)
    if layers is None or rule is None:
        return []
    sglang_rule = aux_layers.rule(arch, row.get("sglang_version"))
    if sglang_rule is None:
        return []
    on_vllm = aux_layers.captured_outputs(rule, served, layers)
    on_sglang = aux_layers.captured_outputs(sglang_rule, served, layers)
    if on_vllm == on_sglang:
        return []
    same = aux_layers.ids_for_outputs(rule, [o for o in on_sglang if o is not None], layers) \
        if None not in on_sglang else None
    draft_ids = modelinfo.aux_layer_ids(row["draft_model_path"])
    low = row["accept_len"] is not None and row["accept_len"] < views.LOW_ACCEPT_LEN
    text = (f"vLLM served ids {served} on {arch} ({layers} layers), capturing the outputs "
            f"{_outputs(on_vllm)} (ids as given); SGLang captures {_outputs(on_sglang)} with the "
            "same config.json (id + 1)")
    hint = ("if the draft was trained against SGLang's capture (SpecForge and SGLang-exported "
            "drafts are), every state it gets here is one layer early")
    if same:
        hint += (f": serve it on vLLM with ids {same} (aux_layer_ids = {same} in the sweep, or "
                 "eagle_config.eagle_aux_hidden_state_layer_ids in a copy of its config.json)")
    hint += "; a draft trained against vLLM's capture needs the opposite shift on SGLang"
    return [Finding(
        row["run_id"], row["run_name"], "engine_aux_capture", "warning" if low else "info",
        text + (f", and the accept length {row['accept_len']:.2f} is low" if low else ""),
        Evidence({"served_ids": served, "draft_config_ids": draft_ids,
                  "vllm_outputs": on_vllm, "sglang_outputs": on_sglang,
                  "ids_for_sglang_capture_on_vllm": same, "accept_len": row["accept_len"]},
                 (ref,)), hint, row.get("config_offset"))]
