"""Start one server config and stop it cleanly: command line, environment, process group, readiness.

`command(...)` builds the argv for the built-in engine or SGLang, `environment(...)` the env (GPU
placement through CUDA_VISIBLE_DEVICES). `Server.start()` runs it in its own process group with
stdout and stderr appended to a log file; `wait_ready()` polls `GET /health` until 200 (SGLang
0.5.1+ answers 503 until its warm-up succeeded, LOG_FORMATS §7.2); `stop()` sends SIGTERM to the
whole group, SIGKILL after a grace period, then checks that no process of the group (or any
descendant seen while it ran) survives and that the port is free again. A watchdog (`procs.Guard`)
stops the group if specwatch itself dies, SIGKILL included, and a pid file next to the log lets
`reap_stale(out_dir)` kill what a dead specwatch left behind at the next start. A server that dies
before it is ready fails with its log's real cause (`failure_cause`), and one whose port is
answered by another process's listener fails too (`listener_owned`).

GPUs: `gpus_needed(config)`; ports: `free_port` picks below the kernel's ephemeral range and keeps
SGLang's side ports of every port it handed out free (`side_ports`).

Not here: reading the log (see `tail`/`ingest`), sending load (see `load`). It parses nothing.
"""
from __future__ import annotations

import http.client
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specwatch import modelinfo
from specwatch.engine import fixture
from specwatch.run import ports, procs, vllm_config
from specwatch.logs.failure import decode_lines, failure_cause, tail_lines

if TYPE_CHECKING:
    from specwatch.run.sweepfile import Config

HOST = "127.0.0.1"
# First SGLang version with --speculative-algorithm EAGLE3 (LOG_FORMATS §6.1).
EAGLE3_SINCE = (0, 4, 4, 2)          # 0.4.4.post2


class LaunchFailed(RuntimeError):
    """The server could not be started or never became ready; the message says why."""


def free_port(avoid: set[int] = frozenset(), host: str = HOST) -> int:
    """`ports.free_port`, failing with LaunchFailed."""
    try:
        return ports.free_port(avoid, host)
    except ports.NoFreePort as exc:
        raise LaunchFailed(str(exc)) from None


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """'0.4.4.post2' -> (0, 4, 4, 2); None or unparseable -> None."""
    if not text:
        return None
    parts = []
    for p in text.replace("post", "").replace("rc", ".").split("."):
        digits = "".join(ch for ch in p if ch.isdigit())
        if digits == "":
            break
        parts.append(int(digits))
    return tuple(parts) or None


def launch_python(launch_command: tuple[str, ...] | list[str] | None = None,
                  engine: str | None = None) -> str | None:
    """The interpreter a server runs under: launch_command's program when it is a Python,
    without a launch_command specwatch's own (vLLM: $SPECWATCH_VLLM_PYTHON when set, e.g. the
    side env of scripts/vllm_env.sh), None when the program is not a Python."""
    if not launch_command:
        return (os.environ.get("SPECWATCH_VLLM_PYTHON") or sys.executable) if engine == "vllm" \
            else sys.executable
    prog = launch_command[0]
    return prog if Path(prog).name.startswith("python") else None


def installed_sglang_version(launch_command: tuple[str, ...] | list[str] | None = None
                             ) -> str | None:
    """SGLang's version in the interpreter that will run the server (`launch_command`'s python,
    asked with importlib.metadata), not necessarily specwatch's own environment. None when it
    has no sglang, is not a Python, or does not answer within 30 s."""
    python = launch_python(launch_command)
    if python is None:
        return None
    code = ("import importlib.metadata as m\ntry: print(m.version('sglang'))\n"
            "except m.PackageNotFoundError: pass")
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=30,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = out.stdout.strip()
    return text.splitlines()[-1] if out.returncode == 0 and text else None


def dp_attention(config: Config) -> bool:
    return "--enable-dp-attention" in config.server_flags


def gpus_needed(config: Config) -> int:
    """GPUs one server of this config occupies. SGLang 0.5.23 data_parallel_controller.py:
    without DP attention each of the dp_size replicas is a TP group of tp_size * pp_size GPUs
    (`launch_dp_schedulers`: base_gpu_id += tp_size * pp_size per dp rank), so tp * pp * dp;
    with --enable-dp-attention the dp ranks live inside the one TP group
    (`launch_dp_attention_schedulers` launches a single group from GPU 0, and
    arg_groups/parallel_hook.py asserts tp_size % attn_dp_size == 0), so tp * pp."""
    tp = config.tp_size
    return tp * config.pp_size * (1 if dp_attention(config) else config.dp_size)


def command(engine: str, config: Config, port: int, draft_path: str | None = None,
            launch_command: tuple[str, ...] | None = None,
            sglang_version: str | None = None,
            gpus: tuple[int, ...] | None = None) -> list[str]:
    """argv for one config. `config` is a sweepfile.Config; `draft_path` overrides its draft (an
    aux-layer-ids copy); `gpus`: the GPU ids it was given (the built-in engine then runs with
    `--device cuda` unless the flags pick a device). Raises LaunchFailed for a flag the given
    SGLang version does not have. `fixture:` models are built on first use (engine.fixture)."""
    if engine == "vllm":
        return _vllm_command(config, port, draft_path, launch_command)
    if launch_command:
        argv = list(launch_command)
    elif engine == "builtin":
        argv = [sys.executable, "-m", "specwatch.engine"]
    else:
        argv = [sys.executable, "-m", "sglang.launch_server"]
    argv += ["--model-path", model_path(config.model)]
    if config.speculative_algorithm:
        algo = config.speculative_algorithm
        v = parse_version(sglang_version) if engine == "sglang" else None
        if algo == "EAGLE3" and v is not None and v < EAGLE3_SINCE:
            raise LaunchFailed(f"--speculative-algorithm EAGLE3 needs SGLang >= 0.4.4.post2 "
                               f"(sweep says {sglang_version}); use EAGLE or upgrade")
        argv += ["--speculative-algorithm", algo,
                 "--speculative-draft-model-path", draft_path or model_path(config.draft_model),
                 "--speculative-num-steps", str(config.speculative_num_steps),
                 "--speculative-eagle-topk", str(config.speculative_eagle_topk),
                 "--speculative-num-draft-tokens", str(config.speculative_num_draft_tokens)]
    argv += ["--tp-size", str(config.tp_size)]
    # Only when > 1: older SGLang versions predate --pp-size, and 1 is every version's default.
    if config.dp_size != 1:
        argv += ["--dp-size", str(config.dp_size)]
    if config.pp_size != 1:
        argv += ["--pp-size", str(config.pp_size)]
    argv += ["--host", HOST, "--port", str(port)]
    if engine == "builtin" and gpus and not any(
            f == "--device" or f.startswith("--device=") for f in config.server_flags):
        argv += ["--device", "cuda"]
    argv += list(config.server_flags)
    return argv


def model_path(path: str | None) -> str | None:
    """The path a server is given for `path`: a `fixture:` model built if needed (engine.fixture),
    anything else as written. Raises LaunchFailed for an unknown fixture or a failed build."""
    try:
        return fixture.resolve(path)
    except (fixture.FixtureError, OSError) as exc:
        raise LaunchFailed(str(exc)) from None


def prepare_models(c: Config) -> None:
    """Build the fixture models a config names, so that their config.json is readable (model
    facts, aux ids, resume identity) before anything else looks at them."""
    model_path(c.model)
    model_path(c.draft_model)


def _vllm_command(config: Config, port: int, draft_path: str | None,
                  launch_command: tuple[str, ...] | None) -> list[str]:
    """`python -m vllm.entrypoints.openai.api_server` (the same parser and server as `vllm
    serve`, and it needs no `vllm` distribution metadata) with --speculative-config JSON
    (vllm_config.spec_json) and vLLM's parallel flags."""
    argv = list(launch_command) if launch_command else [
        launch_python(None, "vllm"), "-m", "vllm.entrypoints.openai.api_server"]
    argv += ["--model", model_path(config.model)]
    spec = vllm_config.spec_json(config, draft_path or model_path(config.draft_model))
    if spec:
        argv += ["--speculative-config", spec]
    argv += ["--tensor-parallel-size", str(config.tp_size)]
    if config.dp_size != 1:
        argv += ["--data-parallel-size", str(config.dp_size)]
    if config.pp_size != 1:
        argv += ["--pipeline-parallel-size", str(config.pp_size)]
    return argv + ["--host", HOST, "--port", str(port), *config.server_flags]


def environment(base: dict[str, str], extra: tuple[tuple[str, str], ...] = (),
                gpus: tuple[int, ...] | None = None, engine: str = "sglang") -> dict[str, str]:
    """The server's env: ours + the sweep's `env` + CUDA_VISIBLE_DEVICES for its GPUs (if any).
    The built-in engine also gets this specwatch on PYTHONPATH (it runs as `-m specwatch.engine`,
    which must import the same code whatever the working directory)."""
    env = dict(base)
    env.update(dict(extra))
    env["PYTHONUNBUFFERED"] = "1"
    # millisecond log timestamps (SGLang 0.5.6+ and the built-in engine): runs last seconds, and
    # whole-second timestamps stack a run's decode windows on a few points (the sweep's env may
    # set SGLANG_LOG_MS = "0")
    env.setdefault("SGLANG_LOG_MS", "1")
    if engine == "builtin":
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(
            os.pathsep) if p and p != root])
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    return env


def draft_aux_ids(c: Config) -> list[int] | None:
    """The aux layer ids the draft will use: the sweep's override, else its config.json's."""
    if c.aux_layer_ids is not None:
        return list(c.aux_layer_ids)
    return modelinfo.aux_layer_ids(c.draft_model)


def draft_with_aux(c: Config, run_dir: Path) -> str:
    """A copy of the draft dir whose config.json carries the configured aux layer ids (weights
    are symlinked). Raises LaunchFailed if the draft is not a local dir."""
    src = modelinfo.local_dir(c.draft_model)
    if src is None:
        raise LaunchFailed(f"aux_layer_ids needs a local draft dir with a config.json; "
                                  f"{c.draft_model} is not one (download it first)")
    run_dir = Path(run_dir).resolve()
    dst = run_dir / "draft"
    if dst.is_symlink() or dst.is_file():
        dst.unlink()                # never follow a link out of the run directory
    elif dst.exists():
        if dst.resolve().parent != run_dir:
            raise LaunchFailed(f"{dst} is not inside the run directory {run_dir}; not deleting it")
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    try:
        modelinfo.write_with_aux_ids(src, dst, c.aux_layer_ids)
    except ValueError as exc:
        raise LaunchFailed(str(exc)) from None
    return str(dst)


def log_tail(path: str | Path, max_lines: int = 40, max_bytes: int = 16384) -> str:
    """The last lines of a log file (for failure rows)."""
    return "\n".join(tail_lines(path, max_bytes)[-max_lines:])


_alive = procs.alive
_group_alive = procs.group_alive
_signal = procs.signal_pid
_signal_group = procs.signal_group


def flag_value(argv: list[str], flag: str, default: int) -> int:
    """The last integer given for `flag` (`--flag N` or `--flag=N`) in argv, else `default`."""
    value = default
    for i, a in enumerate(argv):
        text = a.split("=", 1)[1] if a.startswith(flag + "=") else (
            argv[i + 1] if a == flag and i + 1 < len(argv) else None)
        if text is not None:
            try:
                value = int(text)
            except ValueError:
                pass
    return value


# The server's environment variables named in its launch line: SGLang and vLLM read these, and
# log nothing about some that change what is measured (SGLANG_SIMULATE_ACC_LEN: the parser tags
# the run `simulated` from this line). Values of names that look like secrets are not written.
LOGGED_ENV_PREFIXES = ("SGLANG_", "VLLM_")
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")


def logged_env(env: dict[str, str]) -> list[str]:
    """`NAME=value` for each SGLANG_*/VLLM_* variable of `env`, sorted by name (secret-looking
    names get `<hidden>`)."""
    return [f"{k}={'<hidden>' if any(w in k.upper() for w in _SECRET_WORDS) else v}"
            for k, v in sorted(env.items()) if k.startswith(LOGGED_ENV_PREFIXES)]


def launch_line(argv: list[str], env: dict[str, str] | None = None) -> str:
    """The command as one shell line: every argument quoted, control characters escaped, so a
    newline in a flag cannot start a forged line in the server log. With `env`, its
    SGLANG_*/VLLM_* variables come first as `env NAME=value ... ARGV` (quoted alike)."""
    shown = logged_env(env or {})
    if shown:
        argv = ["env", *shown, *argv]
    parts = []
    for a in argv:
        if a.isprintable():
            parts.append(shlex.quote(a))
        else:
            parts.append("$'" + a.encode("unicode_escape").decode().replace("'", "\\'") + "'")
    return " ".join(parts)


@dataclass
class StopReport:
    exit_code: int | None           # the server's own exit code (negative: killed by signal)
    killed: bool                    # SIGKILL was needed
    survivors: list[int]            # pids still alive after the group kill (then killed again)
    port_free: bool
    stop_s: float

    @property
    def clean(self) -> bool:
        return not self.survivors and self.port_free


class Server:
    """One server process group. Use `start()`, `wait_ready()`, then always `stop()`.
    `grace_s`: how long the watchdog waits between SIGTERM and SIGKILL if specwatch dies."""

    def __init__(self, argv: list[str], env: dict[str, str], port: int, log_path: str | Path,
                 cwd: str | Path | None = None, grace_s: float = 10.0, engine: str = "sglang"):
        self.argv, self.env, self.port, self.engine = argv, env, port, engine
        self.log_path = Path(log_path)
        self.cwd = cwd
        self.grace_s = grace_s
        self.proc: subprocess.Popen | None = None
        self.guard: procs.Guard | None = None
        self.pidfile = self.log_path.with_name(self.log_path.stem + procs.PIDFILE_SUFFIX)
        self._seen: dict[int, str] = {}      # descendants seen while running: {pid: start time}
        self.started_at: float | None = None

    def start(self) -> None:
        """Spawn the server in a new session (its own process group), appending to the log,
        under a watchdog, with a pid file next to the log."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(("specwatch: launching " + launch_line(self.argv, self.env) + "\n")
                      .encode())
            log.flush()
            self.guard = procs.Guard(self.grace_s, log)
            try:
                self.proc = subprocess.Popen(self.argv, env=self.env, cwd=self.cwd, stdout=log,
                                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             start_new_session=True)
            except OSError as exc:
                self.guard.release()
                self.guard = None
                raise LaunchFailed(f"cannot run {self.argv[0]}: {exc.strerror}") from None
            self.guard.watch(self.proc)
        procs.write_pidfile(self.pidfile, self.proc.pid, port=self.port, log=str(self.log_path))
        self.started_at = time.monotonic()

    def owns_port(self) -> bool:
        """Is the listener on our port this server's (its group's or a descendant's) socket?
        (True where /proc/net/tcp cannot be read: not Linux, nothing to check with.)"""
        if not os.path.exists("/proc/net/tcp"):
            return True
        return self.proc is not None and procs.listener_owned(self.port, self.proc.pid)

    def after_load(self, offset_from: int | None, offset_to: int | None, results) -> str | None:
        """Why a load's numbers are not this server's, or None: the port's listener is no longer
        ours, or the log has no decode window in the run's byte range although the longest
        request took at least --decode-log-interval decode steps (SGLang's default 40), so the
        server that answered did not log to our file. `results`: the load's RequestResults.
        vLLM logs by time (every VLLM_LOG_STATS_INTERVAL s), not by steps: only the port check."""
        if self.exited() is None and not self.owns_port():
            return (f"after the load, port {self.port} is answered by a listener that is not this "
                    f"server's process group (pid {self.pid}): the numbers are not ours")
        if self.engine == "vllm":
            return None
        steps = max(((r.spec_verify_ct if r.spec_verify_ct is not None else
                      (r.output_tokens or 0) - 1) for r in results if r.success), default=0)
        interval = flag_value(self.argv, "--decode-log-interval", 40)
        if steps >= interval and decode_lines(self.log_path, offset_from, offset_to) == 0:
            return (f"no decode window (`Decode batch` line) in {self.log_path} bytes "
                    f"[{offset_from}, {offset_to}) although the longest request took {steps} "
                    f"decode steps and --decode-log-interval is {interval}: the server that "
                    "answered did not log to this file")
        return None

    def check_owned(self) -> None:
        """Raise LaunchFailed when another process answers on our port."""
        if not self.owns_port():
            raise LaunchFailed(
                f"port {self.port} is answered by a listener that is not this server's process "
                f"group (pid {self.pid}); another server took the port, so its numbers would not "
                "be ours; stop it or let specwatch pick the port")

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def exited(self) -> int | None:
        return self.proc.poll() if self.proc else None

    def wait_exit(self, timeout_s: float) -> int | None:
        """The exit code if the process ends within `timeout_s`, else None."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def note_children(self) -> None:
        """Remember the current descendants, so a child that leaves the group is still checked."""
        if self.proc is not None and self.proc.poll() is None:
            self._seen.update(procs.descendants(self.proc.pid))

    def health(self, timeout_s: float = 5.0) -> int | None:
        """HTTP status of GET /health, or None if nothing answers."""
        conn = http.client.HTTPConnection(HOST, self.port, timeout=timeout_s)
        try:
            conn.request("GET", "/health")
            resp = conn.getresponse()
            resp.read()
            return resp.status
        except (OSError, http.client.HTTPException):
            return None
        finally:
            conn.close()

    def wait_ready(self, timeout_s: float, poll_s: float = 0.2, stop=None) -> float:
        """Block until /health answers 200; returns the seconds it took. Raises LaunchFailed if
        the process exits or the timeout passes (`stop`: a threading.Event that aborts)."""
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        last = None
        while True:
            code = self.exited()
            if code is not None:
                cause = failure_cause(self.log_path)
                where = f"server exited with code {code} before it was ready; log: {self.log_path}"
                raise LaunchFailed(f"{cause} ({where})" if cause else where)
            if stop is not None and stop.is_set():
                raise LaunchFailed("interrupted while waiting for the server to be ready")
            self.note_children()
            last = self.health(timeout_s=min(5.0, max(0.5, deadline - time.monotonic())))
            if last == 200:
                self.check_owned()
                return time.monotonic() - t0
            if time.monotonic() >= deadline:
                what = f"last /health answer: {last}" if last else "nothing answered on the port"
                raise LaunchFailed(f"server not ready after {timeout_s:.0f} s ({what}); raise "
                                   "startup_timeout_s if it is just slow")
            time.sleep(poll_s)

    def stop(self, grace_s: float = 10.0) -> StopReport:
        """SIGTERM the group, SIGKILL after `grace_s`, reap, check for survivors and the port."""
        t0 = time.monotonic()
        if self.proc is None:
            return StopReport(None, False, [], ports.port_free(self.port), 0.0)
        try:
            return self._stop(grace_s, t0)
        finally:
            procs.remove_pidfile(self.pidfile)
            if self.guard is not None:
                self.guard.release()
                self.guard = None

    def _stop(self, grace_s: float, t0: float) -> StopReport:
        self.note_children()
        pgid = self.proc.pid             # leader of its own session: pgid == pid
        killed = False
        _signal_group(pgid, signal.SIGTERM)
        for pid, started in self._seen.items():   # children that left the group
            if _alive(pid, started):
                _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None and not _group_alive(pgid) and not any(
                    _alive(p, s) for p, s in self._seen.items()):
                break
            time.sleep(0.05)
        else:
            killed = True
            _signal_group(pgid, signal.SIGKILL)
            for pid, started in self._seen.items():
                if _alive(pid, started):
                    _signal(pid, signal.SIGKILL)
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        # Survivors: whatever is still alive a moment after the kill (zombies do not count).
        survivors = []
        end = time.monotonic() + 2.0
        while True:
            survivors = sorted(set(_group_alive(pgid)) | {
                p for p, s in self._seen.items() if _alive(p, s)})
            if not survivors or time.monotonic() > end:
                break
            time.sleep(0.05)
        for pid in survivors:
            _signal(pid, signal.SIGKILL)
        free = ports.port_free(self.port)
        end = time.monotonic() + 3.0
        while not free and time.monotonic() < end:
            time.sleep(0.1)
            free = ports.port_free(self.port)
        return StopReport(code, killed, survivors, free, time.monotonic() - t0)
