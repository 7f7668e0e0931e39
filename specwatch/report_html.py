"""`specwatch report --format html`: the verdict as one self-contained HTML page to attach.

One file, nothing fetched when it is opened (inline CSS, plots as inline SVG drawn by matplotlib,
no scripts, fonts or images from elsewhere), a few hundred KB for the example sweep. Per sweep:

  - the verdict table (config_stats through query.stats_report, cells formatted as the terminal
    table's: tables.py), the winner per load level, and the reasons `specwatch doctor` gives for
    the configs in it (doctor.diagnose: code, severity, title, evidence numbers, next step);
  - plots: speedup by load (concurrency or request rate) with its 95% interval, accept length
    by load with its range over repeats, the Pareto of per-user tok/s against total tok/s with the
    frontier marked (config_verdicts.pareto_frontier), and per-config time series of the first
    repeat at each load level: decode windows' accept length and gen throughput, the /metrics
    gauge sglang:spec_accept_length and the GPU power NVML sampled, where stored;
  - the environment fingerprint: engine, model and draft (paths, architecture, depth, the draft
    weights' sha1), SGLang version, hosts, GPUs, energy method, server flags, the sampling
    fingerprint, when it ran; and the versions that wrote this page.

Every number comes from the views (db/views.py, db/stats.py): this module selects, formats and
draws, and computes no metric. matplotlib is the optional extra `report`.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import html
import io
import platform
from pathlib import Path

from specwatch import tables
from specwatch.db import query

MAX_POINTS = 300          # points per plotted time series (every k-th window beyond)
MAX_SERIES = 10           # lines per time-series plot (the first ones in config order)
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf"]

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1180px;
color:#1d1d1f;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:18px 0 6px}.muted{color:#666;font-size:12px}
table{border-collapse:collapse;margin:6px 0 10px;font-size:13px}
th,td{border-bottom:1px solid #e4e4e4;padding:3px 9px;text-align:right;white-space:nowrap}
th{background:#f5f5f7;font-weight:600}td.l,th.l{text-align:left}
td.why{white-space:normal;min-width:280px}.wrap{overflow-x:auto}
.pays{color:#137333;font-weight:600}.loses{color:#b3261e;font-weight:600}
.unclear,.interrupted{color:#8a6d00}.failed{color:#b3261e}
.finding{margin:4px 0;padding:4px 8px;border-left:4px solid #bbb;background:#fafafa}
.error{border-color:#b3261e}.warning{border-color:#e0a000}.info{border-color:#1f77b4}
.plots{display:flex;flex-wrap:wrap;gap:8px}.plots svg{max-width:100%;height:auto}
dl.env{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;font-size:13px}
dl.env dt{color:#555}dl.env dd{margin:0;word-break:break-all}
"""


def esc(v) -> str:
    return html.escape("" if v is None else str(v))


# --------------------------------------------------------------------------------- reading

def _rows(db, sql: str, params=()) -> list[dict]:
    return query.run_sql(db, sql, list(params), max_rows=1_000_000, timeout_s=60).dicts()


def _scope(run: str | None, sweep: str | None, alias: str = "") -> tuple[str, list]:
    """WHERE text keeping the groups that contain `run` and/or the sweep `sweep`."""
    a = f"{alias}." if alias else ""
    where, params = [], []
    if run:
        where.append(f"{a}group_id IN (SELECT group_id FROM run_metrics WHERE run_id = ? OR "
                     "run_name = ?)")
        params += [run, run]
    if sweep:
        where.append(f"{a}sweep_name = ?")
        params.append(sweep)
    return (" WHERE " + " AND ".join(where)) if where else "", params


def _series_runs(db, run, sweep) -> list[dict]:
    """The first repeat of each (sweep, config, load level) in scope: the runs plotted over time."""
    cond, params = _scope(run, sweep, "m")
    return _rows(db, f"""
        SELECT DISTINCT ON (m.sweep_name, m.group_id) m.run_id, m.sweep_name,
          coalesce(m.config_name, m.run_name) AS config, m.concurrency, m.request_rate
        FROM run_metrics m{cond}
        ORDER BY m.sweep_name, m.group_id, m.repeat_idx NULLS FIRST, m.run_id""", params)


def _windows(db, run_ids: list[str]) -> list[dict]:
    """Decode windows of those runs, seconds since the run's first window (log time), thinned
    for plotting."""
    if not run_ids:
        return []
    return _rows(db, f"""
        WITH w AS (
          SELECT d.run_id, d.ts, d.accept_len, d.gen_throughput_tok_s, d.byte_offset, d.dp_rank,
            row_number() OVER (PARTITION BY d.run_id, d.dp_rank ORDER BY d.byte_offset) AS n,
            count(*) OVER (PARTITION BY d.run_id, d.dp_rank) AS total
          FROM decode_windows_scoped d WHERE d.run_id IN (SELECT unnest(?::VARCHAR[])))
        SELECT w.run_id, coalesce(w.dp_rank, 0) AS dp_rank, w.accept_len, w.gen_throughput_tok_s,
          date_diff('millisecond', min(w.ts) OVER (PARTITION BY w.run_id), w.ts) / 1000.0 AS t_s
        FROM w
        WHERE (n - 1) % greatest(1, ceil(total / {MAX_POINTS})::BIGINT) = 0
        ORDER BY w.run_id, w.dp_rank, w.byte_offset""", [run_ids])


def _samples(db, run_ids: list[str]) -> list[dict]:
    """The stored /metrics accept-length gauge (mean over its label sets) and NVML power (sum
    over the run's GPUs) of those runs, per scrape."""
    if not run_ids:
        return []
    return _rows(db, """
        SELECT run_id, name, t_s,
          CASE WHEN name = 'nvml:gpu_power_w' THEN sum(value) ELSE avg(value) END AS value
        FROM metric_samples
        WHERE run_id IN (SELECT unnest(?::VARCHAR[]))
          AND name IN ('sglang:spec_accept_length', 'nvml:gpu_power_w') AND t_s IS NOT NULL
        GROUP BY run_id, name, sampled_at, t_s ORDER BY run_id, name, t_s""", [run_ids])


ENV_SQL = """
SELECT coalesce(sweep_name, '(ingested logs)') AS sweep, count(*) AS runs,
  string_agg(DISTINCT engine, ', ') AS engine,
  string_agg(DISTINCT model_path, ', ') AS model,
  string_agg(DISTINCT target_architecture || ' (' || target_num_layers || ' layers)', ', ')
    AS target_architecture,
  string_agg(DISTINCT draft_model_path, ', ') AS draft_models,
  string_agg(DISTINCT draft_weights_sha1, ', ') AS draft_weights_sha1,
  string_agg(DISTINCT sglang_version, ', ') AS sglang_version,
  string_agg(DISTINCT node_hostname, ', ') AS hosts,
  string_agg(DISTINCT gpu_ids, ' ') AS gpu_ids,
  string_agg(DISTINCT gpu_energy_method, ', ') AS gpu_energy,
  string_agg(DISTINCT attached_endpoint, ', ') AS attached_endpoint,
  string_agg(DISTINCT server_flags, ' ') AS server_flags,
  string_agg(DISTINCT sampling_fingerprint, ' | ') AS sampling_fingerprint,
  strftime(min(created_at), '%Y-%m-%d %H:%M:%S') AS first_run,
  strftime(max(coalesce(ended_at, created_at)), '%Y-%m-%d %H:%M:%S') AS last_run
FROM runs {cond} GROUP BY ALL ORDER BY sweep
"""


# --------------------------------------------------------------------------------- drawing

def _svg(fig) -> str:
    """A matplotlib Figure as an inline <svg> element: text kept as text, no external refs."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "specwatch"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _figure(w: float = 5.6, h: float = 3.2):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=72)
    return fig, fig.subplots()


def _color(configs: list[str]) -> dict[str, str]:
    return {c: COLORS[i % len(COLORS)] for i, c in enumerate(configs)}


def _load_key(rows: list[dict]) -> str:
    """The load axis of a sweep's groups: concurrency, or the request rate for open-loop sweeps."""
    n_c = sum(r["concurrency"] is not None for r in rows)
    n_r = sum(r.get("request_rate") is not None for r in rows)
    return "request_rate" if n_r > n_c else "concurrency"


def _load_axis(ax, values, key: str) -> None:
    values = sorted({v for v in values if v is not None})
    if values and values[0] > 0 and values[-1] / values[0] >= 4:
        ax.set_xscale("log", base=2)
    ax.set_xticks(values, [f"{v:g}" for v in values])
    ax.set_xlabel("concurrency" if key == "concurrency" else "request rate (req/s)")


def _by_load(rows: list[dict], have: str) -> tuple[str, list[dict]]:
    """(load key, the groups with `have` and a load level, the rate search's own rates left out)."""
    key = _load_key(rows)
    return key, [r for r in rows if r[have] is not None and r.get(key) is not None
                 and not r.get("rate_search_only")]


def _pos(v: list[float]) -> list[float]:
    """Error-bar lengths: a mean equal to its min or max in rounding gives -1e-16, not a bar."""
    return [max(0.0, x) for x in v]


def plot_speedup(rows: list[dict], color: dict) -> str | None:
    key, spec = _by_load([r for r in rows if not r["is_baseline"]], "speedup")
    if not spec:
        return None
    fig, ax = _figure()
    for cfg in dict.fromkeys(r["config"] for r in spec):
        mine = sorted((r for r in spec if r["config"] == cfg), key=lambda r: r[key])
        x = [r[key] for r in mine]
        y = [r["speedup"] for r in mine]
        lo = [r["speedup"] - r["speedup_ci_low"] if r["speedup_ci_low"] is not None else 0
              for r in mine]
        hi = [r["speedup_ci_high"] - r["speedup"] if r["speedup_ci_high"] is not None else 0
              for r in mine]
        ax.errorbar(x, y, yerr=[_pos(lo), _pos(hi)], marker="o", capsize=3, label=cfg,
                    color=color[cfg])
    ax.axhline(1.0, color="#444", linestyle="--", linewidth=1)
    _load_axis(ax, [r[key] for r in spec], key)
    ax.set_ylabel("speedup over baseline (×)")
    ax.set_title("Speedup by load, 95% interval", fontsize=11)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _svg(fig)


def plot_accept_len(rows: list[dict], color: dict) -> str | None:
    key, spec = _by_load(rows, "accept_len")
    if not spec:
        return None
    fig, ax = _figure()
    for cfg in dict.fromkeys(r["config"] for r in spec):
        mine = sorted((r for r in spec if r["config"] == cfg), key=lambda r: r[key])
        y = [r["accept_len"] for r in mine]
        lo = [r["accept_len"] - (r["accept_len_min"] if r["accept_len_min"] is not None
                                 else r["accept_len"]) for r in mine]
        hi = [(r["accept_len_max"] if r["accept_len_max"] is not None else r["accept_len"])
              - r["accept_len"] for r in mine]
        ax.errorbar([r[key] for r in mine], y, yerr=[_pos(lo), _pos(hi)], marker="o",
                    capsize=3, label=cfg, color=color[cfg])
    _load_axis(ax, [r[key] for r in spec], key)
    ax.set_ylabel("accept length (tokens / verify)")
    ax.set_title("Accept length by load, range over repeats", fontsize=11)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _svg(fig)


def plot_pareto(rows: list[dict], color: dict) -> str | None:
    pts = [r for r in rows
           if r["per_user_tok_s"] is not None and r["output_tok_s_mean"] is not None]
    if not pts:
        return None
    fig, ax = _figure()
    for cfg in dict.fromkeys(r["config"] for r in pts):
        mine = sorted((r for r in pts if r["config"] == cfg),
                      key=lambda r: (r["concurrency"] or 0, r.get("request_rate") or 0))
        ax.plot([r["output_tok_s_mean"] for r in mine], [r["per_user_tok_s"] for r in mine],
                color=color[cfg], linewidth=1, label=cfg)
        for r in mine:
            front = bool(r["pareto_frontier"])
            ax.scatter([r["output_tok_s_mean"]], [r["per_user_tok_s"]], marker="D",
                       s=36 if front else 22, color=color[cfg] if front else "white",
                       edgecolors=color[cfg], zorder=3)
            ax.annotate(tables.level(r["concurrency"], r.get("request_rate")),
                        (r["output_tok_s_mean"], r["per_user_tok_s"]),
                        fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("total output tok/s (mean over repeats)")
    ax.set_ylabel("per-user tok/s (1000 / median TPOT)")
    ax.set_title("Latency vs throughput (filled: Pareto frontier)", fontsize=11)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _svg(fig)


def plot_series(series: list[dict], windows: list[dict], samples: list[dict], color: dict,
                column: str, title: str, ylabel: str, source: str = "windows") -> list[str]:
    """One plot per load level: `column` over time, one line per config (its first repeat)."""
    out = []
    data = windows if source == "windows" else [s for s in samples if s["name"] == column]
    key = column if source == "windows" else "value"
    by_run: dict[str, list[dict]] = {}
    for w in data:
        if w[key] is not None:
            by_run.setdefault(w["run_id"], []).append(w)
    loads = {(s["concurrency"], s["request_rate"]) for s in series}
    for load in sorted(loads, key=lambda lv: tuple((x is None, x or 0) for x in lv)):
        runs = [s for s in series if (s["concurrency"], s["request_rate"]) == load
                and s["run_id"] in by_run]
        runs = runs[:MAX_SERIES]
        if not runs:
            continue
        fig, ax = _figure(5.6, 2.8)
        for s in runs:
            pts = by_run[s["run_id"]]
            for rank in sorted({p.get("dp_rank", 0) for p in pts}):
                mine = [p for p in pts if p.get("dp_rank", 0) == rank]
                ax.plot([p["t_s"] for p in mine], [p[key] for p in mine], linewidth=1,
                        color=color.get(s["config"], "#333"),
                        label=s["config"] + (f" dp{rank}" if rank else ""))
        ax.set_xlabel("seconds since the run's first decode window" if source == "windows"
                      else "seconds since the run's load began")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title} · " + (tables.level(*load) if load != (None, None)
                                      else "ingested logs"), fontsize=11)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        out.append(_svg(fig))
    return out


# --------------------------------------------------------------------------------- page

def _verdict_table(rows: list[dict]) -> str:
    energy = any(r.get("joules_per_output_token_mean") is not None for r in rows)
    heads = ["config", "load", "n", "accept len", "accept rate", "tok/s ± 95%"] + (
        ["mJ/tok (vs baseline)"] if energy else []) + ["speedup [95% CI]", "verdict", "why"]
    left = ("config", "verdict", "why")
    out = ["<table><tr>" + "".join(f'<th class="{"l" if h in left else ""}">{esc(h)}</th>'
                                   for h in heads) + "</tr>"]
    for r in rows:
        # the terminal table's cells (load level: concurrency or request rate), full names here
        cells = tables._cells(r, energy)[:-1]
        cells[0] = r["config"] + ("" if r["baseline_match"] in tables.TRUSTED_MATCHES else " †")
        v = r["verdict"] or ""
        out.append("<tr>" + "".join(f"<td{' class=l' if i == 0 else ''}>{esc(c)}</td>"
                                    for i, c in enumerate(cells))
                   + f'<td class="l {esc(v)}">{esc(v)}</td>'
                   + f'<td class="l why muted">{esc(r["verdict_reason"])}</td></tr>')
    return '<div class="wrap">' + "\n".join(out) + "</table></div>"


def _findings(findings: list, groups: dict[str, tuple]) -> str:
    """One block per (config, concurrency, code): repeats of a config say the same thing."""
    from specwatch.diagnose import finding as fmod

    out, seen = [], {}
    for f in findings:
        where = groups.get(f.run_id)
        label = f"{where[0]} @c{where[1]}" if where and where[1] is not None else f.run
        seen.setdefault((label, f.code), []).append(f)
    for (label, _), fs in seen.items():
        f = fs[0]
        if len(fs) > 1:
            label += f" ({len(fs)} runs; numbers of the first)"
        nums = ", ".join(f"{k}={fmod.format_number(v)}" for k, v in f.evidence.numbers.items()
                         if v is not None)
        out.append(f'<div class="finding {esc(f.severity)}"><b>{esc(label)}</b> · '
                   f"<code>{esc(f.code)}</code> ({esc(f.severity)}): {esc(f.title)}"
                   + (f'<br><span class="muted">{esc(nums)}</span>' if nums else "")
                   + f"<br>next: {esc(f.suggestion)}</div>")
    return "\n".join(out)


def _env(env: dict) -> str:
    names = {"engine": "engine", "model": "target model", "target_architecture": "target",
             "draft_models": "draft models", "draft_weights_sha1": "draft weights sha1",
             "sglang_version": "SGLang version", "hosts": "hosts", "gpu_ids": "GPU ids",
             "gpu_energy": "GPU energy", "attached_endpoint": "attached endpoint",
             "server_flags": "server flags", "sampling_fingerprint": "sampling fingerprint",
             "first_run": "first run", "last_run": "last run", "runs": "runs"}
    items = "".join(f"<dt>{esc(label)}</dt><dd>{esc(env.get(k))}</dd>"
                    for k, label in names.items() if env.get(k) not in (None, ""))
    return f'<dl class="env">{items}</dl>'


def _versions() -> str:
    import duckdb
    import matplotlib

    from importlib import metadata
    try:
        sw = metadata.version("specwatch")
    except metadata.PackageNotFoundError:
        sw = "unknown"
    return (f"specwatch {sw}, python {platform.python_version()}, duckdb {duckdb.__version__}, "
            f"matplotlib {matplotlib.__version__}, on {platform.node()}")


def render(db: str | Path, run: str | None = None, sweep: str | None = None) -> str:
    """The whole page (see the module docstring). Raises query.QueryError / store.StoreError."""
    from specwatch.diagnose import doctor

    rep = query.stats_report(db, run=run, sweep=sweep)
    cond, params = _scope(run, sweep)
    verdicts = _rows(db, f"SELECT * FROM config_verdicts{cond} ORDER BY sweep_name NULLS FIRST,"
                         " concurrency NULLS FIRST, is_baseline DESC, config, group_id", params)
    series = _series_runs(db, run, sweep)
    ids = [s["run_id"] for s in series]
    windows, samples = _windows(db, ids), _samples(db, ids)
    env_cond = (" WHERE run_id IN (SELECT run_id FROM run_metrics" + cond + ")") if cond else ""
    envs = {e["sweep"]: e for e in _rows(db, ENV_SQL.format(cond=env_cond), params)}
    groups = {r["run_id"]: (r["config"], r["concurrency"]) for r in _rows(
        db, f"SELECT run_id, coalesce(config_name, run_name) AS config, concurrency "
            f"FROM run_metrics{cond}", params)}
    findings, _ = doctor.diagnose(db, run)
    findings = [f for f in findings if f.run_id in groups]

    now = dt.datetime.now().isoformat(sep=" ", timespec="seconds")
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             "<title>specwatch report</title>", f"<style>{CSS}</style></head><body>",
             "<h1>specwatch: speculative decoding vs baseline</h1>",
             f'<p class="muted">{esc(Path(str(db)).name)} · written {esc(now)} · '
             f"{esc(_versions())}</p>"]
    if not rep.configs.rows:
        parts.append("<p>No runs stored yet: run <code>specwatch run-sweep SWEEP.toml</code> or "
                     "<code>specwatch ingest LOG</code> first.</p></body></html>")
        return "\n".join(parts)
    stats = rep.configs.dicts()
    for name in dict.fromkeys(r["sweep_name"] for r in stats):
        mine = [r for r in stats if r["sweep_name"] == name]
        vmine = [r for r in verdicts if r["sweep_name"] == name]
        color = _color(list(dict.fromkeys(r["config"] for r in vmine)))
        title = f"sweep {name}" if name else "ingested logs"
        parts.append(f"<section><h2>{esc(title)}</h2>")
        parts.append(_verdict_table(mine))
        sub = dataclasses.replace(rep, configs=dataclasses.replace(rep.configs, rows=[
            row for row, r in zip(rep.configs.rows, stats) if r["sweep_name"] == name]),
            winners=dataclasses.replace(rep.winners, rows=[
                w for w in rep.winners.rows if w[0] == name]))
        parts.append("<ul>" + "".join(f"<li>{esc(line)}</li>" for line in tables.summary_lines(sub))
                     + "</ul>")
        mine_runs = {rid for rid, g in groups.items() if any(
            v["config"] == g[0] and v["concurrency"] == g[1] for v in vmine)}
        fs = [f for f in findings if f.run_id in mine_runs]
        if fs:
            parts.append(f"<h3>What doctor says ({len(fs)})</h3>" + _findings(fs, groups))
        plots = [plot_speedup(vmine, color), plot_accept_len(vmine, color),
                 plot_pareto(vmine, color)]
        ser = [s for s in series if s["sweep_name"] == name]
        plots += plot_series(ser, windows, samples, color, "accept_len", "Accept length over time",
                             "accept length (decode windows)")
        plots += plot_series(ser, windows, samples, color, "gen_throughput_tok_s",
                             "Gen throughput over time", "gen tok/s (decode windows)")
        plots += plot_series(ser, windows, samples, color, "sglang:spec_accept_length",
                             "/metrics spec_accept_length", "sglang:spec_accept_length",
                             source="samples")
        plots += plot_series(ser, windows, samples, color, "nvml:gpu_power_w", "GPU power",
                             "W (NVML, all the server's GPUs)", source="samples")
        parts.append('<h3>Plots</h3><div class="plots">' + "".join(p for p in plots if p)
                     + "</div>")
        env = envs.get(name if name else "(ingested logs)")
        if env:
            parts.append("<h3>Environment</h3>" + _env(env))
        parts.append("</section>")
    parts.append('<p class="muted">Formulas: specwatch/db/views.py and stats.py; the README\'s '
                 "“Reading the report” explains every column. † = baseline not from the same "
                 "sweep.</p></body></html>")
    return "\n".join(parts)


class NoMatplotlib(RuntimeError):
    """The plots need matplotlib (the optional extra `report`)."""


def write(db: str | Path, out: str | Path | None, run: str | None = None,
          sweep: str | None = None) -> str:
    """Render and write to `out` (atomic replace); returns the page."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise NoMatplotlib("--format html draws its plots with matplotlib, which is not "
                           "installed: pip install 'specwatch[report]'") from None
    page = render(db, run=run, sweep=sweep)
    if out is not None:
        out = Path(out)
        tmp = out.with_name(out.name + ".part")
        tmp.write_text(page, encoding="utf-8")
        tmp.replace(out)
    return page
