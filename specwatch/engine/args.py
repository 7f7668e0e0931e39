"""SGLang `launch_server` flags for the built-in engine: parse, resolve, validate.

`parse_args(argv)` parses with an argparse parser built from SGLang's own flag table
(`sglang_flags.json`, generated from the real parser by scripts/gen_engine_flags.py and checked
against the installed sglang by the contract tests), so it accepts exactly what SGLang accepts, and
returns a resolved `ServerArgs` plus the warnings SGLang would print (and the warnings for flags the
built-in engine accepts but ignores). Resolution follows SGLang 0.5.23:
NEXTN -> EAGLE, auto-chosen (steps, topk, draft tokens) from the target's architecture,
topk == 1 forces draft tokens = steps + 1, max_running_requests = 48 with speculation.

Not here: anything that needs torch (the device is resolved by the server) or that touches the
network. Model paths are local directories or `builtin:<name>` (the packaged models).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specwatch.engine import BUILTIN_PREFIX, models_dir


class ArgsError(ValueError):
    """A flag value the engine cannot run with; the message says which flag, why, what to do."""


@dataclass
class ServerArgs:
    """Subset of SGLang's ServerArgs, same field names, order and defaults (repr = the log line)."""

    # Model and tokenizer
    model_path: str
    tokenizer_path: str | None = None
    tokenizer_mode: str = "auto"
    skip_tokenizer_init: bool = False
    load_format: str = "auto"
    trust_remote_code: bool = False
    context_length: int | None = None
    is_embedding: bool = False
    revision: str | None = None
    # HTTP server
    host: str = "127.0.0.1"
    port: int = 30000
    skip_server_warmup: bool = False
    # Quantization and data type
    dtype: str = "auto"
    quantization: str | None = None
    kv_cache_dtype: str = "auto"
    # Memory and scheduling
    mem_fraction_static: float | None = None
    max_running_requests: int | None = None
    max_queued_requests: int | None = None
    max_total_tokens: int | None = None
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int = 16384
    schedule_policy: str = "fcfs"
    schedule_conservativeness: float = 1.0
    page_size: int | None = None
    # Runtime options
    device: str | None = None
    tp_size: int = 1
    pp_size: int = 1
    stream_interval: int = 1
    random_seed: int | None = None
    watchdog_timeout: float = 300
    download_dir: str | None = None
    base_gpu_id: int = 0
    # Logging
    log_level: str = "info"
    log_level_http: str | None = None
    log_requests: bool = False
    log_requests_level: int = 2
    show_time_cost: bool = False
    enable_metrics: bool = False
    enable_metrics_for_all_schedulers: bool = False
    decode_log_interval: int = 40
    # API related
    api_key: str | None = None
    served_model_name: str | None = None
    chat_template: str | None = None
    # Data parallelism
    dp_size: int = 1
    load_balance_method: str = "auto"
    # Multi-node distributed serving
    dist_init_addr: str | None = None
    nnodes: int = 1
    node_rank: int = 0
    # Kernel backend
    attention_backend: str | None = None
    sampling_backend: str | None = None
    # Speculative decoding
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_draft_model_revision: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_accept_threshold_single: float = 1.0
    speculative_accept_threshold_acc: float = 1.0
    speculative_token_map: str | None = None
    speculative_attention_mode: str = "prefill"
    speculative_adaptive: bool = False
    speculative_adaptive_config: str | None = None
    # Expert parallelism
    ep_size: int = 1
    # Optimization/debug options
    disable_radix_cache: bool = False
    cuda_graph_max_bs_decode: int | None = None
    disable_cuda_graph: bool = False
    disable_cuda_graph_padding: bool = False
    disable_custom_all_reduce: bool = False
    disable_overlap_schedule: bool = False
    enable_mixed_chunk: bool = False
    enable_dp_attention: bool = False
    enable_torch_compile: bool = False
    torch_compile_max_bs: int = 32
    allow_auto_truncate: bool = False
    enable_memory_saver: bool = False
    # PD disaggregation
    disaggregation_mode: str = "null"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def cuda_graph_max_bs(self) -> int | None:
        """SGLang 0.5.23 spells it --cuda-graph-max-bs-decode (`--cuda-graph-max-bs` is ambiguous)."""
        return self.cuda_graph_max_bs_decode


# Flags the built-in engine acts on. Every other ServerArgs field is accepted and stored, with a
# warning that it has no effect here.
HONOURED = {
    "model_path", "tokenizer_path", "context_length", "host", "port", "skip_server_warmup",
    "max_running_requests", "max_total_tokens", "device", "tp_size", "random_seed", "log_level",
    "decode_log_interval", "api_key", "served_model_name", "dp_size", "load_balance_method",
    "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
    "speculative_eagle_topk", "speculative_num_draft_tokens", "disable_overlap_schedule",
    "cuda_graph_max_bs_decode", "disable_cuda_graph", "speculative_adaptive",
    "speculative_adaptive_config",
}

SPEC_ALGORITHMS = ("EAGLE", "EAGLE3")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")

# SGLang 0.5.8-0.5.23 `auto_choose_speculative_params`: (steps, topk, draft tokens) by the
# target's architectures[0]; every architecture not listed gets (3, 1, 4).
AUTO_SPEC_PARAMS = {
    "LlamaForCausalLM": (5, 4, 8),
    "Grok1ForCausalLM": (5, 4, 8),
    "Grok1VForCausalLM": (5, 4, 8),
}
AUTO_SPEC_DEFAULT = (3, 1, 4)

HELP = """\
usage: python -m specwatch.engine --model-path PATH [SGLang launch_server flags]

The built-in engine: a small EAGLE-3-style speculative decoder that speaks SGLang's CLI,
HTTP API and log format, on CPU or a CUDA GPU. Flags it acts on:

  --model-path PATH                  target model dir, or builtin:target
  --speculative-algorithm {EAGLE,EAGLE3,NEXTN}
                                     absent = no speculation; NEXTN means EAGLE
  --speculative-draft-model-path P   draft dir, or builtin:draft-eagle3 / builtin:draft-eagle3-shifted
  --speculative-num-steps N          omit all three to get SGLang's auto choice
  --speculative-eagle-topk K
  --speculative-num-draft-tokens D   topk=1 forces D=N+1; D > N*K+1 is an error
  --speculative-adaptive             speculation depth per decode step from the running batch
                                     size, as SGLang 0.5.23 (topk 1 only; steps 0 = off)
  --speculative-adaptive-config FILE SGLang's adaptive JSON: {"1": {"candidate_steps": [3]},
                                     "8": {"candidate_steps": [0]}} (batch-size lower bounds)
  --tp-size N                        one process computes; sets the TP tag of the log lines
  --dp-size N                        N scheduler threads, requests dispatched round-robin
  --host HOST --port PORT            HTTP server (default 127.0.0.1:30000)
  --decode-log-interval N            one `Decode batch` line every N decode steps (default 40)
  --max-running-requests N           default 48 with speculation
  --max-total-tokens N               KV cache capacity in tokens
  --context-length N                 at most the model's max_position_embeddings
  --served-model-name NAME           default: the --model-path argument
  --device {cpu,cuda}                default cpu; cuda puts weights and KV cache on the GPU
                                     and runs the Triton drafting/verify kernels
  --random-seed N  --api-key KEY  --skip-server-warmup
  --log-level {debug,info,warning,error,critical}

Any other flag of SGLang's own parser (specwatch/engine/sglang_flags.json, generated from it) is
accepted with a warning, so one sweep file drives both engines; what SGLang's parser rejects
(unknown flags, ambiguous prefixes) is rejected the same way, with exit code 2.
Environment: SGLANG_LOG_MS=1 adds milliseconds to log timestamps.

Example:
  python -m specwatch.engine --model-path builtin:target --speculative-algorithm EAGLE3 \\
      --speculative-draft-model-path builtin:draft-eagle3 --speculative-num-steps 3 \\
      --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --port 30000
"""


@dataclass
class ParsedArgs:
    """Resolved server args, the warnings to log, and the target's config.json."""

    server_args: ServerArgs
    warnings: list[str] = field(default_factory=list)
    target_config: dict[str, Any] = field(default_factory=dict)


def _fields() -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(ServerArgs)}


# ----------------------------------------------------------------------------- SGLang's flag table

FLAGS_FILE = Path(__file__).with_name("sglang_flags.json")


class ArgsUsageError(ArgsError):
    """SGLang's parser would reject this command line (unknown flag, ambiguous prefix, bad value):
    the message is argparse's, as SGLang prints it after `error: `."""

    def __init__(self, message: str, usage: str) -> None:
        super().__init__(message)
        self.usage = usage


def error_text(exc: ArgsError, prog: str = "python -m specwatch.engine") -> str:
    """What the engine prints before exiting 2: argparse's `usage:` + `PROG: error: MSG` for a
    usage error (as SGLang's parser does), `error: MSG` for a value the engine cannot run with."""
    if isinstance(exc, ArgsUsageError):
        return f"{exc.usage.rstrip()}\n{prog}: error: {exc}"
    return f"error: {exc}"


def flag_table() -> dict[str, Any]:
    """The committed table generated from SGLang's parser by scripts/gen_engine_flags.py."""
    return _flag_table()


@functools.lru_cache(maxsize=1)
def _flag_table() -> dict[str, Any]:
    return json.loads(FLAGS_FILE.read_text())


def _nullable_str(val: str):
    """SGLang's `nullable_str`: '' or 'None' -> None."""
    return None if not val or val == "None" else val


def _plain_int(val: str) -> int:
    """Stricter than SGLang's `human_readable_int` (which also takes 32k, 1Mi): plain integers."""
    try:
        return int(val)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid int value: {val!r} (the built-in engine takes plain integers here)") from None


def _unchecked(type_name: str):
    def refuse(val: str):
        raise argparse.ArgumentTypeError(
            f"the built-in engine cannot check this value the way SGLang's {type_name} does, so "
            "it refuses the flag; drop it for engine = \"builtin\"")
    refuse.__name__ = type_name.rsplit(".", 1)[-1]
    return refuse


_TYPES = {None: None, "str": None, "int": int, "float": float, "json.loads": json.loads,
          "sglang.srt.utils.common.nullable_str": _nullable_str,
          "sglang.srt.utils.common.human_readable_int": _plain_int}


class _StoreFixed(argparse.Action):
    """A flag that takes a value from `choices` and stores `const` (SGLang's retired valued flags)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, self.const)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print and exit; the caller decides
        raise ArgsUsageError(message, self.format_usage())

    def print_help(self, file=None) -> None:
        print(HELP, end="", file=file)


@functools.lru_cache(maxsize=1)
def build_parser() -> argparse.ArgumentParser:
    """An argparse parser with SGLang's options, in SGLang's order (so ambiguity messages list the
    same candidates), SGLang's allow_abbrev, nargs, choices and defaults."""
    t = _flag_table()
    p = _Parser(prog="python -m specwatch.engine", allow_abbrev=t["allow_abbrev"],
                prefix_chars=t["prefix_chars"])
    for a in t["actions"]:
        opts, kind = a["option_strings"], a["action"]
        kw: dict[str, Any] = {"dest": a["dest"], "default": a["default"]}
        if a["required"]:
            kw["required"] = True
        if kind in ("_StoreTrueAction", "DeprecatedStoreTrueAction"):
            p.add_argument(*opts, action="store_true", **kw)
        elif kind == "_StoreFalseAction":
            p.add_argument(*opts, action="store_false", **kw)
        elif kind in ("_StoreConstAction", "DeprecatedStoreConstAction") and a["nargs"] in (0, None) \
                and a["choices"] is None:
            p.add_argument(*opts, action="store_const", const=a["const"], **kw)
        elif kind == "DeprecatedStoreConstAction":   # takes one of `choices`, stores const
            p.add_argument(*opts, action=_StoreFixed, const=a["const"], nargs=a["nargs"],
                           choices=a["choices"], **kw)
        elif kind == "BooleanOptionalAction":
            p.add_argument(opts[0], action=argparse.BooleanOptionalAction, **kw)
        else:
            ty = _TYPES[a["type"]] if a["type"] in _TYPES and kind == "_StoreAction" \
                else _unchecked(a["type"] or kind)
            if ty is not None:
                kw["type"] = ty
            if a["nargs"] is not None:
                kw["nargs"] = a["nargs"]
            if a["choices"] is not None:
                kw["choices"] = a["choices"]
            p.add_argument(*opts, action="store", **kw)
    return p


def parse_args(argv: list[str]) -> ParsedArgs:
    """Parse with SGLang's own flag table (unknown flags, ambiguous prefixes and bad values raise
    ArgsUsageError with argparse's message), then resolve as SGLang 0.5.23 does."""
    parser = build_parser()
    ns = parser.parse_args(list(argv))
    table = {a["dest"]: a for a in _flag_table()["actions"]}
    fields = _fields()
    values = {name: getattr(ns, name) for name in fields if hasattr(ns, name)}
    warnings: list[str] = []
    for dest, a in table.items():
        v = getattr(ns, dest, a["default"])
        if v != a["default"] and dest not in HONOURED:
            warnings.append(
                f"Ignoring {a['option_strings'][0]}={v!r}: it has no effect in the specwatch "
                "built-in engine (accepted so one sweep file drives both engines).")
    args = ServerArgs(**values)
    target_config = _resolve(args, warnings)
    return ParsedArgs(server_args=args, warnings=warnings, target_config=target_config)


def _print_help() -> int:
    print(HELP, end="")
    return 0


def resolve_model_path(spec: str, flag: str) -> Path:
    """`builtin:<name>` -> the packaged model dir; a plain path must be a dir with config.json."""
    if spec.startswith(BUILTIN_PREFIX):
        name = spec[len(BUILTIN_PREFIX):]
        path = models_dir() / name
        known = sorted(p.name for p in models_dir().iterdir() if (p / "config.json").is_file()) \
            if models_dir().is_dir() else []
        if not (path / "config.json").is_file():
            raise ArgsError(f"{flag} {spec}: no built-in model named {name!r} (known: {', '.join(known) or 'none'})")
        return path
    path = Path(spec).expanduser()
    if not (path / "config.json").is_file():
        raise ArgsError(
            f"{flag} {spec}: not a directory with a config.json; the built-in engine loads local "
            "model dirs only (no downloads): pass a local dir or builtin:target"
        )
    return path.resolve()


def _read_config(path: Path, flag: str) -> dict[str, Any]:
    cfg_file = path / "config.json"
    try:
        return json.loads(cfg_file.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ArgsError(f"{flag}: cannot read {cfg_file}: {e}") from None


def _resolve(a: ServerArgs, warnings: list[str]) -> dict[str, Any]:
    """Fill defaults the way SGLang's __post_init__ does; returns the target's config.json."""
    original_model = a.model_path
    a.model_path = str(resolve_model_path(a.model_path, "--model-path"))
    target_config = _read_config(Path(a.model_path), "--model-path")
    if a.tokenizer_path is None:
        a.tokenizer_path = a.model_path
    if a.served_model_name is None:
        a.served_model_name = original_model
    if a.log_level not in LOG_LEVELS:
        raise ArgsError(f"--log-level {a.log_level!r}: choose one of {', '.join(LOG_LEVELS)}")
    for flag, value, low in (("--tp-size", a.tp_size, 1), ("--dp-size", a.dp_size, 1),
                             ("--decode-log-interval", a.decode_log_interval, 1),
                             ("--port", a.port, 0)):
        if value < low:
            raise ArgsError(f"{flag} {value}: must be >= {low}")
    if a.port > 65535:
        raise ArgsError(f"--port {a.port}: must be <= 65535")
    if a.max_running_requests is not None and a.max_running_requests < 1:
        raise ArgsError(f"--max-running-requests {a.max_running_requests}: must be >= 1")
    if a.device not in (None, "cpu", "cuda"):
        raise ArgsError(f"--device {a.device!r}: the built-in engine runs on cpu or cuda")
    model_max = target_config.get("max_position_embeddings")
    if a.context_length is not None and model_max is not None and a.context_length > model_max:
        raise ArgsError(
            f"--context-length {a.context_length} exceeds the model's max_position_embeddings "
            f"{model_max} ({a.model_path}/config.json); lower it or omit it"
        )
    # The built-in engine has no overlap scheduler: say so in the logged args.
    a.disable_overlap_schedule = True
    _resolve_speculative(a, target_config, warnings)
    return target_config


def _resolve_speculative(a: ServerArgs, target_config: dict[str, Any], warnings: list[str]) -> None:
    spec_flags = (a.speculative_draft_model_path, a.speculative_num_steps,
                  a.speculative_eagle_topk, a.speculative_num_draft_tokens)
    if a.speculative_algorithm is None:
        if any(v is not None for v in spec_flags):
            warnings.append(
                "Speculative flags are set but --speculative-algorithm is not: speculative "
                "decoding is off (pass --speculative-algorithm EAGLE3 to turn it on)."
            )
        return
    algo = a.speculative_algorithm.upper()
    if algo == "NEXTN":
        algo = "EAGLE"
    if algo not in SPEC_ALGORITHMS:
        raise ArgsError(
            f"--speculative-algorithm {a.speculative_algorithm}: the built-in engine supports "
            "EAGLE, EAGLE3 (and NEXTN, which means EAGLE)"
        )
    a.speculative_algorithm = algo
    if a.speculative_draft_model_path is None:
        raise ArgsError(
            f"--speculative-algorithm {algo} needs --speculative-draft-model-path "
            "(e.g. builtin:draft-eagle3)"
        )
    a.speculative_draft_model_path = str(
        resolve_model_path(a.speculative_draft_model_path, "--speculative-draft-model-path"))
    if a.speculative_draft_model_revision is None:
        a.speculative_draft_model_revision = "main"
    if a.max_running_requests is None:
        a.max_running_requests = 48
        warnings.append(
            "Max running requests is reset to 48 for speculative decoding. You can override "
            "this by explicitly setting --max-running-requests."
        )

    if a.speculative_adaptive:
        _resolve_adaptive(a, warnings)
    if a.speculative_num_steps is None:
        if a.speculative_eagle_topk is not None or a.speculative_num_draft_tokens is not None:
            raise ArgsError(
                "--speculative-eagle-topk/--speculative-num-draft-tokens were given without "
                "--speculative-num-steps: SGLang auto-chooses all three only when all three are "
                "omitted; give --speculative-num-steps too, or omit the others"
            )
        arch = (target_config.get("architectures") or [""])[0]
        steps, topk, draft = AUTO_SPEC_PARAMS.get(arch, AUTO_SPEC_DEFAULT)
        a.speculative_num_steps, a.speculative_eagle_topk, a.speculative_num_draft_tokens = (
            steps, topk, draft)
    if a.speculative_eagle_topk is None:
        raise ArgsError(
            f"--speculative-num-steps {a.speculative_num_steps} needs --speculative-eagle-topk "
            "(and --speculative-num-draft-tokens unless topk is 1)"
        )
    steps, topk = a.speculative_num_steps, a.speculative_eagle_topk
    if steps < (0 if a.speculative_adaptive else 1):
        raise ArgsError(f"--speculative-num-steps {steps}: must be >= 1")
    if topk < 1:
        raise ArgsError(f"--speculative-eagle-topk {topk}: must be >= 1")
    if topk == 1 and a.speculative_num_draft_tokens != steps + 1:
        if a.speculative_num_draft_tokens is not None:
            warnings.append(
                "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                "speculative_eagle_topk == 1"
            )
        a.speculative_num_draft_tokens = steps + 1
    draft = a.speculative_num_draft_tokens
    if draft is None:
        raise ArgsError(
            f"--speculative-eagle-topk {topk} > 1 needs --speculative-num-draft-tokens "
            f"(at most steps*topk+1 = {steps * topk + 1})"
        )
    if draft < (1 if a.speculative_adaptive else 2):
        raise ArgsError(f"--speculative-num-draft-tokens {draft}: must be >= 2")
    if draft > steps * topk + 1:
        raise ArgsError(
            f"--speculative-num-draft-tokens {draft} exceeds steps*topk+1 = {steps * topk + 1} "
            f"(steps={steps}, topk={topk}); lower it or raise --speculative-eagle-topk"
        )


def _resolve_adaptive(a: ServerArgs, warnings: list[str]) -> None:
    """SGLang 0.5.23 `_maybe_disable_adaptive` + `_init_adaptive_speculative_params`
    (arg_groups/speculative_hook.py, adaptive_spec_params.adaptive_unsupported_reason): adaptive
    is turned off, with SGLang's warning, for topk != 1 or attention DP; else the config's
    candidate steps give topk 1, the initial steps (the middle candidate when not given, which
    must be a candidate) and draft tokens = steps + 1. Runs before the auto choice, as in SGLang."""
    from specwatch.engine import adaptive

    reason = None
    if a.speculative_eagle_topk is not None and a.speculative_eagle_topk != 1:
        reason = f"speculative_eagle_topk={a.speculative_eagle_topk} (only topk=1 is supported)"
    elif a.enable_dp_attention:
        reason = ("attention DP is not supported (adaptive tier decisions are not synchronized "
                  "across DP ranks)")
    if reason is not None:
        warnings.append(f"speculative_adaptive disabled: {reason}. "
                        "Falling back to static speculative params.")
        a.speculative_adaptive = False
        return
    try:
        steps = adaptive.candidate_steps(a.speculative_adaptive_config)
    except adaptive.AdaptiveConfigError as e:
        raise ArgsError(str(e)) from None
    if max(steps) < 1:
        raise ArgsError(f"--speculative-adaptive-config {a.speculative_adaptive_config}: every "
                        "candidate step is 0, so speculation would never run; give a slot a "
                        "positive step, or drop --speculative-algorithm for plain decoding")
    if a.speculative_eagle_topk is None:
        a.speculative_eagle_topk = 1
    if a.speculative_num_steps is None:
        a.speculative_num_steps = steps[len(steps) // 2]
    if a.speculative_num_steps not in steps:
        raise ArgsError(f"--speculative-num-steps={a.speculative_num_steps} is not in the adaptive "
                        f"config candidate_steps {steps}. Pass one of those values.")
    a.speculative_num_draft_tokens = a.speculative_num_steps + 1
