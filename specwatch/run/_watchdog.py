"""Kill a server's process group when specwatch goes away, whatever signal ended it.

Run as `python -I _watchdog.py` (standard library only, no specwatch import) with stdin = the read
end of a pipe whose only write end specwatch holds. The first line is JSON
`{"pid": P, "pgid": G, "start": TICKS, "grace_s": S}`; then the watchdog waits for end-of-file,
which comes when specwatch closes the pipe (a clean stop) or when the kernel closes it because
specwatch died (SIGKILL included; unlike PR_SET_PDEATHSIG this does not depend on which thread
forked the server). On EOF it sends SIGTERM to the group and to every descendant it saw (they may
have left the group), SIGKILL after `grace_s`, then exits. SIGTERM to the watchdog does the same.
A first line `{"argv": [...]}` instead names a command to run on EOF (`scancel` of the Slurm jobs
a sweep submitted: they run on other machines, so there is no process here to kill).
"""
import json
import os
import select
import signal
import subprocess
import sys
import time

POLL_S = 1.0


def _stat(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            s = fh.read()
    except OSError:
        return None
    return s[s.rfind(")") + 2:].split()


def _scan():
    """{pid: (ppid, pgid, start)} of every live process."""
    out = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            st = _stat(int(p))
            if st is not None and st[0] != "Z":
                out[int(p)] = (int(st[1]), int(st[2]), st[19])
    return out


def _targets(info, seen):
    """Live processes to kill: the group's members and the descendants seen (same start time)."""
    procs = _scan()
    pid, pgid, start = info["pid"], info["pgid"], str(info["start"])
    leader = procs.get(pid)
    # The group is ours if its leader is ours, or if the leader is gone and nobody reused its id.
    group_ours = (leader is not None and leader[2] == start) or pid not in procs
    out = {p for p, (_, g, _) in procs.items() if g == pgid and group_ours}
    out |= {p for p, s in seen.items() if p in procs and procs[p][2] == s}
    out.discard(os.getpid())
    return out


def _descendants(root, start):
    procs = _scan()
    if root not in procs or procs[root][2] != start:
        return {}
    kids = {}
    for p, (pp, _, _) in procs.items():
        kids.setdefault(pp, []).append(p)
    out, todo = {root: start}, [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            out[c] = procs[c][2]
            todo.append(c)
    return out


def _kill(info, seen):
    targets = _targets(info, seen)
    if not targets:
        return
    print(f"specwatch watchdog: specwatch is gone; stopping server process group {info['pgid']} "
          f"({len(targets)} processes)", file=sys.stderr, flush=True)
    for p in targets:
        try:
            os.kill(p, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + float(info.get("grace_s", 5.0))
    while time.monotonic() < deadline:
        targets = _targets(info, seen)
        if not targets:
            return
        time.sleep(0.1)
    for p in _targets(info, seen):
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


class _Term(Exception):
    pass


def _on_term(signum, frame):
    raise _Term


def main():
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # a terminal's Ctrl-C is specwatch's to handle
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_term)
    fd = sys.stdin.fileno()
    buf = b""
    info = None
    seen = {}
    try:
        while True:
            ready, _, _ = select.select([fd], [], [], POLL_S)
            if info is not None and "pid" in info:
                seen.update(_descendants(info["pid"], str(info["start"])))
            if not ready:
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buf += chunk
            if info is None and b"\n" in buf:
                info = json.loads(buf.split(b"\n", 1)[0])
                if "pid" in info:
                    seen.update(_descendants(info["pid"], str(info["start"])))
    except _Term:
        pass
    if info is not None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if "argv" in info:
            try:
                subprocess.run(info["argv"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=120)
            except (OSError, subprocess.SubprocessError):
                pass
        else:
            _kill(info, seen)


if __name__ == "__main__":
    main()
