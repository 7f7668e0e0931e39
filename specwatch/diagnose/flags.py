"""The server settings doctor's advice names, in the words of the engine that served the run
(run_metrics.served_by): a vLLM user is told `--max-num-seqs`, an SGLang user
`--max-running-requests`. The built-in engine speaks SGLang's CLI, and a run whose log shows
neither engine gets SGLang's words, as before engines were told apart.

Names read from SGLang 0.5.23 (server_args.py) and vLLM 0.32 (engine/arg_utils.py,
config/speculative.py, envs.py).

Not here: when to advise (the checks).
"""
from __future__ import annotations

SGLANG = {
    "engine": "SGLang",
    "max_running": "--max-running-requests",
    "memory_fraction": "--mem-fraction-static",
    "context": "--context-length",
    "log_interval": "--decode-log-interval",
    "help": "`python -m sglang.launch_server --help`",
}
VLLM = {
    "engine": "vLLM",
    "max_running": "--max-num-seqs",
    "memory_fraction": "--gpu-memory-utilization",
    "context": "--max-model-len",
    "log_interval": "the environment variable VLLM_LOG_STATS_INTERVAL (seconds, default 10)",
    "help": "`python -m vllm.entrypoints.openai.api_server --help`",
}


def engine_of(row: dict) -> str:
    """'vllm' or 'sglang' (the built-in engine and unknown engines)."""
    return "vllm" if row.get("served_by") == "vllm" else "sglang"


def words(row: dict) -> dict[str, str]:
    return VLLM if engine_of(row) == "vllm" else SGLANG
