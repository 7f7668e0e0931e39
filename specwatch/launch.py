"""Start one server config and stop it cleanly: command line, environment, process group, readiness.

`command(...)` builds the argv for the built-in engine or SGLang, `environment(...)` the env (GPU
placement through CUDA_VISIBLE_DEVICES). `Server.start()` runs it in its own process group with
stdout and stderr appended to a log file; `wait_ready()` polls `GET /health` until 200 (SGLang
0.5.1+ answers 503 until its warm-up succeeded, LOG_FORMATS §7.2); `stop()` sends SIGTERM to the
whole group, SIGKILL after a grace period, then checks that no process of the group (or any
descendant seen while it ran) survives and that the port is free again.

Not here: reading the log (see `tail`/`ingest`), sending load (see `load`). It parses nothing.
"""
from __future__ import annotations

import errno
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specwatch.sweepfile import Config

HOST = "127.0.0.1"
BUILTIN_PREFIX = "builtin:"
# First SGLang version with --speculative-algorithm EAGLE3 (LOG_FORMATS §6.1).
EAGLE3_SINCE = (0, 4, 4, 2)          # 0.4.4.post2


class LaunchFailed(RuntimeError):
    """The server could not be started or never became ready; the message says why."""


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


def installed_sglang_version() -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version
        return version("sglang")
    except PackageNotFoundError:
        return None


def command(engine: str, config: Config, port: int, draft_path: str | None = None,
            launch_command: tuple[str, ...] | None = None,
            sglang_version: str | None = None) -> list[str]:
    """argv for one config. `config` is a sweepfile.Config; `draft_path` overrides its draft (an
    aux-layer-ids copy). Raises LaunchFailed for a flag the given SGLang version does not have."""
    if launch_command:
        argv = list(launch_command)
    elif engine == "builtin":
        argv = [sys.executable, "-m", "specwatch.engine"]
    else:
        argv = [sys.executable, "-m", "sglang.launch_server"]
    argv += ["--model-path", config.model]
    if config.speculative_algorithm:
        algo = config.speculative_algorithm
        v = parse_version(sglang_version) if engine == "sglang" else None
        if algo == "EAGLE3" and v is not None and v < EAGLE3_SINCE:
            raise LaunchFailed(f"--speculative-algorithm EAGLE3 needs SGLang >= 0.4.4.post2 "
                               f"(sweep says {sglang_version}); use EAGLE or upgrade")
        argv += ["--speculative-algorithm", algo,
                 "--speculative-draft-model-path", draft_path or config.draft_model,
                 "--speculative-num-steps", str(config.speculative_num_steps),
                 "--speculative-eagle-topk", str(config.speculative_eagle_topk),
                 "--speculative-num-draft-tokens", str(config.speculative_num_draft_tokens)]
    argv += ["--tp-size", str(config.tp_size), "--host", HOST, "--port", str(port)]
    argv += list(config.server_flags)
    return argv


def environment(base: dict[str, str], extra: tuple[tuple[str, str], ...] = (),
                gpus: tuple[int, ...] | None = None, engine: str = "sglang") -> dict[str, str]:
    """The server's env: ours + the sweep's `env` + CUDA_VISIBLE_DEVICES for its GPUs (if any).
    The built-in engine also gets this specwatch on PYTHONPATH (it runs as `-m specwatch.engine`,
    which must import the same code whatever the working directory)."""
    env = dict(base)
    env.update(dict(extra))
    env["PYTHONUNBUFFERED"] = "1"
    if engine == "builtin":
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(
            os.pathsep) if p and p != root])
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    return env


def _local_model_dir(path: str) -> Path | None:
    if path.startswith(BUILTIN_PREFIX):
        from specwatch.engine import models_dir
        d = models_dir() / path[len(BUILTIN_PREFIX):]
    else:
        d = Path(path).expanduser()
    return d if (d / "config.json").is_file() else None


def draft_aux_ids(c: Config) -> list[int] | None:
    """The aux layer ids the draft will use: the sweep's override, else its config.json's."""
    if c.aux_layer_ids is not None:
        return list(c.aux_layer_ids)
    if not c.draft_model:
        return None
    d = _local_model_dir(c.draft_model)
    if d is None:
        return None
    try:
        cfg = json.loads((d / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    ids = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    return ids if isinstance(ids, list) else None


def draft_with_aux(c: Config, run_dir: Path) -> str:
    """A copy of the draft dir whose config.json carries the configured aux layer ids (weights
    are symlinked). Raises LaunchFailed if the draft is not a local dir."""
    src = _local_model_dir(c.draft_model)
    if src is None:
        raise LaunchFailed(f"aux_layer_ids needs a local draft dir with a config.json; "
                                  f"{c.draft_model} is not one (download it first)")
    dst = run_dir / "draft"
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.name != "config.json":
            os.symlink(f.resolve(), dst / f.name)
    cfg = json.loads((src / "config.json").read_text())
    eagle = dict(cfg.get("eagle_config") or {})
    eagle["eagle_aux_hidden_state_layer_ids"] = list(c.aux_layer_ids)
    eagle.setdefault("use_aux_hidden_state", True)
    cfg["eagle_config"] = eagle
    (dst / "config.json").write_text(json.dumps(cfg, indent=1))
    return str(dst)


def port_free(port: int, host: str = HOST) -> bool:
    """Can a server listen on this port now? (SO_REUSEADDR: TIME_WAIT leftovers do not count.)"""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host, port))
        return True
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            return False
        raise
    finally:
        s.close()


def free_port(avoid: set[int] = frozenset(), host: str = HOST) -> int:
    """A port nobody listens on now (the kernel's pick), not in `avoid`."""
    for _ in range(100):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((host, 0))
        port = s.getsockname()[1]
        s.close()
        if port not in avoid:
            return port
    raise LaunchFailed("could not find a free port")


def log_tail(path: str | Path, max_lines: int = 40, max_bytes: int = 16384) -> str:
    """The last lines of a log file (for failure rows)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError:
        return ""
    lines = data.decode("utf-8", errors="replace").splitlines()
    if size > max_bytes and lines:
        lines = lines[1:]   # the first one is probably cut
    return "\n".join(lines[-max_lines:])


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state first), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()


def _descendants(root: int) -> dict[int, str]:
    """{pid: start time} of every live descendant of `root`, from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    start: dict[int, str] = {}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return {}
    for pid in pids:
        rest = _proc_stat(pid)
        if rest is None or rest[0] == "Z":
            continue
        children.setdefault(int(rest[1]), []).append(pid)
        start[pid] = rest[19]
    out, todo = {}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out[child] = start[child]
            todo.append(child)
    return out


def _alive(pid: int, started: str | None) -> bool:
    """Is this pid still the same live (non-zombie) process?"""
    rest = _proc_stat(pid)
    return rest is not None and rest[0] != "Z" and (started is None or rest[19] == started)


def _group_alive(pgid: int) -> list[int]:
    """Live (non-zombie) members of a process group."""
    out = []
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return out
    for pid in pids:
        rest = _proc_stat(pid)
        if rest is not None and rest[0] != "Z" and int(rest[2]) == pgid:
            out.append(pid)
    return out


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
    """One server process group. Use `start()`, `wait_ready()`, then always `stop()`."""

    def __init__(self, argv: list[str], env: dict[str, str], port: int, log_path: str | Path,
                 cwd: str | Path | None = None):
        self.argv, self.env, self.port = argv, env, port
        self.log_path = Path(log_path)
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None
        self._seen: dict[int, str] = {}      # descendants seen while running: {pid: start time}
        self.started_at: float | None = None

    def start(self) -> None:
        """Spawn the server in a new session (its own process group), appending to the log."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(("specwatch: launching " + " ".join(self.argv) + "\n").encode())
            log.flush()
            try:
                self.proc = subprocess.Popen(self.argv, env=self.env, cwd=self.cwd, stdout=log,
                                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             start_new_session=True)
            except OSError as exc:
                raise LaunchFailed(f"cannot run {self.argv[0]}: {exc.strerror}") from None
        self.started_at = time.monotonic()

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
            self._seen.update(_descendants(self.proc.pid))

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
                raise LaunchFailed(f"server exited with code {code} before it was ready")
            if stop is not None and stop.is_set():
                raise LaunchFailed("interrupted while waiting for the server to be ready")
            self.note_children()
            last = self.health(timeout_s=min(5.0, max(0.5, deadline - time.monotonic())))
            if last == 200:
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
            return StopReport(None, False, [], port_free(self.port), 0.0)
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
        free = port_free(self.port)
        end = time.monotonic() + 3.0
        while not free and time.monotonic() < end:
            time.sleep(0.1)
            free = port_free(self.port)
        return StopReport(code, killed, survivors, free, time.monotonic() - t0)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
