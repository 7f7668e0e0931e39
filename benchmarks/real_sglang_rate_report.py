"""The real-SGLang rate sweep (issue 30) and its GPU energy (issue 32), read back on the CPU machine.

Reads the database that `benchmarks/real_sglang_h200.py --phases rate` wrote on the H200 (or that
`energy_gpu.py store --no-table` stored here from its pickle) and writes a markdown file with:

  from specwatch's views (never recomputed here): per config and request rate, goodput under the
  SLO with its 95% interval, SLO attainment, the percentiles the SLO judges, the margin and its
  verdict (group_slo), tok/s, speedup and energy per output token (config_stats); the max rate
  under the SLO with its interval (config_max_rate); the crossover (config_crossover); and
  whether `specwatch report --format json` carries the same numbers;

  checks computed here from the stored rows alone, independent of those views:
    - schedule: each run's stored `arrival_offset_ms` against `arrivals.rate_offsets(n, rate,
      1.0, (seed, repeat))` (the Poisson schedule the load was asked for), the real send times
      against it (lateness), the achieved rate (n - 1) / span and the CV of the sent gaps, a KS
      statistic of the sent gaps (times the rate) against Exp(1), and whether a config and its
      baseline got the same schedule at each (rate, repeat);
    - acceptance: every measured request's `spec_accept_histogram` (SGLang's
      spec_correct_drafts_histogram) and verify count against the fixture's prediction
      (`../shared/real-sglang-h200/expected_histogram.py`) for the request's own prompt;
    - goodput: good requests / run duration from the request rows and the sweep's [slo] (numpy
      percentiles), against run_slo;
    - energy: gpu_energy_j / output tokens per run against the views, and the NVML counter
      against the trapezoid of the power samples stored beside it.

    python benchmarks/real_sglang_rate_report.py --db real_rate.duckdb \
        --device-json real_sglang_h200.json --tools ../shared/real-sglang-h200 \
        --md benchmarks/results/real_sglang_rate_h200.md
"""
from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def fmt(v, nd: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.{nd}g}" if abs(v) < 1e4 else f"{v:.0f}"
    return str(v)


def ci(m, lo, hi, nd: int = 3) -> str:
    if m is None:
        return "—"
    if lo is None or hi is None:
        return fmt(m, nd)
    return f"{fmt(m, nd)} [{fmt(lo, nd)}, {fmt(hi, nd)}]"


def md_table(cols: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def ks_exp(x: np.ndarray) -> float:
    """Kolmogorov-Smirnov distance of x (unit-mean gaps) from Exp(1)."""
    x = np.sort(x)
    n = len(x)
    cdf = 1 - np.exp(-x)
    i = np.arange(1, n + 1)
    return float(max(np.max(i / n - cdf), np.max(cdf - (i - 1) / n)))


def sweep_of(text: str, prompts_text: list[str]):
    """The measured sweep, parsed here: the GPU host's prompts file is rewritten to a local copy
    with the same prompts (request_idx -> prompt needs the workload's own sampling)."""
    from specwatch.run import sweepfile
    tmp = Path(tempfile.mkdtemp()) / "prompts.jsonl"
    tmp.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts_text))
    text = re.sub(r'(?m)^prompts = .*$', f'prompts = "{tmp}"', text)
    return sweepfile.loads(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--device-json", default=None, help="real_sglang_h200.json from the device")
    ap.add_argument("--sweep-file", default=None, help="the sweep file (default: from the JSON)")
    ap.add_argument("--sweep", default=None, help="sweep name (default: the only one)")
    ap.add_argument("--tools", default=str(ROOT.parent / "shared" / "real-sglang-h200"))
    ap.add_argument("--miss-mod", type=int, default=5)
    ap.add_argument("--md", default=None)
    ap.add_argument("--header", default=None, help="markdown prepended (provenance, commands)")
    args = ap.parse_args()

    import duckdb

    from specwatch.run import arrivals, load

    sys.path.insert(0, args.tools)
    from expected_histogram import predict  # noqa: E402

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from real_sglang_h200 import PROMPTS  # noqa: E402

    dev = json.loads(Path(args.device_json).read_text()) if args.device_json else {}
    rate_ph = (dev.get("phases") or {}).get("rate") or {}
    sweep_text = (Path(args.sweep_file).read_text() if args.sweep_file
                  else rate_ph.get("sweep_file"))
    sw = sweep_of(sweep_text, PROMPTS)
    _warm, specs = load.build_requests(sw.workload, load.read_prompts(sw.workload))

    con = duckdb.connect(args.db, read_only=True)

    def q(sql, *a):
        cur = con.execute(sql, list(a))
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]
    name = args.sweep or sw.name
    runs = q("""SELECT * FROM runs WHERE sweep_name = ? ORDER BY config_name, request_rate,
                repeat_idx""", name)
    L: list[str] = []
    if args.header:
        L += [Path(args.header).read_text().rstrip(), ""]
    st = {}
    for r in runs:
        st[r["status"]] = st.get(r["status"], 0) + 1
    L += [f"Sweep `{name}`: {len(runs)} runs stored ({st}); SLO: "
          f"p{sw.traffic.slo.percentile:g} TTFT <= {fmt(sw.traffic.slo.ttft_ms)} ms and "
          f"E2E <= {fmt(sw.traffic.slo.e2e_ms)} ms; arrivals {sw.traffic.arrival}; "
          f"{sw.workload.num_prompts} measured requests per run "
          f"({sw.workload.warmup_requests} warm-up per server), "
          f"{sw.workload.output_tokens.min} output tokens each, greedy.", ""]

    # ------------------------------------------------------------------ views
    g = q("""SELECT g.config, g.request_rate, g.slo_repeats, g.achieved_rate_req_s,
               g.goodput_req_s_mean, g.goodput_req_s_ci_low, g.goodput_req_s_ci_high,
               g.slo_attainment_frac, g.ttft_ms_at_slo_pct, g.e2e_ms_at_slo_pct,
               g.slo_margin_mean, g.slo_margin_ci_low, g.slo_margin_ci_high, g.slo_verdict,
               c.output_tok_s_mean, c.speedup, c.speedup_ci_low, c.speedup_ci_high, c.verdict,
               c.accept_len, c.energy_repeats, c.joules_per_output_token_mean,
               c.joules_per_token_vs_baseline, c.rate_search_only
             FROM group_slo g JOIN config_stats c USING (group_id)
             WHERE g.sweep_name = ? ORDER BY g.is_baseline DESC, g.config, g.request_rate""",
          name)
    L += ["## Goodput under the SLO, per config and request rate (views group_slo, config_stats)",
          "", "Intervals are 95% (t over the repeats). mJ/tok = GPU energy over the load (NVML "
          "counter) / output tokens, mean over repeats; vs base = that / the baseline's at the same "
          "rate.", ""]
    L += md_table(
        ["config", "rate /s", "n", "sent /s", "goodput req/s [95% CI]", "attained",
         f"TTFT p{sw.traffic.slo.percentile:g} ms", f"E2E p{sw.traffic.slo.percentile:g} ms",
         "margin [95% CI]", "SLO", "tok/s", "speedup [95% CI]", "accept len", "mJ/tok",
         "energy vs base"],
        [[x["config"] + (" (searched)" if x["rate_search_only"] else ""), fmt(x["request_rate"]),
          x["slo_repeats"], fmt(x["achieved_rate_req_s"]),
          ci(x["goodput_req_s_mean"], x["goodput_req_s_ci_low"], x["goodput_req_s_ci_high"]),
          f"{100 * x['slo_attainment_frac']:.0f}%" if x["slo_attainment_frac"] is not None
          else "—", fmt(x["ttft_ms_at_slo_pct"]), fmt(x["e2e_ms_at_slo_pct"]),
          ci(x["slo_margin_mean"], x["slo_margin_ci_low"], x["slo_margin_ci_high"], 2),
          x["slo_verdict"], fmt(x["output_tok_s_mean"], 4),
          ci(x["speedup"], x["speedup_ci_low"], x["speedup_ci_high"]) if x["config"] != "baseline"
          else "1", fmt(x["accept_len"], 4),
          fmt(1000 * x["joules_per_output_token_mean"])
          if x["joules_per_output_token_mean"] is not None else "—",
          fmt(x["joules_per_token_vs_baseline"])] for x in g])
    mr = q("SELECT * FROM config_max_rate WHERE sweep_name = ? ORDER BY is_baseline DESC, config",
           name)
    L += ["", "## Max rate under the SLO (view config_max_rate)", ""]
    L += md_table(["config", "rates measured", "max rate req/s", "95% interval",
                   "highest measured rate that meets", "note"],
                  [[m["config"], f"{m['rates_measured']} ({fmt(m['min_rate_req_s'])}-"
                    f"{fmt(m['max_measured_rate_req_s'])}/s)",
                    f"{fmt(m['max_rate_req_s'])} ({m['max_rate_state']})",
                    f"[{fmt(m['max_rate_ci_low'])} ({m['max_rate_low_state']}), "
                    f"{fmt(m['max_rate_ci_high'])} ({m['max_rate_high_state']})]",
                    fmt(m["max_rate_meeting_req_s"]), m["max_rate_note"]] for m in mr])
    cx = q("SELECT * FROM config_crossover WHERE sweep_name = ? ORDER BY config, load_kind", name)
    L += ["", "## Crossover (view config_crossover)", ""]
    L += md_table(["config", "load", "loads measured", "crossover", "95% interval", "note"],
                  [[c["config"], c["load_kind"], c["loads_measured"],
                    f"{fmt(c['crossover_load'])} ({c['crossover_state']})",
                    f"[{fmt(c['crossover_ci_low'])} ({c['crossover_low_state']}), "
                    f"{fmt(c['crossover_ci_high'])} ({c['crossover_high_state']})]",
                    c["crossover_note"]] for c in cx])

    # report --format json against the views
    rep = subprocess.run([sys.executable, "-m", "specwatch.cli", "report", "--db", args.db,
                          "--sweep", name, "--format", "json"], capture_output=True, text=True,
                         cwd=ROOT)
    L += ["", "## `specwatch report --format json` against the views", ""]
    try:
        js = json.loads(rep.stdout)
        diffs = []

        def same(a, b):
            return (a is None and b is None) or (a is not None and b is not None
                                                 and abs(a - b) <= 1e-9 * max(1, abs(b)))
        for x in g:
            row = next((s for s in js.get("slo", []) if s.get("config") == x["config"]
                        and s.get("request_rate") == x["request_rate"]), None)
            if row is None:
                diffs.append(f"slo row {x['config']} {x['request_rate']} missing")
                continue
            for k in ("goodput_req_s_mean", "goodput_req_s_ci_low", "slo_margin_mean"):
                if not same(row.get(k), x[k]):
                    diffs.append(f"slo {x['config']} {x['request_rate']} {k}: "
                                 f"{row.get(k)} vs {x[k]}")
        for m in mr:
            row = next((s for s in js.get("max_rate", []) if s.get("config") == m["config"]), None)
            if row is None or not same(row.get("max_rate_req_s"), m["max_rate_req_s"]) or \
                    row.get("max_rate_state") != m["max_rate_state"]:
                diffs.append(f"max_rate {m['config']}: {row and row.get('max_rate_req_s')} vs "
                             f"{m['max_rate_req_s']}")
        for c in cx:
            row = next((s for s in js.get("crossover", []) if s.get("config") == c["config"]
                        and s.get("load_kind") == c["load_kind"]), None)
            if row is None or not same(row.get("crossover_load"), c["crossover_load"]) or \
                    row.get("crossover_state") != c["crossover_state"]:
                diffs.append(f"crossover {c['config']}: {row and row.get('crossover_load')} vs "
                             f"{c['crossover_load']}")
        L.append(f"sections {sorted(js)}; {len(js.get('slo', []))} slo rows, "
                 f"{len(js.get('max_rate', []))} max_rate rows, "
                 f"{len(js.get('crossover', []))} crossover rows; "
                 + ("every goodput, margin, max rate and crossover equals the view's"
                    if not diffs else f"DIFFERENCES: {diffs}"))
    except json.JSONDecodeError:
        L.append(f"report --format json failed: {rep.stderr[-800:]}")

    # ------------------------------------------------------------------ independent checks
    reqs = {}
    for r in q("""SELECT run_id, request_idx, success, ttft_ms, tpot_ms, e2e_ms, output_tokens,
                         spec_verify_ct, spec_accept_histogram, arrival_offset_ms, send_offset_ms
                  FROM requests WHERE NOT coalesce(is_warmup, false)
                  ORDER BY run_id, request_idx"""):
        reqs.setdefault(r["run_id"], []).append(r)
    slo = sw.traffic.slo
    p = slo.percentile
    vs = {r["run_id"]: r for r in q("SELECT * FROM run_slo")}
    arr = {r["run_id"]: r for r in q("SELECT * FROM run_arrivals")}
    rm = {r["run_id"]: r for r in q("SELECT run_id, joules_per_output_token FROM run_metrics")}
    sched_rows, acc_rows, good_rows, energy_rows = [], [], [], []
    sched_by_key: dict[tuple, dict[str, list]] = {}
    worst = {"arrival": 0.0, "goodput": 0.0, "pct": 0.0, "jpt": 0.0}
    acc_tot = acc_ok = 0
    for r in runs:
        rid, rows = r["run_id"], reqs.get(r["run_id"], [])
        if r["status"] != "ok" or not rows:
            continue
        rate, rep_i = r["request_rate"], r["repeat_idx"]
        n = len(rows)
        want = np.array(arrivals.rate_offsets(n, rate, 1.0, (sw.workload.seed, rep_i))) * 1000
        got_arr = np.array([x["arrival_offset_ms"] for x in rows], dtype=float)
        sent = np.array([x["send_offset_ms"] for x in rows], dtype=float)
        d_arr = float(np.max(np.abs(got_arr - want)))
        worst["arrival"] = max(worst["arrival"], d_arr)
        late = sent - want
        order = np.sort(sent)
        gaps = np.diff(order)
        achieved = (n - 1) * 1000 / (order[-1] - order[0])
        sched_by_key.setdefault((rate, rep_i), {})[r["config_name"]] = list(got_arr)
        sched_rows.append([r["config_name"], fmt(rate), rep_i, n, f"{d_arr:.2g}",
                           f"{np.percentile(late, 50):.2f}", f"{np.percentile(late, 99):.2f}",
                           f"{late.max():.2f}", f"{achieved:.3g}",
                           fmt(arr.get(rid, {}).get("achieved_rate_req_s")),
                           f"{gaps.std(ddof=1) / gaps.mean():.3f}", f"{ks_exp(gaps * rate / 1000):.3f}"])
        # acceptance against the fixture's prediction (chain configs only)
        if r["speculative_eagle_topk"] == 1:
            ok = 0
            for x in rows:
                pred = predict(specs[x["request_idx"]].prompt, x["output_tokens"], args.miss_mod)
                h = list(x["spec_accept_histogram"] or [])
                while len(h) > len(pred) and h[-1] == 0:
                    h.pop()
                ok += int(h == pred and x["spec_verify_ct"] == sum(pred))
            acc_tot += n
            acc_ok += ok
            acc_rows.append([r["config_name"], fmt(rate), rep_i, f"{ok}/{n}",
                             fmt(r["client_accept_len"], 5), fmt(r["server_accept_len"], 5)])
        # goodput from the rows
        okr = [x for x in rows if x["success"]]
        good = sum(1 for x in okr if (slo.ttft_ms is None or x["ttft_ms"] <= slo.ttft_ms)
                   and (slo.e2e_ms is None or x["e2e_ms"] <= slo.e2e_ms)
                   and (slo.tpot_ms is None or (x["tpot_ms"] or 0) <= slo.tpot_ms))
        gp = good / r["duration_s"]
        pt = float(np.percentile([x["ttft_ms"] for x in okr], p))
        pe = float(np.percentile([x["e2e_ms"] for x in okr], p))
        v = vs.get(rid, {})
        worst["goodput"] = max(worst["goodput"], abs(gp - (v.get("goodput_req_s") or 0)))
        worst["pct"] = max(worst["pct"], abs(pt - (v.get("ttft_ms_at_slo_pct") or 0)),
                           abs(pe - (v.get("e2e_ms_at_slo_pct") or 0)))
        good_rows.append([r["config_name"], fmt(rate), rep_i, f"{good}/{n}", f"{gp:.4g}",
                          fmt(v.get("goodput_req_s"), 4), f"{pt:.4g}", f"{pe:.4g}",
                          "yes" if (pt <= (slo.ttft_ms or math.inf) and pe <= (slo.e2e_ms or math.inf))
                          else "no", fmt(v.get("meets_slo"))])
        # energy
        if r["gpu_energy_j"] is not None:
            jpt = r["gpu_energy_j"] / r["output_tokens"]
            worst["jpt"] = max(worst["jpt"], abs(jpt - (rm.get(rid, {}).get(
                "joules_per_output_token") or 0)))
            ps = q("""SELECT t_s, value FROM metric_samples WHERE run_id = ? AND
                      name = 'nvml:gpu_power_w' ORDER BY t_s""", rid)
            trap = (sum((b["t_s"] - a["t_s"]) * (a["value"] + b["value"]) / 2
                        for a, b in zip(ps, ps[1:])) if len(ps) >= 2 else None)
            span = ps[-1]["t_s"] - ps[0]["t_s"] if len(ps) >= 2 else None
            energy_rows.append([r["config_name"], fmt(rate), rep_i, f"{r['gpu_energy_j']:.1f}",
                                r["gpu_energy_method"], r["output_tokens"],
                                f"{1000 * jpt:.3f}", fmt(r["duration_s"]),
                                f"{r['gpu_energy_j'] / r['duration_s']:.1f}"
                                if r["duration_s"] else "—",
                                len(ps), f"{trap:.1f}" if trap is not None else "—",
                                f"{span:.2f}" if span is not None else "—"])
    same_sched = [k for k, v in sched_by_key.items() if len(v) > 1
                  and all(np.array_equal(a, list(v.values())[0]) for a in v.values())]
    pairs = [k for k, v in sched_by_key.items() if len(v) > 1]
    L += ["", "## Checks computed here from the stored rows (independent of the views)", "",
          "### Arrivals against the Poisson schedule", "",
          "schedule = `arrivals.rate_offsets(n, rate, 1.0, (seed, repeat))` x 1000 (ms); "
          "lateness = stored send_offset_ms - schedule; achieved = (n - 1) / (last send - first "
          "send) here and in the view run_arrivals; CV and KS (distance of the sent gaps x rate "
          "from Exp(1); 5% critical value about 1.36 / sqrt(n - 1)) of the sent gaps.", "",
          f"Largest abs(stored arrival_offset_ms - schedule) over all runs: {worst['arrival']:.3g} ms. "
          f"Config and baseline got the identical schedule at {len(same_sched)} of {len(pairs)} "
          "(rate, repeat) pairs.", ""]
    L += md_table(["config", "rate /s", "repeat", "n", "max abs(arrival - schedule) ms",
                   "lateness p50 ms", "p99 ms", "max ms", "achieved /s (here)",
                   "achieved /s (view)", "gap CV", "KS vs Exp(1)"], sched_rows)
    L += ["", "### Acceptance against the fixture's prediction", "",
          f"{acc_ok} of {acc_tot} measured requests of the chain EAGLE-3 config: stored "
          "spec_accept_histogram and spec_verify_ct equal `expected_histogram.predict(prompt, "
          f"output_tokens, {args.miss_mod})` for the request's own prompt, at every rate.", ""]
    L += md_table(["config", "rate /s", "repeat", "requests = prediction",
                   "client accept len", "/server_info accept len"], acc_rows)
    L += ["", "### Goodput and percentiles from the request rows", "",
          f"good = success and TTFT <= {fmt(slo.ttft_ms)} ms and E2E <= {fmt(slo.e2e_ms)} ms; "
          f"goodput = good / runs.duration_s; percentiles by numpy (linear). Largest difference "
          f"from run_slo: goodput {worst['goodput']:.2g} req/s, percentiles {worst['pct']:.2g} ms.",
          ""]
    L += md_table(["config", "rate /s", "repeat", "good", "goodput (here)", "goodput (view)",
                   f"TTFT p{p:g}", f"E2E p{p:g}", "meets (here)", "meets (view)"], good_rows)
    L += ["", "### GPU energy per run (issue 32)", "",
          ("Every ok run stored gpu_energy_j. " if energy_rows and len(energy_rows) == sum(
              1 for r in runs if r["status"] == "ok") else
           f"{len(energy_rows)} of {sum(1 for r in runs if r['status'] == 'ok')} ok runs stored "
           "gpu_energy_j. ")
          + f"J/token here (gpu_energy_j / runs.output_tokens) vs run_metrics: largest difference "
          f"{worst['jpt']:.2g} J. trapezoid = ∫ nvml:gpu_power_w dt over the stored samples (1 s "
          "apart, first and last bound the load), a cross-check of the counter, over their span.",
          ""]
    L += md_table(["config", "rate /s", "repeat", "energy J", "method", "output tokens",
                   "mJ/tok", "duration s", "mean W", "power samples", "trapezoid J",
                   "sample span s"], energy_rows)
    text = "\n".join(L) + "\n"
    if args.md:
        Path(args.md).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
