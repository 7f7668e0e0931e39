"""The built-in engine's server process: SGLang's HTTP API over one scheduler per DP rank.

`main(argv)` parses SGLang flags (args.py), prints the startup lines SGLang prints, starts the
schedulers (scheduler.py), serves HTTP with the standard library (threads; SSE streams use
chunked transfer encoding), warms up with one /generate like SGLang, then prints
`The server is fired up and ready to roll!`. SIGTERM / SIGINT stop it and it exits 0.

Staying up under load and abuse: the listen backlog is 1024 (a burst of clients is queued, not
reset); a connection must deliver its request (line, headers and body) within
REQUEST_READ_TIMEOUT_S of starting to wait for it, or it is shut down by one deadline thread
(slowloris, idle keep-alive), so no handler thread waits forever; a body over MAX_BODY_BYTES is a
413, one nested too deeply for the JSON parser a 400; an exception in a scheduler step fails that
step's requests (500), not the server.

Endpoints: /health, /health_generate, /generate, /v1/completions, /v1/chat/completions,
/v1/models, /model_info, /get_model_info, /server_info, /get_server_info, /flush_cache, /metrics.

Not here: request validation and response shaping (http_api.py), the decoding loop
(scheduler.py), log formats and counters (sglang_log.py).
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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from specwatch.engine import args as args_mod
from specwatch.engine import sglang_log, tokenizer
from specwatch.engine.http_api import (
    CHAT_FIELDS, COMPLETION_FIELDS, GENERATE_FIELDS, GENERATE_UNSUPPORTED, BadRequest, Call,
    Sampling, chat_prompt, check_type, openai_sampling, parse_sampling, prompt_ids)

# Every line matches SGLang 0.5.11-0.5.23; 0.5.18 is the last version whose startup line is
# the `server_args=ServerArgs(...)` repr, so it is the one version all of our output matches.
SGLANG_VERSION = "0.5.18"
HEALTH_TIMEOUT_S = 20.0
LISTEN_BACKLOG = 1024
# A test knob (no SGLang flag exists for it): SPECWATCH_ENGINE_READ_TIMEOUT_S.
REQUEST_READ_TIMEOUT_S = float(os.environ.get("SPECWATCH_ENGINE_READ_TIMEOUT_S") or 30.0)
MAX_BODY_BYTES = 64 * 2**20
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

    def handle_one_request(self) -> None:
        """One request; its line, headers and body must arrive before the read deadline."""
        self.server.deadlines.arm(self.connection)
        try:
            super().handle_one_request()
        finally:
            self.server.deadlines.disarm(self.connection)

    def _read_body(self) -> None:
        """Read the whole body first, so that an early error leaves the connection in sync."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        self._too_large = length > MAX_BODY_BYTES
        if self._too_large:
            self.close_connection = True       # the body is not read: the stream is not in sync
            self._raw = b""
        else:
            self._raw = self.rfile.read(length) if length > 0 else b""
        self.server.deadlines.disarm(self.connection)   # generation may take as long as it takes

    def _body(self) -> Any:
        if self._too_large:
            raise BadRequest(f"request body over {MAX_BODY_BYTES} bytes",
                             HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
        raw = self._raw
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:  # incl. ints past Python's digit limit
            raise BadRequest(f"invalid JSON body: {e}") from None
        except RecursionError:
            raise BadRequest("invalid JSON body: nested too deeply") from None

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
        with self.engine.inflight_lock:
            self.engine.inflight += 1
        try:
            self._read_body()
            self._dispatch(method)
        finally:
            with self.engine.inflight_lock:
                self.engine.inflight -= 1

    def _dispatch(self, method: str) -> None:
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
        unknown = sorted(set(body) - GENERATE_FIELDS)
        if unknown:
            raise BadRequest(f"unknown field(s) {', '.join(unknown)}")
        for key in GENERATE_UNSUPPORTED:
            if body.get(key) not in (None, False, [], {}):
                raise BadRequest(f"{key} is not supported by the built-in engine")
        texts, ids = prompt_ids("text", body.get("text")), prompt_ids("input_ids", body.get("input_ids"))
        if (texts is None) == (ids is None):
            raise BadRequest("Either text or input_ids should be provided (exactly one).")
        prompts = texts if texts is not None else ids
        batched = isinstance(body.get("text"), list) or (
            ids is not None and isinstance(body["input_ids"][0], list))
        stream = body.get("stream", False)
        check_type("stream", stream, (bool,), "true or false")
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
        unknown = sorted(set(body) - (CHAT_FIELDS if chat else COMPLETION_FIELDS))
        if unknown:
            raise BadRequest(f"unknown field(s) {', '.join(unknown)}")
        if chat:
            prompts = [tokenizer.encode(chat_prompt(body.get("messages")))]
            max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
            sp = openai_sampling(body, max_tokens, None)
        else:
            if "prompt" not in body:
                raise BadRequest("prompt: required")
            prompts = prompt_ids("prompt", body["prompt"])
            sp = openai_sampling(body, body.get("max_tokens"), 16)
        stream = body.get("stream", False)
        check_type("stream", stream, (bool,), "true or false")
        opts = body.get("stream_options") or {}
        check_type("stream_options", opts, (dict,), "an object")
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


class _Deadlines:
    """One thread shuts down connections whose request did not arrive in time (no thread per
    connection waits forever on a client that sends nothing, or one byte at a time)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.lock = threading.Lock()
        self.due: dict[Any, float] = {}
        self.stop = threading.Event()
        threading.Thread(target=self._run, name="read-deadlines", daemon=True).start()

    def arm(self, conn: Any) -> None:
        with self.lock:
            self.due[conn] = time.monotonic() + self.timeout_s

    def disarm(self, conn: Any) -> None:
        with self.lock:
            self.due.pop(conn, None)

    def _run(self) -> None:
        import socket

        while not self.stop.wait(0.25):
            now = time.monotonic()
            with self.lock:
                late = [c for c, t in self.due.items() if t <= now]
                for c in late:
                    del self.due[c]
            for c in late:
                try:
                    c.shutdown(socket.SHUT_RDWR)   # the handler's read returns; it closes
                except OSError:
                    pass


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a stuck client never blocks shutdown
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.deadlines = _Deadlines(REQUEST_READ_TIMEOUT_S)
        super().__init__(*args, **kwargs)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that hang up are normal; anything else is one prefixed log line, no traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        sglang_log.scheduler_logger("").error(f"HTTP error with client {client_address}: {exc!r}")


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
    log = sglang_log.configure_logging(a.log_level)
    main_log = sglang_log.scheduler_logger("")
    for w in parsed.warnings:
        main_log.warning(w)
    device = a.device or "cpu"  # SGLang would pick cuda; the built-in engine defaults to cpu
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
        httpd = _HTTPServer((a.host, a.port), handler)
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
