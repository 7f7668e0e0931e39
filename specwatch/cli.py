"""The `specwatch` command: a thin click layer over the library.

Library errors become `click.ClickException` (a one-line message, exit 1) here and only here.
Heavy stages (engine, sweep, dashboard) are imported when their command runs.
"""
from __future__ import annotations

import csv
import datetime as dt
import json
import math
import sys

import click

from specwatch.db import store
from specwatch.db.query import MAX_MEMORY_MB, MAX_ROWS, MAX_TIMEOUT_S

DB_HELP = "DuckDB file (env SPECWATCH_DB)."


class FiniteRange(click.FloatRange):
    """click.FloatRange that also refuses nan and inf: its comparisons let NaN through."""

    name = "finite float range"

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{rv} is not in the range {self._describe_range()}.", param, ctx)
        return rv


def db_option(f):
    return click.option("--db", default=store.DEFAULT_DB, envvar="SPECWATCH_DB", show_default=True,
                        type=click.Path(dir_okay=False), help=DB_HELP)(f)


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return f"{v:.3f}" if abs(v) < 1e5 else f"{v:.0f}"
    if isinstance(v, (dt.datetime, dt.date)):
        return v.isoformat(sep=" ")
    return str(v)


def render(columns: list[str], rows: list[tuple], fmt: str, out=None) -> None:
    """Print rows as an aligned table, CSV or JSON (one array)."""
    out = out or sys.stdout
    if fmt == "json":
        json.dump([dict(zip(columns, r)) for r in rows], out, default=str, indent=1)
        out.write("\n")
        return
    if fmt == "csv":
        w = csv.writer(out)
        w.writerow(columns)
        w.writerows([[_fmt(v) for v in r] for r in rows])
        return
    cells = [[_fmt(v) for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    out.write("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip() + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for r in cells:
        out.write("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() + "\n")


@click.group()
@click.version_option(package_name="specwatch")
def cli():
    """specwatch: does speculative decoding pay? Parse SGLang/vLLM logs, store them in DuckDB,
    run config sweeps and compare accept length, accept rate and throughput against a baseline."""


@cli.command("parse")
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["jsonl"]), default="jsonl", show_default=True)
@click.option("--all", "all_kinds", is_flag=True,
              help="Also print server_args, readiness and event lines, and rejected lines.")
def parse_cmd(files, fmt, all_kinds):
    """Print one JSON object per recognised metric line (file, line_no, kind, timestamp, rank or
    process, and every printed field). Lines that only mention "accept" are not metric lines.

    Example: specwatch parse server.log --format jsonl | head
    """
    from specwatch.logs import logfile, parse, reassemble

    paths, problems = logfile.expand_paths(list(files))
    for p in problems:
        click.echo(f"specwatch parse: {p}", err=True)
    read_any = False
    out = sys.stdout
    for path, _ in paths:
        try:
            fh = open(path, "rb")
        except OSError as exc:
            click.echo(f"specwatch parse: {path}: cannot read: {exc.strerror}", err=True)
            continue
        read_any = True
        bad = []
        with fh:
            # hard-wrapped records are joined first; an incomplete last line waits
            for lg in reassemble.parse_stream(fh, bad):
                line_no, got = lg.line_no, lg.result
                if isinstance(got, parse.Rejected):
                    if all_kinds:
                        obj = {"file": str(path), "line_no": line_no, "kind": "rejected",
                               "looks_like": got.kind, "reason": got.reason, "field": got.field}
                        out.write(json.dumps(obj) + "\n")
                    continue
                if got.kind not in parse.METRIC_KINDS and not all_kinds:
                    continue
                obj = {"file": str(path), "line_no": line_no, **got.as_dict()}
                out.write(json.dumps(obj, default=str) + "\n")
        if bad:
            click.echo(f"specwatch parse: {path}:{bad[0]}: invalid UTF-8 ({len(bad)} line(s)); "
                       "decoded with replacement characters", err=True)
    if not read_any:
        raise click.ClickException("nothing could be read")


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@db_option
@click.option("--run", default=None, help="Run name for all files (default: each file's name).")
def ingest(paths, db, run):
    """Ingest log files or directories into the database, or `-` for standard input (its run is
    named `stdin`). Re-running stores nothing twice; a file that grew since is continued from
    where it stopped; a last line without its newline waits.

    Example: specwatch ingest sample_logs/ --db runs.duckdb; kubectl logs POD | specwatch ingest -
    """
    from specwatch.logs import piped

    if "-" in paths and sys.stdin.isatty():
        raise click.UsageError("`-` reads a log from standard input, which is a terminal here: "
                               "pipe one in (`kubectl logs POD | specwatch ingest - --db ...`)")
    try:
        results = piped.ingest_inputs(db, list(paths), run, sys.stdin.buffer)
    except ValueError as exc:   # `-` more than once
        raise click.UsageError(str(exc))
    except store.StoreError as exc:
        raise click.ClickException(str(exc))
    read = 0
    for r in results:
        for w in r.warnings:
            click.echo(f"specwatch ingest: {w}", err=True)
        if (r.source_id is not None or r.lines) and not r.unrecognised:
            read += 1
            click.echo(f"{r.path}: {r.lines} new lines, {r.rows} rows stored"
                       + (f", {r.rejected} rejected (see rejected_lines)" if r.rejected else ""))
    if read == 0:
        raise click.ClickException("nothing stored: no input held a log line specwatch reads")


@cli.command()
@click.argument("query")
@db_option
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
              show_default=True)
@click.option("--max-rows", default=1000, show_default=True,
              type=click.IntRange(1, MAX_ROWS), help="Row cap.")
@click.option("--timeout", default=30.0, show_default=True, type=FiniteRange(0, MAX_TIMEOUT_S, min_open=True),
              help=f"Seconds before the query is stopped (at most {MAX_TIMEOUT_S:g}: writers wait "
                   "only so long).")
@click.option("--memory-limit", "memory_mb", default=1024, show_default=True,
              type=click.IntRange(64, MAX_MEMORY_MB),
              help="MB the query may use before it is stopped (at most this machine's memory).")
def sql(query, db, fmt, max_rows, timeout, memory_mb):
    """Run one read-only SQL query (SELECT/WITH, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN or a read-only
    PRAGMA) in a sandbox: no files, network, extensions, settings or writes; time and memory
    limited. Tables: runs, decode_windows, prefill_windows, vllm_spec_windows,
    vllm_throughput_windows, server_configs, events, rejected_lines, requests, alerts, sources,
    run_sources; views: config_summary (per run), config_stats (per config and concurrency, over
    repeats, with intervals and verdicts), concurrency_winners, run_metrics, run_groups,
    group_baselines, decode_windows_scoped.

    Example: specwatch sql "SELECT run_name, accept_len FROM config_summary" --format csv
    """
    from specwatch.db import query as q

    try:
        res = q.run_sql(db, query, max_rows=max_rows, timeout_s=timeout, isolate=True,
                        memory_mb=memory_mb)
    except (q.QueryError, store.StoreError) as exc:
        raise click.ClickException(str(exc))
    render(res.columns, res.rows, fmt)
    if res.truncated:
        click.echo(f"(result cut at {res.max_rows} rows; raise --max-rows or add LIMIT)", err=True)


@cli.command()
@db_option
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv", "html"]),
              default="table", show_default=True,
              help="table: fits the terminal; json/csv: every column; html: one self-contained "
                   "page with plots, doctor's reasons and the environment (needs matplotlib: "
                   "pip install 'specwatch[report]').")
@click.option("--run", default=None, help="Only the configs that contain this run (name or id).")
@click.option("--sweep", default=None, help="Only this sweep.")
@click.option("--wide", is_flag=True, help="Table with every column (as long as lines need).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the report to this file instead of stdout.")
def report(db, fmt, run, sweep, wide, output):
    """Per config and concurrency, over its repeats: accept length, accept rate, tok/s with a 95%
    interval, speedup over the matched no-speculation baseline with a 95% interval, and a verdict
    (pays / loses / unclear); then the winner per concurrency, or why there is none. The README's
    glossary explains every column; formulas are in specwatch/db/views.py.

    Example: specwatch report --db runs.duckdb --format json
    Example: specwatch report --db runs.duckdb --format html -o verdict.html
    """
    from specwatch.db import query as q
    from specwatch import tables

    if fmt == "html":
        from specwatch import report_html
        try:
            page = report_html.write(db, output, run=run, sweep=sweep)
        except (q.QueryError, store.StoreError, report_html.NoMatplotlib) as exc:
            raise click.ClickException(str(exc))
        click.echo(page) if output is None else click.echo(
            f"wrote {output} ({len(page.encode()) / 1024:.0f} KB)", err=True)
        return
    try:
        rep = q.stats_report(db, run=run, sweep=sweep)
    except (q.QueryError, store.StoreError) as exc:
        raise click.ClickException(str(exc))
    if output is not None:
        with open(output, "w", encoding="utf-8", newline="") as fh:
            tables.print_report(rep, out=fh, fmt=fmt, wide=wide)
        return
    tables.print_report(rep, fmt=fmt, wide=wide)


@cli.command()
@click.argument("files", nargs=-1, type=click.Path())
@db_option
@click.option("--run", default=None, help="Run name (default: each file's name; an endpoint's "
                                          "host:port for --metrics).")
@click.option("--metrics", "metrics", multiple=True, metavar="URL",
              help="Also follow this server's /metrics page (http://host:port; SGLang needs "
                   "--enable-metrics) into metric_samples. Repeatable; no FILES: pages only.")
@click.option("--metrics-interval", default=1.0, show_default=True, type=FiniteRange(0.05, 3600),
              help="Seconds between two scrapes of each --metrics page.")
@click.option("--poll-interval", default=0.25, show_default=True, type=FiniteRange(0.01, 60),
              help="Seconds between polls when file-system events are not delivered.")
@click.option("--quiet", is_flag=True,
              help="No status lines or rule warnings (alerts are still stored); problems with "
                   "files or the database are still reported.")
@click.option("--alert-accept-len", default=1.5, show_default=True, type=FiniteRange(0, 1024),
              help="Warn when accept length stays below this ...")
@click.option("--alert-windows", default=2, show_default=True, type=click.IntRange(1, 1_000_000),
              help="... for this many consecutive decode windows (also for accept len 1.00 / "
                   "accept rate 0.00 with requests running).")
@click.option("--alert-trend-windows", default=10, show_default=True,
              type=click.IntRange(2, 1_000_000),
              help="Warn when the mean accept length of the last N windows ...")
@click.option("--alert-trend-drop", default=0.2, show_default=True,
              type=FiniteRange(0, 1, min_open=True),
              help="... is this fraction below the mean of the first N.")
@click.option("--alert-rank-gap", default=0.25, show_default=True,
              type=FiniteRange(0, 100, min_open=True),
              help="Warn when a DP rank's accept length is this fraction away from the other ranks'.")
@click.option("--no-alerts", is_flag=True, help="Only ingest: no rules, no status lines.")
def tail(files, db, run, metrics, metrics_interval, poll_interval, quiet, alert_accept_len,
         alert_windows, alert_trend_windows, alert_trend_drop, alert_rank_gap, no_alerts):
    """Follow growing log files and ingest new complete lines as they appear, exactly once, across
    rotation (rename or copy-truncate), truncation and restarts, until SIGINT/SIGTERM. On a
    terminal it keeps one status line per file (windows stored, last accept length and rate, gen
    tok/s, lag) and prints a warning when a rule fires (accept length low for N windows, the stuck
    accept len 1.00 / accept rate 0.00 signature, accept length trending down, a DP rank
    disagreeing); warnings are stored in the `alerts` table.

    Example: specwatch tail /var/log/sglang/server.log --db runs.duckdb --run llama-eagle3
    Example: specwatch tail server.log --metrics http://127.0.0.1:30000 --run llama-eagle3
    """
    from specwatch.logs import alerts
    from specwatch.logs import tail as tl

    import logging

    if not files and not metrics:
        raise click.UsageError("give log FILES to follow, --metrics URL, or both")
    pages = None
    if metrics:
        from specwatch.run import load, metrics_tail
        try:
            pages = metrics_tail.MetricsTail(db, list(metrics), run, every_s=metrics_interval)
        except load.LoadError as exc:
            raise click.BadParameter(str(exc), param_hint="--metrics")
        logging.getLogger("specwatch.run.metrics_tail").addHandler(logging.StreamHandler())
        if not files:
            try:
                metrics_tail.alongside(pages, None)
            except store.StoreError as exc:
                raise click.ClickException(str(exc))
            return click.echo(f"stored {pages.stored} /metrics samples ({pages.scrapes} "
                              "scrapes)", err=True) if not quiet else None
    rules = alerts.Rules(accept_len_min=alert_accept_len, windows=alert_windows,
                         trend_windows=alert_trend_windows, trend_drop_frac=alert_trend_drop,
                         rank_gap_frac=alert_rank_gap)
    board = None if quiet or no_alerts else alerts.Board()
    if no_alerts:
        rules = None
    tail_log = logging.getLogger("specwatch.logs.tail")
    if board is not None and board.tty:   # log lines go above the status lines, not through them
        tail_log.addHandler(board.handler())
        tail_log.propagate = False
    def follow(stop):
        tl.follow(db, list(files), run=run, poll_interval_s=poll_interval, rules=rules,
                  board=board, stop=stop)
    try:
        metrics_tail.alongside(pages, follow) if pages else follow(None)
    except store.StoreError as exc:
        raise click.ClickException(str(exc))


@cli.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                               "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def serve(args):
    """Start the built-in engine: a small real EAGLE-3 speculative decoder on CPU that accepts
    SGLang's launch_server flags, HTTP API and log format (`--help` lists its flags).

    Example: specwatch serve --model-path builtin:target --speculative-algorithm EAGLE3 --speculative-draft-model-path builtin:draft-eagle3 --port 30000
    """
    from specwatch.engine import server

    sys.exit(server.main(list(args)))


@cli.command("run-sweep")
@click.argument("sweep_file", type=click.Path(exists=True, dir_okay=False))
@db_option
@click.option("--out-dir", default="runs", show_default=True, type=click.Path(file_okay=False),
              help="Where server logs and per-run Parquet files go.")
@click.option("--gpus", default=None, help="GPU ids to place configs on, e.g. 0,1,2,3 (default: CPU).")
@click.option("--force", is_flag=True, help="Re-run configs that already finished ok.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option("--executor", type=click.Choice(["local", "ray", "slurm"]), default="local",
              show_default=True, help="Where configs run: this host, one Ray task per config, or "
                                      "one Slurm array task per config (the sweep's [slurm]).")
@click.option("--ray-address", default="auto", show_default=True,
              help="Ray cluster to join with --executor ray (`auto`: the usual Ray discovery).")
@click.option("--slurm-folder", default=None, type=click.Path(file_okay=False),
              help="--executor slurm: submitit's job folder, on a filesystem the nodes share "
                   "(default: OUT_DIR/slurm).")
@click.option("--endpoint", default=None, metavar="URL",
              help="Attach mode: measure the sweep's one speculative config on this running "
                   "server (http://HOST:PORT); nothing is launched.")
@click.option("--log", "log_path", default=None, type=click.Path(dir_okay=False),
              help="Attach mode: that server's log file, read during the load.")
@click.option("--baseline-endpoint", default=None, metavar="URL",
              help="Attach mode: the baseline (no speculation) server.")
@click.option("--baseline-log", default=None, type=click.Path(dir_okay=False),
              help="Attach mode: the baseline server's log file.")
def run_sweep(sweep_file, db, out_dir, gpus, force, as_json, executor, ray_address, slurm_folder,
              endpoint, log_path, baseline_endpoint, baseline_log):
    """Run every config of a sweep (plus a no-speculation baseline): launch the server, drive the
    load, ingest its log, stop it, and print the comparison table. Re-running resumes (configs
    that failed are retried). Exit 0 when every config is ok, 1 when one is failed (also from an
    earlier run), 130 when stopped by Ctrl-C, SIGTERM or SIGHUP.

    Example: specwatch run-sweep examples/builtin_sweep.toml --db runs.duckdb
    """
    import dataclasses

    from specwatch.db import query
    from specwatch.run import sweep

    attach = None
    if endpoint or baseline_endpoint:
        attach = {}
        if endpoint:
            attach["spec"] = (endpoint, log_path)
        if baseline_endpoint:
            attach["baseline"] = (baseline_endpoint, baseline_log)
        if executor != "local":
            raise click.ClickException("--endpoint attaches to running servers; it cannot be "
                                       f"combined with --executor {executor}")
    elif log_path or baseline_log:
        raise click.ClickException("--log and --baseline-log go with --endpoint / "
                                   "--baseline-endpoint (attach mode)")
    try:
        spec, result = sweep.run_sweep_main(sweep_file, db=db, out_dir=out_dir, gpus=gpus,
                                            force=force, executor=executor,
                                            ray_address=ray_address, attach=attach,
                                            slurm_folder=slurm_folder)
        res = query.report(db, sweep=spec.name)
        rep = query.stats_report(db, sweep=spec.name)
        failed = sweep.failed_configs(db, spec)
        interrupted = sweep.interrupted_configs(db, spec)
    except (sweep.SweepError, store.StoreError, query.QueryError) as exc:
        raise click.ClickException(str(exc))
    if as_json:
        payload = {
            "sweep": spec.name, "interrupted": result.interrupted, "failed_configs": failed,
            "interrupted_configs": interrupted,
            "configs": [o.summary() for o in result.outcomes],
            "up_to_date": result.up_to_date,
            "skipped": [dataclasses.asdict(s) for s in result.skipped],
            "report": [dict(zip(res.columns, r)) for r in res.rows],
            # per (config, concurrency) over repeats, with intervals and verdicts (db/stats.py)
            "stats": {k: v for k, v in rep.payload().items() if k != "runs"},
        }
        json.dump(payload, sys.stdout, default=str, indent=1)
        sys.stdout.write("\n")
    else:
        from specwatch import tables

        tables.print_report(rep)
        if failed:
            click.echo(f"failed configs (see failure_reason in runs; re-run to retry): "
                       f"{', '.join(failed)}", err=True)
        if interrupted:
            click.echo(f"interrupted configs (re-run to measure): {', '.join(interrupted)}",
                       err=True)
    sys.exit(130 if result.interrupted else 1 if failed or interrupted else 0)


@cli.command()
@db_option
@click.option("--port", default=8501, show_default=True, type=click.IntRange(1, 65535))
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind. Anything but loopback needs --allow-remote.")
@click.option("--allow-remote", is_flag=True,
              help="Allow a non-loopback --host; every page then requires the access token.")
@click.option("--token", default=None, envvar="SPECWATCH_DASHBOARD_TOKEN",
              help="Access token (default with --allow-remote: a random one, printed).")
def dashboard(db, port, host, allow_remote, token):
    """Start the Streamlit dashboard comparing configs (reads the database read-only). It binds
    127.0.0.1; from a laptop use `ssh -L 8501:127.0.0.1:8501 HOST`. Binding elsewhere needs
    --allow-remote and serves only requests with `?token=...` (printed at start).

    Example: specwatch dashboard --db runs.duckdb --port 8501
    """
    from specwatch import dashboard_launch

    sys.exit(dashboard_launch.main(db=db, port=port, host=host, allow_remote=allow_remote,
                                   token=token))


@cli.command()
@db_option
@click.option("--run", default=None, help="Only this run (name or id).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
def doctor(db, run, fmt):
    """Explain why speculative configs underperform: accept length near 1 (wrong aux layer ids?),
    slower than baseline, DP ranks disagreeing, CUDA graph off, queue growing, KV pressure, ...

    Example: specwatch doctor --db runs.duckdb --run eagle3-shifted
    """
    from specwatch.db import query
    from specwatch.diagnose import context, doctor as doc, finding

    try:
        findings, checked = doc.diagnose(db, run)
    except (context.DoctorError, query.QueryError) as exc:
        click.echo(f"specwatch doctor: {exc}", err=True)
        sys.exit(2)
    except store.StoreError as exc:
        raise click.ClickException(str(exc))
    if fmt == "json":
        click.echo(json.dumps(finding.to_json(findings, checked), indent=1, default=str))
    else:
        click.echo(finding.render_text(findings, checked))
    # exit 0: no error or warning findings; 1: at least one; 2: the run is not stored
    sys.exit(1 if any(f.severity != "info" for f in findings) else 0)


@cli.command()
@db_option
@click.option("--engine", type=click.Choice(["sglang", "vllm", "builtin"]), default=None,
              help="The engine to write the schedule for (default: the sweep's; with --verify "
                   "always the sweep file's engine).")
@click.option("--sweep", "sweep_name", default=None,
              help="The stored sweep to read (default: the newest that is not a -verify sweep).")
@click.option("--slo", multiple=True, metavar="METRIC=MS",
              help="Leave out configs over a latency limit at a load: ttft_ms_p50, ttft_ms_p99, "
                   "itl_ms_p50 or itl_ms_p99 (mean over repeats), e.g. --slo itl_ms_p99=50.")
@click.option("--max-batch-size", default=256, show_default=True, type=click.IntRange(min=1),
              help="vLLM: the end of the last range (vLLM carries the last k on to max_num_seqs).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@click.option("--verify", "verify_file", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Measure the schedule as one more config at every load of this sweep file, "
                   "against the best single config there (a <name>-verify sweep).")
@click.option("--out-dir", default="runs", show_default=True, type=click.Path(file_okay=False),
              help="With --verify: where server logs, Parquet files and the schedule file go.")
def recommend(db, engine, sweep_name, slo, max_batch_size, fmt, verify_file, out_dir):
    """The per-batch-size speculation schedule to deploy, from a sweep's stored runs: per load
    (batch-size band) the best config whose advantage over the others is significant, else the
    simpler one within noise (with the ratio that did not exclude 1), the expected gain with its
    95% interval and the runs behind it; then the engine's own format (vLLM's
    num_speculative_tokens_per_batch_size triples, SGLang's / the built-in engine's
    --speculative-adaptive-config JSON and flags) and its limits. The JSON document is described
    in the README ("Choosing a schedule").

    Example: specwatch recommend --db runs.duckdb --engine vllm --format json
    """
    from specwatch.db import query
    from specwatch.diagnose import recommend as rec

    try:
        slo_limits = rec.parse_slo(slo)
        if verify_file:
            _recommend_verify(db, engine, slo_limits, max_batch_size, fmt, verify_file, out_dir)
        result = rec.recommend(db, engine or _stored_engine(db, sweep_name, query, rec),
                               sweep=sweep_name, slo=slo_limits, max_batch_size=max_batch_size)
    except (rec.RecommendError, query.QueryError, store.StoreError) as exc:
        raise click.ClickException(str(exc))
    if fmt == "json":
        click.echo(json.dumps(result.payload(), indent=1, default=str))
    else:
        click.echo(rec.render_text(result), nl=False)


def _recommend_verify(db, engine, slo_limits, max_batch_size, fmt, verify_file, out_dir):
    """`recommend --verify`: exit 0 when the schedule is at least as good at every load (or
    undecided, or there is nothing to verify), 1 when it is worse somewhere, 130 when stopped."""
    from specwatch.diagnose import recommend as rec
    from specwatch.run import schedule_verify as sv, sweepfile

    try:
        sweep_engine = sweepfile.load(verify_file).engine
    except sweepfile.SweepFileError as exc:
        raise click.ClickException(str(exc))
    if engine is not None and engine != sweep_engine:
        raise click.ClickException(f"--engine {engine}: --verify launches {verify_file}'s engine "
                                   f"({sweep_engine}); drop --engine or verify a sweep file of "
                                   f"{engine}")
    try:
        report = sv.verify(verify_file, db, out_dir, slo=slo_limits, max_batch_size=max_batch_size)
    except sv.VerifyError as exc:
        raise click.ClickException(str(exc))
    if fmt == "json":
        click.echo(json.dumps(report.payload(), indent=1, default=str))
    else:
        r = report.recommendation
        click.echo(rec.render_text(rec.Recommendation(**{**r, "bands": [
            rec.Band(**b) for b in r["bands"]]})), nl=False)
        click.echo(sv.render_text(report), nl=False)
    sys.exit(130 if report.interrupted else 1 if report.at_least_as_good is False else 0)


def _stored_engine(db, sweep_name, query, rec) -> str:
    name = rec.pick_sweep(db, sweep_name)
    rows = query.run_sql(db, "SELECT DISTINCT engine FROM runs WHERE sweep_name = ? AND engine "
                             "IS NOT NULL", [name]).rows
    if len(rows) != 1:
        raise click.ClickException(f"sweep {name!r} ran on {len(rows)} engines; pass --engine")
    return rows[0][0]


@cli.command()
@click.option("--dump", "dump_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Per-layer hidden states of the target (safetensors or torch file).")
@click.option("--capture", "capture_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Aux hidden states the draft received.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
def align(dump_path, capture_path, fmt):
    """Decide which target layer each captured aux segment really is, and print the
    eagle_aux_hidden_state_layer_ids the draft config should have.

    Example: specwatch align --dump layers.safetensors --capture aux.safetensors
    """
    from specwatch.diagnose import align as al

    try:
        res = al.align_files(dump_path, capture_path)
    except al.AlignError as exc:
        click.echo(f"specwatch align: {exc}", err=True)
        sys.exit(2)
    click.echo(json.dumps(al.to_json(res), indent=1) if fmt == "json" else al.render_text(res))
    # exit 0: matches the configured ids (or none configured and every segment confirmed);
    # 1: a mismatch or an unconfirmed segment; 2: unreadable or ill-shaped input
    sys.exit(0 if res.ok else 1)


def main():
    from specwatch import startup
    startup.skip_pandas_probe()
    startup.spare_the_collector()
    cli()


if __name__ == "__main__":
    main()
