"""Run a sweep: for every config launch the server, load it while its log is ingested, stop it.

The only orchestrator. `run_config(job)` measures one config end to end and is self-contained
(a picklable `ConfigJob` in, a `ConfigOutcome` out, no module state), so it can run in a thread on
disjoint GPUs here, or later as one Ray task per config (ARCHITECTURE decision 7). For a config:

  launch (own process group, log in the run dir) -> wait for /health -> probe request ->
  warm-up requests (stored with is_warmup) -> for each concurrency and repeat:
      POST /flush_cache (resets the server's spec counters) -> note the log size (offset_from)
      -> load, while a thread ingests the log -> GET /server_info -> note the log size
      (offset_to) -> ingest to the end -> one transaction: the `runs` row, its `run_sources`
      byte range [offset_from, offset_to), its `requests`
  -> stop the whole process group and check no process survives and the port is free.

Failures are data: a bad flag, a server that never gets ready, one that dies mid-load, a port in
use, requests that error: each ends as `runs` rows with `status = 'failed'`, the reason and the tail
of the server log, and the sweep goes on. Ctrl-C sends no new requests, stops the server, keeps
what was measured (the run in progress is stored as `interrupted`) and exits 130.

Resume: a run whose row is `ok` or `failed` with the same server config is skipped unless
`force`; `interrupted` and `running` rows are measured again.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from specwatch import ingest, launch, load, store, sweepfile
from specwatch.progress import Progress
from specwatch.sweepfile import Config, Sweep

FINISHED = ("ok", "failed")
INGEST_POLL_S = 0.5


class SweepError(RuntimeError):
    """The sweep cannot start (bad sweep file, bad --gpus, ...); the message says what to fix."""


# ------------------------------------------------------------------------------- unit of work

@dataclass(frozen=True)
class RunKey:
    concurrency: int
    repeat_idx: int


@dataclass(frozen=True)
class ConfigJob:
    """Everything `run_config` needs; picklable."""

    sweep: Sweep
    config: Config
    runs: tuple[RunKey, ...]
    db: str
    run_dir: str
    port: int
    gpus: tuple[int, ...] | None = None
    force: bool = False


@dataclass
class RunOutcome:
    run_id: str
    concurrency: int
    repeat_idx: int
    status: str
    failure_reason: str | None = None
    requests_ok: int = 0
    requests_failed: int = 0
    output_tok_s: float | None = None
    load_s: float = 0.0


@dataclass
class ConfigOutcome:
    config: str
    status: str                     # ok | failed | interrupted
    failure_reason: str | None = None
    log_path: str | None = None
    port: int | None = None
    gpus: list[int] | None = None
    runs: list[RunOutcome] = field(default_factory=list)
    startup_s: float | None = None  # launch -> /health 200
    warmup_s: float = 0.0           # probe + warm-up requests
    load_s: float = 0.0             # Σ load wall time of the runs
    stop_s: float | None = None     # SIGTERM -> group gone
    total_s: float = 0.0
    stop_clean: bool | None = None
    stop_note: str | None = None

    @property
    def overhead_s(self) -> float:
        """specwatch's own time: everything except server start-up, warm-up and the load."""
        return self.total_s - (self.startup_s or 0.0) - self.warmup_s - self.load_s


def run_id(sweep: str, config: str, key: RunKey) -> str:
    return f"{sweep}/{config}/c{key.concurrency}/r{key.repeat_idx}"


def run_name(sweep: Sweep, config: str, key: RunKey) -> str:
    name = f"{config}/c{key.concurrency}"
    return name + (f"/r{key.repeat_idx}" if sweep.repeats > 1 else "")


def _config_columns(sweep: Sweep, c: Config, aux_ids) -> dict:
    return {
        "origin": "sweep", "sweep_name": sweep.name, "config_name": c.name,
        "engine": sweep.engine, "is_baseline": c.is_baseline, "model_path": c.model,
        "draft_model_path": c.draft_model, "speculative_algorithm": c.speculative_algorithm,
        "speculative_num_steps": c.speculative_num_steps,
        "speculative_eagle_topk": c.speculative_eagle_topk,
        "speculative_num_draft_tokens": c.speculative_num_draft_tokens, "tp_size": c.tp_size,
        "aux_layer_ids": json.dumps(list(aux_ids)) if aux_ids is not None else None,
        "server_flags": json.dumps(list(c.server_flags)),
    }


def _write_runs(db: str, rows: list[dict], requests: dict[str, list[load.RequestResult]] = {},
                sources: dict[str, tuple[str, int, int]] = {}, reset: bool = False) -> None:
    """Upsert run rows, with their log ranges and request rows, in one transaction. `reset`:
    first drop what an earlier attempt stored for these runs."""
    with store.writer(db) as con:
        con.execute("BEGIN")
        try:
            for row in rows:
                rid = row["run_id"]
                if reset or rid in requests:
                    con.execute("DELETE FROM requests WHERE run_id = ?", [rid])
                if reset or rid in sources:
                    con.execute("DELETE FROM run_sources WHERE run_id = ?", [rid])
                store.upsert_run(con, row)
                if rid in sources:
                    source_id, lo, hi = sources[rid]
                    store.attach_source(con, rid, source_id, lo, hi)
                reqs = requests.get(rid)
                if reqs:
                    cols: dict[str, list] = {c: [] for c in ("run_id",) + tuple(
                        reqs[0].row().keys())}
                    for r in reqs:
                        cols["run_id"].append(rid)
                        for k, v in r.row().items():
                            cols[k].append(v)
                    store.insert(con, "requests", cols)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise


class _IngestThread:
    """Polls a FileIngestor while the load runs; the caller polls once more at the end."""

    def __init__(self, ing: ingest.FileIngestor):
        self.ing = ing
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="ingest", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.wait(INGEST_POLL_S):
            try:
                self.ing.poll()
            except (store.StoreError, ingest.IngestError):
                pass   # the log file is the buffer: what is not stored now is stored next time

    def join(self) -> None:
        self.stop.set()
        self.thread.join()


def _ingest_to(ing: ingest.FileIngestor, offset: int, timeout_s: float = 30.0) -> str | None:
    """Ingest until the checkpoint passes `offset`; returns the source id."""
    deadline = time.monotonic() + timeout_s
    while True:
        ing.poll()
        src = ing._src
        if src is not None and src.offset_bytes >= offset or time.monotonic() > deadline:
            return src.source_id if src is not None else None
        time.sleep(0.05)


def run_config(job: ConfigJob, stop: threading.Event | None = None, progress=None) -> ConfigOutcome:
    """Measure one config at each of its (concurrency, repeat) runs; always stops the server.
    `stop` (Ctrl-C) and `progress` (a callback object) are optional and local-only. Configs may
    run in threads: `store.writer` makes this process's writes take turns."""
    t_start = time.monotonic()
    stop = stop or threading.Event()
    sweep, c = job.sweep, job.config
    run_dir = Path(job.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    log_path = run_dir / f"server-{dt.datetime.now():%Y%m%d-%H%M%S-%f}.log"
    out = ConfigOutcome(config=c.name, status="ok", log_path=str(log_path), port=job.port,
                        gpus=list(job.gpus) if job.gpus is not None else None)
    base = {**_config_columns(sweep, c, launch.draft_aux_ids(c))}
    keys = list(job.runs)
    ids = {k: run_id(sweep.name, c.name, k) for k in keys}
    _write_runs(job.db, [{**base, "run_id": ids[k], "run_name": run_name(sweep, c.name, k),
                          "concurrency": k.concurrency, "repeat_idx": k.repeat_idx,
                          "status": "running", "failure_reason": None, "server_log_tail": None,
                          "created_at": dt.datetime.now(), "started_at": None, "ended_at": None}
                         for k in keys], reset=True)
    done: set[RunKey] = set()
    server = None

    def fail_rest(reason: str, status: str = "failed") -> None:
        tail = launch.log_tail(log_path)
        rest = [k for k in keys if k not in done]
        _write_runs(job.db, [{"run_id": ids[k], "status": status, "failure_reason": reason,
                              "server_log_tail": tail, "ended_at": dt.datetime.now()}
                             for k in rest])
        for k in rest:
            out.runs.append(RunOutcome(ids[k], k.concurrency, k.repeat_idx, status, reason))
            done.add(k)

    ing = None
    try:
        if progress:
            progress.config_start(c.name, len(keys))
        draft_path = launch.draft_with_aux(c, run_dir) if c.aux_layer_ids is not None else None
        if not launch.port_free(job.port):
            raise launch.LaunchFailed(
                f"port {job.port} is already in use by another process; free it, or drop "
                "`port` from the sweep file to use a free port per config")
        argv = launch.command(sweep.engine, c, job.port, draft_path, sweep.launch_command,
                              sweep.sglang_version or (launch.installed_sglang_version()
                                                       if sweep.engine == "sglang" else None))
        env = launch.environment(dict(os.environ), sweep.env, job.gpus, sweep.engine)
        env["SPECWATCH_RUN_DIR"] = str(run_dir)    # lets tests find anything we leave behind
        server = launch.Server(argv, env, job.port, log_path)
        server.start()
        if progress:
            progress.note(c.name, f"launched pid {server.pid} on port {job.port}")
        out.startup_s = server.wait_ready(sweep.startup_timeout_s, stop=stop)
        if progress:
            progress.note(c.name, f"ready in {out.startup_s:.1f} s")

        t0 = time.monotonic()
        warm_specs, specs = load.build_requests(sweep.workload, load.read_prompts(sweep.workload))
        w = sweep.workload
        # The probe asks whether the server can serve at all: the shortest prompt, so that a
        # workload whose long prompts exceed the context still gets measured (those fail as rows).
        first = min(warm_specs + specs, key=lambda r: len(r.prompt))
        probe = load.probe(job.port, first, w.temperature, sweep.request_timeout_s)
        if not probe.success:
            raise launch.LaunchFailed(f"probe request failed: {probe.error}")
        warm = load.run(job.port, warm_specs, max(k.concurrency for k in keys), w.temperature,
                        w.seed, sweep.request_timeout_s, is_warmup=True, first_idx=-len(warm_specs),
                        stop=stop)
        out.warmup_s = time.monotonic() - t0
        probe.request_idx = -len(warm_specs) - 1
        warm_rows = [probe] + warm.results
        ing = ingest.FileIngestor(job.db, log_path)

        for k in keys:
            if stop.is_set():
                break
            if server.exited() is not None:
                raise launch.LaunchFailed(f"server exited with code {server.exited()} between runs")
            rid = ids[k]
            started = dt.datetime.now()
            load.flush_cache(job.port)
            offset_from = log_path.stat().st_size
            if progress:
                progress.run_start(c.name, k.concurrency, k.repeat_idx, len(specs))
            tail = _IngestThread(ing)
            try:
                res = load.run(job.port, specs, k.concurrency, w.temperature, w.seed,
                               sweep.request_timeout_s, stop=stop,
                               on_done=(lambda r: progress.request_done(c.name, r.success))
                               if progress else None)
            finally:
                tail.join()
            out.load_s += res.wall_s
            info = load.server_info(job.port)
            offset_to = log_path.stat().st_size
            source_id = _ingest_to(ing, offset_to)
            summary = load.summarize(res)
            exit_code = server.exited()
            answering = True
            if exit_code is None and summary["requests_failed"]:
                # A killed server takes a moment to be reapable; one that hangs never answers.
                answering = server.health(timeout_s=5.0) is not None
                if not answering:
                    exit_code = server.wait_exit(2.0)
            status, reason = "ok", None
            if exit_code is None and not answering:
                status, reason = "failed", "server stopped answering during the load"
            elif exit_code is not None:
                status, reason = "failed", (f"server exited with code {exit_code} during the "
                                            "load")
            elif res.interrupted or (stop.is_set() and len(res.results) < len(specs)):
                status, reason = "interrupted", "interrupted (Ctrl-C) during the load"
            elif summary["requests_ok"] == 0:
                first_err = next((r.error for r in res.results if r.error), "no requests sent")
                status, reason = "failed", f"all {len(res.results)} requests failed: {first_err}"
            elif summary["requests_failed"]:
                first_err = next(r.error for r in res.results if not r.success)
                reason = f"{summary['requests_failed']} of {len(res.results)} requests failed: " \
                         f"{first_err}"
            row = {**base, "run_id": rid, "status": status, "failure_reason": reason,
                   "server_log_tail": launch.log_tail(log_path) if status != "ok" else None,
                   "started_at": started, "ended_at": dt.datetime.now(),
                   "server_accept_len": load.server_accept_len(info), **summary}
            reqs = res.results + (warm_rows if k == keys[0] else [])
            _write_runs(job.db, [row], {rid: reqs},
                        {rid: (source_id, offset_from, offset_to)} if source_id else {})
            done.add(k)
            out.runs.append(RunOutcome(rid, k.concurrency, k.repeat_idx, status, reason,
                                       summary["requests_ok"], summary["requests_failed"],
                                       summary["output_tok_s"], res.wall_s))
            if progress:
                progress.run_end(c.name, out.runs[-1])
            if status == "failed" and (exit_code is not None or not answering):
                raise launch.LaunchFailed(reason)
        if stop.is_set() and len(done) < len(keys):
            fail_rest("interrupted (Ctrl-C) before this run", "interrupted")
    except launch.LaunchFailed as exc:
        status = "interrupted" if stop.is_set() else "failed"
        fail_rest(str(exc), status)
    except (load.LoadError, ingest.IngestError, OSError) as exc:
        fail_rest(f"{type(exc).__name__}: {exc}")
    finally:
        if server is not None:
            rep = server.stop(sweep.stop_grace_s)
            out.stop_s = rep.stop_s
            out.stop_clean = rep.clean
            notes = []
            if rep.survivors:
                notes.append(f"processes survived the group kill and were killed: {rep.survivors}")
            if not rep.port_free:
                notes.append(f"port {job.port} still in use after stop")
            if rep.killed:
                notes.append(f"needed SIGKILL after {sweep.stop_grace_s:.0f} s")
            out.stop_note = "; ".join(notes) or None
        if ing is not None:
            ing.close()
        # The config's status is its worst run's; its reason the first one given.
        statuses = {r.status for r in out.runs}
        out.status = next((st for st in ("interrupted", "failed") if st in statuses), "ok")
        out.failure_reason = next((r.failure_reason for r in out.runs if r.failure_reason), None)
        out.total_s = time.monotonic() - t_start
        if progress:
            progress.config_end(c.name, out)
    return out


# ------------------------------------------------------------------------------- the sweep

def plan(sweep: Sweep, db: str, force: bool) -> list[tuple[Config, list[RunKey]]]:
    """(config, runs to measure) for every config with something left to do."""
    keys = [RunKey(cc, r) for cc in sweep.concurrency for r in range(sweep.repeats)]
    stored: dict[str, tuple] = {}
    if not force and Path(db).exists():
        cols = ["run_id", "status"] + [k for k in _config_columns(sweep, sweep.configs[0], None)
                                       if k not in ("origin",)]
        with store.writer(db) as con:
            for row in con.execute(f"SELECT {', '.join(cols)} FROM runs WHERE sweep_name = ?",
                                   [sweep.name]).fetchall():
                stored[row[0]] = row
    out = []
    for c in sweep.configs:
        want = _config_columns(sweep, c, launch.draft_aux_ids(c))
        want.pop("origin")
        todo = []
        for k in keys:
            row = stored.get(run_id(sweep.name, c.name, k))
            same = row is not None and row[1] in FINISHED and tuple(row[2:]) == tuple(
                want.values())
            if not same:
                todo.append(k)
        if todo:
            out.append((c, todo))
    return out


def parse_gpus(text: str | None) -> tuple[int, ...] | None:
    if text is None or text.strip() == "":
        return None
    try:
        ids = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise SweepError(f"--gpus {text!r}: expected GPU ids separated by commas, e.g. 0,1,2,3"
                         ) from None
    if len(set(ids)) != len(ids) or any(i < 0 for i in ids):
        raise SweepError(f"--gpus {text!r}: ids must be distinct and >= 0")
    return ids


@dataclass
class SweepResult:
    name: str
    outcomes: list[ConfigOutcome]
    skipped: list[sweepfile.Skipped]
    up_to_date: list[str]
    interrupted: bool


def run_sweep(sweep: Sweep, db: str, out_dir: str, gpus: tuple[int, ...] | None = None,
              force: bool = False, stop: threading.Event | None = None, progress=None
              ) -> SweepResult:
    """Measure every config with runs left to do: one at a time on CPU, in parallel on disjoint
    GPU sets with `gpus` (a config with tp_size N takes N of them)."""
    stop = stop or threading.Event()
    todo = plan(sweep, db, force)
    todo_names = {c.name for c, _ in todo}
    up_to_date = [c.name for c in sweep.configs if c.name not in todo_names]
    outcomes: list[ConfigOutcome] = []
    root = Path(out_dir) / sweep.name
    if progress:
        progress.sweep_start(sweep.name, sum(len(k) for _, k in todo), len(todo), up_to_date)

    used_ports: set[int] = set()

    def job(c: Config, keys: list[RunKey], gpu_set) -> ConfigJob:
        port = sweep.port or launch.free_port(avoid=used_ports)
        used_ports.add(port)
        return ConfigJob(sweep, c, tuple(keys), str(db), str(root / c.name), port, gpu_set, force)

    if gpus is None or sweep.port is not None:
        for c, keys in todo:
            if stop.is_set():
                break
            if gpus is not None and c.tp_size > len(gpus):
                outcomes.append(_unplaceable(sweep, db, c, keys, len(gpus)))
                continue
            outcomes.append(run_config(job(c, keys, gpus[:c.tp_size] if gpus else None),
                                       stop, progress))
    else:
        free = list(gpus)
        pending = []
        for c, keys in todo:
            if c.tp_size > len(gpus):
                outcomes.append(_unplaceable(sweep, db, c, keys, len(gpus)))
            else:
                pending.append((c, keys))
        running: dict[Future, tuple[int, ...]] = {}

        with ThreadPoolExecutor(max_workers=len(gpus), thread_name_prefix="config") as pool:
            while (pending and not stop.is_set()) or running:
                placed = True
                while placed and pending and not stop.is_set():
                    placed = False
                    for i, (c, keys) in enumerate(pending):
                        if c.tp_size <= len(free):
                            gpu_set = tuple(free[:c.tp_size])
                            del free[:c.tp_size]
                            fut = pool.submit(run_config, job(c, keys, gpu_set), stop, progress)
                            running[fut] = gpu_set
                            del pending[i]
                            placed = True
                            break
                if not running:
                    break
                finished, _ = wait(list(running), timeout=0.5, return_when=FIRST_COMPLETED)
                for fut in finished:
                    free.extend(running.pop(fut))
                    free.sort(key=list(gpus).index)
                    outcomes.append(fut.result())
                    used_ports.discard(outcomes[-1].port)
    if progress:
        progress.sweep_end()
    return SweepResult(sweep.name, outcomes, list(sweep.skipped), up_to_date, stop.is_set())


def _unplaceable(sweep: Sweep, db: str, c: Config, keys: list[RunKey], n: int) -> ConfigOutcome:
    reason = (f"tp_size={c.tp_size} needs {c.tp_size} GPUs but --gpus lists {n}; give more GPUs "
              "or drop this config")
    rows = [{**_config_columns(sweep, c, launch.draft_aux_ids(c)), "run_id": run_id(sweep.name, c.name, k),
             "run_name": run_name(sweep, c.name, k), "concurrency": k.concurrency,
             "repeat_idx": k.repeat_idx, "status": "failed", "failure_reason": reason}
            for k in keys]
    _write_runs(db, rows, reset=True)
    return ConfigOutcome(c.name, "failed", reason, runs=[
        RunOutcome(r["run_id"], r["concurrency"], r["repeat_idx"], "failed", reason) for r in rows])


# ------------------------------------------------------------------------------- CLI entry

def run_sweep_cli(sweep_file: str, db: str, out_dir: str, gpus: str | None, force: bool,
                  as_json: bool, out=None) -> int:
    """`specwatch run-sweep`: run, then print the comparison. Exit 0 when every run is ok, 1 when
    some failed, 130 when interrupted."""
    from specwatch import query
    from specwatch.cli import render

    out = out or sys.stdout
    try:
        sweep = sweepfile.load(sweep_file)
    except sweepfile.SweepFileError as exc:
        raise SweepError(str(exc)) from None
    gpu_ids = parse_gpus(gpus)
    progress = Progress()
    for s in sweep.skipped:
        progress.note("skipped", f"{s.description}: {s.reason}")
    stop = threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():
        def on_sigint(signum, frame):
            if stop.is_set():
                raise KeyboardInterrupt
            stop.set()
            progress.note("Ctrl-C", "stopping: no new requests; the server is stopped cleanly "
                          "(Ctrl-C again to abort at once)")
        previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        result = run_sweep(sweep, db, out_dir, gpu_ids, force, stop, progress)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    res = query.report(db, sweep=sweep.name)
    if as_json:
        payload = {
            "sweep": sweep.name, "interrupted": result.interrupted,
            "configs": [{**dataclasses.asdict(o), "overhead_s": o.overhead_s}
                        for o in result.outcomes],
            "up_to_date": result.up_to_date,
            "skipped": [dataclasses.asdict(s) for s in result.skipped],
            "report": [dict(zip(res.columns, r)) for r in res.rows],
        }
        json.dump(payload, out, default=str, indent=1)
        out.write("\n")
    else:
        keep = [i for i, col in enumerate(res.columns)
                if any(r[i] is not None for r in res.rows) and col not in (
                    "sweep_name", "model_path", "baseline_run_id", "dp_size")]
        render([res.columns[i] for i in keep], [tuple(r[i] for i in keep) for r in res.rows],
               "table", out)
    if result.interrupted:
        return 130
    statuses = [r.status for o in result.outcomes for r in o.runs]
    return 1 if any(s != "ok" for s in statuses) else 0
