"""Simulated acceptance (issue 15): runs with SGLANG_SIMULATE_ACC_LEN or vLLM's synthetic
rejection sampling are tagged `simulated` and never compared with real-acceptance runs.

Real log files on disk, a real DuckDB file, the real CLI; the last test runs a real sweep on the
built-in engine (which does not itself honour SGLANG_SIMULATE_ACC_LEN: the tag must come from the
launch line specwatch writes into the server log).
"""
from __future__ import annotations

import io
import json
from pathlib import Path

from conftest import SAMPLES, run_cli
from specwatch.logs import ingest, parse
from specwatch.run import launch, sweep, sweepfile
from specwatch.db import query

BASE = SAMPLES / "sglang-0.5.23-llama8b-baseline.log"
REAL = SAMPLES / "sglang-0.5.23-llama8b-eagle3-s3k1.log"
SPEC = SAMPLES / "sglang-0.5.23-llama8b-eagle3-s5k4.log"   # same model as BASE and REAL


def _launched(tmp: Path, name: str, src: Path, env: dict[str, str]) -> Path:
    """`src` as a server log whose server specwatch launched with `env`."""
    p = tmp / name
    p.write_text("specwatch: launching " + launch.launch_line(
        ["python", "-m", "sglang.launch_server", "--model-path", "/m"], env) + "\n"
        + src.read_text())
    return p


def _stats(db) -> dict[str, dict]:
    return {r["config"]: r for r in query.run_sql(db, "SELECT * FROM config_stats").dicts()}


def test_launch_line_names_sglang_and_vllm_env_quoted_and_parses_as_simulated():
    env = {"PATH": "/bin", "SGLANG_SIMULATE_ACC_LEN": "3.5", "VLLM_LOGGING_LEVEL": "INFO",
           "SGLANG_LOG_MS": "1", "VLLM_API_KEY": "s3cret", "OMP_NUM_THREADS": "1",
           "SGLANG_X": "a b\nDecode batch, #running-req: 1"}
    line = launch.launch_line(["python", "-m", "sglang.launch_server"], env)
    assert line.startswith("env SGLANG_LOG_MS=1 SGLANG_SIMULATE_ACC_LEN=3.5 "), line
    assert "PATH=" not in line and "OMP_NUM_THREADS" not in line
    assert "s3cret" not in line and "'VLLM_API_KEY=<hidden>'" in line
    assert "\n" not in line and r"$'SGLANG_X=a b\nDecode batch" in line   # no forged line
    assert line.endswith("VLLM_LOGGING_LEVEL=INFO python -m sglang.launch_server")
    rec = parse.parse_line("specwatch: launching " + line)
    assert rec.kind == "simulated" and rec.fields["simulate_acc_len"] == 3.5
    # without simulation the line is what it was, and no event
    plain = launch.launch_line(["python", "-m", "x"], {"PATH": "/bin"})
    assert plain == "python -m x"
    off = launch.launch_line(["python"], {"SGLANG_SIMULATE_ACC_LEN": "-1"})
    assert parse.parse_line("specwatch: launching " + off) is None
    # a quoted value (spaces) still names its number, as SGLang's float() reads it
    q = launch.launch_line(["python"], {"SGLANG_SIMULATE_ACC_LEN": "2.5 "})
    assert parse.parse_line("specwatch: launching " + q).fields["simulate_acc_len"] == 2.5


def test_simulated_run_is_never_compared_with_a_real_baseline(db, tmp_path, monkeypatch):
    sim = _launched(tmp_path, "sim-spec.log", SPEC, {"SGLANG_SIMULATE_ACC_LEN": "3"})
    for p in (BASE, REAL, sim):
        ingest.ingest_paths(db, [str(p)])
    m = {r["run_id"]: r for r in query.run_sql(db, "SELECT * FROM run_metrics").dicts()}
    assert [m[k]["simulated"] for k in (BASE.name, REAL.name, "sim-spec.log")] == \
        [False, False, True]
    st = _stats(db)
    s, r = st["sim-spec.log"], st[REAL.name]
    assert s["simulated"] and s["baseline_match"] == "simulated-vs-real"
    assert s["baseline_group_id"] is None and s["differing_baseline_group_id"] is not None
    assert s["speedup"] is None and s["speedup_ci_low"] is None and s["verdict"] == "unclear"
    assert s["verdict_reason"].startswith("not compared: this config's acceptance is simulated")
    # per-run speedups too (config_summary)
    cs = query.run_sql(db, "SELECT speedup_gen, baseline_run_id FROM config_summary "
                           "WHERE run_id = 'sim-spec.log'").dicts()
    assert cs == [{"speedup_gen": None, "baseline_run_id": None}]
    # the real run still compares with the real baseline: 1907.56 / 1008.78 gen tok/s (the
    # logs' own means, run_metrics) = 1.891
    assert not r["simulated"] and r["baseline_group_id"] == f"{BASE.name}@0"
    assert abs(r["speedup"] - 1907.5583 / 1008.7796) < 1e-3
    # the report marks the accept length and says why; on a narrow terminal, where the accept
    # length column is left out, the mark moves to the config name
    monkeypatch.setenv("COLUMNS", "200")
    out = run_cli("report", "--db", db).stdout
    row = next(line for line in out.splitlines() if line.startswith("sim-spec.log"))
    assert "3.56 sim" in row and "†" in row, out
    monkeypatch.setenv("COLUMNS", "80")
    narrow = run_cli("report", "--db", db).stdout.splitlines()
    head = next(line for line in narrow if line.startswith("config"))
    assert "accept len" not in head and "verdict" in head, narrow
    assert any(line.startswith("sim-spec.log † sim ") for line in narrow), narrow
    assert "sim-spec.log: not compared: its acceptance is simulated" in out
    assert "sim: simulated acceptance" in out
    # a baseline launched with the same simulation: now it is compared, with that one only
    ingest.ingest_paths(db, [str(_launched(tmp_path, "sim-base.log", BASE,
                                           {"SGLANG_SIMULATE_ACC_LEN": "3"}))])
    st = _stats(db)
    s, r = st["sim-spec.log"], st[REAL.name]
    assert s["baseline_group_id"].startswith("sim-base.log@") and s["speedup"] is not None
    assert s["baseline_match"].split("+")[0] == "other-log"
    assert r["baseline_group_id"] == f"{BASE.name}@0"           # real stays with real


def test_real_run_whose_only_baseline_is_simulated_is_not_compared(db, tmp_path):
    ingest.ingest_paths(db, [str(_launched(tmp_path, "sim-base.log", BASE,
                                           {"SGLANG_SIMULATE_ACC_LEN": "2.5"}))])
    ingest.ingest_paths(db, [str(REAL)])
    r = _stats(db)[REAL.name]
    assert r["baseline_match"] == "real-vs-simulated" and r["speedup"] is None
    assert r["verdict_reason"].startswith("not compared: the only baseline ran with simulated")


def test_a_later_server_start_without_simulation_is_not_tagged(db, tmp_path):
    """One log, two server starts: the simulated launch tags only the server_args line after it."""
    log = tmp_path / "two.log"
    log.write_text(_launched(tmp_path, "a.log", SPEC, {"SGLANG_SIMULATE_ACC_LEN": "3"})
                   .read_text() + "specwatch: launching python -m sglang.launch_server\n"
                   + REAL.read_text())
    ingest.ingest_paths(db, [str(log)])
    got = query.run_sql(db, "SELECT simulated, accept_len FROM run_metrics "
                            "ORDER BY config_offset").rows
    assert [g[0] for g in got] == [True, False], got
    assert abs(got[1][1] - 2.8957) < 1e-3    # REAL's accept length: the second start's windows


def test_vllm_synthetic_rejection_sampling_is_simulated(db, tmp_path):
    lines = SAMPLES.joinpath("vllm-0.11-eagle3.log").read_text().splitlines()
    args = [i for i, x in enumerate(lines) if "non-default args:" in x]
    assert len(args) == 1
    lines[args[0]] = lines[args[0]].replace(
        "'num_speculative_tokens': 3}", "'num_speculative_tokens': 3, "
        "'rejection_sample_method': 'synthetic', 'synthetic_acceptance_length': 3.0}")
    log = tmp_path / "vllm-synthetic.log"
    log.write_text("\n".join(lines) + "\n")
    ingest.ingest_paths(db, [str(log), str(SAMPLES / "vllm-0.11-eagle3.log")])
    m = {r["run_id"]: r["simulated"] for r in query.run_sql(
        db, "SELECT run_id, simulated FROM run_metrics").dicts()}
    assert m == {"vllm-synthetic.log": True, "vllm-0.11-eagle3.log": False}


def _sweep_file(tmp: Path, env: str) -> sweepfile.Sweep:
    (tmp / "prompts.jsonl").write_text("".join(
        json.dumps({"prompt": p}) + "\n" for p in ["def add(a, b):\n", "What is 2 + 2?"]))
    p = tmp / "sim.toml"
    p.write_text(f"""\
name = "sim"
model = "builtin:target"
draft_model = "builtin:draft-eagle3"
server_flags = ["--decode-log-interval", "2", "--context-length", "160"]
concurrency = [1]
startup_timeout_s = 120
stop_grace_s = 5
env = {{OMP_NUM_THREADS = "1", {env}}}

[workload]
prompts = "prompts.jsonl"
num_prompts = 2
warmup_requests = 0
output_tokens = 8

[[config]]
name = "eagle3"
speculative_num_steps = 2
speculative_eagle_topk = 1
speculative_num_draft_tokens = 3
""")
    return sweepfile.load(p)


def test_sweep_with_simulate_env_on_the_builtin_engine_is_tagged(db, tmp_path):
    s = _sweep_file(tmp_path, 'SGLANG_SIMULATE_ACC_LEN = "3"')
    res = sweep.run_sweep(s, str(db), str(tmp_path / "runs"),
                          progress=sweep.Progress(stream=io.StringIO(), tty=False))
    assert {o.config: o.status for o in res.outcomes} == {"baseline": "ok", "eagle3": "ok"}
    logs = sorted((tmp_path / "runs").rglob("*.log"))
    assert logs and all("specwatch: launching env " in p.read_text() and
                        "SGLANG_SIMULATE_ACC_LEN=3 " in p.read_text() for p in logs), logs
    m = query.run_sql(db, "SELECT config_name, simulated FROM run_metrics").rows
    assert sorted(m) == [("baseline", True), ("eagle3", True)]
    st = _stats(db)
    # simulated alike: compared within the sweep, and the winners row says it is simulated
    assert st["eagle3"]["simulated"] and st["eagle3"]["baseline_match"] == "same-sweep"
    w = query.run_sql(db, "SELECT simulated FROM concurrency_winners").rows
    assert w == [(True,)]
    out = run_cli("report", "--db", db).stdout
    assert "c=1 (simulated acceptance):" in out and " sim " in out, out
