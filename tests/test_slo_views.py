"""Traffic and SLO metrics (db/slo_views.py) on a real DuckDB file with known request rows:
goodput and SLO attainment, percentiles at the SLO's, arrivals, the max rate under the SLO, the
crossover load, adaptive-repeat status and the per-category breakdown.

Every expected number is computed by hand from the inputs (the arithmetic is in the comments or
spelled out as plain formulas over the literals), not by the code under test. Percentiles are
linear (numpy's default): position (n - 1) p / 100 in the sorted values. Logs are natural.
t(0.975, 2) = 4.3027.
"""
from __future__ import annotations

import datetime as dt
import json
import math

import pytest

from specwatch.db import store
from conftest import run_cli

T0 = dt.datetime(2026, 12, 4, 10, 0, 0)
T975_2 = 4.3027


def run(con, sweep, config, rep, *, conc=None, rate=None, tok_s=100.0, duration_s=4.0,
        status="ok", spec=None, reqs=()):
    spec = config != "baseline" if spec is None else spec
    level = f"c{conc}" if rate is None else f"rps{rate:g}"
    rid = f"{sweep}/{config}/{level}/r{rep}"
    store.upsert_run(con, dict(
        run_id=rid, run_name=rid, origin="sweep", sweep_name=sweep, config_name=config,
        engine="builtin", is_baseline=not spec, concurrency=conc, request_rate=rate,
        arrival='{"process": "poisson"}' if rate is not None else None, repeat_idx=rep,
        status=status, model_path="m", tp_size=1, dp_size=1,
        speculative_algorithm="EAGLE3" if spec else None,
        speculative_num_steps=3 if spec else None, speculative_eagle_topk=1 if spec else None,
        speculative_num_draft_tokens=4 if spec else None, output_tok_s=tok_s,
        duration_s=duration_s, sampling_fingerprint="fp", created_at=T0))
    if reqs:
        cols = {k: [] for k in ("run_id", "request_idx", "is_warmup", "success", "ttft_ms",
                                "tpot_ms", "e2e_ms", "itl_ms", "output_tokens", "spec_verify_ct",
                                "category", "send_offset_ms", "arrival_offset_ms")}
        for i, q in enumerate(reqs):
            q = {"success": True, "is_warmup": False, "request_idx": i, **q, "run_id": rid}
            for k in cols:
                cols[k].append(q.get(k))
        store.insert(con, "requests", cols)
    return rid


def targets(con, sweep, **kw):
    con.execute("DELETE FROM sweep_targets WHERE sweep_name = ?", [sweep])
    store.insert(con, "sweep_targets", {"sweep_name": [sweep], "updated_at": [T0],
                                        **{k: [v] for k, v in kw.items()}})


def one(db, sql, params=()):
    with store.reader(db) as con:
        cur = con.execute(sql, list(params))
        cols = [d[0] for d in cur.description]
        rows = [dict(zip(cols, r)) for r in cur.fetchall()]
    return rows


# ------------------------------------------------------------------------------- goodput

# Six measured requests of one 4.0 s run (and a warm-up one, never counted):
REQS = [
    dict(ttft_ms=100, tpot_ms=20, e2e_ms=300, itl_ms=[10, 30]),
    dict(ttft_ms=250, tpot_ms=10, e2e_ms=400, itl_ms=[5, 15, 25]),
    dict(ttft_ms=150, tpot_ms=40, e2e_ms=500, itl_ms=[50]),
    dict(ttft_ms=90, tpot_ms=None, e2e_ms=90, itl_ms=[]),        # one token: no TPOT, no ITL
    dict(success=False),                                          # failed: never good
    dict(ttft_ms=120, tpot_ms=25, e2e_ms=350, itl_ms=[20, 20, 100]),
    dict(ttft_ms=1, tpot_ms=1, e2e_ms=1, itl_ms=[1], is_warmup=True, request_idx=-1),
]

# (limits, percentile, good requests): by hand from REQS
GOOD = [
    ({"slo_ttft_ms": 200}, 99, 4),                     # 100, 150, 90, 120 (250 misses)
    ({"slo_ttft_ms": 200, "slo_tpot_ms": 30}, 99, 3),  # and tpot: 20, (40 misses), none=0, 25
    ({"slo_tpot_ms": 10}, 99, 2),                      # 10 and the one-token request
    ({"slo_e2e_ms": 350}, 99, 3),                      # 300, 90, 350 (<= is within)
    # a request's own ITL at p50: [10,30] -> 20, [5,15,25] -> 15, [50] -> 50, none, [20,20,100]
    ({"slo_itl_ms": 30}, 50, 4),                       # -> 20
    # at p99: 10 + 20 * 0.99 = 29.8, 15 + 10 * 0.98 = 24.8, 50, none, 20 + 80 * 0.98 = 98.4
    ({"slo_itl_ms": 30}, 99, 3),
    ({"slo_ttft_ms": 1000, "slo_tpot_ms": 1000, "slo_itl_ms": 1000, "slo_e2e_ms": 1000}, 99, 5),
]


@pytest.mark.parametrize("limits,pct,good", GOOD)
def test_goodput_counts_requests_meeting_every_limit(tmp_path, limits, pct, good):
    db = tmp_path / "g.duckdb"
    with store.writer(db) as con:
        rid = run(con, "g", "x", 0, conc=4, reqs=REQS)
        targets(con, "g", slo_percentile=pct, **limits)
    r, = one(db, "SELECT * FROM run_slo WHERE run_id = ?", [rid])
    assert (r["requests"], r["good_requests"]) == (6, good)
    assert r["goodput_req_s"] == pytest.approx(good / 4.0)
    assert r["slo_attainment_frac"] == pytest.approx(good / 6)


def test_percentiles_at_the_slo_and_the_margin(tmp_path):
    """Successful ttfts sorted: 90, 100, 120, 150, 250. p50 = 120; p90: position 3.6 ->
    150 + 100 * 0.6 = 210. Every ITL of them sorted: 5 10 15 20 20 25 30 50 100: p50 = 20.
    tpot (those with one): 10 20 25 40: p50 = (20 + 25) / 2. e2e: 90 300 350 400 500: p50 350."""
    db = tmp_path / "m.duckdb"
    with store.writer(db) as con:
        rid = run(con, "m", "x", 0, conc=4, reqs=REQS)
        targets(con, "m", slo_ttft_ms=200, slo_itl_ms=25, slo_percentile=50)
    r, = one(db, "SELECT * FROM run_slo WHERE run_id = ?", [rid])
    assert (r["ttft_ms_at_slo_pct"], r["itl_ms_at_slo_pct"]) == pytest.approx((120, 20))
    assert (r["tpot_ms_at_slo_pct"], r["e2e_ms_at_slo_pct"]) == pytest.approx((22.5, 350))
    # the margin is the worst limit's log ratio: max(ln(120/200), ln(20/25))
    assert r["slo_margin"] == pytest.approx(max(math.log(120 / 200), math.log(20 / 25)))
    assert r["meets_slo"] is True
    with store.writer(db) as con:
        targets(con, "m", slo_ttft_ms=200, slo_percentile=90)
    r, = one(db, "SELECT * FROM run_slo WHERE run_id = ?", [rid])
    assert r["ttft_ms_at_slo_pct"] == pytest.approx(210)
    assert r["slo_margin"] == pytest.approx(math.log(210 / 200)) and r["meets_slo"] is False


def test_no_slo_no_rows_and_a_sweep_without_targets_is_left_alone(tmp_path):
    db = tmp_path / "n.duckdb"
    with store.writer(db) as con:
        run(con, "n", "x", 0, conc=1, reqs=REQS)
        targets(con, "n", target_ci_width=0.05, max_repeats=5)     # adaptive, no SLO
    assert one(db, "SELECT * FROM run_slo") == []


# ------------------------------------------------------------------------------- arrivals

def test_arrivals_achieved_rate_cv_and_lateness(tmp_path):
    """Sends at 0, 100, 300, 600 ms (due 0, 90, 280, 600): 3 gaps over 0.6 s = 5 requests/s;
    gaps 100, 200, 300: mean 200, sd 100, CV 0.5; lateness 0, 10, 20, 0: p50 5, max 20,
    p99 at position 2.97 of 0 0 10 20 -> 10 + 10 * 0.97."""
    db = tmp_path / "a.duckdb"
    with store.writer(db) as con:
        rid = run(con, "a", "x", 0, rate=5.0, reqs=[
            dict(send_offset_ms=s, arrival_offset_ms=a, ttft_ms=1, e2e_ms=1)
            for s, a in [(0, 0), (300, 280), (100, 90), (600, 600)]]
            + [dict(send_offset_ms=5000, arrival_offset_ms=0, is_warmup=True, request_idx=-1)])
    r, = one(db, "SELECT * FROM run_arrivals WHERE run_id = ?", [rid])
    assert r["requests_sent"] == 4
    assert r["achieved_rate_req_s"] == pytest.approx(5.0)
    assert r["arrival_cv"] == pytest.approx(0.5)
    assert (r["send_lateness_ms_p50"], r["send_lateness_ms_p99"], r["send_lateness_ms_max"]) \
        == pytest.approx((5.0, 19.7, 20.0))


def test_a_run_keeps_its_schedule_when_rate_and_cv_are_the_schedules(tmp_path):
    """Due every 100 ms (0, 100, 200, 300: 10 requests/s, gaps CV 0). By hand:
    a  sends 0, 100, 200, 306: 3 / 0.306 = 9.80/s (-1.96%), gaps 100 100 106: CV 3.46/102 = 0.034:
       kept (within 2% and 0.1);
    b  sends 0, 100, 200, 310: 3 / 0.310 = 9.68/s (-3.2%): off (the rate);
    c  sends 0, 150, 210, 300: 10/s exactly, gaps 150 60 90: mean 100, sd sqrt(2100) = 45.8:
       CV 0.458: off (the gaps: a late burst); lateness 0 50 10 0: p50 5 ms, max 50 ms;
    a closed-loop run has no schedule: NULL, and no group_schedule row."""
    db = tmp_path / "k.duckdb"
    due = [0, 100, 200, 300]
    with store.writer(db) as con:
        for cfg, rep, sends in (("a", 0, [0, 100, 200, 306]), ("x", 0, [0, 100, 200, 310]),
                                ("x", 1, [0, 150, 210, 300])):
            run(con, "k", cfg, rep, rate=10.0, reqs=[
                dict(send_offset_ms=s, arrival_offset_ms=a, ttft_ms=1, e2e_ms=1)
                for s, a in zip(sends, due)])
        run(con, "k", "a", 0, conc=2, reqs=[dict(send_offset_ms=s, ttft_ms=1, e2e_ms=1)
                                           for s in (0, 5, 40)])
    got = {r["run_id"]: r for r in one(db, "SELECT * FROM run_arrivals")}
    a, b, c, closed = (got[k] for k in ("k/a/rps10/r0", "k/x/rps10/r0", "k/x/rps10/r1",
                                        "k/a/c2/r0"))
    assert (a["schedule_rate_req_s"], a["schedule_cv"]) == pytest.approx((10.0, 0.0))
    assert a["achieved_rate_req_s"] == pytest.approx(3 / 0.306)
    assert a["arrival_cv"] == pytest.approx(math.sqrt(12) / 102)
    assert a["schedule_kept"] is True and a["schedule_reason"] is None
    assert b["schedule_kept"] is False and b["schedule_reason"].startswith(
        "sent at 9.68/s against the schedule's 10/s, gaps CV 0.06 against 0.00")
    assert c["arrival_cv"] == pytest.approx(math.sqrt(2100) / 100)
    assert c["schedule_kept"] is False and "gaps CV 0.46 against 0.00, sends 5 ms late at p50 " \
        "(max 50 ms)" in c["schedule_reason"]
    assert closed["schedule_kept"] is None and closed["schedule_rate_req_s"] is None
    groups = {r["config"]: r for r in one(db, "SELECT * FROM group_schedule")}
    assert set(groups) == {"a", "x"}                           # the closed-loop group: none
    assert (groups["a"]["runs"], groups["a"]["runs_off_schedule"]) == (1, 0)
    x = groups["x"]
    assert (x["runs"], x["runs_off_schedule"]) == (2, 2)
    assert x["schedule_reason"] == c["schedule_reason"]        # the latest at p50: c's 5 ms
    # the report names the group (text), and its JSON carries every open-loop group
    text = run_cli("report", "--db", db).stdout
    assert "off schedule: x 10/s: 2 of 2 runs: sent at 10/s against the schedule's 10/s" \
        in " ".join(text.split())
    assert "off schedule: a" not in text
    doc = json.loads(run_cli("report", "--db", db, "--format", "json").stdout)
    assert {(r["config"], r["runs_off_schedule"]) for r in doc["schedule"]} == {("a", 0), ("x", 2)}


# ------------------------------------------------------------------------------- max rate

LIMIT = 100.0


def ttfts_for(margins: list[float]) -> list[float]:
    """One request per run whose ttft gives that run's margin: ttft = limit * e^margin."""
    return [LIMIT * math.exp(m) for m in margins]


def band(ms: list[float]) -> tuple[float, float, float]:
    mean = sum(ms) / len(ms)
    sd = math.sqrt(sum((m - mean) ** 2 for m in ms) / (len(ms) - 1))
    half = T975_2 * sd / math.sqrt(len(ms))
    return mean - half, mean, mean + half


def cross(x1, y1, x2, y2) -> float:
    """Where the line through (ln x1, y1), (ln x2, y2) meets 0, back on the rate scale."""
    lx1, lx2 = math.log(x1), math.log(x2)
    return math.exp(lx1 + (0 - y1) * (lx2 - lx1) / (y2 - y1))


# per config: {rate: three runs' margins}
CURVES = {
    "crosses": {1: [-0.5, -0.45, -0.55], 2: [-0.2, -0.1, -0.15], 4: [0.3, 0.2, 0.25],
                8: [0.9, 1.0, 0.95]},
    "below": {1: [0.1, 0.2, 0.15], 2: [0.5, 0.6, 0.55]},
    "above": {1: [-0.9, -0.8, -0.85], 4: [-0.3, -0.35, -0.25]},
    # meets, misses, meets again: the first crossing counts (the curve is followed from the
    # lowest rate), and the rate after the miss does not count as meeting
    "wavy": {1: [-0.4, -0.3, -0.35], 2: [0.2, 0.1, 0.15], 4: [-0.1, -0.15, -0.05]},
}


@pytest.fixture(scope="module")
def rate_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("rates") / "r.duckdb"
    with store.writer(db) as con:
        for cfg, curve in CURVES.items():
            for rate, margins in curve.items():
                for rep, t in enumerate(ttfts_for(margins)):
                    run(con, "r", cfg, rep, rate=float(rate), reqs=[dict(ttft_ms=t, e2e_ms=t)])
        # a failed run is not a repeat
        run(con, "r", "crosses", 3, rate=2.0, status="failed",
            reqs=[dict(ttft_ms=1e6, e2e_ms=1e6)])
        targets(con, "r", slo_ttft_ms=LIMIT, slo_percentile=99)
    return db


def test_group_slo_margins_intervals_and_verdicts(rate_db):
    rows = {(r["config"], r["request_rate"]): r for r in one(rate_db, "SELECT * FROM group_slo")}
    for cfg, curve in CURVES.items():
        for rate, margins in curve.items():
            g = rows[(cfg, float(rate))]
            lo, mean, hi = band(margins)
            assert g["slo_repeats"] == 3
            assert (g["slo_margin_ci_low"], g["slo_margin_mean"], g["slo_margin_ci_high"]) \
                == pytest.approx((lo, mean, hi))
            want = "meets" if hi <= 0 else "misses" if lo > 0 else "unclear"
            assert g["slo_verdict"] == want, (cfg, rate)
            # one request per 4 s run: goodput 0.25 when it meets, else 0
            good = [m <= 0 for m in margins]
            assert g["goodput_req_s_mean"] == pytest.approx(sum(good) / 3 * 0.25)
    assert rows[("crosses", 1.0)]["slo_verdict"] == "meets"
    assert rows[("crosses", 8.0)]["slo_verdict"] == "misses"


def test_max_rate_under_the_slo_with_its_interval(rate_db):
    got = {r["config"]: r for r in one(rate_db, "SELECT * FROM config_max_rate")}
    c = CURVES["crosses"]
    (lo2, m2, hi2), (lo4, m4, hi4) = band(c[2]), band(c[4])
    r = got["crosses"]
    assert r["max_rate_state"] == "crosses"
    assert r["max_rate_req_s"] == pytest.approx(cross(2, m2, 4, m4))
    # the pessimistic band (ci_high) crosses first; the optimistic one (ci_low) later
    assert r["max_rate_ci_low"] == pytest.approx(cross(2, hi2, 4, hi4))
    assert r["max_rate_ci_high"] == pytest.approx(cross(2, lo2, 4, lo4))
    assert r["max_rate_ci_low"] < r["max_rate_req_s"] < r["max_rate_ci_high"]
    assert r["max_rate_meeting_req_s"] == 2.0 and r["rates_measured"] == 4
    b = got["below"]
    assert (b["max_rate_state"], b["max_rate_req_s"], b["max_rate_meeting_req_s"]) == \
        ("below", None, None)
    assert "lowest measured rate (1.0" in b["max_rate_note"]
    a = got["above"]
    assert (a["max_rate_state"], a["max_rate_req_s"], a["max_rate_meeting_req_s"]) == \
        ("above", None, 4.0)
    assert (a["max_rate_low_state"], a["max_rate_high_state"]) == ("above", "above")
    w = got["wavy"]
    (_, m1, _), (_, mw2, _) = band(CURVES["wavy"][1]), band(CURVES["wavy"][2])
    assert w["max_rate_state"] == "crosses"
    assert w["max_rate_req_s"] == pytest.approx(cross(1, m1, 2, mw2))
    assert w["max_rate_meeting_req_s"] == 1.0


# ------------------------------------------------------------------------------- crossover

# client tok/s per repeat: baseline 100 / 101 at every load; x's ratio to it per load
RATIOS = {"pays-then-loses": {1: (1.6, 1.601), 2: (1.3, 1.299), 4: (0.9, 0.901), 8: (0.7, 0.71)},
          "always": {1: (1.5, 1.52), 4: (1.2, 1.21)},
          "never": {1: (0.8, 0.82), 4: (0.6, 0.61)}}


@pytest.fixture(scope="module")
def cross_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("cross") / "c.duckdb"
    with store.writer(db) as con:
        for sweep, key in (("cc", "conc"), ("cr", "rate")):
            loads = sorted({load for r in RATIOS.values() for load in r})
            for load in loads:
                lv = {key: load if key == "conc" else float(load)}
                for rep, base in enumerate((100.0, 101.0)):
                    run(con, sweep, "baseline", rep, tok_s=base, **lv)
            for cfg, ratios in RATIOS.items():
                for load, rs in ratios.items():
                    lv = {key: load if key == "conc" else float(load)}
                    for rep, (base, ratio) in enumerate(zip((100.0, 101.0), rs)):
                        run(con, sweep, cfg, rep, tok_s=base * ratio, **lv)
    return db


@pytest.mark.parametrize("sweep,kind", [("cc", "concurrency"), ("cr", "request_rate")])
def test_crossover_where_speculation_stops_paying(cross_db, sweep, kind):
    stats = {(r["config"], r["load"]): r for r in one(cross_db, f"""
        SELECT config, coalesce(concurrency::DOUBLE, request_rate) AS load, speedup,
          speedup_ci_low, speedup_ci_high FROM config_stats
        WHERE sweep_name = ? AND NOT is_baseline""", [sweep])}
    got = {r["config"]: r for r in one(cross_db, "SELECT * FROM config_crossover "
                                                 "WHERE sweep_name = ?", [sweep])}
    assert {r["load_kind"] for r in got.values()} == {kind}
    # the speedups themselves: paired geometric means of the ratios (config_stats' definition)
    s2 = stats[("pays-then-loses", 2.0)]
    assert s2["speedup"] == pytest.approx(math.sqrt(1.3 * 1.299))
    s4 = stats[("pays-then-loses", 4.0)]
    # narrow intervals: both bands are above 1 at load 2 and below at 4 (so all three cross there)
    assert s2["speedup_ci_low"] > 1 and s4["speedup_ci_high"] < 1
    r = got["pays-then-loses"]
    assert r["crossover_state"] == "crosses" and r["loads_measured"] == 4
    ln = math.log
    assert r["crossover_load"] == pytest.approx(cross(2, ln(s2["speedup"]), 4, ln(s4["speedup"])))
    # the low band (ci_low) falls through 1 first, the high band last
    assert r["crossover_ci_low"] == pytest.approx(
        cross(2, ln(s2["speedup_ci_low"]), 4, ln(s4["speedup_ci_low"])))
    assert r["crossover_ci_high"] == pytest.approx(
        cross(2, ln(s2["speedup_ci_high"]), 4, ln(s4["speedup_ci_high"])))
    assert r["crossover_ci_low"] < r["crossover_load"] < r["crossover_ci_high"]
    assert (got["always"]["crossover_state"], got["always"]["crossover_load"]) == ("above", None)
    assert "faster than the baseline at every measured" in got["always"]["crossover_note"]
    assert (got["never"]["crossover_state"], got["never"]["crossover_load"]) == ("below", None)


def test_rate_and_concurrency_levels_are_separate_groups_with_their_own_baselines(cross_db):
    rows = one(cross_db, """SELECT config, concurrency, request_rate, baseline_config,
                              baseline_match, repeats FROM config_stats
                            WHERE sweep_name = 'cr' AND config = 'always'""")
    assert sorted(r["request_rate"] for r in rows) == [1.0, 4.0]
    assert all(r["concurrency"] is None and r["baseline_config"] == "baseline"
               and r["baseline_match"] == "same-sweep" and r["repeats"] == 2 for r in rows)
    w = one(cross_db, "SELECT request_rate, winner FROM concurrency_winners "
                      "WHERE sweep_name = 'cr' ORDER BY request_rate")
    assert [x["request_rate"] for x in w] == [1.0, 2.0, 4.0, 8.0]


# ------------------------------------------------------------------------------- adaptive

def test_adaptive_repeats_stop_on_the_target_or_the_cap(cross_db):
    """Interval widths from config_stats: 'always' at c=1 ratios 1.5, 1.52 (wide with 2
    repeats: t(0.975, 1) = 12.7), so with a 5% target it needs more, unless at the cap;
    'pays-then-loses' (ratios within 0.1%) is narrow enough already."""
    with store.writer(cross_db) as con:
        targets(con, "cc", target_ci_width=0.05, max_repeats=2)
        targets(con, "cr", target_ci_width=10.0, max_repeats=5)
    rows = one(cross_db, "SELECT * FROM group_repeats ORDER BY sweep_name, config, "
                         "concurrency, request_rate")
    cs = {(r["sweep_name"], r["group_id"]): r for r in one(cross_db, "SELECT * FROM config_stats")}
    for r in rows:
        c = cs[(r["sweep_name"], r["group_id"])]
        if r["is_baseline"]:
            assert r["repeats_status"] == "baseline"
            continue
        width = (c["speedup_ci_high"] - c["speedup_ci_low"]) / c["speedup"]
        assert r["speedup_ci_width"] == pytest.approx(width)
        want = ("target" if width <= r["target_ci_width"] else
                "cap" if c["repeats"] >= r["max_repeats"] else "more")
        assert r["repeats_status"] == want
    status = {(r["sweep_name"], r["config"], r["repeats_status"]) for r in rows}
    assert {st for sw, cfg, st in status if sw == "cc" and cfg == "always"} == {"cap"}
    assert ("cc", "pays-then-loses", "target") in status
    assert {r["repeats_status"] for r in rows if r["sweep_name"] == "cr"} == {"baseline",
                                                                              "target"}
    with store.writer(cross_db) as con:
        targets(con, "cc", target_ci_width=0.05, max_repeats=6)
    assert {r["repeats_status"] for r in one(cross_db, "SELECT * FROM group_repeats WHERE "
                                             "sweep_name = 'cc' AND config = 'always'")} == {"more"}


# ------------------------------------------------------------------------------- categories

def test_accept_length_and_speedup_by_category(tmp_path):
    """Two repeats of x and its baseline at c=2, requests matched by index. chat requests:
    8 tokens in 4 / 2 verify steps; code: 8 in 8 / 4. e2e: baseline 200 (chat) 300 (code);
    x 100 / 150 in repeat 0 and 125 / 200 in repeat 1."""
    db = tmp_path / "k.duckdb"
    cats = ["chat", "code", "chat", "code"]
    with store.writer(db) as con:
        for rep, (x_chat, x_code) in enumerate([(100, 150), (125, 200)]):
            run(con, "k", "baseline", rep, conc=2, reqs=[
                dict(category=c, output_tokens=8, e2e_ms=200 if c == "chat" else 300)
                for c in cats])
            run(con, "k", "x", rep, conc=2, reqs=[
                dict(category=c, output_tokens=8, e2e_ms=x_chat if c == "chat" else x_code,
                     spec_verify_ct=(4 if i == 0 else 2) if c == "chat" else (8 if i == 1 else 4))
                for i, c in enumerate(cats)])
    got = {(r["config"], r["category"]): r for r in one(db, "SELECT * FROM category_stats")}
    chat, code = got[("x", "chat")], got[("x", "code")]
    assert (chat["repeats"], chat["requests"]) == (2, 4)
    assert chat["accept_len"] == pytest.approx(16 / 6)          # (8 + 8) / (4 + 2)
    assert code["accept_len"] == pytest.approx(16 / 12)         # (8 + 8) / (8 + 4)
    d = [math.log(200 / 100), math.log(200 / 125)]              # chat, per repeat
    assert chat["speedup_e2e"] == pytest.approx(math.exp(sum(d) / 2))
    half = 12.7062 * abs(d[0] - d[1]) / math.sqrt(2) / math.sqrt(2)   # t(0.975, 1) sd/sqrt(n)
    assert (chat["speedup_e2e_ci_low"], chat["speedup_e2e_ci_high"]) == pytest.approx(
        (math.exp(sum(d) / 2 - half), math.exp(sum(d) / 2 + half)))
    assert code["speedup_e2e"] == pytest.approx(
        math.exp((math.log(300 / 150) + math.log(300 / 200)) / 2))
    base = got[("baseline", "chat")]
    assert base["accept_len"] is None and base["speedup_e2e"] is None
