"""Measure one config: launch its server, load it, stop it, and return plain rows. Never stores.

`measure_config(job)` is the unit every executor runs (local thread, Ray task, attach mode): a
picklable `ConfigJob` in, a picklable `ConfigResult` out, no module state, and it **never opens
DuckDB** (`writer.store_result` stores what it returns, in the driver). For one config:

  launch (own process group, log in the run dir) -> wait for /health -> probe request ->
  warm-up requests (kept as request rows with is_warmup) -> for each (concurrency, repeat), in the
  order the job lists them:
      POST /flush_cache (resets the server's spec counters) -> note the log size (offset_from)
      -> load (meanwhile run/sampler.py samples /metrics and NVML) -> GET /server_info -> note the
      log size (offset_to) -> one `RunResult`: the `runs` row (with the GPU energy), its request
      rows, its /metrics samples, its byte range [offset_from, offset_to) of the server log
  -> stop the whole process group and check no process survives and the port is free.

Attach mode (`job.endpoint`): nothing is launched; the load goes to the running server, its log
(`job.log`, optional) gives the byte ranges, and without a log `/server_info` gives what it can.

Failures are data: a bad flag, a server that never gets ready, one that dies mid-load, a port in
use, requests that error: each ends as a run with `status = 'failed'` and its reason, never an
exception. `stop` (a threading.Event, local only) sends no new requests and marks what is left
`interrupted`. `events` (optional, local only) gets progress hooks (see `progress.Progress`), and
`events.run_measured(result)` after every run, so the driver can store runs as they finish.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from specwatch.logs import failure
from specwatch.run import client, launch, load, ports, prom, sampler, traffic
from specwatch import modelinfo
from specwatch.db import sampling
from specwatch.run.sweepfile import Config, Sweep


@dataclass(frozen=True)
class RunKey:
    """One run's load level and repeat: a concurrency (closed loop), or a request rate (open
    loop, `concurrency` None). `search_step` (not part of its identity): the rate search's step
    that asked for it (traffic.py, rounds.py)."""

    concurrency: int | None
    repeat_idx: int
    request_rate: float | None = None
    search_step: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ConfigJob:
    """Everything `measure_config` needs; picklable. `runs` is in measuring order; `order` gives
    each run's position in the sweep's interleaved order (stored as runs.run_order)."""

    sweep: Sweep
    config: Config
    runs: tuple[RunKey, ...]
    run_dir: str
    port: int
    gpus: tuple[int, ...] | None = None
    order: tuple[int, ...] | None = None
    order_seed: int | None = None
    endpoint: str | None = None          # attach mode: http://host:port of a running server
    log: str | None = None               # attach mode: that server's log file (optional)


@dataclass
class RunResult:
    """One measured (or failed) run: its `runs` row, request rows and log byte range."""

    run_id: str
    concurrency: int
    repeat_idx: int
    status: str
    failure_reason: str | None = None
    requests_ok: int = 0
    requests_failed: int = 0
    output_tok_s: float | None = None
    load_s: float = 0.0
    row: dict = field(default_factory=dict)          # `runs` columns
    requests: list[dict] = field(default_factory=list)  # `requests` columns minus run_id
    offset_from: int | None = None
    offset_to: int | None = None
    # `metric_samples` rows (minus run_id) taken during the load: /metrics and NVML (run/sampler.py)
    metric_samples: list[dict] = field(default_factory=list)
    request_rate: float | None = None   # open loop: the asked rate (concurrency is None)


@dataclass
class ConfigResult:
    config: str
    sweep: str = ""
    status: str = "ok"              # ok | failed | interrupted
    failure_reason: str | None = None
    log_path: str | None = None     # the server log where it was written (on its node)
    log_bytes: bytes | None = None  # remote executors: the log itself
    port: int | None = None
    gpus: list[int] | None = None
    hostname: str | None = None
    sglang_version: str | None = None  # the launch interpreter's sglang (what it really ran)
    ray_node_id: str | None = None
    ray_retries: int | None = None
    slurm_job_id: str | None = None          # Slurm: the (array) job id; local mode: a pid
    slurm_array_task_id: int | None = None
    runs: list[RunResult] = field(default_factory=list)
    startup_s: float | None = None  # launch -> /health 200
    warmup_s: float = 0.0           # probe + warm-up requests
    load_s: float = 0.0             # Σ load wall time of the runs
    wait_s: float = 0.0             # waiting for its turn (interleaved order) or a free GPU
    dispatch_s: float | None = None  # Ray: submit -> result back, minus the task's own total_s
    dispatch_start_s: float | None = None  # ... of which submit -> the task began (same host)
    started_wall: float | None = None      # time.time() when measuring began
    store_s: float | None = None    # the driver's final writer.store_result for this config
    stop_s: float | None = None     # SIGTERM -> group gone
    total_s: float = 0.0
    stop_clean: bool | None = None
    stop_note: str | None = None

    @property
    def overhead_s(self) -> float:
        """specwatch's own time: everything except server start-up, warm-up and the load."""
        return (self.total_s - (self.startup_s or 0.0) - self.warmup_s - self.load_s
                - self.wait_s)

    def summary(self) -> dict:
        """Everything but rows and log bytes (for --json and progress)."""
        d = dataclasses.asdict(self)
        d.pop("log_bytes")
        d["runs"] = [{k: v for k, v in r.items() if k not in ("row", "requests")}
                     for r in d["runs"]]
        d["overhead_s"] = self.overhead_s
        return d


def run_id(sweep: str, config: str, key: RunKey) -> str:
    return f"{sweep}/{config}/{traffic.level_label(key.concurrency, key.request_rate)}" \
        f"/r{key.repeat_idx}"


def run_name(sweep: Sweep, config: str, key: RunKey) -> str:
    name = f"{config}/{traffic.level_label(key.concurrency, key.request_rate)}"
    return name + (f"/r{key.repeat_idx}" if sweep.repeats > 1 else "")


def config_columns(sweep: Sweep, c: Config, aux_ids) -> dict:
    """The `runs` columns that say what a config was launched with (resume compares them)."""
    return {
        "origin": "sweep", "sweep_name": sweep.name, "config_name": c.name,
        "engine": sweep.engine, "is_baseline": c.is_baseline, "model_path": c.model,
        "draft_model_path": c.draft_model, "speculative_algorithm": c.speculative_algorithm,
        "speculative_num_steps": c.speculative_num_steps,
        "speculative_eagle_topk": c.speculative_eagle_topk,
        "speculative_num_draft_tokens": c.speculative_num_draft_tokens, "tp_size": c.tp_size,
        "aux_layer_ids": json.dumps(list(aux_ids)) if aux_ids is not None else None,
        "server_flags": json.dumps(list(c.server_flags)),
        # what decides the generated tokens: a speedup is only computed between equal ones
        "sampling_fingerprint": sampling.sampling_fingerprint(sweep.workload),
        "arrival": sweep.traffic.arrival_json(),     # open-loop levels' arrivals (traffic.py)
    }


def model_facts(c: Config) -> dict:
    """What the model files say, read where the server is launched (NULL when not local)."""
    # only the draft's weights are hashed (its identity for siblings); a target's can be tens of GB
    target, draft = modelinfo.info(c.model, hash_weights=False), modelinfo.info(c.draft_model)
    return {"draft_weights_sha1": draft.weights_sha1 if draft is not None else None,
            "target_architecture": target.architecture if target is not None else None,
            "target_num_layers": target.num_layers if target is not None else None}


def base_row(job: ConfigJob, key: RunKey, i: int) -> dict:
    """The columns of a run known before it is measured."""
    sweep, c = job.sweep, job.config
    return {**config_columns(sweep, c, launch.draft_aux_ids(c)), **model_facts(c),
            "run_id": run_id(sweep.name, c.name, key), "run_name": run_name(sweep, c.name, key),
            "concurrency": key.concurrency, "repeat_idx": key.repeat_idx,
            "request_rate": key.request_rate, "rate_search_step": key.search_step,
            "run_order": job.order[i] if job.order else None, "order_seed": job.order_seed,
            "gpu_ids": json.dumps(list(job.gpus)) if job.gpus is not None else None,
            "attached_endpoint": job.endpoint}


def _event(events, name: str, *args):
    fn = getattr(events, name, None) if events is not None else None
    return fn(*args) if fn is not None else None


def _log_size(path: Path | None) -> int | None:
    try:
        return path.stat().st_size if path is not None else None
    except OSError:
        return None


def measure_config(job: ConfigJob, stop: threading.Event | None = None, events=None
                   ) -> ConfigResult:
    """Measure one config at each of its runs; always stops the server it started."""
    t_start, wall_start = time.monotonic(), time.time()
    stop = stop or threading.Event()
    sweep, c = job.sweep, job.config
    run_dir = Path(job.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if job.endpoint:
        log_path = Path(job.log).resolve() if job.log else None
    else:
        log_path = run_dir / f"server-{dt.datetime.now():%Y%m%d-%H%M%S-%f}.log"
    target = load.target_of(job.endpoint) if job.endpoint else job.port
    out = ConfigResult(config=c.name, sweep=sweep.name, log_path=str(log_path) if log_path
                       else None, port=job.port, hostname=socket.gethostname(),
                       gpus=list(job.gpus) if job.gpus is not None else None,
                       started_wall=wall_start)
    keys = list(job.runs)
    try:
        launch.prepare_models(c)     # fixture: models exist before their facts are read
    except launch.LaunchFailed:
        pass                         # launching it fails the config with this reason
    rows = {k: base_row(job, k, i) for i, k in enumerate(keys)}
    done: set[RunKey] = set()
    server = None

    def finish(k: RunKey, status: str, reason: str | None, extra: dict | None = None,
               res: RunResult | None = None) -> None:
        res = res or RunResult(rows[k]["run_id"], k.concurrency, k.repeat_idx, status, reason,
                               request_rate=k.request_rate)
        res.row = {**rows[k], "status": status, "failure_reason": reason,
                   "server_log_tail": launch.log_tail(log_path) if status != "ok" and log_path
                   else None, "ended_at": dt.datetime.now(), **(extra or {})}
        out.runs.append(res)
        done.add(k)

    def fail_rest(reason: str, status: str = "failed") -> None:
        # A config that never got to measure anything: the runs are scoped to the whole log
        # (its server_args and failure lines), so doctor finds the evidence of the failed launch.
        whole = (0, _log_size(log_path)) if not out.runs and log_path is not None else (None,
                                                                                        None)
        for k in keys:
            if k not in done:
                finish(k, status, reason, res=RunResult(
                    rows[k]["run_id"], k.concurrency, k.repeat_idx, status, reason,
                    offset_from=whole[0], offset_to=whole[1], request_rate=k.request_rate))

    try:
        _event(events, "config_start", c.name, len(keys))
        if job.endpoint:
            _event(events, "before_launch", c.name)
            if load.health(target) != 200:
                raise launch.LaunchFailed(f"{job.endpoint}: /health does not answer 200; is the "
                                          "server running and reachable from here?")
        else:
            draft_path = launch.draft_with_aux(c, run_dir) if c.aux_layer_ids is not None else None
            if not ports.port_free(job.port):
                raise launch.LaunchFailed(
                    f"port {job.port} is already in use by another process; free it, or drop "
                    "`port` from the sweep file to use a free port per config")
            version = sweep.sglang_version or (
                launch.installed_sglang_version(sweep.launch_command)
                if sweep.engine == "sglang" else None)     # the launch interpreter's sglang
            out.sglang_version = version
            argv = launch.command(sweep.engine, c, job.port, draft_path, sweep.launch_command,
                                  version, gpus=job.gpus)
            env = launch.environment(dict(os.environ), sweep.env, job.gpus, sweep.engine)
            env["SPECWATCH_RUN_DIR"] = str(run_dir)    # lets tests find anything we leave behind
            t_wait = time.monotonic()
            _event(events, "before_launch", c.name)
            out.wait_s += time.monotonic() - t_wait
            server = launch.Server(argv, env, job.port, log_path, grace_s=sweep.stop_grace_s,
                                   engine=sweep.engine)
            server.start()
            _event(events, "log_opened", c.name, str(log_path))
            _event(events, "note", c.name, f"launched pid {server.pid} on port {job.port}")
            out.startup_s = server.wait_ready(sweep.startup_timeout_s, stop=stop)
            _event(events, "note", c.name, f"ready in {out.startup_s:.1f} s")

        t0 = time.monotonic()
        cats: dict[str, str] = {}     # prompt -> category, stored with each request
        warm_specs, specs = load.build_requests(sweep.workload,
                                                load.read_prompts(sweep.workload, cats), cats)
        specs = traffic.with_trace_lengths(sweep.traffic, specs)
        w = sweep.workload
        # The probe asks whether the server can serve at all: the shortest prompt, so that a
        # workload whose long prompts exceed the context still gets measured (those fail as rows).
        first = min(warm_specs + specs, key=lambda r: len(r.prompt))
        api = client.ENGINE_API[sweep.engine]
        probe = load.probe(target, first, w.temperature, sweep.request_timeout_s, api=api)
        if not probe.success:
            raise launch.LaunchFailed(f"probe request failed: {probe.error}")
        warm = load.run(target, warm_specs, max([k.concurrency or 1 for k in keys]), w.temperature,
                        w.seed, sweep.request_timeout_s, is_warmup=True, first_idx=-len(warm_specs),
                        stop=stop, api=api)
        out.warmup_s = time.monotonic() - t0
        probe.request_idx = -len(warm_specs) - 1
        warm_rows = [r.row() for r in [probe] + warm.results]

        _event(events, "warmed", c.name)
        for k in keys:
            t_wait = time.monotonic()
            go = _event(events, "before_run", c.name, k)
            out.wait_s += time.monotonic() - t_wait
            if go is False or stop.is_set():
                break
            try:
                fatal = _measure_run(job, k, rows[k], server, target, log_path, specs,
                                     warm_rows if k == keys[0] else [], stop, events, out,
                                     finish)
            finally:
                _event(events, "after_run", c.name, k)
            if fatal:
                raise launch.LaunchFailed(fatal)
        if stop.is_set() and len(done) < len(keys):
            fail_rest("interrupted (Ctrl-C or SIGTERM) before this run", "interrupted")
    except launch.LaunchFailed as exc:
        fail_rest(str(exc), "interrupted" if stop.is_set() else "failed")
    except (load.LoadError, OSError) as exc:
        fail_rest(f"{type(exc).__name__}: {exc}")
    finally:
        if server is not None:
            rep = server.stop(sweep.stop_grace_s)
            out.stop_s, out.stop_clean = rep.stop_s, rep.clean
            notes = []
            if rep.survivors:
                notes.append(f"processes survived the group kill and were killed: {rep.survivors}")
            if not rep.port_free:
                notes.append(f"port {job.port} still in use after stop")
            if rep.killed:
                notes.append(f"needed SIGKILL after {sweep.stop_grace_s:.0f} s")
            out.stop_note = "; ".join(notes) or None
        fail_rest("not measured")          # only if something above escaped unexpectedly
        # The config's status is its worst run's; its reason the first one given.
        statuses = {r.status for r in out.runs}
        out.status = next((st for st in ("interrupted", "failed") if st in statuses), "ok")
        out.failure_reason = next((r.failure_reason for r in out.runs if r.failure_reason), None)
        out.total_s = time.monotonic() - t_start
        _event(events, "config_end", c.name, out)
    return out


def _measure_run(job: ConfigJob, k: RunKey, row: dict, server, target, log_path, specs,
                 extra_requests: list[dict], stop, events, out: ConfigResult, finish
                 ) -> str | None:
    """One (concurrency, repeat) run; returns the reason when the server is gone (fatal)."""
    c, w = job.config, job.sweep.workload
    started = dt.datetime.now()
    vllm = job.sweep.engine == "vllm"
    if vllm:
        before = _spec_counters(target)      # vLLM has no /flush_cache: counters' deltas
    else:
        load.flush_cache(target)
    offset_from = _log_size(log_path)
    _event(events, "run_start", c.name, k.concurrency if k.request_rate is None
           else traffic.rate_label(k.request_rate), k.repeat_idx, len(specs))
    # /metrics and GPU energy during the load; energy only for a server launched here, on the
    # GPUs launch gave it (attach mode: which GPUs the server uses is not known here)
    samp = sampler.RunSampler(target, job.endpoint or f"http://127.0.0.1:{job.port}",
                              job.gpus, measure_energy=not job.endpoint).start()
    try:
        res = load.run(target, specs, k.concurrency, w.temperature, w.seed,
                       job.sweep.request_timeout_s, stop=stop,
                       on_done=(lambda r: events.request_done(c.name, r.success))
                       if events is not None else None, api=client.ENGINE_API[job.sweep.engine],
                       offsets=traffic.offsets(job.sweep.traffic, k.request_rate, len(specs),
                                               (w.seed, k.repeat_idx)))
    finally:
        sampled = samp.stop()
    out.load_s += res.wall_s
    info = None if vllm else load.server_info(target)
    spec = vllm_spec_columns(before, _spec_counters(target)) if vllm else {
        "server_accept_len": load.server_accept_len(info)}
    offset_to = _log_size(log_path)
    summary = load.summarize(res)
    exit_code = server.exited() if server is not None else None
    answering = True
    if exit_code is None and (summary["requests_failed"] or res.aborted):
        # A killed server takes a moment to be reapable; one that hangs never answers.
        answering = load.health(target, timeout_s=5.0) == 200
        if not answering and server is not None:
            exit_code = server.wait_exit(2.0)
    status, reason = run_status(res, summary, exit_code, answering, stop, len(specs))
    if exit_code is not None and log_path is not None:
        cause = failure.failure_cause(log_path)     # the real cause, not "code -9"
        if cause:
            reason = f"{cause} ({reason}; log: {log_path})"
    elif status == "ok" and server is not None:
        not_ours = server.after_load(offset_from, offset_to, res.results)
        if not_ours:
            status, reason = "failed", not_ours
    rr = RunResult(row["run_id"], k.concurrency, k.repeat_idx, status, reason,
                   summary["requests_ok"], summary["requests_failed"], summary["output_tok_s"],
                   res.wall_s, requests=[r.row() for r in res.results] + extra_requests,
                   offset_from=offset_from, offset_to=offset_to, metric_samples=sampled.rows,
                   request_rate=k.request_rate)
    finish(k, status, reason, {"started_at": started, **spec, **summary, **sampled.energy}, rr)
    _event(events, "run_measured", out)        # stored first: a printed run is a kept run
    _event(events, "run_end", c.name, rr)
    if status == "failed" and (exit_code is not None or not answering):
        return reason
    return None


def _spec_counters(target) -> prom.SpecCounters | None:
    """vLLM's spec-decode counters now; None when the page has none (no speculation) or cannot
    be read (then the run's acceptance columns stay NULL: missing, never a default)."""
    try:
        return prom.spec_counters(prom.scrape(target))
    except prom.ScrapeError:
        return None


def vllm_spec_columns(before: prom.SpecCounters | None, after: prom.SpecCounters | None
                      ) -> dict:
    """A vLLM run's acceptance from vLLM's own counters, scraped before and after its load:
    spec_* = after − before, server_accept_len = 1 + Δaccepted / Δdrafts (prom.SpecCounters).
    All NULL without both pages (a baseline has no spec counters)."""
    if after is None or before is None:
        return {"server_accept_len": None}
    d = after.minus(before)
    return {"server_accept_len": d.accept_len, "spec_drafts": d.drafts,
            "spec_draft_tokens": d.draft_tokens, "spec_accepted_tokens": d.accepted_tokens,
            "spec_accepted_per_pos": json.dumps(list(d.accepted_per_pos))}


def run_status(res: load.LoadResult, summary: dict, exit_code: int | None, answering: bool,
               stop: threading.Event, n_specs: int) -> tuple[str, str | None]:
    """(status, reason) of a measured run. A run with any failed request is not `ok`: its numbers
    would be computed over a different set of requests than the other configs'."""
    if exit_code is not None:
        return "failed", f"server exited with code {exit_code} during the load"
    if not answering:
        return "failed", "server stopped answering during the load"
    if res.aborted:
        return "failed", res.aborted
    if res.interrupted or (stop.is_set() and len(res.results) < n_specs):
        return "interrupted", "interrupted (Ctrl-C or SIGTERM) during the load"
    if summary["requests_ok"] == 0:
        first_err = next((r.error for r in res.results if r.error), "no requests sent")
        return "failed", f"all {len(res.results)} requests failed: {first_err}"
    if summary["requests_failed"]:
        first_err = next(r.error for r in res.results if not r.success)
        return "failed", (f"{summary['requests_failed']} of {len(res.results)} requests failed: "
                          f"{first_err}")
    return "ok", None
