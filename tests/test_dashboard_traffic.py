"""The dashboard's Traffic view under Streamlit's AppTest, on a real DuckDB holding a rate sweep
with known numbers: goodput against the request rate, the max rate under the SLO and the
crossover with their intervals, and the per-category table. Expected values by hand: one
request per 4 s run, so a run's goodput is 0.25 requests/s when its request meets the SLO."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from specwatch.db import store
from test_slo_views import cross, run, targets

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "dashboards" / "app.py"
LIMIT = 100.0
# config -> {rate: (client tok/s ratio to the baseline, ttft per repeat)}; the baseline: 100 tok/s
PLAN = {
    "baseline": {1: (1.0, (50, 55)), 2: (1.0, (80, 85)), 4: (1.0, (200, 210))},
    "x": {1: (1.5, (30, 32)), 2: (1.2, (60, 62)), 4: (0.8, (150, 160))},
}


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("traffic") / "t.duckdb"
    with store.writer(path) as con:
        for cfg, plan in PLAN.items():
            for rate, (ratio, ttfts) in plan.items():
                for rep, t in enumerate(ttfts):
                    run(con, "tr", cfg, rep, rate=float(rate), tok_s=100.0 * ratio * (1 + rep / 1000),
                        reqs=[dict(ttft_ms=t, e2e_ms=t, category="chat", output_tokens=8,
                                   spec_verify_ct=None if cfg == "baseline" else 4),
                              dict(ttft_ms=t, e2e_ms=t * 2, category="code", output_tokens=8,
                                   spec_verify_ct=None if cfg == "baseline" else 2)])
        targets(con, "tr", slo_ttft_ms=LIMIT, slo_percentile=50)
    return path


def view(db: Path, monkeypatch) -> AppTest:
    monkeypatch.setenv("SPECWATCH_DB", str(db))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params["view"] = "Traffic"
    return at.run()


def chart(at: AppTest, name: str):
    from streamlit import dataframe_util
    for node in at.get("vega_lite_chart"):
        spec = json.loads(node.proto.spec)
        if spec["usermeta"]["chart"] == name:
            return [dataframe_util.convert_arrow_bytes_to_pandas_df(d.data.data)
                    for d in node.proto.datasets]
    raise AssertionError(f"no chart {name}")


def table(at: AppTest, column: str):
    for df in at.dataframe:
        if column in df.value.columns:
            return df.value
    raise AssertionError(f"no table with {column!r}")


def test_traffic_view_goodput_max_rate_crossover_and_categories(db, monkeypatch):
    at = view(db, monkeypatch)
    assert not at.exception, [e.value for e in at.exception]
    # goodput: a run's two requests share one ttft (p50 = it): both good when ttft <= 100
    data = next(d for d in chart(at, "goodput") if "goodput_req_s_mean" in d.columns)
    got = {(r.config, r.request_rate): r.goodput_req_s_mean for r in data.itertuples()}
    for cfg, plan in PLAN.items():
        for rate, (_, ttfts) in plan.items():
            assert got[(cfg, float(rate))] == pytest.approx(
                sum(2 / 4.0 for t in ttfts if t <= LIMIT) / len(ttfts))
    # max rate: margins ln(ttft / 100), mean over the two repeats, crossing 0 on ln(rate)
    m = lambda ts: sum(math.log(t / LIMIT) for t in ts) / len(ts)          # noqa: E731
    mr = table(at, "max rate under SLO (req/s)").set_index("config")
    b = PLAN["baseline"]
    assert float(mr.loc["baseline", "max rate under SLO (req/s)"]) == pytest.approx(
        cross(2, m(b[2][1]), 4, m(b[4][1])), rel=5e-3)   # shown to 3 digits
    x = PLAN["x"]
    assert float(mr.loc["x", "max rate under SLO (req/s)"]) == pytest.approx(
        cross(2, m(x[2][1]), 4, m(x[4][1])), rel=5e-3)
    # crossover: speedups 1.5, 1.2, 0.8 (ratios of the geometric means; repeat drift cancels)
    cr = table(at, "crossover").set_index("config")
    assert float(cr.loc["x", "crossover"]) == pytest.approx(
        cross(2, math.log(1.2), 4, math.log(0.8)), rel=5e-3)
    assert cr.loc["x", "load"] == "request_rate"
    sp = next(d for d in chart(at, "speedup_rate") if "speedup" in d.columns)
    assert sorted(sp["request_rate"]) == [1.0, 2.0, 4.0]
    cats = table(at, "category").set_index(["category", "request_rate"])
    assert cats.loc[("chat", 1.0), "accept_len"] == pytest.approx(2.0)     # 8 / 4
    assert cats.loc[("code", 1.0), "accept_len"] == pytest.approx(4.0)     # 8 / 2
    # e2e speedup by category: each request against the same request of the baseline
    assert cats.loc[("chat", 2.0), "speedup_e2e"] == pytest.approx(
        math.exp((math.log(80 / 60) + math.log(85 / 62)) / 2))


def test_traffic_view_without_rates_says_what_it_needs(tmp_path, monkeypatch):
    path = tmp_path / "c.duckdb"
    with store.writer(path) as con:
        run(con, "cl", "baseline", 0, conc=1)
    at = view(path, monkeypatch)
    assert not at.exception
    assert any("request rates and an [slo]" in str(i.value) for i in at.info)


def test_traffic_view_warns_of_a_group_whose_sends_were_off_schedule(tmp_path, monkeypatch):
    """Due every 100 ms; one repeat sent a late burst (0, 150, 210, 300: gaps CV 0.46 against
    the schedule's 0), the other on time: 1 of 2 runs off schedule; the on-time group: none."""
    path = tmp_path / "s.duckdb"
    with store.writer(path) as con:
        for cfg, rep, sends in (("x", 0, (0, 150, 210, 300)), ("x", 1, (0, 100, 200, 300)),
                                ("baseline", 0, (0, 100, 200, 300))):
            run(con, "sc", cfg, rep, rate=10.0, reqs=[
                dict(send_offset_ms=s, arrival_offset_ms=100 * i, ttft_ms=10, e2e_ms=20)
                for i, s in enumerate(sends)])
        targets(con, "sc", slo_ttft_ms=LIMIT, slo_percentile=50)
    at = view(path, monkeypatch)
    assert not at.exception, [e.value for e in at.exception]
    warned = [str(w.value) for w in at.warning if "Off schedule" in str(w.value)]
    assert len(warned) == 1 and warned[0].startswith("Off schedule: x at 10/s, 1 of 2 runs: ")
    assert "gaps CV 0.46 against 0.00" in warned[0]
