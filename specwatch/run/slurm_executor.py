"""`run-sweep --executor slurm`: one Slurm array task per config, through `submitit`.

The user runs `specwatch run-sweep ... --executor slurm` on a login node; this process (the
driver, the only DuckDB writer) submits the sweep's configs as a job array with submitit and
stores each result as it comes back (the loop is `executors.drive`, shared with Ray). Each array
task runs `executors.measure_on_node` on its node: its server on the GPUs Slurm gave it, loaded
over 127.0.0.1 there, and returns the `ConfigResult` with the server log's bytes (through
submitit's result pickle in `--slurm-folder`, which must be on a filesystem the nodes share).

- Resources (`[slurm]`, see `slurm_settings`): an array task asks for `gpus_per_node` GPUs, by
  default its config's tp*pp*dp (`gpus_needed`); configs that ask for different counts go in
  different arrays. The server gets the first tp*pp*dp ids of the task's CUDA_VISIBLE_DEVICES.
  `cluster = "auto"` uses Slurm when `srun` is on PATH and otherwise runs the same tasks as local
  processes (submitit's LocalExecutor: no queue, every task at once, GPUs 0..N-1 each, none on a
  machine without GPUs unless `gpus_per_node` says so), which is what the tests run.
- Evidence: every run stores `slurm_job_id` (the array's job id), `slurm_array_task_id` (NULL for
  a plain job, and in local mode, where the job id is the task controller's pid) and the node
  (`node_hostname`). The log is stored as `<out>/<sweep>/<config>/<node>-<job>-<log>`.
- Failures: a server or load failure is a `failed` row returned by the task, as everywhere. A task
  that Slurm signals itself (SIGTERM: preempted or cancelled outside specwatch; SIGUSR2: the time
  limit is near, submitit's `--signal`) stops cleanly and returns; its unfinished runs become
  `failed` with the signal, Slurm's state and exit code (sacct). A task that returns nothing
  (node failure, out of memory, killed) is `failed` with Slurm's state and exit code. Resume
  measures failed runs again, as for any executor.
- Stop (Ctrl-C, SIGTERM, SIGHUP on the driver): `scancel` of every task still out (local mode:
  SIGTERM to the task's controller, which passes it on); a task stops its server and returns
  what it measured (`interrupted`). Tasks that have not returned `CANCEL_MARGIN_S` after the
  sweep's stop grace are killed (submitit's cancel) and stored `interrupted`. If the driver dies
  by SIGKILL, a watchdog (`procs.Guard`) scancels the arrays (local mode: stops each task).
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from specwatch.run import executors, launch, procs
from specwatch.run.measure import ConfigJob, ConfigResult
from specwatch.run.slurm_settings import SlurmSettings

CANCEL_MARGIN_S = 30.0      # Slurm's default KillWait: SIGTERM -> SIGKILL of a cancelled step
POLL_S = 2.0                # Slurm: how often result files (on a shared filesystem) are looked at
SIGNALS = {
    "SIGTERM": "Slurm sent SIGTERM (preempted, or cancelled outside specwatch)",
    "SIGINT": "the task got SIGINT",
    "SIGUSR2": "Slurm's warning before the time limit (SIGUSR2); raise [slurm] time_limit_min",
}


class SlurmUnavailable(executors.ExecutorUnavailable):
    pass


# ------------------------------------------------------------------------------- in the array task

def visible_gpus(need: int, text: str | None) -> tuple[int, ...] | None:
    """The server's GPU ids: the first `need` of CUDA_VISIBLE_DEVICES (`text`); None for a task
    without GPUs, or ids that are not integers (UUIDs: the server inherits the variable)."""
    if need == 0 or not text:
        return None
    try:
        ids = tuple(int(x) for x in text.split(","))
    except ValueError:
        return None
    return ids[:need]


def _task(job: ConfigJob, need: int) -> tuple[ConfigResult, str | None]:
    """One array task (submitit runs it in the main thread): measure the config; SIGTERM, SIGINT
    and submitit's time-limit signal stop it cleanly. Returns (result, the signal that stopped
    it or None)."""
    stop = threading.Event()
    got: list[str] = []

    def on_signal(signum, frame):
        got.append(signal.Signals(signum).name)
        stop.set()
    usr = getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"))
    for sig in (signal.SIGTERM, signal.SIGINT, usr):
        signal.signal(sig, on_signal)        # replaces submitit's requeue-on-USR2 / ignore-TERM
    gpus = visible_gpus(need, os.environ.get("CUDA_VISIBLE_DEVICES"))
    res = executors.measure_on_node(job, gpus, stop)
    return res, (got[0] if got else None)


# ------------------------------------------------------------------------------- in the driver

def machine_gpus() -> int:
    """NVIDIA GPUs on this machine (what Ray's autodetection reads on Linux)."""
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


def split_job_id(job_id: str) -> tuple[str, int | None]:
    """submitit's job id -> (Slurm job id, array task id): "123_4" -> ("123", 4); "123" (a plain
    job, or a local task's pid) -> ("123", None)."""
    main, sep, task = job_id.partition("_")
    return main, int(task) if sep and task.isdigit() else None


def sacct_state(job_id: str) -> tuple[str | None, str | None, str | None]:
    """(State, ExitCode, NodeList) of a Slurm job as sacct reports it, or Nones."""
    try:
        out = subprocess.run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o",
                              "State,ExitCode,NodeList"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None, None
    fields = (out.strip().splitlines() or [""])[-1].split("|")
    return tuple((fields + [None] * 3)[:3]) if fields != [""] else (None, None, None)


class SlurmBackend:
    """`executors.drive`'s backend: submitit jobs (one array per GPU count) as handles."""

    def __init__(self, folder: Path, settings: SlurmSettings, sweep, progress):
        try:
            import submitit
        except ImportError:
            raise SlurmUnavailable("--executor slurm needs submitit: pip install "
                                   "'specwatch[slurm]'") from None
        self.submitit = submitit
        self.settings, self.sweep, self.folder = settings, sweep, folder
        cluster = settings.cluster
        if cluster == "auto":
            cluster = "slurm" if shutil.which("srun") else "local"
            if cluster == "local":
                progress.note("slurm", "no srun on PATH: the array tasks run as local processes "
                              "(submitit's local executor); [slurm] cluster = \"slurm\" insists")
        elif cluster == "slurm" and not shutil.which("srun"):
            raise SlurmUnavailable("--executor slurm: [slurm] cluster = \"slurm\" but there is "
                                   "no srun on PATH; run run-sweep on a Slurm login node")
        self.local = cluster == "local"
        self.cluster = cluster
        # local mode on a machine without GPUs: ask for none, as Ray does on a CPU-only cluster
        # (submitit's local executor would hand out GPU ids that are not there)
        self.no_gpus = self.local and settings.gpus_per_node is None and not machine_gpus()
        if self.no_gpus:
            progress.note("slurm", "local mode on a machine without NVIDIA GPUs: the tasks ask "
                          "for none ([slurm] gpus_per_node overrides)")
        self.cancel_grace_s = sweep.stop_grace_s + CANCEL_MARGIN_S
        self.guards: list[procs.Guard] = []
        self.polled = 0.0

    def gpus_per_task(self, job: ConfigJob) -> int:
        g = self.settings.gpus_per_node
        if g is None:
            return 0 if self.no_gpus else launch.gpus_needed(job.config)
        return g

    def _executor(self, gpus: int):
        s = self.settings
        ex = self.submitit.AutoExecutor(folder=self.folder, cluster=self.cluster)
        ex.update_parameters(
            name=f"specwatch-{self.sweep.name}", timeout_min=s.time_limit_min, nodes=1,
            tasks_per_node=1, gpus_per_node=gpus or None, slurm_partition=s.partition,
            slurm_account=s.account, slurm_constraint=s.constraint,
            slurm_array_parallelism=s.array_parallelism,
            slurm_additional_parameters=dict(s.extra_sbatch) or None,
            slurm_setup=list(s.setup) or None)
        return ex

    def submit(self, jobs: list[ConfigJob]) -> list:
        by_gpus: dict[int, list[int]] = {}
        for i, job in enumerate(jobs):
            by_gpus.setdefault(self.gpus_per_task(job), []).append(i)
        handles: list = [None] * len(jobs)
        try:
            for gpus, idx in by_gpus.items():
                # the node picks its port and reads its GPUs; paths must not depend on its cwd
                ship = [dataclasses.replace(jobs[i], gpus=None, run_dir=str(
                    Path(jobs[i].run_dir).resolve())) for i in idx]
                need = [0 if gpus == 0 else launch.gpus_needed(jobs[i].config) for i in idx]
                for i, h in zip(idx, self._executor(gpus).map_array(_task, ship, need)):
                    handles[i] = h
                    if self.local:           # a SIGKILLed driver: its watchdog stops the task
                        guard = procs.Guard(grace_s=self.cancel_grace_s)
                        guard.watch(_Pid(int(h.job_id)))
                        self.guards.append(guard)
        except Exception as exc:
            self.cancel([h for h in handles if h is not None])
            first = (str(exc).strip().splitlines() or [""])[0]
            raise SlurmUnavailable(f"--executor slurm: submitting the job array failed: "
                                   f"{type(exc).__name__}: {first}") from None
        if handles and not self.local:   # a SIGKILLed driver: its watchdog scancels the arrays
            guard = procs.Guard()
            guard.run_at_exit(["scancel", *sorted({split_job_id(h.job_id)[0] for h in handles})])
            self.guards.append(guard)
        return handles

    def ready(self, handles: list, timeout_s: float) -> list:
        done = []
        if self.local or time.monotonic() - self.polled >= POLL_S:
            self.polled = time.monotonic()
            done = [h for h in handles if h.done()]
        if not done:
            time.sleep(timeout_s)
        return done

    def collect(self, h, job: ConfigJob, cancelled: bool) -> ConfigResult:
        slurm_id, task = split_job_id(h.job_id)
        state = exit_code = node = None
        sig = None
        # No result file and no sign one is coming (Slurm: COMPLETED, the file may lag on a
        # shared filesystem, submitit waits for it): do not wait.
        if not h.paths.result_pickle.exists() and (self.local or
                                                   not h.state.startswith("COMPLETED")):
            res, error = None, "the task returned no result"
        else:
            try:
                res, sig = h.result()
                error = None
            except Exception as exc:      # submitit: the task raised, or never wrote a result
                res, error = None, _last_line(str(exc))
        if not self.local and (res is None or sig):
            state, exit_code, node = sacct_state(h.job_id)
        where = (f"Slurm job {h.job_id}" if not self.local else f"submitit local job {h.job_id}")
        slurm = ", ".join(x for x in (f"state {state}" if state else None,
                                      f"exit code {exit_code}" if exit_code else None,
                                      f"node {node}" if node else None) if x)
        if res is None:
            status = "interrupted" if cancelled else "failed"
            reason = (f"{where} ended without a result ({slurm or 'no Slurm state'}): {error}; "
                      f"its logs: {h.paths.stderr}")
            if cancelled:
                reason = f"interrupted (Ctrl-C or SIGTERM): {reason}"
            res = executors.failed_result(job, status, reason)
            res.hostname = socket.gethostname() if self.local else (
                node if node and not node.startswith("None") else None)   # "None assigned"
        elif sig and not cancelled:        # Slurm stopped it (not this driver): failed, why
            reason = f"{where} on {res.hostname}: {SIGNALS.get(sig, sig)}" + (
                f" ({slurm})" if slurm else "")
            _fail_unfinished(res, reason)
        res.slurm_job_id, res.slurm_array_task_id = slurm_id, task
        return res

    def cancel(self, handles: list) -> None:
        if self.local:
            for h in handles:     # like scancel: SIGTERM, which the controller passes on to
                if not h.done():  # the task (not done: the pid is still our unreaped child)
                    os.kill(int(h.job_id), signal.SIGTERM)
        elif handles:
            subprocess.run(["scancel", *[h.job_id for h in handles]], capture_output=True,
                           timeout=60)

    def kill(self, handles: list) -> None:
        """Cancelled tasks that did not return: Slurm kills a cancelled step after KillWait (a
        second scancel changes nothing); a local task gets submitit's cancel (SIGINT, SIGKILL)."""
        if not self.local:
            self.cancel(handles)
            return
        for h in handles:
            h.cancel(check=False)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(h.done() for h in handles):
            time.sleep(0.1)

    def close(self) -> None:
        for g in self.guards:
            g.release()


@dataclasses.dataclass
class _Pid:
    pid: int            # what procs.Guard.watch reads of a process


def _last_line(text: str) -> str:
    lines = [x.strip() for x in text.strip().splitlines() if x.strip() and set(x.strip()) != {"-"}]
    return lines[-1] if lines else text.strip()


def _fail_unfinished(res: ConfigResult, reason: str) -> None:
    for r in res.runs:
        if r.status == "interrupted":
            r.status, r.failure_reason = "failed", reason
            r.row.update(status="failed", failure_reason=reason)
    if res.status == "interrupted" or res.status == "ok" and any(
            r.status == "failed" for r in res.runs):
        res.status, res.failure_reason = "failed", reason


def run(jobs: list[ConfigJob], db: str, out_dir: str, folder: str | None, stop, progress,
        finished) -> None:
    """Submit one array task per config and store each result as it arrives."""
    sweep = jobs[0].sweep if jobs else None
    if sweep is None:
        return
    settings = sweep.slurm or SlurmSettings()
    folder_path = Path(folder or Path(out_dir) / "slurm").resolve() / sweep.name
    backend = SlurmBackend(folder_path, settings, sweep, progress)
    placeable = []
    for job in jobs:
        need = launch.gpus_needed(job.config)
        if settings.gpus_per_node and need > settings.gpus_per_node:
            finished(executors.failed_result(job, "failed", (
                f"{job.config.name} needs {need} GPUs (tp*pp*dp) but [slurm] gpus_per_node = "
                f"{settings.gpus_per_node}; raise it or drop this config")))
        else:
            placeable.append(job)
    try:
        executors.drive(backend, placeable, stop, progress, finished)
    finally:
        backend.close()
