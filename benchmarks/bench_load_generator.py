"""The load generator's own overhead and timing error: closed loop at concurrency 1-512 (issue 14)
and open loop at request rates (issue 30).

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

Open loop (`--rates`, issue 30): `load.run(offsets=...)` with `arrivals.rate_offsets` at each
asked rate, Poisson (burstiness 1) and gamma (burstiness 0.5, CV 1.41) arrivals, against the
fixed-delay server (TTFT 20 ms, ITL 5 ms, 8 tokens) and the built-in engine (EAGLE-3 chain
s3k1d4, 16 tokens, one torch thread). From the send times the load really stamped:
  rate_err_pct      (n − 1) / (last send − first send) against the asked rate, in %
  cv / cv_sched / cv_asked   coefficient of variation of the gaps between the real sends / of
                    the schedule's gaps (cv - cv_sched: what the generator added) / 1/sqrt(b)
  cv_z              (cv_sched − cv_asked) / its standard error CV/2 sqrt((2 + 6/b) / (n − 1)):
                    the drawn schedule's sampling deviation from the asked CV (|z| < 2 typical)
  ks_d / ks_sched / ks_crit  Kolmogorov-Smirnov D of the real sends' / the schedule's gaps
                    against the exponential (Poisson rows) and its alpha = 0.01 critical value
                    1.628 / sqrt(n − 1)
  late_p50/p99      send time − arrival time, ms (the dispatcher's and thread pool's delay)
  cpu_ms_req        the client process's CPU time per request (dispatch + HTTP + parsing)
  e2e_p50/p99       the requests' latency, ms: a server that cannot take the rate queues them
  gen_ok            |rate_err_pct| <= 2 and |cv − cv_sched| <= 0.1 (the generator's criteria)
  takes             no failures and e2e_p99 <= 3 x the lowest rate's e2e_p50 (the server keeps up)
The summary names, per server, the highest rate the server takes and whether the generator met
its criteria at every rate up to it.

Usage: python benchmarks/bench_load_generator.py [--conc 1,8,64,256,512] [--rates ...]
       [--servers fixed,builtin] [--out FILE]
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

from specwatch.run import arrivals, launch, load  # noqa: E402

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


# ------------------------------------------------------------------------------- open loop

OPEN_SERVERS = {
    # name: (argv after the interpreter, tokens per request, default rates)
    "fixed": (lambda port: [str(ROOT / "benchmarks" / "fixed_delay_server.py"), "--port",
                            str(port), "--ttft-ms", "20", "--itl-ms", "5"], 8,
              "5,10,20,40,80,160,320,640"),
    "builtin": (lambda port: ["-m", "specwatch.engine", "--model-path", "builtin:target",
                              "--speculative-algorithm", "EAGLE3",
                              "--speculative-draft-model-path", "builtin:draft-eagle3",
                              "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                              "--speculative-num-draft-tokens", "4", "--host", "127.0.0.1",
                              "--port", str(port)], 16, "2,4,8,16,32"),
}
BURSTINESS = (1.0, 0.5)
KS_C01 = 1.628          # sqrt(-ln(0.01 / 2) / 2): the one-sample KS critical value at alpha 0.01


def start_server(argv: list[str], port: int) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    srv = subprocess.Popen([sys.executable, *argv], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                           cwd=ROOT)
    deadline = time.monotonic() + 120
    while load.health(port, 1.0) != 200:
        if time.monotonic() > deadline or srv.poll() is not None:
            srv.kill()
            raise SystemExit(f"server {argv[:3]} did not start")
        time.sleep(0.2)
    return srv


def open_one(port: int, server: str, tokens: int, rate: float, burstiness: float,
             seed: int) -> dict:
    # bursty gaps need more of them for their CV to be estimated within 0.1 (sd(CV) ~
    # CV/2 sqrt((2 + 6/b) / n): 0.094 at b = 0.5, n = 800; 0.066 at n = 1600)
    n = int(min(800, max(120, rate * 8)) * (2 if burstiness < 1 else 1))
    offs = arrivals.rate_offsets(n, rate, burstiness, (seed, 0))
    sched = [b - a for a, b in zip(offs, offs[1:])]
    m_s = sum(sched) / len(sched)
    cv_sched = math.sqrt(sum((g - m_s) ** 2 for g in sched) / (len(sched) - 1)) / m_s
    specs = [load.RequestSpec(f"open request {i}: say something", tokens) for i in range(n)]
    c0 = cpu_s()
    res = load.run(port, specs, 1, 0.0, 0, timeout_s=120.0, offsets=offs)
    cpu = cpu_s() - c0
    sends = sorted(r.send_offset_ms / 1000 for r in res.results)
    gaps = [b - a for a, b in zip(sends, sends[1:])]
    mean = sum(gaps) / len(gaps)
    sd = math.sqrt(sum((g - mean) ** 2 for g in gaps) / (len(gaps) - 1))
    achieved = (n - 1) / (sends[-1] - sends[0])
    cv_asked = arrivals.expected_cv("gamma", burstiness)
    ks = ks_sched = None
    if burstiness == 1.0:      # against the exponential with the asked mean
        ks, ks_sched = ks_exp([g * rate for g in gaps]), ks_exp([g * rate for g in sched])
    late = [r.send_offset_ms - r.arrival_offset_ms for r in res.results]
    ok = [r for r in res.results if r.success]
    e2e = [r.e2e_ms for r in ok]
    p = load.percentile
    return {"server": server, "rate": rate, "burst": burstiness, "requests": n,
            "achieved": achieved, "rate_err_pct": (achieved - rate) / rate * 100,
            "cv": sd / mean, "cv_sched": cv_sched, "cv_asked": cv_asked, "ks_d": ks,
            "ks_sched": ks_sched,
            "ks_crit": KS_C01 / math.sqrt(len(gaps)) if ks is not None else None,
            "late_p50": p(late, 50), "late_p99": p(late, 99), "cpu_ms_req": cpu * 1000 / n,
            "e2e_p50": p(e2e, 50), "e2e_p99": p(e2e, 99), "failed": n - len(ok)}


def ks_exp(gaps: list[float]) -> float:
    """One-sample Kolmogorov-Smirnov D of unit-rate gaps against the exponential."""
    x = sorted(gaps)
    m = len(x)
    return max(max((i + 1) / m - (1 - math.exp(-v)), (1 - math.exp(-v)) - i / m)
               for i, v in enumerate(x))


def open_loop(servers: list[str], rates: dict[str, str]) -> list[dict]:
    rows = []
    for name in servers:
        argv, tokens, default = OPEN_SERVERS[name]
        port = launch.free_port()
        srv = start_server(argv(port), port)
        try:
            load.run(port, [load.RequestSpec("warm up", tokens)] * 4, 2, 0.0, 0, 120.0)
            for i, rate in enumerate(float(r) for r in (rates.get(name) or default).split(",")):
                for b in BURSTINESS:
                    rows.append(open_one(port, name, tokens, rate, b, seed=i))
                    print(_fmt_row(rows[-1], list(rows[-1])), flush=True)
        finally:
            srv.terminate()
            try:
                srv.wait(15)
            except subprocess.TimeoutExpired:
                srv.kill()
                srv.wait()
    for name in servers:
        mine = [r for r in rows if r["server"] == name]
        floor = min(r["e2e_p50"] for r in mine if r["e2e_p50"] is not None)
        for r in mine:
            # the generator's criteria: the asked rate within 2%, and the CV of the real sends
            # within 0.1 of the CV the process was asked for in the schedule it drew (the drawn
            # schedule's own CV varies around 1/sqrt(b) by sampling: cv_z, the test suite's
            # KS and CV checks cover the schedules)
            r["gen_ok"] = abs(r["rate_err_pct"]) <= 2 and abs(r["cv"] - r["cv_sched"]) <= 0.1
            se = r["cv_asked"] * 0.5 * math.sqrt((2 + 6 / r["burst"]) / (r["requests"] - 1))
            r["cv_z"] = (r["cv_sched"] - r["cv_asked"]) / se
            r["takes"] = r["failed"] == 0 and r["e2e_p99"] is not None \
                and r["e2e_p99"] <= 3 * floor
    return rows


def open_summary(rows: list[dict]) -> list[str]:
    out = []
    for name in dict.fromkeys(r["server"] for r in rows):
        mine = [r for r in rows if r["server"] == name]
        rates = sorted({r["rate"] for r in mine})
        taken = [x for x in rates if all(r["takes"] for r in mine if r["rate"] == x)]
        top = max((x for x in taken if all(x2 in taken for x2 in rates if x2 <= x)), default=None)
        upto = [r for r in mine if top is not None and r["rate"] <= top]
        met = upto and all(r["gen_ok"] for r in upto)
        worst = max(upto, key=lambda r: abs(r["rate_err_pct"])) if upto else None
        worst_cv = max(upto, key=lambda r: abs(r["cv"] - r["cv_sched"])) if upto else None
        late = max(upto, key=lambda r: r["late_p99"]) if upto else None
        zs = [abs(r["cv_z"]) for r in upto]
        out.append(
            f"# {name}: takes up to {top} requests/s; the generator within 2% of the asked rate "
            f"and 0.1 of the drawn schedule's CV at every rate up to it: "
            f"{'yes' if met else 'NO'}"
            + (f" (worst rate error {worst['rate_err_pct']:+.2f}% at {worst['rate']:g}/s "
               f"b={worst['burst']:g}; worst CV added {worst_cv['cv'] - worst_cv['cv_sched']:+.3f}"
               f" at {worst_cv['rate']:g}/s b={worst_cv['burst']:g}; send lateness p99 at most "
               f"{late['late_p99']:.1f} ms ({late['rate']:g}/s); CPU "
               f"{min(r['cpu_ms_req'] for r in upto):.2f}-{max(r['cpu_ms_req'] for r in upto):.2f}"
               f" ms per request; the schedules' CV against 1/sqrt(b): |z| <= {max(zs):.1f}, "
               f"{sum(z > 2 for z in zs)} of {len(zs)} beyond 2)" if upto else ""))
    return out


def _fmt_row(r: dict, cols: list[str]) -> str:
    return " ".join(f"{'' if r.get(c) is None else r[c]:>12.3f}" if isinstance(r.get(c), float)
                    else f"{'' if r.get(c) is None else r[c]!s:>12}" for c in cols)


def header() -> list[str]:
    try:
        import _provenance
        commit = _provenance.commit()
    except Exception:     # torch missing: the commit alone
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip()
    return [f"# commit {commit}, {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, "
            f"{platform.node()} {platform.machine()} {os.cpu_count()} cores (shared, busy), "
            f"python {platform.python_version()}; load average {os.getloadavg()[0]:.1f} at the "
            "end; no weights beyond the built-in engine's bundled ones"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conc", default="1,8,64,256,512", help="closed loop; '' skips it")
    ap.add_argument("--rates", default="", help="open loop, fixed-delay server's rates "
                    "(default " + OPEN_SERVERS["fixed"][2] + ")")
    ap.add_argument("--builtin-rates", default="", help="open loop, built-in engine's rates "
                    "(default " + OPEN_SERVERS["builtin"][2] + ")")
    ap.add_argument("--servers", default="", help="open loop against these: fixed,builtin "
                    "('' = none)")
    ap.add_argument("--out", default=None, help="also write the table to this file")
    ap.add_argument("--clients", default="threads,aiohttp",
                    help="threads = specwatch.run.load.run; aiohttp = the asyncio comparison arm")
    args = ap.parse_args()
    text = ""
    if args.conc:
        text += closed_loop(args)
    if args.servers:
        rows = open_loop(args.servers.split(","), {"fixed": args.rates,
                                                   "builtin": args.builtin_rates})
        cols = list(rows[0])
        text += "\n".join(["# bench_load_generator, open loop: specwatch.run.load.run(offsets=) "
                           "at asked request rates (issue 30)", *header(),
                           " ".join(f"{c:>12}" for c in cols),
                           *(_fmt_row(r, cols) for r in rows), *open_summary(rows)]) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


def closed_loop(args) -> str:
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
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
