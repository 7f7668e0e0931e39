"""Slow: a rate sweep with an SLO against real vLLM serving on this CPU (issue 30). `specwatch
run-sweep` launches real vLLM for the baseline and EAGLE-3 on the fixture models and loads each
open-loop at request rates over vLLM's /v1/completions. Every expected value comes from the
arrival schedule (arrivals.rate_offsets), the stored request rows or the fixture's construction
(engine/fixture.expected_histogram), never from specwatch's own views:

- every run ok, no process left; each request was due when the Poisson schedule says and sent
  within a few ms of it (median); the achieved rate is the schedule's within 5%;
- under open-loop load (requests overlapping in vLLM's batches) every EAGLE-3 request still has
  exactly the fixture's acceptance histogram;
- goodput per run is the request rows' count within the limits / the run's duration, and the
  report's JSON has goodput, the max rate under the SLO and the crossover per config.
"""
from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest

from specwatch.engine import fixture
from specwatch.run import arrivals, load, sweepfile

from .conftest import ROOT, SPECWATCH_PY, VLLM_PY
from .test_real_sweep_contract import _left, _sql

pytestmark = pytest.mark.slow
N, RATES, SEED, K = 12, (2.0, 8.0), 0, 3
TTFT_MS, E2E_MS = 2000.0, 8000.0
SWEEP = f"""
name = "vllm-rate"
engine = "vllm"
model = "fixture:tiny-llama"
draft_model = "fixture:tiny-eagle3-vllm"
server_flags = ["--max-model-len", "512", "--enforce-eager"]
request_rate = [{RATES[0]}, {RATES[1]}]
repeats = 2
startup_timeout_s = 300
request_timeout_s = 120

[env]
VLLM_TARGET_DEVICE = "cpu"
VLLM_CPU_KVCACHE_SPACE = "1"
HF_HUB_OFFLINE = "1"
TRANSFORMERS_OFFLINE = "1"

[slo]
ttft_ms = {TTFT_MS}
e2e_ms = {E2E_MS}
percentile = 90

[workload]
prompts = "{ROOT / 'examples' / 'vllm_cpu_prompts.jsonl'}"
num_prompts = {N}
warmup_requests = 1
output_tokens = 32
seed = {SEED}

[[config]]
name = "eagle3-k{K}"
speculative_algorithm = "eagle3"
num_speculative_tokens = {K}
server_flags = ["--per-request-spec-decode-metrics", "summary"]
"""


@pytest.mark.xfail(strict=True, reason="open bug (issue 30): against real vLLM on 2 CPU cores the "
                   "sends fall behind the Poisson schedule cumulatively (lateness 0.3, 0.3, 61, "
                   "118, 175, 287 ms ... at 2/s, median 90 ms): the generator shapes the load "
                   "there; the built-in engine and the fixed-delay server keep it under 6 ms")
def test_a_rate_sweep_on_real_vllm(tmp_path):
    path = tmp_path / "rate.toml"
    path.write_text(textwrap.dedent(SWEEP))
    db = tmp_path / "r.duckdb"
    env = {**os.environ, "SPECWATCH_VLLM_PYTHON": VLLM_PY, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([SPECWATCH_PY, "-m", "specwatch.cli", "run-sweep", str(path), "--db",
                          str(db), "--out-dir", str(tmp_path / "runs"), "--json"], env=env,
                         capture_output=True, text=True, timeout=1500)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert _left(tmp_path) == []
    doc = json.loads(run.stdout)
    runs = _sql(db, "SELECT * FROM runs")
    assert len(runs) == 2 * len(RATES) * 2 and all(r["status"] == "ok" for r in runs)
    reqs = _sql(db, "SELECT r.config_name, r.request_rate, r.repeat_idx, r.duration_s, q.* "
                    "FROM requests q JOIN runs r USING (run_id) WHERE NOT q.is_warmup "
                    "ORDER BY q.run_id, q.request_idx")
    sw = sweepfile.load(path)
    _warm, specs = load.build_requests(sw.workload, load.read_prompts(sw.workload))
    by_run: dict[str, list[dict]] = {}
    for q in reqs:
        by_run.setdefault(q["run_id"], []).append(q)
    for rid, qs in by_run.items():
        rate, rep = qs[0]["request_rate"], qs[0]["repeat_idx"]
        want = arrivals.rate_offsets(N, rate, 1.0, (SEED, rep))
        assert [q["arrival_offset_ms"] for q in qs] == pytest.approx([w * 1000 for w in want])
        late = [q["send_offset_ms"] - q["arrival_offset_ms"] for q in qs]
        assert np.median(late) < 20 and max(late) < 500, late    # a busy 2-core box
        sends = np.sort([q["send_offset_ms"] for q in qs]) / 1000
        # the schedule's own rate (12 Poisson gaps scatter far from the asked one)
        assert (N - 1) / (sends[-1] - sends[0]) == pytest.approx(
            (N - 1) / (want[-1] - want[0]), rel=0.05)
        good = sum(1 for q in qs if q["success"] and q["ttft_ms"] <= TTFT_MS
                   and q["e2e_ms"] <= E2E_MS)
        slo, = _sql(db, f"SELECT * FROM run_slo WHERE run_id = '{rid}'")
        assert slo["good_requests"] == good
        assert slo["goodput_req_s"] == pytest.approx(good / qs[0]["duration_s"])
        if qs[0]["config_name"] == f"eagle3-k{K}":
            for q in qs:
                spec = specs[q["request_idx"]]
                assert q["spec_accept_histogram"] == fixture.expected_histogram(
                    list(spec.prompt.encode()), spec.max_new_tokens, K), (rid, spec.prompt)
    stats = doc["stats"]
    assert {r["config"] for r in stats["max_rate"]} == {"baseline", f"eagle3-k{K}"}
    assert [r["load_kind"] for r in stats["crossover"]] == ["request_rate"]
    assert {(r["config"], r["request_rate"]) for r in stats["slo"]} == {
        (c, rate) for c in ("baseline", f"eagle3-k{K}") for rate in RATES}
