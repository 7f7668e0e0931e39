"""launch + load against real processes: the built-in engine over HTTP on 127.0.0.1, servers that
fail to start, never get ready or ignore SIGTERM, and children that leave the process group."""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
import textwrap
import time
from pathlib import Path

import pytest

from specwatch.run import launch, load, ports, procs, sweepfile
from specwatch.run.sweepfile import Length, Workload


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _builtin(tmp_path: Path, *flags: str) -> launch.Server:
    port = launch.free_port()
    cfg = sweepfile.Config(
        name="baseline", is_baseline=True, model="builtin:target", draft_model=None,
        speculative_algorithm=None, speculative_num_steps=None, speculative_eagle_topk=None,
        speculative_num_draft_tokens=None, tp_size=1, aux_layer_ids=None,
        server_flags=tuple(flags), extra_flags=(), where="test")
    argv = launch.command("builtin", cfg, port)
    env = launch.environment(dict(os.environ), (("OMP_NUM_THREADS", "1"),), engine="builtin")
    return launch.Server(argv, env, port, tmp_path / "server.log")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = _builtin(tmp_path_factory.mktemp("srv"), "--decode-log-interval", "4",
                   "--context-length", "160")
    srv.start()
    try:
        srv.wait_ready(120)
        yield srv
    finally:
        rep = srv.stop(10)
        assert rep.clean, rep


def test_streaming_load_rows_match_what_was_asked(server):
    wl = Workload(prompts="builtin:code", format="jsonl", num_prompts=6, warmup_requests=1,
                  output_tokens=Length(12, 12), input_chars=None, temperature=0.0, seed=3)
    warm, specs = load.build_requests(wl, load.read_prompts(wl))
    assert len(warm) == 1 and len(specs) == 6
    res = load.run(server.port, specs, 3, 0.0, 3, 60)
    assert len(res.results) == 6 and not res.interrupted
    for r, spec in zip(sorted(res.results, key=lambda r: r.request_idx), specs):
        assert r.success, r.error
        assert r.output_tokens == 12                          # ignore_eos: exactly as asked
        assert r.prompt_tokens == len(spec.prompt.encode())   # the engine's tokenizer is bytes
        assert len(r.itl_ms) == 11 and all(x >= 0 for x in r.itl_ms)
        assert 0 < r.ttft_ms < r.e2e_ms
        assert r.tpot_ms == pytest.approx((r.e2e_ms - r.ttft_ms) / 11)
    s = load.summarize(res)
    assert s["requests_ok"] == 6 and s["output_tokens"] == 72
    assert s["output_tok_s"] == pytest.approx(72 / res.wall_s)
    assert s["ttft_ms_p50"] <= s["ttft_ms_p99"]
    assert s["client_accept_len"] is None                     # no speculation, no verify counts
    # same seed, same requests: the workload is reproducible across configs
    assert load.build_requests(wl, load.read_prompts(wl)) == (warm, specs)


def test_request_errors_are_rows_and_the_server_keeps_serving(server):
    too_long = load.RequestSpec("x" * 200, 8)                 # context is 160 tokens
    ok = load.RequestSpec("def f(x):\n", 8)
    res = load.run(server.port, [too_long, ok], 1, 0.0, 0, 30)
    bad, good = sorted(res.results, key=lambda r: r.request_idx)
    assert not bad.success and "HTTP 400" in bad.error and "context length" in bad.error
    assert good.success and good.output_tokens == 8
    s = load.summarize(res)
    assert (s["requests_ok"], s["requests_failed"]) == (1, 1)


def test_flush_and_server_info(server):
    load.flush_cache(server.port)
    info = load.server_info(server.port)
    assert info["port"] == server.port and isinstance(info["internal_states"], list)
    assert load.server_accept_len(info) is None               # baseline: no spec counters


def test_server_that_exits_at_start_leaves_its_reason_in_the_log(tmp_path):
    srv = _builtin(tmp_path, "--decode-log-interval", "0")
    srv.start()
    with pytest.raises(launch.LaunchFailed, match="exited with code 2 before it was ready"):
        srv.wait_ready(60)
    rep = srv.stop(2)
    assert rep.clean and rep.exit_code == 2
    assert "--decode-log-interval 0: must be >= 1" in launch.log_tail(srv.log_path)


STUBBORN = textwrap.dedent("""
    import signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # one child in the group that also ignores SIGTERM, one that leaves the group (setsid)
    subprocess.Popen([sys.executable, "-c",
                      "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                      "time.sleep(300)"])
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                     start_new_session=True)
    time.sleep(300)
""")


def test_never_ready_then_sigkill_and_no_orphans(tmp_path):
    port = launch.free_port()
    srv = launch.Server([sys.executable, "-c", STUBBORN], dict(os.environ), port,
                        tmp_path / "server.log")
    srv.start()
    with pytest.raises(launch.LaunchFailed, match="not ready after 2 s .nothing answered"):
        srv.wait_ready(2)
    seen = procs.descendants(srv.pid)
    assert len(seen) == 2                                     # both children were running
    rep = srv.stop(grace_s=1.0)
    assert rep.killed and rep.exit_code == -signal.SIGKILL
    assert rep.survivors == [] and rep.port_free
    time.sleep(0.2)
    assert not any(_alive(p) for p in [srv.pid, *seen])


def test_busy_port_is_seen_and_free_port_avoids_it(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    busy = s.getsockname()[1]
    try:
        assert not ports.port_free(busy)
        assert launch.free_port(avoid={busy}) != busy
    finally:
        s.close()
    assert ports.port_free(busy)


def test_prompt_sources_and_sampled_lengths(tmp_path):
    sg = tmp_path / "sg.json"
    sg.write_text(json.dumps([
        {"id": "a", "conversations": [{"from": "system", "value": "be brief"},
                                      {"from": "human", "value": "first question"},
                                      {"from": "gpt", "value": "answer"}]},
        {"id": "b", "conversations": [{"from": "gpt", "value": "no human turn"}]},
        {"id": "c", "conversations": [{"from": "human", "value": "second question"}]}]))
    wl = Workload(prompts=str(sg), format="sharegpt", num_prompts=5, warmup_requests=2,
                  output_tokens=Length(4, 9), input_chars=Length(5, 30), temperature=0.0, seed=1)
    assert load.read_prompts(wl) == ["first question", "second question"]
    warm, specs = load.build_requests(wl, load.read_prompts(wl))
    assert len(warm) == 2 and len(specs) == 5
    for r in warm + specs:
        assert 5 <= len(r.prompt) <= 30 and 4 <= r.max_new_tokens <= 9
        assert r.prompt[:5] in ("first", "secon")
    mixed = load.read_prompts(Workload("builtin:mixed", "jsonl", 1, 0, Length(1, 1), None, 0.0, 0))
    parts = [load.read_prompts(Workload(f"builtin:{n}", "jsonl", 1, 0, Length(1, 1), None, 0.0,
                                        0)) for n in ("chat", "code", "math", "summarisation")]
    assert mixed == [p for part in parts for p in part] and all(len(p) >= 8 for p in parts)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"prompt": \n')
    with pytest.raises(load.LoadError, match=r"bad.jsonl:2: not JSON"):
        load.read_prompts(Workload(str(bad), "jsonl", 1, 0, Length(1, 1), None, 0.0, 0))


class _Stalling(__import__("http.server").server.BaseHTTPRequestHandler):
    """A server that hangs mid-stream: /generate sends its headers and one event, then either
    nothing more (mode 'silent') or an event with no new token every 0.2 s forever ('drip');
    /health answers 200 ('silent') or 500 ('drip': the server knows it is broken)."""

    mode = "silent"
    release = None

    def log_message(self, *a):
        pass

    def do_GET(self):
        code = 200 if self.mode == "silent" else 500
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        event = b'data: {"text": "a", "meta_info": {"completion_tokens": 1}}\n\n'
        try:
            self.wfile.write(event)
            self.wfile.flush()
            while not self.release.wait(0.2 if self.mode == "drip" else 30):
                self.wfile.write(event)
                self.wfile.flush()
        except OSError:
            pass


@pytest.fixture
def stalling():
    import http.server
    import threading

    servers = []

    def start(mode: str) -> int:
        handler = type("H", (_Stalling,), {"mode": mode, "release": threading.Event()})
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append((srv, handler))
        return srv.server_address[1]
    yield start
    for srv, handler in servers:
        handler.release.set()
        srv.shutdown()
        srv.server_close()


def test_a_hung_server_aborts_the_load_after_a_few_timeouts(stalling):
    """Not num_prompts x request_timeout_s: after HANG_TIMEOUTS timeouts in a row nothing more
    is sent, and the run says why."""
    port = stalling("silent")
    specs = [load.RequestSpec("hi", 8)] * 40
    t0 = time.monotonic()
    res = load.run(port, specs, 2, 0.0, 0, timeout_s=1.0)
    took = time.monotonic() - t0
    assert res.aborted and f"{load.HANG_TIMEOUTS} requests in a row timed out" in res.aborted
    assert took < 8, took                           # 40 x 1 s / 2 = 20 s without the check
    assert len(res.results) < 10 and not any(r.success for r in res.results)
    assert not res.interrupted


def test_a_failing_health_probe_aborts_a_load_that_never_times_out(stalling, monkeypatch):
    """A stream that keeps sending but makes no progress never times out; /health failing
    HEALTH_FAILURES times in a row aborts it, cutting the requests in flight."""
    monkeypatch.setattr(load, "HEALTH_EVERY_S", 0.3)
    port = stalling("drip")
    t0 = time.monotonic()
    res = load.run(port, [load.RequestSpec("hi", 8)] * 6, 3, 0.0, 0, timeout_s=30.0)
    took = time.monotonic() - t0
    assert res.aborted and "/health" in res.aborted, res.aborted
    assert took < 10, took
    assert len(res.results) == 3 and not any(r.success for r in res.results)
