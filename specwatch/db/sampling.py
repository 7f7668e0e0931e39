"""The sampling fingerprint of a run: what, besides the server config, decides which tokens the
load makes the server generate. Two runs are only compared (speedup) when their fingerprints are
equal (stats.py, `group_baselines`); one that differs is said so, never silently compared.

Pure: a sweepfile `Workload` in, a JSON string out (sorted keys, so equal settings give equal
text). Keys:
  temperature, top_p, top_k   the sampling parameters the request carries. The load generator
                              (load.send) sends only temperature; top_p and top_k are then SGLang's
                              SamplingParams defaults (1.0 and -1: no truncation), recorded as such.
  ignore_eos                  load.send always sets it: every request produces max tokens.
  max_new_tokens              {"min": .., "max": ..}: the output length range (equal = fixed).
  chat_template               false: load.send posts raw text to /generate (no chat template).
  seed                        the workload seed (chooses the prompts and, above temperature 0,
                              seeds each request's sampling).
  prompts, num_prompts, input_chars   which requests are sent (a different prompt set is a
                              different workload even with equal sampling).
A workload field added later (e.g. top_p) is read when present.
"""
from __future__ import annotations

import json

SGLANG_DEFAULT_TOP_P = 1.0
SGLANG_DEFAULT_TOP_K = -1


def _length(v) -> dict | None:
    if v is None:
        return None
    return {"min": v.min, "max": v.max}


def sampling_fingerprint(workload) -> str:
    """The JSON fingerprint of `workload` (a `sweepfile.Workload`)."""
    get = lambda name, default: (default if getattr(workload, name, None) is None
                                 else getattr(workload, name))
    fp = {
        "temperature": float(workload.temperature),
        "top_p": float(get("top_p", SGLANG_DEFAULT_TOP_P)),
        "top_k": int(get("top_k", SGLANG_DEFAULT_TOP_K)),
        "ignore_eos": bool(get("ignore_eos", True)),
        "max_new_tokens": _length(workload.output_tokens),
        "chat_template": bool(get("chat_template", False)),
        "seed": workload.seed,
        "prompts": workload.prompts,
        "num_prompts": workload.num_prompts,
        "input_chars": _length(workload.input_chars),
    }
    return json.dumps(fp, sort_keys=True, separators=(",", ":"))


def fingerprint_diff(a: str | None, b: str | None) -> list[str]:
    """Keys whose values differ between two fingerprints ("unknown" when either is NULL), for
    messages such as "baseline differs in: temperature, seed"."""
    if a is None or b is None:
        return [] if a == b else ["unknown"]
    da, db = json.loads(a), json.loads(b)
    return sorted(k for k in set(da) | set(db) if da.get(k) != db.get(k))
