"""Output tokens/s of the built-in engine: plain decoding vs EAGLE-3 speculation, greedy, CPU or CUDA.

For each concurrency c and repetition, every configuration runs on the same prompts one after
another (plain first), so that drift hits all of them alike: at c = 1 the configurations are
interleaved per prompt; at c > 1 each configuration serves one batch of c prompts started
together. tok/s = output tokens / wall time of the requests, prefill included. Reported: tok/s
per repetition, the per-repetition speedup over plain, its median, the accept length, and
whether the output was token-identical to plain greedy decoding.

On CUDA (`--device cuda`) the decoders capture their CUDA graphs first (as a server does at
startup) and a second table compares the plain decode step's wall time through the graph path
with a bare replay of the same graph, and with the eager step (`--eager` adds eager decoders).
TF32 is off (fp32 matmuls in fp32), so greedy identity to plain is meaningful.

`--baseline-commit REV` (CPU side-by-side check): runs this protocol one repetition at a time,
alternating between the engine code of REV (extracted with `git archive` into a temp dir) and the
working tree, each in its own process on the same weights, and prints per-repetition ratios
current / baseline. The header records the commit, the device and the weight hashes.

    python benchmarks/bench_engine_speed.py [--device cpu|cuda] [--concurrency 1,4,16] [--reps 3]
        [--new-tokens 160] [--configs 2:1:3,3:1:4,...] [--eager] [--out FILE.md]
    python benchmarks/bench_engine_speed.py --device cpu --baseline-commit d24dc39 [--out FILE.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _provenance  # noqa: E402

sys.path.append(str(_provenance.ROOT))  # after PYTHONPATH: a side-by-side baseline's code wins
sys.path.append(str(_provenance.ROOT / "kernels"))  # specwatch_kernels (a bare tree has no install)

from specwatch.engine.decode import Request, SpecDecoder  # noqa: E402
from specwatch.engine.train import line_start_prompts, load_corpus  # noqa: E402

MODELS = _provenance.ROOT / "specwatch" / "engine" / "models"


def run_batch(dec: SpecDecoder, prompts, new_tokens: int, tag: str):
    """Serve `prompts` together; returns (outputs, seconds, verify steps, accepted drafts,
    decode seconds, decode steps)."""
    reqs = [Request(f"{tag}-{i}", p, new_tokens) for i, p in enumerate(prompts)]
    cuda = dec.device.type == "cuda"
    t0 = time.perf_counter()
    dec.prefill(reqs)
    if cuda:
        torch.cuda.synchronize(dec.device)
    t1, steps = time.perf_counter(), 0
    while not all(r.finished for r in reqs):
        dec.decode_step(reqs)
        steps += 1
    if cuda:
        torch.cuda.synchronize(dec.device)
    t2 = time.perf_counter()
    for r in reqs:
        dec.release(r)
    return ([r.output_ids for r in reqs], t2 - t0, sum(r.spec_verify_ct for r in reqs),
            sum(r.spec_accepted_drafts for r in reqs), t2 - t1, steps)


def build(args) -> dict[str, SpecDecoder]:
    target, draft = MODELS / "target", MODELS / "draft-eagle3"
    kw = dict(device=args.device)
    decs = {"plain": SpecDecoder(target, **kw)}
    cuda = decs["plain"].device.type == "cuda"
    if cuda and args.eager:
        decs["plain (eager)"] = SpecDecoder(target, cuda_graph=False, **kw)
    for spec in args.configs.split(","):
        s, k, n = (int(x) for x in spec.split(":"))
        decs[f"S={s} topk={k} N={n}"] = SpecDecoder(target, draft, num_steps=s, topk=k, num_draft_tokens=n, **kw)
        if cuda and args.eager and (s, k, n) == (3, 1, 4):
            decs[f"S={s} topk={k} N={n} (eager)"] = SpecDecoder(target, draft, num_steps=s, topk=k,
                                                               num_draft_tokens=n, cuda_graph=False, **kw)
    return decs


def measure(args) -> dict:
    torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    decs = build(args)
    device = decs["plain"].device
    capture_s = {}
    for name, dec in decs.items():
        if hasattr(dec, "capture_cuda_graphs"):
            t0 = time.perf_counter()
            if dec.capture_cuda_graphs():
                capture_s[name] = time.perf_counter() - t0
    train, _ = load_corpus()
    concs = [int(c) for c in args.concurrency.split(",")]
    all_prompts = line_start_prompts(train, max(max(concs), args.prompts), 64)
    for dec in decs.values():  # warm-up (first calls allocate and pick kernels)
        run_batch(dec, all_prompts[:2], 16, "warm")
    import specwatch.engine.decode as decode_mod

    result = {"device": str(device), "capture_s": capture_s, "cells": {}, "steps": {}, "engine": decode_mod.__file__}
    for c in concs:
        groups = [[p] for p in all_prompts[:args.prompts]] if c == 1 else [all_prompts[:c]]
        cell = {name: {"tok_s": [], "verify": 0, "acc": 0, "same": True, "dsec": 0.0, "dsteps": 0,
                       "psec": 0.0, "prefills": 0} for name in decs}
        for rep in range(args.reps):
            tokens = {name: 0 for name in decs}
            secs = {name: 0.0 for name in decs}
            for g, prompts in enumerate(groups):
                ref = None
                for name, dec in decs.items():  # plain first, then each config, same prompts
                    out, dt, verify, acc, dsec, dsteps = run_batch(dec, prompts, args.new_tokens, f"{rep}-{g}")
                    ref = out if ref is None else ref
                    x = cell[name]
                    x["same"] &= out == ref
                    tokens[name] += sum(len(o) for o in out)
                    secs[name] += dt
                    x["verify"] += verify
                    x["acc"] += acc
                    x["dsec"] += dsec
                    x["dsteps"] += dsteps
                    x["psec"] += dt - dsec  # prefill (and its sync) of the group's requests
                    x["prefills"] += len(prompts)
            for name in decs:
                cell[name]["tok_s"].append(tokens[name] / secs[name])
        result["cells"][str(c)] = cell
        if device.type == "cuda":  # bare replay of the bucket the plain step used (nothing is running now)
            g = decs["plain"].graphs
            bs = g.bucket(c) if g is not None else None
            row = {"bucket": bs, "step_s": cell["plain"]["dsec"] / cell["plain"]["dsteps"],
                   "replay_s": g.replay_seconds(bs) if bs else None}
            if "plain (eager)" in cell:
                row["eager_step_s"] = cell["plain (eager)"]["dsec"] / cell["plain (eager)"]["dsteps"]
            for name, dec in decs.items():
                if name.startswith("S=") and "eager" not in name and dec.graphs is not None:
                    row.setdefault("spec", {})[name] = {
                        "step_s": cell[name]["dsec"] / cell[name]["dsteps"],
                        "replay_s": dec.graphs.replay_seconds(dec.graphs.bucket(c))}
            result["steps"][str(c)] = row
    return result


def table(result: dict, baseline: dict | None = None) -> list[str]:
    rows = ["| concurrency | config | tok/s per rep | speedup per rep | median speedup | AL | prefill ms/request | identical to plain |",
            "|---|---|---|---|---|---|---|---|"]
    for c, cell in result["cells"].items():
        for name, x in cell.items():
            ratios = [a / b for a, b in zip(x["tok_s"], cell["plain"]["tok_s"])]
            v, a = x["verify"], x["acc"]
            rows.append(f"| {c} | {name} | " + " / ".join(f"{t:.0f}" for t in x["tok_s"]) + " | "
                        + " / ".join(f"{r:.2f}" for r in ratios) + f" | **{statistics.median(ratios):.2f}x** | "
                        + (f"{1 + a / v:.2f}" if v else "-") + " | "
                        + (f"{x['psec'] / x['prefills'] * 1e3:.2f}" if x.get("prefills") else "-")
                        + f" | {'yes' if x['same'] else 'NO'} |")
    return rows


def step_table(result: dict) -> list[str]:
    if not result["steps"]:
        return []
    rows = ["", "Decode step wall time (graph path, per step, decode loop only) vs a bare replay of the same graph:", "",
            "| concurrency | bucket | config | step ms | bare replay ms | step / replay | eager step ms |",
            "|---|---|---|---|---|---|---|"]
    for c, r in result["steps"].items():
        eager = f"{r['eager_step_s'] * 1e3:.3f}" if "eager_step_s" in r else "-"
        rows.append(f"| {c} | {r['bucket']} | plain | {r['step_s'] * 1e3:.3f} | {r['replay_s'] * 1e3:.3f} | "
                    f"**{r['step_s'] / r['replay_s']:.2f}x** | {eager} |")
        for name, s in r.get("spec", {}).items():
            rows.append(f"| {c} | {r['bucket']} | {name} | {s['step_s'] * 1e3:.3f} | {s['replay_s'] * 1e3:.3f} | "
                        f"{s['step_s'] / s['replay_s']:.2f}x | - |")
    if result["capture_s"]:
        rows += ["", "CUDA graph capture (all buckets) per decoder: " +
                 ", ".join(f"{k} {v:.1f} s" for k, v in result["capture_s"].items())]
    return rows


def side_by_side(args) -> list[str]:
    """Alternate one-repetition runs of the baseline commit's engine and the working tree's."""
    base = Path(tempfile.mkdtemp(prefix="sw-base-"))
    arch = subprocess.run(["git", "archive", args.baseline_commit, "specwatch", "kernels"],
                          cwd=_provenance.ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(base)], input=arch, check=True)
    runs: dict[str, list[dict]] = {"baseline": [], "current": []}
    for rep in range(args.reps):
        for which, path in (("baseline", base), ("current", _provenance.ROOT)):
            out = base / f"{which}-{rep}.json"
            # path/kernels: specwatch_kernels since issue 26 (before it, kernels/ was the package)
            env = dict(os.environ, PYTHONPATH=f"{path}{os.pathsep}{path / 'kernels'}")
            cmd = [sys.executable, __file__, "--device", args.device, "--concurrency", args.concurrency,
                   "--reps", "1", "--prompts", str(args.prompts), "--new-tokens", str(args.new_tokens),
                   "--configs", args.configs, "--threads", str(args.threads), "--json-out", str(out)]
            subprocess.run(cmd, env=env, check=True, cwd=str(path))
            runs[which].append(json.loads(out.read_text()))
            want = base if which == "baseline" else _provenance.ROOT
            if not runs[which][-1]["engine"].startswith(str(want)):
                raise SystemExit(f"{which} run imported {runs[which][-1]['engine']}, not the code under {want}")
            print(f"rep {rep} {which} done ({runs[which][-1]['engine']})", flush=True)
    rows = ["", f"CPU side by side: engine code of `{args.baseline_commit}` (baseline) vs this commit (current), "
            f"same weights, alternating processes, {args.reps} repetitions:", "",
            "| concurrency | config | baseline tok/s per rep | current tok/s per rep | current / baseline per rep | median | AL baseline / current | identical outputs |",
            "|---|---|---|---|---|---|---|---|"]
    for c in runs["current"][0]["cells"]:
        for name in runs["current"][0]["cells"][c]:
            b = [r["cells"][c][name]["tok_s"][0] for r in runs["baseline"]]
            n = [r["cells"][c][name]["tok_s"][0] for r in runs["current"]]
            ratios = [x / y for x, y in zip(n, b)]

            def al(rs):
                v = sum(r["cells"][c][name]["verify"] for r in rs)
                return f"{1 + sum(r['cells'][c][name]['acc'] for r in rs) / v:.3f}" if v else "-"
            same = all(r["cells"][c][name]["same"] for r in runs["baseline"] + runs["current"])
            rows.append(f"| {c} | {name} | " + " / ".join(f"{x:.0f}" for x in b) + " | "
                        + " / ".join(f"{x:.0f}" for x in n) + " | " + " / ".join(f"{r:.2f}" for r in ratios)
                        + f" | **{statistics.median(ratios):.2f}x** | {al(runs['baseline'])} / {al(runs['current'])} | "
                        + ("yes" if same else "NO") + " |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=12, help="prompts per repetition at concurrency 1")
    ap.add_argument("--new-tokens", type=int, default=160)
    ap.add_argument("--configs", default="2:1:3,3:1:4,4:1:5,3:2:6", help="spec configs S:K:N")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eager", action="store_true", help="CUDA: add eager (no graph) plain and S=3 chain decoders")
    ap.add_argument("--baseline-commit", default=None, help="CPU side-by-side against this commit's engine code")
    ap.add_argument("--out", default=None, help="also write the markdown report here")
    ap.add_argument("--json-out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.json_out:  # one process of a side-by-side run
        Path(args.json_out).write_text(json.dumps(measure(args)))
        return
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device if args.device != "cuda" else "cuda:0")
    head = ["# Built-in engine speed: plain vs EAGLE-3 (greedy)", ""] + _provenance.lines(dev, MODELS)
    head += [f"- protocol: {args.prompts} prompts x 64 bytes (c=1 interleaved per prompt; c>1 one batch), "
             f"{args.new_tokens} new tokens, {args.reps} repetitions, {args.threads} torch threads; "
             f"`{' '.join(sys.argv[1:])}`", ""]
    if args.baseline_commit:
        body = side_by_side(args)
    else:
        res = measure(args)
        body = table(res) + step_table(res)
    text = "\n".join(head + body) + "\n"
    print(text, flush=True)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
