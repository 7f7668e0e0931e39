"""Server configuration lines: SGLang's `server_args=` (repr <= 0.5.18, dict 0.5.19+), vLLM's
`Initializing a V1 LLM engine (vX) with config: ...` and `non-default args: {...}`, and the
mapping of each to the `server_configs` columns (`config_columns`); vLLM's EAGLE-3 aux-layer
line (`Using auxiliary layers from speculative config: (0, 1, 2)`) is parsed in `parse` and mapped
here.

Every parse is bounded: a payload longer than MAX_PAYLOAD or nested deeper than MAX_DEPTH is
refused with a reason (ValueError) instead of recursing or allocating without limit.

Not for: metric lines (see `parse`).
"""
from __future__ import annotations

import ast
import json
import re
import warnings
from typing import Any

MAX_PAYLOAD = 1 << 20      # characters; real 0.5.23 dicts are ~17 KB
MAX_DEPTH = 32             # brackets; real reprs nest 3 deep

_ANGLE = re.compile(r"<[^<>]*>")
_VLLM_VERSION = re.compile(r"\(v([^)\s]+)\)")
_TOP_KEY = re.compile(r"([A-Za-z_]\w*)=")


def _check_bounds(text: str) -> None:
    if len(text) > MAX_PAYLOAD:
        raise ValueError(f"config payload of {len(text)} characters is longer than the "
                         f"{MAX_PAYLOAD} this parser reads")
    depth = peak = 0
    for ch in text:
        if ch in "([{":
            depth += 1
            if depth > peak:
                peak = depth
                if peak > MAX_DEPTH:
                    raise ValueError(f"config payload nests deeper than {MAX_DEPTH} brackets")
        elif ch in ")]}":
            depth -= 1


def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return ast.unparse(node)  # a non-literal repr such as an enum or a function: keep its text


def _parse_expr(text: str) -> ast.AST:
    _check_bounds(text)
    try:
        with warnings.catch_warnings():  # a mangled line is an error value, not a warning
            warnings.simplefilter("ignore", SyntaxWarning)
            return ast.parse(_ANGLE.sub(lambda m: repr(m.group(0)), text), mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"not a complete ServerArgs(...) or dict repr ({exc.msg} at column "
                         f"{exc.offset})") from None
    except (RecursionError, MemoryError) as exc:
        raise ValueError(f"config payload cannot be parsed ({type(exc).__name__})") from None


def parse_server_args(text: str) -> dict[str, Any]:
    """`ServerArgs(a=1, ...)` (SGLang <= 0.5.18) or `{'a': 1, ...}` (0.5.19+) -> dict.

    Raises ValueError when the text is not one complete, bounded repr (e.g. a cut-off line)."""
    tree = _parse_expr(text.strip())
    if isinstance(tree, ast.Call):
        return {kw.arg: _literal(kw.value) for kw in tree.keywords if kw.arg}
    if isinstance(tree, ast.Dict):
        out = {}
        for k, v in zip(tree.keys, tree.values):
            if k is not None:
                out[str(_literal(k))] = _literal(v)
        return out
    raise ValueError("server_args is neither ServerArgs(...) nor a dict")


def split_top_level(text: str) -> dict[str, str]:
    """`a=1, b=X(c=2, d='x, y'), e={"f": 1}` -> {a: '1', b: "X(c=2, d='x, y')", e: '{"f": 1}'}:
    split on `, key=` outside quotes and brackets (vLLM's config line is not one Python
    expression: `dtype=torch.bfloat16`, JSON inside)."""
    _check_bounds(text)
    out: dict[str, str] = {}
    depth, quote, start, i, n = 0, None, 0, 0, len(text)
    key = None
    m = _TOP_KEY.match(text)
    if not m:
        return out
    key, start = m.group(1), m.end()
    i = start
    while i < n:
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth <= 0 and text.startswith(", ", i):
            m = _TOP_KEY.match(text, i + 2)
            if m:
                out[key] = text[start:i]
                key, start = m.group(1), m.end()
                i = start
                continue
        i += 1
    out[key] = text[start:].rstrip().rstrip(",")
    return out


def _value(raw: str) -> Any:
    raw = raw.strip()
    if raw.startswith("SpeculativeConfig(") or raw.startswith("{"):
        try:
            return parse_server_args(raw)
        except ValueError:
            return raw
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return raw


def parse_vllm_engine_config(text: str) -> dict[str, Any]:
    """The payload of `Initializing a V1 LLM engine (vX.Y.Z) with config: ...` -> fields, with
    `version` and `speculative_config` ({method, model, num_spec_tokens} or None)."""
    out: dict[str, Any] = {}
    if not re.match(r"Initializing an? (?:V[01] )?LLM engine \(v", text):
        raise ValueError("not vLLM's 'Initializing a V1 LLM engine (vX) with config:' line")
    head, sep, body = text.partition(" with config: ")
    if not sep:
        raise ValueError("no ' with config: ' after the engine header (cut-off line?)")
    m = _VLLM_VERSION.search(head)
    if m:
        out["version"] = m.group(1)
    for key, raw in split_top_level(body).items():
        out[key] = _value(raw)
    if "model" not in out:
        raise ValueError("engine config without model= (cut-off line?)")
    return out


def parse_vllm_args(text: str) -> dict[str, Any]:
    """`{'model': ..., 'speculative_config': {...}}` of vLLM's `non-default args:` line."""
    tree = _parse_expr(text.strip())
    if not isinstance(tree, ast.Dict):
        raise ValueError("non-default args is not a dict")
    return {str(_literal(k)): _literal(v) for k, v in zip(tree.keys, tree.values) if k is not None}


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _str(v) -> str | None:
    return v if isinstance(v, str) and v else None


def _spec_dict(v) -> dict:
    """vLLM's `speculative_config` as logged: a dict, or the JSON text the flag was given as
    (unreadable -> {})."""
    if isinstance(v, dict):
        return v
    if isinstance(v, str):  # vLLM accepts the flag as a JSON string
        try:
            d = json.loads(v)
            return d if isinstance(d, dict) else {}
        except ValueError:
            return {}
    return {}


def config_columns(kind: str, f: dict[str, Any]) -> dict[str, Any]:
    """server_configs columns for one config record (missing = None, never a default)."""
    if kind == "server_args":
        alg = _str(f.get("speculative_algorithm"))
        block = _int(f.get("speculative_dspark_block_size")) if alg == "DSPARK" else \
            _int(f.get("speculative_dflash_block_size")) if alg == "DFLASH" else None
        adaptive = f.get("speculative_adaptive")
        version = f.get("version", f.get("sglang_version"))
        return dict(
            engine_name="sglang", model_path=_str(f.get("model_path")),
            draft_model_path=_str(f.get("speculative_draft_model_path")),
            speculative_algorithm=alg,
            speculative_num_steps=_int(f.get("speculative_num_steps")),
            speculative_eagle_topk=_int(f.get("speculative_eagle_topk")),
            speculative_num_draft_tokens=_int(f.get("speculative_num_draft_tokens")),
            speculative_block_size=block,
            speculative_dynamic=("adaptive" if adaptive is True else None),
            tp_size=_int(f.get("tp_size")), dp_size=_int(f.get("dp_size")),
            ep_size=_int(f.get("ep_size", f.get("moe_ep_size"))), pp_size=_int(f.get("pp_size")),
            decode_log_interval=_int(f.get("decode_log_interval")),
            disable_cuda_graph=f.get("disable_cuda_graph")
            if isinstance(f.get("disable_cuda_graph"), bool) else None,
            sglang_version=str(version) if version is not None else None,
            engine_version=str(version) if version is not None else None,
            simulated=None)  # SGLANG_SIMULATE_ACC_LEN is an env var: see the `simulated` event
    if kind == "vllm_engine_config":
        sc = f.get("speculative_config")
        sc = sc if isinstance(sc, dict) else {}
        return dict(
            engine_name="vllm", model_path=_str(f.get("model")),
            draft_model_path=_str(sc.get("model", sc.get("draft_model"))),  # <= 0.6: draft_model
            speculative_algorithm=_str(sc.get("method")),
            speculative_num_steps=_int(sc.get("num_spec_tokens")),
            tp_size=_int(f.get("tensor_parallel_size")), dp_size=_int(f.get("data_parallel_size")),
            pp_size=_int(f.get("pipeline_parallel_size")),
            disable_cuda_graph=f.get("enforce_eager") if isinstance(f.get("enforce_eager"), bool)
            else None,
            engine_version=_str(f.get("version")))
    if kind == "vllm_args":
        sc = _spec_dict(f.get("speculative_config"))
        rsm = _str(sc.get("rejection_sample_method"))
        sched = sc.get("num_speculative_tokens_per_batch_size")
        return dict(
            engine_name="vllm", model_path=_str(f.get("model", f.get("model_tag"))),
            draft_model_path=_str(sc.get("model")), speculative_algorithm=_str(sc.get("method")),
            speculative_num_steps=_int(sc.get("num_speculative_tokens")),
            tp_size=_int(f.get("tensor_parallel_size")), dp_size=_int(f.get("data_parallel_size")),
            pp_size=_int(f.get("pipeline_parallel_size")),
            disable_cuda_graph=f.get("enforce_eager") if isinstance(f.get("enforce_eager"), bool)
            else None,
            speculative_dynamic=json.dumps(sched, default=str) if sched else None,
            simulated=(rsm == "synthetic") if rsm else None)
    if kind == "vllm_aux_layers":
        ids = f.get("aux_layer_ids")
        return dict(engine_name="vllm", aux_layer_ids=json.dumps(ids) if isinstance(ids, list)
                    else None, aux_layers_source=_str(f.get("source")))
    raise ValueError(f"not a config kind: {kind}")
