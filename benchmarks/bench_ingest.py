"""Ingest speed: full typed ingest of a generated SGLang log vs `grep -c "Decode batch"` and vs a
straightforward library baseline (polars regex extraction into DuckDB; DuckDB's own regexp).

Every method runs as its own process on the same file in the same run, interleaved, so the ratios
are meaningful on a noisy machine; absolute seconds are not. Rows stored are checked against the
generator's counts. Peak RSS is measured at two file sizes (flat in size is the target).
`--captured` also ingests the same log as `docker compose logs` prints it (every line prefixed
`sglang-1  | `; issue 28: a capture prefix is read natively too), beside grep on that file.
Prints a table: method, lines, wall s, ratio to grep, peak RSS, rows stored.

    python benchmarks/bench_ingest.py --lines 2000000 --repeats 2
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def generate(path: Path, n: int, seed: int = 0, prefix: str = "") -> None:
    """~85% decode lines (two DP ranks), ~10% prefill, ~5% noise, like a busy 0.5.2x server;
    `prefix` before every line (a capture path's, e.g. docker compose's `sglang-1  | `)."""
    rng = random.Random(seed)
    t0 = dt.datetime(2026, 10, 31, 8)
    with open(path, "w") as f:
        f.write(prefix + "[2026-10-31 08:00:00] server_args={'model_path': '/models/Llama-3.1-8B-Instruct', "
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
                f.writelines(prefix + b for b in buf)
                buf.clear()
        f.writelines(prefix + b for b in buf)


# The library baselines: what one would write with polars or DuckDB alone (regex per field,
# typed columns, stored in a DuckDB file). Fewer columns than specwatch stores, no rank split,
# no unknown-key JSON, no checkpoint: a lower bound on "straightforward", not a feature match.
_D = {"running_req": (r"#running-req: (\d+)", "Int32"), "kv_tokens": (r"#token: (\d+)", "Int64"),
      "token_usage_frac": (r"token usage: ([\d.]+)", "Float64"),
      "accept_len": (r"accept len: ([\d.]+)", "Float64"),
      "accept_rate_printed": (r"accept rate: ([\d.]+)", "Float64"),
      "gen_throughput_tok_s": (r"gen throughput \(token/s\): ([\d.]+)", "Float64"),
      "queue_req": (r"#queue-req: (\d+)", "Int32")}
_P = {"new_seq": (r"#new-seq: (\d+)", "Int32"), "new_tokens": (r"#new-token: (\d+)", "Int64"),
      "cached_tokens": (r"#cached-token: (\d+)", "Int64"),
      "token_usage_frac": (r"token usage: ([\d.]+)", "Float64"),
      "running_req": (r"#running-req: (\d+)", "Int32"), "queue_req": (r"#queue-req: (\d+)", "Int32"),
      "input_throughput_tok_s": (r"input throughput \(token/s\): ([\d.]+)", "Float64")}
_TS = r"^\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?)((?: [A-Z]+\d+)*)\]"

POLARS = f"""
import sys, duckdb, polars as pl
log, db = sys.argv[1], sys.argv[2]
lines = pl.read_csv(log, has_header=False, separator="\\x01", quote_char=None,
                    new_columns=["line"], schema_overrides={{"line": pl.Utf8}}, truncate_ragged_lines=True)
con = duckdb.connect(db)
for table, header, spec in (("decode", "Decode batch", {_D!r}), ("prefill", "Prefill batch", {_P!r})):
    df = lines.filter(pl.col("line").str.contains(header, literal=True)).select(
        pl.col("line").str.extract({_TS!r}, 1).alias("ts_text"),
        pl.col("line").str.extract({_TS!r}, 1).str.to_datetime("%Y-%m-%d %H:%M:%S", strict=False).alias("ts"),
        pl.col("line").str.extract({_TS!r}, 2).str.strip_chars().alias("rank"),
        *[pl.col("line").str.extract(rx, 1).cast(getattr(pl, typ)).alias(name)
          for name, (rx, typ) in spec.items()])
    con.execute(f"CREATE TABLE {{table}} AS SELECT * FROM df")
print(con.execute("SELECT (SELECT count(*) FROM decode) + (SELECT count(*) FROM prefill)").fetchone()[0])
"""

DUCKDB = f"""
import sys, duckdb
log, db = sys.argv[1], sys.argv[2]
con = duckdb.connect(db)
con.execute("SET enable_progress_bar = false")
con.execute(f\"\"\"CREATE TEMP VIEW lines AS SELECT line FROM read_csv('{{log}}', columns={{{{'line': 'VARCHAR'}}}},
            delim='\\x01', quote='', escape='', header=false, auto_detect=false, strict_mode=false)\"\"\")
for table, header, spec in (("decode", "Decode batch", {_D!r}), ("prefill", "Prefill batch", {_P!r})):
    typ = {{"Int32": "INTEGER", "Int64": "BIGINT", "Float64": "DOUBLE"}}
    cols = ", ".join(f"TRY_CAST(regexp_extract(line, '{{rx}}', 1) AS {{typ[t]}}) AS {{n}}"
                     for n, (rx, t) in spec.items())
    con.execute(f\"\"\"CREATE TABLE {{table}} AS SELECT regexp_extract(line, '{_TS}', 1) AS ts_text,
        TRY_CAST(regexp_extract(line, '{_TS}', 1) AS TIMESTAMP) AS ts,
        trim(regexp_extract(line, '{_TS}', 2)) AS rank, {{cols}}
        FROM lines WHERE contains(line, '{{header}}')\"\"\")
print(con.execute("SELECT (SELECT count(*) FROM decode) + (SELECT count(*) FROM prefill)").fetchone()[0])
"""


# The store's own floor: specwatch's typed rows (read back from the specwatch database, untimed)
# inserted into a fresh DuckDB file the way a bulk ingest commits them (two row groups of decode
# windows per chunk with the prefill windows of the same lines, the writer's settings, inserts in
# any physical order), then committed and closed. No reading, no parsing, no run sums: what
# storing these rows costs DuckDB on this machine.
STORE_FLOOR = """
import sys, time, duckdb
from specwatch.db import schema, store
from specwatch.logs import ingest
src, db = sys.argv[1], sys.argv[2]
with duckdb.connect(src, read_only=True) as c:
    dec, pre = (c.sql(f"SELECT * FROM {t} ORDER BY byte_offset").to_arrow_table()
                for t in ("decode_windows", "prefill_windows"))
n = dec.num_rows + pre.num_rows
step = 2 * ingest.ROW_GROUP_ROWS
cuts = [dec["byte_offset"][i].as_py() for i in range(step, dec.num_rows, step)]
offs = pre["byte_offset"].to_numpy()
t0 = time.perf_counter()
con = duckdb.connect(db, config=store.WRITER_CONFIG)
con.execute("SET preserve_insertion_order = false")
for t in ("decode_windows", "prefill_windows"):
    con.execute(schema.ddl(t))
lo = 0
for k, i in enumerate(range(0, dec.num_rows, step)):
    d = dec.slice(i, step)
    hi = int(offs.searchsorted(cuts[k])) if k < len(cuts) else len(offs)
    p = pre.slice(lo, hi - lo)
    lo = hi
    con.execute("BEGIN")
    con.execute("INSERT INTO decode_windows SELECT * FROM d")
    con.execute("INSERT INTO prefill_windows SELECT * FROM p")
    con.execute("COMMIT")
con.close()
print(f"{time.perf_counter() - t0:.4f} {n}")
"""

def run_measured(cmd: list[str], env=None, cwd=ROOT) -> tuple[float, str, float]:
    """(wall s, stdout, peak RSS MB) of `cmd`, its RSS read from wait4's rusage."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd)
    # read the pipes, then reap with wait4 to get this child's own rusage
    out = p.stdout.read()
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"{cmd} failed ({p.returncode}):\n{err.decode()[-3000:]}")
    return wall, out.decode().strip(), ru.ru_maxrss / 1024


def count_rows(path: Path) -> int:
    """Decode + prefill lines in `path`, read in pieces: this process stays small, since a child's
    peak RSS as wait4 reports it includes what it shared with us before exec."""
    n = 0
    with open(path, "rb") as f:
        for line in f:
            n += b"Decode batch" in line or b"Prefill batch" in line
    return n


def stored_rows(db: Path) -> int:
    import duckdb
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute("SELECT (SELECT count(*) FROM decode_windows) + "
                           "(SELECT count(*) FROM prefill_windows)").fetchone()[0]


def cpus() -> str:
    """The device line's CPUs: those this process may run on, of the host's."""
    return f"{len(os.sched_getaffinity(0))} of {os.cpu_count()} CPUs (this host, shared)"


def commit(root: Path = ROOT) -> str:
    """HEAD of `root`; SPECWATCH_COMMIT overrides it for this tree (the device tool's copy of the
    tree can carry stale git metadata: pass the commit the tree was sent at)."""
    if root == ROOT and os.environ.get("SPECWATCH_COMMIT"):
        return os.environ["SPECWATCH_COMMIT"] + " (as given by SPECWATCH_COMMIT)"
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                              text=True).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=2_000_000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--small-fraction", type=float, default=0.25,
                    help="also ingest this fraction of the file, to see peak RSS vs size")
    ap.add_argument("--large-copies", type=int, default=4,
                    help="also ingest the file repeated this many times (0: skip), for peak RSS")
    ap.add_argument("--skip-baselines", action="store_true")
    ap.add_argument("--captured", action="store_true",
                    help="also the same log with a docker compose prefix on every line")
    ap.add_argument("--also-tree", type=Path, default=None,
                    help="another checkout (e.g. a `git worktree` of the base commit): its "
                         "`specwatch ingest` runs interleaved with this one's, for before/after")
    ap.add_argument("--also-label", default=None,
                    help="what --also-tree holds (e.g. its commit, when it is an exported copy "
                         "without git metadata); default: its git HEAD")
    ap.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                    help="also this tree's `specwatch ingest` with these environment variables "
                         "(e.g. SPECWATCH_SCAN_THREADS=8), interleaved; repeatable")
    args = ap.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "server.log"
        generate(log, args.lines)
        small = Path(d) / "small.log"
        with open(log, "rb") as f, open(small, "wb") as g:
            left = int(log.stat().st_size * args.small_fraction)
            for line in f:
                if left <= 0:
                    break
                g.write(line)
                left -= len(line)
        want, want_small = count_rows(log), count_rows(small)
        size_mb = log.stat().st_size / 1e6
        methods = [("grep -c", lambda db: ["grep", "-c", "Decode batch", str(log)], None)]
        if args.captured:
            clog = Path(d) / "compose.log"
            generate(clog, args.lines, prefix="sglang-1  | ")
            methods += [("grep -c (compose)",
                         lambda db: ["grep", "-c", "Decode batch", str(clog)], None),
                        ("sw (compose)", lambda db: [py, "-m", "specwatch.cli", "ingest", str(clog),
                                                     "--db", str(db)], "db")]
        if not args.skip_baselines:
            methods += [("polars regex", lambda db: [py, "-c", POLARS, str(log), str(db)], "print"),
                        ("duckdb regexp", lambda db: [py, "-c", DUCKDB, str(log), str(db)], "print")]
        methods += [("specwatch", lambda db: [py, "-m", "specwatch.cli", "ingest", str(log), "--db",
                                              str(db)], "db")]
        other = {}
        if args.also_tree is not None:
            tree = args.also_tree.resolve()
            name = f"sw@{args.also_label or commit(tree)}"
            # the other tree first, then whatever the environment imports from (a --target install)
            other[name] = (tree, dict(os.environ, PYTHONPATH=os.pathsep.join(
                p for p in (str(tree), os.environ.get("PYTHONPATH")) if p)))
            methods += [(name, lambda db: [py, "-m", "specwatch.cli", "ingest", str(log), "--db",
                                           str(db)], "db")]
        for spec in args.variant:
            extra = dict(kv.split("=", 1) for kv in spec.split(","))
            name = "sw " + ",".join(f"{k.removeprefix('SPECWATCH_').lower()}={v}"
                                    for k, v in extra.items())
            other[name] = (ROOT, dict(os.environ, **extra))
            methods += [(name, lambda db: [py, "-m", "specwatch.cli", "ingest", str(log), "--db",
                                           str(db)], "db")]
        floor = "store floor"
        results: dict[str, list[tuple[float, float, int]]] = {m[0]: [] for m in methods}
        results[floor] = []
        for rep in range(args.repeats):
            for name, cmd, check in methods:
                db = Path(d) / f"m{list(results).index(name)}-{rep}.duckdb"
                tree, env = other.get(name, (ROOT, None))
                wall, out, rss = run_measured(cmd(db), env=env, cwd=tree)
                rows = (stored_rows(db) if check == "db" else int(out.split()[-1]) if check == "print"
                        else want)
                results[name].append((wall, rss, rows))
                if name == "specwatch":   # its rows, stored again with nothing else to do
                    fdb = Path(d) / f"floor{rep}.duckdb"
                    _, out, rss = run_measured([py, "-c", STORE_FLOOR, str(db), str(fdb)])
                    secs, n = out.split()[-2:]
                    results[floor].append((float(secs), rss, int(n)))
                    fdb.unlink(missing_ok=True)
                db.unlink(missing_ok=True)
        swall, _, srss = run_measured([py, "-m", "specwatch.cli", "ingest", str(small), "--db",
                                       str(Path(d) / "small.duckdb")])
        srows = stored_rows(Path(d) / "small.duckdb")
        large = None
        if args.large_copies > 1:
            big = Path(d) / "large.log"
            with open(big, "wb") as g:
                for _ in range(args.large_copies):
                    with open(log, "rb") as f:
                        while block := f.read(64 << 20):
                            g.write(block)
            lgrep = statistics.median(run_measured(["grep", "-c", "Decode batch", str(big)])[0]
                                      for _ in range(3))
            lwall, _, lrss = run_measured([py, "-m", "specwatch.cli", "ingest", str(big), "--db",
                                           str(Path(d) / "large.duckdb")])
            large = (lwall, lrss, stored_rows(Path(d) / "large.duckdb"), lgrep)
            big.unlink()
            (Path(d) / "large.duckdb").unlink()
        grep = statistics.median(w for w, _, _ in results["grep -c"])
        if args.captured:  # the compose rows are compared with grep on the compose file
            cgrep = statistics.median(w for w, _, _ in results["grep -c (compose)"])
        vs = f" (vs {', '.join(other)})" if other else ""
        print(f"commit {commit()}{vs}, device: {cpus()}, no weights")
        print(f"file: {args.lines} lines, {size_mb:.0f} MB, {want} decode+prefill lines expected")
        print(f"{'method':<22} {'wall_s (each rep)':<22} {'median':>8} {'x grep':>7} "
              f"{'peak_rss_mb':>12} {'rows':>9} {'rows ok':>8}")
        for name, runs in results.items():
            walls = [w for w, _, _ in runs]
            med = statistics.median(walls)
            rows_ok = all(r == want for _, _, r in runs) if not name.startswith("grep") else True
            base = cgrep if "compose" in name else grep
            print(f"{name:<22} {' '.join(f'{w:.2f}' for w in walls):<22} {med:>8.2f} "
                  f"{med / base:>7.1f} {max(r for _, r, _ in runs):>12.0f} {runs[0][2]:>9} "
                  f"{str(rows_ok):>8}")
        print(f"{'specwatch 1/4':<22} {swall:<22.2f} {swall:>8.2f} {'':>7} {srss:>12.0f} "
              f"{srows:>9} {str(srows == want_small):>8}")
        if large is not None:
            print(f"{f'grep -c x{args.large_copies}':<22} {large[3]:<22.2f} {large[3]:>8.2f} "
                  f"{1:>7.1f} {'':>12} {'':>9} {'':>8}")
            print(f"{f'specwatch x{args.large_copies}':<22} {large[0]:<22.2f} {large[0]:>8.2f} "
                  f"{large[0] / large[3]:>7.1f} {large[1]:>12.0f} {large[2]:>9} "
                  f"{str(large[2] == want * args.large_copies):>8}")
            print(f"per line beyond the first {args.lines} (x{args.large_copies} minus x1, medians): "
                  f"{(large[0] - statistics.median(w for w, _, _ in results['specwatch'])) / (large[3] - grep):.1f}x grep")
        best = min(w for w, _, _ in results["specwatch"]) / min(w for w, _, _ in results["grep -c"])
        fl = min(w for w, _, _ in results[floor]) / min(w for w, _, _ in results["grep -c"])
        print(f"specwatch best/best ratio {best:.1f}x grep (target <= 8x); storing the same rows "
              f"alone (store floor, best) is {fl:.1f}x grep")
        ratios = [w / g for (w, _, _), (g, _, _) in zip(results["specwatch"], results["grep -c"])]
        print(f"specwatch / grep per repeat (same repeat, interleaved): "
              f"{' '.join(f'{r:.1f}' for r in ratios)}; median {statistics.median(ratios):.1f}x, "
              f"range {min(ratios):.1f}-{max(ratios):.1f}x")
        for name in other:
            rr = [w / o for (w, _, _), (o, _, _) in zip(results["specwatch"], results[name])]
            print(f"specwatch / {name} per repeat: {' '.join(f'{r:.3f}' for r in rr)}; "
                  f"median {statistics.median(rr):.3f}, range {min(rr):.3f}-{max(rr):.3f}")
        pol = results.get("polars regex")
        if pol:
            pr = [w / p for (w, _, _), (p, _, _) in zip(results["specwatch"], pol)]
            print(f"specwatch / polars per repeat: {' '.join(f'{r:.2f}' for r in pr)}")
        if args.captured:
            cr = [w / g for (w, _, _), (g, _, _) in
                  zip(results["sw (compose)"], results["grep -c (compose)"])]
            print(f"specwatch on the compose-prefixed log / grep on it, per repeat: "
                  f"{' '.join(f'{r:.1f}' for r in cr)}")
        print("# store floor: wall_s is the insert + commit + close inside its process (rows read "
              "back from specwatch's database beforehand, untimed); peak_rss includes those rows")


if __name__ == "__main__":
    main()
