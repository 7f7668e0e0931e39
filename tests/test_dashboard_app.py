"""The dashboard's views under Streamlit's AppTest, on a real DuckDB built from sample_logs/.

The fixture ingests every sample log (one run per file) and adds a small sweep by hand: a baseline
and three EAGLE-3 configs at concurrency 1 and 4, three repeats each, scoped to the matching sample
log (so accept length comes from real decode windows), with client tok/s (repeat 0 the table below,
repeats 1 and 2 scaled by REPEAT_NOISE), latency percentiles, per-request acceptance histograms
(repeat 0) whose expected sums are written out below, and one `specwatch tail` alert.

Expected speedups, intervals, verdicts and winners are worked out by hand below (EXPECT).
"""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from specwatch.logs import ingest
from specwatch.db import query, store

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "dashboards" / "app.py"
SAMPLES = ROOT / "sample_logs"
SWEEP = "eagle3-llama8b"

# config -> (sample log it is scoped to, {concurrency: client output tok/s}, histogram per request)
SWEEP_CONFIGS = {
    "baseline": ("sglang-0.5.23-llama8b-baseline.log", {1: 100.0, 4: 380.0}, None),
    "eagle3-s3k1": ("sglang-0.5.23-llama8b-eagle3-s3k1.log", {1: 190.0, 4: 560.0}, [10, 20, 30, 40]),
    "eagle3-s5k4": ("sglang-0.5.23-llama8b-eagle3-s5k4.log", {1: 210.0, 4: 342.0},
                    [5, 10, 15, 20, 25, 30]),
    "eagle3-wrong-aux": ("sglang-0.5.23-llama8b-eagle3-wrong-aux-ids.log", {1: 88.0, 4: 300.0},
                         [90, 8, 2, 0]),
}
REQUESTS_PER_RUN = 3   # measured requests per run, each with the histogram above (+ one warm-up)
REPEATS = 3
# tok/s of repeat i = the table's value x factor i (baseline and speculative configs drift apart, so
# the paired log-ratio interval is not degenerate)
REPEAT_NOISE = {"baseline": (1.0, 1.02, 0.98), "spec": (1.0, 0.99, 1.01)}


def _hand_speedup(spec_tok_s: float, base_tok_s: float) -> tuple[float, float, float]:
    """Welch t interval on the log scale (README, "Reading the report"; the fixture's runs have no
    sampling fingerprint, so the match is same-sweep+sampling-unknown, not paired), by hand:
    speedup = exp(mean ln x − mean ln y), se² = sd(ln x)²/3 + sd(ln y)²/3, Welch df = 2.9 -> 2,
    ci = speedup · exp(∓ t(0.975, 2) · se)."""
    import math
    import statistics
    lx = [math.log(spec_tok_s * a) for a in REPEAT_NOISE["spec"]]
    ly = [math.log(base_tok_s * b) for b in REPEAT_NOISE["baseline"]]
    vx, vy = statistics.variance(lx) / 3, statistics.variance(ly) / 3
    df = (vx + vy) ** 2 / (vx ** 2 / 2 + vy ** 2 / 2)
    assert 2 <= df < 3
    sp = math.exp(statistics.mean(lx) - statistics.mean(ly))
    half = 4.3027 * math.sqrt(vx + vy)
    return sp, sp * math.exp(-half), sp * math.exp(half)


# (config, concurrency) -> (speedup, ci_low, ci_high, verdict)
EXPECT = {}
for _cfg, (_log, _tok, _h) in {
        "eagle3-s3k1": (None, {1: 190.0, 4: 560.0}, None),
        "eagle3-s5k4": (None, {1: 210.0, 4: 342.0}, None),
        "eagle3-wrong-aux": (None, {1: 88.0, 4: 300.0}, None)}.items():
    for _c, _x in _tok.items():
        _sp, _lo, _hi = _hand_speedup(_x, {1: 100.0, 4: 380.0}[_c])
        EXPECT[(_cfg, _c)] = (_sp, _lo, _hi, "pays" if _lo > 1 else "loses" if _hi < 1 else "unclear")
# c1: s5k4 [1.99, 2.22] and s3k1 [1.80, 2.01] overlap: no winner; c4: s3k1 [1.39, 1.55] lies above
# every other interval (s5k4 and wrong-aux lose, the baseline is [1, 1]): s3k1 wins
WINNERS = {1: None, 4: "eagle3-s3k1"}


def sweep_run_id(config: str, conc: int, repeat: int = 0) -> str:
    return f"{SWEEP}/{config}/c{conc}" + (f"/r{repeat}" if repeat else "")


def build_fixture_db(path: Path) -> Path:
    """sample_logs/ ingested, plus the hand-made sweep above. Returns `path`."""
    ingest.ingest_paths(path, [str(SAMPLES)])
    with store.writer(path) as con:
        sources = dict(con.execute(
            "SELECT r.run_id, rs.source_id FROM runs r JOIN run_sources rs USING (run_id)").fetchall())
        t0 = dt.datetime(2026, 11, 1, 12, 0, 0)
        for i, (config, (log, tok_s, hist)) in enumerate(SWEEP_CONFIGS.items()):
            for conc, out0 in tok_s.items():
              for rep, factor in enumerate(REPEAT_NOISE["baseline" if hist is None else "spec"]):
                rid, out = sweep_run_id(config, conc, rep), out0 * factor
                store.upsert_run(con, {
                    "run_id": rid, "run_name": f"{config}-c{conc}" + (f"-r{rep}" if rep else ""),
                    "origin": "sweep",
                    "created_at": t0 + dt.timedelta(minutes=10 * i + conc, seconds=rep),
                    "started_at": t0 + dt.timedelta(minutes=10 * i + conc, seconds=rep),
                    "sweep_name": SWEEP, "config_name": config, "engine": "sglang",
                    "is_baseline": hist is None, "concurrency": conc, "repeat_idx": rep,
                    "status": "ok", "requests_ok": REQUESTS_PER_RUN, "requests_failed": 0,
                    "output_tok_s": out, "ttft_ms_p50": 40.0 * conc, "ttft_ms_p99": 95.0 * conc,
                    "itl_ms_p50": 1000.0 / out * conc, "itl_ms_p99": 3000.0 / out * conc,
                    "tpot_ms_p50": 1000.0 / out0 * conc,
                })
                store.attach_source(con, rid, sources[log])
                if rep:
                    continue
                n = REQUESTS_PER_RUN + 1
                store.insert(con, "requests", {
                    "run_id": [rid] * n, "request_idx": list(range(n)),
                    "is_warmup": [True] + [False] * REQUESTS_PER_RUN, "success": [True] * n,
                    "output_tokens": [128] * n, "ttft_ms": [40.0] * n,
                    "spec_accept_histogram": [[999] * len(hist) if hist else None]  # warm-up: ignored
                    + [hist] * REQUESTS_PER_RUN,
                })
        # A failed run: the findings view must say so.
        store.upsert_run(con, {"run_id": sweep_run_id("eagle3-s8k8", 4), "run_name": "eagle3-s8k8-c4",
                               "origin": "sweep", "sweep_name": SWEEP, "config_name": "eagle3-s8k8",
                               "concurrency": 4, "status": "failed", "speculative_algorithm": "EAGLE3",
                               "failure_reason": "server exited 1 before ready: CUDA out of memory"})
        store.insert(con, "alerts", {
            "run_id": [sweep_run_id("eagle3-wrong-aux", 1)], "source_id": [sources[
                "sglang-0.5.23-llama8b-eagle3-wrong-aux-ids.log"]], "byte_offset": [1234],
            "line_no": [17], "path": ["/logs/wrong-aux.log"], "dp_rank": [0],
            "rule": ["low_accept_len"], "severity": ["warning"], "value": [1.1], "threshold": [1.5],
            "windows": [3], "ts": [t0], "raised_at": [t0],
            "message": ["accept length 1.10 < 1.5 for 3 consecutive windows"]})
    return path


@pytest.fixture(scope="module")
def fixture_db(tmp_path_factory) -> Path:
    return build_fixture_db(tmp_path_factory.mktemp("dash") / "dash.duckdb")


@pytest.fixture
def app(fixture_db, monkeypatch):
    """Render the dashboard on the fixture database, optionally on one view (tab)."""
    monkeypatch.setenv("SPECWATCH_DB", str(fixture_db))

    def make(view: str | None = None, db: Path | None = None) -> AppTest:
        if db is not None:
            monkeypatch.setenv("SPECWATCH_DB", str(db))
        at = AppTest.from_file(str(APP), default_timeout=60)
        if view:
            at.query_params["view"] = view
        return at.run()
    return make


def charts(at: AppTest) -> dict[str, dict]:
    """Every Altair chart on the page by its `usermeta.chart` name: its spec and its datasets."""
    from streamlit import dataframe_util
    out = {}
    for node in at.get("vega_lite_chart"):
        spec = json.loads(node.proto.spec)
        data = {d.name: dataframe_util.convert_arrow_bytes_to_pandas_df(d.data.data)
                for d in node.proto.datasets}
        out[spec["usermeta"]["chart"]] = {"spec": spec, "data": list(data.values())}
    return out


def table_with(at: AppTest, column: str):
    """The (first) dataframe on the page that has this column."""
    for df in at.dataframe:
        if column in df.value.columns:
            return df.value
    raise AssertionError(f"no dataframe with column {column!r}")


def healthy(at: AppTest) -> None:
    """No exception, and nothing on the page speaks of a lock or a traceback."""
    assert not at.exception, [e.value for e in at.exception]
    shown = " ".join(str(e.value) for e in [*at.error, *at.warning, *at.info, *at.caption])
    assert "lock" not in shown.lower() and "Traceback" not in shown


def stats_rows(at: AppTest) -> pd.DataFrame:
    """Every Compare table (one per sweep and concurrency) stacked, in page order."""
    frames = [df.value for df in at.dataframe if "speedup_text" in df.value.columns]
    assert frames, "no Compare table"
    return pd.concat(frames, ignore_index=True)


def test_compare_groups_by_concurrency_sorted_by_speedup_with_verdicts_and_winner(app, fixture_db):
    at = app()
    healthy(at)
    heads = [m.value for m in at.markdown if m.value.startswith("**sweep")]
    assert heads == [f"**sweep `{SWEEP}` · concurrency 1** — no clear winner: eagle3-s5k4 and "
                     "eagle3-s3k1 overlap",
                     f"**sweep `{SWEEP}` · concurrency 4** — eagle3-s3k1 wins: its interval lies "
                     "above every other config's"]
    tables = [df.value for df in at.dataframe if "speedup_text" in df.value.columns]
    sweep_tables = tables[-2:]           # the ingested logs' table comes first
    for conc, t in zip((1, 4), sweep_tables):
        spec = t[~t["verdict_shown"].isin(["baseline", "⚠ failed"])]
        names = [c.removeprefix("🏆 ") for c in spec["config_shown"]]
        want = sorted((c for c, k in EXPECT if k == conc), key=lambda c: -EXPECT[(c, conc)][0])
        assert names == want                                        # sorted by speedup
        for name, text, verdict in zip(names, spec["speedup_text"], spec["verdict_shown"]):
            sp, lo, hi, v = EXPECT[(name, conc)]
            assert text == f"{sp:.2f}× [{lo:.2f}, {hi:.2f}]"
            assert verdict.endswith(v)
        assert t["config_shown"].iloc[-1] == "baseline"            # the baseline closes the group
        winners = [c for c in t["config_shown"] if c.startswith("🏆 ")]
        assert winners == ([f"🏆 {WINNERS[conc]}"] if WINNERS[conc] else [])
    # the defaults fit: ten columns, none wider than its content needs
    assert list(sweep_tables[0].columns) == ["config_shown", "verdict_shown", "speedup_text",
                                             "tok_s_text", "accept_len", "accept_rate",
                                             "per_user_tok_s", "ttft_ms_p50_mean", "repeats",
                                             "baseline_match"]
    # numbers are config_stats' own
    want = {(r["config"], r["concurrency"]): r for r in query.stats_report(fixture_db).configs.dicts()}
    for conc, t in zip((1, 4), sweep_tables):
        for row in t.to_dict("records"):
            src = want[(row["config_shown"].removeprefix("🏆 "), conc)]
            assert row["repeats"] == (3 if src["verdict"] != "failed" else 0)
            assert (src["accept_len"] is None and pd.isna(row["accept_len"])) or \
                row["accept_len"] == pytest.approx(src["accept_len"])
    assert [b.proto.label for b in at.get("download_button")] == ["Download CSV"]
    assert any("lose or failed" in w.value and "eagle3-wrong-aux @c1" in w.value for w in at.warning)


def test_compare_column_help_is_the_readme_glossary(app):
    import re
    at = app()
    node = [n for n in at.dataframe if "speedup_text" in n.value.columns][-1]
    cfg = json.loads(node.proto.columns)
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Reading the report", 1)[1]
    rows = dict(re.findall(r"^\| ([^|]+?) \| (.+?) \|$", section, flags=re.M))
    assert cfg["verdict_shown"]["help"] == rows["verdict"].replace("`", "").replace("**", "")
    assert cfg["speedup_text"]["help"] == rows["speedup [95% CI]"].replace("`", "")
    assert cfg["accept_len"]["help"].startswith("tokens emitted per target forward pass")
    for col, c in cfg.items():
        assert c.get("hidden") or c.get("help"), f"column {col} has no help text"


def test_compare_all_columns_filter_and_csv(app):
    at = app()
    at.toggle(key="cmp_all").set_value(True).run()
    healthy(at)
    t = stats_rows(at)
    for col in ("speedup_ci_low", "speedup_method", "output_tok_s_cv", "verdict_reason",
                "baseline_config", "accept_len_request_weighted", "gen_throughput_tok_s_mean"):
        assert col in t.columns
    at.text_input(key="cmp_filter").input("s5k4").run()
    t = stats_rows(at)
    assert {c.removeprefix("🏆 ") for c in t["config_shown"]} == {
        "sglang-0.5.23-llama8b-eagle3-s5k4.log", "eagle3-s5k4"}
    at.text_input(key="cmp_filter").input("").run()
    at.toggle(key="cmp_losing").set_value(True).run()
    t = stats_rows(at)
    assert set(t["verdict_shown"]) <= {"❌ loses", "⚠ failed"}
    assert {"eagle3-wrong-aux", "eagle3-s8k8"} <= set(t["config_shown"])


def test_sidebar_picks_sweeps_and_runs(app):
    at = app()
    assert at.multiselect(key="scopes").options == ["(ingested logs)", SWEEP]
    at.multiselect(key="scopes").set_value([SWEEP]).run()
    healthy(at)
    assert {c.removeprefix("🏆 ") for c in stats_rows(at)["config_shown"]} == {
        "baseline", "eagle3-s3k1", "eagle3-s5k4", "eagle3-wrong-aux", "eagle3-s8k8"}
    at.multiselect(key="runs").set_value([sweep_run_id("eagle3-s3k1", 1),
                                          sweep_run_id("baseline", 1)]).run()
    t = stats_rows(at)
    assert sorted(t["config_shown"]) == ["baseline", "eagle3-s3k1"]


def test_accept_scatter_keeps_accept_length_rate_and_speedup(app):
    at = app()
    c = charts(at)["scatter"]
    points = c["data"][0]
    enc = c["spec"]["layer"][0]["encoding"]
    assert (enc["x"]["field"], enc["y"]["field"], enc["color"]["field"]) == (
        "accept_rate", "accept_len", "speedup")
    got = dict(zip(points["label"], points["speedup"]))
    assert got["eagle3-s5k4 @c1"] == pytest.approx(EXPECT[("eagle3-s5k4", 1)][0])
    assert "baseline @c1" not in got


def test_concurrency_view_plots_speedup_with_interval_bars(app):
    at = app("Concurrency")
    healthy(at)
    c = charts(at)["concurrency"]
    data = [d for d in c["data"] if "config" in d.columns][0]
    assert set(data["config"]) == {"eagle3-s3k1", "eagle3-s5k4", "eagle3-wrong-aux"}
    bars = [layer for layer in c["spec"]["layer"]
            if layer.get("encoding", {}).get("y2", {}).get("field") == "speedup_ci_high"]
    assert bars and bars[0]["encoding"]["y"]["field"] == "speedup_ci_low"
    for row in data.to_dict("records"):
        sp, lo, hi, _ = EXPECT[(row["config"], int(row["concurrency"]))]
        assert (row["speedup_ci_low"], row["speedup_ci_high"]) == (pytest.approx(lo), pytest.approx(hi))
    t = table_with(at, "loses at").set_index("config")
    assert t.loc["eagle3-s3k1", "pays at"] == "1, 4" and t.loc["eagle3-s3k1", "loses at"] == ""
    assert t.loc["eagle3-s5k4", "loses at"] == "4" and t.loc["eagle3-wrong-aux", "loses at"] == "1, 4"


def test_concurrency_view_draws_the_recommended_schedule(app):
    """Over the speedup chart: `specwatch recommend`'s schedule for the sweep's engine (sglang).
    By hand: s5k4 is a tree (no schedule serves it); s3k1's interval lies above 1 at both loads
    (EXPECT) and wrong-aux never beats it: k=3 at c=1 and c=4, with s3k1's speedup as the gain."""
    at = app("Concurrency")
    healthy(at)
    c = charts(at)["concurrency"]
    sched = [d for d in c["data"] if "steps" in d.columns]
    assert len(sched) == 1
    got = sched[0].sort_values("concurrency")
    assert got["concurrency"].tolist() == [1, 4] and got["steps"].tolist() == [3, 3]
    assert got["config"].tolist() == ["eagle3-s3k1", "eagle3-s3k1"]
    for row in got.to_dict("records"):
        sp, lo, hi, _ = EXPECT[("eagle3-s3k1", int(row["concurrency"]))]
        assert (row["speedup"], row["speedup_ci_low"], row["speedup_ci_high"]) == (
            pytest.approx(sp), pytest.approx(lo), pytest.approx(hi))
    assert any(layer.get("mark", {}).get("type") == "text"
               and layer["encoding"]["text"]["field"] == "label" for layer in c["spec"]["layer"])
    t = table_with(at, "why")
    assert t["k"].tolist() == [3, 3] and t["batch size"].tolist() == ["1", "2+"]
    assert json.loads(at.get("code")[0].value) == {"1": {"candidate_steps": [3]}}
    at.selectbox(key="sched_engine").set_value("vllm").run()
    healthy(at)
    assert '"num_speculative_tokens_per_batch_size": [[1, 256, 3]]' in at.get("code")[0].value


def test_pareto_plots_per_user_against_total_tok_s_baseline_included(app):
    at = app("Pareto")
    healthy(at)
    data = charts(at)["pareto"]["data"][0]
    sweep = data[data["sweep_name"] == SWEEP].set_index(["config", "concurrency"])
    assert set(sweep.index.get_level_values(0)) == {"baseline", "eagle3-s3k1", "eagle3-s5k4",
                                                    "eagle3-wrong-aux"}
    # per-user tok/s = 1000 / TPOT p50; the fixture's TPOT is 1000 / tok/s x concurrency
    assert sweep.loc[("eagle3-s5k4", 1), "per_user_tok_s"] == pytest.approx(210.0)
    assert sweep.loc[("baseline", 4), "per_user_tok_s"] == pytest.approx(95.0)
    # frontier: nothing beats s5k4@c1 on per-user speed, nor s3k1@c4 on total tok/s
    front = set(data[data["frontier"] == "Pareto frontier"][["config", "concurrency"]].itertuples(
        index=False, name=None))
    assert front == {("eagle3-s5k4", 1), ("eagle3-s3k1", 4)}
    assert any("Pareto frontier" in c.value and "eagle3-s3k1 @c4" in c.value for c in at.caption)


def test_time_series_defaults_to_the_latest_sweep_in_seconds_since_start(app, fixture_db):
    at = app("Time series")
    healthy(at)
    picked = at.multiselect(key="ts_runs_pick").value
    assert picked == [sweep_run_id(c, k) for k in (1, 4)
                      for c in ("baseline", "eagle3-s3k1", "eagle3-s5k4", "eagle3-wrong-aux")]
    c = charts(at)
    assert c["chart_ts_accept"]["spec"]["layer"][0]["encoding"]["x"]["title"] == \
        "seconds since the run's start"
    data = c["chart_ts_accept"]["data"][0]
    # x = log time minus runs.started_at, in seconds (ms kept)
    rid = sweep_run_id("eagle3-wrong-aux", 1)
    want = query.run_sql(fixture_db, """SELECT date_diff('millisecond', r.started_at, d.ts) / 1000.0
        FROM decode_windows_scoped d JOIN runs r USING (run_id) WHERE run_id = ?
        ORDER BY d.byte_offset""", [rid]).rows
    got = data[data["run_id"] == rid]
    assert got["t_s"].tolist() == [w[0] for w in want] and len(want) > 5
    assert got["accept_len"].between(1.0, 1.3).all()
    assert "gen_throughput_tok_s" in c["chart_ts_tput"]["data"][0].columns
    # an ingested DP=2 log: drawn per rank, from its first window
    at.multiselect(key="ts_runs_pick").set_value(["sglang-0.5.9-dp2-tp8-eagle3.log"]).run()
    c = charts(at)["chart_ts_accept"]
    data = c["data"][0]
    assert sorted(data["series"].unique()) == ["sglang-0.5.9-dp2-tp8-eagle3.log · dp0",
                                               "sglang-0.5.9-dp2-tp8-eagle3.log · dp1"]
    assert data["t_s"].min() == 0
    assert "first decode window" in c["spec"]["layer"][0]["encoding"]["x"]["title"]


def test_acceptance_histogram_sentence_and_positions(app):
    at = app("Acceptance")
    healthy(at)
    assert "histogram" in charts(at)
    t = table_with(at, "label").set_index("label")
    # three measured requests per run (repeat 0); the warm-up's [999, ...] is left out
    assert t.loc["eagle3-s3k1 @c4", ["0", "1", "2", "3"]].tolist() == [30, 60, 90, 120]
    assert t.loc["eagle3-wrong-aux @c1", ["0", "1", "2", "3"]].tolist() == [270, 24, 6, 0]
    assert t.loc["eagle3-s5k4 @c1", "5"] == 90
    # 270 of 300 steps accept nothing (90%), s3k1 30 of 300 (10%), s5k4 15 of 315 (5%)
    sentence = [m.value for m in at.markdown if "verify steps accept no draft token" in m.value]
    assert sentence and sentence[0].startswith(
        "eagle3-wrong-aux @c1: 90% of verify steps accept no draft token, against 90% for "
        "eagle3-wrong-aux @c4, 10% for eagle3-s3k1")
    assert "5% for eagle3-s5k4 @c1" in sentence[0]
    pos = charts(at)["positions"]["data"][0].set_index(["label", "position"])
    # position k accepted in the steps accepting >= k drafts: s3k1 [10, 20, 30, 40] -> 90/100 ...
    assert pos.loc[("eagle3-s3k1 @c1", 1), "accepted_share"] == pytest.approx(0.9)
    assert pos.loc[("eagle3-s3k1 @c1", 3), "accepted_share"] == pytest.approx(0.4)
    assert pos.loc[("eagle3-wrong-aux @c1", 1), "accepted_share"] == pytest.approx(0.1)


def test_acceptance_per_position_from_vllm_logs(app):
    at = app("Acceptance")
    at.multiselect(key="scopes").set_value(["(ingested logs)"]).run()
    healthy(at)
    pos = charts(at)["positions"]["data"][0]
    vllm = pos[pos["label"] == "vllm-0.11-eagle3.log"]
    assert set(vllm["basis"]) == {"vllm log"} and len(vllm) == 3
    assert vllm["accepted_share"].is_monotonic_decreasing


def test_findings_are_doctors_with_its_counts_failed_runs_and_alerts(app, fixture_db):
    from specwatch.diagnose import doctor, finding
    at = app("Findings")
    healthy(at)
    findings, checked = doctor.diagnose(fixture_db)
    shown = [x.value for x in [*at.error, *at.warning, *at.info]]
    for f in findings:       # every finding, with its code, title and next step
        assert any(f"**{f.run}** · `{f.code}` ({f.severity}) — {f.title}" in s
                   and f"next: {f.suggestion}" in s for s in shown), (f.run, f.code)
    n = {s: sum(f.severity == s for f in findings) for s in finding.SEVERITY_ORDER}
    assert [m.value for m in at.metric] == [str(len(checked)), str(n["error"]),
                                            str(n["warning"]), str(n["info"])]
    # the counts are doctor's own summary line
    assert (f"{len(checked)} speculative config(s) checked: {n['error']} error(s), "
            f"{n['warning']} warning(s), {n['info']} note(s)") in finding.render_text(findings, checked)
    wrong = [s for s in shown if "**eagle3-wrong-aux-c1** · `accept_len_near_1`" in s]
    assert wrong and "accept_len=1.11" in wrong[0]
    assert any("eagle3-s8k8 @c4" in e.value and "CUDA out of memory" in e.value for e in at.error)
    alerts = table_with(at, "rule")
    assert alerts["rule"].tolist() == ["low_accept_len"]
    assert alerts["run"].tolist() == ["eagle3-wrong-aux"]


def test_sql_box_is_read_only_and_row_capped(app, fixture_db):
    before = query.run_sql(fixture_db, "SELECT count(*) FROM runs").rows[0][0]
    at = app("SQL")
    healthy(at)
    assert "accept_len" in table_with(at, "accept_len").columns      # the default query ran
    at.text_area(key="sql_text").input("SELECT run_id FROM runs ORDER BY run_id").run()
    at.number_input(key="sql_cap").set_value(3).run()
    at.button(key="sql_run").click().run()
    t = table_with(at, "run_id")
    assert len(t) == 3 and t["run_id"].tolist() == sorted(t["run_id"].tolist())
    assert any("cut at the cap of 3" in c.value for c in at.caption)
    at.text_area(key="sql_text").input("DELETE FROM runs").run()
    at.button(key="sql_run").click().run()
    assert any("read-only" in e.value for e in at.error)
    at.text_area(key="sql_text").input("SELECT count(*) AS n FROM runs").run()
    at.button(key="sql_run").click().run()
    assert table_with(at, "n")["n"].tolist() == [before]              # nothing was deleted


def test_sql_box_bounds_what_it_parses_and_names_every_statement(app):
    """The box takes at most query.MAX_SQL_CHARS (run_sql refuses longer text as well:
    tests/test_sql_bounds.py); a statement type DuckDB's Python enum cannot name is one error
    line, not a traceback (issue 26)."""
    at = app("SQL")
    healthy(at)
    assert at.text_area(key="sql_text").max_chars == query.MAX_SQL_CHARS
    at.text_area(key="sql_text").input("SELECT '" + "x" * 200_000 + "'").run()
    assert len(at.text_area(key="sql_text").value) <= query.MAX_SQL_CHARS   # not taken
    at.text_area(key="sql_text").input("UPDATE EXTENSIONS").run()
    at.button(key="sql_run").click().run()
    assert not at.exception, at.exception
    assert [e.value for e in at.error] == [
        "UPDATE statements are not allowed: specwatch sql is read-only and runs SELECT/WITH, "
        "DESCRIBE, SHOW, SUMMARIZE, EXPLAIN or a read-only PRAGMA only (the store is written only "
        "by ingest/tail/run-sweep)"]


def test_missing_database_waits_quietly(app, tmp_path):
    at = app(db=tmp_path / "not-yet.duckdb")
    assert not at.exception and not at.error
    assert any("No specwatch data" in i.value for i in at.info)
    assert not (tmp_path / "not-yet.duckdb").exists()               # a reader never creates it


def test_reads_wait_for_a_writer_instead_of_failing(app, fixture_db, tmp_path):
    """Another process holds the write lock for 1.5 s while the page renders."""
    import subprocess
    import sys
    import time
    ready = tmp_path / "locked"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import duckdb, pathlib, time\n"
        f"con = duckdb.connect({str(fixture_db)!r})\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(1.5)\ncon.close()\n")])
    try:
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert time.monotonic() < deadline and holder.poll() is None
            time.sleep(0.02)
        at = app()
        healthy(at)
        assert "eagle3-s3k1" in set(stats_rows(at)["config_shown"])
    finally:
        holder.wait(10)


@pytest.mark.slow
def test_writer_holding_past_the_read_wait_shows_last_data_and_a_quiet_note(app, fixture_db, tmp_path):
    """Longer than the reader's lock wait (store.READ_WAIT_S): last data stays, a note says why."""
    import subprocess
    import sys
    import time
    at = app()
    assert "eagle3-s3k1" in set(stats_rows(at)["config_shown"])
    ready = tmp_path / "locked"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import duckdb, pathlib, time\n"
        f"con = duckdb.connect({str(fixture_db)!r})\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        f"time.sleep({store.READ_WAIT_S + 4})\ncon.close()\n")])
    try:
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert time.monotonic() < deadline and holder.poll() is None
            time.sleep(0.02)
        at.run(timeout=60)
        assert not at.exception and not at.error
        assert "eagle3-s3k1" in set(stats_rows(at)["config_shown"])
        assert any("Waiting for the writer" in c.value for c in at.caption)
    finally:
        holder.wait(30)
