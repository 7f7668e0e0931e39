"""The dashboard off loopback (issue 13): refused without --allow-remote; with it, a warning and an
access token every page requires. The launcher runs as the real `specwatch dashboard` process;
the page check runs the real app under Streamlit's AppTest on a real DuckDB file."""
from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from streamlit.testing.v1 import AppTest

from specwatch import dashboard_launch
from tests.conftest import ROOT, run_cli

APP = ROOT / "dashboards" / "app.py"


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.5", "::", "example.org"])
def test_binding_beyond_loopback_is_refused_without_allow_remote(samples_db, host):
    p = run_cli("dashboard", "--db", samples_db, "--host", host, "--port", "18611", check=False,
                timeout=60)
    assert p.returncode == 2, p.stderr
    assert "--allow-remote" in p.stderr and "ssh -L" in p.stderr and "Traceback" not in p.stderr


def test_loopback_needs_no_token():
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        assert dashboard_launch.is_loopback(host)
        assert dashboard_launch.remote_token(host, False, None) is None
    assert len(dashboard_launch.remote_token("0.0.0.0", True, None)) >= 24
    assert dashboard_launch.remote_token("0.0.0.0", True, "given") == "given"


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_allow_remote_warns_prints_a_token_url_and_serves(samples_db, tmp_path):
    db = tmp_path / "d.duckdb"
    shutil.copy(samples_db, db)
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "specwatch.cli", "dashboard", "--db", str(db),
                             "--host", "0.0.0.0", "--port", str(port), "--allow-remote"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 30
        while not any("?token=" in ln for ln in lines):
            assert time.monotonic() < deadline and proc.poll() is None, lines
            lines.append(proc.stderr.readline())
        text = "".join(lines)
        assert "WARNING: bound to 0.0.0.0" in text
        token = text.split("?token=")[1].split()[0]
        assert len(token) >= 24
        deadline = time.monotonic() + 60
        while True:   # the server is really up on a non-loopback bind
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.3)
    finally:
        proc.terminate()
        proc.wait(30)


def test_page_requires_the_token(samples_db, monkeypatch):
    monkeypatch.setenv("SPECWATCH_DB", str(samples_db))
    monkeypatch.setenv("SPECWATCH_DASHBOARD_TOKEN", "s3cret-token-value")
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert any("Access token required" in e.value for e in at.error)
    assert not at.dataframe and not at.text_area     # nothing of the store, no SQL box
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params["token"] = "wrong"
    at.run()
    assert any("Access token required" in e.value for e in at.error) and not at.dataframe
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params["token"] = "s3cret-token-value"
    at.query_params["view"] = "SQL"
    at.run()
    assert not at.exception and not any("Access token" in e.value for e in at.error)
    assert at.dataframe   # the page renders
    # and its SQL box is the sandbox
    at.text_area(key="sql_text").input("SELECT * FROM read_text('/etc/passwd')").run()
    at.button(key="sql_run").click().run()
    assert any("disabled by configuration" in e.value for e in at.error)
