"""The built-in engine's server process: SGLang's HTTP API over one scheduler per DP rank.

`main(argv)` parses SGLang flags (args.py), prints the startup lines SGLang prints, starts the
schedulers (scheduler.py), serves HTTP with the standard library (threads; SSE streams use
chunked transfer encoding), warms up with one /generate like SGLang, then prints
`The server is fired up and ready to roll!`. SIGTERM / SIGINT stop it and it exits 0.

Endpoints: /health, /health_generate, /generate, /v1/completions, /v1/chat/completions,
/v1/models, /model_info, /get_model_info, /server_info, /get_server_info, /flush_cache, /metrics.

Not here: the decoding loop (scheduler.py), log formats and counters (sglang_log.py).
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
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

from specwatch.engine import args as args_mod
from specwatch.engine import sglang_log, tokenizer

# Every line matches SGLang 0.5.11-0.5.23; 0.5.18 is the last version whose startup line is
# the `server_args=ServerArgs(...)` repr, so it is the one version all of our output matches.
SGLANG_VERSION = "0.5.18"
HEALTH_TIMEOUT_S = 20.0
WARMUP_PROMPT = "The capital city of France is"


class BadRequest(Exception):
    """A request the server refuses with a 4xx; the message says which field and why."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


# ----------------------------------------------------------------------------- request parsing


@dataclass
class Sampling:
    max_new_tokens: int | None
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: set[int] = field(default_factory=set)
    no_stop_trim: bool = False


def _check_type(where: str, value: Any, kinds: tuple, what: str) -> None:
    # bool is an int in Python; JSON true is never a valid number here
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        raise BadRequest(f"{where}: expected {what}, got {json.dumps(value)}")


def _stop_list(where: str, value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return [s for s in value if s]
    raise BadRequest(f"{where}: expected a string or a list of strings")


# SGLang SamplingParams fields the engine accepts, with the only value it supports where it
# cannot honour others (None = any value, ignored or honoured below).
_SAMPLING_FIXED: dict[str, Any] = {
    "min_p": 0.0, "frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0,
    "n": 1, "json_schema": None, "regex": None, "ebnf": None, "structural_tag": None,
    "custom_params": None, "logit_bias": None,
}
_SAMPLING_FREE = {"ignore_eos", "skip_special_tokens", "spaces_between_special_tokens",
                  "min_new_tokens", "stream_interval"}
_SAMPLING_ALL = {"max_new_tokens", "temperature", "top_p", "top_k", "stop", "stop_token_ids",
                 "no_stop_trim", "seed", "sampling_seed"} | set(_SAMPLING_FIXED) | _SAMPLING_FREE


def parse_sampling(sp: Any, where: str = "sampling_params") -> Sampling:
    """SGLang's SamplingParams(**sp) + verify(): unknown keys and bad values are 400s."""
    if sp is None:
        sp = {}
    _check_type(where, sp, (dict,), "an object")
    unknown = sorted(set(sp) - _SAMPLING_ALL)
    if unknown:
        raise BadRequest(f"{where}: unknown field(s) {', '.join(unknown)}")
    for key, only in _SAMPLING_FIXED.items():
        if key in sp and sp[key] is not None and sp[key] != only:
            raise BadRequest(f"{where}.{key}={json.dumps(sp[key])} is not supported by the "
                             f"built-in engine (only {json.dumps(only)})")
    out = Sampling(max_new_tokens=128)
    if sp.get("max_new_tokens") is not None:
        _check_type(f"{where}.max_new_tokens", sp["max_new_tokens"], (int,), "an integer")
        if sp["max_new_tokens"] < 0:
            raise BadRequest(f"max_new_tokens must be at least 0, got {sp['max_new_tokens']}.")
        out.max_new_tokens = sp["max_new_tokens"]
    elif "max_new_tokens" in sp:
        out.max_new_tokens = None  # until the context is full
    if sp.get("temperature") is not None:
        _check_type(f"{where}.temperature", sp["temperature"], (int, float), "a number")
        if sp["temperature"] < 0:
            raise BadRequest(f"temperature must be non-negative, got {sp['temperature']}.")
        out.temperature = float(sp["temperature"])
    if sp.get("top_p") is not None:
        _check_type(f"{where}.top_p", sp["top_p"], (int, float), "a number")
        if not 0 < sp["top_p"] <= 1:
            raise BadRequest(f"top_p must be in (0, 1], got {sp['top_p']}.")
        out.top_p = float(sp["top_p"])
    if sp.get("top_k") is not None:
        _check_type(f"{where}.top_k", sp["top_k"], (int,), "an integer")
        if sp["top_k"] == 1:
            out.temperature = 0.0  # top_k=1 is greedy
        elif sp["top_k"] not in (-1, 0):
            raise BadRequest(f"{where}.top_k={sp['top_k']} is not supported by the built-in "
                             "engine (only -1 = off, or 1 = greedy)")
    for key in ("seed", "sampling_seed"):
        if sp.get(key) is not None:
            _check_type(f"{where}.{key}", sp[key], (int,), "an integer")
            out.seed = sp[key]
    out.stop = _stop_list(f"{where}.stop", sp.get("stop"))
    ids = sp.get("stop_token_ids")
    if ids is not None:
        if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool)
                                               for t in ids):
            raise BadRequest(f"{where}.stop_token_ids: expected a list of integers")
        out.stop_token_ids = set(ids)
    for key in ("no_stop_trim", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens"):
        if sp.get(key) is not None:
            _check_type(f"{where}.{key}", sp[key], (bool,), "true or false")
    out.no_stop_trim = bool(sp.get("no_stop_trim", False))
    return out


def _prompt_ids(where: str, value: Any) -> list[list[int]] | None:
    """A prompt as token ids: text, ids, or a list of either (a batch). None if absent."""
    if value is None:
        return None
    if isinstance(value, str):
        return [tokenizer.encode(value)]
    if isinstance(value, list) and value and all(isinstance(x, str) for x in value):
        return [tokenizer.encode(x) for x in value]
    if isinstance(value, list) and value and all(isinstance(x, int) and not isinstance(x, bool)
                                                 for x in value):
        return [value]
    if isinstance(value, list) and value and all(isinstance(x, list) for x in value):
        out = []
        for x in value:
            if not x or not all(isinstance(t, int) and not isinstance(t, bool) for t in x):
                raise BadRequest(f"{where}: expected lists of integer token ids")
            out.append(x)
        return out
    raise BadRequest(f"{where}: expected a string, a list of strings, a list of token ids or a "
                     f"list of lists of token ids")


_GENERATE_FIELDS = {"text", "input_ids", "sampling_params", "stream", "rid", "return_logprob",
                    "logprob_start_len", "top_logprobs_num", "token_ids_logprob",
                    "return_text_in_logprobs", "log_metrics", "lora_path", "image_data",
                    "audio_data", "video_data", "modalities", "custom_logit_processor",
                    "data_parallel_rank", "session_params", "return_hidden_states",
                    "bootstrap_host", "bootstrap_port", "bootstrap_room", "priority"}
_GENERATE_UNSUPPORTED = ("return_logprob", "lora_path", "image_data", "audio_data", "video_data",
                         "custom_logit_processor", "session_params", "return_hidden_states")

_COMPLETION_FIELDS = {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "stop",
                      "stream", "stream_options", "n", "seed", "ignore_eos", "echo", "logprobs",
                      "best_of", "user", "presence_penalty", "frequency_penalty",
                      "repetition_penalty", "min_p", "stop_token_ids", "no_stop_trim",
                      "skip_special_tokens", "min_tokens", "suffix", "logit_bias", "rid"}
_CHAT_FIELDS = (_COMPLETION_FIELDS - {"prompt", "echo", "best_of", "suffix"}) | {
    "messages", "max_completion_tokens", "tools", "tool_choice", "response_format",
    "top_logprobs", "parallel_tool_calls", "chat_template_kwargs", "separate_reasoning"}


def _openai_sampling(body: dict, max_tokens: Any, default_max: int | None) -> Sampling:
    for key, only in (("n", 1), ("best_of", 1), ("echo", False), ("logprobs", None),
                      ("suffix", None), ("tools", None), ("response_format", None)):
        if body.get(key) not in (None, only):
            raise BadRequest(f"{key}={json.dumps(body[key])} is not supported by the built-in "
                             f"engine (only {json.dumps(only)})")
    if body.get("logprobs") not in (None, False):
        raise BadRequest("logprobs is not supported by the built-in engine")
    sp = {k: body[k] for k in ("temperature", "top_p", "top_k", "stop", "seed", "ignore_eos",
                               "presence_penalty", "frequency_penalty", "repetition_penalty",
                               "min_p", "stop_token_ids", "no_stop_trim", "skip_special_tokens")
          if k in body}
    sp["max_new_tokens"] = default_max if max_tokens is None else max_tokens
    if max_tokens is not None:
        _check_type("max_tokens", max_tokens, (int,), "an integer")
    return parse_sampling(sp, where="request")


def _chat_prompt(messages: Any) -> str:
    """The toy byte model has no chat template: `role: content` lines, then `assistant:`."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages: expected a non-empty list of {role, content} objects")
    lines = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRequest(f"messages[{i}]: expected an object with a string 'role'")
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text" \
                        or not isinstance(part.get("text"), str):
                    raise BadRequest(f"messages[{i}].content: only text parts are supported")
                parts.append(part["text"])
            content = "".join(parts)
        elif content is None:
            content = ""
        elif not isinstance(content, str):
            raise BadRequest(f"messages[{i}].content: expected a string or a list of text parts")
        lines.append(f"{m['role']}: {content}")
    return "\n".join(lines) + "\nassistant:"


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
        self.spec = self.args.speculative_algorithm is not None
        self.draft_headroom = self.args.speculative_num_draft_tokens or 1 if self.spec else 1

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
            need = len(ids) + max_new + self.draft_headroom
            if need > sched.reserve_limit():
                raise BadRequest(f"the request needs {need} KV tokens but the pool holds "
                                 f"{sched.reserve_limit()} (--max-total-tokens)")
            this_rid = (rids[i] if rids and i < len(rids) else
                        rid if isinstance(rid, str) and len(prompts) == 1 else uuid.uuid4().hex)
            reqs.append((sched, GenRequest(
                rid=str(this_rid), index=i, input_ids=list(ids), max_new_tokens=max_new, out=out,
                temperature=sp.temperature, top_p=sp.top_p, seed=sp.seed, stop=sp.stop,
                stop_token_ids=sp.stop_token_ids, reserved_tokens=need)))
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


class Call:
    """The requests of one HTTP call: gathers their events, builds text and meta_info."""

    def __init__(self, engine: Engine, reqs: list, out: queue.Queue, sp: Sampling) -> None:
        self.engine, self.reqs, self.out, self.sp = engine, reqs, out, sp
        self.t0 = time.perf_counter()
        n = len(reqs)
        self.ids: list[list[int]] = [[] for _ in range(n)]
        self.decoders = [tokenizer.IncrementalDecoder() for _ in range(n)]
        self.raw_text = [""] * n
        self.sent_text = [""] * n  # what visible_text returned last (OpenAI deltas)
        self.verify_ct = [0] * n
        self.finish: list[Any] = [None] * n  # FinishEvent once done

    def abort(self) -> None:
        for r in self.reqs:
            r.aborted = True

    def events(self) -> Iterator[int]:
        """Yield the index of each request that changed, until all are finished."""
        from specwatch.engine.scheduler import ErrorEvent, FinishEvent

        pending = len(self.reqs)
        while pending:
            ev = self.out.get()
            if isinstance(ev, ErrorEvent):
                raise BadRequest(f"request aborted: {ev.message}", HTTPStatus.SERVICE_UNAVAILABLE)
            i = ev.index
            self.ids[i].extend(ev.new_ids)
            self.raw_text[i] += self.decoders[i].push(ev.new_ids)
            if isinstance(ev, FinishEvent):
                self.finish[i] = ev
                self.ids[i] = list(ev.output_ids)
                if ev.spec:
                    self.verify_ct[i] = ev.spec["spec_verify_ct"]
                pending -= 1
            else:
                self.verify_ct[i] = ev.spec_verify_ct
            yield i

    def wait(self) -> None:
        for _ in self.events():
            pass

    def text(self, i: int) -> str:
        """Text so far; while running, the tail that could start a stop string is held back."""
        fin = self.finish[i]
        if fin is not None:
            ids = self.ids[i]
            matched = fin.finish_reason.get("matched")
            if isinstance(matched, int) and not self.sp.no_stop_trim:
                ids = ids[:-1]
            text = tokenizer.decode(ids)
            if isinstance(matched, str) and not self.sp.no_stop_trim and text.endswith(matched):
                text = text[: len(text) - len(matched)]
            return text
        text = self.raw_text[i]
        hold = 0
        for s in self.sp.stop:
            for k in range(min(len(s) - 1, len(text)), hold, -1):
                if text.endswith(s[:k]):
                    hold = k
                    break
        return text[: len(text) - hold] if hold else text

    def delta(self, i: int) -> str:
        text = self.text(i)
        d = text[len(self.sent_text[i]):] if text.startswith(self.sent_text[i]) else ""
        self.sent_text[i] = text
        return d

    def meta_info(self, i: int) -> dict[str, Any]:
        r, fin = self.reqs[i], self.finish[i]
        completion = len(self.ids[i])
        meta: dict[str, Any] = {
            "id": r.rid, "finish_reason": fin.finish_reason if fin else None,
            "prompt_tokens": len(r.input_ids), "weight_version": "default",
            "total_retractions": 0, "completion_tokens": completion, "cached_tokens": 0,
        }
        if self.engine.spec:
            ct = self.verify_ct[i]
            meta["spec_verify_ct"] = ct
            if fin is not None and fin.spec and ct > 0:
                drafts = fin.spec["spec_accepted_drafts"]
                proposed = ct * (self.engine.args.speculative_num_draft_tokens - 1)
                meta.update({
                    "spec_accept_length": completion / ct,  # SGLang 0.5.4+: incl. prefill token
                    "spec_accept_rate": drafts / proposed if proposed else 0.0,
                    "spec_accepted_drafts": drafts, "spec_proposed_drafts": proposed,
                    "spec_accept_histogram": fin.spec["spec_accept_histogram"],
                })
        meta["e2e_latency"] = time.perf_counter() - self.t0
        return meta

    def openai_finish(self, i: int) -> tuple[str | None, Any]:
        fin = self.finish[i]
        if fin is None:
            return None, None
        reason = fin.finish_reason
        return reason["type"], reason.get("matched")

    def usage(self) -> dict[str, int]:
        prompt = sum(len(r.input_ids) for r in self.reqs)
        completion = sum(len(x) for x in self.ids)
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion}


# ----------------------------------------------------------------------------- HTTP


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    engine: Engine  # set on the subclass made by main()

    def version_string(self) -> str:
        return "uvicorn"
    # --- plumbing

    def log_request(self, code: Any = "-", size: Any = "-") -> None:
        status = HTTPStatus(int(code)) if str(code).isdigit() else None
        line = sglang_log.access_line(f"{self.client_address[0]}:{self.client_address[1]}",
                                      self.requestline, int(code) if status else 0,
                                      status.phrase if status else "")
        print(line, file=sys.stdout, flush=True)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature)
        pass  # errors are answered as JSON; access lines come from log_request

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise BadRequest(f"invalid JSON body: {e}") from None

    def _send(self, status: int, payload: Any, content_type: str = "application/json") -> None:
        data = payload if isinstance(payload, bytes) else (
            payload.encode() if isinstance(payload, str) else json.dumps(payload).encode())
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _sse(self, payload: Any) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        data = f"data: {text}\n\n".encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _end_stream(self) -> None:
        self._sse("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _error(self, e: BadRequest) -> None:
        if self.path.startswith("/v1/"):
            payload = {"object": "error", "message": str(e), "type": HTTPStatus(e.status).phrase
                       .replace(" ", "") + "Error", "param": None, "code": int(e.status)}
        else:
            payload = {"error": {"message": str(e)}}
        self._send(int(e.status), payload)

    def _route(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        routes = ROUTES.get(path)
        try:
            if routes is None:
                raise BadRequest("Not Found", HTTPStatus.NOT_FOUND)
            if method not in routes:
                raise BadRequest("Method Not Allowed", HTTPStatus.METHOD_NOT_ALLOWED)
            key = self.engine.args.api_key
            if key and path not in ("/health", "/health_generate", "/metrics") and \
                    self.headers.get("Authorization") != f"Bearer {key}":
                raise BadRequest("Unauthorized", HTTPStatus.UNAUTHORIZED)
            routes[method](self)
        except BadRequest as e:
            self._error(e)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # a bug: answer 500, keep serving
            sglang_log.scheduler_logger("").error(f"Error in {method} {path}: {e!r}")
            try:
                self._error(BadRequest(f"internal error: {e!r}", HTTPStatus.INTERNAL_SERVER_ERROR))
            except OSError:
                self.close_connection = True

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PUT(self) -> None:
        self._route("PUT")

    # --- endpoints

    def health(self) -> None:
        if not self.engine.ready.is_set() or self.engine.stop_event.is_set():
            raise BadRequest("Server is starting" if not self.engine.ready.is_set()
                             else "Server is shutting down", HTTPStatus.SERVICE_UNAVAILABLE)
        if os.environ.get("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true").lower() == "false":
            self._send(200, b"", "text/plain")
            return
        # SGLang's probe: a 1-token generate through a scheduler (adds a Prefill batch line).
        call = self.engine.submit([[0]], Sampling(max_new_tokens=1, temperature=0.0),
                                  rid=f"HEALTH_CHECK_{time.time()}")
        done = threading.Event()
        threading.Thread(target=lambda: (call.wait(), done.set()), daemon=True).start()
        if not done.wait(HEALTH_TIMEOUT_S):
            call.abort()
            raise BadRequest("Health check failed. Server couldn't get a response from "
                             "detokenizer for last 20 seconds.", HTTPStatus.SERVICE_UNAVAILABLE)
        self._send(200, b"", "text/plain")

    def generate(self) -> None:
        body = self._body()
        if not isinstance(body, dict):
            raise BadRequest("body: expected a JSON object")
        unknown = sorted(set(body) - _GENERATE_FIELDS)
        if unknown:
            raise BadRequest(f"unknown field(s) {', '.join(unknown)}")
        for key in _GENERATE_UNSUPPORTED:
            if body.get(key) not in (None, False, [], {}):
                raise BadRequest(f"{key} is not supported by the built-in engine")
        texts, ids = _prompt_ids("text", body.get("text")), _prompt_ids("input_ids", body.get("input_ids"))
        if (texts is None) == (ids is None):
            raise BadRequest("Either text or input_ids should be provided (exactly one).")
        prompts = texts if texts is not None else ids
        batched = isinstance(body.get("text"), list) or (
            ids is not None and isinstance(body["input_ids"][0], list))
        stream = body.get("stream", False)
        _check_type("stream", stream, (bool,), "true or false")
        sp = parse_sampling(body.get("sampling_params"))
        call = self.engine.submit(prompts, sp, rid=body.get("rid"),
                                  dp_rank=body.get("data_parallel_rank"))

        def result(i: int) -> dict[str, Any]:
            return {"text": call.text(i), "output_ids": list(call.ids[i]),
                    "meta_info": call.meta_info(i), **({"index": i} if batched else {})}

        if not stream:
            call.wait()
            out = [result(i) for i in range(len(prompts))]
            self._send(200, out if batched else out[0])
            return
        self._start_stream()
        try:
            for i in call.events():
                self._sse(result(i))
        except BadRequest as e:
            self._sse({"error": {"message": str(e)}})
        except OSError:
            call.abort()
            raise
        self._end_stream()

    def completions(self) -> None:
        self._openai(chat=False)

    def chat_completions(self) -> None:
        self._openai(chat=True)

    def _openai(self, chat: bool) -> None:
        body = self._body()
        if not isinstance(body, dict):
            raise BadRequest("body: expected a JSON object")
        unknown = sorted(set(body) - (_CHAT_FIELDS if chat else _COMPLETION_FIELDS))
        if unknown:
            raise BadRequest(f"unknown field(s) {', '.join(unknown)}")
        if chat:
            prompts = [tokenizer.encode(_chat_prompt(body.get("messages")))]
            max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
            sp = _openai_sampling(body, max_tokens, None)
        else:
            if "prompt" not in body:
                raise BadRequest("prompt: required")
            prompts = _prompt_ids("prompt", body["prompt"])
            sp = _openai_sampling(body, body.get("max_tokens"), 16)
        stream = body.get("stream", False)
        _check_type("stream", stream, (bool,), "true or false")
        opts = body.get("stream_options") or {}
        _check_type("stream_options", opts, (dict,), "an object")
        call = self.engine.submit(prompts, sp, rid=body.get("rid"))
        cid = ("chatcmpl-" if chat else "cmpl-") + call.reqs[0].rid
        created = int(time.time())
        model = body.get("model") or self.engine.args.served_model_name
        obj = "chat.completion" if chat else "text_completion"
        base = {"id": cid, "object": obj + (".chunk" if chat and stream else ""),
                "created": created, "model": model}

        if not stream:
            call.wait()
            choices = []
            for i in range(len(prompts)):
                reason, matched = call.openai_finish(i)
                choice: dict[str, Any] = {"index": i}
                if chat:
                    choice["message"] = {"role": "assistant", "content": call.text(i),
                                         "reasoning_content": None, "tool_calls": None}
                else:
                    choice["text"] = call.text(i)
                choice.update({"logprobs": None, "finish_reason": reason, "matched_stop": matched})
                choices.append(choice)
            self._send(200, {**base, "choices": choices, "usage": call.usage()})
            return

        self._start_stream()
        try:
            if chat:
                for i in range(len(prompts)):
                    self._sse({**base, "choices": [{"index": i, "delta": {"role": "assistant",
                               "content": ""}, "logprobs": None, "finish_reason": None}]})
            for i in call.events():
                reason, matched = call.openai_finish(i)
                d = call.delta(i)
                if not d and reason is None:
                    continue
                choice = {"index": i, ("delta" if chat else "text"):
                          ({"content": d} if chat else d), "logprobs": None,
                          "finish_reason": reason, "matched_stop": matched}
                self._sse({**base, "choices": [choice], "usage": None})
            if opts.get("include_usage"):
                self._sse({**base, "choices": [], "usage": call.usage()})
        except BadRequest as e:
            self._sse({"object": "error", "message": str(e), "code": int(e.status)})
        except OSError:
            call.abort()
            raise
        self._end_stream()

    def models(self) -> None:
        name = self.engine.args.served_model_name
        self._send(200, {"object": "list", "data": [{
            "id": name, "object": "model", "created": int(self.engine.started_at),
            "owned_by": "sglang", "root": name, "max_model_len": self.engine.context_len}]})

    def model_info(self) -> None:
        self._send(200, self.engine.model_info())

    def server_info(self) -> None:
        self._send(200, self.engine.server_info())

    def get_server_info(self) -> None:
        sglang_log.scheduler_logger("").warning(
            "Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
            "Please use '/server_info' instead.")
        self.server_info()

    def flush_cache(self) -> None:
        ok = all([s.flush_cache() for s in self.engine.schedulers])
        self._send(200 if ok else 400,
                   "Cache flushed.\nPlease check backend logs for more details. (When there are "
                   "running or waiting requests, the operation will not be performed.)\n",
                   "text/plain; charset=utf-8")

    def metrics(self) -> None:
        self._send(200, self.engine.metrics_text(), "text/plain; version=0.0.4; charset=utf-8")


ROUTES: dict[str, dict[str, Any]] = {
    "/health": {"GET": Handler.health},
    "/health_generate": {"GET": Handler.health},
    "/generate": {"POST": Handler.generate, "PUT": Handler.generate},
    "/v1/completions": {"POST": Handler.completions},
    "/v1/chat/completions": {"POST": Handler.chat_completions},
    "/v1/models": {"GET": Handler.models},
    "/model_info": {"GET": Handler.model_info},
    "/get_model_info": {"GET": Handler.model_info},
    "/server_info": {"GET": Handler.server_info},
    "/get_server_info": {"GET": Handler.get_server_info},
    "/flush_cache": {"POST": Handler.flush_cache, "GET": Handler.flush_cache},
    "/metrics": {"GET": Handler.metrics},
}


# ----------------------------------------------------------------------------- process


def _warmup(engine: Engine, port: int, log: Any) -> None:
    """SGLang's `_wait_and_warmup`: one greedy /generate of 8 tokens over HTTP, then ready."""
    try:
        if not engine.args.skip_server_warmup:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            body = json.dumps({"text": WARMUP_PROMPT,
                               "sampling_params": {"temperature": 0, "max_new_tokens": 8}})
            conn.request("POST", "/generate", body, {"Content-Type": "application/json"})
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
    try:
        parsed = args_mod.parse_args(argv)
    except args_mod.ArgsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    a = parsed.server_args
    log = sglang_log.configure_logging(a.log_level)
    main_log = sglang_log.scheduler_logger("")
    for w in parsed.warnings:
        main_log.warning(w)
    device = a.device or "cpu"  # the decoder runs on CPU; SGLang would pick cuda
    a.device = device
    main_log.info(f"server_args={a!r}")

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
        httpd = ThreadingHTTPServer((a.host, a.port), handler)
    except OSError as e:
        main_log.error(f"cannot listen on {a.host}:{a.port}: {e}; pick a free --port")
        _stop_schedulers(engine)
        return 1
    httpd.daemon_threads = True
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
    _stop_schedulers(engine)
    httpd.server_close()
    print(sglang_log.uvicorn_line(f"Finished server process [{os.getpid()}]"), file=sys.stderr,
          flush=True)
    return engine.exit_code


def _stop_schedulers(engine: Engine) -> None:
    for s in engine.schedulers:
        s.stop()
    for s in engine.schedulers:
        s.join(timeout=10)
