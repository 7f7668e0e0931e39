"""Do the verdicts of the example sweep agree across separate runs of it?

Runs `specwatch run-sweep examples/builtin_sweep.toml` N times (default 3), each into its own
fresh database (nothing shared: every run starts its own servers), reads each one's
`config_stats` / `concurrency_winners` (specwatch/db/stats.py), and prints, per (config, concurrency), the
verdict and speedup [95% CI] of every run, whether the verdicts agree, and per concurrency whether
the winner (or "no clear winner") agrees. Writes benchmarks/results/verdict_agreement.{md,json}
with the commit, the machine and the engine weights' hashes.

Agreement is the point: issue 12 saw two identical runs name different winners (1.37x vs 1.04x)
when each was a single measurement. With repeats and intervals, a disagreement should only ever
be `unclear` against a definite verdict, never `pays` against `loses`.

Usage: python benchmarks/bench_verdict_agreement.py [--runs 3] [--sweep FILE] [--repeats N] [--out DIR]
Timing: the sweep is CPU-bound; on a busy 2-core machine the runs are slow and noisy (the
verdicts are what is compared, not the tok/s).
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specwatch.db import query  # noqa: E402

MODELS = ROOT / "specwatch" / "engine" / "models"


def _commit() -> str:
    if os.environ.get("SPECWATCH_COMMIT"):      # a copy without .git (e.g. a git archive)
        return os.environ["SPECWATCH_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True).stdout.strip()
        return head + (" (working tree has uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _weights() -> dict[str, str]:
    out = {}
    for f in sorted(MODELS.glob("*/model.safetensors")):
        out[f.parent.name] = hashlib.sha256(f.read_bytes()).hexdigest()[:12]
    return out


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        load = "?"
    return f"{cpu}, {os.cpu_count()} CPUs (load average at start {load}), CPU only"


def run_once(sweep_file: Path, work: Path, i: int) -> dict:
    db = work / f"run{i}.duckdb"
    env = dict(os.environ, OMP_NUM_THREADS="1", COLUMNS="120")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "specwatch.cli", "run-sweep", str(sweep_file),
                           "--db", str(db), "--out-dir", str(work / f"runs{i}")], cwd=ROOT,
                          env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"run {i}: run-sweep exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    rep = query.stats_report(db)
    rows = {(r["config"], r["concurrency"]): r for r in rep.configs.dicts()
            if r["verdict"] != "baseline"}
    winners = {w["concurrency"]: w for w in rep.winners.dicts()}
    return {"wall_s": wall, "exit": proc.returncode, "rows": rows, "winners": winners,
            "table": proc.stdout}


def _cell(r: dict | None) -> str:
    if r is None:
        return "-"
    if r["speedup"] is None:
        return r["verdict"]
    ci = (f" [{r['speedup_ci_low']:.2f}, {r['speedup_ci_high']:.2f}]"
          if r["speedup_ci_low"] is not None else "")
    return f"{r['verdict']} {r['speedup']:.2f}{ci}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sweep", type=Path, default=ROOT / "examples" / "builtin_sweep.toml")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--repeats", type=int, default=None,
                    help="Override the sweep file's repeats (the copy run is written to a "
                         "temporary directory; the results say so).")
    args = ap.parse_args()
    started = dt.datetime.now(dt.timezone.utc)
    machine, commit = _machine(), _commit()
    with tempfile.TemporaryDirectory(prefix="specwatch-agree-") as tmp:
        sweep_note = ""
        if args.repeats is not None:
            text = re.sub(r"(?m)^repeats\s*=\s*\d+", f"repeats = {args.repeats}",
                          args.sweep.read_text())
            copy = Path(tmp) / args.sweep.name
            copy.write_text(text)
            sweep_note = f", with repeats overridden to {args.repeats}"
            args.sweep, original = copy, args.sweep
        runs = []
        for i in range(args.runs):
            r = run_once(args.sweep, Path(tmp), i)
            print(f"run {i + 1}/{args.runs}: {r['wall_s']:.0f} s, exit {r['exit']}", flush=True)
            runs.append(r)
    src = original if args.repeats is not None else args.sweep
    shown = src.relative_to(ROOT) if src.is_relative_to(ROOT) else src
    keys = sorted({k for r in runs for k in r["rows"]}, key=lambda k: (k[1], k[0]))
    concs = sorted({c for r in runs for c in r["winners"]})
    verdict_rows, agree_v = [], 0
    for k in keys:
        vs = [r["rows"].get(k, {}).get("verdict") for r in runs]
        same = len(set(vs)) == 1
        agree_v += same
        flip = {"pays", "loses"} <= set(vs)
        verdict_rows.append((k, [_cell(r["rows"].get(k)) for r in runs], same, flip))
    winner_rows, agree_w = [], 0
    for c in concs:
        ws = [r["winners"].get(c, {}).get("winner") for r in runs]
        same = len(set(ws)) == 1
        agree_w += same
        winner_rows.append((c, ws, [r["winners"].get(c, {}).get("note") for r in runs], same))
    flips = sum(1 for *_, f in verdict_rows if f)
    lines = [
        "# Verdict agreement across separate runs of the example sweep",
        "",
        f"Produced {started:%Y-%m-%d %H:%M} UTC at commit {commit} by "
        f"`python benchmarks/bench_verdict_agreement.py --runs {args.runs}"
        + (f" --repeats {args.repeats}" if args.repeats is not None else "") + "` "
        f"(sweep `{shown}`{sweep_note}).",
        f"- machine: {machine}",
        "- engine weights (sha256): " + ", ".join(f"{k} {v}" for k, v in _weights().items()),
        "- wall time per run: " + ", ".join(f"{r['wall_s']:.0f} s" for r in runs),
        "",
        f"**Verdicts agree in {agree_v} of {len(keys)} (config, concurrency) cells; "
        f"pays-vs-loses flips: {flips}. Winners agree at {agree_w} of {len(concs)} "
        "concurrency levels.**",
        "",
        "| config | c | " + " | ".join(f"run {i + 1}" for i in range(len(runs))) + " | same |",
        "| --- | --- | " + " | ".join("---" for _ in runs) + " | --- |",
    ]
    for (cfg, c), cells, same, _ in verdict_rows:
        lines.append(f"| {cfg} | {c} | " + " | ".join(cells) + f" | {'yes' if same else 'NO'} |")
    lines += ["", "| c | " + " | ".join(f"winner, run {i + 1}" for i in range(len(runs)))
              + " | same |", "| --- | " + " | ".join("---" for _ in runs) + " | --- |"]
    for c, ws, notes, same in winner_rows:
        lines.append(f"| {c} | " + " | ".join(f"{w or '(none)'}: {n}" for w, n in zip(ws, notes))
                     + f" | {'yes' if same else 'NO'} |")
    lines += ["", "Cells: verdict, speedup [95% CI] (config_stats, stats.py: log-ratio t "
              "interval over the repeats, paired by interleaved block within a sweep). Timings "
              "are from the machine above; a busy one gives more `unclear`."]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "verdict_agreement.md").write_text(text)
    doc = {"commit": commit, "machine": machine, "weights": _weights(),
           "started_utc": started.isoformat(), "runs": len(runs),
           "verdicts_agree": agree_v, "cells": len(keys), "flips": flips,
           "winners_agree": agree_w, "concurrency_levels": len(concs),
           "wall_s": [r["wall_s"] for r in runs],
           "cells_detail": [{"config": k[0], "concurrency": k[1],
                             "runs": [{f: r["rows"].get(k, {}).get(f) for f in (
                                 "verdict", "speedup", "speedup_ci_low", "speedup_ci_high",
                                 "repeats")} for r in runs]} for k in keys],
           "winners_detail": [{"concurrency": c, "winners": ws, "notes": notes}
                              for c, ws, notes, _ in winner_rows]}
    (args.out / "verdict_agreement.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
