"""Append-to-queryable lag of `specwatch tail`, with a reader polling the same database.

A writer appends SGLang decode lines at `--rate` lines/s (sequence number in `#token:`, send time
kept by the writer) while `specwatch tail` (a real process) ingests them and a reader process
polls every `--reader-poll-ms` through `query.run_sql` (what `specwatch sql` and the dashboard
use), noting when each line first becomes visible. Lag = first visible - written, so it includes
the reader's own polling granularity. Also printed: the reader's errors and its wait to open the
database (lock waits), and, measured separately in-process, how long one write burst holds the
database lock (open, append rows + checkpoint, close) for a burst of `--rate * 0.25` lines.

    python benchmarks/bench_tail_latency.py [--duration 20] [--rate 200] [--rotate-every 0]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = str(Path(__file__).resolve().parents[1])
sys.path.insert(0, REPO)
ENV = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}

# The reader process: poll, record first-seen times of new sequence numbers and open waits.
READER = r"""
import json, sys, time
from specwatch.db import query, store
db, poll_s, out = sys.argv[1], float(sys.argv[2]) / 1000, sys.argv[3]
seen, waits, errors, stop = {}, [], [], False
import signal
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
low = 0
while not stop:
    t = time.time()
    try:
        t_open = time.perf_counter()
        with store.reader(db) as con:
            waits.append((t, time.perf_counter() - t_open))
            rows = query._execute(con, "SELECT kv_tokens FROM decode_windows WHERE kv_tokens >= ?",
                                  [low], 1_000_000, 30).rows
        now = time.time()
        for (s,) in rows:
            seen.setdefault(s, now)
        while low in seen:
            low += 1
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
    time.sleep(max(0.0, poll_s - (time.time() - t)))
json.dump({"seen": seen, "waits": waits, "errors": errors}, open(out, "w"))
"""


def line(seq: int) -> bytes:
    return (f"[2025-10-27 16:40:02] Decode batch [{seq}], #running-req: 8, #token: {seq}, "
            "token usage: 0.04, accept len: 3.12, accept rate: 0.78, cuda graph: True, "
            "gen throughput (token/s): 911.30, #queue-req: 0, \n").encode()


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


def write_lines(log: Path, duration_s: float, rate: int, rotate_every_s: float) -> dict[int, float]:
    sent: dict[int, float] = {}
    f = open(log, "ab", buffering=0)
    t0 = time.monotonic()
    next_rotate, n = rotate_every_s or float("inf"), 0
    while (now := time.monotonic() - t0) < duration_s:
        if now >= next_rotate:  # rename rotation, as logrotate `create`
            f.close()
            os.replace(log, f"{log}.1")
            f = open(log, "ab", buffering=0)
            next_rotate += rotate_every_s
        while n < int(now * rate):
            f.write(line(n))
            sent[n] = time.time()
            n += 1
        time.sleep(0.002)
    f.close()
    return sent


def burst_hold_ms(tmp: Path, lines_per_burst: int, bursts: int = 40) -> list[float]:
    """In-process: the time of one FileIngestor.poll() burst. The database is open for all of it
    except parsing (done before it opens, ~1 ms for 50 lines), so this is the lock hold time."""
    from specwatch.logs import ingest

    db, log = tmp / "burst.duckdb", tmp / "burst.log"
    ingest.ensure_run(db, "burst")
    ing = ingest.FileIngestor(db, log, "burst")
    holds, seq = [], 0
    for _ in range(bursts):
        with open(log, "ab") as f:
            for _ in range(lines_per_burst):
                f.write(line(seq))
                seq += 1
        t = time.perf_counter()
        ing.poll()
        holds.append((time.perf_counter() - t) * 1000)
    ing.close()
    return holds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of writing")
    ap.add_argument("--rate", type=int, default=200, help="lines per second")
    ap.add_argument("--reader-poll-ms", type=float, default=100.0)
    ap.add_argument("--tail-poll-interval", type=float, default=0.25)
    ap.add_argument("--tail-arg", action="append", default=[],
                    help="extra `specwatch tail` argument, e.g. --tail-arg=--no-alerts")
    ap.add_argument("--rotate-every", type=float, default=0.0, help="rename-rotate every N s (0: no)")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench_tail_"))
    try:
        log, db, out = tmp / "server.log", tmp / "bench.duckdb", tmp / "reader.json"
        tail = subprocess.Popen([sys.executable, "-m", "specwatch.cli", "tail", str(log), "--db",
                                 str(db), "--run", "bench", "--poll-interval",
                                 str(args.tail_poll_interval), *args.tail_arg],
                                env=ENV, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while not db.exists():
            if tail.poll() is not None or time.monotonic() > deadline:
                tail.kill()
                sys.exit(f"specwatch tail did not start: {tail.communicate()[1].decode()[-2000:]}")
            time.sleep(0.05)
        time.sleep(1.0)  # tail has created the schema
        reader = subprocess.Popen([sys.executable, "-c", READER, str(db), str(args.reader_poll_ms),
                                   str(out)], env=ENV)
        time.sleep(1.0)  # reader imported and polling
        sent = write_lines(log, args.duration, args.rate, args.rotate_every)
        time.sleep(3.0)  # let the last lines become visible
        reader.send_signal(signal.SIGTERM)
        reader.wait(timeout=30)
        tail.send_signal(signal.SIGTERM)
        _, tail_err = tail.communicate(timeout=30)
        res = json.loads(out.read_text())
        seen = {int(k): v for k, v in res["seen"].items()}
        lags = [(seen[s] - t) * 1000 for s, t in sent.items() if s in seen]
        waits = [w * 1000 for _, w in res["waits"]]
        t_first = min(sent.values())
        longest = sorted(res["waits"], key=lambda tw: -tw[1])[:3]
        longest_note = ", ".join(f"{w * 1000:.0f} ms at t={t - t_first:+.1f} s" for t, w in longest)
        holds = burst_hold_ms(tmp, max(1, int(args.rate * args.tail_poll_interval)))
        rows = [
            ("lines written", len(sent), ""),
            ("lines seen by reader", len(seen), ""),
            ("reader polls", len(waits), ""),
            ("reader errors", len(res["errors"]), "; ".join(res["errors"][:2])),
            ("lag p50 (ms)", f"{pct(lags, 0.50):.0f}", "append -> visible to a 100 ms poller"),
            ("lag p99 (ms)", f"{pct(lags, 0.99):.0f}", "target <= 1000"),
            ("lag max (ms)", f"{max(lags):.0f}" if lags else "nan", ""),
            ("reader open wait p50 (ms)", f"{pct(waits, 0.50):.1f}", "incl. lock retries"),
            ("reader open wait p99 (ms)", f"{pct(waits, 0.99):.1f}", ""),
            ("reader open wait max (ms)", f"{max(waits):.1f}" if waits else "nan", longest_note),
            ("write burst lock hold p50 (ms)", f"{pct(holds, 0.50):.1f}",
             f"{int(args.rate * args.tail_poll_interval)} lines/burst, in-process"),
            ("write burst lock hold p99 (ms)", f"{pct(holds, 0.99):.1f}", ""),
            ("tail exit code", tail.returncode, tail_err.decode().strip()[-200:]),
        ]
        print(f"{'metric':32} {'value':>8}  note")
        for name, value, note in rows:
            print(f"{name:32} {value!s:>8}  {note}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
