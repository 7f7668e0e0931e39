"""/metrics samples with run scope (issue 32): what a run stores, the counter deltas view, the GPU
energy columns, and attach mode without a log reading its acceptance from the counters.

The sweeps are real: built-in engines on 127.0.0.1 with --enable-metrics, the real DuckDB file.
The view and energy tests build their cases by class (label set born mid-run, counter reset,
several label sets and endpoints; energy by counter, by power samples, unmeasured) and check
against numbers worked out here by hand, not by the code under test.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys

import pytest

from test_sweep_attach import start_server
from test_sweep_e2e import ROOT, leftovers, quiet, rows

from specwatch.db import store
from specwatch.run import energy, launch, sampler, sweep, sweepfile
from specwatch.run.prom import Sample

SWEEP = """\
name = "{name}"
model = "builtin:target"
draft_model = "builtin:draft-eagle3"
server_flags = ["--decode-log-interval", "4"{flags}]
concurrency = [2]
repeats = 2
env = {{OMP_NUM_THREADS = "1"}}

[workload]
prompts = "builtin:chat"
num_prompts = 6
warmup_requests = 1
output_tokens = 24

[[config]]
name = "eagle3-s3"
speculative_num_steps = 3
speculative_eagle_topk = 1
"""

T0 = dt.datetime(2026, 12, 1, 12, 0, 0)


def _sample(run, name, value, sec, labels=None, endpoint="http://127.0.0.1:1"):
    return {"run_id": run, "endpoint": endpoint, "sampled_at": T0 + dt.timedelta(seconds=sec),
            "t_s": float(sec), "name": name, "labels": json.dumps(labels or {}, sort_keys=True),
            "value": float(value)}


# (case, samples, expected {name: delta} for run "r"; None = NULL)
DELTA_CASES = [
    ("one label set", [_sample("r", "a_total", 10, 0), _sample("r", "a_total", 12, 1),
                       _sample("r", "a_total", 17, 2)], {"a_total": 7.0}),
    ("label sets summed", [_sample("r", "a_total", 5, 0, {"x": "1"}), _sample("r", "a_total", 1, 0, {"x": "2"}),
                           _sample("r", "a_total", 9, 3, {"x": "1"}), _sample("r", "a_total", 4, 3, {"x": "2"})],
     {"a_total": 7.0}),
    # a labelled child appears at its first increment: absent from the first scrape, it started at 0
    ("label set born during the load", [_sample("r", "a_total", 3, 0, {"s": "false"}),
                                        _sample("r", "a_total", 3, 2, {"s": "false"}),
                                        _sample("r", "a_total", 6, 2, {"s": "true"})],
     {"a_total": 6.0}),
    ("counter reset (server restarted)", [_sample("r", "a_total", 50, 0), _sample("r", "a_total", 2, 1)],
     {"a_total": None}),
    ("gauges are not counters", [_sample("r", "sglang:spec_accept_length", 2.5, 0),
                                 _sample("r", "sglang:spec_accept_length", 3.0, 1)], {}),
    ("two endpoints, each from its own first scrape",
     [_sample("r", "a_total", 1, 0, endpoint="e1"), _sample("r", "a_total", 4, 2, endpoint="e1"),
      _sample("r", "b_total", 0, 0, endpoint="e1"),
      _sample("r", "a_total", 8, 1, endpoint="e2"), _sample("r", "a_total", 10, 3, endpoint="e2")],
     {"a_total": 5.0, "b_total": 0.0}),
]


@pytest.mark.parametrize("case,samples,want", DELTA_CASES, ids=[c[0] for c in DELTA_CASES])
def test_run_metric_deltas(tmp_path, case, samples, want):
    db = tmp_path / "d.duckdb"
    other = [_sample("other", "a_total", 100, 0), _sample("other", "a_total", 1000, 5)]
    with store.writer(db) as con:
        store.insert(con, "metric_samples", {k: [s[k] for s in samples + other] for k in samples[0]})
    got = {r["name"]: r["delta"] for r in rows(
        db, "SELECT name, delta FROM run_metric_deltas WHERE run_id = 'r'")}
    assert got == want


def test_sglang_accept_len_from_counters_only_without_windows(tmp_path):
    """run_metrics takes Δgeneration tokens / Δverify calls only when nothing better exists."""
    db = tmp_path / "d.duckdb"
    s = [_sample(r, n, v, t) for r, n, v, t in (
        ("spec", "sglang:generation_tokens_total", 100, 0), ("spec", "sglang:generation_tokens_total", 400, 5),
        ("spec", "sglang:spec_verify_calls_total", 20, 0), ("spec", "sglang:spec_verify_calls_total", 140, 5),
        ("base", "sglang:generation_tokens_total", 0, 0), ("base", "sglang:generation_tokens_total", 90, 5),
        ("base", "sglang:spec_verify_calls_total", 0, 0), ("base", "sglang:spec_verify_calls_total", 0, 5))]
    with store.writer(db) as con:
        for rid, algo in (("spec", "EAGLE3"), ("base", None)):
            store.upsert_run(con, {"run_id": rid, "run_name": rid, "origin": "sweep",
                                   "speculative_algorithm": algo, "status": "ok"})
        store.insert(con, "metric_samples", {k: [x[k] for x in s] for k in s[0]})
    got = {r["run_id"]: r["accept_len"] for r in rows(db, "SELECT run_id, accept_len FROM run_metrics")}
    assert got == {"spec": 300 / 120, "base": None}


ENERGY_CASES = [
    # (case, RunEnergy, expected columns)
    ("counter, two GPUs", energy.RunEnergy([0, 3], [1_000, 50_000], [6_000, 80_000], []),
     {"gpu_energy_j": 35.0, "gpu_energy_gpus": "[0, 3]", "gpu_energy_method": "nvml_energy_counter"}),
    ("no counter: trapezoid over power samples",
     energy.RunEnergy([1], [None], [None], [(0.0, [100.0]), (1.0, [300.0]), (3.0, [300.0])]),
     {"gpu_energy_j": 200.0 + 600.0, "gpu_energy_gpus": "[1]", "gpu_energy_method": "nvml_power_samples"}),
    ("counter went backwards: power samples instead",
     energy.RunEnergy([0], [9_000], [1_000], [(0.0, [50.0]), (2.0, [50.0])]),
     {"gpu_energy_j": 100.0, "gpu_energy_gpus": "[0]", "gpu_energy_method": "nvml_power_samples"}),
    ("one power sample only: NULL", energy.RunEnergy([0], [None], [None], [(0.0, [80.0])]),
     {"gpu_energy_j": None, "gpu_energy_gpus": None, "gpu_energy_method": None}),
    ("no GPU", energy.RunEnergy([], [], [], []),
     {"gpu_energy_j": None, "gpu_energy_gpus": None, "gpu_energy_method": None}),
]


@pytest.mark.parametrize("case,e,want", ENERGY_CASES, ids=[c[0] for c in ENERGY_CASES])
def test_run_energy_columns(case, e, want):
    assert e.columns() == want


@pytest.mark.parametrize("gpus,env,want", [
    (None, {}, None),                                          # every GPU of the host
    (None, {"CUDA_VISIBLE_DEVICES": "2,5"}, ["2", "5"]),
    ([1], {"CUDA_VISIBLE_DEVICES": "2,5"}, ["5"]),             # relative to what we see
    ([0, 1], {}, ["0", "1"]),
    ([0], {"CUDA_VISIBLE_DEVICES": "GPU-1a2b, GPU-3c4d"}, ["GPU-1a2b"]),
    ([4], {"CUDA_VISIBLE_DEVICES": "0,1"}, []),                # not visible: nothing measured
])
def test_nvml_targets(gpus, env, want):
    assert energy.nvml_targets(gpus, env) == want


def test_no_nvidia_driver_means_no_energy():
    """This machine has no NVIDIA driver: NVML does not open, so energy stays NULL."""
    if os.path.exists("/proc/driver/nvidia"):
        pytest.skip("an NVIDIA driver is present")
    assert energy.Gpus.open() is None


def test_kept_samples_are_engine_metrics_without_buckets():
    page = [Sample("sglang:spec_accept_length", (("model_name", "m"),), 2.0),
            Sample("sglang:e2e_request_latency_seconds_bucket", (("le", "1"),), 3.0),
            Sample("sglang:generation_tokens_created", (), 1.7e9),
            Sample("process_cpu_seconds_total", (), 4.0),
            Sample("vllm:spec_decode_num_drafts_total", (("engine", "0"),), 9.0)]
    got = sampler.rows_of(page, "http://127.0.0.1:9", T0, 1.5)
    assert [(r["name"], r["labels"], r["value"]) for r in got] == [
        ("sglang:spec_accept_length", '{"model_name": "m"}', 2.0),
        ("vllm:spec_decode_num_drafts_total", '{"engine": "0"}', 9.0)]


@pytest.mark.slow  # two sweeps and a deployed server: ~25 s on 2 cores
def test_runs_store_their_metrics_and_attach_without_log_reads_acceptance(tmp_path):
    p = tmp_path / "m.toml"
    p.write_text(SWEEP.format(name="m", flags=', "--enable-metrics"'))
    s = sweepfile.load(p)
    db = tmp_path / "m.duckdb"
    sweep.run_sweep(s, str(db), str(tmp_path / "runs"), progress=quiet())
    assert leftovers(tmp_path) == []
    runs = rows(db, "SELECT run_id, is_baseline, status, gpu_energy_j FROM runs")
    assert len(runs) == 4 and all(r["status"] == "ok" for r in runs)
    assert all(r["gpu_energy_j"] is None for r in runs)         # no NVML here: NULL
    for r in runs:
        n = rows(db, """SELECT count(DISTINCT sampled_at) AS scrapes, min(t_s) AS t0 FROM metric_samples
                        WHERE run_id = ? AND name = 'sglang:spec_accept_length'""", [r["run_id"]])[0]
        assert n["scrapes"] >= 2 and n["t0"] < 0.5, r           # at the load's start and end
        # the counters moved by exactly what the run's own measured requests report
        want = rows(db, """SELECT sum(output_tokens) AS gen, sum(spec_verify_ct) AS verify
                           FROM requests WHERE run_id = ? AND NOT coalesce(is_warmup, false)""",
                    [r["run_id"]])[0]
        got = {d["name"]: d["delta"] for d in rows(
            db, "SELECT name, delta FROM run_metric_deltas WHERE run_id = ?", [r["run_id"]])}
        assert got["sglang:generation_tokens_total"] == want["gen"]
        assert got["sglang:spec_verify_calls_total"] == (0 if r["is_baseline"] else want["verify"])

    # attach mode, no log: acceptance from the counter deltas, equal to the requests' own
    cfg = next(c for c in s.configs if not c.is_baseline)
    port = launch.free_port()
    server = start_server(cfg, tmp_path / "deployed.log", port)      # --enable-metrics too
    try:
        nolog = tmp_path / "nolog.duckdb"
        proc = subprocess.run(
            [sys.executable, "-m", "specwatch.cli", "run-sweep", str(p), "--db", str(nolog),
             "--out-dir", str(tmp_path / "runs-a"), "--endpoint", f"http://127.0.0.1:{port}"],
            cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
    finally:
        server.terminate()
        server.wait(30)
    got = rows(nolog, """SELECT m.run_id, m.accept_len, m.windows, r.client_accept_len
                         FROM run_metrics m JOIN runs r USING (run_id)""")
    assert len(got) == 2 and rows(nolog, "SELECT count(*) AS n FROM run_sources")[0]["n"] == 0
    for g in got:
        assert g["windows"] == 0 and g["accept_len"] > 1.0
        assert g["accept_len"] == pytest.approx(g["client_accept_len"], rel=1e-12), g


def test_a_server_without_metrics_stores_no_samples(tmp_path):
    """SGLang without --enable-metrics has no /metrics page: one failed scrape, no rows."""
    cfg = next(c for c in sweepfile.loads(SWEEP.format(name="x", flags="")).configs
               if not c.is_baseline)
    port = launch.free_port()
    server = start_server(cfg, tmp_path / "s.log", port)
    try:
        samp = sampler.RunSampler(port, f"http://127.0.0.1:{port}", every_s=0.05).start()
        got = samp.stop()
    finally:
        server.terminate()
        server.wait(30)
    assert got.rows == [] and "HTTP 404" in got.metrics_error
