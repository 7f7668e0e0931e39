"""Start the Streamlit dashboard (`dashboards/app.py`) as a child process and wait for it.

Headless, bound to 127.0.0.1 unless told otherwise, no file watcher, no usage statistics. SIGTERM and
SIGINT are forwarded to the child (started in its own session, so a terminal's Ctrl-C reaches it
once, through us); the exit code is the child's (128 + signal number if a signal ended it).

Not for: reading the database (the app does that, read-only, through `specwatch.query`).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
APP = REPO / "dashboards" / "app.py"


def command(db: str | Path, port: int, host: str) -> list[str]:
    return [sys.executable, "-m", "streamlit", "run", str(APP),
            "--server.headless=true", f"--server.address={host}", f"--server.port={port}",
            "--server.fileWatcherType=none", "--server.runOnSave=false",
            "--browser.gatherUsageStats=false", "--global.developmentMode=false",
            "--client.toolbarMode=viewer", "--theme.base=light",
            "--", "--db", str(db)]


def main(db: str | Path, port: int = 8501, host: str = "127.0.0.1") -> int:
    """Run the dashboard until it exits or we are signalled; return its exit code."""
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
    env = dict(os.environ, SPECWATCH_DB=str(db))
    # The app imports specwatch: make this checkout importable even when it is not installed.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    print(f"specwatch dashboard: http://{host}:{port}  (db: {db})", file=sys.stderr, flush=True)
    child = subprocess.Popen(command(db, port, host), env=env, start_new_session=True)

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
    return 128 - rc if rc < 0 else rc
