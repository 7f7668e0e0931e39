"""`specwatch ingest` of one generated log under environment variants (or other trees),
interleaved with `grep -c` in every repeat: which setting of a knob is faster on this host.

Each variant is `LABEL=VAR=VALUE[,VAR=VALUE...]`; `CWD=PATH` runs that variant's `specwatch`
from another tree (an exported commit). The variant `default` (nothing set) is always first, and
each other variant's ratio to it is printed per repeat, with the median and range.

    python benchmarks/ingest_env_ab.py --lines 2000000 --repeats 7 st16=SPECWATCH_SCAN_THREADS=16
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


def parse_variant(spec: str) -> tuple[str, dict[str, str]]:
    label, sep, rest = spec.partition("=")
    if not sep or not label:
        raise SystemExit(f"variant {spec!r}: expected LABEL=VAR=VALUE[,VAR=VALUE...]")
    env = {}
    for kv in filter(None, rest.split(",")):
        k, sep, v = kv.partition("=")
        if not sep:
            raise SystemExit(f"variant {spec!r}: {kv!r} is not VAR=VALUE")
        env[k] = v
    return label, env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="*", help="LABEL=VAR=VALUE[,VAR=VALUE...]")
    ap.add_argument("--lines", type=int, default=2_000_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--log", type=Path, default=None, help="an existing log instead of generating")
    args = ap.parse_args()
    variants = {"default": {}}
    variants.update(parse_variant(v) for v in args.variants)
    with tempfile.TemporaryDirectory() as d:
        log = args.log or Path(d) / "gen.log"
        if args.log is None:
            generate(log, args.lines)
        db = Path(d) / "ab.duckdb"
        greps: list[float] = []
        walls: dict[str, list[float]] = {k: [] for k in variants}
        rss: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(args.repeats):
            greps.append(run_measured(["grep", "-c", "Decode batch", str(log)])[0])
            for label, env in variants.items():
                for p in (db, Path(f"{db}.wal")):
                    p.unlink(missing_ok=True)
                e = dict(env)
                cwd = e.pop("CWD", None) or ROOT
                wall, _, peak = run_measured([sys.executable, "-m", "specwatch.cli", "ingest",
                                              str(log), "--db", str(db)],
                                             env={**os.environ, **e}, cwd=cwd)
                walls[label].append(wall)
                rss[label].append(peak)
    print(f"commit {commit()}, device: {cpus()}, no weights; Python {sys.version.split()[0]}")
    print(f"grep -c: {' '.join(f'{x:.3f}' for x in greps)}; median {statistics.median(greps):.3f}")
    for label, ws in walls.items():
        g = [w / x for w, x in zip(ws, greps)]
        print(f"{label:<12} {' '.join(f'{w:.2f}' for w in ws)}; median {statistics.median(ws):.3f}"
              f" s, {statistics.median(g):.1f}x grep ({min(g):.1f}-{max(g):.1f}), peak RSS "
              f"{statistics.median(rss[label]):.0f} MB")
    for label, ws in walls.items():
        if label == "default":
            continue
        r = [w / b for w, b in zip(ws, walls["default"])]
        faster = sum(x < 1 for x in r)
        print(f"{label} / default per repeat: {' '.join(f'{x:.3f}' for x in r)}; median "
              f"{statistics.median(r):.3f}, range {min(r):.3f}-{max(r):.3f}, faster in {faster} "
              f"of {len(r)}")


if __name__ == "__main__":
    main()
