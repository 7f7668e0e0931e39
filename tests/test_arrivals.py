"""Open-loop arrivals: the schedules (Poisson, gamma, trace) and the send times a real load records.

Statistical checks are the standard ones, written out here (not taken from the code under test):
a one-sample Kolmogorov-Smirnov test of the gaps against the asked distribution (exponential for
Poisson, gamma(k) for gamma), at alpha = 0.001 with the asymptotic critical value
sqrt(-ln(alpha / 2) / 2) / sqrt(n), and the gaps' coefficient of variation against 1/sqrt(k).
The load tests drive `load.run` against the fixed-delay server (a real process, real HTTP)."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from specwatch.run import arrivals, launch, load

ROOT = Path(__file__).resolve().parent.parent
ALPHA = 0.001
KS_C = math.sqrt(-math.log(ALPHA / 2) / 2)     # 1.949


def gamma_cdf(k: float, x: float) -> float:
    """Regularized lower incomplete gamma P(k, x), by its power series (x small) or the
    continued fraction of Q (x large), as in Numerical Recipes' gammp."""
    if x <= 0:
        return 0.0
    lg = math.lgamma(k)
    if x < k + 1:
        term = total = 1.0 / k
        a = k
        while term > total * 1e-15:
            a += 1
            term *= x / a
            total += term
        return total * math.exp(-x + k * math.log(x) - lg)
    b, c, d = x + 1 - k, 1e300, 1 / (x + 1 - k)
    h = d
    for i in range(1, 1000):
        an = -i * (i - k)
        b += 2
        d = 1 / (an * d + b)
        c = b + an / c
        h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return 1 - math.exp(-x + k * math.log(x) - lg) * h


def ks_statistic(samples, cdf) -> float:
    x = np.sort(np.asarray(samples, float))
    n = len(x)
    f = np.array([cdf(v) for v in x])
    return float(max((np.arange(1, n + 1) / n - f).max(), (f - np.arange(n) / n).max()))


def ks_passes(gaps, rate: float, k: float) -> tuple[bool, float, float]:
    """(passes, D, critical D) for gaps against gamma(shape k, mean 1/rate)."""
    d = ks_statistic(np.asarray(gaps) * rate * k, lambda v: gamma_cdf(k, v))
    crit = KS_C / math.sqrt(len(gaps))
    return d < crit, d, crit


def test_the_gamma_cdf_of_these_tests_is_right():
    """The checker first: P(1, x) = 1 - e^-x, P(k, x) for integer k is 1 - e^-x Σ x^j/j!, and
    P(0.5, x) = erf(sqrt(x))."""
    for x in (0.01, 0.5, 1.0, 2.0, 7.5, 30.0):
        assert gamma_cdf(1.0, x) == pytest.approx(1 - math.exp(-x), abs=1e-12)
        assert gamma_cdf(3.0, x) == pytest.approx(
            1 - math.exp(-x) * (1 + x + x * x / 2), abs=1e-12)
        assert gamma_cdf(0.5, x) == pytest.approx(math.erf(math.sqrt(x)), abs=1e-12)


@pytest.mark.parametrize("n", [2, 3, 50, 1001])
@pytest.mark.parametrize("rate", [0.25, 1.0, 7.3, 400.0])
@pytest.mark.parametrize("burstiness", [0.3, 1.0, 4.0])
def test_a_schedule_starts_at_zero_and_holds_the_asked_mean_rate_exactly(n, rate, burstiness):
    offs = arrivals.rate_offsets(n, rate, burstiness, (7, 2))
    assert len(offs) == n and offs[0] == 0.0
    assert all(b >= a for a, b in zip(offs, offs[1:]))
    assert (n - 1) / offs[-1] == pytest.approx(rate, rel=1e-12)


def test_one_seed_gives_one_pattern_at_every_rate_and_seeds_differ():
    a = np.array(arrivals.rate_offsets(200, 2.0, 1.0, (0, 1)))
    b = np.array(arrivals.rate_offsets(200, 8.0, 1.0, (0, 1)))
    assert np.allclose(a * 2.0, b * 8.0, rtol=1e-12)
    assert arrivals.rate_offsets(200, 2.0, 1.0, (0, 1)) == list(a)
    assert not np.allclose(a, arrivals.rate_offsets(200, 2.0, 1.0, (0, 2)))
    assert not np.allclose(a, arrivals.rate_offsets(200, 2.0, 1.0, (1, 1)))


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 1.0, 2.0, 8.0])
@pytest.mark.parametrize("seed", [(0, 0), (3, 1), (11, 4)])
def test_schedule_gaps_follow_the_asked_distribution(burstiness, seed):
    rate, n = 5.0, 4001
    gaps = np.diff(arrivals.rate_offsets(n, rate, burstiness, seed))
    ok, d, crit = ks_passes(gaps, rate, burstiness)
    assert ok, f"KS D={d:.4f} >= {crit:.4f}"
    # the sample CV's standard error: sd(s²)/σ² ≈ sqrt((2 + excess kurtosis 6/k) / n), halved
    cv = 1 / math.sqrt(burstiness)
    se = cv * 0.5 * math.sqrt((2 + 6 / burstiness) / n)
    assert gaps.std(ddof=1) / gaps.mean() == pytest.approx(cv, abs=4 * se)
    assert arrivals.expected_cv("gamma", burstiness) == pytest.approx(1 / math.sqrt(burstiness))


def test_the_ks_check_rejects_a_wrong_process():
    """Regular arrivals (burstiness 50) and bursty ones (0.2) are not Poisson: the test in use
    here can tell, so its passes above mean something."""
    for k in (50.0, 0.2):
        gaps = np.diff(arrivals.rate_offsets(2001, 3.0, k, (0, 0)))
        assert not ks_passes(gaps, 3.0, 1.0)[0]


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_a_rate_must_be_positive_and_finite(bad):
    with pytest.raises(ValueError):
        arrivals.rate_offsets(10, bad)


# ------------------------------------------------------------------------------- traces

def write(tmp_path: Path, lines: list) -> Path:
    p = tmp_path / "trace.jsonl"
    p.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return p


@pytest.mark.parametrize("rows,want", [
    ([{"offset_s": 1.0, "input_len": 10, "output_len": 4},
      {"offset_s": 1.5, "input_len": 20, "output_len": 8}],
     [arrivals.TraceRow(1.0, 10, 4), arrivals.TraceRow(1.5, 20, 8)]),
    # Mooncake's format: timestamp in milliseconds, input_length / output_length
    ([{"timestamp": 0, "input_length": 6755, "output_length": 500, "hash_ids": [1, 2]},
      {"timestamp": 250, "input_length": 7319, "output_length": 490}],
     [arrivals.TraceRow(0.0, 6755, 500), arrivals.TraceRow(0.25, 7319, 490)]),
    ([{"arrival_s": 2}, {"arrival_s": 2, "output_tokens": 3}],
     [arrivals.TraceRow(2.0, None, None), arrivals.TraceRow(2.0, None, 3)]),
])
def test_trace_formats(tmp_path, rows, want):
    assert arrivals.read_trace(write(tmp_path, rows)) == want


@pytest.mark.parametrize("lines,where,what", [
    (['{"offset_s": 0}', "not json"], 2, "not JSON"),
    (['{"offset_s": 0}', '[1, 2]'], 2, "expected a JSON object"),
    (['{"input_len": 3}'], 1, "no arrival time"),
    (['{"offset_s": 1.0}', '{"offset_s": 0.5}'], 2, "sort the trace"),
    (['{"offset_s": -1}'], 1, "offset_s: expected a number >= 0"),
    (['{"offset_s": 0, "input_len": 2.5}'], 1, "input_len: expected an integer"),
    (['{"offset_s": 0, "output_len": 0}'], 1, "output_len: expected an integer >= 1"),
    (['{"offset_s": 0, "output_len": true}'], 1, "output_len"),
    (['{"offset_s": NaN}'], 1, "offset_s"),
])
def test_a_bad_trace_names_file_line_and_field(tmp_path, lines, where, what):
    path = write(tmp_path, lines)
    with pytest.raises(arrivals.TraceError) as e:
        arrivals.read_trace(path)
    assert f"{path}:{where}:" in str(e.value) and what in str(e.value), str(e.value)


def test_an_empty_or_missing_trace_is_refused(tmp_path):
    for path in (write(tmp_path, [""]), tmp_path / "nope.jsonl"):
        with pytest.raises(arrivals.TraceError) as e:
            arrivals.read_trace(path)
        assert str(path) in str(e.value)


def test_a_trace_replays_from_its_first_row_and_scales_to_a_rate():
    rows = [arrivals.TraceRow(t, None, None) for t in (10.0, 10.5, 11.0, 13.0)]
    assert arrivals.trace_offsets(rows) == [0.0, 0.5, 1.0, 3.0]
    assert arrivals.trace_rate(rows) == pytest.approx(1.0)          # 3 gaps in 3 s
    scaled = arrivals.trace_offsets(rows, 6.0)
    assert scaled == pytest.approx([0.0, 1 / 12, 1 / 6, 0.5])        # 3 gaps in 0.5 s
    gaps = np.diff([0.0, 0.5, 1.0, 3.0])
    assert arrivals.expected_cv("trace", rows=rows) == pytest.approx(
        gaps.std(ddof=1) / gaps.mean())


# ------------------------------------------------------------------------------- real loads

@pytest.fixture(scope="module")
def fixed_delay():
    port = launch.free_port()
    srv = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "fixed_delay_server.py"),
                            "--port", str(port), "--ttft-ms", "20", "--itl-ms", "5"],
                           stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while load.health(port, 1.0) != 200:
            assert time.monotonic() < deadline and srv.poll() is None
            time.sleep(0.05)
        yield port
    finally:
        srv.kill()
        srv.wait()


@pytest.mark.parametrize("burstiness", [1.0, 0.5])
def test_an_open_loop_sends_at_the_asked_times_and_its_send_times_pass_the_test(
        fixed_delay, burstiness):
    """The real send times of a load at 40 requests/s (not the schedule: what the worker threads
    stamped) pass the KS test of the asked process; the achieved rate is within 5% of the asked
    one and every request records when it was due."""
    rate, n = 40.0, 300
    offs = arrivals.rate_offsets(n, rate, burstiness, (5, 0))
    specs = [load.RequestSpec(f"r{i}", 3) for i in range(n)]
    res = load.run(fixed_delay, specs, 1, 0.0, 0, 30.0, offsets=offs)
    assert len(res.results) == n and all(r.success for r in res.results)
    assert [r.arrival_offset_ms for r in sorted(res.results, key=lambda r: r.request_idx)] == \
        pytest.approx([o * 1000 for o in offs])
    sends = np.sort([r.send_offset_ms / 1000 for r in res.results])
    assert (n - 1) / (sends[-1] - sends[0]) == pytest.approx(rate, rel=0.05)
    ok, d, crit = ks_passes(np.diff(sends), rate, burstiness)
    assert ok, f"KS D={d:.4f} >= {crit:.4f}"
    # open loop: requests overlap when arrivals bunch up (a closed loop at 1 never would)
    spans = sorted((r.send_offset_ms, r.send_offset_ms + r.e2e_ms) for r in res.results)
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:]))


def test_a_closed_loop_records_send_times_but_no_arrivals(fixed_delay):
    specs = [load.RequestSpec(f"c{i}", 3, "chat" if i % 2 else None) for i in range(8)]
    res = load.run(fixed_delay, specs, 2, 0.0, 0, 30.0)
    rows = sorted((r.row() for r in res.results), key=lambda r: r["request_idx"])
    assert all(r["arrival_offset_ms"] is None for r in rows)
    assert all(r["send_offset_ms"] is not None and r["send_offset_ms"] >= 0 for r in rows)
    assert [r["category"] for r in rows] == [None, "chat"] * 4
    # two in flight: the third request goes only after one of the first two finished
    first_done = min(r["send_offset_ms"] + r["e2e_ms"] for r in rows[:2])
    assert sorted(r["send_offset_ms"] for r in rows)[2] >= first_done - 1.0


def test_a_stop_during_an_open_loop_sends_nothing_more(fixed_delay):
    stop = threading.Event()
    offs = [0.0, 0.05, 5.0, 5.1]
    threading.Timer(0.5, stop.set).start()
    t0 = time.monotonic()
    res = load.run(fixed_delay, [load.RequestSpec(f"s{i}", 2) for i in range(4)], 1, 0.0, 0,
                   30.0, stop=stop, offsets=offs)
    assert time.monotonic() - t0 < 2.0          # not waiting for the 5 s arrivals
    assert len(res.results) == 2 and res.interrupted
