"""Output tokens/s of the built-in engine: plain decoding vs EAGLE-3 speculation, CPU, greedy.

For each concurrency c and repetition, every configuration runs on the same prompts one after
another (plain first), so that the noisy 2-core VM's drift hits all of them alike: at c = 1 the
configurations are interleaved per prompt; at c > 1 each configuration serves one batch of c
prompts started together. tok/s = output tokens / wall time of the requests, prefill included.
Reported: tok/s per repetition, the per-repetition speedup over plain, its median, the accept
length, and whether the output was token-identical to plain greedy decoding.

    python benchmarks/bench_engine_speed.py [--concurrency 1,4,16] [--reps 3] [--new-tokens 160]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from specwatch.engine.decode import Request, SpecDecoder
from specwatch.engine.model import models_dir
from specwatch.engine.train import line_start_prompts, load_corpus


def run_batch(dec: SpecDecoder, prompts, new_tokens: int, tag: str):
    """Serve `prompts` together; returns (outputs, seconds, verify steps, accepted drafts)."""
    reqs = [Request(f"{tag}-{i}", p, new_tokens) for i, p in enumerate(prompts)]
    t0 = time.perf_counter()
    dec.prefill(reqs)
    while not all(r.finished for r in reqs):
        dec.decode_step(reqs)
    dt = time.perf_counter() - t0
    for r in reqs:
        dec.release(r)
    return ([r.output_ids for r in reqs], dt, sum(r.spec_verify_ct for r in reqs),
            sum(r.spec_accepted_drafts for r in reqs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=12, help="prompts per repetition at concurrency 1")
    ap.add_argument("--new-tokens", type=int, default=160)
    ap.add_argument("--configs", default="2:1:3,3:1:4,4:1:5,3:2:6", help="spec configs S:K:N")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target, draft = models_dir() / "target", models_dir() / "draft-eagle3"
    decs = {"plain": SpecDecoder(target)}
    for spec in args.configs.split(","):
        s, k, n = (int(x) for x in spec.split(":"))
        decs[f"S={s} topk={k} N={n}"] = SpecDecoder(target, draft, num_steps=s, topk=k, num_draft_tokens=n)
    train, _ = load_corpus()
    concs = [int(c) for c in args.concurrency.split(",")]
    all_prompts = line_start_prompts(train, max(max(concs), args.prompts), 64)
    # warm-up (first calls allocate and pick kernels)
    for name, dec in decs.items():
        run_batch(dec, all_prompts[:2], 16, "warm")
    print(f"torch threads {torch.get_num_threads()}, {args.new_tokens} new tokens per request, greedy\n")
    print("| concurrency | config | tok/s per rep | speedup per rep | median speedup | AL | identical |")
    print("|---|---|---|---|---|---|---|")
    for c in concs:
        groups = [[p] for p in all_prompts[:args.prompts]] if c == 1 else [all_prompts[:c]]
        tok_s = {name: [] for name in decs}
        al = {name: [0, 0] for name in decs}
        same = {name: True for name in decs}
        for rep in range(args.reps):
            tokens = {name: 0 for name in decs}
            secs = {name: 0.0 for name in decs}
            for g, prompts in enumerate(groups):
                ref = None
                for name, dec in decs.items():  # plain first, then each spec config, same prompts
                    out, dt, verify, acc = run_batch(dec, prompts, args.new_tokens, f"{rep}-{g}")
                    ref = out if ref is None else ref
                    same[name] &= out == ref
                    tokens[name] += sum(len(o) for o in out)
                    secs[name] += dt
                    al[name][0] += verify
                    al[name][1] += acc
            for name in decs:
                tok_s[name].append(tokens[name] / secs[name])
        for name in decs:
            ratios = [a / b for a, b in zip(tok_s[name], tok_s["plain"])]
            v, a = al[name]
            print(f"| {c} | {name} | " + " / ".join(f"{x:.0f}" for x in tok_s[name])
                  + " | " + " / ".join(f"{r:.2f}" for r in ratios)
                  + f" | **{statistics.median(ratios):.2f}x** | " + (f"{1 + a / v:.2f}" if v else "-")
                  + f" | {'yes' if same[name] else 'NO'} |")


if __name__ == "__main__":
    main()
