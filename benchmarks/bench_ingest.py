"""Ingest speed: full typed ingest of a generated SGLang log vs `grep -c "Decode batch"`.

Both run on the same file in the same run, so the ratio is meaningful on a noisy machine.
Prints a table: lines, grep s, ingest s, ratio, peak RSS of the ingest process.

    python benchmarks/bench_ingest.py --lines 2000000
"""
from __future__ import annotations

import argparse
import datetime as dt
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def generate(path: Path, n: int, seed: int = 0) -> None:
    """~85% decode lines (two DP ranks), ~10% prefill, ~5% noise, like a busy 0.5.2x server."""
    rng = random.Random(seed)
    t0 = dt.datetime(2026, 10, 31, 8)
    with open(path, "w") as f:
        f.write("[2026-10-31 08:00:00] server_args={'model_path': '/models/Llama-3.1-8B-Instruct', "
                "'tp_size': 2, 'dp_size': 2, 'speculative_algorithm': 'EAGLE3', "
                "'speculative_num_steps': 3, 'speculative_eagle_topk': 1, "
                "'speculative_num_draft_tokens': 4, 'decode_log_interval': 40}\n")
        buf = []
        for i in range(n - 1):
            ts = (t0 + dt.timedelta(seconds=i // 20)).strftime("%Y-%m-%d %H:%M:%S")
            r = rng.random()
            if r < 0.85:
                dp = i & 1
                buf.append(f"[{ts} DP{dp} TP{dp * 4}] Decode batch, #running-req: {rng.randint(1, 64)}, "
                           f"#token: {rng.randint(1000, 90000)}, token usage: {rng.random():.2f}, "
                           f"accept len: {1 + 3 * rng.random():.2f}, accept rate: {rng.random():.2f}, "
                           f"cuda graph: True, gen throughput (token/s): {rng.uniform(100, 5000):.2f}, "
                           f"#queue-req: {rng.randint(0, 5)}\n")
            elif r < 0.95:
                buf.append(f"[{ts} DP0 TP0] Prefill batch, #new-seq: {rng.randint(1, 8)}, "
                           f"#new-token: {rng.randint(16, 8192)}, #cached-token: {rng.randint(0, 512)}, "
                           f"token usage: {rng.random():.2f}, #running-req: {rng.randint(0, 64)}, "
                           f"#queue-req: 0, #pending-token: 0, cuda graph: False, "
                           f"input throughput (token/s): {rng.uniform(1000, 40000):.2f}\n")
            else:
                buf.append(f"[{ts}] INFO:     127.0.0.1:{rng.randint(30000, 60000)} - "
                           "\"POST /generate HTTP/1.1\" 200 OK\n")
            if len(buf) >= 50_000:
                f.writelines(buf)
                buf.clear()
        f.writelines(buf)


def timed(cmd: list[str], env=None) -> tuple[float, str, int]:
    t0 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"{cmd} failed:\n{p.stderr}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return dt, p.stdout.strip(), max(peak, before)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=2_000_000)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "server.log"
        generate(log, args.lines)
        size_mb = log.stat().st_size / 1e6
        rows = []
        for rep in range(args.repeats):
            g, count, _ = timed(["grep", "-c", "Decode batch", str(log)])
            db = Path(d) / f"bench{rep}.duckdb"
            i, out, rss = timed([sys.executable, "-m", "specwatch.cli", "ingest", str(log), "--db", str(db)])
            rows.append((rep, g, i, i / g, rss / 1024))
        print(f"file: {args.lines} lines, {size_mb:.0f} MB, {count} decode lines")
        print(f"{'rep':>3} {'grep_s':>8} {'ingest_s':>9} {'ratio':>7} {'peak_rss_mb':>12}")
        for rep, g, i, ratio, rss in rows:
            print(f"{rep:>3} {g:>8.3f} {i:>9.2f} {ratio:>7.1f} {rss:>12.0f}")
        best = min(r[3] for r in rows)
        print(f"best ratio {best:.1f}x (target <= 8x)")


if __name__ == "__main__":
    main()
