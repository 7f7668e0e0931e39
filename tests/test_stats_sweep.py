"""Verdicts on a real sweep: the README's example sweep (examples/builtin_sweep.toml) on the
built-in engine, run once through the real CLI and shared by every assertion (~2 min on 2 cores).

The statistics themselves are proven on hand-computed data in test_stats.py; here they must hold
on a real sweep, whatever the machine's load while it ran: each verdict is the one its stored
interval decides, each interval is the paired t interval of the runs it summarises (recomputed
here from the stored per-run throughputs), no interval misses its own point estimate, and the
slot-shifted draft accepts clearly fewer tokens than the correct one (greedy decoding: acceptance
does not depend on load, tok/s does). Whether a config pays (on an idle machine the shifted draft
loses and the S=3 chain pays at c=1) is measured by benchmarks/bench_verdict_agreement.py, not
asserted here: on a loaded 2-core box one noisy interval can contain 1.
"""
from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys

import duckdb
import pytest

from conftest import ROOT
from specwatch.db import query

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


def test_every_verdict_is_the_one_its_interval_decides(example):
    n = 0
    for r in example["rows"]:
        if r["verdict"] == "baseline":
            continue
        lo, hi = r["speedup_ci_low"], r["speedup_ci_high"]
        assert lo is not None and hi is not None, r     # 5 repeats, paired with the baseline
        want = "pays" if lo > 1 else "loses" if hi < 1 else "unclear"
        assert r["verdict"] == want, (r["config"], r["concurrency"], lo, hi, r["verdict_reason"])
        assert r["baseline_match"] == "same-sweep"
        n += 1
    assert n == len(example["rows"]) - len(example["sweep"].concurrency)


def test_each_interval_is_the_paired_t_interval_of_its_runs(example):
    """speedup = exp(mean d), interval exp(mean d ∓ t(0.975, n-1) sd(d)/sqrt(n)), with
    d_i = ln(tok/s of the config) - ln(tok/s of the baseline) over the repeats i measured in the
    same interleaved block (same concurrency and repeat index)."""
    from scipy.stats import t
    con = duckdb.connect(str(example["db"]), read_only=True)
    try:
        runs = con.execute("SELECT config_name, is_baseline, concurrency, repeat_idx, output_tok_s "
                           "FROM runs WHERE origin = 'sweep' AND status = 'ok'").fetchall()
    finally:
        con.close()
    base = {(c, i): x for _, b, c, i, x in runs if b}
    checked = 0
    for r in example["rows"]:
        if r["verdict"] == "baseline":
            continue
        d = [math.log(x) - math.log(base[(c, i)])
             for name, b, c, i, x in runs if name == r["config"] and c == r["concurrency"]]
        assert len(d) == example["sweep"].repeats, r
        mean = statistics.fmean(d)
        half = t.ppf(0.975, len(d) - 1) * statistics.stdev(d) / math.sqrt(len(d))
        assert r["speedup_method"] == "paired"
        assert r["speedup"] == pytest.approx(math.exp(mean), rel=1e-9)
        # the table's t quantiles are scipy's to 6e-5 (test_stats.py)
        assert r["speedup_ci_low"] == pytest.approx(math.exp(mean - half), rel=1e-4), r
        assert r["speedup_ci_high"] == pytest.approx(math.exp(mean + half), rel=1e-4), r
        checked += 1
    assert checked == len(example["rows"]) - len(example["sweep"].concurrency)


def test_shifted_draft_accepts_clearly_less_than_the_correct_one(example):
    shifted, correct = (_verdicts(example, c) for c in ("eagle3-s3k1d4-shifted", "eagle3-s3k1d4"))
    assert set(shifted) == set(correct) == set(example["sweep"].concurrency)
    for conc in shifted:
        a, b = shifted[conc]["accept_len"], correct[conc]["accept_len"]
        assert 1 <= a < 0.8 * b, (conc, a, b)


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
