"""Where one `specwatch ingest` spends its wall time: the same call as the command
(`ingest.ingest_paths` on a new database), with the start and end of each stage printed in
seconds since the interpreter started, per thread: imports, run setup, source identification,
each chunk's read+scan, each transaction (streamed: several chunks, their decode windows in one
INSERT; else one chunk each), insert, run-sum fold and merge, the writer's close (checkpoint).
Measuring only: the stages are wrapped, not changed.

    python benchmarks/ingest_timeline.py LOG [--db NEW.duckdb]
"""
from __future__ import annotations

import time

T0 = time.perf_counter()
_START = None
try:   # the process's own start, so that the interpreter's start-up is counted too
    with open("/proc/self/stat") as _f:
        _ticks = int(_f.read().rsplit(")", 1)[1].split()[19])
    import os as _os
    with open("/proc/uptime") as _f:
        _START = time.perf_counter() - (float(_f.read().split()[0])
                                        - _ticks / _os.sysconf("SC_CLK_TCK"))
except (OSError, ValueError, IndexError):
    pass
ORIGIN = _START if _START is not None else T0

import argparse  # noqa: E402
import functools  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402

from specwatch import startup  # noqa: E402

startup.skip_pandas_probe()
from specwatch.db import store, stream, summaries  # noqa: E402
from specwatch.logs import bulk, fastscan, ingest  # noqa: E402

EVENTS: list[tuple[float, float, str, str]] = []


def now() -> float:
    return time.perf_counter() - ORIGIN


def wrap(owner, name: str, label: str | None = None, table_arg: int | None = None) -> None:
    """Record each call of owner.name; `table_arg`: the positional argument naming the table,
    added to the label."""
    fn = getattr(owner, name)

    @functools.wraps(fn)
    def timed(*a, **k):
        t = now()
        try:
            return fn(*a, **k)
        finally:
            what = label or name
            if table_arg is not None and len(a) > table_arg:
                what = f"{what} {a[table_arg]}"
            EVENTS.append((t, now(), threading.current_thread().name, what))
    setattr(owner, name, timed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--db", default=None)
    args = ap.parse_args()
    imported = now()
    wrap(ingest, "ensure_run")
    wrap(ingest.FileIngestor, "_identify")
    wrap(ingest.FileIngestor, "_read", "read+scan")
    wrap(ingest.FileIngestor, "_commit", "commit chunk")
    wrap(ingest, "parse_chunk")
    wrap(fastscan, "scan", "C scan")
    wrap(fastscan, "_copy_piece", "copy piece")
    wrap(store, "one_table")
    wrap(store, "insert", "insert", table_arg=1)
    wrap(store, "insert_by_name", "INSERT statement", table_arg=1)
    wrap(stream, "insert_whole_groups", "rows of the other tables", table_arg=1)
    wrap(store, "set_checkpoint")
    wrap(summaries, "_fold", "fold (numpy)")
    wrap(summaries, "merge_delta")
    wrap(summaries, "merge_deltas")
    wrap(stream, "append_stream_with_checkpoint", "transaction (streamed)")
    wrap(stream._WindowStream, "_advance", "next piece (waits for its read+scan)")
    wrap(bulk, "pread_into", "read")
    wrap(bulk.WriterHold, "release", "writer close")
    wrap(store, "connect", "connect")
    db = args.db or os.path.join(tempfile.mkdtemp(), "timeline.duckdb")
    t = now()
    res = ingest.ingest_paths(db, [args.log])
    end = now()
    print(f"interpreter start -> imports done: {imported:.3f} s (of which before this script's "
          f"first line: {T0 - ORIGIN:.3f} s)")
    print(f"ingest_paths: {t:.3f} -> {end:.3f} s ({end - t:.3f} s), rows {sum(r.rows for r in res)}")
    print(f"{'start':>7} {'end':>7} {'took':>6}  {'thread':<22} stage")
    for s, e, th, what in sorted(EVENTS):
        print(f"{s:7.3f} {e:7.3f} {e - s:6.3f}  {th[:22]:<22} {what}")


if __name__ == "__main__":
    main()
