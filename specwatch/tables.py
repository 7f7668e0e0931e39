"""Terminal rendering of the verdict report (`specwatch report`, run-sweep's final table), by `rich`.

The default table fits the terminal (its width, or COLUMNS): config, concurrency, accept length,
accept rate, tok/s (mean ± 95% CI half-width), GPU energy per output token in mJ with its ratio
to the baseline (only when some row has one: NVML measured it), speedup [95% CI], verdict;
numbers rounded to
what the noise supports (speedup 2 decimals, tok/s 3 significant digits, accept length and rate
2 decimals); long names shortened. Then one line per sweep and concurrency naming the winner (or
"no clear winner") and the configs that lose. A config with simulated acceptance
(SGLANG_SIMULATE_ACC_LEN, vLLM synthetic rejection sampling) shows `sim` after its accept length
and is never compared with real-acceptance runs (views.group_baselines). `wide=True` prints every
column of config_stats.
Then the traffic part (sweeps with request rates, an SLO, adaptive repeats or prompt categories):
goodput under the SLO, the max rate under it, the crossover load, repeats stopped on the cap,
accept length and speedup by category.
Only `cli` imports this module; it computes nothing (the numbers come from query.stats_report).
"""
from __future__ import annotations

import csv
import io
import json
import math
import shutil
import sys

from rich import box
from rich.console import Console
from rich.table import Table

NAME_MAX = 28                # longest config name shown in full in the compact table
TRUSTED_MATCHES = (None, "self", "same-sweep")


def sig(x: float | None, digits: int = 3) -> tuple[str, int]:
    """`x` to `digits` significant digits without an exponent, and the decimals used."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "", 0
    if x == 0:
        return "0", 0
    dec = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{round(x, dec):.{dec}f}", dec


def tok_s_cell(mean, lo, hi) -> str:
    """'114 ± 40': the mean to 3 significant digits, the CI half-width to the same decimals."""
    text, dec = sig(mean)
    if not text or lo is None or hi is None:
        return text
    return f"{text} ± {(hi - lo) / 2:.{dec}f}"


def speedup_cell(sp, lo, hi, basis=None) -> str:
    if sp is None:
        return ""
    text = f"{sp:.2f}"
    if lo is not None and hi is not None:
        text += f" [{lo:.2f}, {hi:.2f}]"
    return text + ("*" if basis == "server-log" else "")


def shorten(name: str | None, n: int = NAME_MAX) -> str:
    """A path becomes its file name; anything still longer keeps its start and end."""
    if not name:
        return ""
    if len(name) > n and "/" in name:
        name = name.rstrip("/").rsplit("/", 1)[-1]
    if len(name) > n:
        keep = n - 1
        name = name[: keep - keep // 3] + "…" + name[len(name) - keep // 3:]
    return name


def _width(width: int | None) -> int:
    if width:
        return width
    return shutil.get_terminal_size((120, 24)).columns   # COLUMNS wins when set


def _console(out, width: int) -> tuple[Console, io.StringIO]:
    """A console that renders into a buffer (see _flush); colour only on a terminal."""
    tty = hasattr(out, "isatty") and out.isatty()
    buf = io.StringIO()
    con = Console(file=buf, width=width, force_terminal=tty, no_color=not tty,
                  color_system="standard" if tty else None, highlight=False, soft_wrap=False,
                  emoji=False)
    return con, buf


SIM_MARK = " sim"   # after the accept length of a simulated-acceptance config (see summary_lines)


def _al_cell(r: dict) -> str:
    if r.get("accept_len") is None:
        return SIM_MARK.strip() if r.get("simulated") else ""
    text = f"{r['accept_len']:.2f}"
    sd = r.get("accept_len_sd")
    if sd is not None and sd >= 0.005:
        text += f"±{sd:.2f}"
    return text + (SIM_MARK if r.get("simulated") else "")


def summary_lines(rep) -> list[str]:
    """The lines under the table: per sweep and concurrency, the winner or why there is none,
    and each config that loses; footnotes for flagged baselines and missing repeats."""
    lines = []
    sweeps = {w["sweep_name"] for w in rep.winners.dicts()}
    shown = {(r["sweep_name"], r["concurrency"], r.get("request_rate"))
             for r in rep.configs.dicts() if not r.get("rate_search_only")}
    for w in rep.winners.dicts():
        if (w["sweep_name"], w["concurrency"], w.get("request_rate")) not in shown:
            continue                 # a level only the rate search measured
        where = (f"{w['sweep_name']} " if len(sweeps) > 1 else "") + \
            level(w["concurrency"], w.get("request_rate"))
        if w.get("simulated"):
            where += " (simulated acceptance)"
        line = f"{where}: {w['note']}"
        if w["losers"]:
            line += f"; loses: {', '.join(w['losers'])}"
        lines.append(line)
    rows = rep.configs.dicts()
    flagged = sorted({(r["config"], r["baseline_match"]) for r in rows
                      if r["baseline_match"] not in TRUSTED_MATCHES})
    for cfg, match in flagged:
        why = {"sampling-differs": "not compared: its baseline ran other sampling settings",
               "simulated-vs-real": "not compared: its acceptance is simulated, its baseline's "
                                    "is real",
               "real-vs-simulated": "not compared: its baseline ran with simulated acceptance",
               }.get(match, f"baseline matched as {match}")
        lines.append(f"† {shorten(cfg)}: {why}")
    if any(r.get("simulated") for r in rows):
        lines.append(f"{SIM_MARK.strip()}: simulated acceptance (SGLANG_SIMULATE_ACC_LEN or vLLM "
                     "synthetic rejection sampling): not a measured accept length; compared only "
                     "with runs simulated alike")
    if any(r["speedup_basis"] == "server-log" for r in rows):
        lines.append("* speedup from the server log's gen throughput (no client tok/s measured)")
    if rep.single_repeat:
        lines.append("n = 1 (one repeat) gives no interval, so those verdicts are unclear: add "
                     "repeats (repeats = 3 in the sweep file) to get pays / loses")
    return lines


def print_report(rep, out=None, fmt: str = "table", wide: bool = False,
                 width: int | None = None) -> None:
    """Print a `query.StatsReport`: compact table (default), every column (`wide`), or all
    columns and intervals as CSV / JSON."""
    out = out or sys.stdout
    if fmt == "json":
        json.dump(rep.payload(), out, default=str, indent=1)
        out.write("\n")
        return
    if fmt == "csv":
        w = csv.writer(out)
        w.writerow(rep.configs.columns)
        w.writerows([["" if v is None else v for v in r] for r in rep.configs.rows])
        return
    width = _width(width)
    if not rep.configs.rows:
        out.write("no runs stored yet: run `specwatch run-sweep SWEEP.toml` or `specwatch ingest "
                  "LOG` first\n")
        return
    if wide:
        _print_wide(rep, out)
    else:
        _print_compact(rep, out, width)
    con, buf = _console(out, width)
    for line in summary_lines(rep):
        con.print(line, markup=False, overflow="fold")
    if not wide:
        traffic_render(rep, con)
    _flush(buf, out)


HEADERS = ["config", "c", "n", "accept len", "accept rate", "tok/s ± 95%", "speedup [95% CI]",
           "verdict"]
STYLE = {"pays": "green", "loses": "red", "unclear": "yellow", "failed": "red",
         "interrupted": "yellow"}


ENERGY_HEADER = "mJ/tok"


def energy_cell(r: dict) -> str:
    """'41.2 (0.62×)': mJ per output token, 3 significant digits, and its ratio to the baseline."""
    text, _ = sig(None if r.get("joules_per_output_token_mean") is None
                  else r["joules_per_output_token_mean"] * 1000)
    ratio = r.get("joules_per_token_vs_baseline")
    if text and ratio is not None and not r.get("is_baseline"):
        text += f" ({ratio:.2f}×)"
    return text


def _headers(rows: list[dict]) -> list[str]:
    if any(r.get("joules_per_output_token_mean") is not None for r in rows):
        i = HEADERS.index("tok/s ± 95%") + 1
        return HEADERS[:i] + [ENERGY_HEADER] + HEADERS[i:]
    return HEADERS


def _cells(r: dict, energy: bool = False) -> list[str]:
    mark = "" if r["baseline_match"] in TRUSTED_MATCHES else " †"
    return [shorten(r["config"]) + mark,
            "" if r["concurrency"] is None and r.get("request_rate") is None
            else str(r["concurrency"]) if r.get("request_rate") is None
            else f"{r['request_rate']:g}/s",
            str(r["repeats"] or r.get("gen_repeats") or 0),   # ingested logs: server-log runs
            _al_cell(r),
            "" if r["accept_rate"] is None else f"{r['accept_rate']:.2f}",
            tok_s_cell(r["output_tok_s_mean"], r["output_tok_s_ci_low"], r["output_tok_s_ci_high"]),
            *([energy_cell(r)] if energy else []),
            speedup_cell(r["speedup"], r["speedup_ci_low"], r["speedup_ci_high"],
                         r["speedup_basis"]),
            r["verdict"] or ""]


# Columns left out, in this order, while the table is wider than the terminal.
DROP_ORDER = ["n", "accept rate", ENERGY_HEADER, "accept len"]


def _print_compact(rep, out, width: int) -> None:
    rows = rep.configs.dicts()
    con, buf = _console(out, width)
    sweeps = list(dict.fromkeys(r["sweep_name"] for r in rows))
    for s in sweeps:
        # the rate search's own rates: in the traffic part (max rate under the SLO), not here
        mine = [r for r in rows if r["sweep_name"] == s and not r.get("rate_search_only")]
        headers = _headers(mine)
        cells = [(_cells(r, ENERGY_HEADER in headers), r["verdict"]) for r in mine]
        natural = [max([len(h)] + [len(c[i]) for c, _ in cells]) for i, h in enumerate(headers)]
        keep = list(range(len(headers)))
        for name in DROP_ORDER:
            if sum(natural[i] for i in keep) + 3 * (len(keep) - 1) <= width:
                break
            if name in headers:
                keep.remove(headers.index(name))
        if headers.index("accept len") not in keep:   # the simulated mark moves to the name
            for (c, _), r in zip(cells, mine):
                if r.get("simulated"):
                    c[0] += SIM_MARK
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False,
                      title=(f"sweep {s}" if s else "ingested logs"), title_justify="left")
        for i in keep:
            # every column but the config name keeps its full width; the name gives way first
            table.add_column(headers[i], justify="left" if i in (0, len(headers) - 1) else "right",
                             no_wrap=True, overflow="ellipsis",
                             min_width=min(natural[i], 10) if i == 0 else natural[i])
        for c, verdict in cells:
            v = f"[{STYLE[verdict]}]{c[-1]}[/]" if verdict in STYLE else c[-1]
            table.add_row(*[c[i] for i in keep[:-1]], v)
        con.print(table)
    _flush(buf, out)


def _flush(buf, out) -> None:
    """Write what the console rendered without the padding rich adds up to the width."""
    text = buf.getvalue()
    if text:
        out.write("\n".join(line.rstrip() for line in text.splitlines()) + "\n")


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "nan" if math.isnan(v) else (f"{v:.4g}" if abs(v) < 1e5 else f"{v:.0f}")
    if isinstance(v, list):
        return ", ".join(map(str, v))
    return str(v)


def _print_wide(rep, out) -> None:
    """Every column of config_stats, nothing cut (lines as long as they need to be)."""
    cells = [[_fmt(v) for v in r] for r in rep.configs.rows]
    cols = rep.configs.columns
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]
    out.write("  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip() + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for r in cells:
        out.write("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() + "\n")


# ------------------------------------------------------------------------------- traffic
# The traffic part after the verdict table (issue 30): goodput under the SLO per config and
# request rate, the max rate under the SLO with its interval, the crossover load where
# speculation stops paying, adaptive repeats stopped on the cap, accept length and speedup by
# prompt category. Every number comes from db/slo_views.py through query.stats_report.

LIMITS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E"))


def level(concurrency, rate) -> str:
    """A load level as the report prints it: c=4, or 2.5/s (a request rate)."""
    return f"c={concurrency}" if rate is None else f"{rate:g}/s"


def _num(x, digits: int = 3) -> str:
    return "" if x is None else f"{x:.{digits}g}"


def bound(value, state: str | None, lo, hi) -> str:
    """One end of an interval found by a crossing: the value, or beyond the measured range."""
    if state == "crosses" and value is not None:
        return _num(value)
    if state == "below":
        return f"<{lo:g}"
    if state == "above":
        return f">{hi:g}"
    return "?"


def slo_text(r: dict) -> str:
    parts = [f"{name} <= {r[f'slo_{key}_ms']:g} ms" for key, name in LIMITS
             if r.get(f"slo_{key}_ms") is not None]
    return f"p{r['slo_percentile']:g} " + ", ".join(parts)


def goodput_table(rows: list[dict]) -> Table:
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, title_justify="left",
              title=f"SLO {slo_text(rows[0])}: goodput = requests/s meeting every limit")
    for h in ("config", "load", "n", "goodput ± 95%", "sent/s", "attained", "margin [95% CI]",
              "SLO"):
        t.add_column(h, justify="left" if h in ("config", "SLO") else "right", no_wrap=True)
    for r in rows:
        gp = _num(r["goodput_req_s_mean"])
        if r["goodput_req_s_ci_low"] is not None and gp:
            gp += f" ± {(r['goodput_req_s_ci_high'] - r['goodput_req_s_ci_low']) / 2:.2g}"
        m = r["slo_margin_mean"]
        margin = "" if m is None else f"{m:+.2f}" + (
            f" [{r['slo_margin_ci_low']:+.2f}, {r['slo_margin_ci_high']:+.2f}]"
            if r["slo_margin_ci_low"] is not None else "")
        t.add_row(r["config"], level(r["concurrency"], r["request_rate"]), str(r["slo_repeats"]),
                  gp, _num(r["achieved_rate_req_s"]),
                  "" if r["slo_attainment_frac"] is None else f"{r['slo_attainment_frac']:.0%}",
                  margin, r["slo_verdict"] or "")
    return t


def max_rate_lines(rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        lo, hi = r["min_rate_req_s"], r["max_measured_rate_req_s"]
        est = bound(r["max_rate_req_s"], r["max_rate_state"], lo, hi)
        ci = (f"[{bound(r['max_rate_ci_low'], r['max_rate_low_state'], lo, hi)}, "
              f"{bound(r['max_rate_ci_high'], r['max_rate_high_state'], lo, hi)}]")
        meets = (f"; meets at {r['max_rate_meeting_req_s']:g}/s measured"
                 if r["max_rate_meeting_req_s"] is not None else "")
        out.append(f"max rate under the SLO: {r['config']}: {est}/s {ci} ({r['rates_measured']} "
                   f"rates {lo:g}-{hi:g}/s{meets})")
    return out


def schedule_lines(rows: list[dict]) -> list[str]:
    """The open-loop groups with a run whose sends did not keep the arrival schedule."""
    return [f"off schedule: {r['config']} {level(r['concurrency'], r['request_rate'])}: "
            f"{r['runs_off_schedule']} of {r['runs']} runs: {r['schedule_reason']}"
            for r in rows if r["runs_off_schedule"]]


def crossover_lines(rows: list[dict]) -> list[str]:
    out = []
    for r in rows:
        lo, hi = r["min_load"], r["max_load"]
        unit = "/s" if r["load_kind"] == "request_rate" else ""
        kind = "request rate" if r["load_kind"] == "request_rate" else "concurrency"
        est = bound(r["crossover_load"], r["crossover_state"], lo, hi)
        ci = (f"[{bound(r['crossover_ci_low'], r['crossover_low_state'], lo, hi)}, "
              f"{bound(r['crossover_ci_high'], r['crossover_high_state'], lo, hi)}]")
        what = {"crosses": "stops beating the baseline at",
                "below": "is slower than the baseline from the lowest",
                "above": "beats the baseline at every"}.get(r["crossover_state"], "?")
        out.append(f"crossover: {r['config']} {what} {kind} {est}{unit} {ci} "
                   f"({r['loads_measured']} loads {lo:g}-{hi:g}{unit})")
    return out


def repeats_lines(rows: list[dict]) -> list[str]:
    capped = [r for r in rows if r["repeats_status"] == "cap"]
    if not capped:
        return []
    r0 = capped[0]
    names = ", ".join(f"{r['config']} {level(r['concurrency'], r['request_rate'])} "
                      f"(width {r['speedup_ci_width']:.1%})" for r in capped)
    return [f"adaptive repeats stopped on the cap ({r0['max_repeats']} repeats) before the "
            f"speedup interval was narrower than {r0['target_ci_width']:.0%}: {names}"]


def category_table(rows: list[dict]) -> Table:
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, title_justify="left",
              title="by prompt category: accept length, e2e speedup vs the baseline [95% CI]")
    for h in ("category", "config", "load", "requests", "accept len", "e2e speedup"):
        t.add_column(h, justify="left" if h in ("category", "config") else "right",
                     no_wrap=True)
    for r in rows:
        if r["is_baseline"]:
            continue
        sp = "" if r["speedup_e2e"] is None else f"{r['speedup_e2e']:.2f}" + (
            f" [{r['speedup_e2e_ci_low']:.2f}, {r['speedup_e2e_ci_high']:.2f}]"
            if r["speedup_e2e_ci_low"] is not None else "")
        t.add_row(r["category"], r["config"], level(r["concurrency"], r["request_rate"]),
                  str(r["requests"]), "" if r["accept_len"] is None else f"{r['accept_len']:.2f}",
                  sp)
    return t


def traffic_render(rep, con) -> None:
    """Print the traffic part of a StatsReport on a rich console (nothing when it has none)."""
    for s in dict.fromkeys(r["sweep_name"] for r in rep.configs.dicts()):
        slo = [r for r in (rep.slo.dicts() if rep.slo else []) if r["sweep_name"] == s]
        if slo:
            con.print(goodput_table(slo))
        lines = []
        for res, fn in ((rep.max_rate, max_rate_lines), (rep.crossover, crossover_lines),
                        (rep.repeats, repeats_lines), (rep.schedule, schedule_lines)):
            lines += fn([r for r in (res.dicts() if res else []) if r["sweep_name"] == s])
        for line in lines:
            con.print(line, markup=False, overflow="fold")
        cats = [r for r in (rep.categories.dicts() if rep.categories else [])
                if r["sweep_name"] == s and not r["is_baseline"] and not r["rate_search_only"]]
        if len({r["category"] for r in cats}) > 1:
            con.print(category_table(cats))
