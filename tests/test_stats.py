"""Statistics over repeats, baseline matching, verdicts and winners (stats.config_stats,
concurrency_winners) on a real DuckDB file with known data; and `specwatch report` as a person
reads it (terminal width, --wide, --format json/csv) through the real CLI.

Every expected number below is computed by hand from the inputs (the arithmetic is in the
comments), not by the code under test. t quantiles: t(0.975, 2) = 4.3027, t(0.975, 4) = 2.7764.
Logs are natural logs.
"""
from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
import os
import subprocess
import sys

import pytest

from conftest import ROOT, SAMPLES
from specwatch.logs import ingest
from specwatch.db import query, sampling, store
from specwatch.db import stats as stat_views
from specwatch.run import sweepfile

MODEL = "/models/Llama-3.1-8B-Instruct"       # the sample server_args lines' model
SPEC_ARGS = (SAMPLES / "sglang-0.5.23-llama8b-eagle3-wrong-aux-ids.log").read_text().splitlines()[0]
WL = sweepfile.Workload(prompts="builtin:mixed", format="jsonl", num_prompts=20,
                        warmup_requests=2, output_tokens=sweepfile.Length(64, 64),
                        input_chars=None, temperature=0.0, seed=0)
FP = sampling.sampling_fingerprint(WL)
FP_HOT = sampling.sampling_fingerprint(sweepfile.Workload(**{**WL.__dict__, "temperature": 0.7}))
T0 = dt.datetime(2026, 11, 20, 10, 0, 0)


def _run(con, sweep, config, conc, rep, tok_s, spec=True, fp=FP, **extra):
    row = dict(run_id=f"{sweep}/{config}/c{conc}/r{rep}", run_name=f"{config}/c{conc}/r{rep}",
               origin="sweep", sweep_name=sweep, config_name=config, concurrency=conc,
               repeat_idx=rep, status="ok", model_path=MODEL, tp_size=1, dp_size=1,
               is_baseline=not spec, speculative_algorithm="EAGLE3" if spec else None,
               speculative_num_steps=3 if spec else None, speculative_eagle_topk=1 if spec else None,
               speculative_num_draft_tokens=4 if spec else None, output_tok_s=tok_s,
               sampling_fingerprint=fp, created_at=T0)
    row.update(extra)
    store.upsert_run(con, row)
    return row["run_id"]


def _decode_line(ts: dt.datetime, al: float) -> str:
    return (f"[{ts:%Y-%m-%d %H:%M:%S}] Decode batch, #running-req: 1, #token: 4000, "
            f"token usage: 0.01, accept len: {al:.2f}, accept rate: {(al - 1) / 3:.2f}, "
            f"cuda graph: True, gen throughput (token/s): 100.00, #queue-req: 0")


@pytest.fixture(scope="module")
def known_db(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stats")
    db = tmp / "stats.duckdb"
    # 'fast' at c=1 is log-backed: one decode window per repeat, accept len 3.0 / 3.2 / 3.4
    for rep, al in enumerate([3.0, 3.2, 3.4]):
        log = tmp / f"fast-r{rep}.log"
        log.write_text(f"[{T0:%Y-%m-%d %H:%M:%S}] log of fast r{rep}\n{SPEC_ARGS}\n"
                       + _decode_line(T0 + dt.timedelta(seconds=5), al) + "\n")
        ingest.ingest_paths(db, [str(log)], run=f"syn/fast/c1/r{rep}")
    with store.writer(db) as con:
        plan = {  # (sweep, config, concurrency): client tok/s per repeat
            ("syn", "baseline", 1): [100, 110, 90], ("syn", "fast", 1): [150, 176, 135],
            ("syn", "slow", 1): [50, 55, 45], ("syn", "noisy", 1): [80, 120, 130],
            ("syn", "baseline", 4): [200, 220, 180], ("syn", "fast", 4): [400, 440, 360],
            ("syn", "slow", 4): [100, 110, 90],
            ("syn2", "late", 1): [120, 120, 120],            # no baseline in syn2
            ("one", "baseline", 1): [100], ("one", "fast", 1): [150],
        }
        for (sw, cfg, conc), xs in plan.items():
            for rep, x in enumerate(xs):
                _run(con, sw, cfg, conc, rep, float(x), spec=cfg != "baseline")
        # c=2: the only baseline ran another temperature
        for rep, x in enumerate([100, 100, 100]):
            _run(con, "syn", "baseline", 2, rep, float(x), spec=False, fp=FP_HOT)
            _run(con, "syn", "fast", 2, rep, 150.0 + rep)
        # sweep 'far' measured its config on host b against a baseline of host a
        for rep, x in enumerate([100, 110, 90]):
            _run(con, "far", "baseline", 8, rep, float(x), spec=False, node_hostname="a")
            _run(con, "far2", "fast", 8, rep, float(x) * 1.5, node_hostname="b")
        # a config whose every run failed
        _run(con, "syn", "broken", 1, 0, None, status="failed", failure_reason="OOM at load")
        # request-weighted accept length of fast/c1/r0: requests 64 tok / 16 steps (4.0) and
        # 8 tok / 8 steps (1.0) -> (4.0 + 1.0) / 2 = 2.5; the warm-up and the failure do not count
        reqs = [(False, True, 64, 16), (False, True, 8, 8), (True, True, 100, 10),
                (False, False, 3, 1)]
        store.insert(con, "requests", {
            "run_id": ["syn/fast/c1/r0"] * len(reqs), "request_idx": list(range(len(reqs))),
            "is_warmup": [r[0] for r in reqs], "success": [r[1] for r in reqs],
            "output_tokens": [r[2] for r in reqs], "spec_verify_ct": [r[3] for r in reqs]})
    return db


@pytest.fixture(scope="module")
def stats(known_db):
    rows = query.run_sql(known_db, "SELECT * FROM config_stats").dicts()
    return {(r["sweep_name"], r["config"], r["concurrency"]): r for r in rows}


@pytest.fixture(scope="module")
def winners(known_db):
    rows = query.run_sql(known_db, "SELECT * FROM concurrency_winners").dicts()
    return {(r["sweep_name"], r["concurrency"]): r for r in rows}


def test_t_table_matches_scipy():
    from scipy.stats import t
    for df, q in stat_views.T975:
        assert q == pytest.approx(t.ppf(0.975, df), abs=6e-5)


def test_tok_s_mean_median_ci_cv_on_known_data(stats):
    b = stats[("syn", "baseline", 1)]
    # [100, 110, 90]: mean 100, sd sqrt((0 + 100 + 100) / 2) = 10, cv 0.1
    # CI 100 ± 4.3027 * 10 / sqrt(3) = 100 ± 24.8417
    assert b["repeats"] == 3
    assert b["output_tok_s_mean"] == pytest.approx(100.0)
    assert b["output_tok_s_median"] == pytest.approx(100.0)
    assert b["output_tok_s_sd"] == pytest.approx(10.0)
    assert b["output_tok_s_cv"] == pytest.approx(0.1)
    assert b["output_tok_s_ci_low"] == pytest.approx(75.1583, abs=1e-3)
    assert b["output_tok_s_ci_high"] == pytest.approx(124.8417, abs=1e-3)
    n = stats[("syn", "noisy", 1)]
    # [80, 120, 130]: median 120 (not the mean 110); sd sqrt((900 + 100 + 400) / 2) = 26.4575
    assert n["output_tok_s_median"] == pytest.approx(120.0)
    assert n["output_tok_s_mean"] == pytest.approx(110.0)
    assert n["output_tok_s_cv"] == pytest.approx(26.4575 / 110, abs=1e-5)


def test_speedup_paired_and_welch_intervals_on_known_data(stats):
    f = stats[("syn", "fast", 1)]
    # same sweep, repeats 0..2 on both sides: paired. x / y = 150/100, 176/110, 135/90 =
    # 1.5, 1.6, 1.5; d = ln of those = 0.405465, 0.470004, 0.405465: mean 0.426978, sd 0.037262,
    # se = sd / sqrt(3) = 0.021513, t(2) · se = 0.092564; speedup exp(0.426978) = 1.532619,
    # interval exp(0.426978 ∓ 0.092564) = 1.397122 .. 1.681256
    assert f["speedup_method"] == "paired" and f["speedup_df"] == pytest.approx(2.0)
    assert f["speedup"] == pytest.approx(1.532619, abs=1e-5)
    assert f["speedup_ci_low"] == pytest.approx(1.397122, abs=1e-4)
    assert f["speedup_ci_high"] == pytest.approx(1.681256, abs=1e-4)
    assert f["verdict"] == "pays" and f["baseline_match"] == "same-sweep"
    s = stats[("syn", "slow", 1)]
    # every repeat exactly half the baseline's: d = ln 0.5 three times, sd 0 -> [0.5, 0.5]
    assert (s["speedup"], s["speedup_ci_low"], s["speedup_ci_high"]) == (
        pytest.approx(0.5), pytest.approx(0.5), pytest.approx(0.5))
    assert s["verdict"] == "loses"
    n = stats[("syn", "noisy", 1)]
    # ratios 80/100, 120/110, 130/90 -> d = -0.223144, 0.087011, 0.367725: mean 0.077197,
    # sd 0.295557, se 0.170640, t(2) · se = 0.734213 -> 1.080255 [0.518397, 2.251076]
    assert n["speedup"] == pytest.approx(1.080255, abs=1e-5)
    assert n["speedup_ci_low"] == pytest.approx(0.518397, abs=1e-4)
    assert n["speedup_ci_high"] == pytest.approx(2.251076, abs=1e-4)
    assert n["verdict"] == "unclear" and "contains 1" in n["verdict_reason"]
    f4 = stats[("syn", "fast", 4)]
    assert (f4["speedup"], f4["speedup_ci_low"]) == (pytest.approx(2.0), pytest.approx(2.0))
    # another sweep's baseline: Welch on the log scale. x = 120 three times (sd 0); y = 100, 110,
    # 90: mean ln y = 4.601820 (geometric mean 99.6655), sd ln y = 0.100377, v_y = sd² / 3 =
    # 0.0033585, se = 0.057953, df = v_y² / (v_y² / 2) = 2 -> t 4.3027;
    # speedup 120 / 99.6655 = 1.204027, interval 1.204027 · exp(∓0.249354) = 0.938303 .. 1.545002
    late = stats[("syn2", "late", 1)]
    assert late["speedup_method"] == "welch" and late["speedup_df"] == pytest.approx(2.0)
    assert late["speedup"] == pytest.approx(1.204027, abs=1e-5)
    assert late["speedup_ci_low"] == pytest.approx(0.938303, abs=1e-4)
    assert late["speedup_ci_high"] == pytest.approx(1.545002, abs=1e-4)
    # x = 1.5 · y on another machine and sweep: v_x = v_y = 0.0033585, se = 0.081958, Welch df =
    # (2v)² / (2 v² / 2) = 4 -> t 2.7764; 1.5 · exp(∓0.227548) = 1.194727 .. 1.883275
    far = stats[("far2", "fast", 8)]
    assert far["speedup_method"] == "welch" and far["speedup_df"] == pytest.approx(4.0)
    assert far["speedup_ci_low"] == pytest.approx(1.194727, abs=1e-4)
    assert far["speedup_ci_high"] == pytest.approx(1.883275, abs=1e-4)
    # every interval contains its point estimate
    for r in stats.values():
        if r["speedup_ci_low"] is not None:
            assert r["speedup_ci_low"] <= r["speedup"] <= r["speedup_ci_high"]
        if r["output_tok_s_ci_low"] is not None:
            assert r["output_tok_s_ci_low"] <= r["output_tok_s_mean"] <= r["output_tok_s_ci_high"]


def test_accept_length_spread_and_both_weightings(stats):
    f = stats[("syn", "fast", 1)]
    # windows 3.0, 3.2, 3.4: mean 3.2, sd sqrt((0.04 + 0 + 0.04) / 2) = 0.2
    assert f["accept_len"] == pytest.approx(3.2)
    assert f["accept_len_sd"] == pytest.approx(0.2)
    assert (f["accept_len_min"], f["accept_len_max"]) == (pytest.approx(3.0), pytest.approx(3.4))
    # accept rate (3.2 - 1) / (4 - 1) draft tokens
    assert f["accept_rate"] == pytest.approx(2.2 / 3)
    # request-weighted from the requests: (64/16 + 8/8) / 2 = 2.5 (token-weighted would be 72/24 = 3)
    assert f["accept_len_request_weighted"] == pytest.approx(2.5)


def test_baseline_matching_is_explicit(stats):
    # the only c=2 baseline ran temperature 0.7: not compared, and the row says why
    f2 = stats[("syn", "fast", 2)]
    assert f2["baseline_match"] == "sampling-differs"
    assert f2["speedup"] is None and f2["verdict"] == "unclear"
    assert "sampling" in f2["verdict_reason"]
    # another sweep's baseline is used, and flagged
    assert stats[("syn2", "late", 1)]["baseline_match"] == "other-sweep"
    assert stats[("syn2", "late", 1)]["baseline_config"] == "baseline"
    assert stats[("far2", "fast", 8)]["baseline_match"] == "other-sweep+other-machine"
    # the baseline is compared with itself: speedup 1, its own verdict
    b = stats[("syn", "baseline", 1)]
    assert (b["baseline_match"], b["verdict"], b["speedup"]) == ("self", "baseline", 1.0)
    broken = stats[("syn", "broken", 1)]
    assert broken["verdict"] == "failed" and "OOM at load" in broken["verdict_reason"]


def test_one_repeat_is_always_unclear(stats, winners):
    f = stats[("one", "fast", 1)]
    assert f["speedup"] == pytest.approx(1.5) and f["speedup_ci_low"] is None
    assert f["verdict"] == "unclear" and "add repeats" in f["verdict_reason"]
    w = winners[("one", 1)]
    assert w["winner"] is None and "add repeats" in w["note"]


def test_winner_only_without_overlap(winners):
    # c=1: fast [1.196, 1.882] overlaps noisy [0.576, 2.101]: no winner, and it names both
    w1 = winners[("syn", 1)]
    assert w1["winner"] is None
    assert w1["note"] == "no clear winner: fast and noisy overlap"
    assert w1["losers"] == ["slow"]
    # c=4: fast [1.594, 2.509] lies above baseline [1, 1] and slow [0.399, 0.627]
    # c=2: the only config is not compared (other sampling): nothing wins
    assert winners[("syn", 2)]["winner"] is None
    assert winners[("syn", 2)]["note"].startswith("nothing compared")
    w4 = winners[("syn", 4)]
    assert w4["winner"] == "fast" and w4["losers"] == ["slow"]


def test_fingerprint_is_pure_and_says_what_differs():
    fp = json.loads(FP)
    assert fp == {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "ignore_eos": True,
                  "max_new_tokens": {"min": 64, "max": 64}, "chat_template": False, "seed": 0,
                  "prompts": "builtin:mixed", "num_prompts": 20, "input_chars": None}
    assert sampling.sampling_fingerprint(WL) == FP
    assert sampling.fingerprint_diff(FP, FP_HOT) == ["temperature"]
    assert sampling.fingerprint_diff(FP, None) == ["unknown"]


# ----------------------------------------------------------------------------- the CLI


def _report(db, *args, columns="120"):
    env = dict(os.environ, COLUMNS=columns)
    return subprocess.run([sys.executable, "-m", "specwatch.cli", "report", "--db", str(db),
                           *args], cwd=ROOT, capture_output=True, text=True, env=env,
                          timeout=120, check=True).stdout


def test_report_fits_the_terminal_and_wide_restores_every_column(known_db):
    out = _report(known_db)
    lines = out.splitlines()
    assert max(len(ln) for ln in lines) <= 120
    assert any(ln.startswith("fast") and "1.53 [1.40, 1.68]" in ln and "pays" in ln
               for ln in lines)
    # tok/s to 3 significant digits, the half-width (24.84) to the same decimals
    assert any(ln.startswith("baseline") and "100 ± 25" in ln for ln in lines)
    assert any(ln.startswith("slow") and "50.0 ± 12.4" in ln for ln in lines)
    assert "c=1: no clear winner: fast and noisy overlap; loses: slow" in out
    assert "c=4: fast wins" in out
    assert "add repeats" in out                              # sweep 'one' has one repeat
    assert any("† fast: not compared" in ln for ln in lines)
    narrow = _report(known_db, columns="70")
    assert max(len(ln) for ln in narrow.splitlines()) <= 70
    wide = _report(known_db, "--wide")
    assert all(c in wide.splitlines()[0] for c in query.STATS_COLUMNS)


def test_report_json_and_csv_keep_every_column(known_db):
    doc = json.loads(_report(known_db, "--format", "json"))
    need = {"repeats", "output_tok_s_mean", "output_tok_s_ci_low", "output_tok_s_ci_high",
            "speedup", "speedup_ci_low", "speedup_ci_high", "verdict", "baseline_match"}
    assert all(need <= set(r) for r in doc["configs"])
    per = {(w["sweep_name"], w["concurrency"]): w for w in doc["concurrency"]}
    assert per[("syn", 4)]["winner"] == "fast" and per[("syn", 1)]["winner"] is None
    assert {r["run_name"] for r in doc["runs"]} >= {"fast/c1/r0", "baseline/c4/r2"}
    rows = list(csv.DictReader(io.StringIO(_report(known_db, "--format", "csv"))))
    assert list(rows[0]) == query.STATS_COLUMNS
    fast = next(r for r in rows if (r["sweep_name"], r["config"], r["concurrency"]) ==
                ("syn", "fast", "1"))
    assert math.isclose(float(fast["speedup_ci_low"]), 1.397122, abs_tol=1e-4)


def test_baseline_notes_for_doctor(known_db):
    notes = {(n["sweep_name"], n["config"], n["concurrency"]): n
             for n in query.baseline_match_notes(known_db)}
    assert set(notes) == {("syn", "fast", 2), ("syn2", "late", 1), ("far2", "fast", 8)}
    assert "differs in: temperature" in notes[("syn", "fast", 2)]["message"]
    assert "another sweep (syn)" in notes[("syn2", "late", 1)]["message"]
    assert "another machine" in notes[("far2", "fast", 8)]["message"]
    assert [n["config"] for n in query.baseline_match_notes(known_db, run="syn2/late/c1/r0")] == [
        "late"]
