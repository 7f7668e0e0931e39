"""Which target layers EAGLE-3 aux ids really capture in SGLang: the one rule, as data.

The draft's config.json names ids (`eagle_config.eagle_aux_hidden_state_layer_ids`); the target's
`set_eagle3_layers_to_capture(ids)` turns them into `model.layers_to_capture`, a list of layer
*indices*. The decoder loop captures, at index i, the input of layer i, i.e. the output of layer
i-1 (index 0 = the embedding output; gpt-oss also captures index L, the final-normed output).
An index no loop step reaches (e.g. -1, or >= L) captures nothing, and the draft gets fewer states.

So per architecture the rule is a function ids -> indices. Numbering used here:
  index i   what `layers_to_capture` holds (SGLang's own number)
  output k  "output of layer k", k = index - 1; -1 is the embedding output (what `specwatch align`
            and the built-in engine call `layer_{k}`).

Verified against the real `set_eagle3_layers_to_capture` of each class below in the SGLang
versions listed in VERIFIED_VERSIONS (tests/contract/test_aux_layers_contract.py calls them).

Not here: reading config files (doctor), matching captures to layers (align).
"""
from __future__ import annotations

from dataclasses import dataclass

# Rule names; each is the body of a real `set_eagle3_layers_to_capture` (ids given, not None).
PLUS_ONE = "plus_one"                                  # [i + 1 for i in ids]
PLUS_ONE_IF_FIRST_IS_1 = "plus_one_if_first_is_1"      # ids[0] == 1 ? [i + 1 ...] : ids
PLUS_ONE_UNLESS_MAX_IS_L = "plus_one_unless_max_is_L"  # max(ids) == L ? ids : [i + 1 ...]
AS_GIVEN = "as_given"                                  # vLLM: the ids are the indices

RULE_TEXT = {
    PLUS_ONE: "index = id + 1 (id k captures the output of layer k)",
    PLUS_ONE_IF_FIRST_IS_1: "index = id + 1 only when the first id is 1, else index = id "
                            "(id k captures the output of layer k-1; -1 captures nothing)",
    PLUS_ONE_UNLESS_MAX_IS_L: "index = id when the largest id equals the layer count L (id L = the "
                              "final-normed output), else index = id + 1",
    AS_GIVEN: "index = id (vLLM: id k captures the output of layer k-1, 0 the embedding output, "
              "L the last layer's)",
}

# architectures[0] of the target's config.json -> rule, per SGLang version (0.5.23 read from
# sglang/srt/models/*.py: llama, qwen2, qwen3, qwen3_moe, glm4_moe, deepseek_v2, kimi_k25,
# glm4_moe_lite, gpt_oss).
_RULES_0_5_23 = {
    "LlamaForCausalLM": PLUS_ONE,
    "Phi3ForCausalLM": PLUS_ONE,
    "InternLM3ForCausalLM": PLUS_ONE,
    "Qwen2ForCausalLM": PLUS_ONE,
    "Qwen3ForCausalLM": PLUS_ONE,
    "Qwen3MoeForCausalLM": PLUS_ONE,
    "Glm4MoeForCausalLM": PLUS_ONE,
    "DeepseekV2ForCausalLM": PLUS_ONE_IF_FIRST_IS_1,
    "DeepseekV3ForCausalLM": PLUS_ONE_IF_FIRST_IS_1,
    "DeepseekV32ForCausalLM": PLUS_ONE_IF_FIRST_IS_1,
    "KimiK25ForConditionalGeneration": PLUS_ONE_IF_FIRST_IS_1,   # delegates to its DeepseekV3
    "Glm4MoeLiteForCausalLM": PLUS_ONE_IF_FIRST_IS_1,
    "GptOssForCausalLM": PLUS_ONE_UNLESS_MAX_IS_L,
}
RULES: dict[str, dict[str, str]] = {"0.5.23": _RULES_0_5_23}
VERIFIED_VERSIONS = tuple(RULES)
# Where each architecture's class lives in the sglang package (for the contract tests).
MODULES = {
    "LlamaForCausalLM": "llama", "Phi3ForCausalLM": "llama", "InternLM3ForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3", "Qwen3MoeForCausalLM": "qwen3_moe",
    "Glm4MoeForCausalLM": "glm4_moe", "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v2", "DeepseekV32ForCausalLM": "deepseek_v2",
    "KimiK25ForConditionalGeneration": "kimi_k25", "Glm4MoeLiteForCausalLM": "glm4_moe_lite",
    "GptOssForCausalLM": "gpt_oss",
}


# vLLM captures at the ids as given: vLLM 0.32 model_executor/models/interfaces.py
# `_maybe_add_hidden_state(aux, layer_idx, ...)` appends `hidden_states + residual` when layer_idx is
# in `aux_hidden_state_layers` (the ids, `set_aux_hidden_state_layers`), called with start_layer
# before the first layer and idx + 1 after layer idx (llama.py, qwen2.py, qwen3_moe.py; Qwen3Model
# is a Qwen2Model). So one id list captures one layer earlier on vLLM than on SGLang (id + 1).
# tests/contract_vllm/test_aux_layers_contract.py reads these classes. The same code in the PyPI
# wheels of 0.33.0 and 0.34.0 (interfaces.py `_maybe_add_hidden_state` and
# `_set_aux_hidden_state_layers`, the call sites in llama.py, qwen2.py, qwen3_moe.py; read
# 2026-12-07): the same rules.
_VLLM_0_32 = {"LlamaForCausalLM": AS_GIVEN, "Qwen2ForCausalLM": AS_GIVEN,
              "Qwen3ForCausalLM": AS_GIVEN, "Qwen3MoeForCausalLM": AS_GIVEN}
VLLM_RULES: dict[str, dict[str, str]] = {"0.32.0": _VLLM_0_32, "0.33.0": _VLLM_0_32,
                                         "0.34.0": _VLLM_0_32}
VLLM_MODULES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
                "Qwen3ForCausalLM": "qwen2", "Qwen3MoeForCausalLM": "qwen3_moe"}


# Speculative methods whose draft reads the target's aux hidden states, lower case (SGLang's
# EAGLE3 and DFlash family, DFLASH and DSPARK: spec_info.py 0.5.23; vLLM's eagle3): only for these
# do aux ids decide what the draft sees.
AUX_METHODS = ("eagle3", "dflash", "dspark")


def vllm_version() -> str:
    """The newest vLLM release whose capture rules are verified (VLLM_RULES)."""
    return max(VLLM_RULES, key=_version_key)


def vllm_architectures() -> list[str]:
    return sorted(VLLM_RULES[vllm_version()])


def vllm_rule(architecture: str | None) -> str | None:
    """vLLM's rule for this target architecture (verified versions: VLLM_RULES), or None."""
    return VLLM_RULES[vllm_version()].get(architecture or "")


def _version_key(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split("."):
        digits = "".join(c for c in part if c.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def rules_for(version: str | None) -> tuple[str, dict[str, str]]:
    """(verified version used, its table): the newest verified version <= `version` (or the
    newest one when `version` is unknown or older than all)."""
    known = sorted(RULES, key=_version_key)
    use = known[-1]
    if version:
        older = [k for k in known if _version_key(k) <= _version_key(version)]
        use = older[-1] if older else known[0]
    return use, RULES[use]


def rule(architecture: str | None, version: str | None = None) -> str | None:
    """The rule name for this target architecture, or None when it is not known."""
    if not architecture:
        return None
    return rules_for(version)[1].get(architecture)


def capture_indices(rule_name: str, ids: list[int], num_layers: int) -> list[int]:
    """`model.layers_to_capture` as SGLang sets it for these ids."""
    ids = [int(i) for i in ids]
    if rule_name == PLUS_ONE:
        return [i + 1 for i in ids]
    if rule_name == PLUS_ONE_IF_FIRST_IS_1:
        return [i + 1 for i in ids] if ids and ids[0] == 1 else list(ids)
    if rule_name == PLUS_ONE_UNLESS_MAX_IS_L:
        return list(ids) if ids and max(ids) == num_layers else [i + 1 for i in ids]
    if rule_name == AS_GIVEN:
        return list(ids)
    raise ValueError(f"unknown aux-layer rule {rule_name!r}; known: {', '.join(RULE_TEXT)}")


def _reachable_max(rule_name: str, num_layers: int) -> int:
    """Largest index a forward pass captures (gpt-oss also captures index L)."""
    return num_layers if rule_name in (PLUS_ONE_UNLESS_MAX_IS_L, AS_GIVEN) else num_layers - 1


def captured_outputs(rule_name: str, ids: list[int], num_layers: int) -> list[int | None]:
    """Per id: which layer output k it feeds the draft (-1 = embedding), None = captures nothing."""
    top = _reachable_max(rule_name, num_layers)
    return [i - 1 if 0 <= i <= top else None for i in capture_indices(rule_name, ids, num_layers)]


def ids_for_outputs(rule_name: str, outputs: list[int], num_layers: int) -> list[int] | None:
    """Ids that make SGLang capture exactly these layer outputs, or None if no id list does."""
    outputs = [int(k) for k in outputs]
    cands = [[k + 1 for k in outputs], [k for k in outputs], [k + 2 for k in outputs]]
    for ids in cands:
        if captured_outputs(rule_name, ids, num_layers) == outputs:
            return ids
    return None


@dataclass(frozen=True)
class Reading:
    """What a list of ids captures on a target, and under which rule."""

    rule: str
    indices: list[int]
    outputs: list[int | None]

    @property
    def missing(self) -> list[int]:
        """Positions whose id captures nothing (the draft then gets fewer states than it expects)."""
        return [n for n, o in enumerate(self.outputs) if o is None]


def read(architecture: str | None, ids: list[int], num_layers: int,
         version: str | None = None, engine: str | None = None) -> dict[str, Reading]:
    """{rule: Reading} of the engine that served the ids (`engine` 'vllm', else SGLang's rules, which
    the built-in engine follows): one entry when the architecture is known; else on SGLang every
    rule that could apply, on vLLM none (its capture is verified per model class: VLLM_RULES)."""
    if engine == "vllm":
        r = vllm_rule(architecture)
        names = [r] if r else []
    else:
        r = rule(architecture, version)
        names = [r] if r else list(RULE_TEXT)
    return {n: Reading(n, capture_indices(n, ids, num_layers), captured_outputs(n, ids, num_layers))
            for n in names}
