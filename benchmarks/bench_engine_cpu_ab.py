"""CPU speed of the engine code of another commit vs this tree's, in ONE process, interleaved.

`git archive REV specwatch kernels` is extracted to a temp dir and its packages renamed
(`specwatch_old`, `kernels_old`, imports rewritten), so both versions' SpecDecoders load the same
committed weights side by side; every (config, prompt batch) is served by both decoders, `--reps`
times, the old one first on even runs and the new one first on odd runs (an order effect cancels).
Reported per config and concurrency: median tok/s of each and the median and range of the per-run
ratios new / old. Greedy outputs of the two must be identical. Use it to check that a change leaves
the CPU path's speed alone (the 2-core box is noisy: read the range).

    python benchmarks/bench_engine_cpu_ab.py --baseline-commit d24dc39 [--reps 5] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _provenance  # noqa: E402

sys.path.append(str(_provenance.ROOT))
sys.path.append(str(_provenance.ROOT / "kernels"))  # specwatch_kernels (a bare tree has no install)

from specwatch.engine.decode import Request, SpecDecoder  # noqa: E402
from specwatch.engine.train import line_start_prompts, load_corpus  # noqa: E402

MODELS = _provenance.ROOT / "specwatch" / "engine" / "models"
CONFIGS = {"plain": None, "S=3 topk=1 N=4": (3, 1, 4), "S=3 topk=2 N=6": (3, 2, 6)}


def old_package(rev: str) -> Path:
    """Extract REV's specwatch/ and its kernels as specwatch_old/ and specwatch_kernels_old/ (a REV
    before issue 26: kernels_old/); returns the dir."""
    base = Path(tempfile.mkdtemp(prefix="sw-ab-"))
    data = subprocess.run(["git", "archive", rev, "specwatch", "kernels"], cwd=_provenance.ROOT,
                          capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(base)], input=data, check=True)
    (base / "specwatch").rename(base / "specwatch_old")
    if (base / "kernels" / "specwatch_kernels").is_dir():
        (base / "kernels" / "specwatch_kernels").rename(base / "specwatch_kernels_old")
        shutil.rmtree(base / "kernels")
    else:
        (base / "kernels").rename(base / "kernels_old")
    for f in base.rglob("*.py"):
        s = f.read_text()
        s = re.sub(r"\bspecwatch\b(?=[. ])", "specwatch_old", s)
        s = re.sub(r"\bspecwatch_kernels\b(?=[. ])", "specwatch_kernels_old", s)
        s = re.sub(r"\bkernels\b(?=[. ])", "kernels_old", s)
        f.write_text(s)
    return base


def run(dec, prompts, new_tokens):
    reqs = [Request(f"r{i}", list(p), new_tokens) for i, p in enumerate(prompts)]
    t0 = time.perf_counter()
    dec.prefill(reqs)
    while not all(r.finished for r in reqs):
        dec.decode_step(reqs)
    dt = time.perf_counter() - t0
    for r in reqs:
        dec.release(r)
    return [r.output_ids for r in reqs], sum(len(r.output_ids) for r in reqs) / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline-commit", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=3, help="prompts per repetition at concurrency 1")
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(old_package(args.baseline_commit)))
    from specwatch_old.engine.decode import SpecDecoder as OldDecoder

    target, draft = MODELS / "target", MODELS / "draft-eagle3"
    decs = {}
    for name, cfg in CONFIGS.items():
        kw = {} if cfg is None else dict(num_steps=cfg[0], topk=cfg[1], num_draft_tokens=cfg[2])
        d = None if cfg is None else draft
        decs[name] = (OldDecoder(target, d, **kw), SpecDecoder(target, d, **kw))
    train, _ = load_corpus()
    concs = [int(c) for c in args.concurrency.split(",")]
    prompts = line_start_prompts(train, max(max(concs), args.prompts), 64)
    for old, new in decs.values():
        run(old, prompts[:1], 8)
        run(new, prompts[:1], 8)
    rows = ["| concurrency | config | old tok/s (median) | new tok/s (median) | new / old per run: median | range | runs | identical |",
            "|---|---|---|---|---|---|---|---|"]
    for c in concs:
        groups = [[p] for p in prompts[:args.prompts]] if c == 1 else [prompts[:c]]
        for name, (old, new) in decs.items():
            o, n, same = [], [], True
            for _ in range(args.reps):
                for g in groups:
                    # alternate which decoder serves first, so that an order effect (the second
                    # run finding warm caches, or the first a cooler CPU) cancels over the runs
                    if len(o) % 2 == 0:  # run number: old first on even runs
                        out_o, t_o = run(old, g, args.new_tokens)
                        out_n, t_n = run(new, g, args.new_tokens)
                    else:
                        out_n, t_n = run(new, g, args.new_tokens)
                        out_o, t_o = run(old, g, args.new_tokens)
                    same &= out_o == out_n
                    o.append(t_o)
                    n.append(t_n)
            r = [b / a for a, b in zip(o, n)]
            rows.append(f"| {c} | {name} | {statistics.median(o):.0f} | {statistics.median(n):.0f} | "
                        f"**{statistics.median(r):.3f}** | {min(r):.2f}-{max(r):.2f} | {len(r)} | {'yes' if same else 'NO'} |")
            print(rows[-1], flush=True)
    head = ["# Built-in engine on CPU: this tree vs `%s`, one process, interleaved" % args.baseline_commit, ""]
    head += _provenance.lines(torch.device("cpu"), MODELS)
    head += [f"- protocol: `{' '.join(sys.argv[1:])}`; tok/s per request batch, prefill included", ""]
    text = "\n".join(head + rows) + "\n"
    print("\n" + text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
