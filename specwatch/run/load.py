"""Drive a workload against a ready server over HTTP: one streamed request per prompt, one row each.

Prompts come from a built-in set (`specwatch/run/workloads/*.jsonl`), a JSONL file or a ShareGPT file,
and are sampled with the workload's seed, so every config sees the same requests. How one request
is sent and timed (TTFT, ITL, TPOT, E2E; SGLang's `/generate` or the OpenAI `/v1/completions`)
is `client.send`'s job; this module decides which requests are sent when: closed loop (at most
`concurrency` in flight) or open loop (each at its arrival time, `arrivals`), recording every
request's send time and, open loop, the time it was due.

Failures are data: an HTTP error, a refused connection or a timeout becomes a row with `success =
False` and the error text. `probe()` sends one request first and fails fast when the server cannot
serve at all. `summarize()` turns rows into the run's client-side numbers.

Not here: starting servers (see `launch`), storing rows (see `writer`), the HTTP of one request
(see `client`).
"""
from __future__ import annotations

import http.client
import json
import math
import socket
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from specwatch.run import arrivals, procs
from specwatch.run.client import (  # RequestSpec/RequestResult/health: used as load.* too
    API_GENERATE, ClientError, RequestResult, RequestSpec, health, send)
from specwatch.run import client
from specwatch.run.client import get as _get, post as _post
from specwatch.engine import BUILTIN_PREFIX
from specwatch.run.sweepfile import Workload

WORKLOADS_DIR = Path(__file__).resolve().parent / "workloads"
# builtin:mixed: every set but long_context, whose prompts exceed the built-in engine's context
MIXED_SETS = ("chat", "code", "math", "summarisation")


class LoadError(RuntimeError):
    """The workload cannot be built (unreadable or empty prompt file), with file:line."""


def target_of(endpoint: str) -> tuple[str, int]:
    """(host, port) of an endpoint URL such as http://10.0.0.5:30000 (attach mode); `client.target_of`,
    failing with LoadError."""
    try:
        return client.target_of(endpoint)
    except ClientError as exc:
        raise LoadError(str(exc)) from None


# ------------------------------------------------------------------------------- prompts

def read_prompts(workload: Workload, categories: dict[str, str] | None = None) -> list[str]:
    """All prompts of the workload's source, in file order. `categories` (optional) is filled
    with {prompt: category} from JSONL rows that name one (every built-in set does)."""
    if workload.prompts.startswith(BUILTIN_PREFIX):
        name = workload.prompts[len(BUILTIN_PREFIX):]
        names = list(MIXED_SETS) if name == "mixed" else [name]
        out = []
        for n in names:
            out += _read_jsonl(WORKLOADS_DIR / f"{n}.jsonl", categories)
        return out
    path = Path(workload.prompts)
    if workload.format == "sharegpt":
        return _read_sharegpt(path)
    return _read_jsonl(path, categories)


def _read_jsonl(path: Path, categories: dict[str, str] | None = None) -> list[str]:
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
        if categories is not None and isinstance(obj.get("category"), str):
            categories.setdefault(text, obj["category"])
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


def build_requests(workload: Workload, prompts: list[str], categories: dict[str, str] | None = None
                   ) -> tuple[list[RequestSpec], list[RequestSpec]]:
    """(warm-up requests, measured requests), sampled with the workload's seed; each carries its
    prompt's category from `categories` (see read_prompts)."""
    rng = random.Random(workload.seed)
    order: list[str] = []
    need = workload.num_prompts + workload.warmup_requests
    while len(order) < need:  # every prompt once per pass, passes shuffled independently
        batch = list(prompts)
        rng.shuffle(batch)
        order += batch
    specs = []
    for text in order[:need]:
        category = (categories or {}).get(text)
        if workload.input_chars is not None:
            n = rng.randint(workload.input_chars.min, workload.input_chars.max)
            text = (text * (n // len(text) + 1))[:n]
        out = rng.randint(workload.output_tokens.min, workload.output_tokens.max)
        specs.append(RequestSpec(text, out, category))
    return specs[:workload.warmup_requests], specs[workload.warmup_requests:]


# ------------------------------------------------------------------------------- HTTP

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


def probe(port: int, spec: RequestSpec, temperature: float, timeout_s: float,
          api: str = API_GENERATE) -> RequestResult:
    """One request before timing; its error (if any) tells why the server cannot serve."""
    return send(port, RequestSpec(spec.prompt, min(spec.max_new_tokens, 8)), -1, True,
                temperature, None, timeout_s, api=api)


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
        stop: threading.Event | None = None, on_done=None, api: str = API_GENERATE,
        offsets: list[float] | None = None) -> LoadResult:
    """Send `specs` with at most `concurrency` in flight (closed loop, like bench_serving's
    --max-concurrency), each through `client.send` over `api`; or, given `offsets` (seconds from
    the load's start, `arrivals`), each at its own time whatever is in flight (open loop, at most
    arrivals.MAX_IN_FLIGHT). Each request records when it was really sent (`send_offset_ms`,
    stamped in the thread that sends it) and, open loop, when it was due (`arrival_offset_ms`).
    `stop` set: no new requests are sent; those in flight finish.

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
        sent = time.monotonic()
        r = send(port, specs[i], first_idx + i, is_warmup, temperature,
                 seed + first_idx + i, timeout_s, conns, api=api)
        r.category, r.send_offset_ms = specs[i].category, (sent - t0) * 1000
        r.arrival_offset_ms = offsets[i] * 1000 if offsets is not None else None
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
        workers = concurrency if offsets is None else min(len(specs), arrivals.MAX_IN_FLIGHT)
        with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="load") as pool:
            if offsets is None:
                futs = [pool.submit(one, i) for i in range(len(specs))]
            else:
                futs = []
                arrivals.dispatch(offsets, lambda i: futs.append(pool.submit(one, i)), t0,
                                  arrivals.stopper(stop, abort))
            for fut in futs:
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
