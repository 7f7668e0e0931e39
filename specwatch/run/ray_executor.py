"""`run-sweep --executor ray`: one Ray task per config (ARCHITECTURE decision 7).

Each task runs `measure.measure_config` on its node, against 127.0.0.1 there, and returns the
`ConfigResult` with the server log's bytes; the driver (this process) is the only DuckDB writer
(`writer.store_result` writes the bytes to `out_dir/<sweep>/<config>/<node>-<log>` and ingests
that, so `sources.path` names the node). Nothing home-made: Ray schedules, retries and cancels.

- Resources: a config asks for `num_gpus = gpus_needed(config)` (tp*pp*dp) when the cluster has
  GPUs, and Ray's GPU ids become its CUDA_VISIBLE_DEVICES; on a CPU-only cluster it asks for
  `num_cpus = CPU_PER_CONFIG` instead, so CPU configs spread over nodes instead of piling onto
  one core. All configs of one TP size ask for the same resources, so the baseline of a TP size
  lands on the same kind of node as its spec configs (on a mixed cluster, pin node types with a
  custom resource in `RAY_RESOURCES`... see README "On a cluster").
- Failures: an application failure (bad flag, server died, requests failed) is a `failed` row
  returned by the task, never an exception, so Ray does not retry it. A lost node (worker or
  raylet died) is retried by Ray (`max_retries=MAX_RETRIES`) on another node; the attempt number
  is stored as `runs.ray_retries`. A config whose retries are used up is recorded `failed` with
  Ray's error. A result is stored once (the task that returned it), never twice.
- Stop (Ctrl-C, SIGTERM, SIGHUP on the driver): pending tasks are cancelled, running ones get
  KeyboardInterrupt (`ray.cancel`), whose `finally` stops their server (and the launch watchdog
  kills it if the worker itself dies); their runs are stored `interrupted`.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import socket
import threading
import time

from specwatch.run import launch
from specwatch.run.measure import ConfigJob, ConfigResult, RunResult, base_row, measure_config

MAX_RETRIES = 2
CPU_PER_CONFIG = 1


class RayUnavailable(RuntimeError):
    pass


def _task(job: ConfigJob) -> ConfigResult:
    """Runs on a node: pick a port there, take Ray's GPU ids, measure, return rows + log bytes."""
    import ray

    ctx = ray.get_runtime_context()
    gpus = None
    if job.gpus is not None or ctx.get_accelerator_ids().get("GPU"):
        gpus = tuple(int(g) for g in ctx.get_accelerator_ids().get("GPU", []))
    port = job.sweep.port or launch.free_port()
    job = dataclasses.replace(job, port=port, gpus=gpus)
    stop = threading.Event()
    box: list[ConfigResult] = []
    worker = threading.Thread(target=lambda: box.append(measure_config(job, stop)),
                              name="measure", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.2)
    except KeyboardInterrupt:        # ray.cancel: stop cleanly, return what was measured
        stop.set()
        worker.join()
    res = box[0]
    res.hostname = socket.gethostname()
    res.ray_node_id = ctx.get_node_id()
    try:
        res.ray_retries = ray._private.worker.global_worker.core_worker \
            .get_current_task_attempt_number()
    except Exception:          # private API: the count is optional evidence
        res.ray_retries = None
    if res.log_path:
        try:
            with open(res.log_path, "rb") as fh:
                res.log_bytes = fh.read()
        except OSError:
            res.log_bytes = None
    return res


def _failed(job: ConfigJob, status: str, reason: str) -> ConfigResult:
    runs = []
    for i, k in enumerate(job.runs):
        row = {**base_row(job, k, i), "status": status, "failure_reason": reason,
               "ended_at": dt.datetime.now()}
        runs.append(RunResult(row["run_id"], k.concurrency, k.repeat_idx, status, reason,
                              row=row))
    return ConfigResult(job.config.name, job.sweep.name, status, reason, runs=runs)


def connect(address: str | None):
    try:
        import ray
    except ImportError:
        raise RayUnavailable("--executor ray needs Ray: pip install 'specwatch[ray]'") from None
    if not ray.is_initialized():
        try:
            ray.init(address=address or "auto", log_to_driver=False,
                     logging_level="ERROR", configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise RayUnavailable(
                f"--executor ray: no Ray cluster at {address or 'auto'} ({exc}); start one "
                "(`ray start --head`) or pass --ray-address HOST:PORT") from None
    return ray


def run(jobs: list[ConfigJob], db: str, out_dir: str, address: str | None, stop: threading.Event,
        progress, finished) -> None:
    """Submit one task per config and store each result as it arrives."""
    from specwatch.run.sweep import gpus_needed

    ray = connect(address)
    has_gpus = ray.cluster_resources().get("GPU", 0) > 0
    remote = ray.remote(max_retries=MAX_RETRIES, retry_exceptions=False)(_task)
    refs, submitted = {}, {}
    for job in jobs:
        opts = ({"num_gpus": gpus_needed(job.config), "num_cpus": 0} if has_gpus
                else {"num_cpus": CPU_PER_CONFIG})
        # The task picks its own port and gets its GPUs from Ray.
        ship = dataclasses.replace(job, gpus=() if has_gpus else None)
        ref = remote.options(**opts, name=f"specwatch:{job.config.name}").remote(ship)
        refs[ref], submitted[ref] = job, (time.monotonic(), time.time())
        progress.config_start(job.config.name, len(job.runs))
    cancelled = False
    while refs:
        if stop.is_set() and not cancelled:
            for ref in refs:
                ray.cancel(ref)
            cancelled = True
        ready, _ = ray.wait(list(refs), num_returns=1, timeout=0.5)
        for ref in ready:
            job = refs.pop(ref)
            try:
                res = ray.get(ref)
            except ray.exceptions.TaskCancelledError:
                res = _failed(job, "interrupted", "interrupted (Ctrl-C or SIGTERM): the Ray "
                                                  "task was cancelled")
            except ray.exceptions.RayError as exc:
                first = str(exc).strip().splitlines()
                res = _failed(job, "interrupted" if cancelled else "failed",
                              f"Ray task failed after {MAX_RETRIES} retries: "
                              f"{type(exc).__name__}: {first[0] if first else ''}")
            # Ray's own cost for this config: scheduling, worker start, shipping job and result
            t_mono, t_wall = submitted.pop(ref)
            res.dispatch_s = max(0.0, time.monotonic() - t_mono - res.total_s)
            if res.started_wall is not None:     # clocks of different hosts: approximate
                res.dispatch_start_s = max(0.0, res.started_wall - t_wall)
            for r in res.runs:
                progress.run_end(job.config.name, r)
            progress.config_end(job.config.name, res)
            finished(res)
