"""specwatch dashboard: compare speculative-decoding configs against their no-speculation baseline.

Start it with `specwatch dashboard --db FILE` (the database also comes from env SPECWATCH_DB); a
bare `streamlit run dashboards/app.py -- --db FILE` works too, but without what the launcher sets
(loopback only, no lookup of this machine's external IP: see specwatch/dashboard_launch.py). Views: the config comparison table, accept rate against
throughput, speedup against concurrency, decode-window time series, the acceptance histogram,
findings (broken configs) and a read-only SQL box.

Every read goes through `specwatch.db.query.run_sql` (read-only, row-capped, time-limited, and it waits
while a writer holds the database), and every metric comes from specwatch's views: this file parses
no logs and computes no metric. It only selects, filters, sorts, labels and plots.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pandas as pd
import streamlit as st

from specwatch.diagnose import doctor, finding
from specwatch.db import query, store

HERE = Path(__file__).resolve().parent
# `streamlit run` puts the script's folder on sys.path; AppTest does not. Do the same for both.
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import charts  # noqa: E402
import queries as Q  # noqa: E402
import schedule_view  # noqa: E402
import traffic_view  # noqa: E402
from reader import SQL_TIMEOUT_S, Reader, db_path, page_reader  # noqa: E402

REFRESH_CHOICES = {"off": None, "2 s": 2, "5 s": 5, "10 s": 10, "30 s": 30}
DEFAULT_REFRESH = "5 s"
VIEW_NAMES = ["Compare", "Concurrency", "Traffic", "Pareto", "Time series", "Acceptance", "Findings", "SQL"]
MAX_POINTS_PER_SERIES = 1500      # decode windows plotted per (run, DP rank); thinned beyond

# The Compare table's columns: (column, label, README glossary term or own help text, shown by
# default). Default columns fit a 1400 px window; "All columns" shows every column of the view.
COMPARE_COLUMNS = [
    ("config", "config", "config", True),
    ("verdict", "verdict", "verdict", True),
    ("speedup_text", "speedup [95% CI]", "speedup [95% CI]", True),
    ("tok_s_text", "tok/s ± 95%", "tok/s ± 95%", True),
    ("accept_len", "accept len", "accept len", True),
    ("accept_rate", "accept rate", "accept rate", True),
    ("per_user_tok_s", "per-user tok/s",
     "1000 / median TPOT (ms): the decode speed one request sees (TPOT = (e2e − TTFT) / (output "
     "tokens − 1)); the Pareto tab plots it against total tok/s", True),
    ("ttft_ms_p50_mean", "TTFT p50 ms", "median time to first token, mean over repeats", True),
    ("repeats", "n", "n", True),
    ("baseline_match", "baseline", "what the speedup was measured against: same-sweep (the one to "
     "trust), other-sweep, same-log / other-log, + other-machine, other-version, other-day, "
     "sampling-unknown; sampling-differs: nothing compared", True),
]
FORMATS = {"accept_len": "%.2f", "accept_rate": "percent", "per_user_tok_s": "%.1f",
           "ttft_ms_p50_mean": "%.1f", "repeats": "%d"}
# Narrow columns whose values are short, so the default columns fit a 1400 px window unscrolled.
WIDTHS = {"repeats": "small", "baseline_match": "small"}
VERDICT_MARK = {"pays": "✅ pays", "loses": "❌ loses", "unclear": "❔ unclear",
                "baseline": "baseline", "failed": "⚠ failed"}


def readme_glossary(path: Path = HERE.parent / "README.md") -> dict[str, str]:
    """{term: meaning} from the README's "Reading the report" table (written with the statistics
    views); {} when the README is not next to the dashboard (an installed copy)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    out, section = {}, text.split("## Reading the report", 1)[-1]
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 2 and cells[0] not in ("column", "---"):
            out[cells[0]] = cells[1].replace("`", "").replace("**", "")
    return out


GLOSSARY = readme_glossary()


def column_help(term: str) -> str:
    return GLOSSARY.get(term, term)


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
def stats_frame(r: Reader, run_ids: tuple) -> pd.DataFrame:
    """config_stats rows (one per config and concurrency, repeats pooled) of the selected runs,
    with the concurrency's winner; plus display-only text columns."""
    df = r.df(Q.STATS, (list(run_ids),))
    if df.empty:
        return df
    df = df.copy()
    df["is_baseline"] = df["is_baseline"].fillna(False).astype(bool)
    df["is_winner"] = df["winner"].notna() & (df["winner"] == df["config"])
    df["config_shown"] = [("🏆 " if w else "") + str(c) for c, w in zip(df["config"], df["is_winner"])]
    df["verdict_shown"] = df["verdict"].map(lambda v: VERDICT_MARK.get(v, v))
    df["speedup_text"] = [
        "—" if pd.isna(sp) else (f"{sp:.2f}× [{lo:.2f}, {hi:.2f}]" if pd.notna(lo) else f"{sp:.2f}×")
        + ("*" if basis == "server-log" else "")
        for sp, lo, hi, basis in zip(df["speedup"], df["speedup_ci_low"], df["speedup_ci_high"],
                                     df["speedup_basis"])]
    df["tok_s_text"] = [
        "—" if pd.isna(m) else (f"{m:,.0f} ± {(hi - m):,.0f}" if pd.notna(hi) else f"{m:,.0f}")
        for m, hi in zip(df["output_tok_s_mean"], df["output_tok_s_ci_high"])]
    return df


def _group_title(sweep, conc, rate=None) -> str:
    where = f"sweep `{sweep}`" if pd.notna(sweep) else "ingested logs"
    if pd.notna(rate):
        return f"{where} · {rate:g} requests/s"
    return f"{where} · concurrency {int(conc)}" if pd.notna(conc) else where


def view_compare(db: str, run_ids: tuple, refresh_s: int | None) -> None:
    r = page_reader(db)
    if r.missing:
        return r.missing_note()
    df = stats_frame(r, run_ids)
    if df.empty:
        st.info("No runs selected (or none stored yet).")
        return r.note(refresh_s)
    c1, c2, c3 = st.columns([3, 1, 1], vertical_alignment="bottom")
    text = c1.text_input("Filter", key="cmp_filter", placeholder="config, sweep or algorithm")
    all_cols = c2.toggle("All columns", value=False, key="cmp_all",
                         help="every column of the config_stats view (formulas in specwatch/db/stats.py)")
    losing = c3.toggle("Only loses/failed", value=False, key="cmp_losing")
    table = df
    if text:
        hay = (df["config"].fillna("") + " " + df["sweep_name"].fillna("") + " "
               + df["speculative_algorithm"].fillna(""))
        table = table[hay.str.contains(text, case=False, regex=False)]
    if losing:
        table = table[table["verdict"].isin(["loses", "failed"])]

    shown = {c: (label, help_) for c, label, help_, default in COMPARE_COLUMNS if default}
    config = {}
    for c, (label, term) in shown.items():
        help_ = column_help(term)
        src = {"config": "config_shown", "verdict": "verdict_shown"}.get(c, c)
        if c in FORMATS:
            config[src] = st.column_config.NumberColumn(label, format=FORMATS[c], help=help_,
                                                        width=WIDTHS.get(c))
        else:
            config[src] = st.column_config.TextColumn(label, help=help_, pinned=c == "config",
                                                      width=WIDTHS.get(c))
    cols = [{"config": "config_shown", "verdict": "verdict_shown"}.get(c, c) for c in shown]
    if all_cols:
        hidden = {"config_shown", "verdict_shown", "speedup_text", "tok_s_text", "is_winner"}
        cols = cols + [c for c in table.columns if c not in cols and c not in hidden]
    table = table[~table["rate_search_only"].fillna(False).astype(bool)]   # in Traffic
    for (sweep, conc, rate), g in table.groupby(["sweep_name", "concurrency", "request_rate"],
                                                dropna=False, sort=False):
        note = g["winner_note"].dropna()
        head = _group_title(sweep, conc, rate)
        st.markdown(f"**{head}**" + (f" — {note.iloc[0]}" if len(note) else ""))
        g = g.assign(_last=g["verdict"] == "baseline").sort_values(
            ["_last", "speedup"], ascending=[True, False], na_position="last")
        key = f"cmp_table_{sweep}_{conc}" + (f"_{rate:g}" if pd.notna(rate) else "")
        st.dataframe(g[cols], column_config=config, hide_index=True, placeholder="—",
                     height=min(38 + 35 * len(g), 400), key=key)
    st.download_button("Download CSV", table.drop(columns=["config_shown", "verdict_shown"])
                       .to_csv(index=False), file_name="specwatch-configs.csv", mime="text/csv",
                       key="cmp_csv")
    st.caption("🏆 the concurrency's winner: its speedup interval lies above every other config's "
               "(the baseline counts, at [1, 1]). * = speedup from server-log throughput. "
               "Hover a column name for its meaning (README, “Reading the report”).")
    lost = table[table["verdict"].isin(["loses", "failed"])]
    if len(lost):
        st.warning(f"{len(lost)} config(s) lose or failed: "
                   + ", ".join(f"{c} @c{int(k)}" if pd.notna(k) else str(c)
                               for c, k in zip(lost["config"], lost["concurrency"]))
                   + ". See **Findings** for why.")

    st.subheader("Accept length vs accept rate (colour: speedup)")
    chart = charts.accept_scatter(table)
    if chart is None:
        st.info("No speculative config with an accept rate in this selection.")
    else:
        st.altair_chart(chart, key="chart_scatter")
    with st.expander("Per run (config_summary: one row per run and server config)"):
        runs = compare_frame(r, run_ids)
        st.dataframe(runs.drop(columns=["label"], errors="ignore"), hide_index=True,
                     placeholder="—", key="cmp_runs")
    r.note(refresh_s)


def view_concurrency(db: str, run_ids: tuple, refresh_s: int | None) -> None:
    r = page_reader(db)
    if r.missing:
        return r.missing_note()
    df = stats_frame(r, run_ids)
    spec = df[~df["is_baseline"] & df["concurrency"].notna() & df["speedup"].notna()] \
        if len(df) else df
    if spec.empty:
        st.info("Speedup against concurrency needs sweep runs (a config measured at several "
                "concurrencies with a baseline at each). None in this selection.")
        return r.note(refresh_s)
    rec = schedule_view.pick(r, spec)
    bands = pd.DataFrame(rec["bands"]) if rec else None
    st.altair_chart(charts.speedup_vs_concurrency(df, bands), key="chart_conc")
    st.caption("Bars: the speedup's 95% interval (config_stats.speedup_ci_low/high); a config "
               "pays where its whole bar lies above the dashed line."
               + (" Black diamonds: the recommended schedule (`specwatch recommend`), k per load "
                  "and its expected gain." if rec else ""))
    if rec:
        schedule_view.details(rec)
    rows = []
    for cfg, g in spec.sort_values("concurrency").groupby("config", sort=False):
        best = g.loc[g["speedup"].idxmax()]
        loses = g[g["verdict"] == "loses"]["concurrency"]
        rows.append({"config": cfg, "best speedup": best["speedup"],
                     "at concurrency": best["concurrency"],
                     "pays at": ", ".join(f"{int(c)}" for c in g[g["verdict"] == "pays"]["concurrency"]),
                     "loses at": ", ".join(f"{int(c)}" for c in loses)})
    st.dataframe(pd.DataFrame(rows), hide_index=True, placeholder="—", key="conc_table",
                 column_config={
                     "best speedup": st.column_config.NumberColumn(format="%.2f×"),
                     "at concurrency": st.column_config.NumberColumn(format="%d"),
                     "pays at": st.column_config.TextColumn(help=column_help("verdict")),
                     "loses at": st.column_config.TextColumn(help=column_help("verdict"))})
    r.note(refresh_s)


def view_pareto(db: str, run_ids: tuple, refresh_s: int | None) -> None:
    r = page_reader(db)
    if r.missing:
        return r.missing_note()
    df = stats_frame(r, run_ids)
    chart, data = charts.pareto(df) if len(df) else (None, df)
    if chart is None:
        st.info("The Pareto chart needs client latencies (TPOT) from sweep runs; ingested logs "
                "have none.")
        return r.note(refresh_s)
    st.altair_chart(chart, key="chart_pareto")
    front = data[data["frontier"] == "Pareto frontier"]
    st.caption("Each line is one config across concurrency (baseline included); up and right is "
               "better. Filled diamonds: the Pareto frontier (no other point has both more total "
               "tok/s and more per-user tok/s): " + ", ".join(
                   f"{c} @c{int(k)}" for c, k in zip(front["config"], front["concurrency"])) + ".")
    r.note(refresh_s)


def view_timeseries(db: str, run_ids: tuple, refresh_s: int | None) -> None:
    r = page_reader(db)
    if r.missing:
        return r.missing_note()
    runs = r.df(Q.RUNS)
    runs = runs[runs["run_id"].isin(run_ids)] if len(runs) else runs
    if runs.empty:
        st.info("No runs selected.")
        return r.note(refresh_s)
    names = {rid: (f"{c if pd.notna(c) else n}" + (f" @c{int(k)}" if pd.notna(k) else "")
                   + (f" r{int(i)}" if pd.notna(i) and i else ""))
             for rid, c, n, k, i in zip(runs["run_id"], runs["config_name"], runs["run_name"],
                                        runs["concurrency"], runs["repeat_idx"])}
    default = [rid for rid in st.session_state.get("ts_runs", _default_series(runs)) if rid in names]
    chosen = st.multiselect("Runs", list(names), default=default, format_func=names.get,
                            key="ts_runs_pick", help="default: the latest sweep, first repeat")
    st.session_state["ts_runs"] = chosen
    if not chosen:
        st.info("Pick one or more runs.")
        return r.note(refresh_s)
    w = r.df(Q.WINDOWS, (list(_tuple(chosen)), MAX_POINTS_PER_SERIES))
    if w.empty:
        st.info("No SGLang decode windows for these runs (vLLM logs have no per-window accept "
                "length over time).")
        return r.note(refresh_s)
    w = w.assign(label=w["run_id"].map(names))
    w = w.assign(series=[f"{c} · dp{int(d)}" for c, d in zip(w["label"], w["dp_rank"])],
                 window=w["after_idle"].map({True: "after idle (not in summaries)",
                                             False: "kept"}))
    x_title = ("seconds since the run's start" if w["from_start"].all()
               else "seconds since the run's start (first decode window for ingested logs)")
    for col, title, key in (("accept_len", "accept length", "chart_ts_accept"),
                            ("gen_throughput_tok_s", "gen throughput (tok/s)", "chart_ts_tput")):
        st.altair_chart(charts.timeseries(w, col, title, key, x_title), key=key)
    if (w.drop_duplicates("series")["total"] > MAX_POINTS_PER_SERIES).any():
        st.caption(f"Series longer than {MAX_POINTS_PER_SERIES} windows are thinned for plotting "
                   "(every k-th window); summaries use all of them.")
    missing = [names[rid] for rid in chosen if rid not in set(w["run_id"])]
    if missing:
        st.caption("No decode windows: " + ", ".join(missing))
    r.note(refresh_s)


def _default_series(runs: pd.DataFrame, limit: int = 8) -> list[str]:
    """The latest sweep's runs (first repeat of each config and concurrency), up to `limit`;
    without sweeps, the latest runs."""
    sweeps = runs[runs["sweep_name"].notna() & runs["status"].fillna("ok").eq("ok")]
    if sweeps.empty:
        return runs.sort_values("created_at")["run_id"].tail(limit).tolist()
    latest = sweeps.loc[sweeps["created_at"].idxmax(), "sweep_name"]
    mine = sweeps[sweeps["sweep_name"] == latest].sort_values(
        ["concurrency", "repeat_idx", "config_name"], na_position="first")
    mine = mine.drop_duplicates(["config_name", "concurrency"])
    return mine.sort_values(["concurrency", "config_name"])["run_id"].head(limit).tolist()


def acceptance_sentence(h: pd.DataFrame) -> str:
    """One sentence on the histogram: each config's share of verify steps accepting no draft
    token, worst first ("A: 64% of verify steps accept no draft token, against 12% for B")."""
    share = (h[h["accepted_drafts"] == 0].groupby("label")["verify_steps"].sum()
             / h.groupby("label")["verify_steps"].sum()).fillna(0).sort_values(ascending=False)
    if share.empty:
        return ""
    first, rest = share.index[0], share.iloc[1:]
    text = f"{first}: {share.iloc[0]:.0%} of verify steps accept no draft token"
    if len(rest):
        text += ", against " + ", ".join(f"{v:.0%} for {k}" for k, v in rest.items())
    return text + "."


def view_acceptance(db: str, run_ids: tuple, refresh_s: int | None) -> None:
    r = page_reader(db)
    if r.missing:
        return r.missing_note()
    h = r.df(Q.HISTOGRAM, (list(run_ids),))
    p = r.df(Q.POSITIONS, (list(run_ids),))
    if h.empty and p.empty:
        st.info("No acceptance histogram in this selection. It comes from sweep requests whose "
                "server reports `spec_accept_histogram` (the built-in engine; SGLang 0.5.9+), "
                "and per-position rates from vLLM logs. Ingested SGLang logs carry only the mean "
                "accept length (see Compare).")
        return r.note(refresh_s)
    if len(h):
        # one bar group per config and concurrency: repeats summed
        h = h.assign(label=[f"{c} @c{int(k)}" if pd.notna(k) else c
                            for c, k in zip(h["config"], h["concurrency"])])
        h = h.groupby(["label", "accepted_drafts"], as_index=False)["verify_steps"].sum()
        h["run_id"] = h["label"]
        st.markdown(acceptance_sentence(h))
        st.altair_chart(charts.histogram(h), key="chart_hist")
        pivot = h.pivot_table(index="label", columns="accepted_drafts", values="verify_steps",
                              aggfunc="sum").reset_index()
        pivot.columns = [str(c) for c in pivot.columns]
        st.caption("Verify steps by number of accepted draft tokens (measured requests only)")
        st.dataframe(pivot, hide_index=True, placeholder="—", key="hist_table")
    if len(p):
        p = p.assign(label=[f"{c} @c{int(k)}" if pd.notna(k) else c
                            for c, k in zip(p["config"], p["concurrency"])])
        p = p.groupby(["label", "position", "basis"], as_index=False)["accepted_share"].mean()
        st.subheader("Per-position acceptance")
        st.altair_chart(charts.positions(p), key="chart_positions")
        st.caption("Share of verify steps whose draft token at position k was accepted: from the "
                   "request histograms (at least k drafts accepted) or the vLLM log's per-position "
                   "rates (view accept_positions; repeats averaged).")
    r.note(refresh_s)


@st.cache_data(max_entries=8, show_spinner=False)
def _doctor(db: str, stamp: tuple) -> tuple[list[dict], list[dict]]:
    """doctor's findings for the whole store, once per change of the store (doctor.diagnose)."""
    findings, checked = doctor.diagnose(db)
    return ([dataclasses.asdict(f) for f in findings],
            [{"run_id": c["run_id"], "run_name": c["run_name"],
              "config_offset": c.get("config_offset")} for c in checked])


def _finding_text(f: dict) -> str:
    nums = ", ".join(f"{k}={finding.format_number(v)}" for k, v in f["evidence"]["numbers"].items()
                     if v is not None)
    out = [f"**{f['run']}** · `{f['code']}` ({f['severity']}) — {f['title']}"]
    if nums:
        out.append(f"numbers: {nums}")
    for ref in f["evidence"]["rows"][:finding.MAX_EVIDENCE_ROWS]:
        where = (f"{ref['file']}:{ref['line_no']}" if ref["line_no"] is not None
                 else (ref["file"] or ref["run_id"] or ""))
        out.append(f"- {ref['table']} `{where}`" + (f": {ref['note']}" if ref["note"] else ""))
    out.append(f"next: {f['suggestion']}")
    return "  \n".join(out)


def view_findings(db: str, run_ids: tuple, refresh_s: int | None) -> None:
    r = page_reader(db)
    if r.missing:
        return r.missing_note()
    try:
        with st.spinner("Running specwatch doctor…"):
            findings, checked = _doctor(db, r.stamp)
    except (store.StoreError, query.QueryError) as exc:
        if isinstance(exc, store.StoreLocked) or "lock" in str(exc).lower():
            st.caption("⏳ Waiting for the writer before running doctor.")
            return r.note(refresh_s)
        raise
    picked = set(run_ids)
    findings = [f for f in findings if f["run_id"] in picked]
    checked = [c for c in checked if c["run_id"] in picked]
    n = {s: sum(f["severity"] == s for f in findings) for s in finding.SEVERITY_ORDER}
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("configs checked", len(checked), help="speculative runs doctor examined")
    c2.metric("errors", n["error"])
    c3.metric("warnings", n["warning"])
    c4.metric("notes", n["info"])
    st.caption(f"The findings of `specwatch doctor --db {db}` (same codes, severities, evidence "
               "and next steps), for the runs selected in the sidebar.")
    show = {"error": st.error, "warning": st.warning, "info": st.info}
    for f in findings:
        show[f["severity"]](_finding_text(f))
    flagged = {f["run_id"] for f in findings if f["severity"] != "info"}
    clean = [c["run_name"] for c in checked if c["run_id"] not in flagged]
    if checked and not flagged:
        st.success("doctor found no problem in the selected speculative configs.")
    elif clean:
        st.caption("No problems found in: " + ", ".join(dict.fromkeys(clean)))

    runs = r.df(Q.RUNS)
    failed = runs[runs["run_id"].isin(picked) & runs["status"].notna()
                  & (runs["status"] != "ok")] if len(runs) else runs
    st.subheader(f"Failed runs ({len(failed)})")
    if len(failed):
        for row in failed.to_dict("records"):
            label = f"{row['config_name'] or row['run_name']}" + (
                f" @c{int(row['concurrency'])}" if pd.notna(row["concurrency"]) else "")
            cause = row["failure_reason"] if pd.notna(row["failure_reason"]) else \
                "no cause recorded"
            st.error(f"**{label}** (`{row['run_name']}`) — status `{row['status']}`: {cause}")
    else:
        st.caption("None: every selected run measured.")

    alerts = r.df(Q.ALERTS)
    st.subheader(f"Alerts from `specwatch tail` ({len(alerts)})")
    if len(alerts):
        st.dataframe(alerts, hide_index=True, placeholder="—", key="alerts_table")
    else:
        st.caption("None raised.")
    r.note(refresh_s)


def view_sql(db: str) -> None:
    st.caption("Read-only, row-capped, time-limited. Views: `config_summary`, `config_flags`, "
               "`decode_windows_scoped`; tables: `runs`, `requests`, `decode_windows`, ...")
    sql = st.text_area("SQL", value=Q.DEFAULT_SQL, height=140, key="sql_text",
                       max_chars=query.MAX_SQL_CHARS)   # run_sql refuses longer text too
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
    label = {rid: (f"{c if pd.notna(c) else n}" + (f" @c{int(k)}" if pd.notna(k) else ""))
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
        handlers = [view_compare, view_concurrency, traffic_view.view, view_pareto, view_timeseries, view_acceptance,
                    view_findings]
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
