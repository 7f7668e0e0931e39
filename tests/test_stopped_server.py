"""A stopped server (SIGSTOP: it still accepts connections, the kernel completes the handshake,
nothing answers) is noticed after a few requests in a row time out, not after num_prompts x
request_timeout_s (issue 13, kept covered by issue 26). The server is the real built-in engine,
launched as run-sweep launches it, and the load is the real client over HTTP on 127.0.0.1;
tests/test_launch_load.py covers the same class with a server that hangs in-process."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

from specwatch.run import launch, load

ROOT = Path(__file__).resolve().parent.parent


def test_a_sigstopped_server_is_noticed_after_a_few_timeouts(tmp_path):
    port = launch.free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    srv = launch.Server([sys.executable, "-m", "specwatch.cli", "serve", "--model-path",
                         "builtin:target", "--port", str(port), "--decode-log-interval", "4"],
                        env, port, tmp_path / "server.log", grace_s=5.0)
    timeout_s, n = 2.0, 200
    try:
        srv.start()
        srv.wait_ready(180)
        spec = load.RequestSpec("the quick brown fox", 8)
        before = load.run(port, [spec] * 4, 2, 0.0, 0, timeout_s=60)
        assert all(r.success for r in before.results) and not before.aborted   # it serves
        got, served = {}, threading.Semaphore(0)
        t = threading.Thread(target=lambda: got.update(res=load.run(
            port, [spec] * n, 2, 0.0, 0, timeout_s=timeout_s,
            on_done=lambda r: r.success and served.release())))
        t.start()
        for _ in range(3):                       # mid-load: three requests served
            assert served.acquire(timeout=60)
        os.killpg(srv.pid, signal.SIGSTOP)       # the whole server, as `kill -STOP` on its group
        stopped_at = time.monotonic()
        t.join(120)
        took = time.monotonic() - stopped_at
        assert not t.is_alive()
    finally:
        if srv.pid:
            os.killpg(srv.pid, signal.SIGCONT)
        srv.stop(5.0)
    res = got["res"]
    assert res.aborted and f"{load.HANG_TIMEOUTS} requests in a row timed out" in res.aborted, \
        res.aborted
    # a few timeouts (the requests in flight, then HANG_TIMEOUTS in a row), not n x timeout / 2
    assert took < (load.HANG_TIMEOUTS + 2) * timeout_s + 5, took
    assert len(res.results) < n / 2
    assert not res.results[-1].success
