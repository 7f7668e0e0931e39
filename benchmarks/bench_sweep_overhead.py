"""specwatch's own time per config in a sweep: everything except server start-up and the load.

Runs a small sweep on the built-in engine (baseline + chain + tree configs when the built-in drafts
exist, 2 concurrency levels x 2 repeats, a tiny workload) and prints one row per config:

  startup_s  launch -> /health 200 (the server's own start-up)
  warmup_s   probe + warm-up requests (load)
  load_s     Σ wall time of the measured loads
  stop_s     SIGTERM -> process group gone + port check (counted as overhead)
  overhead_s total − startup − warm-up − load: launching, flushes, /server_info, ingesting the
             log to its end, DuckDB writes, stopping and checking for orphans.

  wait_s     waiting for its turn in the interleaved order (not overhead)
  store_s    the driver's final store of the config's result (local: runs are stored as they
             finish, inside overhead_s, so this is small; Ray: everything is stored here)
  dispatch_s --ray only: Ray's own cost per config (submit -> result back in the driver, minus
             the task's total: scheduling, worker start, shipping job, rows and log)
  disp_start_s  of which: submit -> the task began measuring (scheduling + worker start-up)

With --ray the same sweep also runs with `--executor ray` on a Ray cluster simulated on this
machine (a head and one node with one CPU per config, so no task queues), twice: with cold
workers (a fresh cluster starts one Python worker per task) and warm ones (idle workers from the
first sweep are reused). A table puts each beside the local run: Ray's extra per config = its
overhead_s + dispatch_s + store_s - the local overhead_s + store_s. The tasks run at the same time, so a cold start that
delays all of them at once is counted once per config.

Target: overhead_s < 2 s per config; Ray's extra < 2 s per config.
Usage: python benchmarks/bench_sweep_overhead.py [--repeats N] [--ray] [--out FILE]
"""
from __future__ import annotations

import argparse
import io
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specwatch.run import sweep, sweepfile  # noqa: E402
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


def table(res, extra_cols: bool = False) -> tuple[list[str], float, dict]:
    cols = ["config", "runs", "startup_s", "warmup_s", "load_s", "wait_s", "stop_s", "total_s",
            "overhead_s", "per_run_s", "store_s", "status"] + (["dispatch_s", "disp_start_s"]
                                                                if extra_cols else [])
    lines = [" ".join(f"{c:>11}" for c in cols)]
    worst, per = 0.0, {}
    for o in res.outcomes:
        n = len(o.runs)
        worst = max(worst, o.overhead_s)
        per[o.config] = o.overhead_s + (o.dispatch_s or 0.0) + (o.store_s or 0.0)
        vals = [o.config[:11], n, o.startup_s or 0.0, o.warmup_s, o.load_s, o.wait_s,
                o.stop_s or 0.0, o.total_s, o.overhead_s,
                (o.overhead_s - (o.stop_s or 0.0)) / max(n, 1), o.store_s or 0.0, o.status]
        if extra_cols:
            vals += [o.dispatch_s or 0.0, o.dispatch_start_s or 0.0]
        lines.append(" ".join(f"{v:>11.3f}" if isinstance(v, float) else f"{v:>11}"
                              for v in vals))
    return lines, worst, per


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2, help="repeats per concurrency level")
    ap.add_argument("--ray", action="store_true", help="also run it on a local Ray cluster")
    ap.add_argument("--out", default=None, help="also write the output to this file")
    args = ap.parse_args()
    have_drafts = (models_dir() / "draft-eagle3" / "config.json").is_file()
    import datetime as dt
    import os
    import platform
    import subprocess

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    load1 = os.getloadavg()[0]
    out: list[str] = [
        f"# bench_sweep_overhead --repeats {args.repeats}{' --ray' if args.ray else ''}: commit "
        f"{commit}, {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.machine()} "
        f"{os.cpu_count()} cores, load average {load1:.1f} at start (shared machine); weights: "
        "the built-in engine's committed builtin:target / builtin:draft-eagle3", ""]
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "overhead.toml"
        p.write_text(SWEEP.format(repeats=args.repeats) + (SPEC if have_drafts else ""))
        s = sweepfile.load(p)
        quiet = lambda: sweep.Progress(stream=io.StringIO(), tty=False)  # noqa: E731
        res = sweep.run_sweep(s, str(Path(tmp) / "o.duckdb"), str(Path(tmp) / "runs"),
                              progress=quiet())
        lines, worst, local = table(res)
        out += ["local executor"] + lines
        out.append(f"\nworst overhead per config: {worst:.3f} s (target < {TARGET_S:.1f} s)"
                   + ("" if have_drafts else "  [built-in drafts missing: baseline only]"))
        ok = worst < TARGET_S
        if args.ray:
            import ray
            from ray.cluster_utils import Cluster

            cluster = Cluster(initialize_head=True, head_node_args={
                "num_cpus": 0, "include_dashboard": False})
            cluster.add_node(num_cpus=len(s.configs))
            cluster.wait_for_nodes()
            ray.init(address=cluster.address, log_to_driver=False)
            tries = {}
            try:
                # twice on the same cluster: the first sweep starts Ray's worker processes (cold),
                # the second finds them idle (warm), as on a cluster that has run anything before
                for label in ("cold", "warm"):
                    tries[label] = sweep.run_sweep(
                        s, str(Path(tmp) / f"r-{label}.duckdb"), str(Path(tmp) / f"r-{label}"),
                        progress=quiet(), executor="ray", ray_address=cluster.address)
            finally:
                ray.shutdown()
                cluster.shutdown()
            for label, rres in tries.items():
                lines, _, remote = table(rres, extra_cols=True)
                out += ["", f"ray executor, {label} workers (one node, one CPU per config)"] + lines
                out += ["", f"{'config':>22} {'local_s':>9} {'ray_s':>9} {'ray_extra_s':>12}"]
                extra = []
                for name in local:
                    d = remote[name] - local[name]
                    extra.append(d)
                    out.append(f"{name[:22]:>22} {local[name]:>9.3f} {remote[name]:>9.3f} "
                               f"{d:>12.3f}")
                out.append(f"\n{label}: Ray's extra per config beyond the local path: mean "
                           f"{sum(extra) / len(extra):.3f} s, worst {max(extra):.3f} s "
                           f"(target < {TARGET_S:.1f} s)")
                if label == "warm":
                    ok = ok and max(extra) < TARGET_S
    text = "\n".join(out) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
