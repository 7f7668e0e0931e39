"""`specwatch recommend --verify` on the built-in engine: real servers, real HTTP, a real DuckDB.

The sweep's own runs are stored as known rows (so the schedule is known: k=3 alone, off from 2
requests up); the verification then measures for real: the baseline, each load's fastest single
config and the schedule, served by --speculative-adaptive with the file recommend wrote."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from specwatch.db import store

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow            # ~40-90 s on 2 cores: 3 servers, 12 runs

SWEEP = """
name = "v"
engine = "builtin"
model = "builtin:target"
draft_model = "builtin:draft-eagle3"
server_flags = ["--decode-log-interval", "2"]
concurrency = [1, 4]
repeats = 2
env = {OMP_NUM_THREADS = "1"}

[workload]
prompts = "builtin:mixed"
num_prompts = 6
warmup_requests = 1
output_tokens = 16
temperature = 0.0

[[config]]
name = "s1"
speculative_num_steps = 1
speculative_eagle_topk = 1

[[config]]
name = "s3"
speculative_num_steps = 3
speculative_eagle_topk = 1
"""
DRAFT = str(ROOT / "specwatch" / "engine" / "models" / "draft-eagle3")
# (config, concurrency): tok/s per repeat. c=1: s3 1.6x the baseline and 1.23x s1 in every repeat
# (significant); c=4: the baseline 1.33x / 2x ahead in every repeat.
STORED = {("baseline", 1): [100, 110], ("s1", 1): [130, 143], ("s3", 1): [160, 176],
          ("baseline", 4): [400, 440], ("s1", 4): [300, 330], ("s3", 4): [200, 220]}


def _leftovers(tmp: Path) -> list[int]:
    out = []
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = open(f"/proc/{p}/environ", "rb").read()
        except OSError:
            continue
        if f"SPECWATCH_RUN_DIR={tmp}".encode() in env:
            out.append(int(p))
    return out


def _store_sweep(db: Path) -> None:
    with store.writer(db) as con:
        for (cfg, c), xs in STORED.items():
            steps = None if cfg == "baseline" else int(cfg[1])
            for rep, x in enumerate(xs):
                store.upsert_run(con, dict(
                    run_id=f"v/{cfg}/c{c}/r{rep}", run_name=f"{cfg}/c{c}/r{rep}", origin="sweep",
                    sweep_name="v", config_name=cfg, concurrency=c, repeat_idx=rep, status="ok",
                    engine="builtin", model_path="builtin:target", tp_size=1, dp_size=1,
                    is_baseline=steps is None, draft_model_path=None if steps is None else DRAFT,
                    speculative_algorithm=None if steps is None else "EAGLE3",
                    speculative_num_steps=steps, speculative_eagle_topk=steps and 1,
                    speculative_num_draft_tokens=steps and steps + 1,
                    aux_layer_ids=None if steps is None else "[1, 3, 5]", output_tok_s=float(x),
                    sampling_fingerprint="stored", created_at=dt.datetime(2026, 12, 1, 10, rep)))


def _verify(tmp: Path, db: Path) -> tuple[int, dict]:
    out = subprocess.run([sys.executable, "-m", "specwatch.cli", "recommend", "--db", str(db),
                          "--verify", str(tmp / "v.toml"), "--out-dir", str(tmp / "runs"),
                          "--format", "json"], capture_output=True, text=True, cwd=ROOT,
                         timeout=600)
    assert out.returncode in (0, 1), out.stderr[-3000:]
    return out.returncode, json.loads(out.stdout)


def test_verify_measures_the_schedule_at_every_load_against_the_best_single_config(tmp_path):
    (tmp_path / "v.toml").write_text(textwrap.dedent(SWEEP))
    db = tmp_path / "v.duckdb"
    _store_sweep(db)
    rc, rep = _verify(tmp_path, db)
    schedule = {"1": {"candidate_steps": [3]}, "2": {"candidate_steps": [0]}}
    assert rep["recommendation"]["schedule"] == schedule
    assert rep["verify_sweep"] == "v-verify" and rep["schedule_config"].startswith("schedule-")
    assert json.loads(Path(rep["schedule_file"]).read_text()) == schedule
    # every load: the schedule against the fastest single config measured there, with intervals
    assert [lc["concurrency"] for lc in rep["loads"]] == [1, 4]
    for lc in rep["loads"]:
        assert lc["best_config"] in ("baseline", "s3")
        assert lc["ratio_method"] == "paired" and lc["ratio_ci_low"] <= lc["ratio"] <= lc["ratio_ci_high"]
        assert lc["verdict"] in ("better", "as good", "worse")
        assert lc["verdict"] == ("better" if lc["ratio_ci_low"] > 1 else "worse"
                                 if lc["ratio_ci_high"] < 1 else "as good")
    worse = any(lc["verdict"] == "worse" for lc in rep["loads"])
    assert rep["at_least_as_good"] is (not worse) and rc == (1 if worse else 0)
    con = duckdb.connect(str(db), read_only=True)
    try:
        got = con.execute("SELECT config_name, concurrency, count(*) FROM runs WHERE sweep_name = "
                          "'v-verify' AND status = 'ok' GROUP BY ALL ORDER BY ALL").fetchall()
        logs = [r[0] for r in con.execute(
            "SELECT DISTINCT s.path FROM sources s JOIN run_sources rs USING (source_id) "
            "WHERE rs.run_id LIKE 'v-verify/schedule-%'").fetchall()]
    finally:
        con.close()
    # the baseline and s3 (the fastest stored single configs) and the schedule, 2 repeats each
    assert got == sorted((n, c, 2) for n in ["baseline", rep["schedule_config"], "s3"]
                         for c in (1, 4))
    text = "".join(Path(p).read_text() for p in logs)
    assert "AdaptiveSpeculativeParams initialized: steps=3, candidate_steps=[3]" in text
    assert "speculative_adaptive': True" in text
    # the schedule served both depths: k=3 lines alone, root-only lines at 4 requests
    assert "#running-req: 4, " in text and "accept len: 1.00" in text
    assert _leftovers(tmp_path) == []
    # again: the same schedule resumes, nothing is measured twice
    rc2, rep2 = _verify(tmp_path, db)
    assert rep2["schedule_config"] == rep["schedule_config"] and rep2["loads"] == rep["loads"]
