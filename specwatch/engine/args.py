"""SGLang `launch_server` flags for the built-in engine: parse, resolve, validate.

`parse_args(argv)` returns a resolved `ServerArgs` plus the warnings SGLang would print (and the
warnings for flags the built-in engine accepts but ignores). Resolution follows SGLang 0.5.23:
NEXTN -> EAGLE, auto-chosen (steps, topk, draft tokens) from the target's architecture,
topk == 1 forces draft tokens = steps + 1, max_running_requests = 48 with speculation.

Not here: anything that needs torch (the device is resolved by the server) or that touches the
network. Model paths are local directories or `builtin:<name>` (the packaged models).
"""

from __future__ import annotations

import dataclasses
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
    stream_output: bool = False
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
    load_balance_method: str = "round_robin"
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
    # Expert parallelism
    ep_size: int = 1
    # Optimization/debug options
    disable_radix_cache: bool = False
    cuda_graph_max_bs: int | None = None
    cuda_graph_bs: list[int] | None = None
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


# Flags the built-in engine acts on. Every other ServerArgs field is accepted and stored, with a
# warning that it has no effect here.
HONOURED = {
    "model_path", "tokenizer_path", "context_length", "host", "port", "skip_server_warmup",
    "max_running_requests", "max_total_tokens", "device", "tp_size", "random_seed", "log_level",
    "decode_log_interval", "api_key", "served_model_name", "dp_size", "load_balance_method",
    "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
    "speculative_eagle_topk", "speculative_num_draft_tokens", "disable_overlap_schedule",
}

# Alternative spellings SGLang accepts for the same field.
ALIASES = {
    "--model": "model_path",
    "--tp": "tp_size",
    "--tensor-parallel-size": "tp_size",
    "--dp": "dp_size",
    "--data-parallel-size": "dp_size",
    "--speculative-draft-model": "speculative_draft_model_path",
    "--speculative-draft": "speculative_draft_model_path",
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

Any other SGLang flag is accepted with a warning, so one sweep file drives both engines.
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


def _field_for_flag(flag: str) -> str | None:
    if flag in ALIASES:
        return ALIASES[flag]
    name = flag[2:].replace("-", "_")
    return name if name in _fields() else None


def _kind(f: dataclasses.Field) -> str:
    """'bool', 'int', 'float', 'str' or 'list[int]' from the field's annotation string."""
    t = str(f.type).replace(" | None", "")
    return t if t in ("bool", "int", "float", "str", "list[int]") else "str"


def _convert(flag: str, kind: str, raw: str) -> Any:
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
    except ValueError:
        raise ArgsError(f"{flag}: expected {kind}, got {raw!r}") from None
    return raw


def parse_args(argv: list[str]) -> ParsedArgs:
    """Parse SGLang-style flags (`--flag value`, `--flag=value`, `--bool-flag`) and resolve them."""
    fields = _fields()
    values: dict[str, Any] = {}
    given: list[tuple[str, str]] = []  # (flag as written, field) for honoured/ignored warnings
    warnings: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok in ("-h", "--help"):
            raise SystemExit(_print_help())
        if not tok.startswith("--"):
            raise ArgsError(f"unexpected argument {tok!r} (position {i + 1}): flags start with '--'")
        flag, eq, inline = tok.partition("=")
        name = _field_for_flag(flag)
        if name is None:
            # Unknown to this engine: take the next token as its value unless it is a flag.
            if eq:
                value_text = f"={inline}"
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                i += 1
                value_text = f" {argv[i]}"
            else:
                value_text = ""
            warnings.append(
                f"Ignoring unrecognized argument {flag}{value_text}: the specwatch built-in engine "
                "does not know this SGLang flag (accepted so one sweep file drives both engines)."
            )
            i += 1
            continue
        kind = _kind(fields[name])
        if kind == "bool":
            if eq:
                raise ArgsError(f"{flag} is a switch and takes no value (got {tok!r})")
            values[name] = True
        elif kind == "list[int]":
            items = [inline] if eq else []
            while not eq and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                i += 1
                items.append(argv[i])
            if not items:
                raise ArgsError(f"{flag} needs at least one integer value")
            values[name] = [_convert(flag, "int", x) for x in items]
        else:
            if eq:
                raw = inline
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                i += 1
                raw = argv[i]
            else:
                raise ArgsError(f"{flag} needs a value")
            values[name] = _convert(flag, kind, raw)
        given.append((flag, name))
        i += 1

    if "model_path" not in values:
        raise ArgsError("--model-path is required (a model directory, or builtin:target)")
    for flag, name in given:
        if name not in HONOURED:
            warnings.append(
                f"Ignoring {flag}={values[name]!r}: it has no effect in the specwatch built-in engine "
                "(accepted so one sweep file drives both engines)."
            )
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
    if steps < 1:
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
    if draft < 2:
        raise ArgsError(f"--speculative-num-draft-tokens {draft}: must be >= 2")
    if draft > steps * topk + 1:
        raise ArgsError(
            f"--speculative-num-draft-tokens {draft} exceeds steps*topk+1 = {steps * topk + 1} "
            f"(steps={steps}, topk={topk}); lower it or raise --speculative-eagle-topk"
        )
