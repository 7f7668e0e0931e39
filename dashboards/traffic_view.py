"""The Traffic view (issue 30): load against request rate under an SLO. Goodput per config against
the request rate (95% interval bars), the speedup against the request rate with the crossover
where speculation stops paying, the max rate under the SLO and the crossover with their
intervals, and accept length / e2e speedup by prompt category.

Every number is a column of db/slo_views.py's views (dashboards/queries.py selects them); this
module only picks rows, labels them and draws them.
"""
from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

import charts
import queries as Q
from reader import page_reader


def _bound(value, state, lo, hi) -> str:
    if state == "crosses" and pd.notna(value):
        return f"{value:.3g}"
    return f"<{lo:g}" if state == "below" else f">{hi:g}" if state == "above" else "?"


def goodput_chart(slo: pd.DataFrame) -> alt.LayerChart:
    """Goodput (requests/s meeting every limit) per config against the asked request rate."""
    data = slo[slo["request_rate"].notna()].copy()
    color = alt.Color("config:N", legend=alt.Legend(orient="top", title=None, labelLimit=300))
    x = alt.X("request_rate:Q", title="request rate asked (requests/s)",
              scale=alt.Scale(type="log", base=2))
    tip = ["config", "request_rate", alt.Tooltip("goodput_req_s_mean:Q", format=".2f"),
           alt.Tooltip("slo_attainment_frac:Q", format=".0%"), "slo_verdict",
           alt.Tooltip("achieved_rate_req_s:Q", format=".2f")]
    base = alt.Chart(data).encode(x=x, color=color, tooltip=tip)
    line = base.mark_line(point=alt.OverlayMarkDef(size=70, filled=True)).encode(
        y=alt.Y("goodput_req_s_mean:Q", title="goodput (requests/s meeting the SLO), 95% interval"))
    bars = base.transform_filter("isValid(datum.goodput_req_s_ci_low)").mark_rule(
        strokeWidth=2).encode(y="goodput_req_s_ci_low:Q", y2="goodput_req_s_ci_high:Q")
    ideal = alt.Chart(pd.DataFrame({"r": sorted(data["request_rate"].unique())})).mark_line(
        color="#999", strokeDash=[4, 4]).encode(x="r:Q", y="r:Q")
    return alt.layer(ideal, bars, line).properties(height=360, usermeta={"chart": "goodput"})


def speedup_vs_rate(stats: pd.DataFrame, cross: pd.DataFrame) -> alt.LayerChart:
    data = stats[stats["speedup"].notna() & ~stats["is_baseline"] & stats["request_rate"].notna()
                 & ~stats["rate_search_only"].fillna(False).astype(bool)].copy()
    color = alt.Color("config:N", legend=alt.Legend(orient="top", title=None, labelLimit=300))
    x = alt.X("request_rate:Q", title="request rate asked (requests/s)",
              scale=alt.Scale(type="log", base=2))
    base = alt.Chart(data).encode(x=x, color=color, tooltip=[
        "config", "request_rate", alt.Tooltip("speedup:Q", format=".2f"), "verdict"])
    line = base.mark_line(point=alt.OverlayMarkDef(size=70, filled=True)).encode(
        y=alt.Y("speedup:Q", title="speedup vs baseline (×), 95% interval",
                scale=alt.Scale(zero=False)))
    bars = base.transform_filter("isValid(datum.speedup_ci_low)").mark_rule(strokeWidth=2).encode(
        y="speedup_ci_low:Q", y2="speedup_ci_high:Q")
    layers = [*charts.baseline_rule(), bars, line]
    pts = cross[(cross["load_kind"] == "request_rate") & (cross["crossover_state"] == "crosses")]
    if len(pts):
        layers.append(alt.Chart(pts.assign(y=1.0)).mark_point(
            shape="diamond", size=160, filled=True, color="#111").encode(
            x="crossover_load:Q", y="y:Q", tooltip=["config", alt.Tooltip(
                "crossover_load:Q", format=".3g"), "crossover_note"]))
    return alt.layer(*layers).properties(height=340, usermeta={"chart": "speedup_rate"})


def view(db: str, run_ids: tuple, refresh_s: int | None) -> None:
    r = page_reader(db)
    if r.missing:
        return r.missing_note()
    slo = r.df(Q.TRAFFIC_SLO, (list(run_ids),))
    maxr = r.df(Q.TRAFFIC_PER_CONFIG.format(view="config_max_rate"), (list(run_ids),))
    cross = r.df(Q.TRAFFIC_PER_CONFIG.format(view="config_crossover"), (list(run_ids),))
    cats = r.df(Q.TRAFFIC_CATEGORIES, (list(run_ids),))
    stats = r.df(Q.STATS, (list(run_ids),))
    sched = r.df(Q.TRAFFIC_SCHEDULE, (list(run_ids),))
    for _, g in sched[sched["runs_off_schedule"] > 0].iterrows():
        st.warning(f"Off schedule: {g['config']} at {g['request_rate']:g}/s, "
                   f"{g['runs_off_schedule']} of {g['runs']} runs: {g['schedule_reason']}")
    if slo.empty and cross.empty and cats.empty:
        st.info("Traffic needs a sweep with request rates and an [slo] (examples/"
                "builtin_rate_sweep.toml), or prompts with categories. None in this selection.")
        return r.note(refresh_s)
    if len(slo):
        first = slo.iloc[0]
        limits = ", ".join(f"{name} ≤ {first[f'slo_{k}_ms']:g} ms" for k, name in (
            ("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E"))
            if pd.notna(first[f"slo_{k}_ms"]))
        st.subheader(f"Goodput under the SLO (p{first['slo_percentile']:g}: {limits})")
        st.altair_chart(goodput_chart(slo), key="chart_goodput")
        st.caption("Goodput: requests per second meeting every limit (db/slo_views.py, run_slo). "
                   "Dashed: goodput = asked rate (every request good).")
    if len(maxr):
        st.dataframe(pd.DataFrame([{
            "config": m["config"],
            "max rate under SLO (req/s)": _bound(m["max_rate_req_s"], m["max_rate_state"],
                                                 m["min_rate_req_s"], m["max_measured_rate_req_s"]),
            "95% interval": "[" + ", ".join(_bound(m[f"max_rate_ci_{e}"], m[f"max_rate_{s}_state"],
                                                   m["min_rate_req_s"],
                                                   m["max_measured_rate_req_s"])
                                            for e, s in (("low", "low"), ("high", "high"))) + "]",
            "meets at (measured)": m["max_rate_meeting_req_s"], "rates": m["rates_measured"],
            "note": m["max_rate_note"]} for _, m in maxr.iterrows()]),
            hide_index=True, placeholder="—", key="traffic_max_rate")
    if len(stats) and stats["request_rate"].notna().any() and stats["speedup"].notna().any():
        stats = stats.assign(is_baseline=stats["is_baseline"].fillna(False).astype(bool))
        st.subheader("Speedup against request rate")
        st.altair_chart(speedup_vs_rate(stats, cross), key="chart_speedup_rate")
    if len(cross):
        st.dataframe(pd.DataFrame([{
            "config": c["config"], "load": c["load_kind"],
            "crossover": _bound(c["crossover_load"], c["crossover_state"], c["min_load"],
                                c["max_load"]),
            "95% interval": "[" + ", ".join(_bound(c[f"crossover_ci_{e}"], c[f"crossover_{e}_state"],
                                                   c["min_load"], c["max_load"])
                                            for e in ("low", "high")) + "]",
            "note": c["crossover_note"]} for _, c in cross.iterrows()]),
            hide_index=True, placeholder="—", key="traffic_crossover")
        st.caption("Crossover: the load at which the speedup curve first falls through 1 "
                   "(interpolated on log load); its interval from the curves of the speedup's "
                   "95% bounds.")
    if cats["category"].nunique() > 1 if len(cats) else False:
        st.subheader("By prompt category")
        st.dataframe(cats[["category", "config", "concurrency", "request_rate", "requests",
                           "accept_len", "speedup_e2e", "speedup_e2e_ci_low",
                           "speedup_e2e_ci_high"]], hide_index=True, placeholder="—",
                     key="traffic_categories", column_config={
                         "accept_len": st.column_config.NumberColumn("accept len", format="%.2f"),
                         **{c: st.column_config.NumberColumn(format="%.2f×") for c in (
                             "speedup_e2e", "speedup_e2e_ci_low", "speedup_e2e_ci_high")}})
    r.note(refresh_s)
