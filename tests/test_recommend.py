"""`specwatch recommend` on a real DuckDB file with known runs: the pairwise ratios it decides by
(stats.config_pairs), the choice per load, the engine-native schedules, and the CLI.

Expected numbers are worked out here from the inputs (logs are natural logs; t(0.975, 2) = 4.3027), not taken from the code under test. The schedules are checked by the
engines' own lookup rules: the built-in engine's adaptive routing (engine/adaptive.py, itself
checked step by step against real SGLang in tests/contract) and vLLM 0.32's documented expansion
(triples sorted, starting at 1, without gaps or overlaps, k <= num_speculative_tokens).
"""
from __future__ import annotations

import datetime as dt
import json
import math
import subprocess
import sys

import pytest

from conftest import ROOT
from specwatch.db import query, store
from specwatch.diagnose import recommend as rec
from specwatch.engine import adaptive

T0 = dt.datetime(2026, 12, 1, 10, 0, 0)
DRAFT, OTHER = "/models/draft-eagle3", "/models/draft-other"
T975_2 = 4.3027


def _run(con, sweep, config, conc, rep, tok_s, steps=None, topk=1, draft=DRAFT, itl=None,
         **extra):
    spec = steps is not None
    store.upsert_run(con, dict(
        run_id=f"{sweep}/{config}/c{conc}/r{rep}", run_name=f"{config}/c{conc}/r{rep}",
        origin="sweep", sweep_name=sweep, config_name=config, concurrency=conc, repeat_idx=rep,
        status="ok", engine="builtin", model_path="/models/target", tp_size=1, dp_size=1,
        is_baseline=not spec, speculative_algorithm="EAGLE3" if spec else None,
        draft_model_path=draft if spec else None, aux_layer_ids="[1, 3, 5]" if spec else None,
        speculative_num_steps=steps, speculative_eagle_topk=topk if spec else None,
        speculative_num_draft_tokens=(steps + 1 if topk == 1 else 2 * steps + 2) if spec else None,
        output_tok_s=float(tok_s), itl_ms_p99=itl, sampling_fingerprint="fp",
        created_at=T0 + dt.timedelta(minutes=rep), **extra))


def _sweep(db, name, plan):
    """plan: {(config, concurrency): (tok/s per repeat, run kwargs)}"""
    with store.writer(db) as con:
        for (cfg, c), (xs, kw) in plan.items():
            for rep, x in enumerate(xs):
                _run(con, name, cfg, c, rep, x, **kw)


K1, K3 = {"steps": 1}, {"steps": 3}
# The classes of load a schedule meets, each measured with 3 interleaved repeats:
PLAN = {
    # c=1: k=3 clearly ahead of k=1 and of the baseline       -> k=3, significant
    ("baseline", 1): ([100, 110, 90], {}),
    ("s1", 1): ([130, 143, 117], K1), ("s3", 1): ([160, 176, 144], K3),
    # c=4: k=3 a little ahead of k=1, within noise; both ahead of the baseline -> k=1, simpler
    ("baseline", 4): ([200, 220, 180], {}),
    ("s1", 4): ([300, 300, 300], K1), ("s3", 4): ([330, 290, 310], K3),
    # c=16: the baseline clearly ahead of both                  -> k=0
    ("baseline", 16): ([400, 440, 360], {}),
    ("s1", 16): ([300, 330, 270], K1), ("s3", 16): ([200, 220, 180], K3),
    # c=64: everything within noise of the baseline             -> k=0, simpler
    ("baseline", 64): ([500, 600, 450], {}),
    ("s1", 64): ([520, 540, 560], K1), ("s3", 64): ([560, 480, 540], K3),
    # never in a schedule: a tree (the fastest at c=1), another draft
    ("tree", 1): ([200, 220, 180], {"steps": 2, "topk": 2}),
    ("other-draft", 1): ([170, 187, 153], {"steps": 3, "draft": OTHER}),
}


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("rec") / "rec.duckdb"
    _sweep(path, "sched", PLAN)
    return path


def _pair(db, a, b, c, sweep="sched"):
    rows = query.run_sql(db, "SELECT * FROM config_pairs WHERE sweep_name = ? AND config = ? "
                             "AND other_config = ? AND concurrency = ?", [sweep, a, b, c]).dicts()
    assert len(rows) == 1
    return rows[0]


def test_config_pairs_paired_ratio_and_interval_by_hand(db):
    # s3 over s1 at c=1: every repeat is 160/130 = 176/143 = 144/117 = 16/13: d_i equal, sd 0
    p = _pair(db, "s3", "s1", 1)
    assert p["ratio"] == pytest.approx(16 / 13) and p["ratio_method"] == "paired"
    assert p["ratio_ci_low"] == pytest.approx(16 / 13) == pytest.approx(p["ratio_ci_high"])
    assert p["ratio_verdict"] == "faster"
    # s3 over s1 at c=4: d = ln(330/300), ln(290/300), ln(310/300)
    d = [math.log(330 / 300), math.log(290 / 300), math.log(310 / 300)]
    mean = sum(d) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / 2)
    half = T975_2 * sd / math.sqrt(3)
    p = _pair(db, "s3", "s1", 4)
    assert p["ratio"] == pytest.approx(math.exp(mean))
    assert (p["ratio_ci_low"], p["ratio_ci_high"]) == pytest.approx(
        (math.exp(mean - half), math.exp(mean + half)))
    assert p["ratio_verdict"] == "within noise"
    # the reverse pair is the reciprocal, interval included
    q = _pair(db, "s1", "s3", 4)
    assert q["ratio"] == pytest.approx(1 / p["ratio"])
    assert q["ratio_ci_low"] == pytest.approx(1 / p["ratio_ci_high"])


def test_config_pairs_against_the_baseline_is_config_stats_speedup(db):
    stats = {r["config"]: r for r in query.run_sql(
        db, "SELECT * FROM config_stats WHERE sweep_name = 'sched' AND concurrency = 4").dicts()}
    for cfg in ("s1", "s3"):
        p = _pair(db, cfg, "baseline", 4)
        s = stats[cfg]
        assert (p["ratio"], p["ratio_ci_low"], p["ratio_ci_high"]) == pytest.approx(
            (s["speedup"], s["speedup_ci_low"], s["speedup_ci_high"]))


def test_config_pairs_welch_when_repeats_are_unequal_and_none_with_one(tmp_path):
    path = tmp_path / "w.duckdb"
    _sweep(path, "w", {("a", 1): ([100, 120, 110], K1), ("b", 1): ([90, 80], K3),
                       ("one", 1): ([95], K3)})
    p = _pair(path, "a", "b", 1, sweep="w")
    la, lb = [math.log(x) for x in (100, 120, 110)], [math.log(x) for x in (90, 80)]
    ma, mb = sum(la) / 3, sum(lb) / 2
    va = sum((x - ma) ** 2 for x in la) / 2 / 3
    vb = sum((x - mb) ** 2 for x in lb) / 1 / 2
    df = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 1)
    assert 2 <= df < 3                                     # floor(df) = 2: t = 4.3027
    half = T975_2 * math.sqrt(va + vb)
    assert p["ratio_method"] == "welch" and p["ratio"] == pytest.approx(math.exp(ma - mb))
    assert p["ratio_ci_low"] == pytest.approx(math.exp(ma - mb - half))
    n = _pair(path, "a", "one", 1, sweep="w")
    assert n["ratio_method"] is None and n["ratio_ci_low"] is None
    assert n["ratio_verdict"] == "no interval"


def test_choice_per_load_follows_significance(db):
    r = rec.recommend(db, "builtin")
    got = {b.concurrency: (b.steps, b.config, b.choice) for b in r.bands}
    assert got == {1: (3, "s3", "significant"), 4: (1, "s1", "simpler"),
                   16: (0, "baseline", "significant"), 64: (0, "baseline", "simpler")}
    c4 = next(b for b in r.bands if b.concurrency == 4)
    assert "s3 (k=3) is not significantly faster" in c4.reason and "contains 1" in c4.reason
    assert c4.fastest_config == "s3"
    # the expected gain is the chosen config's speedup over the baseline, with its interval
    s1 = query.run_sql(db, "SELECT speedup, speedup_ci_low FROM config_stats WHERE "
                           "config = 's1' AND concurrency = 4").rows[0]
    assert (c4.speedup, c4.speedup_ci_low) == pytest.approx(s1)
    c16 = next(b for b in r.bands if b.concurrency == 16)
    assert (c16.speedup, c16.speedup_ci_low, c16.speedup_ci_high) == (1.0, 1.0, 1.0)
    # evidence: every candidate's runs
    assert c4.evidence["s1"] == [f"sched/s1/c4/r{i}" for i in range(3)]
    assert set(c4.evidence) == {"baseline", "s1", "s3"}


def test_trees_and_other_drafts_stay_out_with_a_reason(db):
    r = rec.recommend(db, "sglang")
    why = {e["config"]: e["reason"] for e in r.excluded}
    assert "topk=2" in why["tree"] and "adaptive mode serves topk 1" in why["tree"]
    assert "another draft" in why["other-draft"] and OTHER in why["other-draft"]
    assert r.family["draft_model_path"] == DRAFT
    assert all(b.config not in ("tree", "other-draft") for b in r.bands)


def test_bands_cover_every_batch_size_once(db):
    r = rec.recommend(db, "vllm", max_batch_size=128)
    assert [(b.batch_size_min, b.batch_size_max) for b in r.bands] == \
        [(1, 1), (2, 4), (5, 16), (17, None)]
    assert r.segments == [[1, 1, 3], [2, 4, 1], [5, None, 0]]


def _vllm_lookup(triples, max_bs, k_max):
    """vLLM 0.32 build_dynamic_sd_schedule_lookup's rules, restated: sorted inclusive ranges from
    1, no overlap, gaps and the tail carry the previous k, k clamped to num_speculative_tokens."""
    assert triples[0][0] == 1
    assert all(a[1] < b[0] and a[0] <= a[1] for a, b in zip(triples, triples[1:]))
    dense = {}
    for (s, e, k), nxt in zip(triples, triples[1:] + [[max_bs + 1]]):
        for bs in range(s, nxt[0]):
            dense[bs] = min(k, k_max)
    return dense


def test_vllm_schedule_is_the_speculative_config_field(db):
    r = rec.recommend(db, "vllm", max_batch_size=128)
    sc = r.speculative_config
    assert sc["method"] == "eagle3" and sc["model"] == DRAFT and sc["num_speculative_tokens"] == 3
    triples = sc["num_speculative_tokens_per_batch_size"]
    assert triples == [[1, 1, 3], [2, 4, 1], [5, 128, 0]]
    dense = _vllm_lookup(triples, 128, sc["num_speculative_tokens"])
    want = {b.concurrency: b.steps for b in r.bands}
    assert all(dense[bs] == want[min(c for c in want if c >= bs) if bs <= 64 else 64]
               for bs in range(1, 129))
    assert r.flags == ["--speculative-config", json.dumps(sc)]
    assert any("data parallelism" in t and "vllm#54748" in t for t in r.limits)


@pytest.mark.parametrize("engine", ["sglang", "builtin"])
def test_adaptive_schedule_routes_each_batch_size_to_its_band(db, tmp_path, engine):
    r = rec.recommend(db, engine)
    assert r.schedule == {"1": {"candidate_steps": [3]}, "2": {"candidate_steps": [1]},
                          "5": {"candidate_steps": [0]}}
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps(r.schedule))
    params = adaptive.AdaptiveParams(r.max_steps, str(path))
    for b in r.bands:
        for bs in range(b.batch_size_min, (b.batch_size_max or 300) + 1):
            assert params.steps_for_batch(bs) == b.steps, bs
    i = r.flags.index("--speculative-num-steps")
    assert r.flags[i + 1] == "3" and "--speculative-adaptive" in r.flags
    assert any("SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND" in t for t in r.limits)


def test_slo_leaves_out_configs_over_the_limit(tmp_path):
    path = tmp_path / "slo.duckdb"
    _sweep(path, "slo", {
        ("baseline", 8): ([100, 110, 90], {"itl": 20.0}),
        ("s3", 8): ([200, 220, 180], {**K3, "itl": 80.0}),
        ("s1", 8): ([150, 165, 135], {**K1, "itl": 40.0})})
    free = rec.recommend(path, "builtin")
    assert free.bands[0].config == "s3"
    capped = rec.recommend(path, "builtin", slo=rec.parse_slo(["itl_ms_p99=50"]))
    assert capped.bands[0].config == "s1"
    assert capped.bands[0].slo_excluded == [{"config": "s3",
                                             "reason": "itl_ms_p99 80.0 > 50 ms"}]
    none = rec.recommend(path, "builtin", slo={"itl_ms_p99": 10.0})
    assert none.bands[0].config == "s3" and "nothing meets the SLO" in none.bands[0].reason


def test_one_repeat_gives_no_evidence_so_no_speculation(tmp_path):
    path = tmp_path / "one.duckdb"
    _sweep(path, "one", {("baseline", 1): ([100], {}), ("s3", 1): ([300], K3)})
    r = rec.recommend(path, "vllm")
    assert r.bands[0].steps == 0 and "one repeat" in r.bands[0].reason
    assert r.schedule is None and r.speculative_config is None and r.flags == []
    assert any("serve without it" in t for t in r.limits)


@pytest.mark.parametrize("bad", ["itl_ms_p99", "itl_ms_p99=x", "itl_ms_p99=-1",
                                 "tpot_ms_p42=5", "itl_ms_p99=nan"])
def test_bad_slo_is_refused_naming_it(bad):
    with pytest.raises(rec.RecommendError, match="--slo"):
        rec.parse_slo([bad])


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "specwatch.cli", "recommend", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_cli_text_json_and_errors(db, tmp_path):
    out = _cli("--db", str(db), "--engine", "vllm")
    assert out.returncode == 0, out.stderr
    assert '"num_speculative_tokens_per_batch_size": [[1, 1, 3], [2, 4, 1], [5, 256, 0]]' \
        in out.stdout
    assert "2-4" in out.stdout and "s1" in out.stdout
    js = _cli("--db", str(db), "--format", "json")       # engine: the sweep's (builtin)
    doc = json.loads(js.stdout)
    assert doc["engine"] == "builtin" and doc["schedule"]["5"] == {"candidate_steps": [0]}
    assert {b["concurrency"] for b in doc["bands"]} == {1, 4, 16, 64}
    missing = _cli("--db", str(db), "--sweep", "nope")
    assert missing.returncode == 1 and "no sweep named 'nope'" in missing.stderr
    empty = tmp_path / "empty.duckdb"
    with store.writer(empty):
        pass
    none = _cli("--db", str(empty))
    assert none.returncode == 1 and "run-sweep" in none.stderr
    slo = _cli("--db", str(db), "--slo", "x=1")
    assert slo.returncode == 1 and "METRIC=LIMIT" in slo.stderr


def test_a_noisy_config_never_displaces_one_measured_to_be_better(tmp_path):
    # s1 is within noise of everything (wide interval); s3 is measured above the baseline in
    # every repeat: s3, not the simpler but unproven s1 (the probe sweep's c=8 on a loaded box)
    path = tmp_path / "noisy.duckdb"
    _sweep(path, "noisy", {("baseline", 8): ([300, 400, 350], {}),
                           ("s1", 8): ([150, 600, 330], K1),
                           ("s3", 8): ([390, 520, 455], K3)})
    band = rec.recommend(path, "builtin").bands[0]
    assert (band.config, band.choice) == ("s3", "significant")
    assert "significantly faster than baseline (k=0) (ratio" in band.reason
    assert "within noise of s1 (k=1) (ratio" in band.reason
    assert _pair(path, "s3", "s1", 8, sweep="noisy")["ratio_verdict"] == "within noise"
