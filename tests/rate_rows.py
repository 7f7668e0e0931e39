"""Checks on a rate sweep's stored request rows, from the arrival schedule and the rows alone
(never specwatch's views): shared by the built-in engine's slow test (test_sweep_rate_e2e) and
the real-vLLM contract (contract_vllm/test_rate_sweep_contract)."""
from __future__ import annotations

import numpy as np
import pytest

from specwatch.run import arrivals


def by_run(reqs: list[dict]) -> dict[str, list[dict]]:
    """Request rows (ordered by run and request_idx) grouped by run_id, in order."""
    out: dict[str, list[dict]] = {}
    for q in reqs:
        out.setdefault(q["run_id"], []).append(q)
    return out


def check_schedule(qs: list[dict], n: int, seed: int) -> np.ndarray:
    """A run's n measured rows were due when the Poisson schedule seeded by (workload seed,
    repeat) says, and none was sent before it was due. Returns the send times, sorted, in s."""
    assert len(qs) == n
    want = arrivals.rate_offsets(n, qs[0]["request_rate"], 1.0, (seed, qs[0]["repeat_idx"]))
    assert [q["arrival_offset_ms"] for q in qs] == pytest.approx([w * 1000 for w in want])
    assert all(q["send_offset_ms"] >= q["arrival_offset_ms"] - 1e-6 for q in qs)
    return np.sort([q["send_offset_ms"] / 1000 for q in qs])


def kept(qs: list[dict]) -> bool:
    """The sends' rate within 2% and their gaps' CV within 0.1 of the schedule's (the load
    generator's bounds): what run_arrivals.schedule_kept must say."""
    def rate_cv(ms):
        t = np.sort(ms)
        gaps = np.diff(t)
        return (len(t) - 1) / (t[-1] - t[0]), gaps.std(ddof=1) / gaps.mean()
    sent_rate, sent_cv = rate_cv([q["send_offset_ms"] for q in qs])
    due_rate, due_cv = rate_cv([q["arrival_offset_ms"] for q in qs])
    return bool(abs(sent_rate / due_rate - 1) <= 0.02 and abs(sent_cv - due_cv) <= 0.1)


def check_goodput(qs: list[dict], slo: dict, good) -> None:
    """run_slo's good requests and goodput are the rows' count meeting `good(q)` (and success)
    and that count over the run's duration."""
    n_good = sum(1 for q in qs if q["success"] and good(q))
    assert slo["good_requests"] == n_good
    assert slo["goodput_req_s"] == pytest.approx(n_good / qs[0]["duration_s"])
