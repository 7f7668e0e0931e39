"""What a sweep file's config means on vLLM: keys, checks and the `--speculative-config` JSON.

A vLLM config (`engine = "vllm"`) is written in vLLM's own words:

    speculative_algorithm = "eagle3"   # vLLM's `method`: eagle3, eagle, ngram, draft_model, mtp,
                                       # suffix, ... (lower case, as vLLM spells it)
    draft_model = "fixture:tiny-eagle3-vllm"   # `model` of the speculative config (eagle, eagle3,
                                       # draft_model, medusa, mlp_speculator need one; ngram and
                                       # suffix take none; mtp uses the target's own layers)
    num_speculative_tokens = 3         # required: drafts proposed per verify step (k)
    speculative_config = {prompt_lookup_max = 3, draft_tensor_parallel_size = 1}
                                       # any other SpeculativeConfig field, checked against the
                                       # installed vLLM before a server starts (vllm_check)

`speculative_num_steps`, `speculative_eagle_topk` and `speculative_num_draft_tokens` are SGLang's
and refused here (and `num_speculative_tokens` / `speculative_config` on SGLang). vLLM drafts a
chain of k tokens per step, so a config is stored as SGLang's equivalent chain: steps = k, topk = 1,
draft tokens = k + 1 (the bonus/root token included), which makes accept_rate = (accept_len − 1)
/ k = accepted / drafted on both engines. `speculative_config` keys specwatch sets itself
(`method`, `model`, `num_speculative_tokens`) are refused: use the keys above.

`spec_json(config, draft_path)` is the `--speculative-config` value (sorted keys, so equal configs
give equal argv).

Not here: parsing TOML (sweepfile), launching (launch), asking vLLM (vllm_check).
"""
from __future__ import annotations

import hashlib
import json

KEYS = {"num_speculative_tokens": "an integer", "speculative_config": "a table"}
SGLANG_KEYS = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
# Methods whose speculative config names a draft model, and those that take none (vLLM 0.32
# vllm/config/speculative.py: `model` is the draft, eagle head or extra weights).
DRAFT_METHODS = ("eagle", "eagle3", "draft_model", "medusa", "mlp_speculator", "dflash",
                 "dspark")
NO_DRAFT_METHODS = ("ngram", "ngram_gpu", "suffix")
OWN_SPEC_KEYS = {"method": "speculative_algorithm", "model": "draft_model",
                 "num_speculative_tokens": "num_speculative_tokens"}
DEFAULT_METHOD = "eagle3"


def engine_keys(engine: str, table: dict, where_of) -> str | None:
    """Why a grid/config table uses a key of the other engine (`where_of(key)` -> file:line),
    as a SweepFileError message, else None."""
    if engine == "vllm":
        bad = next((k for k in SGLANG_KEYS if k in table), None)
        if bad:
            return (f"{where_of(bad)}: {bad}: an SGLang key; vLLM drafts a chain of "
                    "num_speculative_tokens tokens per step: write num_speculative_tokens = N "
                    "(and other SpeculativeConfig fields in speculative_config = {...})")
        for key in OWN_SPEC_KEYS:
            values = table.get("speculative_config")
            for v in values if isinstance(values, list) else [values]:
                if isinstance(v, dict) and key in v:
                    return (f"{where_of('speculative_config')}: speculative_config.{key}: set "
                            f"by specwatch from the sweep key {OWN_SPEC_KEYS[key]}; use that key")
        return None
    bad = next((k for k in KEYS if k in table), None)
    if bad:
        return (f"{where_of(bad)}: {bad}: a vLLM key (engine = \"vllm\"); on {engine} use "
                "speculative_num_steps, speculative_eagle_topk and speculative_num_draft_tokens")
    return None


def invalid(v: dict) -> str | None:
    """Why this merged vLLM config cannot run, or None."""
    method = v.get("speculative_algorithm") or DEFAULT_METHOD
    if method != method.lower():
        return (f"speculative_algorithm={method!r}: vLLM spells its methods in lower case; write "
                f"{method.lower()!r}")
    if v.get("num_speculative_tokens") is None:
        return ("num_speculative_tokens is required (vLLM's default depends on the draft's "
                "config; pin it so the sweep measures what it says)")
    if method in DRAFT_METHODS and not v.get("draft_model"):
        return (f"draft_model: missing; method {method} needs one (set draft_model at the top "
                "level or in this grid/config)")
    return None


def as_chain(v: dict) -> dict:
    """The merged config with SGLang's equivalent chain (steps = k, topk = 1, draft tokens =
    k + 1), the method lower-cased, the draft dropped for methods that take none, and the extra
    SpeculativeConfig fields as sorted JSON (`speculative_config_json`)."""
    k = v["num_speculative_tokens"]
    method = v.get("speculative_algorithm") or DEFAULT_METHOD
    extra = v.get("speculative_config") or {}
    return {**v, "speculative_algorithm": method, "speculative_num_steps": k,
            "speculative_eagle_topk": 1, "speculative_num_draft_tokens": k + 1,
            "draft_model": None if method in NO_DRAFT_METHODS else v.get("draft_model"),
            "speculative_config_json": json.dumps(extra, sort_keys=True) if extra else None}


def name_suffix(speculative_config_json: str | None) -> str:
    """Auto-name part for the extra fields: `-c` + a short hash (empty without any)."""
    if not speculative_config_json:
        return ""
    return "-c" + hashlib.sha1(speculative_config_json.encode()).hexdigest()[:6]


def spec_json(config, draft_path: str | None = None) -> str | None:
    """`--speculative-config` for a sweepfile.Config (None for a baseline)."""
    if not config.speculative_algorithm:
        return None
    spec = {"method": config.speculative_algorithm,
            "num_speculative_tokens": config.speculative_num_steps}
    draft = draft_path or config.draft_model
    if draft:
        spec["model"] = draft
    spec.update(json.loads(config.speculative_config) if config.speculative_config else {})
    return json.dumps(spec, sort_keys=True)
