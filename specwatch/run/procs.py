"""Processes specwatch starts never outlive it: /proc readers, a watchdog per child, pid files.

- `/proc` readers: `proc_stat`, `descendants`, `alive`, `group_alive` (Linux).
- `Guard`: a watchdog process (`_watchdog.py`) tied to specwatch by a pipe. When specwatch dies,
  by any signal including SIGKILL, the kernel closes the pipe and the watchdog stops the child's
  process group (SIGTERM, then SIGKILL after a grace period). Or it runs a command then (`run_at_exit`: the
  `scancel` of a Slurm array). A pipe rather than
  PR_SET_PDEATHSIG: the parent-death signal fires when the *thread* that forked exits, and sweeps
  start servers from worker threads; it also reaches only the direct child.
- Pid files: `write_pidfile` records a live child (pid, process group, start time, command line,
  and specwatch's own pid and start time); `reap_stale(dir)` kills the children of dead specwatch
  processes found under `dir` at the next start, after checking that each pid is still the
  process that was recorded (same boot, start time and command line).
- `listener_owned(port, pid)`: is the TCP listener on `port` a socket of that process, its group
  or its descendants? (/proc/net/tcp{,6} inode -> /proc/PID/fd.)
- `wait_result(fut)`: a future's result, waited for in short slices, so that a stop signal is
  handled at once even when the kernel delivers it to another thread (Python runs handlers only
  in the main thread, when it runs bytecode: a main thread blocked on one long wait runs a
  SIGTERM's handler only when that wait ends; a sweep once finished a 17 s run after SIGTERM).

Not here: what a server is, its readiness or ports (see `launch`).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PIDFILE_SUFFIX = ".specwatch-pid"
WAIT_SLICE_S = 0.2
WATCHDOG = Path(__file__).resolve().parent / "_watchdog.py"


# ------------------------------------------------------------------------------- main-thread waits

def wait_result(fut):
    """`fut.result()`, waking every WAIT_SLICE_S so the main thread runs pending signal handlers."""
    while True:
        try:
            return fut.result(timeout=WAIT_SLICE_S)
        except TimeoutError:  # concurrent.futures.TimeoutError is TimeoutError (3.11)
            continue


# ------------------------------------------------------------------------------- /proc

def proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state first), or None if it is gone.
    Index 1 is the ppid, 2 the pgid, 19 the start time in clock ticks since boot."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()


def _pids() -> list[int]:
    try:
        return [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []


def start_time(pid: int) -> str | None:
    rest = proc_stat(pid)
    return rest[19] if rest is not None and rest[0] != "Z" else None


def cmdline(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]


def descendants(root: int) -> dict[int, str]:
    """{pid: start time} of every live descendant of `root`."""
    children: dict[int, list[int]] = {}
    start: dict[int, str] = {}
    for pid in _pids():
        rest = proc_stat(pid)
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


def alive(pid: int, started: str | None = None) -> bool:
    """Is this pid still the same live (non-zombie) process?"""
    rest = proc_stat(pid)
    return rest is not None and rest[0] != "Z" and (started is None or rest[19] == started)


def group_alive(pgid: int) -> list[int]:
    """Live (non-zombie) members of a process group."""
    out = []
    for pid in _pids():
        rest = proc_stat(pid)
        if rest is not None and rest[0] != "Z" and int(rest[2]) == pgid:
            out.append(pid)
    return out


def signal_pid(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


# ------------------------------------------------------------------------------- watchdog

class Guard:
    """A watchdog that stops one child's process group if specwatch dies. Create it *before*
    starting the child, `watch(proc)` right after, `release()` once the child is stopped."""

    def __init__(self, grace_s: float = 5.0, log=None):
        self.grace_s = grace_s
        r, self._w = os.pipe()          # both ends non-inheritable: no other child holds them
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", str(WATCHDOG)], stdin=r, stdout=subprocess.DEVNULL,
                stderr=log if log is not None else subprocess.DEVNULL, start_new_session=True)
        except BaseException:
            os.close(self._w)
            raise
        finally:
            os.close(r)

    def watch(self, proc: subprocess.Popen) -> None:
        st = start_time(proc.pid)
        info = {"pid": proc.pid, "pgid": proc.pid, "start": st or "", "grace_s": self.grace_s}
        try:
            os.write(self._w, (json.dumps(info) + "\n").encode())
        except OSError:
            pass

    def run_at_exit(self, argv: list[str]) -> None:
        """Instead of a child: run `argv` when the pipe closes (specwatch died, or `release`)."""
        try:
            os.write(self._w, (json.dumps({"argv": argv}) + "\n").encode())
        except OSError:
            pass

    def release(self, timeout_s: float = 5.0) -> None:
        """Close the pipe (the watchdog finds nothing left and exits) and reap it."""
        if self._w is not None:
            os.close(self._w)
            self._w = None
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ------------------------------------------------------------------------------- pid files

def write_pidfile(path: str | Path, pid: int, **extra) -> Path:
    """Record a live child of this process: pid, its group, start time, command line, owner."""
    path = Path(path)
    info = {"pid": pid, "pgid": pid, "start": start_time(pid), "cmdline": cmdline(pid),
            "boot_id": _boot_id(), "owner_pid": os.getpid(), "owner_start": start_time(os.getpid()),
            **extra}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(info))
    os.replace(tmp, path)
    return path


def remove_pidfile(path: str | Path | None) -> None:
    if path is not None:
        try:
            Path(path).unlink()
        except OSError:
            pass


def _stale_targets(info: dict) -> list[int]:
    """The live processes of a recorded child that are still that child's, or []."""
    if info.get("boot_id") and info["boot_id"] != _boot_id():
        return []                                  # recorded before a reboot
    if alive(int(info["owner_pid"]), info.get("owner_start")):
        return []                                  # its specwatch still runs: not stale
    pid, pgid = int(info["pid"]), int(info["pgid"])
    # pid + start time (clock ticks since this boot) name one process; the command line is the
    # check only where no start time was recorded (a server may retitle itself).
    if not info.get("start") and cmdline(pid) not in (None, info.get("cmdline")):
        return []
    if start_time(pid) is not None and not alive(pid, info.get("start") or None):
        return []                                  # the pid now names another process
    # The group id cannot be reused while members exist; a member started before the leader
    # cannot be one of its children.
    started = int(info.get("start") or 0)
    return [p for p in group_alive(pgid) if int(start_time(p) or 0) >= started]


def reap_stale(out_dir: str | Path, grace_s: float = 5.0) -> list[int]:
    """Kill the children that dead specwatch processes left under `out_dir` (pid files), then
    remove their pid files. Returns the pids killed. A pid file whose owner still runs is kept."""
    root = Path(out_dir)
    if not root.is_dir():
        return []
    killed: list[int] = []
    for f in sorted(root.rglob("*" + PIDFILE_SUFFIX)):
        try:
            info = json.loads(f.read_text())
            int(info["pid"]), int(info["pgid"]), int(info["owner_pid"])
        except (OSError, ValueError, KeyError, TypeError):
            remove_pidfile(f)                      # unreadable: nothing can be verified
            continue
        if alive(int(info["owner_pid"]), info.get("owner_start")):
            continue
        targets = _stale_targets(info)
        killed += targets
        starts = {p: start_time(p) for p in targets}
        for p in targets:
            signal_pid(p, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while targets and time.monotonic() < deadline:
            time.sleep(0.1)
            targets = [p for p in targets if alive(p, starts[p])]
        for p in targets:
            signal_pid(p, signal.SIGKILL)
        remove_pidfile(f)
    return killed


# ------------------------------------------------------------------------------- listeners

def _listen_inodes(port: int) -> set[str]:
    """Socket inodes of TCP listeners on `port` (any address, IPv4 and IPv6)."""
    out = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as fh:
                next(fh, None)
                for line in fh:
                    f = line.split()
                    if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                        out.add(f[9])
        except OSError:
            continue
    return out


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(link[8:-1])
    return out


def listener_owned(port: int, pid: int) -> bool:
    """True when a TCP listener on `port` belongs to `pid`, its process group (pgid = pid) or a
    descendant; False when nothing listens or the listener is another process's."""
    inodes = _listen_inodes(port)
    if not inodes:
        return False
    ours = {pid} | set(group_alive(pid)) | set(descendants(pid))
    return any(_socket_inodes(p) & inodes for p in ours)
