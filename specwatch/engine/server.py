"""The built-in engine's server process: SGLang's HTTP API over one scheduler per DP rank.

`main(argv)` parses SGLang flags (args.py), prints the startup lines SGLang prints, starts the
schedulers (scheduler.py), serves HTTP (handler.py: the standard library's threads, bounded
against bursts and slow clients), warms up with one /generate like SGLang, then prints
`The server is fired up and ready to roll!`. SIGTERM / SIGINT stop it and it exits 0. An
exception in a scheduler step fails that step's requests (500), not the server.

Not here: the endpoints (handler.py), request validation and response shaping (http_api.py),
the decoding loop (scheduler.py), log formats and counters (sglang_log.py).
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import signal
import sys
import threading
import time
import uuid
from http import HTTPStatus
from typing import Any

from specwatch.engine import args as args_mod
from specwatch.engine import sglang_log, tokenizer
from specwatch.engine.handler import HTTPServer, Handler
from specwatch.engine.http_api import BadRequest, Call, Sampling

# The engine is SGLang 0.5.23 throughout: its CLI (sglang_flags.json, generated from 0.5.23's
# parser), its startup line (`server_args={...}`, the dict form of 0.5.19+), its log lines (those
# match 0.5.11-0.5.23) and its aux capture: id -1 on a Llama target feeds the draft the embedding
# output, as 0.5.23's residual stream does. 0.5.12-0.5.20 (0.5.12 measured on an H200, 0.5.18 and
# 0.5.20 read) raise TypeError there instead (`hidden_states + residual` with residual None before
# layer 0), so claiming any of those versions would make the stand-in more lenient than SGLang.
SGLANG_VERSION = "0.5.23"
WARMUP_PROMPT = "The capital city of France is"


# ----------------------------------------------------------------------------- engine state


class Engine:
    """What the HTTP handlers share: args, schedulers, readiness."""

    def __init__(self, parsed: args_mod.ParsedArgs, device: str) -> None:
        self.args = parsed.server_args
        self.target_config = parsed.target_config
        self.device = device
        self.context_len = self.args.context_length or int(
            parsed.target_config.get("max_position_embeddings") or 2048)
        self.ready = threading.Event()
        self.stop_event = threading.Event()
        self.exit_code = 0
        self.started_at = time.time()
        self._rr = 0
        self._rr_lock = threading.Lock()
        self.schedulers: list = []
        self.inflight = 0  # HTTP requests being answered (shutdown lets them finish briefly)
        self.inflight_lock = threading.Lock()
        self.spec = self.args.speculative_algorithm is not None

    def fatal(self, exc: BaseException) -> None:
        self.exit_code = 1
        self.stop_event.set()

    def pick(self, dp_rank: Any = None):
        if dp_rank is not None:
            if not isinstance(dp_rank, int) or isinstance(dp_rank, bool) \
                    or not 0 <= dp_rank < len(self.schedulers):
                raise BadRequest(f"data_parallel_rank={json.dumps(dp_rank)}: expected an integer "
                                 f"in [0, {len(self.schedulers) - 1}]")
            return self.schedulers[dp_rank]
        with self._rr_lock:  # round-robin, SGLang's default load_balance_method
            s = self.schedulers[self._rr % len(self.schedulers)]
            self._rr += 1
            return s

    def submit(self, prompts: list[list[int]], sp: Sampling, *, rid: Any = None,
               dp_rank: Any = None) -> "Call":
        """Validate lengths against the context and the KV pool, then queue every prompt."""
        from specwatch.engine.scheduler import GenRequest

        if self.stop_event.is_set():
            raise BadRequest("the server is shutting down", HTTPStatus.SERVICE_UNAVAILABLE)
        reqs = []
        out: queue.Queue = queue.Queue()
        rids = rid if isinstance(rid, list) else None
        for i, ids in enumerate(prompts):
            if not ids:
                raise BadRequest("the input is empty: give a non-empty text or input_ids")
            bad = [t for t in ids if not 0 <= t < tokenizer.VOCAB_SIZE]
            if bad:
                raise BadRequest(f"input_ids: token id {bad[0]} is outside the vocabulary "
                                 f"[0, {tokenizer.VOCAB_SIZE})")
            if len(ids) >= self.context_len:
                raise BadRequest(f"The input ({len(ids)} tokens) is longer than the model's "
                                 f"context length ({self.context_len} tokens).")
            max_new = sp.max_new_tokens
            if max_new is None:
                max_new = self.context_len - len(ids)
            if len(ids) + max_new > self.context_len:
                raise BadRequest(
                    f"Requested token count exceeds the model's maximum context length of "
                    f"{self.context_len} tokens. You requested a total of {len(ids) + max_new} "
                    f"tokens: {len(ids)} tokens from the input messages and {max_new} tokens for "
                    "the completion. Please reduce the number of tokens in the input messages or "
                    "the completion to fit within the limit.")
            sched = self.pick(dp_rank)
            this_rid = (rids[i] if rids and i < len(rids) else
                        rid if isinstance(rid, str) and len(prompts) == 1 else uuid.uuid4().hex)
            reqs.append((sched, GenRequest(
                rid=str(this_rid), index=i, input_ids=list(ids), max_new_tokens=max_new, out=out,
                temperature=sp.temperature, top_p=sp.top_p, seed=sp.seed, stop=sp.stop,
                stop_token_ids=sp.stop_token_ids)))
        for sched, r in reqs:
            sched.submit(r)
        return Call(self, [r for _, r in reqs], out, sp)

    def server_info(self) -> dict[str, Any]:
        a = self.args.to_dict()
        states = []
        for s in self.schedulers:
            st = s.state()
            internal = dict(a)
            internal.update({
                "last_gen_throughput": st["last_gen_throughput"],
                "memory_usage": {"weight": _weights_gb(self.args), "kvcache": None,
                                 "token_capacity": s.max_total_num_tokens, "graph": 0.0},
                "effective_max_running_requests_per_dp": s.max_running_requests,
            })
            if st["avg_spec_accept_length"] is not None:
                internal["avg_spec_accept_length"] = st["avg_spec_accept_length"]
            if s.dp_rank is not None:
                internal["dp_rank"] = s.dp_rank
            states.append(internal)
        first = self.schedulers[0]
        return {**a, "max_total_num_tokens": first.max_total_num_tokens,
                "max_req_input_len": self.context_len - 1, "internal_states": states,
                "version": SGLANG_VERSION, "startup_time": self.started_at}

    def model_info(self) -> dict[str, Any]:
        return {"model_path": self.args.model_path, "tokenizer_path": self.args.tokenizer_path,
                "is_generation": True, "preferred_sampling_params": None,
                "weight_version": "default", "has_image_understanding": False,
                "has_audio_understanding": False, "model_type": self.target_config.get("model_type"),
                "architectures": self.target_config.get("architectures")}

    def metrics_text(self) -> str:
        ranks = [(s.dp_rank, s.state()) for s in self.schedulers]
        return sglang_log.prometheus_text(self.args.served_model_name, ranks)


def _weights_gb(a: args_mod.ServerArgs) -> float:
    from pathlib import Path

    dirs = [a.model_path] + ([a.speculative_draft_model_path] if a.speculative_algorithm else [])
    size = sum(p.stat().st_size for d in dirs for p in Path(d).glob("*.safetensors"))
    return round(2 * size / 2**30, 4)  # fp16 on disk, fp32 in memory


# ----------------------------------------------------------------------------- process

def _warmup(engine: Engine, port: int, log: Any) -> None:
    """SGLang's `_wait_and_warmup`: one greedy /generate of 8 tokens over HTTP, then ready."""
    try:
        if not engine.args.skip_server_warmup:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            body = json.dumps({"text": WARMUP_PROMPT,
                               "sampling_params": {"temperature": 0, "max_new_tokens": 8}})
            headers = {"Content-Type": "application/json"}
            if engine.args.api_key:
                headers["Authorization"] = f"Bearer {engine.args.api_key}"
            conn.request("POST", "/generate", body, headers)
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
            if resp.status != 200:
                raise RuntimeError(f"status {resp.status}: {data[:200]!r}")
    except Exception as e:
        log.error(f"Initialization failed. warmup error: {e}")
        engine.fatal(e)
        return
    engine.ready.set()
    log.info("The server is fired up and ready to roll!")


def main(argv: list[str] | None = None) -> int:
    """Run the built-in engine until SIGTERM/SIGINT; returns the process exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if "-h" in argv or "--help" in argv:
        print(args_mod.HELP, end="")
        return 0
    try:
        parsed = args_mod.parse_args(argv)
    except args_mod.ArgsError as e:
        print(args_mod.error_text(e), file=sys.stderr)
        return 2
    a = parsed.server_args
    sglang_log.configure_logging(a.log_level)
    main_log = sglang_log.scheduler_logger("")
    for w in parsed.warnings:
        main_log.warning(w)
    device = a.device or "cpu"  # SGLang would pick cuda; the built-in engine defaults to cpu
    a.device = device
    main_log.info(f"server_args={a.to_dict()!r}")   # 0.5.23: server_args.resolved_dict()

    from specwatch.engine.scheduler import Scheduler

    engine = Engine(parsed, device)
    dp_ranks: list[int | None] = [None] if a.dp_size == 1 else list(range(a.dp_size))
    engine.schedulers = [Scheduler(a, dp_rank=r, device=device, context_len=engine.context_len,
                                   on_fatal=engine.fatal) for r in dp_ranks]

    def on_signal(signum: int, frame: Any) -> None:
        engine.stop_event.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    for s in engine.schedulers:
        s.start()
    for s in engine.schedulers:
        while not s.loaded.wait(0.2):
            if engine.stop_event.is_set():
                break
        if s.load_error is not None:
            main_log.error(f"Scheduler failed to load the model: {s.load_error!r}")
            _stop_schedulers(engine)
            return 1
    if engine.stop_event.is_set():
        _stop_schedulers(engine)
        return engine.exit_code

    handler = type("BoundHandler", (Handler,), {"engine": engine})
    try:
        httpd = HTTPServer((a.host, a.port), handler)
    except OSError as e:
        main_log.error(f"cannot listen on {a.host}:{a.port}: {e}; pick a free --port")
        _stop_schedulers(engine)
        return 1
    port = httpd.server_address[1]
    print(sglang_log.uvicorn_line(f"Started server process [{os.getpid()}]"), file=sys.stderr)
    print(sglang_log.uvicorn_line("Waiting for application startup."), file=sys.stderr)
    print(sglang_log.uvicorn_line("Application startup complete."), file=sys.stderr)
    print(sglang_log.uvicorn_line(f"Uvicorn running on http://{a.host}:{port} (Press CTRL+C to quit)"),
          file=sys.stderr, flush=True)
    server_thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                     name="http", daemon=True)
    server_thread.start()
    threading.Thread(target=_warmup, args=(engine, port, main_log), name="warmup",
                     daemon=True).start()

    while not engine.stop_event.wait(0.2):
        pass
    print(sglang_log.uvicorn_line("Shutting down"), file=sys.stderr, flush=True)
    httpd.shutdown()
    _stop_schedulers(engine)  # aborts queued and running requests
    deadline = time.monotonic() + 1.0  # let their handlers send the error and close the stream
    while engine.inflight and time.monotonic() < deadline:
        time.sleep(0.02)
    httpd.server_close()
    httpd.deadlines.stop.set()
    print(sglang_log.uvicorn_line(f"Finished server process [{os.getpid()}]"), file=sys.stderr,
          flush=True)
    return engine.exit_code


def _stop_schedulers(engine: Engine) -> None:
    for s in engine.schedulers:
        s.stop()
    for s in engine.schedulers:
        s.join(timeout=10)
