"""`specwatch tail --metrics URL` (issue 32): a real built-in engine with --enable-metrics on
127.0.0.1, the real CLI as a process, the real DuckDB file.

The tail follows the server's log and its /metrics page at once; requests are sent meanwhile;
after SIGTERM the stored samples must show the counters moving by exactly the completion tokens
and verify calls the requests' own responses report, and the log's decode windows must be there.
"""
from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
import time

import pytest

from test_metrics_samples import SWEEP
from test_sweep_attach import start_server
from test_sweep_e2e import ROOT, rows

from specwatch.run import launch, sweepfile


def _generate(port: int, text: str, n: int) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", "/generate", json.dumps(
        {"text": text, "sampling_params": {"temperature": 0, "max_new_tokens": n,
                                           "ignore_eos": True}}), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    body = json.loads(resp.read())
    conn.close()
    assert resp.status == 200, body
    return body["meta_info"]


def _counter(db, name: str) -> list[float]:
    return [r["v"] for r in rows(db, """SELECT sum(value) AS v FROM metric_samples
                                       WHERE run_id = 'live' AND name = ?
                                       GROUP BY sampled_at ORDER BY sampled_at""", [name])]


@pytest.mark.slow  # an engine and a tail process: ~20 s on 2 shared cores
def test_tail_follows_a_log_and_its_metrics_page(tmp_path):
    cfg = next(c for c in sweepfile.loads(SWEEP.format(name="t", flags=', "--enable-metrics"'))
               .configs if not c.is_baseline)
    port, log, db = launch.free_port(), tmp_path / "server.log", tmp_path / "t.duckdb"
    server = start_server(cfg, log, port)
    tail = None
    try:
        tail = subprocess.Popen(
            [sys.executable, "-m", "specwatch.cli", "tail", str(log), "--db", str(db), "--run",
             "live", "--metrics", f"http://127.0.0.1:{port}", "--metrics-interval", "0.2",
             "--no-alerts"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not (db.exists() and _safe_count(db) >= 2):
            _alive(tail, deadline)
            time.sleep(0.2)
        metas = [_generate(port, p, n) for p, n in (("def f(x):", 24), ("Hello there", 17),
                                                    ("1, 2, 3,", 31))]
        before = _safe_count(db)
        while _safe_count(db) < before + 3:                  # scrapes after the requests
            _alive(tail, deadline)
            time.sleep(0.2)
        tail.send_signal(signal.SIGTERM)
        out, err = tail.communicate(timeout=60)
        assert tail.returncode == 0, err
    finally:
        if tail is not None and tail.poll() is None:
            tail.kill()
            tail.wait(30)
        server.terminate()
        server.wait(30)
    gen = _counter(db, "sglang:generation_tokens_total")
    verify = _counter(db, "sglang:spec_verify_calls_total")
    assert gen == sorted(gen) and verify == sorted(verify)           # counters never go down
    assert gen[-1] - gen[0] == sum(m["completion_tokens"] for m in metas)
    assert verify[-1] - verify[0] == sum(m["spec_verify_ct"] for m in metas)
    # the whole tail's acceptance from the page's counters equals the requests' own
    d = {r["name"]: r["delta"] for r in rows(
        db, "SELECT name, delta FROM run_metric_deltas WHERE run_id = 'live'")}
    assert d["sglang:generation_tokens_total"] == gen[-1] - gen[0]
    # and the log half still works: decode windows of the same run
    assert rows(db, """SELECT count(*) AS n FROM decode_windows_scoped
                       WHERE run_id = 'live'""")[0]["n"] >= 1
    assert rows(db, "SELECT count(*) AS n FROM metric_samples WHERE t_s IS NOT NULL")[0]["n"] == 0


def _alive(proc, deadline: float) -> None:
    """The tail still runs and time is left; else stop it and say what it printed."""
    if proc.poll() is None and time.monotonic() < deadline:
        return
    if proc.poll() is None:
        proc.kill()
    out, err = proc.communicate(timeout=30)
    raise AssertionError(f"tail rc={proc.returncode}:\n{err[-3000:]}")


def _safe_count(db) -> int:
    try:
        return len(_counter(db, "sglang:generation_tokens_total"))
    except Exception:      # the tail holds the write lock for a moment, or no schema yet
        return 0


@pytest.mark.parametrize("args,message", [
    (["--metrics", "https://127.0.0.1:30000"], "https is not supported"),
    (["--metrics", "http://127.0.0.1:30000/metrics"], "no path"),
    (["--metrics", "http://127.0.0.1:99999"], "out of range"),
    (["--metrics", "http://127.0.0.1:1", "--metrics-interval", "nan"], "--metrics-interval"),
    ([], "give log FILES to follow, --metrics URL, or both"),
])
def test_tail_refuses_bad_metrics_arguments_before_starting(tmp_path, args, message):
    got = subprocess.run([sys.executable, "-m", "specwatch.cli", "tail", "--db",
                          str(tmp_path / "x.duckdb"), *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert got.returncode == 2 and message in got.stderr, got.stderr
    assert not (tmp_path / "x.duckdb").exists()
