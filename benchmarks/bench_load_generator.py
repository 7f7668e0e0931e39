"""The load generator's own overhead and timing error at concurrency 1-512 (issue 14).

Drives `specwatch.run.load.run` (the code every sweep uses), and side by side an asyncio + aiohttp
client doing the same closed loop and the same measurement (the alternative issue 14 names),
against `fixed_delay_server.py`, whose
delays are known: the first token TTFT_MS after a request arrives, then one token every ITL_MS.
So every number the client measures has a true value, and the difference is the load
generator's error. The server reports how late it sent its own events (`srv_late_p99`), so a
server that cannot keep up is visible instead of blamed on the client.

Columns (per concurrency; ms unless named):
  ttft_err_p50/p99   measured TTFT − TTFT_MS          itl_err_p50/p99  measured ITL − ITL_MS
  srv_late_p99       the server's own lateness against its schedule (a busy machine delays it)
  cli_ttft_p50/p99   the client's own error: measured TTFT − (the server's real first send −
                     its real arrival), i.e. connect + send + receive + scheduling on the client
  cli_ttft_p99_w2    the same after the first wave of `conc` requests (which all connect at
                     once, so the first wave's TTFT carries the start-up burst)
  cli_itl_p50/p99    measured ITL − the server's real gap between the same two events
  wall_ratio         load wall time / ideal wall time (ideal: the server's delays alone)
  cpu_ms_req         the client process's CPU time per request
  failed             requests that failed
(Both processes read CLOCK_MONOTONIC: Python's perf_counter and monotonic on Linux.)

Usage: python benchmarks/bench_load_generator.py [--conc 1,8,64,256,512] [--out FILE]
"""
from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specwatch.run import launch, load  # noqa: E402

TTFT_MS, ITL_MS, TOKENS = 200.0, 50.0, 8


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_aiohttp(port: int, specs, conc: int, timeout_s: float) -> load.LoadResult:
    """The comparison arm: the same closed loop and the same measurement as load.send, on one
    asyncio event loop with aiohttp (as SGLang's bench_serving)."""
    import asyncio
    import json

    import aiohttp

    async def send(session, sem, i, spec):
        async with sem:
            r = load.RequestResult(request_idx=i, is_warmup=False, success=False)
            body = {"text": spec.prompt, "stream": True, "sampling_params": {
                "max_new_tokens": spec.max_new_tokens, "temperature": 0.0, "ignore_eos": True}}
            t0 = time.perf_counter()
            r.started_mono = time.monotonic()
            last_t, last_n, meta = None, 0, None
            try:
                async with session.post(f"http://127.0.0.1:{port}/generate", json=body) as resp:
                    async for raw in resp.content:
                        line = raw.strip()
                        if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
                            continue
                        now = time.perf_counter()
                        meta = json.loads(line[5:])["meta_info"]
                        k = meta["completion_tokens"]
                        if last_t is None:
                            r.ttft_ms = (now - t0) * 1000
                        else:
                            r.itl_ms.extend([(now - last_t) * 1000 / (k - last_n)] * (k - last_n))
                        last_t, last_n = now, k
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                r.error = repr(exc)
            r.finished_mono = time.monotonic()
            r.success = meta is not None and r.error is None
            return r

    async def main():
        sem = asyncio.Semaphore(conc)
        conn = aiohttp.TCPConnector(limit=conc)
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
            return await asyncio.gather(*[send(session, sem, i, sp) for i, sp in enumerate(specs)])

    t0 = time.monotonic()
    results = asyncio.run(main())
    end = max(r.finished_mono for r in results)
    return load.LoadResult(list(results), end - t0)


def one(port: int, conc: int, client: str = "threads") -> dict:
    n = max(2 * conc, 32)
    specs = [load.RequestSpec(f"request {i}", TOKENS) for i in range(n)]
    load.flush_cache(port)
    c0 = cpu_s()
    if client == "aiohttp":
        res = run_aiohttp(port, specs, conc, 120.0)
    else:
        res = load.run(port, specs, conc, 0.0, 0, timeout_s=120.0)
    cpu = cpu_s() - c0
    ok = [r for r in res.results if r.success]
    srv = load.server_info(port, timeout_s=60.0) or {}
    real = srv.get("requests", {})
    # client error: what the client measured minus what the server really did (its send times)
    ttft_c, itl_c, ttft_late = [], [], []
    for r in ok:
        times = real.get(f"request {r.request_idx}")
        if not times or r.ttft_ms is None:
            continue
        ttft_c.append(r.ttft_ms - (times[1] - times[0]) * 1000)
        if r.request_idx >= conc:           # after the first wave: one connect at a time
            ttft_late.append(ttft_c[-1])
        gaps = [(b - a) * 1000 for a, b in zip(times[1:], times[2:])]
        itl_c += [c - g for c, g in zip(r.itl_ms, gaps)]
    ttft = [r.ttft_ms - TTFT_MS for r in ok if r.ttft_ms is not None]
    itl = [x - ITL_MS for r in ok for x in r.itl_ms]
    per_req = (TTFT_MS + (TOKENS - 1) * ITL_MS) / 1000
    ideal = math.ceil(n / conc) * per_req
    p = load.percentile
    return {"client": client, "conc": conc, "requests": n,
            "ttft_err_p50": p(ttft, 50), "ttft_err_p99": p(ttft, 99),
            "itl_err_p50": p(itl, 50), "itl_err_p99": p(itl, 99),
            "srv_late_p99": srv.get("lateness_ms_p99"),
            "cli_ttft_p50": p(ttft_c, 50), "cli_ttft_p99": p(ttft_c, 99),
            "cli_ttft_p99_w2": p(ttft_late, 99), "cli_itl_p50": p(itl_c, 50), "cli_itl_p99": p(itl_c, 99),
            "wall_ratio": res.wall_s / ideal, "cpu_ms_req": cpu * 1000 / n,
            "failed": n - len(ok)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conc", default="1,8,64,256,512")
    ap.add_argument("--out", default=None, help="also write the table to this file")
    ap.add_argument("--clients", default="threads,aiohttp",
                    help="threads = specwatch.run.load.run; aiohttp = the asyncio comparison arm")
    args = ap.parse_args()
    clients = args.clients.split(",")
    if "aiohttp" in clients:
        try:
            import aiohttp  # noqa: F401
        except ImportError:
            print("# aiohttp not installed: the comparison arm is skipped (pip install aiohttp)")
            clients.remove("aiohttp")
    port = launch.free_port()
    srv = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "fixed_delay_server.py"),
                            "--port", str(port), "--ttft-ms", str(TTFT_MS), "--itl-ms",
                            str(ITL_MS)], stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while load.health(port, 1.0) != 200:
            if time.monotonic() > deadline or srv.poll() is not None:
                raise SystemExit("fixed-delay server did not start")
            time.sleep(0.1)
        rows = []
        for c in args.conc.split(","):      # the two clients side by side, per concurrency
            for client in clients:
                rows.append(one(port, int(c), client))
    finally:
        srv.terminate()
        srv.wait(10)
    cols = list(rows[0])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    lines = [f"# bench_load_generator: threads over http.client (specwatch.run.load.run) vs asyncio + "
             f"aiohttp, side by side; load average {os.getloadavg()[0]:.1f} at the end",
             f"# commit {commit}, {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, "
             f"{platform.machine()} {os.cpu_count()} cores (shared, busy), python "
             f"{platform.python_version()}; no weights (fixed-delay server: TTFT {TTFT_MS:.0f} "
             f"ms, ITL {ITL_MS:.0f} ms, {TOKENS} tokens per request)",
             " ".join(f"{c:>15}" for c in cols)]
    for r in rows:
        lines.append(" ".join(f"{r[c]:>15.2f}" if isinstance(r[c], float) else f"{r[c]!s:>15}"
                              for c in cols))
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
