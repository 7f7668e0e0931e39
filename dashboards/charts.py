"""The dashboard's charts: Altair specs from frames the views already computed.

Nothing here reads the store or computes a metric: each function takes rows of `config_stats` /
`config_pareto` / `decode_windows_scoped` / request histograms (dashboards/queries.py) and draws
them. `usermeta.chart` names each chart for the tests.
"""
from __future__ import annotations

import altair as alt
import pandas as pd

VERDICT_COLORS = alt.Scale(domain=["pays", "loses", "unclear", "baseline", "failed"],
                           range=["#2ca02c", "#d62728", "#7f7f7f", "#1f77b4", "#ff7f0e"])


def _conc_axis(values) -> alt.X:
    return alt.X("concurrency:Q", title="concurrency (requests in flight)",
                 scale=alt.Scale(type="log", base=2),
                 axis=alt.Axis(values=sorted(set(values)), format="d"))


def baseline_rule(text: str = "baseline (1.0×): below it, speculation loses") -> list:
    one = alt.Chart(pd.DataFrame({"y": [1.0], "t": [text]}))
    return [one.mark_rule(color="#555", strokeDash=[6, 4]).encode(y="y:Q"),
            one.mark_text(align="left", x=4, dy=-7, color="#555", fontSize=11).encode(
                y="y:Q", text="t")]


def speedup_vs_concurrency(stats: pd.DataFrame, schedule: pd.DataFrame | None = None
                           ) -> alt.LayerChart:
    """Speedup (geometric-mean ratio) per config against concurrency, 95% interval bars; with
    `schedule` (rows of `specwatch recommend`'s bands: concurrency, steps, config, speedup and
    its interval) the recommended schedule on top: a dashed black line labelled k per load."""
    data = stats[stats["speedup"].notna() & ~stats["is_baseline"].fillna(False)
                 & stats["concurrency"].notna()].copy()
    data["interval"] = [f"[{lo:.2f}, {hi:.2f}]" if pd.notna(lo) else "none (one repeat)"
                        for lo, hi in zip(data["speedup_ci_low"], data["speedup_ci_high"])]
    x = _conc_axis(data["concurrency"].tolist())
    color = alt.Color("config:N", legend=alt.Legend(orient="top", title=None, labelLimit=300))
    tip = ["config", "concurrency", alt.Tooltip("speedup:Q", format=".2f"), "interval", "verdict",
           "baseline_config"]
    base = alt.Chart(data).encode(x=x, color=color, tooltip=tip)
    lines = base.mark_line(point=alt.OverlayMarkDef(size=70, filled=True)).encode(
        y=alt.Y("speedup:Q", title="speedup vs baseline (×), 95% interval",
                scale=alt.Scale(zero=False)))
    bars = base.transform_filter("isValid(datum.speedup_ci_low)").mark_rule(strokeWidth=2).encode(
        y="speedup_ci_low:Q", y2="speedup_ci_high:Q")
    ticks = [base.transform_filter("isValid(datum.speedup_ci_low)").mark_tick(
        thickness=2, size=10).encode(y=f"{c}:Q") for c in ("speedup_ci_low", "speedup_ci_high")]
    layers = [*baseline_rule(), bars, *ticks, lines]
    if schedule is not None and len(schedule):
        sched = schedule.copy()
        sched["label"] = [f"k={k}" for k in sched["steps"]]
        stip = ["concurrency", "label", "config", alt.Tooltip("speedup:Q", format=".2f"),
                alt.Tooltip("speedup_ci_low:Q", format=".2f"),
                alt.Tooltip("speedup_ci_high:Q", format=".2f"), "reason"]
        sb = alt.Chart(sched).encode(x=x, y="speedup:Q", tooltip=stip)
        layers += [sb.mark_line(color="#111", strokeDash=[3, 3], strokeWidth=2,
                                point=alt.OverlayMarkDef(shape="diamond", size=110, color="#111")),
                   sb.mark_text(dy=-14, color="#111", fontWeight="bold").encode(text="label")]
    return alt.layer(*layers).properties(height=380, usermeta={"chart": "concurrency"})


def pareto(stats: pd.DataFrame) -> tuple[alt.LayerChart | None, pd.DataFrame]:
    """Per-user speed (1000 / median TPOT) against total output tok/s, one line per config across
    concurrency, the baseline included. Points no other point beats on both axes (the Pareto
    frontier) are filled. Returns (chart or None, the plotted rows)."""
    data = stats[stats["per_user_tok_s"].notna() & stats["output_tok_s_mean"].notna()].copy()
    if data.empty:
        return None, data
    x, y = data["output_tok_s_mean"].to_numpy(), data["per_user_tok_s"].to_numpy()
    data["frontier"] = ["Pareto frontier" if not ((x >= xi) & (y >= yi) & ((x > xi) | (y > yi))).any()
                        else "dominated" for xi, yi in zip(x, y)]
    data["point"] = [f"c{int(c)}" if pd.notna(c) else "" for c in data["concurrency"]]
    data = data.sort_values(["config", "concurrency"])
    color = alt.Color("config:N", legend=alt.Legend(orient="top", title=None, labelLimit=300))
    tip = ["config", "concurrency", alt.Tooltip("output_tok_s_mean:Q", format=",.0f"),
           alt.Tooltip("per_user_tok_s:Q", format=".1f"), "verdict", "frontier"]
    base = alt.Chart(data).encode(
        x=alt.X("output_tok_s_mean:Q", title="total output tok/s (all requests, mean over repeats)",
                scale=alt.Scale(zero=False)),
        y=alt.Y("per_user_tok_s:Q", title="per-user tok/s (1000 / median TPOT ms)",
                scale=alt.Scale(zero=False)),
        color=color, tooltip=tip)
    line = base.mark_line(opacity=0.6).encode(order="concurrency:Q", detail="config:N")
    pts = base.mark_point(size=90).encode(
        shape=alt.Shape("frontier:N", scale=alt.Scale(domain=["Pareto frontier", "dominated"],
                                                      range=["diamond", "circle"]),
                        legend=alt.Legend(orient="top", title=None)),
        fill=alt.condition("datum.frontier == 'Pareto frontier'", "config:N", alt.value("white")))
    txt = base.mark_text(align="left", dx=8, dy=-6, fontSize=10).encode(text="point:N")
    return alt.layer(line, pts, txt).properties(height=420, usermeta={"chart": "pareto"}), data


def accept_scatter(stats: pd.DataFrame) -> alt.LayerChart | None:
    """Accept length against accept rate, colour = speedup (verdict on hover), one point per
    speculative config at one concurrency."""
    spec = stats[~stats["is_baseline"].fillna(False) & stats["accept_rate"].notna()
                 & stats["accept_len"].notna()].copy()
    if spec.empty:
        return None
    spec["label"] = [f"{c} @c{int(k)}" if pd.notna(k) else str(c)
                     for c, k in zip(spec["config"], spec["concurrency"])]
    base = alt.Chart(spec).encode(
        x=alt.X("accept_rate:Q", title="accept rate (accepted / proposed drafts)",
                axis=alt.Axis(format="%"), scale=alt.Scale(domain=[0, 1])),
        y=alt.Y("accept_len:Q", title="accept length (tokens per verify step)",
                scale=alt.Scale(zero=False)),
        tooltip=["label", alt.Tooltip("accept_len:Q", format=".2f"),
                 alt.Tooltip("accept_rate:Q", format=".1%"), alt.Tooltip("speedup:Q", format=".2f"),
                 "verdict"])
    pts = base.mark_point(filled=True, size=110).encode(
        color=alt.Color("speedup:Q", title="speedup (×)",
                        scale=alt.Scale(scheme="redyellowgreen", domainMid=1.0)),
        shape=alt.Shape("verdict:N", legend=alt.Legend(orient="right", title="verdict")))
    labels = base.mark_text(align="left", dx=8, dy=-6, fontSize=11).encode(text="label:N")
    return alt.layer(pts, labels).properties(height=380, usermeta={"chart": "scatter"})


def histogram(h: pd.DataFrame) -> alt.Chart:
    return alt.Chart(h).transform_joinaggregate(
        total="sum(verify_steps)", groupby=["run_id"]).transform_calculate(
        share="datum.verify_steps / datum.total").mark_bar().encode(
        x=alt.X("accepted_drafts:O", title="draft tokens accepted in a verify step",
                axis=alt.Axis(labelAngle=0)),
        xOffset="label:N",
        y=alt.Y("share:Q", title="share of verify steps", axis=alt.Axis(format="%")),
        color=alt.Color("label:N", legend=alt.Legend(orient="top", title=None)),
        tooltip=["label", "accepted_drafts", "verify_steps", alt.Tooltip("share:Q", format=".1%")]
    ).properties(height=340, usermeta={"chart": "histogram"})


def positions(p: pd.DataFrame) -> alt.Chart:
    return alt.Chart(p).mark_line(point=True).encode(
        x=alt.X("position:O", title="draft position k", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("accepted_share:Q", title="share of verify steps accepting position k",
                axis=alt.Axis(format="%"), scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("label:N", legend=alt.Legend(orient="top", title=None)),
        tooltip=["label", "position", alt.Tooltip("accepted_share:Q", format=".1%"), "basis"]
    ).properties(height=300, usermeta={"chart": "positions"})


def timeseries(w: pd.DataFrame, col: str, title: str, key: str, x_title: str) -> alt.LayerChart:
    multi_rank = w.groupby("run_id")["dp_rank"].nunique().max() > 1
    legend = alt.Legend(orient="right", title=None, labelLimit=360)
    color = alt.Color("series:N" if multi_rank else "label:N", legend=legend)
    shape = alt.Shape("window:N", scale=alt.Scale(domain=["kept", "after idle (not in summaries)"],
                                                  range=["circle", "cross"]), legend=legend)
    base = alt.Chart(w).encode(
        x=alt.X("t_s:Q", title=x_title), y=alt.Y(f"{col}:Q", title=title),
        tooltip=["label", "dp_rank", "ts:T", alt.Tooltip("t_s:Q", format=".3f"),
                 alt.Tooltip(f"{col}:Q", format=".2f"), "window"])
    line = base.mark_line(opacity=0.7).encode(color=color, detail="series:N")
    pts = base.mark_point(size=28, filled=False).encode(color=color, shape=shape)
    return alt.layer(line, pts).properties(height=300, title=title, usermeta={"chart": key})
