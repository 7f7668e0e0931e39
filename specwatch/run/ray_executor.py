"""`run-sweep --executor ray`: one Ray task per config (ARCHITECTURE decision 7).

Each task runs `measure.measure_config` on its node, against 127.0.0.1 there, and returns the
`ConfigResult` with the server log's bytes; the driver (this process) is the only DuckDB writer
(`writer.store_result` writes the bytes to `out_dir/<sweep>/<config>/<node>-<log>` and ingests
that, so `sources.path` names the node). Nothing home-made: Ray schedules, retries and cancels.
The driver loop and the node-side measuring are `executors`' (shared with `slurm_executor`);
this module is the Ray backend: resources, Ray's errors, cancel.

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
import re

from specwatch.run import executors, launch
from specwatch.run.measure import ConfigJob, ConfigResult

MAX_RETRIES = 2
CPU_PER_CONFIG = 1


class RayUnavailable(executors.ExecutorUnavailable):
    pass


def _task(job: ConfigJob) -> ConfigResult:
    """Runs on a node: Ray's GPU ids, then `executors.measure_on_node`, plus Ray's evidence."""
    import ray

    ctx = ray.get_runtime_context()
    gpus = None
    if job.gpus is not None or ctx.get_accelerator_ids().get("GPU"):
        gpus = tuple(int(g) for g in ctx.get_accelerator_ids().get("GPU", []))
    res = executors.measure_on_node(job, gpus)
    res.ray_node_id = ctx.get_node_id()
    try:
        res.ray_retries = ray._private.worker.global_worker.core_worker \
            .get_current_task_attempt_number()
    except Exception:          # private API: the count is optional evidence
        res.ray_retries = None
    return res


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


class RayBackend:
    """`executors.drive`'s backend: one Ray task per config, ObjectRefs as handles."""

    cancel_grace_s = None       # ray.cancel raises KeyboardInterrupt in the task: it returns

    def __init__(self, ray):
        self.ray = ray
        self.has_gpus = ray.cluster_resources().get("GPU", 0) > 0
        self.remote = ray.remote(max_retries=MAX_RETRIES, retry_exceptions=False)(_task)

    def submit(self, jobs: list[ConfigJob]) -> list:

        refs = []
        for job in jobs:
            opts = ({"num_gpus": launch.gpus_needed(job.config), "num_cpus": 0} if self.has_gpus
                    else {"num_cpus": CPU_PER_CONFIG})
            # The task picks its own port and gets its GPUs from Ray.
            ship = dataclasses.replace(job, gpus=() if self.has_gpus else None)
            refs.append(self.remote.options(**opts, name=f"specwatch:{job.config.name}")
                        .remote(ship))
        return refs

    def ready(self, refs: list, timeout_s: float) -> list:
        return self.ray.wait(refs, num_returns=1, timeout=timeout_s)[0]

    def collect(self, ref, job: ConfigJob, cancelled: bool) -> ConfigResult:
        ray = self.ray
        try:
            return ray.get(ref)
        except ray.exceptions.TaskCancelledError:
            return executors.failed_result(job, "interrupted", "interrupted (Ctrl-C or SIGTERM): "
                                           "the Ray task was cancelled")
        except ray.exceptions.RayError as exc:
            return executors.failed_result(job, "interrupted" if cancelled else "failed",
                                           task_failure(exc))

    def cancel(self, refs: list) -> None:
        for ref in refs:
            self.ray.cancel(ref)


def task_failure(exc: BaseException) -> str:
    """A failed task's reason. An exception the task raised (RayTaskError, never retried) is named
    with the innermost frame of its remote traceback: Ray's first line names only the task
    ('ray::specwatch:baseline() (pid=..., ip=...)'). Else Ray's own error (a node or worker lost
    after the retries)."""
    lines = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip().splitlines()
    first = lines[0] if lines else ""
    cause = getattr(exc, "cause", None)
    if cause is None:
        return f"Ray task failed after {MAX_RETRIES} retries: {type(exc).__name__}: {first}"
    frames = [ln.strip() for ln in lines if ln.strip().startswith("File ")]
    return (f"Ray task raised {type(cause).__name__}: {cause}"
            + (f" ({frames[-1]})" if frames else "") + f"; {first}")


def run(jobs: list[ConfigJob], db: str, out_dir: str, address: str | None, stop, progress,
        finished) -> None:
    """Submit one task per config and store each result as it arrives."""
    executors.drive(RayBackend(connect(address)), jobs, stop, progress, finished)
