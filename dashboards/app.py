"""specwatch dashboard: compare speculative-decoding configs against their no-speculation baseline.

Start it with `specwatch dashboard --db FILE` (or `streamlit run dashboards/app.py -- --db FILE`; the
database also comes from env SPECWATCH_DB). Views: the config comparison table, accept rate against
throughput, speedup against concurrency, decode-window time series, the acceptance histogram,
findings (broken configs) and a read-only SQL box.

Every read goes through `specwatch.query.run_sql` (read-only, row-capped, time-limited, and it waits
while a writer holds the database), and every metric comes from specwatch's views: this file parses
no logs and computes no metric. It only selects, filters, sorts, labels and plots.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path

import altair as alt
import pandas as pd
import streamlit as st

from specwatch import query, store, views

HERE = Path(__file__).resolve().parent
# `streamlit run` puts the script's folder on sys.path; AppTest does not. Do the same for both.
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import queries as Q  # noqa: E402

REFRESH_CHOICES = {"off": None, "2 s": 2, "5 s": 5, "10 s": 10, "30 s": 30}
DEFAULT_REFRESH = "5 s"
VIEW_NAMES = ["Compare", "Concurrency", "Time series", "Acceptance", "Findings", "SQL"]
MAX_POINTS_PER_SERIES = 1500      # decode windows plotted per (run, DP rank); thinned beyond
SQL_TIMEOUT_S = 10.0

# Table columns: (column, label, format) in display order.
TABLE_COLUMNS = [
    ("config", "config", None), ("concurrency", "conc.", "%d"),
    ("accept_len", "accept len", "%.2f"), ("accept_rate", "accept rate", "percent"),
    ("output_tok_s", "output tok/s", "%.0f"), ("speedup_client", "speedup", "%.2f×"),
    ("gen_throughput_tok_s", "gen tok/s (log)", "%.0f"), ("speedup_gen", "speedup (log)", "%.2f×"),
    ("ttft_ms_p50", "TTFT p50 ms", "%.1f"), ("ttft_ms_p99", "TTFT p99 ms", "%.1f"),
    ("itl_ms_p50", "ITL p50 ms", "%.1f"), ("itl_ms_p99", "ITL p99 ms", "%.1f"),
    ("status", "status", None), ("flags", "flags", None), ("role", "role", None),
    ("speculative_algorithm", "algorithm", None), ("steps", "steps", "%d"), ("topk", "topk", "%d"),
    ("draft_tokens", "draft tok", "%d"), ("tp_size", "TP", "%d"), ("baseline", "baseline", None),
    ("sweep_name", "sweep", None), ("run_name", "run", None),
]
SORTABLE = ["(default)"] + [c for c, _, f in TABLE_COLUMNS if f is not None] + ["config", "status"]


def db_path() -> str:
    """`-- --db FILE` after the script (the launcher passes it), else env SPECWATCH_DB."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--db", default=None)
    args, _ = parser.parse_known_args(sys.argv[1:])
    return args.db or os.environ.get("SPECWATCH_DB") or store.DEFAULT_DB


# ---------------------------------------------------------------------------------------------
# Reading. One Reader per render: a cheap change stamp first, then cached heavy queries keyed on it.
# A writer holding the lock longer than the reader waits, or a store not created yet, never shows
# as an error: the view keeps the last data it read and says it is waiting.
# ---------------------------------------------------------------------------------------------
@st.cache_data(max_entries=64, show_spinner=False)
def _cached(db: str, stamp: tuple, sql: str, params: tuple, max_rows: int) -> tuple[pd.DataFrame, bool]:
    res = query.run_sql(db, sql, list(params), max_rows=max_rows)
    return pd.DataFrame.from_records(res.rows, columns=res.columns), res.truncated


def _not_ready(exc: Exception) -> bool:
    """The store is missing or not initialised yet (a sweep about to create it)."""
    msg = str(exc)
    return "no such database" in msg or "does not exist" in msg


class Reader:
    def __init__(self, db: str):
        self.db = db
        self.waiting = False        # a read fell back to older data because the writer held on
        self.missing = False        # no database (yet)
        self.stamp = self._stamp()

    def _stamp(self) -> tuple | None:
        try:
            with st.spinner("Waiting for the writer to release the database…"):
                res = query.run_sql(self.db, Q.STAMP, timeout_s=SQL_TIMEOUT_S)
        except (store.StoreError, query.QueryError) as exc:
            if isinstance(exc, store.StoreCorrupt):
                st.error(str(exc))
                st.stop()
            if _not_ready(exc):
                self.missing = True
                return None
            self.waiting = True
            return st.session_state.get("_last_stamp")
        stamp = tuple(res.rows[0])
        st.session_state["_last_stamp"] = stamp
        return stamp

    def df(self, sql: str, params: tuple = (), max_rows: int = 100_000) -> pd.DataFrame:
        key = ("_last", sql, params)
        if self.missing:
            return pd.DataFrame()
        try:
            with st.spinner("Waiting for the writer to release the database…"):
                df, _ = _cached(self.db, self.stamp, sql, params, max_rows)
        except (store.StoreError, query.QueryError) as exc:
            if _not_ready(exc):
                self.missing = True
                return pd.DataFrame()
            self.waiting = True
            return st.session_state.get(key, pd.DataFrame())
        st.session_state[key] = df
        return df

    def note(self, refresh_s: int | None) -> None:
        now = dt.datetime.now().strftime("%H:%M:%S")
        every = f"refreshes every {refresh_s} s" if refresh_s else "auto-refresh off"
        if self.waiting:
            st.caption(f"⏳ Waiting for the writer: the database is busy, showing the last data read "
                       f"({every}).")
        else:
            st.caption(f"Read at {now} · {every} · `{self.db}`")

    def missing_note(self) -> None:
        st.info(f"No specwatch data in `{self.db}` yet. It appears once `specwatch ingest`, `tail` "
                "or `run-sweep` writes there; this page refreshes on its own.")


def page_reader(db: str) -> Reader:
    """The full run's Reader (one stamp, one wait per page), or a fresh one for a fragment rerun."""
    return st.session_state.get("_page_reader") or Reader(db)


def _tuple(ids) -> tuple:
    return tuple(sorted(ids))


def _label(row) -> str:
    c = row.get("concurrency")
    return f"{row['config']} @c{int(c)}" if pd.notna(c) else str(row["config"])


def _flags_text(row) -> str:
    out = []
    if row.get("low_accept_len") is True:
        out.append("low accept len")
    if row.get("slower_than_baseline") is True:
        out.append("slower than baseline")
    if row.get("status") not in (None, "ok") and pd.notna(row.get("status")):
        out.append(str(row["status"]))
    return ", ".join(out)


def compare_frame(r: Reader, run_ids: tuple) -> pd.DataFrame:
    df = r.df(Q.COMPARE, (list(run_ids),))
    if df.empty:
        return df
    df = df.copy()
    df["flags"] = [_flags_text(row) for row in df.to_dict("records")]
    df["label"] = [_label(row) for row in df.to_dict("records")]
    return df


# ---------------------------------------------------------------------------------------------
# Views
# ---------------------------------------------------------------------------------------------
def view_compare(db: str, run_ids: tuple, refresh_s: int | None) -> None:
    r = page_reader(db)
    if r.missing:
        return r.missing_note()
    df = compare_frame(r, run_ids)
    if df.empty:
        st.info("No runs selected (or none stored yet).")
        return r.note(refresh_s)

    c1, c2, c3, c4 = st.columns([3, 2, 2, 1], vertical_alignment="bottom")
    text = c1.text_input("Filter", key="cmp_filter", placeholder="config, run, sweep or algorithm")
    statuses = sorted(df["status"].dropna().unique())
    chosen = c2.multiselect("Status", statuses, default=statuses, key="cmp_status")
    sort_by = c3.selectbox("Sort by", SORTABLE, key="cmp_sort")
    descending = c4.toggle("desc", value=True, key="cmp_desc")
    only_flagged = c4.toggle("flagged", value=False, key="cmp_flagged")

    table = df
    if text:
        hay = (df["config"].fillna("") + " " + df["run_name"].fillna("") + " "
               + df["sweep_name"].fillna("") + " " + df["speculative_algorithm"].fillna(""))
        table = table[hay.str.contains(text, case=False, regex=False)]
    table = table[table["status"].isin(chosen) | table["status"].isna()]
    if only_flagged:
        table = table[table["flags"] != ""]
    if sort_by != "(default)":
        table = table.sort_values(sort_by, ascending=not descending, na_position="last")

    cols = [c for c, _, _ in TABLE_COLUMNS]
    config = {c: (st.column_config.NumberColumn(label, format=fmt) if fmt
                  else st.column_config.TextColumn(label, pinned=c == "config"))
              for c, label, fmt in TABLE_COLUMNS}
    st.dataframe(table[cols], column_config=config, hide_index=True, placeholder="—",
                 height=min(38 + 35 * len(table), 600), key="cmp_table")
    st.download_button("Download CSV", table.drop(columns=["label"]).to_csv(index=False),
                       file_name="specwatch-configs.csv", mime="text/csv", key="cmp_csv")
    flagged = table[table["flags"] != ""]
    if len(flagged):
        st.warning(f"{len(flagged)} config(s) flagged: {', '.join(flagged['label'])}. "
                   "See **Findings**.")

    st.subheader("Accept rate vs throughput")
    _accept_vs_throughput(table)
    r.note(refresh_s)


def _throughput_choice(df: pd.DataFrame, key: str) -> tuple[str, str]:
    has_client = df["output_tok_s"].notna().any()
    options = ["output tok/s (client)", "gen tok/s (server log)"]
    pick = st.radio("Throughput", options, index=0 if has_client else 1, horizontal=True, key=key)
    return ("output_tok_s", "output tok/s") if pick == options[0] else \
        ("gen_throughput_tok_s", "gen tok/s")


def _accept_vs_throughput(df: pd.DataFrame) -> None:
    c1, c2, _ = st.columns([3, 1, 2], vertical_alignment="bottom")
    with c1:
        col, title = _throughput_choice(df, "scatter_metric")
    concs = sorted(df["concurrency"].dropna().unique())
    if len(concs) > 1:
        conc = c2.selectbox("Concurrency", concs, key="scatter_conc", format_func=lambda c: f"{c:g}")
        df = df[(df["concurrency"] == conc) | df["concurrency"].isna()]
    spec = df[(df["role"] == "spec") & df["accept_rate"].notna() & df[col].notna()].copy()
    if spec.empty:
        st.info(f"No speculative config with both accept rate and {title} in this selection.")
        return
    spec["flagged"] = spec["flags"].map(lambda f: "flagged" if f else "ok")
    base = alt.Chart(spec).encode(
        x=alt.X("accept_rate:Q", title="accept rate (accepted / proposed drafts)",
                axis=alt.Axis(format="%"), scale=alt.Scale(domain=[0, 1])),
        y=alt.Y(f"{col}:Q", title=title, scale=alt.Scale(zero=True)),
        tooltip=["label", alt.Tooltip("accept_len:Q", format=".2f"),
                 alt.Tooltip("accept_rate:Q", format=".1%"), alt.Tooltip(f"{col}:Q", format=".0f"),
                 "baseline", "flags"])
    points = base.mark_point(filled=True, size=90).encode(
        color=alt.Color("flagged:N", scale=alt.Scale(domain=["ok", "flagged"],
                                                     range=["#1f77b4", "#d62728"]),
                        legend=alt.Legend(title=None, orient="top")))
    labels = base.mark_text(align="left", dx=8, dy=-6, fontSize=11).encode(text="label:N")
    layers = [points, labels]
    # The baselines these configs were compared with, as horizontal lines at their throughput.
    base_rows = df[(df["role"] == "baseline") & df["run_name"].isin(spec["baseline"]) & df[col].notna()]
    if len(base_rows):
        b = base_rows.assign(text=[
            f"{lbl if lbl.startswith('baseline') else 'baseline ' + lbl}: {v:,.0f} {title}"
            for lbl, v in zip(base_rows["label"], base_rows[col])])
        rule = alt.Chart(b).mark_rule(strokeDash=[6, 4], color="#555").encode(y=f"{col}:Q")
        btxt = alt.Chart(b).mark_text(align="left", x=4, dy=-7, color="#555", fontSize=11).encode(
            y=f"{col}:Q", text="text:N")
        layers += [rule, btxt]
    st.altair_chart(alt.layer(*layers).properties(height=380, usermeta={"chart": "scatter"}),
                    key="chart_scatter")


def view_concurrency(db: str, run_ids: tuple, refresh_s: int | None) -> None:
    r = page_reader(db)
    if r.missing:
        return r.missing_note()
    df = compare_frame(r, run_ids)
    spec = df[(df["role"] == "spec") & df["concurrency"].notna()] if len(df) else df
    if spec.empty:
        st.info("Speedup against concurrency needs sweep runs (a config measured at several "
                "concurrencies with a baseline at each). None in this selection.")
        return r.note(refresh_s)
    options = ["client (output tok/s)", "server log (gen tok/s)"]
    pick = st.radio("Speedup from", options, horizontal=True, key="conc_metric",
                    index=0 if spec["speedup_client"].notna().any() else 1)
    col = "speedup_client" if pick == options[0] else "speedup_gen"
    data = spec[spec[col].notna()]
    if data.empty:
        st.info("No speedup to plot: no baseline was matched at these concurrencies.")
        return r.note(refresh_s)
    band = alt.Chart(pd.DataFrame({"y": [0], "y2": [1]})).mark_rect(color="#d62728", opacity=0.06
                                                                     ).encode(y="y:Q", y2="y2:Q")
    one = alt.Chart(pd.DataFrame({"y": [1.0], "t": ["baseline (1.0×): below it, speculation loses"]}))
    rule = one.mark_rule(color="#555", strokeDash=[6, 4]).encode(y="y:Q")
    rtxt = one.mark_text(align="left", x=4, dy=-7, color="#555", fontSize=11).encode(y="y:Q", text="t")
    lines = alt.Chart(data).mark_line(point=alt.OverlayMarkDef(size=70, filled=True)).encode(
        x=alt.X("concurrency:Q", title="concurrency", scale=alt.Scale(type="log", base=2),
                axis=alt.Axis(values=sorted(data["concurrency"].unique().tolist()), format="d")),
        y=alt.Y(f"{col}:Q", title="speedup vs baseline (×)", scale=alt.Scale(zero=True)),
        color=alt.Color("config:N", legend=alt.Legend(orient="top", title=None)),
        tooltip=["config", "concurrency", alt.Tooltip(f"{col}:Q", format=".2f"), "baseline"])
    st.altair_chart(alt.layer(band, rule, rtxt, lines).properties(
        height=360, usermeta={"chart": "concurrency"}), key="chart_conc")

    # Where speculation stops paying: the lowest concurrency from which the speedup stays below 1.
    rows = []
    for cfg, g in data.sort_values("concurrency").groupby("config", sort=False):
        below = g[col] < 1
        tail_below = below[::-1].cummin()[::-1]     # True where this and every higher c is < 1
        stops = g.loc[tail_below, "concurrency"].min() if tail_below.any() else None
        best = g.loc[g[col].idxmax()]
        rows.append({"config": cfg, "best speedup": best[col], "at concurrency": best["concurrency"],
                     "stops paying at concurrency": stops})
    st.dataframe(pd.DataFrame(rows), hide_index=True, placeholder="—", key="conc_table", column_config={
        "best speedup": st.column_config.NumberColumn(format="%.2f×"),
        "at concurrency": st.column_config.NumberColumn(format="%d"),
        "stops paying at concurrency": st.column_config.NumberColumn(format="%d")})
    r.note(refresh_s)


def view_timeseries(db: str, run_ids: tuple, refresh_s: int | None) -> None:
    r = page_reader(db)
    if r.missing:
        return r.missing_note()
    df = compare_frame(r, run_ids)
    if df.empty:
        st.info("No runs selected.")
        return r.note(refresh_s)
    runs = df.drop_duplicates("run_id")
    names = dict(zip(runs["run_id"], runs["label"]))
    default = [rid for rid in st.session_state.get("ts_runs", _default_series(runs)) if rid in names]
    c1, c2 = st.columns([4, 1], vertical_alignment="bottom")
    chosen = c1.multiselect("Runs", list(names), default=default, format_func=names.get,
                            key="ts_runs_pick")
    st.session_state["ts_runs"] = chosen
    x_mode = c2.radio("x axis", ["since start", "wall clock"], key="ts_x")
    if not chosen:
        st.info("Pick one or more runs.")
        return r.note(refresh_s)
    w = r.df(Q.WINDOWS, (list(_tuple(chosen)), MAX_POINTS_PER_SERIES))
    if w.empty:
        st.info("No SGLang decode windows for these runs (vLLM logs have no per-window accept "
                "length over time).")
        return r.note(refresh_s)
    w = w.assign(series=[f"{c} · dp{int(d)}" for c, d in zip(w["config"], w["dp_rank"])],
                 window=w["after_idle"].map({True: "after idle (not in summaries)",
                                             False: "kept"}))
    x = (alt.X("t_s:Q", title="seconds since the run's first window") if x_mode == "since start"
         else alt.X("ts:T", title="time (as logged)"))
    multi_rank = w.groupby("run_id")["dp_rank"].nunique().max() > 1
    legend = alt.Legend(orient="right", title=None, labelLimit=360)
    color = alt.Color("series:N" if multi_rank else "config:N", legend=legend)
    shape = alt.Shape("window:N", scale=alt.Scale(domain=["kept", "after idle (not in summaries)"],
                                                  range=["circle", "cross"]), legend=legend)
    for col, title, key in (("accept_len", "accept length", "chart_ts_accept"),
                            ("gen_throughput_tok_s", "gen throughput (tok/s)", "chart_ts_tput")):
        base = alt.Chart(w).encode(x=x, y=alt.Y(f"{col}:Q", title=title),
                                   tooltip=["config", "dp_rank", "ts:T", alt.Tooltip("t_s:Q", format=".1f"),
                                            alt.Tooltip(f"{col}:Q", format=".2f"), "window"])
        line = base.mark_line(opacity=0.7).encode(color=color, detail="series:N")
        pts = base.mark_point(size=28, filled=False).encode(color=color, shape=shape)
        st.altair_chart(alt.layer(line, pts).properties(height=300, title=title,
                                                        usermeta={"chart": key}), key=key)
    thinned = w.drop_duplicates("series")
    thinned = thinned[thinned["total"] > MAX_POINTS_PER_SERIES]
    if len(thinned):
        st.caption(f"Series longer than {MAX_POINTS_PER_SERIES} windows are thinned for plotting "
                   "(every k-th window); summaries use all of them.")
    missing = [names[rid] for rid in chosen if rid not in set(w["run_id"])]
    if missing:
        st.caption("No decode windows: " + ", ".join(missing))
    r.note(refresh_s)


def _default_series(runs: pd.DataFrame, limit: int = 5) -> list[str]:
    """The largest group of runs sharing one baseline (the baseline included), up to `limit`."""
    with_windows = runs[runs["config_offset"].notna() & runs["baseline"].notna()]
    if with_windows.empty:
        return runs["run_id"].head(limit).tolist()
    top = with_windows["baseline"].value_counts().index[0]
    return with_windows[with_windows["baseline"] == top]["run_id"].head(limit).tolist()


def view_acceptance(db: str, run_ids: tuple, refresh_s: int | None) -> None:
    r = page_reader(db)
    if r.missing:
        return r.missing_note()
    h = r.df(Q.HISTOGRAM, (list(run_ids),))
    if h.empty:
        st.info("No acceptance histogram in this selection. It comes from sweep requests whose "
                "server reports `spec_accept_histogram` (the built-in engine; SGLang 0.5.9+). "
                "Ingested logs carry only the mean accept length (see Compare).")
        return r.note(refresh_s)
    h = h.assign(label=[f"{c} @c{int(k)}" if pd.notna(k) else c
                        for c, k in zip(h["config"], h["concurrency"])])
    chart = alt.Chart(h).transform_joinaggregate(total="sum(verify_steps)", groupby=["run_id"]
                                                 ).transform_calculate(
        share="datum.verify_steps / datum.total").mark_bar().encode(
        x=alt.X("accepted_drafts:O", title="draft tokens accepted in a verify step",
                axis=alt.Axis(labelAngle=0)),
        xOffset="label:N",
        y=alt.Y("share:Q", title="share of verify steps", axis=alt.Axis(format="%")),
        color=alt.Color("label:N", legend=alt.Legend(orient="top", title=None)),
        tooltip=["label", "accepted_drafts", "verify_steps", alt.Tooltip("share:Q", format=".1%")])
    st.altair_chart(chart.properties(height=340, usermeta={"chart": "histogram"}), key="chart_hist")
    pivot = h.pivot_table(index="label", columns="accepted_drafts", values="verify_steps",
                          aggfunc="sum").reset_index()
    pivot.columns = [str(c) for c in pivot.columns]
    st.caption("Verify steps by number of accepted draft tokens (measured requests only)")
    st.dataframe(pivot, hide_index=True, placeholder="—", key="hist_table")
    r.note(refresh_s)


def view_findings(db: str, run_ids: tuple, refresh_s: int | None) -> None:
    r = page_reader(db)
    if r.missing:
        return r.missing_note()
    df = compare_frame(r, run_ids)
    if df.empty:
        st.info("No runs selected.")
        return r.note(refresh_s)
    broken, slower, unmatched = [], [], []
    for row in df.to_dict("records"):
        label, why = f"**{row['label']}**", []
        if pd.notna(row["status"]) and row["status"] != "ok":
            reason = f": {row['failure_reason']}" if pd.notna(row["failure_reason"]) else ""
            why.append(f"status `{row['status']}`{reason}")
        if row["low_accept_len"] is True:
            why.append(f"accept length {row['accept_len']:.2f} is below {views.LOW_ACCEPT_LEN}: the "
                       "draft barely predicts the target, so a verify step yields about one token "
                       "(wrong `eagle_aux_hidden_state_layer_ids`, or a draft trained for another "
                       f"target?). Run `specwatch doctor --run {row['run_name']}`")
        sp = row["speedup_client"] if pd.notna(row["speedup_client"]) else row["speedup_gen"]
        if row["slower_than_baseline"] is True:
            (why if why else slower).append(
                f"slower than its baseline `{row['baseline']}` ({sp:.2f}×)" if why else
                f"{label} — slower than its baseline `{row['baseline']}` ({sp:.2f}×): drafting "
                "and verifying cost more than the accepted tokens save.")
        if why:
            broken.append(f"{label} — " + "; ".join(why) + ".")
        if row["role"] == "spec" and pd.isna(row["baseline"]):
            unmatched.append(row["label"])
    c1, c2, c3 = st.columns(3)
    c1.metric("broken configs", len(broken))
    c2.metric("slower than baseline", len(slower))
    c3.metric("without a baseline", len(unmatched))
    for text in broken:
        st.error(text)
    for text in slower:
        st.warning(text)
    if unmatched:
        st.info("No baseline matched (same model, TP and DP size, no speculation), so speedup is "
                "unknown for: " + ", ".join(unmatched))
    if not broken and not slower:
        st.success("No broken configs: every speculative config has accept length ≥ "
                   f"{views.LOW_ACCEPT_LEN} and is not slower than its baseline.")
    r.note(refresh_s)


def view_sql(db: str) -> None:
    st.caption("Read-only, row-capped, time-limited. Views: `config_summary`, `config_flags`, "
               "`decode_windows_scoped`; tables: `runs`, `requests`, `decode_windows`, ...")
    sql = st.text_area("SQL", value=Q.DEFAULT_SQL, height=140, key="sql_text")
    c1, c2 = st.columns([1, 4], vertical_alignment="bottom")
    max_rows = c1.number_input("Row cap", min_value=1, max_value=100_000, value=1000, key="sql_cap")
    run = c2.button("Run query", type="primary", key="sql_run")
    if run or "sql_result" not in st.session_state:
        try:
            with st.spinner("Waiting for the writer to release the database…"):
                res = query.run_sql(db, sql, max_rows=int(max_rows), timeout_s=SQL_TIMEOUT_S,
                                    isolate=True)  # the sandbox `specwatch sql` has
            st.session_state["sql_result"] = (sql, res, None)
        except query.QueryError as exc:
            st.session_state["sql_result"] = (sql, None, str(exc))
        except store.StoreError as exc:   # locked: say so below; anything else: the message
            st.session_state["sql_result"] = (
                sql, None, None if isinstance(exc, store.StoreLocked) else str(exc))
    ran_sql, res, err = st.session_state["sql_result"]
    if err:
        st.error(err)
    elif res is None:
        st.caption("⏳ The writer held the database; press Run query again.")
    else:
        frame = pd.DataFrame.from_records(res.rows, columns=res.columns)
        st.dataframe(frame, hide_index=True, placeholder="NULL", key="sql_table")
        cut = f" (cut at the cap of {res.max_rows})" if res.truncated else ""
        st.caption(f"{len(frame)} row(s){cut}")
        st.download_button("Download CSV", frame.to_csv(index=False), file_name="specwatch-query.csv",
                           mime="text/csv", key="sql_csv")


# ---------------------------------------------------------------------------------------------
# Page
# ---------------------------------------------------------------------------------------------
def sidebar(db: str) -> tuple[tuple, int | None, int]:
    """Sweeps/runs picked, refresh interval, and how many runs exist (to notice new ones)."""
    st.sidebar.title("specwatch")
    reader = page_reader(db)
    runs = reader.df(Q.RUNS)
    refresh = st.sidebar.selectbox("Auto-refresh", list(REFRESH_CHOICES),
                                   index=list(REFRESH_CHOICES).index(DEFAULT_REFRESH), key="refresh")
    if runs.empty:
        st.sidebar.caption("No runs yet.")
        return (), REFRESH_CHOICES[refresh], 0
    scopes = list(dict.fromkeys(runs["scope"]))
    picked = st.sidebar.multiselect("Sweeps", scopes, default=scopes, key="scopes")
    in_scope = runs[runs["scope"].isin(picked)]
    label = {rid: (f"{c or n}" + (f" @c{int(k)}" if pd.notna(k) else ""))
             for rid, c, n, k in zip(in_scope["run_id"], in_scope["config_name"],
                                     in_scope["run_name"], in_scope["concurrency"])}
    chosen = st.sidebar.multiselect("Runs (empty = all in these sweeps)", list(label),
                                    format_func=label.get, key="runs")
    ids = chosen or list(label)
    st.sidebar.caption(f"{len(ids)} of {len(runs)} runs · `{db}`")
    return _tuple(ids), REFRESH_CHOICES[refresh], len(runs)


def live(fn, refresh_s: int | None, runs_seen: int):
    """Run `fn` as a fragment that re-renders every `refresh_s` seconds; a full rerun when new runs
    appear, so the sidebar offers them too."""
    def body(*args):
        stamp = st.session_state.get("_last_stamp")
        if refresh_s and stamp is not None and stamp[0] != runs_seen:
            st.rerun(scope="app")
        fn(*args)
    body.__name__ = body.__qualname__ = f"live_{fn.__name__}"
    return st.fragment(body, run_every=refresh_s)


def check_token() -> None:
    """Bound beyond loopback (`specwatch dashboard --allow-remote`): serve only requests that
    carry the launcher's token (`?token=...`)."""
    import hmac
    want = os.environ.get("SPECWATCH_DASHBOARD_TOKEN")
    if not want:
        return
    got = st.query_params.get("token", "")
    if not hmac.compare_digest(str(got).encode(), want.encode()):
        st.error("Access token required: open the URL `specwatch dashboard` printed "
                 "(it ends in `?token=...`).")
        st.stop()


def main() -> None:
    st.set_page_config(page_title="specwatch", page_icon="⏱", layout="wide")
    check_token()
    db = db_path()
    # One Reader for the whole page run; fragment reruns (live refresh) make their own.
    st.session_state["_page_reader"] = Reader(db)
    try:
        run_ids, refresh_s, runs_seen = sidebar(db)
        st.markdown("#### Speculative decoding: configs vs baseline")
        tabs = st.tabs(VIEW_NAMES, key="view", bind="query-params")
        handlers = [view_compare, view_concurrency, view_timeseries, view_acceptance, view_findings]
        for tab, handler in zip(tabs, handlers):
            if tab.open:
                with tab:
                    live(handler, refresh_s, runs_seen)(db, run_ids, refresh_s)
        if tabs[-1].open:
            with tabs[-1]:
                view_sql(db)
    finally:
        st.session_state["_page_reader"] = None


main()
