"""The built-in engine's HTTP side: SGLang's endpoints over the standard library's threads.

`Handler` answers /health, /health_generate, /generate, /v1/completions, /v1/chat/completions,
/v1/models, /model_info, /get_model_info, /server_info, /get_server_info, /flush_cache, /metrics
(SSE streams use chunked transfer encoding); `HTTPServer` is the listening socket.

Staying up under load and abuse: the listen backlog is 1024 (a burst of clients is queued, not
reset); a connection must deliver its request (line, headers and body) within
REQUEST_READ_TIMEOUT_S of starting to wait for it, or it is shut down by one deadline thread
(slowloris, idle keep-alive), so no handler thread waits forever; a body over MAX_BODY_BYTES is a
413, one the JSON parser cannot take (nested too deeply, an int past Python's digit limit) a 400.

Not here: request validation and response shaping (http_api.py), the engine's state and process
(server.py), scheduling (scheduler.py).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from specwatch.engine import sglang_log, tokenizer
from specwatch.engine.http_api import (
    CHAT_FIELDS, COMPLETION_FIELDS, GENERATE_FIELDS, GENERATE_UNSUPPORTED, BadRequest, Sampling,
    chat_prompt, check_type, openai_sampling, parse_sampling, prompt_ids)

HEALTH_TIMEOUT_S = 20.0
LISTEN_BACKLOG = 1024
# A test knob (no SGLang flag exists for it): SPECWATCH_ENGINE_READ_TIMEOUT_S.
REQUEST_READ_TIMEOUT_S = float(os.environ.get("SPECWATCH_ENGINE_READ_TIMEOUT_S") or 30.0)
MAX_BODY_BYTES = 64 * 2**20

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    engine: Any  # a server.Engine, set on the subclass made by server.main()

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
        if not self.engine.args.enable_metrics:      # SGLang mounts /metrics only then
            raise BadRequest("Not Found", HTTPStatus.NOT_FOUND)
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




class Deadlines:
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


class HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a stuck client never blocks shutdown
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.deadlines = Deadlines(REQUEST_READ_TIMEOUT_S)
        super().__init__(*args, **kwargs)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that hang up are normal; anything else is one prefixed log line, no traceback."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        sglang_log.scheduler_logger("").error(f"HTTP error with client {client_address}: {exc!r}")
