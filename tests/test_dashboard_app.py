"""The dashboard's views under Streamlit's AppTest, on a real DuckDB built from sample_logs/.

The fixture ingests every sample log (one run per file) and adds a small sweep by hand: a baseline
and three EAGLE-3 configs at concurrency 1 and 4, each scoped to the matching sample log (so accept
length comes from real decode windows), with client tok/s, latency percentiles and per-request
acceptance histograms whose expected sums are written out below.
"""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from specwatch import ingest, query, store

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


def sweep_run_id(config: str, conc: int) -> str:
    return f"{SWEEP}/{config}/c{conc}"


def build_fixture_db(path: Path) -> Path:
    """sample_logs/ ingested, plus the hand-made sweep above. Returns `path`."""
    ingest.ingest_paths(path, [str(SAMPLES)])
    with store.writer(path) as con:
        sources = dict(con.execute(
            "SELECT r.run_id, rs.source_id FROM runs r JOIN run_sources rs USING (run_id)").fetchall())
        t0 = dt.datetime(2026, 11, 1, 12, 0, 0)
        for i, (config, (log, tok_s, hist)) in enumerate(SWEEP_CONFIGS.items()):
            for conc, out in tok_s.items():
                rid = sweep_run_id(config, conc)
                store.upsert_run(con, {
                    "run_id": rid, "run_name": f"{config}-c{conc}", "origin": "sweep",
                    "created_at": t0 + dt.timedelta(minutes=10 * i + conc),
                    "sweep_name": SWEEP, "config_name": config, "engine": "sglang",
                    "is_baseline": hist is None, "concurrency": conc, "repeat_idx": 0,
                    "status": "ok", "requests_ok": REQUESTS_PER_RUN, "requests_failed": 0,
                    "output_tok_s": out, "ttft_ms_p50": 40.0 * conc, "ttft_ms_p99": 95.0 * conc,
                    "itl_ms_p50": 1000.0 / out * conc, "itl_ms_p99": 3000.0 / out * conc,
                })
                store.attach_source(con, rid, sources[log])
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
                               "concurrency": 4, "status": "failed",
                               "failure_reason": "server exited 1 before ready: CUDA out of memory"})
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


def test_compare_table_lists_every_config_with_the_views_numbers(app, fixture_db):
    at = app()
    healthy(at)
    t = table_with(at, "accept_len")
    assert {"sglang-0.5.23-llama8b-eagle3-s3k1.log", "sglang-0.5.23-llama8b-eagle3-wrong-aux-ids.log",
            "vllm-0.11-eagle3.log", "baseline", "eagle3-s3k1", "eagle3-s5k4", "eagle3-wrong-aux",
            "eagle3-s8k8"} <= set(t["config"])
    wrong = t[t["config"] == "sglang-0.5.23-llama8b-eagle3-wrong-aux-ids.log"].iloc[0]
    assert wrong["accept_len"] == pytest.approx(1.11, abs=0.05)   # the sample's collapsed draft
    assert "low accept len" in wrong["flags"] and "slower than baseline" in wrong["flags"]
    # client speedup = the fixture's tok/s over the sweep baseline's at the same concurrency
    s3 = t[t["config"] == "eagle3-s3k1"].set_index("concurrency")
    assert s3.loc[1, "speedup_client"] == pytest.approx(190 / 100)
    assert s3.loc[4, "speedup_client"] == pytest.approx(560 / 380)
    assert s3.loc[4, "output_tok_s"] == 560.0 and s3.loc[4, "ttft_ms_p99"] == pytest.approx(380.0)
    assert s3.loc[4, "baseline"] == "baseline-c4"
    # every number shown is config_summary's own (the dashboard recomputes nothing)
    want = {(r["run_name"], r["concurrency"]): r for r in query.report(fixture_db).dicts()}
    for row in t.to_dict("records"):
        conc = None if pd.isna(row["concurrency"]) else int(row["concurrency"])
        src = want[(row["run_name"], conc)]
        for col in ("accept_len", "accept_rate", "gen_throughput_tok_s", "output_tok_s",
                    "speedup_gen", "speedup_client", "ttft_ms_p50", "itl_ms_p99", "status"):
            got, exp = row[col], src[col]
            assert (exp is None and pd.isna(got)) or got == pytest.approx(exp), (row["config"], col)
    assert [b.proto.label for b in at.get("download_button")] == ["Download CSV"]
    assert any("6 config(s) flagged" in w.value for w in at.warning)


def test_compare_table_filters_and_sorts(app):
    at = app()
    at.text_input(key="cmp_filter").input("s5k4").run()
    healthy(at)
    t = table_with(at, "accept_len")
    assert set(t["config"]) == {"sglang-0.5.23-llama8b-eagle3-s5k4.log", "eagle3-s5k4"}

    at.text_input(key="cmp_filter").input("").run()
    at.selectbox(key="cmp_sort").select("accept_len").run()
    t = table_with(at, "accept_len")
    shown = t["accept_len"].dropna().tolist()
    assert shown == sorted(shown, reverse=True) and len(shown) > 10
    at.toggle(key="cmp_desc").set_value(False).run()
    shown = table_with(at, "accept_len")["accept_len"].dropna().tolist()
    assert shown == sorted(shown) and shown[0] == pytest.approx(1.11, abs=0.05)

    at.multiselect(key="cmp_status").set_value(["failed"]).run()
    assert table_with(at, "accept_len")["config"].tolist() == ["eagle3-s8k8"]
    at.multiselect(key="cmp_status").set_value(["failed", "ok"]).run()
    at.toggle(key="cmp_flagged").set_value(True).run()
    assert set(table_with(at, "accept_len")["config"]) == {
        "sglang-0.5.23-llama8b-eagle3-wrong-aux-ids.log", "sglang-0.5.4-iter-eagle3.log",
        "eagle3-s5k4", "eagle3-wrong-aux", "eagle3-s8k8"}


def test_sidebar_picks_sweeps_and_runs(app):
    at = app()
    assert at.multiselect(key="scopes").options == ["(ingested logs)", SWEEP]
    at.multiselect(key="scopes").set_value([SWEEP]).run()
    healthy(at)
    assert set(table_with(at, "accept_len")["sweep_name"]) == {SWEEP}
    at.multiselect(key="runs").set_value([sweep_run_id("eagle3-s3k1", 1),
                                          sweep_run_id("baseline", 1)]).run()
    t = table_with(at, "accept_len")
    assert sorted(t["run_name"]) == ["baseline-c1", "eagle3-s3k1-c1"]


def test_accept_rate_vs_throughput_chart_marks_the_baseline(app):
    at = app()
    c = charts(at)["scatter"]
    points, *rest = c["data"]
    assert c["spec"]["layer"][0]["encoding"]["x"]["field"] == "accept_rate"
    assert c["spec"]["layer"][0]["encoding"]["y"]["field"] == "output_tok_s"   # client numbers exist
    # concurrency 1 by default: the three spec configs of the sweep, labelled
    assert sorted(points["label"]) == ["eagle3-s3k1 @c1", "eagle3-s5k4 @c1", "eagle3-wrong-aux @c1"]
    assert dict(zip(points["label"], points["output_tok_s"]))["eagle3-s5k4 @c1"] == 210.0
    assert any("text" in d.columns and "baseline @c1: 100 output tok/s" in d["text"].tolist()
               for d in rest)
    # server-side throughput: the ingested logs join the chart
    at.radio(key="scatter_metric").set_value("gen tok/s (server log)").run()
    points = charts(at)["scatter"]["data"][0]
    assert "sglang-0.5.23-llama8b-eagle3-s5k4.log" in set(points["label"])
    assert "sglang-0.5.23-llama8b-baseline.log" not in set(points["label"])   # a rule, not a point


def test_concurrency_view_shows_where_speculation_stops_paying(app):
    at = app("Concurrency")
    healthy(at)
    c = charts(at)["concurrency"]
    lines = [d for d in c["data"] if "config" in d.columns][0]
    assert set(lines["config"]) == {"eagle3-s3k1", "eagle3-s5k4", "eagle3-wrong-aux"}
    t = table_with(at, "stops paying at concurrency").set_index("config")
    assert pd.isna(t.loc["eagle3-s3k1", "stops paying at concurrency"])      # 1.9x, 1.47x
    assert t.loc["eagle3-s5k4", "stops paying at concurrency"] == 4          # 2.1x, then 342/380
    assert t.loc["eagle3-wrong-aux", "stops paying at concurrency"] == 1     # never paid
    assert t.loc["eagle3-s5k4", "best speedup"] == pytest.approx(2.1)


def test_time_series_plots_decode_windows_of_several_runs(app, fixture_db):
    at = app("Time series")
    healthy(at)
    picked = at.multiselect(key="ts_runs_pick").value
    assert "sglang-0.5.23-llama8b-eagle3-wrong-aux-ids.log" in picked and len(picked) >= 2
    c = charts(at)
    data = c["chart_ts_accept"]["data"][0]
    assert set(data["run_id"]) == set(picked)
    # one point per stored window (far below the thinning limit), values as stored
    n = query.run_sql(fixture_db, "SELECT count(*) FROM decode_windows_scoped WHERE run_id = ?",
                      ["sglang-0.5.23-llama8b-eagle3-wrong-aux-ids.log"]).rows[0][0]
    wrong = data[data["run_id"] == "sglang-0.5.23-llama8b-eagle3-wrong-aux-ids.log"]
    assert len(wrong) == n and wrong["accept_len"].between(1.0, 1.3).all()
    assert "gen_throughput_tok_s" in c["chart_ts_tput"]["data"][0].columns
    at.radio(key="ts_x").set_value("wall clock").run()
    assert charts(at)["chart_ts_accept"]["spec"]["layer"][0]["encoding"]["x"]["field"] == "ts"
    # a DP=2 run is drawn per rank
    at.multiselect(key="ts_runs_pick").set_value(["sglang-0.5.9-dp2-tp8-eagle3.log"]).run()
    data = charts(at)["chart_ts_accept"]["data"][0]
    assert sorted(data["series"].unique()) == ["sglang-0.5.9-dp2-tp8-eagle3.log · dp0",
                                               "sglang-0.5.9-dp2-tp8-eagle3.log · dp1"]


def test_acceptance_histogram_sums_measured_requests(app):
    at = app("Acceptance")
    healthy(at)
    assert "histogram" in charts(at)
    t = table_with(at, "label").set_index("label")
    # three measured requests per run; the warm-up's [999, ...] is left out
    assert t.loc["eagle3-s3k1 @c4", ["0", "1", "2", "3"]].tolist() == [30, 60, 90, 120]
    assert t.loc["eagle3-wrong-aux @c1", ["0", "1", "2", "3"]].tolist() == [270, 24, 6, 0]
    assert t.loc["eagle3-s5k4 @c1", "5"] == 90


def test_acceptance_view_explains_when_no_histogram(app):
    at = app("Acceptance")
    at.multiselect(key="scopes").set_value(["(ingested logs)"]).run()
    healthy(at)
    assert any("No acceptance histogram" in i.value for i in at.info)


def test_findings_flag_broken_configs(app):
    at = app("Findings")
    healthy(at)
    errors = [e.value for e in at.error]
    assert any("eagle3-wrong-aux @c1" in e and "accept length 1.11" in e and
               "slower than its baseline `baseline-c1` (0.88×)" in e for e in errors)
    assert any("eagle3-s8k8 @c4" in e and "CUDA out of memory" in e for e in errors)
    warnings = [w.value for w in at.warning]
    assert any("eagle3-s5k4 @c4" in w and "0.90×" in w for w in warnings)
    assert not any("eagle3-s3k1" in x for x in errors + warnings)
    assert [m.value for m in at.metric] == ["4", "2", "3"]


def test_sql_box_is_read_only_and_row_capped(app):
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
    assert table_with(at, "n")["n"].tolist() == [19]                  # nothing was deleted


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
        assert "eagle3-s3k1" in set(table_with(at, "accept_len")["config"])
    finally:
        holder.wait(10)


@pytest.mark.slow
def test_writer_holding_past_the_read_wait_shows_last_data_and_a_quiet_note(app, fixture_db, tmp_path):
    """Longer than the reader's lock wait (store.READ_WAIT_S): last data stays, a note says why."""
    import subprocess
    import sys
    import time
    at = app()
    assert "eagle3-s3k1" in set(table_with(at, "accept_len")["config"])
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
        assert "eagle3-s3k1" in set(table_with(at, "accept_len")["config"])
        assert any("Waiting for the writer" in c.value for c in at.caption)
    finally:
        holder.wait(30)
