"""Send one request to a serving engine and time it: the one request client of every load.

Two HTTP APIs, one way of timing. `send()` streams a completion and reads, from every streamed
event, the cumulative number of completion tokens the server says it has produced; the timing is
computed from those (time, tokens) points alone, so TTFT, ITL and TPOT mean the same on every
engine:

  API_GENERATE     SGLang's `POST /generate` (SGLang and the built-in engine): every SSE event
                   carries `meta_info.completion_tokens`, and the last one the request's spec
                   numbers (`spec_verify_ct`, `spec_accept_length`, the accept histogram), which
                   the OpenAI API of SGLang does not give: kept for SGLang for that reason.
  API_COMPLETIONS  the OpenAI-compatible `POST /v1/completions` (vLLM), streamed with
                   `stream_options = {include_usage, continuous_usage_stats}`: every chunk carries
                   `usage.completion_tokens`; with `--per-request-spec-decode-metrics` the last one
                   also `metrics.speculative_decoding` (vLLM 0.32; only for single-sequence
                   requests), mapped to the same request columns as SGLang's.

  ttft_ms   = time of the first event that carries >= 1 completion token − send time
  itl_ms    = for each later event that adds k tokens: its gap to the previous such event / k,
              repeated k times (a speculative step delivers several tokens at once; this is
              SGLang bench_serving's "adjusted ITL", so the list has output_tokens − 1 entries)
  tpot_ms   = (e2e_ms − ttft_ms) / (output_tokens − 1)   (NULL with fewer than 2 tokens)
  e2e_ms    = end of the stream − send time

Per-request speculation, one meaning on both engines (NULL when the server does not say):
  spec_verify_ct        verify steps of the request (SGLang `spec_verify_ct`, vLLM `num_spec_steps`)
  spec_accept_histogram h_j = verify steps that accepted exactly j draft tokens (SGLang
                        `spec_correct_drafts_histogram`, vLLM `acceptance_histogram`, k+1 long)
  spec_accept_length    the engine's own per-request mean, as it printed it (SGLang: completion
                        tokens / verify steps; vLLM: 1 + accepted drafts / verify steps)

Failures are data: an HTTP error, a refused connection, an error event or a timeout becomes a
row with `success = False` and the error text; `send` never raises for them.

Not here: when requests are sent (arrival order, concurrency, rates: `load`), starting servers
(`launch`), storing rows (`writer`).
"""
from __future__ import annotations

import datetime as dt
import http.client
import json
import time
import urllib.parse
from dataclasses import asdict, dataclass, field

HOST = "127.0.0.1"
API_GENERATE = "generate"
API_COMPLETIONS = "completions"
# The API each engine's load goes through (see the module docstring for why SGLang keeps /generate).
ENGINE_API = {"builtin": API_GENERATE, "sglang": API_GENERATE, "vllm": API_COMPLETIONS}


class ClientError(ValueError):
    """A request cannot be sent as asked (bad endpoint URL); the message says what to fix."""


@dataclass(frozen=True)
class RequestSpec:
    prompt: str
    max_new_tokens: int
    category: str | None = None     # the prompt set's task (chat, code, ...), stored per request


@dataclass
class RequestResult:
    """One request, named as `schema.Request` (minus run_id)."""

    request_idx: int
    is_warmup: bool
    success: bool
    error: str | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    itl_ms: list[float] = field(default_factory=list)
    spec_verify_ct: int | None = None
    spec_accept_length: float | None = None
    spec_accept_histogram: list[int] | None = None
    started_at: dt.datetime | None = None
    # set by `load.run`, not here: the prompt's category, when the arrival process asked for the
    # request and when it was really sent (ms from the load's start; arrival NULL: closed loop)
    category: str | None = None
    arrival_offset_ms: float | None = None
    send_offset_ms: float | None = None
    # not stored: when it finished (for the load's wall time)
    finished_mono: float | None = None
    started_mono: float | None = None

    def row(self) -> dict:
        d = asdict(self)
        d.pop("finished_mono")
        d.pop("started_mono")
        return d


# ------------------------------------------------------------------------------- HTTP basics

def target_of(endpoint: str) -> tuple[str, int]:
    """(host, port) of an endpoint URL such as http://10.0.0.5:30000 (attach mode)."""
    u = urllib.parse.urlsplit(endpoint if "//" in endpoint else "http://" + endpoint)
    if u.scheme not in ("http", "") or not u.hostname or u.path not in ("", "/"):
        raise ClientError(f"endpoint {endpoint!r}: expected http://HOST:PORT (no path; https is "
                          "not supported)")
    try:
        return u.hostname, u.port or 80
    except ValueError as exc:
        raise ClientError(f"endpoint {endpoint!r}: {exc}") from None


def connection(target, timeout_s: float) -> http.client.HTTPConnection:
    """`target`: a port on 127.0.0.1 (launched servers) or (host, port) (attach mode)."""
    host, port = target if isinstance(target, tuple) else (HOST, target)
    return http.client.HTTPConnection(host, port, timeout=timeout_s)


def post(target, path: str, body: dict | None, timeout_s: float) -> tuple[int, bytes]:
    conn = connection(target, timeout_s)
    try:
        data = json.dumps(body).encode() if body is not None else b""
        conn.request("POST", path, data, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def get(target, path: str, timeout_s: float) -> tuple[int, bytes]:
    conn = connection(target, timeout_s)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def health(target, timeout_s: float = 5.0) -> int | None:
    """HTTP status of GET /health, or None if nothing answers."""
    try:
        return get(target, "/health", timeout_s)[0]
    except (OSError, http.client.HTTPException):
        return None


def error_text(text: str) -> str:
    """The message of an engine's JSON error body (SGLang and vLLM shapes), else the text."""
    try:
        obj = json.loads(text)
        if isinstance(obj, dict):
            err = obj.get("error", obj)
            msg = err.get("message") if isinstance(err, dict) else err
            return str(msg or obj.get("message") or text)
    except json.JSONDecodeError:
        pass
    return text


# ------------------------------------------------------------------------------- one request

def request_body(api: str, spec: RequestSpec, temperature: float, seed: int | None) -> tuple[
        str, dict]:
    """(path, JSON body) of one streamed request. Every request produces exactly
    `max_new_tokens` (ignore_eos), from the raw prompt (no chat template)."""
    if api == API_GENERATE:
        sp = {"max_new_tokens": spec.max_new_tokens, "temperature": temperature,
              "ignore_eos": True}
        if seed is not None and temperature > 0:
            sp["sampling_seed"] = seed
        return "/generate", {"text": spec.prompt, "sampling_params": sp, "stream": True}
    if api == API_COMPLETIONS:
        body = {"prompt": spec.prompt, "max_tokens": spec.max_new_tokens,
                "temperature": temperature, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
        if seed is not None and temperature > 0:
            body["seed"] = seed
        return "/v1/completions", body
    raise ValueError(f"unknown API {api!r}; known: {API_GENERATE}, {API_COMPLETIONS}")


def _tokens(api: str, obj: dict) -> int | None:
    """Cumulative completion tokens an event reports (None: it says nothing about them)."""
    if api == API_GENERATE:
        return (obj.get("meta_info") or {}).get("completion_tokens")
    usage = obj.get("usage")
    return usage.get("completion_tokens") if isinstance(usage, dict) else None


def _finish(api: str, res: RequestResult, last: dict) -> None:
    """Token counts and spec numbers of the request from its last event(s)."""
    if api == API_GENERATE:
        meta = last.get("meta_info") or {}
        res.output_tokens = meta.get("completion_tokens")
        res.prompt_tokens = meta.get("prompt_tokens")
        res.spec_verify_ct = meta.get("spec_verify_ct")
        res.spec_accept_length = meta.get("spec_accept_length")
        # SGLang 0.5.12+ sends spec_correct_drafts_histogram, older versions spec_accept_histogram
        hist = meta.get("spec_correct_drafts_histogram", meta.get("spec_accept_histogram"))
        res.spec_accept_histogram = hist if isinstance(hist, list) else None
        return
    usage = last.get("usage") or {}
    res.output_tokens = usage.get("completion_tokens")
    res.prompt_tokens = usage.get("prompt_tokens")
    spec = (last.get("metrics") or {}).get("speculative_decoding")
    if isinstance(spec, dict):
        res.spec_verify_ct = spec.get("num_spec_steps")
        # vLLM 0.32 says 1.0 for a request that never drafted (ngram without a match): NULL here
        res.spec_accept_length = spec.get("mean_acceptance_length") if res.spec_verify_ct \
            else None
        hist = spec.get("acceptance_histogram")
        res.spec_accept_histogram = hist if isinstance(hist, list) else None


def send(target, spec: RequestSpec, idx: int, is_warmup: bool, temperature: float,
         seed: int | None, timeout_s: float, conns: set | None = None,
         api: str = API_GENERATE) -> RequestResult:
    """One streamed request over `api` (see the module docstring); never raises for server or
    network problems. `conns`: a set the open socket is added to while the request runs, so the
    caller may cut it (a hung server)."""
    res = RequestResult(request_idx=idx, is_warmup=is_warmup, success=False,
                        started_at=dt.datetime.now())
    path, body = request_body(api, spec, temperature, seed)
    data = json.dumps(body).encode()
    t0 = time.perf_counter()
    res.started_mono = time.monotonic()
    last_t, last_n, last, merged = None, 0, None, {}
    conn = connection(target, timeout_s)
    sock = None
    try:
        conn.connect()
        sock = conn.sock
        if conns is not None:      # the caller may cut it; the response keeps using it
            conns.add(sock)
        conn.request("POST", path, data, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            text = resp.read()[:500].decode(errors="replace")
            res.error = f"HTTP {resp.status}: {error_text(text)}"
            return res
        for raw in resp:   # SSE: "data: {...}\n\n"
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            now = time.perf_counter()
            obj = json.loads(payload)
            if not isinstance(obj, dict):
                continue
            if "error" in obj:
                res.error = f"stream error: {error_text(json.dumps(obj))}"
                return res
            last = obj
            if api == API_COMPLETIONS:
                # vLLM puts usage in every chunk and the spec metrics in the last content chunk;
                # the usage-only chunk after it has neither choices nor metrics
                merged.update({k: v for k, v in obj.items() if v is not None})
            n = _tokens(api, obj) or 0
            if n <= last_n:
                continue
            if last_t is None:
                res.ttft_ms = (now - t0) * 1000
            else:
                gap = (now - last_t) * 1000 / (n - last_n)
                res.itl_ms.extend([gap] * (n - last_n))
            last_t, last_n = now, n
    except TimeoutError:
        res.error = f"TimeoutError: no answer within {timeout_s:.0f} s (timed out)"
        return res
    except (OSError, http.client.HTTPException, json.JSONDecodeError, ValueError) as exc:
        res.error = f"{type(exc).__name__}: {exc}"
        return res
    finally:
        conn.close()
        if conns is not None:
            conns.discard(sock)
        res.finished_mono = time.monotonic()
    end = time.perf_counter()
    if last is None:
        res.error = "the stream ended without any event"
        return res
    res.e2e_ms = (end - t0) * 1000
    _finish(api, res, merged if api == API_COMPLETIONS else last)
    if api == API_COMPLETIONS and res.output_tokens is None:
        res.error = ("the stream carried no usage: the server ignored stream_options."
                     "continuous_usage_stats, so tokens cannot be timed")
        return res
    if res.output_tokens and res.output_tokens > 1 and res.ttft_ms is not None:
        res.tpot_ms = (res.e2e_ms - res.ttft_ms) / (res.output_tokens - 1)
    if not res.output_tokens:
        res.error = "no tokens generated"
        return res
    res.success = True
    return res
