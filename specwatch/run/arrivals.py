"""When each request of an open-loop load is sent: arrivals at a rate (Poisson, gamma) or a trace.

A closed loop (`concurrency`) sends the next request when one finishes; an open loop sends each
request at its arrival time whatever the server is doing, as production traffic arrives. The
arrival processes are vLLM's (`vllm/benchmarks/serve.py`, `get_request`):

  poisson   gaps between arrivals exponential with mean 1/rate (coefficient of variation 1)
  gamma     gaps gamma-distributed with shape `burstiness` and mean 1/rate, so their coefficient
            of variation is 1/sqrt(burstiness): below 1 burstier than Poisson, above 1 more
            regular (burstiness 1 is Poisson)
  trace     the offsets of a JSONL trace (`read_trace`), time-scaled to an asked mean rate

Schedules (`rate_offsets`, `trace_offsets`): n requests, the first at the load's start (offset
0), then n - 1 gaps. Like vLLM, the drawn gaps are scaled so that they sum to exactly
(n - 1) / rate, so the asked mean rate holds whatever the seed (for Poisson this is the Poisson
process conditioned on its count: the inner arrivals are uniform order statistics). The gaps are
drawn for a unit rate and divided by the rate, so one seed gives the same pattern at every rate:
two rates differ only by the time scale (common random numbers between load levels), and a
config and its baseline at one (rate, repeat) get identical arrival times.

`dispatch` calls `submit(i)` at each request's time, waiting in short slices so a stop is seen
at once. It stamps nothing: the load records each request's real send time in the worker that
sends it (`load.run`), so a late dispatch or a saturated worker pool shows in the stored rows.

Trace file (JSONL, one request per line, offsets non-decreasing):
  {"offset_s": 0.0, "input_len": 512, "output_len": 128}
  also read: "timestamp" in milliseconds, "input_length" / "output_length" (the Mooncake trace
  format), "input_tokens" / "output_tokens". Input length is applied to the prompt as characters
  (exact tokens on the built-in byte-level engine; about 4 characters per token on a BPE model),
  output length as max_new_tokens (ignore_eos is set, so it is exact).

Not here: the HTTP of one request (`client`), the request list and its threads (`load`).
"""
from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

PROCESSES = ("poisson", "gamma", "trace")
SLICE_S = 0.2          # the longest single wait of `dispatch` (a stop is seen this fast)
MAX_IN_FLIGHT = 1024   # client threads of an open loop: requests beyond wait for a free one
_OFFSET_KEYS = (("offset_s", 1.0), ("arrival_s", 1.0), ("timestamp_s", 1.0), ("timestamp", 1e-3))
_IN_KEYS = ("input_len", "input_length", "input_tokens")
_OUT_KEYS = ("output_len", "output_length", "output_tokens")


class TraceError(ValueError):
    """The trace file cannot be used; the message is `file:line: field: what, what to do`."""


@dataclass(frozen=True)
class TraceRow:
    offset_s: float
    input_len: int | None
    output_len: int | None


def unit_gaps(n: int, burstiness: float, seed: tuple[int, ...]) -> np.ndarray:
    """n - 1 gaps of a unit-rate process (gamma with shape `burstiness`, mean 1), scaled to sum to
    exactly n - 1."""
    if n < 2:
        return np.zeros(0)
    rng = np.random.default_rng(list(seed))
    gaps = rng.gamma(shape=burstiness, scale=1.0 / burstiness, size=n - 1)
    return gaps * ((n - 1) / gaps.sum())


def rate_offsets(n: int, rate: float, burstiness: float = 1.0,
                 seed: tuple[int, ...] = (0,)) -> list[float]:
    """Send offsets in seconds from the load's start: 0, then cumulated gaps with mean 1/rate
    (see the module docstring). burstiness 1 is Poisson."""
    if not (rate > 0 and math.isfinite(rate)) or not burstiness > 0:
        raise ValueError(f"rate {rate} and burstiness {burstiness} must be > 0")
    return [0.0] + list(np.cumsum(unit_gaps(n, burstiness, seed)) / rate)


def trace_offsets(rows: list[TraceRow], rate: float | None = None) -> list[float]:
    """The trace's offsets from its first row; time-scaled to a mean rate of `rate` requests/s
    ((n - 1) / span) when given, else as recorded."""
    base = [r.offset_s - rows[0].offset_s for r in rows]
    if rate is None or len(rows) < 2 or base[-1] <= 0:
        return base
    scale = (len(rows) - 1) / rate / base[-1]
    return [t * scale for t in base]


def trace_rate(rows: list[TraceRow]) -> float | None:
    """The trace's own mean rate, (n - 1) / span in requests/s (None: one row or no span)."""
    span = rows[-1].offset_s - rows[0].offset_s if rows else 0.0
    return (len(rows) - 1) / span if len(rows) > 1 and span > 0 else None


def expected_cv(process: str, burstiness: float = 1.0, rows: list[TraceRow] | None = None
                ) -> float | None:
    """The coefficient of variation of the gaps the process asks for: 1/sqrt(burstiness) for
    poisson and gamma, the trace's own for a trace."""
    if process in ("poisson", "gamma"):
        return 1.0 / math.sqrt(burstiness)
    gaps = np.diff([r.offset_s for r in rows or []])
    return float(gaps.std(ddof=1) / gaps.mean()) if len(gaps) > 1 and gaps.mean() > 0 else None


def read_trace(path: str | Path) -> list[TraceRow]:
    """The rows of a JSONL trace (see the module docstring); TraceError with file:line."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace: {exc.strerror}") from None
    rows: list[TraceRow] = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{path}:{no}: not JSON ({exc.msg}); one JSON object per line, "
                             'e.g. {"offset_s": 0.5, "input_len": 512, "output_len": 128}'
                             ) from None
        if not isinstance(obj, dict):
            raise TraceError(f"{path}:{no}: expected a JSON object, got {type(obj).__name__}")
        key = next((k for k, _ in _OFFSET_KEYS if k in obj), None)
        if key is None:
            raise TraceError(f"{path}:{no}: no arrival time: give offset_s (seconds) or "
                             "timestamp (milliseconds)")
        offset = _number(obj[key], path, no, key, float) * dict(_OFFSET_KEYS)[key]
        if rows and offset < rows[-1].offset_s:
            raise TraceError(f"{path}:{no}: {key}: {obj[key]} is before the previous line's; "
                             "sort the trace by arrival time")
        lens = []
        for keys in (_IN_KEYS, _OUT_KEYS):
            k = next((k for k in keys if k in obj), None)
            lens.append(None if k is None else _number(obj[k], path, no, k, int, low=1))
        rows.append(TraceRow(offset, *lens))
    if not rows:
        raise TraceError(f"{path}: no requests in the trace")
    return rows


def _number(v, path, no: int, key: str, kind, low: float = 0):
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) \
        and v >= low and (kind is float or float(v).is_integer())
    if not ok:
        want = "an integer" if kind is int else "a number"
        raise TraceError(f"{path}:{no}: {key}: expected {want} >= {low:g}, got {json.dumps(v)}")
    return kind(v)


def dispatch(offsets: list[float], submit, t0: float, stopped) -> int:
    """Call `submit(i)` at time.monotonic() = t0 + offsets[i], in order, until `stopped()` is
    true; returns how many were submitted. Never waits longer than SLICE_S at a time."""
    for i, off in enumerate(offsets):
        due = t0 + off
        while True:
            if stopped():
                return i
            left = due - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(left, SLICE_S))
        submit(i)
    return len(offsets)


def stopper(*events: threading.Event | None):
    """`stopped()` for dispatch: true once any of the given events is set."""
    live = [e for e in events if e is not None]
    return lambda: any(e.is_set() for e in live)
