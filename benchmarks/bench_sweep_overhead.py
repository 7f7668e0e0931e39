"""specwatch's own time per config in a sweep: everything except server start-up and the load.

Runs a small sweep on the built-in engine (baseline + chain + tree configs when the built-in drafts
exist, 2 concurrency levels x 2 repeats, a tiny workload) and prints one row per config:

  startup_s  launch -> /health 200 (the server's own start-up)
  warmup_s   probe + warm-up requests (load)
  load_s     Σ wall time of the measured loads
  stop_s     SIGTERM -> process group gone + port check (counted as overhead)
  overhead_s total − startup − warm-up − load: launching, flushes, /server_info, ingesting the
             log to its end, DuckDB writes, stopping and checking for orphans.

Target: overhead_s < 2 s per config.   Usage: python benchmarks/bench_sweep_overhead.py [--runs N]
"""
from __future__ import annotations

import argparse
import io
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specwatch import sweep, sweepfile  # noqa: E402
from specwatch.engine import models_dir  # noqa: E402

TARGET_S = 2.0

SWEEP = """
name = "overhead"
model = "builtin:target"
draft_model = "builtin:draft-eagle3"
server_flags = ["--decode-log-interval", "8"]
env = {{OMP_NUM_THREADS = "1"}}
concurrency = [1, 2]
repeats = {repeats}

[workload]
prompts = "builtin:mixed"
num_prompts = 4
warmup_requests = 1
output_tokens = 16
"""

SPEC = """
[[grid]]
speculative_num_steps = [2, 3]
speculative_eagle_topk = 1

[[config]]
name = "tree"
speculative_num_steps = 2
speculative_eagle_topk = 2
speculative_num_draft_tokens = 4
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2, help="repeats per concurrency level")
    args = ap.parse_args()
    have_drafts = (models_dir() / "draft-eagle3" / "config.json").is_file()
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "overhead.toml"
        p.write_text(SWEEP.format(repeats=args.repeats) + (SPEC if have_drafts else ""))
        s = sweepfile.load(p)
        res = sweep.run_sweep(s, str(Path(tmp) / "o.duckdb"), str(Path(tmp) / "runs"),
                              progress=sweep.Progress(stream=io.StringIO(), tty=False))
    cols = ["config", "runs", "startup_s", "warmup_s", "load_s", "stop_s", "total_s",
            "overhead_s", "per_run_s", "status"]
    print(" ".join(f"{c:>11}" for c in cols))
    worst = 0.0
    for o in res.outcomes:
        n = len(o.runs)
        worst = max(worst, o.overhead_s)
        vals = [o.config[:11], n, o.startup_s or 0.0, o.warmup_s, o.load_s, o.stop_s or 0.0,
                o.total_s, o.overhead_s, (o.overhead_s - (o.stop_s or 0.0)) / max(n, 1), o.status]
        print(" ".join(f"{v:>11.3f}" if isinstance(v, float) else f"{v:>11}" for v in vals))
    print(f"\nworst overhead per config: {worst:.3f} s (target < {TARGET_S:.1f} s)"
          + ("" if have_drafts else "  [built-in drafts missing: baseline only]"))
    return 0 if worst < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
