"""Nothing the dashboard starts contacts a host the user did not name (issue 26).

Streamlit bound to a wildcard address looked up the machine's external IP at
checkip.amazonaws.com (and "connected" a UDP socket to 8.8.8.8 for the internal one), at start
and again for every WebSocket from another origin. Observed here, not assumed: the real
`specwatch dashboard` process tree runs under strace (every connect/sendto/sendmsg syscall of
every process and thread, C code included) and a Python audit hook (socket.connect, sendto and
getaddrinfo with the names looked up) while a real WebSocket session runs the app on a real
DuckDB file, and a foreign-origin WebSocket knocks; only loopback may appear.
"""
from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from websockets.sync import client as websockets_sync

from tests.conftest import ROOT

AUDIT_HOOK = '''\
import json, os, sys
_log = os.environ.get("SPECWATCH_NET_LOG")
_EVENTS = {"socket.connect": 1, "socket.sendto": 1, "socket.sendmsg": 1, "socket.getaddrinfo": 0,
           "socket.gethostbyname": 0, "socket.gethostbyaddr": 0, "socket.bind": 1}


def _hook(event, args):
    if _log and event in _EVENTS:
        addr = args[_EVENTS[event]] if len(args) > _EVENTS[event] else None
        with open(_log, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "event": event, "addr": repr(addr)}) + "\\n")


sys.addaudithook(_hook)
'''


def _strace_works() -> bool:
    if not shutil.which("strace"):
        return False
    p = subprocess.run(["strace", "-f", "-qq", "-e", "trace=connect", "-o", os.devnull, "true"],
                       capture_output=True)
    return p.returncode == 0


STRACE = _strace_works()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_a_session(port: int, query: str) -> list[str]:
    """Open the app's WebSocket as the browser does, ask for a run, and return the ForwardMsg
    types until the script finished (the app really ran: it read the database)."""
    seen = []
    with websockets_sync.connect(f"ws://127.0.0.1:{port}/_stcore/stream",
                                 subprotocols=["streamlit"], origin=f"http://127.0.0.1:{port}",
                                 open_timeout=30, max_size=None) as ws:
        msg = BackMsg()
        msg.rerun_script.query_string = query
        ws.send(msg.SerializeToString())
        deadline = time.monotonic() + 90
        while "script_finished" not in seen:
            fm = ForwardMsg()
            fm.ParseFromString(ws.recv(timeout=max(1.0, deadline - time.monotonic())))
            seen.append(fm.WhichOneof("type"))
    return seen


def _foreign_origin_is_refused(port: int) -> None:
    """The path that called get_internal_ip / get_external_ip: a WebSocket from another site."""
    with pytest.raises(Exception) as err:
        with websockets_sync.connect(f"ws://127.0.0.1:{port}/_stcore/stream",
                                     subprotocols=["streamlit"],
                                     origin="http://attacker.example:8080", open_timeout=30) as ws:
            ws.recv(timeout=30)
    assert "1008" in str(err.value) or "403" in str(err.value), err.value


def _addresses(trace: str) -> set[str]:
    """Every IP address a traced connect/sendto/sendmsg named."""
    return set(re.findall(r'inet_addr\("([^"]+)"\)', trace)) | \
        set(re.findall(r'inet_pton\(AF_INET6, "([^"]+)"', trace))


@pytest.mark.parametrize("host", [pytest.param("127.0.0.1", marks=pytest.mark.slow), "0.0.0.0"])
def test_the_dashboard_contacts_no_host_but_loopback(samples_db, tmp_path, host):
    db = tmp_path / "d.duckdb"
    shutil.copy(samples_db, db)
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(AUDIT_HOOK)
    netlog, trace = tmp_path / "net.jsonl", tmp_path / "strace.txt"
    port = _free_port()
    env = dict(os.environ, SPECWATCH_NET_LOG=str(netlog),
               PYTHONPATH=os.pathsep.join([str(hook_dir), str(ROOT)]))
    cmd = [sys.executable, "-m", "specwatch.cli", "dashboard", "--db", str(db), "--host", host,
           "--port", str(port)] + ([] if host == "127.0.0.1" else ["--allow-remote"])
    if STRACE:
        cmd = ["strace", "-f", "-qq", "--seccomp-bpf", "-e", "trace=connect,sendto,sendmsg",
               "-o", str(trace)] + cmd
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health",
                                            timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, proc.poll()
            time.sleep(0.3)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
            assert r.status == 200     # the page itself
        _foreign_origin_is_refused(port)
        seen = _run_a_session(port, "view=SQL")
        assert "new_session" in seen and "delta" in seen, seen
        _foreign_origin_is_refused(port)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
    calls = [json.loads(line) for line in netlog.read_text().splitlines()]
    # the hook watched the Streamlit server: it saw it bind the port
    assert any(c["event"] == "socket.bind" and f", {port}" in c["addr"] for c in calls), calls
    looked_up = {c["addr"] for c in calls if c["event"] != "socket.connect"
                 and c["event"].startswith("socket.get")}
    named = {repr(h) for h in ("127.0.0.1", "localhost", "::1", host, None)} | {repr("")}
    assert looked_up <= named, (looked_up - named, err)
    for c in calls:
        if c["addr"].startswith("("):   # (host, port[, ...]): an internet address
            ip = c["addr"][1:].split(",")[0].strip("'\" ")
            if c["event"] == "socket.bind":
                assert ip in (host, "127.0.0.1", "::1"), (c, err)     # what the user named
            elif c["event"] in ("socket.connect", "socket.sendto", "socket.sendmsg"):
                assert ipaddress.ip_address(ip).is_loopback, (c, err)
    assert "checkip" not in out + err and "External URL" not in out
    if STRACE:
        text = trace.read_text()
        assert "101 Switching Protocols" in text, text[:2000]   # it traced the server's sends
        outside = {a for a in _addresses(text) if not ipaddress.ip_address(a).is_loopback}
        assert not outside, (sorted(outside), [ln for ln in text.splitlines()
                                               if any(a in ln for a in outside)][:10])
