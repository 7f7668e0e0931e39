"""Acceptance of the built-in EAGLE-3 engine by served aux layer ids and draft steps.

Prints accept length (AL = tokens per verify step = 1 + mean accepted drafts) for each served
id list x speculative_num_steps (chain, topk=1), step-1 acceptance (fraction of verify steps
whose first draft was accepted), token mismatches against plain greedy decoding, and the
distinct-8-gram fraction of the greedy outputs, per output and pooled (a looping target makes every AL meaningless; the
project gates on >= 0.5). Prompts: 64-byte excerpts starting at line starts, spread over the
training split (engine.md §4). All prompts run as one batch: greedy output does not depend on it.

    python benchmarks/bench_engine_accept.py [--steps 1,2,3,4,5] [--prompts 12] [--new-tokens 160]
"""

from __future__ import annotations

import argparse
import time

import torch

from specwatch.engine.decode import Request, SpecDecoder
from specwatch.engine.model import models_dir
from specwatch.engine.train import line_start_prompts, load_corpus

VARIANTS = {  # served ids -> label; the draft was trained on [1,3,5]
    "correct [1,3,5]": (1, 3, 5),
    "every id +1 [2,4,6]": (2, 4, 6),
    "every id -1 [0,2,4]": (0, 2, 4),
    "slot shift [-1,1,3]": (-1, 1, 3),
    "aux zeroed (floor)": None,
}


def generate(dec: SpecDecoder, prompts, new_tokens: int):
    reqs = [Request(str(i), p, new_tokens) for i, p in enumerate(prompts)]
    dec.prefill(reqs)
    while not all(r.finished for r in reqs):
        dec.decode_step(reqs)
    for r in reqs:
        dec.release(r)
    return reqs


def distinct_ngrams(outputs, n: int = 8) -> tuple[float, float]:
    """(mean over outputs of distinct/all n-grams within the output, the same pooled over all
    outputs). The first measures looping; the second also counts phrases shared across prompts."""
    per = [len({tuple(o[i:i + n]) for i in range(len(o) - n + 1)}) / max(len(o) - n + 1, 1) for o in outputs]
    grams = [tuple(o[i:i + n]) for o in outputs for i in range(len(o) - n + 1)]
    return sum(per) / len(per), len(set(grams)) / max(len(grams), 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", default="1,2,3,4,5")
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--new-tokens", type=int, default=160)
    ap.add_argument("--tree", default="3:2:6,3:4:8", help="extra tree configs S:K:N with correct ids")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target, draft = models_dir() / "target", models_dir() / "draft-eagle3"
    train, _ = load_corpus()
    prompts = line_start_prompts(train, args.prompts, 64)
    t0 = time.time()
    ref = [r.output_ids for r in generate(SpecDecoder(target), prompts, args.new_tokens)]
    per, pooled = distinct_ngrams(ref)
    print(f"greedy outputs: distinct 8-grams {per:.3f} per output (gate >= 0.5), {pooled:.3f} pooled; "
          f"{len(prompts)} prompts x {args.new_tokens} tokens")
    print(f"example: {bytes(prompts[0]).decode(errors='replace')!r} -> "
          f"{bytes(ref[0][:100]).decode(errors='replace')!r}\n")
    steps = [int(s) for s in args.steps.split(",")]
    rows = []
    for label, ids in VARIANTS.items():
        cells = []
        for s in steps:
            dec = SpecDecoder(target, draft, num_steps=s, topk=1, aux_layer_ids=ids)
            dec.zero_aux = ids is None
            reqs = generate(dec, prompts, args.new_tokens)
            cells.append(_cell(reqs, ref))
        rows.append((label, cells))
    print("| served ids | " + " | ".join(f"S={s}" for s in steps) + " | step-1 acceptance | mismatched prompts |")
    print("|---|" + "---|" * (len(steps) + 2))
    for label, cells in rows:
        print(f"| {label} | " + " | ".join(f"{c['al']:.3f}" for c in cells)
              + f" | {min(c['step1'] for c in cells):.2f}-{max(c['step1'] for c in cells):.2f}"
              + f" | {sum(c['mismatch'] for c in cells)} |")
    base = {s: c["al"] for s, c in zip(steps, rows[0][1])}
    shift = {s: c for s, c in zip(steps, rows[3][1])}
    corr = {s: c for s, c in zip(steps, rows[0][1])}
    print("\nslot shift vs correct: " + ", ".join(
        f"S={s}: AL ratio {shift[s]['al'] / base[s]:.2f}, step-1 drop {corr[s]['step1'] - shift[s]['step1']:.2f}"
        for s in steps))
    if args.tree:
        print("\n| tree config (correct ids) | AL | step-1 acceptance | mismatched prompts |\n|---|---|---|---|")
        for spec in args.tree.split(","):
            s, k, n = (int(x) for x in spec.split(":"))
            c = _cell(generate(SpecDecoder(target, draft, num_steps=s, topk=k, num_draft_tokens=n), prompts,
                               args.new_tokens), ref)
            print(f"| S={s} topk={k} N={n} | {c['al']:.3f} | {c['step1']:.2f} | {c['mismatch']} |")
    print(f"\n({time.time() - t0:.0f} s)")


def _cell(reqs, ref) -> dict:
    verify = sum(r.spec_verify_ct for r in reqs)
    accepted = sum(r.spec_accepted_drafts for r in reqs)
    first = sum(sum(r.spec_accept_histogram[1:]) for r in reqs)
    return {"al": 1 + accepted / verify, "step1": first / verify,
            "mismatch": sum(r.output_ids != o for r, o in zip(reqs, ref))}


if __name__ == "__main__":
    main()
