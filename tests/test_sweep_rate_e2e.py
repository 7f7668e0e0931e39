"""A rate sweep with an SLO end to end on the built-in engine (slow tier: ~1-2 min on 2 cores):
the real CLI starts real servers, loads them open-loop over real HTTP and stores into a real DuckDB
file. Checked from the stored rows: the send times follow the asked Poisson process (KS test of
the gaps, written out here), a config and its baseline got the same arrival times, goodput is what
the request rows say it is, the rate search stayed within its bounds, the report's JSON carries
goodput, the max rate under the SLO and the crossover per config, and a re-run measures nothing."""
from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from rate_rows import by_run, check_goodput, check_schedule, kept
from test_sweep_e2e import leftovers, rows

ROOT = Path(__file__).resolve().parent.parent
N, RATES, SEED = 40, (5.0, 15.0), 3
TTFT_MS, TPOT_MS = 400.0, 60.0
SWEEP = f"""
name = "rate-e2e"
engine = "builtin"
model = "builtin:target"
draft_model = "builtin:draft-eagle3"
server_flags = ["--decode-log-interval", "8"]
request_rate = [{RATES[0]}, {RATES[1]}]
repeats = 2
env = {{OMP_NUM_THREADS = "1"}}
[slo]
ttft_ms = {TTFT_MS}
tpot_ms = {TPOT_MS}
percentile = 90
[rate_search]
min_rate = 5
max_rate = 30
steps = 1
repeats = 1
[workload]
prompts = "builtin:mixed"
num_prompts = {N}
warmup_requests = 2
output_tokens = 16
seed = {SEED}
[[config]]
name = "chain"
speculative_num_steps = 3
speculative_eagle_topk = 1
"""


def sweep(tmp_path: Path) -> dict:
    (tmp_path / "rate.toml").write_text(textwrap.dedent(SWEEP))
    out = subprocess.run([sys.executable, "-m", "specwatch.cli", "run-sweep",
                          str(tmp_path / "rate.toml"), "--db", str(tmp_path / "r.duckdb"),
                          "--out-dir", str(tmp_path / "runs"), "--json"],
                         capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


@pytest.mark.slow
def test_a_rate_sweep_with_an_slo_on_the_builtin_engine(tmp_path):
    doc = sweep(tmp_path)
    db = tmp_path / "r.duckdb"
    assert not leftovers(tmp_path)
    runs = rows(db, "SELECT * FROM runs WHERE sweep_name = 'rate-e2e' ORDER BY run_id")
    assert all(r["status"] == "ok" for r in runs), [(r["run_id"], r["failure_reason"])
                                                    for r in runs if r["status"] != "ok"]
    assert all(r["concurrency"] is None and r["request_rate"] > 0 for r in runs)
    assert {json.loads(r["arrival"])["process"] for r in runs} == {"poisson"}
    planned = [r for r in runs if r["rate_search_step"] is None]
    assert sorted({(r["config_name"], r["request_rate"], r["repeat_idx"]) for r in planned}) == \
        sorted((c, rate, rep) for c in ("baseline", "chain") for rate in RATES for rep in (0, 1))
    # the search: the 30/s end (5/s is planned) plus at most `steps` bisection rates per config
    for cfg in ("baseline", "chain"):
        searched = {r["request_rate"] for r in runs
                    if r["config_name"] == cfg and r["rate_search_step"] is not None}
        assert 30.0 in searched and len(searched) <= 2, searched
        assert all(5 < x <= 30 for x in searched)

    reqs = rows(db, "SELECT q.*, r.config_name, r.request_rate, r.repeat_idx, r.duration_s "
                    "FROM requests q JOIN runs r USING (run_id) "
                    "WHERE r.sweep_name = 'rate-e2e' AND NOT q.is_warmup "
                    "ORDER BY q.run_id, q.request_idx")
    runs_of = by_run(reqs)
    arr = {r["run_id"]: r for r in rows(db, "SELECT * FROM run_arrivals")}
    for rid, qs in runs_of.items():
        # the schedule is the arrival process's, seeded by (workload seed, repeat)
        sends = check_schedule(qs, N, SEED)
        assert (N - 1) / (sends[-1] - sends[0]) == pytest.approx(qs[0]["request_rate"], rel=0.05)
        assert arr[rid]["schedule_kept"] is kept(qs)
        assert {q["category"] for q in qs} <= {"chat", "code", "math", "summarisation"}
    # the baseline and chain of one (rate, repeat) were asked for at the same times
    sched = {(q["config_name"], q["request_rate"], q["repeat_idx"], q["request_idx"]):
             q["arrival_offset_ms"] for q in reqs}
    for (cfg, rate, rep, idx), t in sched.items():
        if cfg == "chain" and ("baseline", rate, rep, idx) in sched:
            assert sched[("baseline", rate, rep, idx)] == pytest.approx(t)
    # the real send gaps of chain's runs (independent arrivals per repeat; the two rates share
    # a pattern, so one rate's runs only) against the exponential: one-sample KS, alpha 0.001
    gaps = []
    for rid, qs in runs_of.items():
        if qs[0]["config_name"] == "chain" and qs[0]["request_rate"] == RATES[0]:
            sends = np.sort([q["send_offset_ms"] / 1000 for q in qs])
            gaps += list(np.diff(sends) * RATES[0])
    x = np.sort(gaps)
    n = len(x)
    f = 1 - np.exp(-x)
    d = max((np.arange(1, n + 1) / n - f).max(), (f - np.arange(n) / n).max())
    assert d < math.sqrt(-math.log(0.001 / 2) / 2) / math.sqrt(n), d

    # goodput by the definition, from the stored rows: good = ok, ttft and tpot within limits
    slo = {r["run_id"]: r for r in rows(db, "SELECT * FROM run_slo")}
    for rid, qs in runs_of.items():
        check_goodput(qs, slo[rid], lambda q: q["ttft_ms"] <= TTFT_MS
                      and (q["tpot_ms"] or 0) <= TPOT_MS)

    stats = doc["stats"]
    assert {r["config"] for r in stats["max_rate"]} == {"baseline", "chain"}
    assert all(r["max_rate_state"] in ("crosses", "below", "above") for r in stats["max_rate"])
    cross = [r for r in stats["crossover"] if r["config"] == "chain"]
    assert len(cross) == 1 and cross[0]["load_kind"] == "request_rate" \
        and cross[0]["loads_measured"] == 2
    assert {(r["config"], r["request_rate"]) for r in stats["slo"]} >= {
        (c, rate) for c in ("baseline", "chain") for rate in RATES}
    assert {r["category"] for r in stats["categories"]} == {"chat", "code", "math",
                                                           "summarisation"}

    # a re-run measures nothing: the planned runs and the search are in the store
    count = "SELECT count(*) AS n, max(ended_at) AS last FROM runs"
    before = rows(db, count)
    again = sweep(tmp_path)
    assert again["configs"] == [] and sorted(again["up_to_date"]) == ["baseline", "chain"]
    assert rows(db, count) == before
