"""GPU energy per output token, baseline vs EAGLE-3, measured by specwatch's own run path on a GPU.

Two halves, as a remote executor splits them (measuring never writes the store):

  measure (on the GPU host, which needs no DuckDB):
      python3 benchmarks/energy_gpu.py measure --sweep benchmarks/energy_gpu.toml --out DIR
    runs `executors.measure_on_node` for every config of the sweep on GPU 0 (the built-in engine
    with --device cuda; NVML samples power and reads the energy counter around each load, and
    /metrics is sampled), then pickles the ConfigResults with the host's provenance to
    DIR/energy_results.pkl.
  store (here, the one writer):
      python benchmarks/energy_gpu.py store --results DIR/energy_results.pkl --db energy.duckdb
          --md benchmarks/results/energy_h200.md
    stores them with writer.store_result, then prints (and writes) the table: per config and
    concurrency, tok/s, joules per output token and its ratio to the baseline, from the views
    (config_stats), never recomputed here.
"""
from __future__ import annotations

import argparse
import os
import pickle
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "kernels")]


def _provenance() -> dict:
    out = {"host": platform.node(), "python": platform.python_version(),
           "commit": os.environ.get("SPECWATCH_COMMIT", "unknown")}
    try:
        out["gpu"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,power.limit,memory.total",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout.strip()
        out["gpu_idle"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=power.draw,temperature.gpu,clocks.sm",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        out["gpu"] = f"nvidia-smi failed: {exc}"
    try:
        import torch
        out["torch"] = f"{torch.__version__} (CUDA {torch.version.cuda})"
    except ImportError:
        out["torch"] = None
    from _provenance import weight_hashes       # benchmarks/ is this script's folder
    out["weights"] = weight_hashes(ROOT / "specwatch" / "engine" / "models")
    return out


def measure(args) -> None:
    from specwatch.run import executors, sweepfile
    from specwatch.run.measure import ConfigJob, RunKey

    s = sweepfile.load(args.sweep)
    # every planned load level (concurrencies, then request rates) x repeat, as rounds.plan_keys
    # (which needs DuckDB: this half runs where there may be none); no rate search here
    keys = tuple(RunKey(c, r, rate) for r in range(s.repeats) for c, rate in s.traffic.levels())
    gpus = None if args.gpus == "none" else tuple(int(g) for g in args.gpus.split(","))
    results = []
    Path(args.out).mkdir(parents=True, exist_ok=True)
    prov = _provenance()
    for i, c in enumerate(s.configs):
        t = time.monotonic()
        job = ConfigJob(s, c, keys, str(Path(args.out) / "runs" / c.name), 0, None,
                        tuple(range(i * len(keys), (i + 1) * len(keys))), 0)
        res = executors.measure_on_node(job, gpus)
        results.append(res)
        e = [r.row.get("gpu_energy_j") for r in res.runs]
        print(f"{c.name}: {res.status} in {time.monotonic() - t:.0f} s; energy J per run {e}; "
              f"{res.failure_reason or ''}", flush=True)
        _dump(args, prov, results)      # after every config: a stopped call keeps what it has
    prov["gpu_after"] = _provenance().get("gpu_idle")
    _dump(args, prov, results)


def _dump(args, prov: dict, results: list) -> None:
    tmp = Path(args.out) / "energy_results.pkl.tmp"
    with open(tmp, "wb") as fh:
        pickle.dump({"sweep": str(args.sweep), "sweep_text": Path(args.sweep).read_text(),
                     "provenance": prov, "results": results}, fh)
    tmp.replace(Path(args.out) / "energy_results.pkl")


TABLE = """
SELECT config, concurrency, repeats, round(output_tok_s_mean, 1) AS tok_s,
  round(speedup, 3) AS speedup, round(accept_len, 2) AS accept_len, energy_repeats,
  round(joules_per_output_token_mean * 1000, 3) AS mj_per_token,
  round(joules_per_token_vs_baseline, 3) AS energy_vs_baseline, verdict
FROM config_stats WHERE sweep_name = ?
ORDER BY concurrency, is_baseline DESC, config
"""


def _sweep_of(data: dict):
    """The measured sweep, parsed from the text the measuring half pickled (its prompts file
    need not exist here: only the traffic keys are used); None when it cannot be parsed."""
    from specwatch.run import sweepfile
    text = data.get("sweep_text")
    if not text:
        return None
    try:
        return sweepfile.loads(text)
    except Exception:       # noqa: BLE001  (e.g. a prompts file of the GPU host)
        import re
        try:
            return sweepfile.loads(re.sub(r'(?m)^prompts = .*$', 'prompts = "builtin:mixed"',
                                          text))
        except Exception:   # noqa: BLE001
            return None


def store_and_report(args) -> None:
    from specwatch.db import query
    from specwatch.run import writer

    data = pickle.loads(Path(args.results).read_bytes())
    results = data["results"]       # measure.ConfigResult (picklable by design)
    for res in results:
        writer.store_result(args.db, res, args.out_dir, parquet=False)
    sweep_name = results[0].sweep
    # a sweep with an [slo]: its targets, as run-sweep stores them (the SLO views judge by them)
    sw = _sweep_of(data)
    if sw is not None and sw.traffic.slo is not None:
        writer.store_targets(args.db, sweep_name, sw.traffic)
    if args.md is None and args.no_table:
        return
    rep = query.run_sql(args.db, TABLE, [sweep_name])
    power = query.run_sql(args.db, """
        SELECT r.config_name AS config, r.concurrency, round(avg(m.value), 1) AS power_w_mean,
          round(max(m.value), 1) AS power_w_max, count(*) AS samples
        FROM metric_samples m JOIN runs r USING (run_id)
        WHERE m.name = 'nvml:gpu_power_w' AND r.sweep_name = ?
        GROUP BY ALL ORDER BY 2, 1""", [sweep_name])
    methods = query.run_sql(args.db, "SELECT DISTINCT gpu_energy_method, gpu_energy_gpus FROM runs "
                            "WHERE sweep_name = ?", [sweep_name])

    def md(res) -> list[str]:
        out = ["| " + " | ".join(res.columns) + " |", "|" + "---|" * len(res.columns)]
        out += ["| " + " | ".join("—" if v is None else str(v) for v in row) + " |"
                for row in res.rows]
        return out
    p = data["provenance"]
    lines = [f"# GPU energy per output token: baseline vs EAGLE-3 ({sweep_name})", "",
             f"Measured by `python3 benchmarks/energy_gpu.py measure --sweep {data['sweep']}` "
             "through the device tool (one call), stored here by `energy_gpu.py store` with "
             "writer.store_result; numbers below are the views' (config_stats), not recomputed.",
             "", f"- commit: {p.get('commit')}", f"- host: {p.get('host')}, python {p.get('python')}, "
             f"torch {p.get('torch')}",
             f"- GPU (name, driver, power limit, memory): {p.get('gpu')}",
             f"- GPU before the sweep (power, temperature, SM clock): {p.get('gpu_idle')}; "
             f"after: {p.get('gpu_after')}",
             f"- energy method / GPUs: {methods.rows}",
             *[f"- weights {w}" for w in p.get("weights", [])], "",
             "mJ per token = GPU energy over the load (NVML total-energy counter, all of the "
             "server's GPUs) / output tokens of the measured requests; energy_vs_baseline = that "
             "over the baseline's at the same concurrency (< 1: less energy per token).", ""]
    lines += md(rep) + ["", "GPU power during the loads (nvml:gpu_power_w samples, 1 s apart):", ""]
    lines += md(power)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.md:
        Path(args.md).write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--sweep", default=str(ROOT / "benchmarks" / "energy_gpu.toml"))
    m.add_argument("--out", required=True)
    m.add_argument("--gpus", default="0", help="GPU ids for each config's server (none: CPU)")
    s = sub.add_parser("store")
    s.add_argument("--results", required=True)
    s.add_argument("--db", required=True)
    s.add_argument("--out-dir", default="runs-energy")
    s.add_argument("--md", default=None)
    s.add_argument("--no-table", action="store_true",
                   help="only store (another sweep than energy_gpu.toml, e.g. a rate sweep)")
    args = ap.parse_args()
    (measure if args.cmd == "measure" else store_and_report)(args)


if __name__ == "__main__":
    main()
