"""Slow end to end against real vLLM serving on this CPU: `specwatch run-sweep
examples/vllm_cpu_sweep.toml` (the README's command) launches real vLLM for the baseline, EAGLE-3
and ngram on the fixture models and stores what vLLM reported. Every expected value comes from
the fixture's construction (engine/fixture.expected_histogram, and for ngram the prompt's cycle),
never from specwatch's measuring code:

- every run ok, no process of the sweep left afterwards;
- EAGLE-3: each request's `metrics.speculative_decoding` histogram (probe, warm-up and measured)
  equals the prediction; the run's /metrics deltas equal the sums of its measured requests'
  predictions; run_metrics.accept_len = 1 + Σ accepted / Σ steps of the predictions;
- ngram: prompts holding a full printable cycle accept every draft, ceil((n−1)/(k+1)) steps of k;
  the others draft nothing;
- the log's `SpecDecoding metrics:` windows (VLLM_LOG_STATS_INTERVAL=1) sum to the server's
  totals over all its requests, and each aux-layer line names the draft's ids as given.
Stop signals: SIGTERM and SIGKILL of specwatch while vLLM serves leave no process behind.
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from specwatch.engine import fixture
from specwatch.run import load, sweepfile

from .conftest import ROOT, SPECWATCH_PY, VLLM_PY

pytestmark = pytest.mark.slow
EXAMPLE = ROOT / "examples" / "vllm_cpu_sweep.toml"
CYCLE = "".join(chr(c) for c in range(32, 127))


def _env(tmp_path: Path) -> dict:
    return {**os.environ, "SPECWATCH_VLLM_PYTHON": VLLM_PY, "PYTHONPATH": str(ROOT),
            "SPECWATCH_TEST_MARK": str(tmp_path)}


def _left(tmp_path: Path) -> list[str]:
    """Live processes started by this test's sweep (their environment names its run dir)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            env = (Path("/proc") / pid / "environ").read_bytes()
            cmd = (Path("/proc") / pid / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if f"SPECWATCH_RUN_DIR={tmp_path}".encode() in env:
            out.append(f"{pid}: {cmd[:160]}")
    return out


def _sql(db: Path, query: str) -> list[dict]:
    out = subprocess.run([SPECWATCH_PY, "-m", "specwatch.cli", "sql", "--db", str(db),
                          "--format", "json", "--max-rows", "100000", query],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _prompts() -> dict[int, load.RequestSpec]:
    """request_idx -> the request the sweep sent (the probe is -len(warm)-1, as measure does)."""
    sw = sweepfile.load(EXAMPLE)
    warm, specs = load.build_requests(sw.workload, load.read_prompts(sw.workload))
    first = min(warm + specs, key=lambda r: len(r.prompt))
    out = {i: s for i, s in enumerate(specs)}
    out.update({-len(warm) + i: s for i, s in enumerate(warm)})
    out[-len(warm) - 1] = load.RequestSpec(first.prompt, min(first.max_new_tokens, 8))
    return out


def test_the_example_sweep_measures_real_vllm_with_the_fixtures_exact_acceptance(tmp_path):
    db, out_dir = tmp_path / "runs.duckdb", tmp_path / "runs"
    t0 = time.monotonic()
    run = subprocess.run([SPECWATCH_PY, "-m", "specwatch.cli", "run-sweep", str(EXAMPLE),
                          "--db", str(db), "--out-dir", str(out_dir)], env=_env(tmp_path),
                         capture_output=True, text=True, timeout=1500)
    took = time.monotonic() - t0
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert _left(tmp_path) == []
    runs = {r["config_name"]: r for r in _sql(db, "SELECT * FROM runs")}
    assert set(runs) == {"baseline", "eagle3-k3", "ngram-k3"}
    assert all(r["status"] == "ok" and r["engine"] == "vllm" for r in runs.values())
    assert runs["baseline"]["spec_drafts"] is None          # no spec counters without spec
    sw = sweepfile.load(EXAMPLE)
    k = 3
    reqs = _sql(db, "SELECT r.config_name, q.* FROM requests q JOIN runs r USING (run_id) "
                    "ORDER BY request_idx")
    prompts = _prompts()

    # EAGLE-3: every request as the fixture predicts, the run's counters the measured sum
    eagle = [q for q in reqs if q["config_name"] == "eagle3-k3"]
    assert len(eagle) == sw.workload.num_prompts + sw.workload.warmup_requests + 1
    steps = accepted = 0
    for q in eagle:
        spec = prompts[q["request_idx"]]
        want = fixture.expected_histogram(list(spec.prompt.encode()), spec.max_new_tokens, k)
        assert q["success"] and q["output_tokens"] == spec.max_new_tokens
        assert q["spec_accept_histogram"] == want, (spec.prompt, q)
        assert q["spec_verify_ct"] == sum(want)
        if not q["is_warmup"]:
            steps += sum(want)
            accepted += sum(j * n for j, n in enumerate(want))
    e = runs["eagle3-k3"]
    assert (e["spec_drafts"], e["spec_accepted_tokens"], e["spec_draft_tokens"]) == (
        steps, accepted, k * steps)
    assert json.loads(e["spec_accepted_per_pos"]) == [accepted, 0, 0]
    metrics = {r["config_name"]: r for r in _sql(db, "SELECT * FROM run_metrics")}
    assert metrics["eagle3-k3"]["accept_len"] == pytest.approx(1 + accepted / steps, abs=1e-12)
    assert metrics["eagle3-k3"]["accept_rate"] == pytest.approx(accepted / (k * steps),
                                                                abs=1e-12)

    # ngram: a prompt holding the whole printable cycle has every draft accepted
    for q in (q for q in reqs if q["config_name"] == "ngram-k3"):
        spec = prompts[q["request_idx"]]
        n = math.ceil((spec.max_new_tokens - 1) / (k + 1))
        want = [0, 0, 0, n] if all(c in spec.prompt for c in CYCLE) else [0] * (k + 1)
        assert q["spec_accept_histogram"] == want, (spec.prompt, q)
    g = runs["ngram-k3"]
    assert g["spec_accepted_tokens"] == g["spec_draft_tokens"] == k * g["spec_drafts"] > 0
    assert metrics["ngram-k3"]["accept_len"] == 1 + k

    # the log's SpecDecoding windows and aux line, cross-checked against the requests
    # (windows are wall-clock intervals: the last one before the server stops may never be
    # printed, so their sum is at most the requests' total; each window's shape is exact)
    win = _sql(db, "SELECT r.config_name, v.accepted_tokens AS acc, v.drafted_tokens AS dr, "
                   "v.per_position_acceptance_rate AS pos FROM vllm_spec_windows v "
                   "JOIN run_sources rs USING (source_id) JOIN runs r USING (run_id)")
    for name in ("eagle3-k3", "ngram-k3"):
        mine = [q for q in reqs if q["config_name"] == name]
        acc = sum(sum(j * n for j, n in enumerate(q["spec_accept_histogram"])) for q in mine)
        ws = [w for w in win if w["config_name"] == name]
        assert ws and 0 < sum(w["acc"] for w in ws) <= acc, (name, ws, acc)
        for w in ws:
            if name == "ngram-k3":       # every draft accepted, at every position
                assert w["acc"] == w["dr"] and w["pos"] == [1.0] * k, w
            else:                        # only the first draft position is ever accepted
                assert w["pos"][1:] == [0.0] * (k - 1) and w["acc"] * k <= w["dr"], w
    log = next((out_dir / "vllm-cpu" / "eagle3-k3").glob("server-*.log")).read_text()
    assert "Using auxiliary layers from speculative config: (0, 1, 2)" in log
    print(f"example sweep on real vLLM: {took:.0f} s")


def _start(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    out_dir = tmp_path / "runs"
    p = subprocess.Popen([SPECWATCH_PY, "-m", "specwatch.cli", "run-sweep", str(EXAMPLE),
                          "--db", str(tmp_path / "db.duckdb"), "--out-dir", str(out_dir)],
                         env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:      # until a vLLM server of the sweep serves /health
        logs = list(out_dir.glob("vllm-cpu/*/server-*.log"))
        if logs and any("Application startup complete" in f.read_text(errors="replace")
                        for f in logs):
            return p, out_dir
        assert p.poll() is None, p.stdout.read().decode()[-3000:]
        time.sleep(1)
    p.kill()
    raise AssertionError("no vLLM server became ready within 600 s")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_no_vllm_process_outlives_specwatch_whatever_signal_arrives(tmp_path, sig):
    p, _ = _start(tmp_path)
    assert _left(tmp_path), "the sweep's vLLM server should be running now"
    os.kill(p.pid, sig)
    try:
        rc = p.wait(timeout=120)
    finally:
        p.stdout.close()
    if sig == signal.SIGTERM:
        assert rc == 130
    deadline = time.monotonic() + 60           # SIGKILL: the watchdog stops the group
    while _left(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _left(tmp_path) == []
