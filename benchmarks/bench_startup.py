"""What a `specwatch ingest` costs before and around its rows: the interpreter, importing the
command, and a whole ingest of a 1,000-line log into a new database, each as its own process,
interleaved, beside `grep -c` on the same file. The fixed part of every ingest (issue 28: an
ingest of 2M lines has ~8 grep-times in all, and this part is paid by every one).

    python benchmarks/bench_startup.py --repeats 7
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ingest import ROOT, commit, generate, run_measured  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "small.log"
        generate(log, 1000)
        steps = {
            "python -c pass": lambda i: [py, "-c", "pass"],
            "import specwatch.cli": lambda i: [py, "-c", "import specwatch.cli"],
            "ingest 1000 lines": lambda i: [py, "-m", "specwatch.cli", "ingest", str(log), "--db",
                                            str(Path(d) / f"s{i}.duckdb")],
            "grep -c (same file)": lambda i: ["grep", "-c", "Decode batch", str(log)],
        }
        times: dict[str, list[float]] = {k: [] for k in steps}
        for i in range(args.repeats):
            for name, cmd in steps.items():
                times[name].append(run_measured(cmd(i), cwd=ROOT)[0])
    print(f"commit {commit()}, device: {len(os.sched_getaffinity(0))} of {os.cpu_count()} CPUs "
          f"(this host), no weights; Python {sys.version.split()[0]}")
    print(f"{'step':<22} {'median_s':>9} {'min_s':>7} {'max_s':>7}")
    for name, ts in times.items():
        print(f"{name:<22} {statistics.median(ts):>9.3f} {min(ts):>7.3f} {max(ts):>7.3f}")


if __name__ == "__main__":
    main()
