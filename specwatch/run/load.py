"""Drive a workload against a ready server over HTTP: streaming /generate, one row per request.

Prompts come from a built-in set (`specwatch/run/workloads/*.jsonl`), a JSONL file or a ShareGPT file,
and are sampled with the workload's seed, so every config sees the same requests. Each request is
a streaming SGLang `/generate` (SSE; every event carries the cumulative text and `meta_info`), so
TTFT and inter-token latency are measured on the client:

  ttft_ms   = time of the first event that carries >= 1 completion token − send time
  itl_ms    = for each later event that adds k tokens: its gap to the previous such event / k,
              repeated k times (a speculative step delivers several tokens at once; this is
              SGLang bench_serving's "adjusted ITL", so the list has output_tokens − 1 entries)
  tpot_ms   = (e2e_ms − ttft_ms) / (output_tokens − 1)   (NULL with fewer than 2 tokens)
  e2e_ms    = last event − send time

Failures are data: an HTTP error, a refused connection or a timeout becomes a row with `success =
False` and the error text. `probe()` sends one request first and fails fast when the server cannot
serve at all. `summarize()` turns rows into the run's client-side numbers.

Not here: starting servers (see `launch`), storing rows (see `writer`).
"""
from __future__ import annotations

import datetime as dt
import http.client
import json
import math
import socket
import urllib.parse
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from specwatch.run import procs
from specwatch.run.sweepfile import BUILTIN_PREFIX, PROMPT_SETS, Workload

WORKLOADS_DIR = Path(__file__).resolve().parent / "workloads"
HOST = "127.0.0.1"


class LoadError(RuntimeError):
    """The workload cannot be built (unreadable or empty prompt file), with file:line."""


@dataclass(frozen=True)
class RequestSpec:
    prompt: str
    max_new_tokens: int


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
    # not stored: when it finished (for the load's wall time)
    finished_mono: float | None = None
    started_mono: float | None = None

    def row(self) -> dict:
        d = asdict(self)
        d.pop("finished_mono")
        d.pop("started_mono")
        return d


# ------------------------------------------------------------------------------- prompts

def read_prompts(workload: Workload) -> list[str]:
    """All prompts of the workload's source, in file order."""
    if workload.prompts.startswith(BUILTIN_PREFIX):
        name = workload.prompts[len(BUILTIN_PREFIX):]
        names = [n for n in PROMPT_SETS if n != "mixed"] if name == "mixed" else [name]
        out = []
        for n in names:
            out += _read_jsonl(WORKLOADS_DIR / f"{n}.jsonl")
        return out
    path = Path(workload.prompts)
    if workload.format == "sharegpt":
        return _read_sharegpt(path)
    return _read_jsonl(path)


def _read_jsonl(path: Path) -> list[str]:
    out = []
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise LoadError(f"{path}: cannot read prompts: {exc.strerror}") from None
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LoadError(f"{path}:{no}: not JSON ({exc.msg}); one JSON object per line") from None
        text = obj.get("prompt", obj.get("text")) if isinstance(obj, dict) else obj
        if not isinstance(text, str) or not text:
            raise LoadError(f"{path}:{no}: expected {{\"prompt\": \"...\"}} (or \"text\")")
        out.append(text)
    if not out:
        raise LoadError(f"{path}: no prompts")
    return out


def _read_sharegpt(path: Path) -> list[str]:
    """First human turn of each conversation (JSON array, or JSONL of conversations)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise LoadError(f"{path}: cannot read prompts: {exc.strerror}") from None
    try:
        items = json.loads(text)
    except json.JSONDecodeError:
        items = [json.loads(line) for line in text.splitlines() if line.strip()]
    out = []
    for item in items if isinstance(items, list) else []:
        conv = (item.get("conversations") or item.get("conversation") or []) \
            if isinstance(item, dict) else []
        for turn in conv:
            if isinstance(turn, dict) and turn.get("from", turn.get("role")) in ("human", "user"):
                value = turn.get("value", turn.get("content"))
                if isinstance(value, str) and value:
                    out.append(value)
                break
    if not out:
        raise LoadError(f"{path}: no ShareGPT conversations with a human turn")
    return out


def build_requests(workload: Workload, prompts: list[str]) -> tuple[list[RequestSpec],
                                                                    list[RequestSpec]]:
    """(warm-up requests, measured requests), sampled with the workload's seed."""
    rng = random.Random(workload.seed)
    order: list[str] = []
    need = workload.num_prompts + workload.warmup_requests
    while len(order) < need:  # every prompt once per pass, passes shuffled independently
        batch = list(prompts)
        rng.shuffle(batch)
        order += batch
    specs = []
    for text in order[:need]:
        if workload.input_chars is not None:
            n = rng.randint(workload.input_chars.min, workload.input_chars.max)
            text = (text * (n // len(text) + 1))[:n]
        out = rng.randint(workload.output_tokens.min, workload.output_tokens.max)
        specs.append(RequestSpec(text, out))
    return specs[:workload.warmup_requests], specs[workload.warmup_requests:]


# ------------------------------------------------------------------------------- HTTP

def target_of(endpoint: str) -> tuple[str, int]:
    """(host, port) of an endpoint URL such as http://10.0.0.5:30000 (attach mode)."""
    u = urllib.parse.urlsplit(endpoint if "//" in endpoint else "http://" + endpoint)
    if u.scheme not in ("http", "") or not u.hostname or u.path not in ("", "/"):
        raise LoadError(f"endpoint {endpoint!r}: expected http://HOST:PORT (no path; https is not "
                        "supported)")
    try:
        return u.hostname, u.port or 80
    except ValueError as exc:
        raise LoadError(f"endpoint {endpoint!r}: {exc}") from None


def _conn(target, timeout_s: float) -> http.client.HTTPConnection:
    """`target`: a port on 127.0.0.1 (launched servers) or (host, port) (attach mode)."""
    host, port = target if isinstance(target, tuple) else (HOST, target)
    return http.client.HTTPConnection(host, port, timeout=timeout_s)


def health(target, timeout_s: float = 5.0) -> int | None:
    """HTTP status of GET /health, or None if nothing answers."""
    try:
        return _get(target, "/health", timeout_s)[0]
    except (OSError, http.client.HTTPException):
        return None


def _post(port, path: str, body: dict | None, timeout_s: float) -> tuple[int, bytes]:
    conn = _conn(port, timeout_s)
    try:
        data = json.dumps(body).encode() if body is not None else b""
        conn.request("POST", path, data, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _get(port, path: str, timeout_s: float) -> tuple[int, bytes]:
    conn = _conn(port, timeout_s)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def flush_cache(port: int, timeout_s: float = 30.0, attempts: int = 20) -> None:
    """POST /flush_cache (resets SGLang's spec counters, LOG_FORMATS §4.3). SGLang refuses while
    requests are pending, so retry briefly. Raises LoadError if it never succeeds."""
    last = ""
    for _ in range(attempts):
        try:
            status, body = _post(port, "/flush_cache", None, timeout_s)
        except (OSError, http.client.HTTPException) as exc:
            last = repr(exc)
        else:
            if status == 200:
                return
            last = f"HTTP {status}: {body[:200].decode(errors='replace')}"
        time.sleep(0.1)
    raise LoadError(f"/flush_cache failed: {last}")


def server_info(port: int, timeout_s: float = 10.0) -> dict | None:
    """/server_info (SGLang 0.5.11+) or /get_server_info (older), or None."""
    for path in ("/server_info", "/get_server_info"):
        try:
            status, body = _get(port, path, timeout_s)
        except (OSError, http.client.HTTPException):
            return None
        if status == 200:
            try:
                info = json.loads(body)
            except json.JSONDecodeError:
                return None
            # PD router: {"decode": [...], "prefill": [...]}
            if isinstance(info, dict) and isinstance(info.get("decode"), list) and info["decode"]:
                info = info["decode"][0]
            return info if isinstance(info, dict) else None
    return None


def server_accept_len(info: dict | None) -> float | None:
    """avg_spec_accept_length of DP rank 0 (top-level in 0.4.4-0.4.6), as bench_serving reads it."""
    if not info:
        return None
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        v = states[0].get("avg_spec_accept_length")
    else:
        v = info.get("avg_spec_accept_length")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def send(port, spec: RequestSpec, idx: int, is_warmup: bool, temperature: float,
         seed: int | None, timeout_s: float, conns: set | None = None) -> RequestResult:
    """One streaming /generate; never raises for server or network problems."""
    res = RequestResult(request_idx=idx, is_warmup=is_warmup, success=False,
                        started_at=dt.datetime.now())
    sp = {"max_new_tokens": spec.max_new_tokens, "temperature": temperature, "ignore_eos": True}
    if seed is not None and temperature > 0:
        sp["sampling_seed"] = seed
    body = json.dumps({"text": spec.prompt, "sampling_params": sp, "stream": True}).encode()
    t0 = time.perf_counter()
    res.started_mono = time.monotonic()
    last_t, last_n, meta = None, 0, None
    conn = _conn(port, timeout_s)
    sock = None
    try:
        conn.connect()
        sock = conn.sock
        if conns is not None:      # run() may cut it (hung server); the response keeps using it
            conns.add(sock)
        conn.request("POST", "/generate", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            text = resp.read()[:500].decode(errors="replace")
            res.error = f"HTTP {resp.status}: {_error_text(text)}"
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
            if "error" in obj:
                res.error = f"stream error: {_error_text(json.dumps(obj))}"
                return res
            meta = obj.get("meta_info") or {}
            n = meta.get("completion_tokens", 0) or 0
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
    if meta is None:
        res.error = "the stream ended without any event"
        return res
    res.e2e_ms = (end - t0) * 1000
    res.output_tokens = meta.get("completion_tokens")
    res.prompt_tokens = meta.get("prompt_tokens")
    res.spec_verify_ct = meta.get("spec_verify_ct")
    res.spec_accept_length = meta.get("spec_accept_length")
    # SGLang 0.5.12+ sends spec_correct_drafts_histogram, older versions spec_accept_histogram
    hist = meta.get("spec_correct_drafts_histogram", meta.get("spec_accept_histogram"))
    res.spec_accept_histogram = hist if isinstance(hist, list) else None
    if res.output_tokens and res.output_tokens > 1 and res.ttft_ms is not None:
        res.tpot_ms = (res.e2e_ms - res.ttft_ms) / (res.output_tokens - 1)
    if not res.output_tokens:
        res.error = "no tokens generated"
        return res
    res.success = True
    return res


def _error_text(text: str) -> str:
    try:
        obj = json.loads(text)
        if isinstance(obj, dict):
            err = obj.get("error", obj)
            msg = err.get("message") if isinstance(err, dict) else err
            return str(msg or obj.get("message") or text)
    except json.JSONDecodeError:
        pass
    return text


def probe(port: int, spec: RequestSpec, temperature: float, timeout_s: float) -> RequestResult:
    """One request before timing; its error (if any) tells why the server cannot serve."""
    return send(port, RequestSpec(spec.prompt, min(spec.max_new_tokens, 8)), -1, True,
                temperature, None, timeout_s)


@dataclass
class LoadResult:
    results: list[RequestResult]
    wall_s: float                   # first send -> last completion
    interrupted: bool = False
    aborted: str | None = None      # why the load was cut short (a hung server), else None


# Hang detection: a server that stops answering would otherwise cost num_prompts x timeout.
HANG_TIMEOUTS = 3                   # this many requests timing out in a row abort the load
HEALTH_EVERY_S = 5.0                # /health is probed this often during a load ...
HEALTH_FAILURES = 2                 # ... and this many failed probes in a row abort it


def run(port, specs: list[RequestSpec], concurrency: int, temperature: float, seed: int,
        timeout_s: float, is_warmup: bool = False, first_idx: int = 0,
        stop: threading.Event | None = None, on_done=None) -> LoadResult:
    """Send `specs` with at most `concurrency` in flight (closed loop, like bench_serving's
    --max-concurrency). `stop` set: no new requests are sent; those in flight finish.

    A hung server aborts the load instead of costing len(specs) x timeout_s: after HANG_TIMEOUTS
    consecutive request timeouts, or HEALTH_FAILURES consecutive failed /health probes (one every
    HEALTH_EVERY_S), nothing more is sent and the requests in flight are cut (their sockets shut
    down); `aborted` says why."""
    results: list[RequestResult | None] = [None] * len(specs)
    t0 = time.monotonic()
    abort = threading.Event()
    why: list[str] = []
    conns: set = set()
    lock = threading.Lock()
    streak = [0]

    def cut(reason: str) -> None:
        with lock:
            if abort.is_set():
                return
            why.append(reason)
            abort.set()
            for sock in list(conns):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def one(i: int) -> None:
        if (stop is not None and stop.is_set()) or abort.is_set():
            return
        r = send(port, specs[i], first_idx + i, is_warmup, temperature,
                 seed + first_idx + i, timeout_s, conns)
        if abort.is_set() and r.success:     # cut short by the abort: not a complete answer
            r.success, r.error = False, "cut: the load was aborted (server hangs)"
        results[i] = r
        timed_out = r.error is not None and ("timed out" in r.error or "TimeoutError" in r.error)
        with lock:
            streak[0] = streak[0] + 1 if timed_out else 0
            hung = streak[0] >= HANG_TIMEOUTS
        if hung:
            cut(f"server hangs: {HANG_TIMEOUTS} requests in a row timed out after "
                f"{timeout_s:.0f} s (request_timeout_s); the load was aborted")
        if on_done is not None:
            on_done(r)

    def watch() -> None:
        failures = 0
        while not done_evt.wait(HEALTH_EVERY_S):
            code = health(port, timeout_s=min(timeout_s, 10.0))
            failures = 0 if code == 200 else failures + 1
            if failures >= HEALTH_FAILURES:
                cut(f"server stopped answering /health during the load ({failures} probes "
                    f"{HEALTH_EVERY_S:.0f} s apart; last answer: {code}); the load was aborted")
                return

    done_evt = threading.Event()
    watcher = threading.Thread(target=watch, name="load-health", daemon=True)
    watcher.start()
    try:
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="load") as pool:
            for fut in [pool.submit(one, i) for i in range(len(specs))]:
                procs.wait_result(fut)    # short waits: a stop signal is seen between requests
    finally:
        done_evt.set()
        watcher.join()
    done = [r for r in results if r is not None]
    end = max((r.finished_mono for r in done if r.finished_mono), default=time.monotonic())
    return LoadResult(done, max(end - t0, 1e-9), interrupted=len(done) < len(specs) and not why,
                      aborted=why[0] if why else None)


# ------------------------------------------------------------------------------- summary

def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), None for no values."""
    if not values:
        return None
    v = sorted(values)
    pos = (len(v) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def summarize(load: LoadResult) -> dict:
    """Client-side numbers of one run, named as `schema.Run` columns.

    output_tok_s  = Σ output tokens of successful requests / wall_s
    request_per_s = successful requests / wall_s
    client_accept_len = Σ completion tokens / Σ spec_verify_ct over successful responses
                    (SGLang's per-request spec_accept_length, pooled; includes the prefill token)
    """
    ok = [r for r in load.results if r.success and not r.is_warmup]
    failed = [r for r in load.results if not r.success and not r.is_warmup]
    out_tokens = sum(r.output_tokens or 0 for r in ok)
    out = {"requests_ok": len(ok), "requests_failed": len(failed), "output_tokens": out_tokens,
           "duration_s": load.wall_s,
           "output_tok_s": out_tokens / load.wall_s if ok else None,
           "request_per_s": len(ok) / load.wall_s if ok else None}
    series = {"ttft_ms": [r.ttft_ms for r in ok if r.ttft_ms is not None],
              "itl_ms": [x for r in ok for x in r.itl_ms],
              "tpot_ms": [r.tpot_ms for r in ok if r.tpot_ms is not None],
              "e2e_ms": [r.e2e_ms for r in ok if r.e2e_ms is not None]}
    for name, values in series.items():
        for q in (50, 90, 99):
            out[f"{name}_p{q}"] = percentile(values, q)
    verify = [r for r in ok if r.spec_verify_ct]
    out["client_accept_len"] = (sum(r.output_tokens for r in verify)
                                / sum(r.spec_verify_ct for r in verify)) if verify else None
    return out
