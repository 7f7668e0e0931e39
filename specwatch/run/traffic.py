"""The sweep file's traffic keys: load levels, the arrival process, SLOs, the rate search, and
adaptive repeats. `sweepfile.loads` calls `parse`; everything else of a sweep file is there.

    concurrency = [1, 4]          # closed-loop levels: requests in flight (default [1], or none
                                  # when request_rate is given)
    request_rate = [1, 2, 4]      # open-loop levels: requests per second (arrivals.py)
    arrival = "poisson"           # "poisson" (default) | "gamma" | "trace"
    burstiness = 0.5              # arrival = "gamma": the gaps' gamma shape, as vLLM's
                                  # --burstiness (CV 1/sqrt(b): < 1 burstier, > 1 more regular)
    trace = "trace.jsonl"         # arrival = "trace": a JSONL trace (arrivals.read_trace), relative
                                  # to the sweep file; its first num_prompts rows are replayed,
                                  # time-scaled to each request_rate (none: at its own pace)
    repeats = 3                   # measurements per (config, load level)
    max_repeats = 10              # adaptive repeats: measure a (config, level) again, with its
    target_ci_width = 0.05        # baseline, until its speedup interval is narrower than this
                                  # ((high - low) / speedup) or it has max_repeats

    [slo]                         # what a good request is; every limit optional, one needed
    ttft_ms = 2000                # time to first token
    tpot_ms = 100                 # time per output token after the first
    itl_ms = 200                  # inter-token latency
    e2e_ms = 10000                # whole request
    percentile = 99               # a run meets the SLO when this percentile of each limited
                                  # metric is within its limit (default 99)

    [rate_search]                 # per config, the highest request rate that meets the SLO
    min_rate = 0.5                # bracket, requests/s: measured first
    max_rate = 32
    steps = 4                     # at most this many bisection rates after the two ends
    repeats = 3                   # repeats per searched rate (default: the sweep's)

What the SLO and the search mean, as formulas, is in specwatch/db/slo_views.py.

Not here: sending anything (`arrivals`, `load`), deciding the next rate or repeat (`rounds`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

from specwatch.run import arrivals
from specwatch.run.tomllines import Lines
from specwatch.run.tomlranges import Range, numbers

_INT, _NUM, _STR = "an integer", "a number", "a string"
_NUM_LIST = "a list of numbers"
TOP_KEYS = {"request_rate": _NUM_LIST, "arrival": _STR, "burstiness": _NUM, "trace": _STR,
            "max_repeats": _INT, "target_ci_width": _NUM, "slo": "a table ([slo])",
            "rate_search": "a table ([rate_search])"}
SLO_KEYS = {"ttft_ms": _NUM, "tpot_ms": _NUM, "itl_ms": _NUM, "e2e_ms": _NUM, "percentile": _NUM}
SEARCH_KEYS = {"min_rate": _NUM, "max_rate": _NUM, "steps": _INT, "repeats": _INT}
LIMITS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
_DAY_MS = 86_400_000.0
_RATE = Range(0, 1e6, lo_open=True, why="requests per second")
# The traffic keys' ranges, by section, as sweepfile.RANGES holds the others'.
RANGES = {
    "": {"request_rate": _RATE, "burstiness": Range(0, 1000, lo_open=True, why=(
             "the gamma shape: 1 is Poisson")),
         "max_repeats": Range(2, 1000), "target_ci_width": Range(0, 10, lo_open=True, why=(
             "(high - low) / speedup of the 95% interval, e.g. 0.05"))},
    "slo": {**{k: Range(0, _DAY_MS, lo_open=True, why="milliseconds") for k in LIMITS},
            "percentile": Range(0, 100, lo_open=True)},
    "rate_search": {"min_rate": _RATE, "max_rate": _RATE, "steps": Range(0, 20),
                    "repeats": Range(1, 1000)},
}


class TrafficError(ValueError):
    """A traffic key cannot be used; `file:line: key: what, why, what to do`."""


@dataclass(frozen=True)
class Slo:
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    itl_ms: float | None = None
    e2e_ms: float | None = None
    percentile: float = 99.0


@dataclass(frozen=True)
class RateSearch:
    min_rate: float
    max_rate: float
    steps: int
    repeats: int


@dataclass(frozen=True)
class Traffic:
    concurrency: tuple[int, ...] = (1,)
    request_rate: tuple[float, ...] = ()
    arrival: str = "poisson"
    burstiness: float = 1.0
    trace: str | None = None             # absolute path
    trace_sha1: str | None = None
    slo: Slo | None = None
    rate_search: RateSearch | None = None
    max_repeats: int | None = None
    target_ci_width: float | None = None

    def levels(self) -> list[tuple[int | None, float | None]]:
        """(concurrency, request_rate) of every planned load level: closed ones, then open."""
        return [(c, None) for c in self.concurrency] + [(None, r) for r in self.request_rate]

    def arrival_json(self) -> str | None:
        """What the open-loop levels' arrivals were (runs.arrival; NULL without rate levels)."""
        if not self.request_rate and self.rate_search is None:   # closed loop only
            return None
        d = {"process": self.arrival}
        if self.arrival == "gamma":
            d["burstiness"] = self.burstiness
        if self.arrival == "trace":
            d["trace_sha1"] = self.trace_sha1
        return json.dumps(d, sort_keys=True)


def _check(table: dict, keys: dict[str, str], section: str, lines: Lines, what: str,
           only: bool = True) -> None:
    for key, value in table.items():
        where = lines.at(section, key)
        if key not in keys:
            if only:
                raise TrafficError(f"{where}: {key}: unknown key in {what} (known: "
                                   f"{', '.join(sorted(keys))})")
            continue
        kind = keys[key]
        ok = {_INT: lambda v: isinstance(v, int) and not isinstance(v, bool),
              _NUM: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
              _STR: lambda v: isinstance(v, str),
              _NUM_LIST: lambda v: isinstance(v, list) and all(
                  isinstance(x, (int, float)) and not isinstance(x, bool) for x in v),
              }.get(kind, lambda v: isinstance(v, dict))(value)
        if not ok:
            raise TrafficError(f"{where}: {key}: expected {kind}, got "
                               f"{json.dumps(value, default=str)}")
        rng = RANGES.get(section, {}).get(key)
        for v in numbers(value) if rng is not None else ():
            if not rng.holds(v):
                raise TrafficError(f"{where}: {rng.refusal(key, v)}")


def parse(data: dict, lines: Lines, base_dir: Path, repeats: int = 1) -> Traffic:
    """The traffic keys of a parsed sweep file (its top-level table `data`)."""
    _check({k: v for k, v in data.items() if k in TOP_KEYS}, TOP_KEYS, "", lines, "")
    at = lambda key, section="": lines.at(section, key)          # noqa: E731
    workload = data["workload"] if isinstance(data.get("workload"), dict) else {}
    rates = tuple(float(r) for r in data.get("request_rate", []))
    if "request_rate" in data and not rates:
        raise TrafficError(f"{at('request_rate')}: request_rate: give a non-empty list of "
                           "requests per second, e.g. [1, 2, 4], or drop the key")
    if len(set(rates)) != len(rates):
        raise TrafficError(f"{at('request_rate')}: request_rate: {list(rates)} lists a rate twice")
    arrival = data.get("arrival", "trace" if "trace" in data else "poisson")
    open_loop = "request_rate" in data or "rate_search" in data or arrival == "trace"
    concurrency = tuple(data.get("concurrency", [] if open_loop else [1]))
    if not concurrency and "concurrency" in data:
        raise TrafficError(f"{at('concurrency')}: concurrency: give a non-empty list of integers "
                           "(1..4096), or drop the key when request_rate lists the levels")
    if arrival not in arrivals.PROCESSES:
        raise TrafficError(f"{at('arrival')}: arrival: {arrival!r} is not one of "
                           f"{', '.join(arrivals.PROCESSES)}")
    if "burstiness" in data and arrival != "gamma":
        raise TrafficError(f"{at('burstiness')}: burstiness: the gamma shape of the gaps; set "
                           "arrival = \"gamma\" (Poisson is burstiness 1)")
    if arrival == "gamma" and "burstiness" not in data:
        raise TrafficError(f"{at('arrival')}: arrival: \"gamma\" needs burstiness (e.g. 0.5 for "
                           "burstier than Poisson, 2 for more regular)")
    trace = sha1 = None
    if arrival == "trace":
        if "trace" not in data:
            raise TrafficError(f"{at('arrival')}: arrival: \"trace\" needs trace = \"FILE.jsonl\"")
        p = Path(data["trace"]).expanduser()
        p = (p if p.is_absolute() else base_dir / p).resolve()
        try:
            rows = arrivals.read_trace(p)
        except arrivals.TraceError as exc:
            raise TrafficError(f"{at('trace')}: trace: {exc}") from None
        num = workload.get("num_prompts", len(rows))
        if isinstance(num, int) and num > len(rows):
            raise TrafficError(f"{lines.at('workload', 'num_prompts')}: num_prompts: {num} but "
                               f"the trace {p} has {len(rows)} requests; lower it")
        trace, sha1 = str(p), hashlib.sha1(p.read_bytes()).hexdigest()
        own = arrivals.trace_rate(rows[:num] if isinstance(num, int) else rows)
        if not rates and own is None:
            raise TrafficError(f"{at('trace')}: trace: {p}'s requests all arrive at once; give "
                               "request_rate to spread them")
        rates = rates or (own,)           # no rate asked: replayed at the trace's own pace
    elif "trace" in data:
        raise TrafficError(f"{at('trace')}: trace: only with arrival = \"trace\"")
    num = workload.get("num_prompts")
    if (rates or "rate_search" in data) and isinstance(num, int) and num < 2:
        raise TrafficError(f"{lines.at('workload', 'num_prompts')}: num_prompts: a request rate "
                           "needs at least 2 requests per run")
    slo = _slo(data.get("slo"), lines)
    search = _search(data.get("rate_search"), lines, slo, repeats)
    max_rep, width = data.get("max_repeats"), data.get("target_ci_width")
    if (max_rep is None) != (width is None):
        missing = "target_ci_width" if width is None else "max_repeats"
        raise TrafficError(f"{at('max_repeats' if width is None else 'target_ci_width')}: "
                           f"adaptive repeats need both max_repeats and target_ci_width; add "
                           f"{missing}")
    if max_rep is not None:
        if repeats < 2:
            raise TrafficError(f"{at('repeats')}: repeats: adaptive repeats start from at least "
                               "2 (one repeat gives no interval to narrow); set repeats = 2 or more")
        if max_rep < repeats:
            raise TrafficError(f"{at('max_repeats')}: max_repeats: {max_rep} is below repeats = "
                               f"{repeats}")
    return Traffic(concurrency=concurrency, request_rate=rates, arrival=arrival,
                   burstiness=float(data.get("burstiness", 1.0)), trace=trace, trace_sha1=sha1,
                   slo=slo, rate_search=search, max_repeats=max_rep,
                   target_ci_width=float(width) if width is not None else None)


def _slo(t, lines: Lines) -> Slo | None:
    if t is None:
        return None
    _check(t, SLO_KEYS, "slo", lines, "[slo]")
    if not any(k in t for k in LIMITS):
        raise TrafficError(f"{lines.at('slo')}: slo: give at least one limit "
                           f"({', '.join(LIMITS)}), e.g. ttft_ms = 2000")
    return Slo(**{k: float(v) for k, v in t.items()})


def _search(t, lines: Lines, slo: Slo | None, repeats: int) -> RateSearch | None:
    if t is None:
        return None
    _check(t, SEARCH_KEYS, "rate_search", lines, "[rate_search]")
    if slo is None:
        raise TrafficError(f"{lines.at('rate_search')}: rate_search: searches for the highest "
                           "rate that meets the SLO; add an [slo] table")
    for key in ("min_rate", "max_rate"):
        if key not in t:
            raise TrafficError(f"{lines.at('rate_search')}: rate_search: {key} is missing")
    if not t["min_rate"] < t["max_rate"]:
        raise TrafficError(f"{lines.at('rate_search', 'max_rate')}: max_rate: must be above "
                           f"min_rate ({t['min_rate']})")
    return RateSearch(float(t["min_rate"]), float(t["max_rate"]), t.get("steps", 4),
                      t.get("repeats", repeats))


def level_label(concurrency: int | None, request_rate: float | None) -> str:
    """A load level as run ids and progress lines name it: c4, or rps2.5 (a request rate)."""
    return f"c{concurrency}" if request_rate is None else rate_label(request_rate)


def offsets(t: Traffic, rate: float | None, n: int, seed: tuple[int, ...]) -> list[float] | None:
    """When each of a run's n requests is sent (arrivals.py); None for a closed-loop level."""
    if rate is None:
        return None
    if t.arrival == "trace":
        return arrivals.trace_offsets(arrivals.read_trace(t.trace)[:n], rate)
    return arrivals.rate_offsets(n, rate, t.burstiness, seed)


def with_trace_lengths(t: Traffic, specs: list) -> list:
    """A trace's requests: the i-th spec gets the i-th trace row's output length as
    max_new_tokens and its prompt cut or repeated to the row's input length in characters."""
    if t.arrival != "trace":
        return specs
    rows = arrivals.read_trace(t.trace)
    out = []
    for spec, row in zip(specs, rows):
        text = spec.prompt
        if row.input_len is not None:
            text = (text * (row.input_len // len(text) + 1))[:row.input_len]
        out.append(dataclasses.replace(spec, prompt=text,
                                       max_new_tokens=row.output_len or spec.max_new_tokens))
    return out


def round_rate(rate: float) -> float:
    """A searched rate to 3 significant digits (it names runs: rps3.17)."""
    return float(f"{rate:.3g}") if rate > 0 and math.isfinite(rate) else rate


def rate_label(rate: float) -> str:
    return f"rps{rate:g}"
