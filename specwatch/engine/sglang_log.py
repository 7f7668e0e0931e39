"""SGLang's log output for the built-in engine: line prefix, batch lines, and their counters.

Formats are SGLang 0.5.11-0.5.23's (non-PD, plain KV pool, no optional env features):
  [YYYY-MM-DD HH:MM:SS{.mmm}{ DPd}{ TPt}] message        (LOG_FORMATS.md section 1)
  Prefill batch, #new-seq: .., ..., {cpu|cuda} graph: False, input throughput (token/s): ..
  Decode batch, #running-req: .., ..., accept len: .., accept rate: .., ..., #queue-req: ..
and the formulas of accept len / accept rate / gen throughput are 0.5.23's (section 4).

Not here: deciding when a step happens (scheduler.py) or what the HTTP server prints (server.py,
which uses `access_line` for uvicorn-style access lines).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass

LOGGER_NAME = "sglang"
DATEFMT = "%Y-%m-%d %H:%M:%S"


class _SGLangFormatter(logging.Formatter):
    """`[asctime{.msecs}{rank tag}] message`; the rank tag comes from `record.rank_tag`."""

    def __init__(self, with_ms: bool) -> None:
        ms = ".%(msecs)03d" if with_ms else ""
        super().__init__(f"[%(asctime)s{ms}%(rank_tag)s] %(message)s", datefmt=DATEFMT)

    def format(self, record: logging.LogRecord) -> str:
        if not hasattr(record, "rank_tag"):
            record.rank_tag = ""
        return super().format(record)


def configure_logging(log_level: str = "info") -> logging.Logger:
    """SGLang's `configure_logger`: every line to stderr, no level name, local time.

    SGLANG_LOG_MS=1 adds milliseconds to the timestamp (SGLang 0.5.6+).
    """
    logger = logging.getLogger(LOGGER_NAME)
    logger.handlers.clear()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_SGLangFormatter(os.environ.get("SGLANG_LOG_MS", "0") == "1"))
    logger.addHandler(handler)
    logger.setLevel(log_level.upper())
    logger.propagate = False
    return logger


def rank_tag(dp_rank: int | None, tp_size: int, tp_rank: int = 0) -> str:
    """Scheduler prefix, SGLang 0.5.9+ rule: ` DP{d}` if DP is on, ` TP{t}` only if tp_size > 1."""
    tag = ""
    if dp_rank is not None:
        tag += f" DP{dp_rank}"
    if tp_size > 1:
        tag += f" TP{tp_rank}"
    return tag


def scheduler_logger(tag: str) -> logging.LoggerAdapter:
    """Logger whose lines carry the scheduler's rank tag (empty for the main process)."""
    return logging.LoggerAdapter(logging.getLogger(LOGGER_NAME), {"rank_tag": tag})


def access_line(client: str, request_line: str, status: int, phrase: str) -> str:
    """Uvicorn's access line as SGLang configures it (written to stdout, like uvicorn)."""
    stamp = time.strftime(DATEFMT)
    return f'[{stamp}] INFO:     {client} - "{request_line}" {status} {phrase}'


def uvicorn_line(message: str) -> str:
    """Uvicorn's default (non-access) line, `[time] INFO:     message` (stderr)."""
    return f"[{time.strftime(DATEFMT)}] INFO:     {message}"


def graph_label(device: str) -> str:
    """SGLang 0.5.13+ `_graph_backend_label`: `cpu graph` on cpu, `cuda graph` otherwise."""
    return "cpu graph" if device == "cpu" else "cuda graph"


def prefill_line(*, num_new_seqs: int, num_new_tokens: int, num_cached_tokens: int,
                 token_usage: float, num_running_reqs: int, num_queue_reqs: int,
                 num_pending_tokens: int, graph: str, input_throughput_tok_s: float,
                 graph_used: bool = False) -> str:
    """SGLang 0.5.11-0.5.23 non-PD `Prefill batch` message."""
    return (
        f"Prefill batch, #new-seq: {num_new_seqs}, #new-token: {num_new_tokens}, "
        f"#cached-token: {num_cached_tokens}, token usage: {token_usage:.2f}, "
        f"#running-req: {num_running_reqs}, #queue-req: {num_queue_reqs}, "
        f"#pending-token: {num_pending_tokens}, {graph}: {graph_used}, "
        f"input throughput (token/s): {input_throughput_tok_s:.2f}"
    )


def decode_line(*, num_running_reqs: int, num_tokens: int, token_usage: float,
                accept_len: float | None, accept_rate: float | None, graph: str,
                gen_throughput_tok_s: float, num_queue_reqs: int, graph_used: bool = False) -> str:
    """SGLang 0.5.9-0.5.23 `Decode batch` message; accept fields only with speculation."""
    spec = ""
    if accept_len is not None:
        spec = f"accept len: {accept_len:.2f}, accept rate: {accept_rate:.2f}, "
    return (
        f"Decode batch, #running-req: {num_running_reqs}, #token: {num_tokens}, "
        f"token usage: {token_usage:.2f}, {spec}{graph}: {graph_used}, "
        f"gen throughput (token/s): {gen_throughput_tok_s:.2f}, #queue-req: {num_queue_reqs}"
    )


@dataclass
class DecodeWindowValues:
    """What one `Decode batch` line reports (window = steps since the previous line)."""

    accept_len: float | None
    accept_rate: float | None
    gen_throughput_tok_s: float


class DecodeMetrics:
    """SGLang 0.5.23's decode counters (`SchedulerMetricsReporter`), one per scheduler.

    Per decode (verify) step of batch size bs with A accepted drafts (bonus excluded):
      forward_ct_decode += 1; num_generated_tokens += tokens appended;
      spec_num_accept_tokens += A + bs; spec_num_forward_ct += bs.
    A line is due when forward_ct_decode % decode_log_interval == 0; then
      accept len  = spec_num_accept_tokens / spec_num_forward_ct            (incl. bonus)
      accept rate = (spec_num_accept_tokens - spec_num_forward_ct)
                    / (spec_num_forward_ct * (num_draft_tokens - 1))        (0.5.11+ definition)
      gen throughput = num_generated_tokens / (now - previous line's time)  (includes idle time)
    and the window counters are added to the lifetime counters and reset.
    `reset()` is `/flush_cache`: every counter to 0 except the time of the last line.
    """

    def __init__(self, decode_log_interval: int, num_draft_tokens: int | None) -> None:
        self.decode_log_interval = decode_log_interval
        self.num_draft_tokens = num_draft_tokens  # None = no speculation
        self.last_decode_stats_tic = time.perf_counter()
        self.last_prefill_stats_tic = time.perf_counter()
        self.last_gen_throughput = 0.0
        self.last_input_throughput = 0.0
        self.last_accept_len: float | None = None
        self.last_accept_rate: float | None = None
        self.reset()

    def reset(self) -> None:
        self.forward_ct_decode = 0
        self.num_generated_tokens = 0
        self.spec_num_accept_tokens = 0
        self.spec_num_forward_ct = 0
        self.spec_total_num_accept_tokens = 0
        self.spec_total_num_forward_ct = 0

    def record_step(self, batch_size: int, num_accepted_drafts: int, num_generated_tokens: int) -> bool:
        """Count one decode step; True when a `Decode batch` line is due."""
        self.forward_ct_decode += 1
        self.num_generated_tokens += num_generated_tokens
        if self.num_draft_tokens is not None:
            self.spec_num_accept_tokens += num_accepted_drafts + batch_size
            self.spec_num_forward_ct += batch_size
        return self.forward_ct_decode % self.decode_log_interval == 0

    def close_window(self) -> DecodeWindowValues:
        """Compute the line's values and start the next window."""
        now = time.perf_counter()
        gap = now - self.last_decode_stats_tic
        self.last_decode_stats_tic = now
        self.last_gen_throughput = self.num_generated_tokens / gap if gap > 0 else 0.0
        self.num_generated_tokens = 0
        accept_len = accept_rate = None
        if self.num_draft_tokens is not None and self.spec_num_forward_ct > 0:
            accept_len = self.spec_num_accept_tokens / self.spec_num_forward_ct
            proposed = self.spec_num_forward_ct * (self.num_draft_tokens - 1)
            correct = self.spec_num_accept_tokens - self.spec_num_forward_ct
            accept_rate = correct / proposed if proposed > 0 else 0.0
            self.spec_total_num_accept_tokens += self.spec_num_accept_tokens
            self.spec_total_num_forward_ct += self.spec_num_forward_ct
            self.spec_num_accept_tokens = self.spec_num_forward_ct = 0
            self.last_accept_len, self.last_accept_rate = accept_len, accept_rate
        return DecodeWindowValues(accept_len, accept_rate, self.last_gen_throughput)

    def prefill_throughput(self, num_new_tokens: int) -> float:
        """0.5.11+: this batch's new tokens / time since the previous prefill line."""
        now = time.perf_counter()
        gap = now - self.last_prefill_stats_tic
        self.last_prefill_stats_tic = now
        self.last_input_throughput = num_new_tokens / gap if gap > 0 else 0.0
        return self.last_input_throughput

    def avg_spec_accept_length(self) -> float | None:
        """Lifetime mean over completed windows since start or flush (`/server_info`)."""
        if self.num_draft_tokens is None or self.spec_total_num_forward_ct == 0:
            return None
        return self.spec_total_num_accept_tokens / self.spec_total_num_forward_ct


# SGLang 0.5.11+ scheduler gauges (set at the decode-log cadence) and tokenizer counters.
_GAUGES = (
    ("num_running_reqs", "The number of running requests.", "num_running_reqs"),
    ("num_used_tokens", "The number of used tokens.", "num_used_tokens"),
    ("token_usage", "The token usage.", "token_usage"),
    ("gen_throughput", "The generation throughput (token/s).", "last_gen_throughput"),
    ("num_queue_reqs", "The number of requests in the waiting queue.", "num_queue_reqs"),
    ("spec_accept_length", "Mean acceptance length of speculative decoding (accepted drafts + "
     "bonus token per forward).", "spec_accept_length"),
    ("spec_accept_rate", "Speculative acceptance rate (`accepted drafts / proposed drafts` in "
     "batch).", "spec_accept_rate"),
    ("spec_num_steps", "Currently active speculative_num_steps.", "spec_num_steps"),
    ("spec_num_draft_tokens", "Currently active speculative_num_draft_tokens (decouples from "
     "steps under topk>1).", "spec_num_draft_tokens"),
)
# SGLang 0.5.23 TokenizerMetricsCollector counters (observe_one_finished_request): labels
# model_name, engine_type and, on the token counters, is_streaming (the engine counts every
# request under "false": it keeps no per-request streaming flag in its scheduler)
_COUNTERS = (
    ("prompt_tokens_total", "Number of prefill tokens processed.", "prompt_tokens_total", True),
    ("generation_tokens_total", "Number of generation tokens processed.",
     "generation_tokens_total", True),
    ("spec_verify_calls_total", "Number of speculative decoding verification calls.",
     "spec_verify_calls_total", False),
)


def _labels(pairs: list[tuple[str, str]]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in pairs) + "}"


def prometheus_text(model_name: str, ranks: list[tuple[int | None, dict]]) -> str:
    """`GET /metrics` in Prometheus text format with SGLang's metric names and labels.

    Scheduler gauges carry model_name, engine_type, tp_rank, pp_rank, moe_ep_rank and, with
    --dp-size > 1, dp_rank; spec gauges are 0 without speculation, as in SGLang. `ranks` holds
    (dp_rank, Scheduler.state()) per DP rank.
    """
    out: list[str] = []
    for name, help_text, key in _GAUGES:
        out += [f"# HELP sglang:{name} {help_text}", f"# TYPE sglang:{name} gauge"]
        for dp_rank, state in ranks:
            labels = [("model_name", model_name), ("engine_type", "unified"), ("tp_rank", "0"),
                      ("pp_rank", "0"), ("moe_ep_rank", "0")]
            if dp_rank is not None:
                labels.append(("dp_rank", str(dp_rank)))
            value = state.get(key)
            out.append(f"sglang:{name}{_labels(labels)} {float(value or 0.0)}")
    for name, help_text, key, streaming in _COUNTERS:
        total = sum(state[key] for _, state in ranks)
        labels = [("model_name", model_name), ("engine_type", "unified")]
        if streaming:
            labels.append(("is_streaming", "false"))
        out += [f"# HELP sglang:{name} {help_text}", f"# TYPE sglang:{name} counter",
                f"sglang:{name}{_labels(labels)} {float(total)}"]
    return "\n".join(out) + "\n"
