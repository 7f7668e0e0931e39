"""Greedy token identity of the built-in engine across kernels and devices, plus GPU tok/s.

For each speculative config (chain S=3 topk=1 N=4, tree S=3 topk=4 N=8) and concurrency
(1: every prompt served alone; c > 1: batches of c prompts started together) it decodes the
same held-out prompts greedily as
  (a) SpecDecoder on --device (cuda) with the Triton kernels (specwatch_kernels.ops' default there) and
      CUDA graphs of the decode steps (captured for every bucket before the runs),
  (b) the same decoder with SPECWATCH_KERNELS=torch (torch references on the GPU; these read back
      to the host, so its steps run eagerly, without graphs),
  (c) plain decoding (no draft) on --device (CUDA graphs),
  (d) SpecDecoder on CPU with the references, and (e) plain decoding on CPU,
and prints, per pair, how many sequences differ and how many output tokens lie at or after the
first divergence ("diff tok (seqs)"), the accept length (1 + accepted drafts / verify steps)
and output tok/s on the device (prefill included; best of --reps after a warm-up). For each
divergence it recomputes the target's logits in fp64 on CPU over the common prefix and prints
the fp64 top-2 logit gap and which variant picked the fp64 argmax, so that a difference can be
told apart as rounding at a near-tie or a bug. TF32 is switched off (fp32 matmuls in fp32).

    python benchmarks/gpu_engine_identity.py [--device cuda] [--prompts 8] [--new-tokens 128]
        [--concurrency 1,8] [--reps 2] [--out table.md]

`--device cpu` runs the same script without a GPU (a smoke test: (a) = (b) there).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _provenance  # noqa: E402

sys.path.append(str(_provenance.ROOT))  # a bare tree (the GPU machine's copy) has no install
sys.path.append(str(_provenance.ROOT / "kernels"))  # specwatch_kernels

from specwatch.engine.decode import Request, SpecDecoder  # noqa: E402
from specwatch.engine.model import load_target, models_dir  # noqa: E402
from specwatch.engine.train import line_start_prompts, load_corpus  # noqa: E402

CONFIGS = {"chain S=3 K=1 N=4": (3, 1, 4), "tree S=3 K=4 N=8": (3, 4, 8)}
PAIRS = [("a", "b"), ("a", "c"), ("b", "c"), ("a", "d"), ("c", "e"), ("d", "e")]


def kernels(mode: str) -> None:
    """Select specwatch_kernels.ops' dispatch for the next calls ('' = default: Triton on CUDA tensors)."""
    if mode:
        os.environ["SPECWATCH_KERNELS"] = mode
    else:
        os.environ.pop("SPECWATCH_KERNELS", None)


def serve(dec: SpecDecoder, prompts, new_tokens: int, conc: int, tag: str):
    """Decode `prompts` in batches of `conc`; returns (outputs, seconds, verify steps, accepted)."""
    outs, verify, accepted, secs = [], 0, 0, 0.0
    for start in range(0, len(prompts), conc):
        reqs = [Request(f"{tag}-{start + i}", list(p), new_tokens) for i, p in enumerate(prompts[start:start + conc])]
        t0 = time.perf_counter()
        dec.prefill(reqs)
        while not all(r.finished for r in reqs):
            dec.decode_step(reqs)
        if dec.device.type == "cuda":
            torch.cuda.synchronize(dec.device)
        secs += time.perf_counter() - t0
        for r in reqs:
            dec.release(r)
            outs.append(r.output_ids)
            verify += r.spec_verify_ct
            accepted += r.spec_accepted_drafts
    return outs, secs, verify, accepted


def run_variant(dec, mode, prompts, new_tokens, conc, reps, tag):
    """Outputs, best tok/s over `reps`, accept length; checks the reps agree (determinism)."""
    kernels(mode)
    serve(dec, prompts[:2], 8, min(conc, 2), f"warm-{tag}")  # compile / pick kernels
    best, first = 0.0, None
    for rep in range(reps):
        outs, secs, verify, acc = serve(dec, prompts, new_tokens, conc, f"{tag}-{rep}")
        best = max(best, sum(map(len, outs)) / secs)
        if first is None:
            first = (outs, verify, acc)
        elif outs != first[0]:
            raise SystemExit(f"{tag}: outputs differ between repetitions (non-deterministic decoding)")
    kernels("")
    outs, verify, acc = first
    return {"outs": outs, "tok_s": best, "al": (1 + acc / verify) if verify else None}


def diff(x: list[list[int]], y: list[list[int]]):
    """(differing sequences, tokens at/after the first divergence, [(prompt, position)])."""
    seqs, toks, where = 0, 0, []
    for i, (u, v) in enumerate(zip(x, y)):
        if u != v:
            j = next((k for k, (s, t) in enumerate(zip(u, v)) if s != t), min(len(u), len(v)))
            seqs, toks = seqs + 1, toks + max(len(u), len(v)) - j
            where.append((i, j))
    return seqs, toks, where


@torch.inference_mode()
def near_tie(target64, prompt: list[int], prefix: list[int]) -> tuple[float, int]:
    """fp64 CPU (top-1 minus top-2 logit, argmax) after prompt + prefix (cache-free forward)."""
    ids = torch.tensor([prompt + prefix])
    logits, _ = target64(ids, torch.arange(ids.shape[1])[None])
    top = torch.topk(logits[0, -1], 2)
    return float(top.values[0] - top.values[1]), int(top.indices[0])


def env_lines(device: torch.device) -> list[str]:
    return _provenance.lines(device, models_dir())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="device for (a), (b), (c); default cuda")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out", default=None, help="also write the markdown report here")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    target_path, draft_path = models_dir() / "target", models_dir() / "draft-eagle3"
    _, held_out = load_corpus()
    prompts = line_start_prompts(held_out, args.prompts, 64)
    concs = [int(c) for c in args.concurrency.split(",")]

    t_load = time.perf_counter()
    plain = {"c": SpecDecoder(target_path, device=args.device), "e": SpecDecoder(target_path)}
    device = plain["c"].device
    spec = {name: (SpecDecoder(target_path, draft_path, num_steps=s, topk=k, num_draft_tokens=n, device=device),
                   SpecDecoder(target_path, draft_path, num_steps=s, topk=k, num_draft_tokens=n))
            for name, (s, k, n) in CONFIGS.items()}
    for dec in [plain["c"]] + [d for d, _ in spec.values()]:
        dec.capture_cuda_graphs()
    print(f"loaded decoders and captured graphs in {time.perf_counter() - t_load:.1f} s", flush=True)
    target64 = load_target(target_path).double()

    report = [f"# Built-in engine: greedy identity across kernels and devices ({device})", ""]
    report += env_lines(device)
    report += [f"- {len(prompts)} held-out prompts x 64 bytes, {args.new_tokens} new tokens, greedy; "
               f"tok/s = best of {args.reps} after a warm-up, prefill included", "",
               "(a) device + Triton kernels, (b) device + SPECWATCH_KERNELS=torch, (c) device plain, "
               "(d) CPU + references, (e) CPU plain. Cells: diff tokens (differing sequences).", ""]
    head = "| config | conc | " + " | ".join(f"{x} vs {y}" for x, y in PAIRS) + \
        " | AL (a) | AL (b) | AL (d) | tok/s (a) | tok/s (b) | tok/s (c) |"
    rows, notes = [head, "|" + " --- |" * (head.count("|") - 1)], []
    for conc in concs:
        res = {}
        for key, dec in plain.items():
            res[key] = run_variant(dec, "", prompts, args.new_tokens, conc, args.reps if key == "c" else 1,
                                   f"{key}{conc}")
        for name, (dev_dec, cpu_dec) in spec.items():
            res["a"] = run_variant(dev_dec, "", prompts, args.new_tokens, conc, args.reps, f"a{conc}")
            res["b"] = run_variant(dev_dec, "torch", prompts, args.new_tokens, conc, args.reps, f"b{conc}")
            res["d"] = run_variant(cpu_dec, "torch", prompts, args.new_tokens, conc, 1, f"d{conc}")
            cells = []
            for x, y in PAIRS:
                seqs, toks, where = diff(res[x]["outs"], res[y]["outs"])
                cells.append(f"{toks} ({seqs})")
                for i, j in where:
                    u, v = res[x]["outs"][i], res[y]["outs"][i]
                    gap, best = near_tie(target64, prompts[i], u[:j])
                    pick = x if u[j] == best else y if v[j] == best else "neither"
                    notes.append(f"- {name}, conc {conc}, {x} vs {y}: prompt {i} diverges at token {j} "
                                 f"({u[j]} vs {v[j]}); fp64 top-2 gap {gap:.3g}, fp64 argmax {best} = {pick}")
            al = [res[k]["al"] for k in "abd"]
            rows.append(f"| {name} | {conc} | " + " | ".join(cells) + " | " +
                        " | ".join(f"{v:.3f}" for v in al) + " | " +
                        " | ".join(f"{res[k]['tok_s']:.0f}" for k in "abc") + " |")
            print(rows[-1], flush=True)
    report += rows + ["", "Divergences:" if notes else "Divergences: none."] + notes
    text = "\n".join(report) + "\n"
    print("\n" + text, flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
