"""The load generator's own overhead and timing error at concurrency 1-512 (issue 14).

Drives `specwatch.load.run` (the code every sweep uses) against `fixed_delay_server.py`, whose
delays are known: the first token TTFT_MS after a request arrives, then one token every ITL_MS.
So every number the client measures has a true value, and the difference is the load
generator's error. The server reports how late it sent its own events (`srv_late_p99`), so a
server that cannot keep up is visible instead of blamed on the client.

Columns (per concurrency; ms unless named):
  ttft_err_p50/p99   measured TTFT − TTFT_MS          itl_err_p50/p99  measured ITL − ITL_MS
  wall_ratio         load wall time / ideal wall time (ideal: the server's delays alone)
  cpu_ms_per_req     the client process's CPU time per request
  srv_late_p99       the server's own lateness against its schedule
  failed             requests that failed

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

from specwatch import launch, load  # noqa: E402

TTFT_MS, ITL_MS, TOKENS = 200.0, 50.0, 8


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def one(port: int, conc: int) -> dict:
    n = max(2 * conc, 32)
    specs = [load.RequestSpec("hello", TOKENS) for _ in range(n)]
    load.flush_cache(port)
    c0 = cpu_s()
    res = load.run(port, specs, conc, 0.0, 0, timeout_s=120.0)
    cpu = cpu_s() - c0
    ok = [r for r in res.results if r.success]
    ttft = [r.ttft_ms - TTFT_MS for r in ok if r.ttft_ms is not None]
    itl = [x - ITL_MS for r in ok for x in r.itl_ms]
    per_req = (TTFT_MS + (TOKENS - 1) * ITL_MS) / 1000
    ideal = math.ceil(n / conc) * per_req
    srv = load.server_info(port) or {}
    return {"conc": conc, "requests": n,
            "ttft_err_p50": load.percentile(ttft, 50), "ttft_err_p99": load.percentile(ttft, 99),
            "itl_err_p50": load.percentile(itl, 50), "itl_err_p99": load.percentile(itl, 99),
            "wall_ratio": res.wall_s / ideal, "cpu_ms_per_req": cpu * 1000 / n,
            "srv_late_p99": srv.get("lateness_ms_p99"), "failed": n - len(ok)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conc", default="1,8,64,256,512")
    ap.add_argument("--out", default=None, help="also write the table to this file")
    args = ap.parse_args()
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
        rows = [one(port, int(c)) for c in args.conc.split(",")]
    finally:
        srv.terminate()
        srv.wait(10)
    cols = list(rows[0])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    lines = [f"# bench_load_generator: threads over http.client (specwatch.load.run)",
             f"# commit {commit}, {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, "
             f"{platform.machine()} {os.cpu_count()} cores (shared, busy), python "
             f"{platform.python_version()}; no weights (fixed-delay server: TTFT {TTFT_MS:.0f} "
             f"ms, ITL {ITL_MS:.0f} ms, {TOKENS} tokens per request)",
             " ".join(f"{c:>14}" for c in cols)]
    for r in rows:
        lines.append(" ".join(f"{r[c]:>14.2f}" if isinstance(r[c], float) else f"{r[c]!s:>14}"
                              for c in cols))
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
