"""What the remote executors (Ray, Slurm) share: measure a config on a node, drive the jobs.

A remote executor runs `measure_config` for each config somewhere else (a Ray task, a Slurm array
task) and hands the driver (this process, the only DuckDB writer) one `ConfigResult` per config.
Everything but "how a job is submitted, waited for, collected and cancelled" is here, once:

- `measure_on_node(job, gpus, stop)` (runs on the node): a free port there, the GPU ids the
  scheduler gave it, `measure_config` in a worker thread while the main thread waits in short
  slices (so KeyboardInterrupt from `ray.cancel`, or the signal handlers a Slurm task installs, are
  handled at once), then the hostname and the server log's bytes for the driver to store.
- `drive(backend, jobs, stop, progress, finished)` (runs in the driver): submit every job, wait in
  `procs.WAIT_SLICE_S` slices so Ctrl-C/SIGTERM/SIGHUP are handled at once (see
  `procs.wait_result`), collect each result as it arrives and pass it to `finished` (which
  stores it), cancel every job still out when `stop` is set, and on any other way out (a second
  signal, an error) cancel them too, so nothing runs on after the driver.
- `failed_result(job, status, reason)`: the rows of a config whose job returned nothing (its
  node died, it was cancelled while queued, it was preempted before returning).

A backend (`ray_executor.RayBackend`, `slurm_executor.SlurmBackend`) has `submit(jobs) -> handles`
(one per job, in order), `ready(handles, timeout_s) -> finished handles`, `collect(handle, job,
cancelled) -> ConfigResult` (the job's result, or a failed/interrupted one with the scheduler's
reason; never raises for a job that failed), `cancel(handles)`, and `cancel_grace_s` (seconds to
wait for cancelled jobs to return what they measured before `kill(handles)` ends them; None:
wait for them).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import socket
import threading
import time

from specwatch.run import launch, procs
from specwatch.run.measure import ConfigJob, ConfigResult, RunResult, base_row, measure_config


class ExecutorUnavailable(RuntimeError):
    """The executor cannot start (library missing, no cluster); nothing was submitted."""


def measure_on_node(job: ConfigJob, gpus: tuple[int, ...] | None,
                    stop: threading.Event | None = None) -> ConfigResult:
    """Runs on the node: pick a port there, take the scheduler's GPU ids, measure, return rows +
    log bytes. Must be called in the node process's main thread."""
    job = dataclasses.replace(job, port=job.sweep.port or launch.free_port(), gpus=gpus)
    stop = stop or threading.Event()
    box: list = []

    def measure():
        try:
            box.append(measure_config(job, stop))
        except BaseException as exc:     # re-raised in the main thread, with its traceback
            box.append(exc)
    worker = threading.Thread(target=measure, name="measure", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(procs.WAIT_SLICE_S)
    except KeyboardInterrupt:        # ray.cancel, or SIGINT: stop cleanly, return what was measured
        stop.set()
        worker.join()
    if isinstance(box[0], BaseException):
        raise box[0]
    res = box[0]
    res.hostname = socket.gethostname()
    if res.log_path:
        try:
            with open(res.log_path, "rb") as fh:
                res.log_bytes = fh.read()
        except OSError:
            res.log_bytes = None
    return res


def failed_result(job: ConfigJob, status: str, reason: str) -> ConfigResult:
    """A config whose job returned no result: every run `status` (failed | interrupted)."""
    runs = []
    for i, k in enumerate(job.runs):
        row = {**base_row(job, k, i), "status": status, "failure_reason": reason,
               "ended_at": dt.datetime.now()}
        runs.append(RunResult(row["run_id"], k.concurrency, k.repeat_idx, status, reason,
                              row=row, request_rate=k.request_rate))
    return ConfigResult(job.config.name, job.sweep.name, status, reason, runs=runs)


def drive(backend, jobs: list[ConfigJob], stop: threading.Event, progress, finished) -> None:
    """Submit one job per config and hand each result to `finished` as it arrives (see the
    module docstring)."""
    handles = backend.submit(jobs)
    pending = dict(zip(handles, jobs))
    submitted = {h: (time.monotonic(), time.time()) for h in handles}
    for job in jobs:
        progress.config_start(job.config.name, len(job.runs))
    cancelled_at = None
    try:
        while pending:
            if stop.is_set() and cancelled_at is None:
                backend.cancel(list(pending))
                cancelled_at = time.monotonic()
            grace = backend.cancel_grace_s
            if cancelled_at is not None and grace is not None and \
                    time.monotonic() - cancelled_at > grace:
                backend.kill(list(pending))
                for h, job in list(pending.items()):
                    _deliver(job, failed_result(job, "interrupted", (
                        f"interrupted (Ctrl-C or SIGTERM): the job was cancelled and returned "
                        f"nothing within {grace:.0f} s")), submitted.pop(h), progress, finished)
                    del pending[h]
                break
            for h in backend.ready(list(pending), procs.WAIT_SLICE_S):
                job = pending.pop(h)
                res = backend.collect(h, job, cancelled_at is not None)
                _deliver(job, res, submitted.pop(h), progress, finished)
    finally:
        if pending:                  # a second signal or an error: nothing may run on
            backend.cancel(list(pending))
            if backend.cancel_grace_s is not None:
                backend.kill(list(pending))


def _deliver(job: ConfigJob, res: ConfigResult, submitted: tuple[float, float], progress,
             finished) -> None:
    # the scheduler's own cost for this config: queueing, start, shipping job and result
    t_mono, t_wall = submitted
    res.dispatch_s = max(0.0, time.monotonic() - t_mono - res.total_s)
    if res.started_wall is not None:     # clocks of different hosts: approximate
        res.dispatch_start_s = max(0.0, res.started_wall - t_wall)
    for r in res.runs:
        progress.run_end(job.config.name, r)
    progress.config_end(job.config.name, res)
    finished(res)
