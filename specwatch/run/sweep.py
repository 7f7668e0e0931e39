"""Run a sweep: plan what is left, order the runs, hand configs to an executor, store results.

The orchestrator. It never measures (`measure.measure_config` does, one config per call, and never
opens DuckDB) and never renders (`cli.py` prints). Results go to `writer.store_result`, the one
writer, in this (the driver) process, as they arrive.

Plan / resume: a run whose stored row is `ok` with the same server config is skipped unless
`force`; `failed`, `interrupted` and `running` rows (a crash) are measured again.

Order (interleaved repeats): runs are ordered repeat by repeat, concurrency by concurrency, and
within each (repeat, concurrency) block the configs come in an order shuffled with a recorded
seed (`runs.run_order`, `runs.order_seed`; the seed is the workload's). So baseline and spec runs
alternate across repeats and a slow drift of the machine (thermal, a neighbour's job) lands on
every config alike instead of on whichever config ran last.

Executors:
- local, built-in engine (default): the servers of the sweep's configs are started together (at most
  `GROUP_SIZE` at once) and **kept for all their repeats**; a turnstile lets exactly one run load
  at a time, in the interleaved order. An idle built-in engine (or SGLang) server costs no CPU, so
  a run measures the same as if it were alone, and one server per config across repeats is
  faithful: restarting per repeat would only add start-up time (warm-up requests reset caches).
- local, `--gpus`: configs on disjoint GPU sets run at the same time (a config takes tp*pp*dp
  ids), each one's runs in the interleaved order; configs wait for free GPUs.
- `engine = "sglang"` without `--gpus`: one config at a time (SGLang assumes it owns the GPU's
  memory, see `shares_host`); servers are restarted between configs, not between repeats.
- fixed `port` in the sweep file: one config at a time (they cannot share the port), each with
  its runs in interleaved order; servers are restarted between configs, not between repeats.
- ray (`--executor ray`, see `ray_executor`): one Ray task per config on the cluster.
- slurm (`--executor slurm`, see `slurm_executor`): one Slurm array task per config (submitit).
  Both remote executors share `executors.drive` and return results that the driver stores.
- attach (`--endpoint`): no server is launched; the load goes to running servers.

Live ingest: for local executors the driver tails each server's log into the database while the
load runs (`writer.LiveIngest`, a driver thread), so `report` and the dashboard see it early;
measured runs are stored after every run, so a driver crash loses at most the run in progress.

Signals: Ctrl-C, SIGTERM and SIGHUP all stop the sweep the same way: no new requests, servers
stopped cleanly, what was measured stored, the run in progress stored as `interrupted`, exit 130.
A second signal aborts at once (servers are still stopped by the `finally` blocks).
"""
from __future__ import annotations

import random
import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from specwatch.run import launch, procs, rounds, sglang_check, sweepfile, vllm_check, writer
from specwatch.db import store
from specwatch.run.measure import (ConfigJob, ConfigResult, RunKey, RunResult, base_row,
                               config_columns, measure_config, run_id, run_name)
from specwatch.run.progress import Progress
from specwatch.run.sweepfile import Config, Sweep

__all__ = ["ConfigJob", "ConfigResult", "ConfigOutcome", "RunKey", "RunResult", "Progress",
           "SweepError", "SweepResult", "plan", "run_sweep", "run_id", "run_name"]

ConfigOutcome = ConfigResult        # the name older callers use
GROUP_SIZE = 8                      # servers alive at once on CPU (local executor)


class SweepError(RuntimeError):
    """The sweep cannot start (bad sweep file, bad --gpus, ...); the message says what to fix."""


# ------------------------------------------------------------------------------- plan and order

def plan(sweep: Sweep, db: str, force: bool) -> list[tuple[Config, list[RunKey]]]:
    """(config, runs to measure) for every config with something left to do."""
    keys = rounds.plan_keys(sweep)     # every load level x repeat (+ the rate search's ends)
    stored: dict[str, tuple] = {}
    cols = [k for k in config_columns(sweep, sweep.configs[0], None) if k != "origin"]
    if not force and Path(db).exists():
        with store.writer(db) as con:
            for row in con.execute(f"SELECT run_id, status, {', '.join(cols)} FROM runs "
                                   "WHERE sweep_name = ?", [sweep.name]).fetchall():
                stored[row[0]] = row
    out = []
    for c in sweep.configs:
        want = config_columns(sweep, c, launch.draft_aux_ids(c))
        want.pop("origin")
        todo = []
        for k in keys:
            row = stored.get(run_id(sweep.name, c.name, k))
            if not (row is not None and row[1] == "ok" and tuple(row[2:]) == tuple(want.values())):
                todo.append(k)
        if todo:
            out.append((c, todo))
    return out


def interleave(sweep: Sweep, todo: list[tuple[Config, list[RunKey]]], seed: int
               ) -> list[tuple[str, RunKey]]:
    """The sweep's run order: repeat by repeat, load level by load level (the sweep file's
    concurrencies, then its rates, then searched rates by value), configs shuffled within each
    block with `seed` (so baseline and spec runs alternate)."""
    rng = random.Random(seed)
    rank = {lv: i for i, lv in enumerate(sweep.traffic.levels())}
    blocks = sorted({k for _, keys in todo for k in keys},
                    key=lambda k: (k.repeat_idx, rank.get((k.concurrency, k.request_rate),
                                                          len(rank)), k.request_rate or 0))
    want = {c.name: {k: k for k in keys} for c, keys in todo}    # keeps each key's search_step
    out = []
    for key in blocks:
        block = [name for name, keys in want.items() if key in keys]
        rng.shuffle(block)
        out += [(name, want[name][key]) for name in block]
    return out


def _not_ok_configs(db: str, sweep: Sweep, interrupted: bool) -> list[str]:
    if not Path(db).exists():
        return []
    names = [c.name for c in sweep.configs]
    with store.reader(db) as con:
        got = con.execute(
            "SELECT config_name FROM runs WHERE sweep_name = ? AND status <> 'ok' GROUP BY 1 "
            "HAVING bool_and(status = 'interrupted') = ? ORDER BY 1",
            [sweep.name, interrupted]).fetchall()
    return [n for (n,) in got if n in names]


def failed_configs(db: str, sweep: Sweep) -> list[str]:
    """Configs of this sweep with a run that is not `ok` in the database, other than the ones
    whose every such run was only interrupted (`interrupted_configs`). Exit status."""
    return _not_ok_configs(db, sweep, interrupted=False)


def interrupted_configs(db: str, sweep: Sweep) -> list[str]:
    """Configs of this sweep whose runs that are not `ok` were all `interrupted` (Ctrl-C,
    SIGTERM, a stopped Ray worker): nothing is wrong with them; re-running measures them."""
    return _not_ok_configs(db, sweep, interrupted=True)


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


# ------------------------------------------------------------------------------- local driver

class Turnstile:
    """One run loads at a time, in the sweep's order, among the configs whose servers are up.
    The next turn is the first remaining run of a registered config (that config is waited for).
    A server starts and warms up only while no run loads, and no run starts while one warms up,
    so nothing but the run itself uses the CPU while it is measured."""

    def __init__(self, order: list[tuple[str, RunKey]], stop: threading.Event):
        self.order = list(order)
        self.stop = stop
        self.cv = threading.Condition()
        self.active: set[str] = set()
        self.warming: set[str] = set()
        self.busy = False

    def register(self, name: str) -> None:
        with self.cv:
            self.active.add(name)
            self.cv.notify_all()

    def before_launch(self, name: str) -> None:
        with self.cv:
            while self.busy and not self.stop.is_set():
                self.cv.wait(0.5)
            self.warming.add(name)

    def warmed(self, name: str) -> None:
        with self.cv:
            self.warming.discard(name)
            self.cv.notify_all()

    def leave(self, name: str) -> None:
        with self.cv:
            self.active.discard(name)
            self.warming.discard(name)
            self.order = [e for e in self.order if e[0] != name]
            self.cv.notify_all()

    def wait(self, name: str, key: RunKey) -> bool:
        with self.cv:
            while not self.stop.is_set():
                head = next((e for e in self.order if e[0] in self.active), None)
                if not self.busy and not self.warming and head == (name, key):
                    self.busy = True
                    self.order.remove(head)
                    return True
                self.cv.wait(0.5)
            return False

    def release(self) -> None:
        with self.cv:
            self.busy = False
            self.cv.notify_all()


class Driver:
    """The `events` local executors give `measure_config`: progress, live ingest, the turnstile,
    and storing each run as it is measured (all in this, the driver, process)."""

    def __init__(self, db: str, out_dir: str, progress, turnstile: Turnstile | None = None):
        self.db, self.out_dir, self.progress, self.turnstile = db, out_dir, progress, turnstile
        self.live: dict[str, writer.LiveIngest] = {}
        self.stored: dict[str, set[str]] = {}      # config -> run ids stored as they finished
        self.lock = threading.Lock()

    def config_start(self, name, runs):
        if self.turnstile:
            self.turnstile.register(name)
        self.progress.config_start(name, runs)

    def before_launch(self, name):
        if self.turnstile:
            self.turnstile.before_launch(name)

    def warmed(self, name):
        if self.turnstile:
            self.turnstile.warmed(name)

    def log_opened(self, name, path):
        with self.lock:
            self.live[name] = writer.LiveIngest(self.db, path)

    def note(self, name, text):
        self.progress.note(name, text)

    def before_run(self, name, key):
        return self.turnstile.wait(name, key) if self.turnstile else True

    def after_run(self, name, key):
        if self.turnstile:
            self.turnstile.release()

    def run_start(self, name, concurrency, repeat, n):
        self.progress.run_start(name, concurrency, repeat, n)

    def request_done(self, name, ok):
        self.progress.request_done(name, ok)

    def run_end(self, name, r):
        self.progress.run_end(name, r)

    def run_measured(self, result: ConfigResult):
        stored = writer.store_result(self.db, result, self.out_dir,
                                     skip=self.stored.get(result.config, set()))
        with self.lock:
            self.stored.setdefault(result.config, set()).update(stored)

    def already_stored(self, config: str) -> set[str]:
        with self.lock:
            return set(self.stored.get(config, set()))

    def config_end(self, name, out):
        with self.lock:
            live = self.live.pop(name, None)
        if live is not None:
            live.close()
        if self.turnstile:
            self.turnstile.leave(name)
        self.progress.config_end(name, out)


@dataclass
class SweepResult:
    name: str
    outcomes: list[ConfigResult]
    skipped: list[sweepfile.Skipped]
    up_to_date: list[str]
    interrupted: bool


def _jobs(sweep: Sweep, todo, order, out_dir: str, seed: int, gpus_of=None,
          used_ports: set[int] | None = None) -> dict[str, ConfigJob]:
    pos = {e: i for i, e in enumerate(order)}
    root = Path(out_dir) / sweep.name
    jobs = {}
    for c, keys in todo:
        ks = sorted(keys, key=lambda k: pos[(c.name, k)])
        jobs[c.name] = ConfigJob(sweep, c, tuple(ks), str(root / c.name), sweep.port or 0,
                                 None, tuple(pos[(c.name, k)] for k in ks), seed)
    return jobs


def _with_port(job: ConfigJob, used: set[int], gpus=None) -> ConfigJob:
    port = job.sweep.port or launch.free_port(avoid=used)
    used.add(port)
    return ConfigJob(job.sweep, job.config, job.runs, job.run_dir, port, gpus, job.order,
                     job.order_seed)


def shares_host(sweep: Sweep, gpus: tuple[int, ...] | None) -> bool:
    """Whether the configs' servers may be alive at once without --gpus. Only the built-in
    engine: SGLang sizes its KV cache from the GPU memory that is free when it starts
    (mem_fraction_static of the whole card must still be free), so a second SGLang server on the
    same GPU fails with "Not enough memory" or, started first, starves the next (measured on the
    H200, benchmarks/results/real_sglang_h200.md). SGLang configs without --gpus therefore run one
    at a time."""
    return gpus is None and sweep.port is None and sweep.engine == "builtin"


def run_sweep(sweep: Sweep, db: str, out_dir: str, gpus: tuple[int, ...] | None = None,
              force: bool = False, stop: threading.Event | None = None, progress=None,
              executor: str = "local", ray_address: str | None = None,
              attach: dict[str, tuple[str, str | None]] | None = None,
              slurm_folder: str | None = None) -> SweepResult:
    """Measure every config with runs left to do (see the module docstring for executors),
    then round after round what the rate search and adaptive repeats ask for next, decided
    from the stored runs (`rounds`), each round run like the first.
    `attach`: {config name: (endpoint URL, log path or None)}; other configs are not measured.
    `slurm_folder`: --executor slurm's submitit folder (default `out_dir/slurm`)."""
    stop = stop or threading.Event()
    progress = progress or Progress()
    writer.store_targets(db, sweep.name, sweep.traffic)   # the SLO the views judge runs by
    result = _run_round(sweep, db, out_dir, gpus, force, stop, progress, executor, ray_address,
                        attach, slurm_folder, plan(sweep, db, force))
    while not result.interrupted:
        todo = [(c, k) for c, k in rounds.next_round(sweep, db)
                if attach is None or c.name in attach]
        if not todo:
            break
        why = [w for w, on in (("the rate search's next rate", sweep.traffic.rate_search),
                               ("repeats whose speedup interval is still too wide",
                                sweep.traffic.max_repeats)) if on]
        progress.note("round", f"{sum(len(k) for _, k in todo)} more runs: {' or '.join(why)}")
        more = _run_round(sweep, db, out_dir, gpus, False, stop, progress, executor,
                          ray_address, attach, slurm_folder, todo)
        result.outcomes += more.outcomes
        result.interrupted = more.interrupted
    return result


def _run_round(sweep: Sweep, db: str, out_dir: str, gpus, force: bool, stop: threading.Event,
               progress, executor: str, ray_address, attach, slurm_folder, todo
               ) -> SweepResult:
    """One round of `run_sweep`: measure `todo` [(config, runs)] with the chosen executor."""
    # Servers a dead specwatch left running (its watchdog killed too) hold ports and GPUs.
    reaped = procs.reap_stale(Path(out_dir) / sweep.name)
    if reaped:
        progress.note("reaped", f"stopped {len(reaped)} process(es) a previous run left behind: "
                      f"{reaped}")
    if attach is not None:
        todo = [(c, k) for c, k in todo if c.name in attach]
    todo_names = {c.name for c, _ in todo}
    up_to_date = [c.name for c in sweep.configs if c.name not in todo_names
                  and (attach is None or c.name in attach)]
    seed = sweep.workload.seed
    order = interleave(sweep, todo, seed)
    jobs = _jobs(sweep, todo, order, out_dir, seed)
    outcomes: list[ConfigResult] = []
    progress.sweep_start(sweep.name, sum(len(k) for _, k in todo), len(todo), up_to_date)
    for job in jobs.values():
        writer.mark_running(db, [base_row(job, k, i) for i, k in enumerate(job.runs)])

    drv = Driver(db, out_dir, progress)

    def finished(res: ConfigResult) -> None:
        # what the local executors stored run by run is not stored again
        t0 = time.monotonic()
        writer.store_result(db, res, out_dir, skip=drv.already_stored(res.config))
        res.store_s = time.monotonic() - t0
        outcomes.append(res)

    used: set[int] = set()
    if executor in ("ray", "slurm"):
        from specwatch.run import executors, ray_executor, slurm_executor
        try:
            if executor == "ray":
                ray_executor.run(list(jobs.values()), db, out_dir, ray_address, stop, progress,
                                 finished)
            else:
                slurm_executor.run(list(jobs.values()), db, out_dir, slurm_folder, stop,
                                   progress, finished)
        except executors.ExecutorUnavailable as exc:
            # nothing ran: the rows marked running go back to what resume measures again
            writer.store_rows(db, [{**base_row(j, k, i), "status": "failed", "failure_reason":
                                    str(exc)} for j in jobs.values()
                                   for i, k in enumerate(j.runs)])
            raise SweepError(str(exc)) from None
    elif attach is not None:
        for name, job in jobs.items():
            if stop.is_set():
                break
            endpoint, log = attach[name]
            job = ConfigJob(job.sweep, job.config, job.runs, job.run_dir, 0, None, job.order,
                            job.order_seed, endpoint, log)
            finished(measure_config(job, stop, drv))
    elif shares_host(sweep, gpus):
        drv.turnstile = Turnstile(order, stop)
        with ThreadPoolExecutor(max_workers=GROUP_SIZE, thread_name_prefix="config") as pool:
            futs = [pool.submit(measure_config, _with_port(j, used), stop, drv)
                    for j in jobs.values()]
            for fut in futs:
                finished(procs.wait_result(fut))
    elif gpus is None or sweep.port is not None:
        for name, job in jobs.items():
            if stop.is_set():
                break
            need = launch.gpus_needed(job.config)
            if gpus is not None and need > len(gpus):
                outcomes.append(_unplaceable(db, job, len(gpus)))
                continue
            finished(measure_config(_with_port(job, used, gpus[:need] if gpus else None), stop,
                                    drv))
    else:
        _run_on_gpus(list(jobs.values()), gpus, db, stop, drv, finished, outcomes)
    if stop.is_set():
        # Configs a stop reached before they started: their rows were marked running up front.
        seen = {o.config for o in outcomes}
        never = [job for name, job in jobs.items() if name not in seen]
        if never:
            writer.store_rows(db, [{**base_row(job, k, i), "status": "interrupted",
                                    "failure_reason": "interrupted before this config started"}
                                   for job in never for i, k in enumerate(job.runs)])
    progress.sweep_end()
    return SweepResult(sweep.name, outcomes, list(sweep.skipped), up_to_date, stop.is_set())


def _run_on_gpus(jobs: list[ConfigJob], gpus: tuple[int, ...], db: str, stop, drv: Driver,
                 finished, outcomes) -> None:
    """Configs in parallel on disjoint GPU sets; each waits for enough free GPUs."""
    free = list(gpus)
    used: set[int] = set()
    pending = []
    for job in jobs:
        if launch.gpus_needed(job.config) > len(gpus):
            outcomes.append(_unplaceable(db, job, len(gpus)))
        else:
            pending.append(job)
    running: dict[Future, tuple[tuple[int, ...], int]] = {}
    with ThreadPoolExecutor(max_workers=len(gpus), thread_name_prefix="config") as pool:
        while (pending and not stop.is_set()) or running:
            for job in list(pending):
                need = launch.gpus_needed(job.config)
                if need <= len(free) and not stop.is_set():
                    gpu_set = tuple(free[:need])
                    del free[:need]
                    j = _with_port(job, used, gpu_set)
                    running[pool.submit(measure_config, j, stop, drv)] = (gpu_set, j.port)
                    pending.remove(job)
            if not running:
                break
            done, _ = wait(list(running), timeout=0.5, return_when=FIRST_COMPLETED)
            for fut in done:
                gpu_set, port = running.pop(fut)
                free.extend(gpu_set)
                free.sort(key=list(gpus).index)
                used.discard(port)
                finished(fut.result())


def _unplaceable(db: str, job: ConfigJob, n: int) -> ConfigResult:
    c = job.config
    need = launch.gpus_needed(c)
    reason = (f"{c.name} needs {need} GPUs (tp_size={c.tp_size}) but --gpus lists {n}; give more "
              "GPUs or drop this config")
    rows = [{**base_row(job, k, i), "status": "failed", "failure_reason": reason}
            for i, k in enumerate(job.runs)]
    writer.store_rows(db, rows)
    return ConfigResult(c.name, job.sweep.name, "failed", reason, runs=[
        RunResult(r["run_id"], r["concurrency"], r["repeat_idx"], "failed", reason, row=r,
                  request_rate=r["request_rate"]) for r in rows])


# ------------------------------------------------------------------------------- entry

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run_sweep_main(sweep_file: str | Sweep, db: str, out_dir: str, gpus: str | None = None,
                   force: bool = False, executor: str = "local", ray_address: str | None = None,
                   attach: dict | None = None, progress=None, slurm_folder: str | None = None
                   ) -> tuple[Sweep, SweepResult]:
    """`specwatch run-sweep` minus the printing: load the sweep file (or take a Sweep built in
    code: `recommend --verify`), install the stop signals (SIGINT, SIGTERM, SIGHUP all stop
    cleanly; a second one aborts), run."""
    try:
        sweep = sweep_file if isinstance(sweep_file, Sweep) else sweepfile.load(sweep_file)
    except sweepfile.SweepFileError as exc:
        raise SweepError(str(exc)) from None
    if attach is not None:
        attach = {_attach_name(sweep, k): v for k, v in attach.items()}
    gpu_ids = parse_gpus(gpus)
    progress = progress or Progress()
    for s in sweep.skipped:
        progress.note("skipped", f"{s.description}: {s.reason}")
    # fixture: models are built first (the checks and the plan read their config.json)
    try:
        for c in sweep.configs:
            launch.prepare_models(c)
    except launch.LaunchFailed as exc:
        raise SweepError(f"{sweep.path}: {exc}") from None
    # engine = "sglang" / "vllm": the engine's own parser (of the launch interpreter) checks every
    # config's flags (vLLM: and --speculative-config against its SpeculativeConfig) before any
    # server starts; a rejected flag stops the sweep with its file:line.
    for check in (sglang_check, vllm_check):
        try:
            check.check_sweep(sweep)
        except sglang_check.FlagError as exc:
            raise SweepError(str(exc)) from None
        except sglang_check.CheckUnavailable as exc:
            progress.note("flags", f"server flags not checked before launch: {exc}")
    stop = threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        def on_signal(signum, frame):
            if stop.is_set():
                raise KeyboardInterrupt
            stop.set()
            progress.note(signal.Signals(signum).name, "stopping: no new requests; servers are "
                          "stopped cleanly and what was measured is kept (again to abort at once)")
        for sig in STOP_SIGNALS:
            previous[sig] = signal.signal(sig, on_signal)
    try:
        result = run_sweep(sweep, db, out_dir, gpu_ids, force, stop, progress, executor,
                           ray_address, attach, slurm_folder)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return sweep, result


def _attach_name(sweep: Sweep, key: str) -> str:
    """--endpoint names the sweep's one speculative config, --baseline-endpoint its baseline."""
    names = [c.name for c in sweep.configs]
    if key == "baseline":
        base = [c.name for c in sweep.configs if c.is_baseline]
        if len(base) != 1:
            raise SweepError(f"--baseline-endpoint: the sweep has {len(base)} baselines "
                             f"({', '.join(base)}); attach mode measures one")
        return base[0]
    if key == "spec":
        spec = [c.name for c in sweep.configs if not c.is_baseline]
        if len(spec) != 1:
            raise SweepError(f"--endpoint: the sweep {sweep.name} has {len(spec)} speculative "
                             f"configs ({', '.join(spec)}); attach mode measures one server, so "
                             "keep exactly one [[config]] (or one grid point) in the sweep file")
        return spec[0]
    if key not in names:
        raise SweepError(f"attach: no config named {key!r} in the sweep ({', '.join(names)})")
    return key
