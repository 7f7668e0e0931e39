"""Start the Streamlit dashboard (`dashboards/app.py`) as a child process and wait for it.

Headless, bound to 127.0.0.1 unless told otherwise, no file watcher, no usage statistics, and no
connection to any host but the one it binds: Streamlit looks up the machine's external IP at
checkip.amazonaws.com (and points a UDP socket at 8.8.8.8 for the internal one) when bound to a
wildcard address and for every WebSocket from another origin, with no setting to stop it, so the
child runs `python -m specwatch.dashboard_launch` (`serve_offline`: Streamlit's CLI with those
two probes answering "unknown"); tests/test_dashboard_offline.py watches its syscalls. SIGTERM and
SIGINT are forwarded to the child (started in its own session, so a terminal's Ctrl-C reaches it
once, through us); the exit code is the child's (128 + signal number if a signal ended it).
The child never outlives us: a watchdog (`procs.Guard`) stops it if we die by any signal,
SIGKILL included, and its pid file (`<db dir>/.specwatch/dashboard-PORT.specwatch-pid`) lets the
next start reap one left by a dead watchdog (`procs.reap_stale`).

Not for: reading the database (the app does that, read-only, through `specwatch.db.query`).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from specwatch.run import procs

REPO = Path(__file__).resolve().parent.parent
APP = REPO / "dashboards" / "app.py"


def command(db: str | Path, port: int, host: str) -> list[str]:
    # browser.serverAddress: the URL Streamlit prints and the origin it trusts are the address
    # bound (this machine's name for a wildcard), not one it would look up.
    shown = socket.gethostname() if host in ("0.0.0.0", "::", "") else host
    return [sys.executable, "-m", "specwatch.dashboard_launch", "run", str(APP),
            "--server.headless=true", f"--server.address={host}", f"--server.port={port}",
            f"--browser.serverAddress={shown}", f"--browser.serverPort={port}",
            "--server.fileWatcherType=none", "--server.runOnSave=false",
            "--browser.gatherUsageStats=false", "--global.developmentMode=false",
            "--client.toolbarMode=viewer", "--theme.base=light",
            "--", "--db", str(db)]


def serve_offline(argv: list[str]) -> None:
    """`streamlit ARGV` with Streamlit's network probes (`net_util.get_external_ip`, an HTTP GET
    of checkip.amazonaws.com, and `get_internal_ip`, a UDP connect to 8.8.8.8) answering None,
    as when they fail offline: no URL printed for them, no origin trusted for them."""
    from streamlit import net_util
    from streamlit.web import cli as streamlit_cli

    for probe in ("get_external_ip", "get_internal_ip"):
        if not callable(getattr(net_util, probe, None)):
            print(f"specwatch dashboard: this Streamlit has no net_util.{probe}; check that it "
                  "contacts no other host (tests/test_dashboard_offline.py)", file=sys.stderr)
        setattr(net_util, probe, lambda: None)
    sys.argv = ["streamlit", *argv]
    streamlit_cli.main(prog_name="streamlit")


TOKEN_ENV = "SPECWATCH_DASHBOARD_TOKEN"


def is_loopback(host: str) -> bool:
    """Only loopback addresses (and `localhost`) keep the dashboard off the network."""
    import ipaddress
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False   # a host name: it may resolve to anything


def remote_token(host: str, allow_remote: bool, token: str | None) -> str | None:
    """The access token the app must require, or None on loopback. Binding anything else without
    `allow_remote` is refused: the dashboard serves every stored run and an SQL box."""
    if is_loopback(host):
        return token or None
    if not allow_remote:
        raise ValueError(
            f"--host {host} would serve every stored run and the SQL box to the network; reach the "
            "dashboard through `ssh -L 8501:127.0.0.1:8501 THIS_HOST` instead, or bind it "
            "deliberately with --allow-remote (an access token is then required)")
    import secrets
    return token or os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24)


def main(db: str | Path, port: int = 8501, host: str = "127.0.0.1", allow_remote: bool = False,
         token: str | None = None) -> int:
    """Run the dashboard until it exits or we are signalled; return its exit code."""
    try:
        token = remote_token(host, allow_remote, token)
    except ValueError as exc:
        print(f"specwatch dashboard: {exc}", file=sys.stderr)
        return 2
    if not APP.exists():
        print(f"specwatch dashboard: {APP} not found; the dashboard runs from a source checkout "
              "(pip install -e '.[dashboard]')", file=sys.stderr)
        return 2
    try:
        import streamlit  # noqa: F401
    except ImportError:
        print("specwatch dashboard: streamlit is not installed; pip install 'specwatch[dashboard]'",
              file=sys.stderr)
        return 2
    db = Path(db).resolve()
    if not db.exists():
        print(f"specwatch dashboard: {db} does not exist yet; the page will show data once "
              "ingest, tail or run-sweep writes it", file=sys.stderr)
    else:
        from specwatch.db import store
        try:   # a damaged file is said here, once, not as a page of errors
            with store.reader(db):
                pass
        except store.StoreCorrupt as exc:
            print(f"specwatch dashboard: {exc}", file=sys.stderr)
            return 1
        except store.StoreError:
            pass   # locked by a writer right now: the page waits for it
    env = dict(os.environ, SPECWATCH_DB=str(db))
    env.pop(TOKEN_ENV, None)
    if token:
        env[TOKEN_ENV] = token
    # The app imports specwatch: make this checkout importable even when it is not installed.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    url = f"http://{host}:{port}" + (f"/?token={token}" if token else "")
    if not is_loopback(host):
        print(f"specwatch dashboard: WARNING: bound to {host}, reachable from the network; only "
              "requests carrying the token below are served", file=sys.stderr)
    print(f"specwatch dashboard: {url}  (db: {db})", file=sys.stderr, flush=True)
    pid_dir = db.parent / ".specwatch"
    procs.reap_stale(pid_dir)
    guard = procs.Guard(grace_s=5.0)
    try:
        child = subprocess.Popen(command(db, port, host), env=env, start_new_session=True)
    except BaseException:
        guard.release()
        raise
    guard.watch(child)
    pidfile = None
    try:
        pid_dir.mkdir(exist_ok=True)
        pidfile = procs.write_pidfile(pid_dir / f"dashboard-{port}{procs.PIDFILE_SUFFIX}",
                                      child.pid, port=port)
    except OSError as exc:         # a read-only db directory: the watchdog still holds
        print(f"specwatch dashboard: cannot write a pid file in {pid_dir}: {exc.strerror}",
              file=sys.stderr)

    def forward(signum, _frame):
        if child.poll() is None:
            child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while True:
            try:
                rc = child.wait()
                break
            except KeyboardInterrupt:   # a handler was replaced by the caller; keep waiting
                forward(signal.SIGINT, None)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        if child.poll() is None:       # we are leaving on an exception: take the child along
            child.terminate()
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        procs.remove_pidfile(pidfile)
        guard.release()
    return 128 - rc if rc < 0 else rc


if __name__ == "__main__":
    serve_offline(sys.argv[1:])
