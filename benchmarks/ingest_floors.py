"""What no ingest built on this stack can go below: the parts of a `specwatch ingest` measured
alone, each at its best, beside `grep -c` on the same generated 2M-line log (issue 28's target:
the whole ingest at most 8x grep).

Each part runs as its own process, interleaved with the others, `--repeats` times:

- `grep -c`: the yardstick (stdout a pipe: GNU grep stops at the first match when it is /dev/null).
- `python -c pass`, `import duckdb+pyarrow+numpy`: the interpreter, and the libraries that any
  typed ingest into DuckDB through Arrow must load (the process's wall time).
- `scan only`: the C scanner over the whole file in chunks read into reused buffers, on every CPU
  this process may use, its Arrow columns built; time inside the process after its imports.
- `store only`: specwatch's own rows (read back from the database a real ingest made, untimed)
  inserted into a new database in one INSERT per table on all DuckDB threads (its fastest shape:
  one Arrow batch per row group, each compressed on a thread of its own), committed and closed;
  time inside the process after reading the rows. `store only, non-NULL cols` stores only the
  columns that are not NULL on every row of this log, in a table of those columns (a narrower
  schema's bound).
- `specwatch ingest`: the whole command.

The bound printed is `imports + max(scan wall, store wall, (scan CPU + store CPU) / CPUs)`:
scanning and storing perfectly overlapped on this host's CPUs and nothing else done (no
checkpoint, no run sums, no chunking, no Python-parsed lines: `scan only` leaves the few lines the
C scanner hands back, one a chunk, unparsed). An ingest cannot be faster than that on this host
unless one of the parts is.

    python benchmarks/ingest_floors.py --lines 2000000 --repeats 5
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ingest import ROOT, commit, cpus, generate, run_measured  # noqa: E402

SCAN = """
import sys, time, os
from specwatch.logs import fastscan
path = sys.argv[1]
threads = fastscan.usable_cpus()
chunk = 64 << 20
bufs = [bytearray(chunk) for _ in range(2)]
out = [fastscan.Buffers(chunk + (2 << 20)) for _ in range(2)]
t0, c0 = time.perf_counter(), time.process_time()
rows = 0
off = 0
k = 0
with open(path, "rb", buffering=0) as f:
    while True:
        buf = bufs[k % 2]   # a bytearray, as ingest's: the piecewise scan cuts it at newlines
        buf.extend(bytes(chunk - len(buf)))
        got = os.preadv(f.fileno(), [buf], off)
        if not got:
            break
        cut = buf.rfind(b"\\n", 0, got) + 1
        del buf[cut:]
        r = fastscan.scan(buf, off, 0, out[k % 2], threads=threads)
        rows += len(r.decode["byte_offset"]) + len(r.prefill["byte_offset"])
        off += cut
        k += 1
print(f"{time.perf_counter() - t0:.4f} {time.process_time() - c0:.4f} {rows}")
"""

STORE = """
import sys, time, duckdb
import pyarrow as pa
from specwatch.db import schema, store
src, db, narrow = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
tables = {}
with duckdb.connect(src, read_only=True) as c:
    for t in ("decode_windows", "prefill_windows"):
        tab = c.sql(f"SELECT * FROM {t}").to_arrow_table()
        if narrow:
            tab = tab.select([n for n in tab.column_names if tab[n].null_count < tab.num_rows])
        # one batch per row group, as ingest's stream hands them over (DuckDB splits larger
        # batches across its threads itself: on 2 CPUs one 1.7M-row batch, 1M-row batches and
        # row-group batches store in the same time, 0.64-0.69 s)
        tables[t] = pa.Table.from_batches(tab.to_batches(max_chunksize=store.ROW_GROUP_ROWS))
t0, c0 = time.perf_counter(), time.process_time()
con = duckdb.connect(db, config=store.WRITER_CONFIG)
con.execute("SET preserve_insertion_order = false")
for t, tab in tables.items():
    if narrow:   # a table of these columns only: DuckDB stores every NULL of a declared column
        con.execute(f"CREATE TABLE {t} AS SELECT * FROM tab LIMIT 0")
    else:
        con.execute(schema.ddl(t))
    con.execute(f"INSERT INTO {t} SELECT * FROM tab")
con.close()
print(f"{time.perf_counter() - t0:.4f} {time.process_time() - c0:.4f} "
      f"{sum(t.num_rows for t in tables.values())}")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=2_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "gen.log"
        generate(log, args.lines)
        size_mb = log.stat().st_size / 2**20
        made = Path(d) / "made.duckdb"
        run_measured([py, "-m", "specwatch.cli", "ingest", str(log), "--db", str(made)])
        parts = {
            "grep -c": (lambda i: ["grep", "-c", "Decode batch", str(log)], False),
            "python -c pass": (lambda i: [py, "-c", "pass"], False),
            "import duckdb+pyarrow+numpy": (lambda i: [py, "-c", "import duckdb, pyarrow, numpy"],
                                            False),
            "scan only": (lambda i: [py, "-c", SCAN, str(log)], True),
            "store only": (lambda i: [py, "-c", STORE, str(made), str(Path(d) / f"s{i}.duckdb"),
                                      "0"], True),
            "store only, non-NULL cols": (lambda i: [py, "-c", STORE, str(made),
                                                     str(Path(d) / f"n{i}.duckdb"), "1"], True),
            "specwatch ingest": (lambda i: [py, "-m", "specwatch.cli", "ingest", str(log), "--db",
                                            str(Path(d) / f"i{i}.duckdb")], False),
        }
        times: dict[str, list[float]] = {k: [] for k in parts}
        cpu: dict[str, list[float]] = {k: [] for k in parts}
        rows: dict[str, int] = {}
        for i in range(args.repeats):
            for name, (cmd, inner) in parts.items():
                wall, out, _ = run_measured(cmd(i), cwd=ROOT)
                if inner:
                    secs, cpu_s, n = out.split()[-3:]
                    wall, rows[name] = float(secs), int(n)
                    cpu[name].append(float(cpu_s))
                times[name].append(wall)
                for p in Path(d).glob(f"[sni]{i}.duckdb*"):
                    p.unlink()
    med = {k: statistics.median(v) for k, v in times.items()}
    grep = med["grep -c"]
    print(f"commit {commit()}, device: {cpus()}, no weights; Python {sys.version.split()[0]}")
    print(f"file: {args.lines} lines, {size_mb:.0f} MB; rows: "
          + ", ".join(f"{k} {v}" for k, v in rows.items()))
    mcpu = {k: statistics.median(v) for k, v in cpu.items() if v}
    ncpu = len(os.sched_getaffinity(0))
    print(f"{'part':<28} {'seconds (each repeat)':<34} {'median':>7} {'x grep':>7} {'cpu_s':>6}")
    for name, ts in times.items():
        c = f"{mcpu[name]:>6.3f}" if name in mcpu else ""
        print(f"{name:<28} {' '.join(f'{t:.3f}' for t in ts):<34} {med[name]:>7.3f} "
              f"{med[name] / grep:>7.1f} {c}")
    imp = med["import duckdb+pyarrow+numpy"]
    for store_part in ("store only", "store only, non-NULL cols"):
        # overlapped at best: neither part waits for the other, and together they use no more
        # CPU time than the host has
        both = max(med["scan only"], med[store_part], (mcpu["scan only"] + mcpu[store_part]) / ncpu)
        bound = imp + both
        print(f"bound with {store_part!r}: imports + overlapped(scan, store) = {imp:.3f} + "
              f"{both:.3f} = {bound:.3f} s = {bound / grep:.1f}x grep (target <= 8x: {8 * grep:.3f} s)")
    print(f"specwatch ingest: {med['specwatch ingest'] / grep:.1f}x grep")


if __name__ == "__main__":
    main()
