"""Verdicts on a real sweep: the README's example sweep (examples/builtin_sweep.toml) on the
built-in engine, run once through the real CLI and shared by every assertion (~2 min on 2 cores).

The statistics themselves are proven on hand-computed data in test_stats.py; here they must say
what the engine really does: the slot-shifted draft loses everywhere, the correct S=3 chain pays
at batch size 1, and no interval misses its own point estimate.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from specwatch.db import query
from specwatch.run import sweepfile

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def example(example_sweep):
    rep = query.stats_report(example_sweep["db"])
    return {"db": example_sweep["db"], "table": example_sweep["stdout"],
            "rows": rep.configs.dicts(), "winners": rep.winners.dicts(),
            "sweep": example_sweep["sweep"]}


def _verdicts(example, config):
    return {r["concurrency"]: r for r in example["rows"] if r["config"] == config}


def test_example_runs_repeats(example):
    assert example["sweep"].repeats >= 3, "the example sweep must measure 3 repeats"
    for r in example["rows"]:
        assert r["repeats"] == example["sweep"].repeats, r


def test_shifted_loses_at_every_concurrency(example):
    got = _verdicts(example, "eagle3-s3k1d4-shifted")
    assert set(got) == set(example["sweep"].concurrency)
    for conc, r in got.items():
        assert r["verdict"] == "loses", (conc, r["speedup"], r["speedup_ci_low"],
                                         r["speedup_ci_high"], r["verdict_reason"])
        assert r["baseline_match"] == "same-sweep"


def test_s3_chain_pays_at_concurrency_1(example):
    r = _verdicts(example, "eagle3-s3k1d4")[1]
    assert r["verdict"] == "pays", (r["speedup"], r["speedup_ci_low"], r["speedup_ci_high"])


def test_every_interval_contains_its_point_estimate(example):
    n = 0
    for r in example["rows"]:
        if r["speedup_ci_low"] is not None:
            assert r["speedup_ci_low"] <= r["speedup"] <= r["speedup_ci_high"], r
            n += 1
        if r["output_tok_s_ci_low"] is not None:
            assert r["output_tok_s_ci_low"] <= r["output_tok_s_mean"] <= r["output_tok_s_ci_high"]
    assert n == len(example["rows"])      # every config, the baseline included, has one
    # greedy decoding of the same prompts: the accept length barely moves between repeats
    for r in example["rows"]:
        if r["accept_len_sd"] is not None:
            assert r["accept_len_sd"] < 0.05 * r["accept_len"], r


def test_final_table_fits_120_columns_and_names_winners(example):
    lines = example["table"].splitlines()
    assert lines and max(len(ln) for ln in lines) <= 120
    for conc in example["sweep"].concurrency:
        assert any(ln.startswith(f"c={conc}: ") for ln in lines), lines
    # every config has its row, with a verdict word at the end
    for cfg in {r["config"] for r in example["rows"]}:
        assert any(ln.split()[:1] == [cfg] and ln.split()[-1] in (
            "pays", "loses", "unclear", "baseline", "failed") for ln in lines), (cfg, lines)
    wide = subprocess.run([sys.executable, "-m", "specwatch.cli", "report", "--db",
                           str(example["db"]), "--wide"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=True).stdout
    assert all(c in wide.splitlines()[0] for c in query.STATS_COLUMNS)
    doc = json.loads(subprocess.run(
        [sys.executable, "-m", "specwatch.cli", "report", "--db", str(example["db"]), "--format",
         "json"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True).stdout)
    assert {w["concurrency"] for w in doc["concurrency"]} == set(example["sweep"].concurrency)
