"""The Concurrency view's recommended schedule: `specwatch recommend` (diagnose/recommend.py) for
one sweep and engine, drawn over the speedup chart (charts.speedup_vs_concurrency) and shown in the
engine's own format. Nothing here computes a metric: the bands come from recommend, which reads the
store's views through the read-only `query.run_sql`.
"""
from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from specwatch.diagnose import recommend


@st.cache_data(max_entries=16, show_spinner=False)
def _schedule(db: str, stamp: tuple, sweep: str, engine: str) -> dict | None:
    """`specwatch recommend`'s schedule of one sweep (recommend.recommend), once per store change."""
    try:
        return recommend.recommend(db, engine, sweep=sweep).payload()
    except recommend.RecommendError:
        return None


def pick(r, spec: pd.DataFrame) -> dict | None:
    """Pick the sweep and engine of the schedule drawn over the chart; its recommendation."""
    sweeps = [s for s in dict.fromkeys(spec.sort_values("concurrency")["sweep_name"].dropna())
              if not str(s).endswith(recommend.VERIFY_SUFFIX)]
    if not sweeps:
        return None
    cols = st.columns(2)
    sweep = cols[0].selectbox("Schedule of sweep", sweeps, key="sched_sweep") \
        if len(sweeps) > 1 else sweeps[0]
    ran = spec[spec["sweep_name"] == sweep]["engine"].dropna()
    default = ran.iloc[0] if len(ran) and ran.iloc[0] in recommend.ENGINES else "sglang"
    engine = cols[1 if len(sweeps) > 1 else 0].selectbox(
        "for engine", list(recommend.ENGINES), index=list(recommend.ENGINES).index(default),
        key="sched_engine")
    return _schedule(r.db, r.stamp, sweep, engine)


def details(rec: dict) -> None:
    st.subheader(f"Recommended schedule · {rec['engine']}")
    st.dataframe(pd.DataFrame([{
        "batch size": f"{b['batch_size_min']}+" if b["batch_size_max"] is None
        else str(b["batch_size_min"]) if b["batch_size_max"] == b["batch_size_min"]
        else f"{b['batch_size_min']}-{b['batch_size_max']}", "k": b["steps"],
        "config": b["config"], "gain": b["speedup"], "gain low": b["speedup_ci_low"],
        "gain high": b["speedup_ci_high"], "why": b["reason"]} for b in rec["bands"]]),
        hide_index=True, key="sched_table", column_config={
            c: st.column_config.NumberColumn(format="%.2f×") for c in ("gain", "gain low",
                                                                         "gain high")})
    if rec["schedule"] is None:
        st.caption("No load gains from speculation: serve without it.")
    elif rec["engine"] == "vllm":
        st.code("--speculative-config '" + json.dumps(rec["speculative_config"]) + "'",
                language="bash")
    else:
        st.code(json.dumps(rec["schedule"], indent=1), language="json")
        st.caption("Save as schedule.json and launch with: " + " ".join(rec["flags"]))
    for text in rec["limits"]:
        st.caption(f"Limit: {text}")
