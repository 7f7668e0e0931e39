"""Benchmark the Triton drafting kernels against the torch paths SGLang runs today (CUDA only).

For each kernel family and shape: bytes that must move, the HBM floor at the measured copy
bandwidth, and the median time of
  torch eager (triton.testing.do_bench: L2 flushed, launch gaps included),
  torch eager captured in a CUDA graph (do_bench_cudagraph: the production-like number),
  torch.compile of the same path, in a graph (a subset of shapes: compiles are slow),
  the Triton kernel eager and in a graph;
plus exactness of the Triton output against the torch reference on the same inputs.
Not a test: speed targets are read off the table (see benchmarks/results/kernels_h200.md).

verify_tree baselines: "torch" = `torch.argmax` alone (what SGLang's greedy verify spends on the
argmax, without its walk); "torch.argmax + walk launch" = torch.argmax followed by a separate walk
kernel, which is the shape of what SGLang runs (argmax, then sgl_kernel `verify_tree_greedy`, one CUDA
thread per request). sgl_kernel cannot be installed on the GPU box, so our own `_walk_kernel` stands
in for its walk; a torch-ops port of the walk would be dozens of graph nodes and not a fair stand-in
for one CUDA kernel. The fair comparison is against the second column; the target "never slower
than argmax alone" is read off the first.
--variants times the candidate designs (split counts, tiles, warps, fused vs two-launch / argmax +
walk) per shape in graph and prints the winner per shape: the defaults are the tables
TOPK_CONFIG (kernels/_draft_topk_triton.py) and VERIFY_DISPATCH (kernels/_verify_tree_triton.py).

Example:
    PYTHONUNBUFFERED=1 python benchmarks/bench_kernels.py --out results.md
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402
from triton.testing import do_bench, do_bench_cudagraph  # noqa: E402

from kernels import AcceptCounters  # noqa: E402
from kernels._aux_stats_triton import aux_stats_triton  # noqa: E402
from kernels._draft_topk_triton import draft_topk_triton  # noqa: E402
from kernels._select_tree_triton import organize_triton, select_tree_triton  # noqa: E402
import kernels._draft_topk_triton as DT  # noqa: E402
import kernels._verify_tree_triton as VT  # noqa: E402
from kernels._verify_tree_triton import verify_tree_triton  # noqa: E402
from kernels.aux_stats import aux_stats_reference  # noqa: E402
from kernels.draft_topk import draft_topk_reference  # noqa: E402
from kernels.select_tree import build_tree_reference, organize_reference, select_tree_reference  # noqa: E402
from kernels.verify_tree import verify_tree_reference  # noqa: E402

DEV = torch.device("cuda")
ROWS: list[dict] = []


# ---- the SGLang paths, ported faithfully (torch.topk and all) ----

def sglang_draft_topk(logits, k, hot):
    """eagle_worker: probs = softmax(logits.float()); fast_topk; hot_token_id[idx]."""
    probs = torch.softmax(logits.float(), dim=-1)
    if k == 1:
        p, i = torch.max(probs, dim=-1, keepdim=True)
    else:
        p, i = torch.topk(probs, k, dim=-1)
    return p, hot[i]


def sglang_select(i, topk_p, topk_index, hidden, scores, topk):
    """spec_utils.select_top_k_tokens for i >= 1 (fast_topk = torch.topk)."""
    expand = torch.mul(scores.unsqueeze(2), topk_p.reshape(-1, topk, topk))
    cs_p, cs_idx = torch.topk(expand.flatten(start_dim=1), topk, dim=-1)
    flat = topk_index.reshape(-1, topk ** 2)
    ids = torch.gather(flat, index=cs_idx, dim=1).flatten()
    sel = cs_idx.flatten() // topk + torch.arange(0, hidden.shape[0], step=topk, device=hidden.device).repeat_interleave(topk)
    return ids, hidden[sel, :], cs_p, (expand, flat, cs_idx + (topk ** 2 * (i - 1) + topk))


def sglang_organize(score_list, token_list, parents_list, n):
    """eagle_utils.organize_draft_results."""
    scores = torch.cat(score_list, dim=1).flatten(1)
    tokens = torch.cat(token_list, dim=1)
    top = torch.topk(scores, n - 1, dim=-1).indices
    top = torch.sort(top).values
    return torch.cat(parents_list[:-1], dim=1), top, torch.gather(tokens, index=top, dim=1)


def aux_stats_naive(aux, c=3):
    """What one writes by hand in eager torch (no NaN handling): the 'eager torch' baseline."""
    x = aux.float().view(aux.shape[0], c, -1)
    ms = x.pow(2).mean(dim=(0, 2))
    return ms, ms.sqrt(), x.abs().amax(dim=(0, 2)), (~torch.isfinite(x)).sum(dim=(0, 2)), x.mean(dim=(0, 2))


# ---- timing ----

def t_eager(fn) -> float:
    return do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e3


def t_graph(fn) -> float:
    fn()
    torch.cuda.synchronize()
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


def measure_copy_bw() -> float:
    """Bytes read + written per second of a 2 GiB device-to-device copy."""
    a = torch.empty(2**30, dtype=torch.uint8, device=DEV)
    b = torch.empty_like(a)
    ms = do_bench(lambda: b.copy_(a), warmup=5, rep=50, return_mode="median")
    del a, b
    return 2 * 2**30 / (ms * 1e-3)


def row(kernel, shape, dtype, nbytes, bw, times: dict, exact: str):
    floor_us = nbytes / bw * 1e6
    tri = times.get("triton_graph")
    base = times.get("torch_graph")
    r = dict(kernel=kernel, shape=shape, dtype=dtype, bytes=nbytes, floor_us=floor_us, exact=exact, **times)
    r["pct_floor"] = 100 * floor_us / tri if tri else None
    r["speedup_graph"] = base / tri if base and tri else None
    alt = times.get("alt_graph")
    r["speedup_alt"] = alt / tri if alt and tri else None
    ROWS.append(r)
    f = lambda v: "-" if v is None else f"{v:.1f}"
    print(f"{kernel:12s} {shape:34s} {dtype:5s} floor {floor_us:7.2f}  torch e/g {f(times.get('torch_eager')):>7s}/"
          f"{f(base):>7s}  compile_g {f(times.get('compile_graph')):>6s}  triton e/g {f(times.get('triton_eager')):>6s}/"
          f"{f(tri):>6s}  {f(r['speedup_graph']):>5s}x  {f(r['pct_floor']):>5s}%  {exact}"
          + (f"  | argmax+walk g {alt:.1f} ({r['speedup_alt']:.2f}x)" if alt else ""), flush=True)


# ---- per-family benchmarks ----

def bench_draft_topk(bw, compile_shapes, quick):
    g = torch.Generator(device=DEV).manual_seed(0)
    shapes = [(b, k, v) for v in (32000, 128256, 163840) for b in (1, 8, 64) for k in (1, 4, 8)]
    if quick:
        shapes = [(1, 1, 32000), (64, 8, 163840)]
    extra_fp32 = {(1, 4, 32000), (8, 4, 128256), (64, 8, 32000), (64, 8, 163840)}
    for b, k, v in shapes:
        for dtype in (torch.bfloat16, torch.float32):
            if dtype == torch.float32 and (b, k, v) not in extra_fp32:
                continue
            r = b * k
            logits = torch.randn(r, v, device=DEV, generator=g).mul_(4).to(dtype)
            hot = (torch.randint(0, 100, (v,), device=DEV, generator=g) + torch.arange(v, device=DEV))
            p, i = draft_topk_triton(logits, k, hot)
            p_ref, i_ref = draft_topk_reference(logits, k, hot)
            ok = torch.equal(i, i_ref) and torch.allclose(p, p_ref, rtol=1e-5, atol=1e-7)
            _, si = sglang_draft_topk(logits, k, hot)
            same_set = torch.equal(si.sort(1).values, i.sort(1).values)
            times = dict(
                torch_eager=t_eager(lambda: sglang_draft_topk(logits, k, hot)),
                torch_graph=t_graph(lambda: sglang_draft_topk(logits, k, hot)),
                triton_eager=t_eager(lambda: draft_topk_triton(logits, k, hot)),
                triton_graph=t_graph(lambda: draft_topk_triton(logits, k, hot)),
            )
            if (b, k, v) in compile_shapes and dtype == torch.bfloat16:
                cf = torch.compile(sglang_draft_topk, dynamic=False)
                cf(logits, k, hot)
                times["compile_graph"] = t_graph(lambda: cf(logits, k, hot))
            if r * v >= 256 * 128256:
                print(f"  pass 1 alone (graph): {t_graph(lambda: pass1_only(logits)):.1f} us", flush=True)
            exact = ("exact" if ok else "MISMATCH") + ("" if same_set else " (sglang set differs: ties)")
            row("draft_topk", f"B={b} K={k} R={r} V={v}", "bf16" if dtype == torch.bfloat16 else "fp32",
                r * v * logits.element_size(), bw, times, exact)
            del logits


def pass1_only(logits):
    """The streaming pass of draft_topk alone (to split its time from the merge)."""
    import kernels._draft_topk_triton as D

    r, v = logits.shape
    block, warps = D._config(r, v)
    ns, chunk = D.plan_splits(r, v, block, logits.device)
    ng = triton.cdiv(v, D.GROUP)
    pm = torch.empty(r, ns, device=DEV)
    ps = torch.empty(r, ns, device=DEV)
    gm = torch.empty(r, ng, device=DEV)
    D._draft_topk_partial_kernel[(r, ns)](logits, logits.stride(0), v, chunk, ng, pm, ps, gm, ns,
                                          BLOCK=block, GROUP_SIZE=D.GROUP, num_warps=warps)


def sweep_draft_topk(bw):
    """Tile/warps/programs-per-SM sweep that chose _config (printed, not tabled)."""
    import kernels._draft_topk_triton as D

    g = torch.Generator(device=DEV).manual_seed(1)
    for r, v in ((512, 163840), (256, 128256), (512, 32000), (64, 163840), (8, 128256)):
        logits = torch.randn(r, v, device=DEV, generator=g).bfloat16()
        res = []
        for block in (2048, 4096, 8192):
            for warps in (4, 8):
                for pps in (2, 4, 8):
                    sms = torch.cuda.get_device_properties(DEV).multi_processor_count
                    ns = min(triton.cdiv(v, block), max(1, triton.cdiv(pps * sms, r)))
                    t = t_graph(lambda: draft_topk_triton(logits, 8, None, block=block, num_warps=warps, nsplit=ns))
                    res.append((t, block, warps, pps))
        res.sort()
        floor = r * v * 2 / bw * 1e6
        print(f"sweep R={r} V={v} floor {floor:.1f}us best: " +
              ", ".join(f"{t:.1f}us B{bl} w{w} pps{p}" for t, bl, w, p in res[:4]) +
              f" | worst {res[-1][0]:.1f}us", flush=True)


def random_tree(batch, k, steps, n, vocab):
    """A draft tree from random draft logits through the references (CPU), moved to the GPU."""
    g = torch.Generator().manual_seed(batch * 1000 + k * 10 + n)
    hidden = torch.randn(batch, 8, generator=g)
    p, idx = draft_topk_reference(torch.randn(batch, vocab, generator=g), k)
    scores, lists = None, ([], [], [])
    for i in range(steps):
        _, hidden, scores, info = select_tree_reference(i, p, idx, hidden, scores, k)
        for acc, x in zip(lists, info):
            acc.append(x)
        p, idx = draft_topk_reference(torch.randn(batch * k, vocab, generator=g), k)
    parent, top, tokens = organize_reference(*lists, n)
    tree = build_tree_reference(torch.randint(0, vocab, (batch,), generator=g), parent, top, tokens,
                                torch.full((batch,), 100), k, steps, n)
    return {f: getattr(tree, f).to(DEV) for f in ("draft_token", "retrive_index", "retrive_next_token",
                                                  "retrive_next_sibling")}


def verify_inputs(g, v: int, b: int, n: int):
    """(steps, verify_tree args) for b trees of n nodes over vocab v: chains for small n, a K=8
    tree for n=32; the target agrees with the first child 80% of the time so walks are long."""
    steps, k = (n - 1, 1) if n <= 8 else (5, 8)
    tree = random_tree(b, k, steps, n, v)
    logits = torch.randn(b * n, v, device=DEV, generator=g)
    rows_ = torch.arange(b * n, device=DEV)
    child = tree["retrive_next_token"].flatten()
    tok = torch.where(child >= 0, tree["draft_token"].flatten()[(rows_ // n) * n + child.clamp(min=0)], 0)
    agree = (torch.rand(b * n, device=DEV, generator=g) < 0.8) & (child >= 0)
    logits[rows_[agree], tok[agree]] = 30.0
    return steps, (logits, tree["draft_token"], tree["retrive_index"], tree["retrive_next_token"],
                   tree["retrive_next_sibling"], steps + 1)


def bench_verify(bw, compile_shapes, quick):
    g = torch.Generator(device=DEV).manual_seed(2)
    shapes = [(v, b, n) for v in (32000, 128256, 163840) for b, n in ((1, 4), (1, 8), (8, 8), (64, 4), (64, 8), (64, 32))]
    if quick:
        shapes = [(128256, 1, 4), (163840, 64, 8)]
    for v, b, n in shapes:
        steps, args = verify_inputs(g, v, b, n)
        logits = args[0]
        c1, c2 = AcceptCounters.zeros(steps, DEV), AcceptCounters.zeros(steps, DEV)
        ref = verify_tree_reference(*args, c1)
        out = verify_tree_triton(*args, c2)
        acc = ref.accept_index[ref.accept_index >= 0].long()
        ok = all(torch.equal(getattr(ref, f), getattr(out, f)) for f in ("accept_index", "accept_length", "target_predict", "bonus"))
        ok = ok and torch.equal(ref.predict[acc], out.predict[acc]) and torch.equal(c1.accept_length_hist, c2.accept_length_hist)
        counters = AcceptCounters.zeros(steps, DEV)
        times = dict(
            torch_eager=t_eager(lambda: torch.argmax(logits, dim=-1)),
            torch_graph=t_graph(lambda: torch.argmax(logits, dim=-1)),
            # SGLang's shape: torch.argmax, then a separate walk launch (our _walk_kernel stands in
            # for sgl_kernel verify_tree_greedy, which cannot be installed on the GPU box)
            alt_graph=t_graph(lambda: verify_tree_triton(*args, counters, fused=False)),
            triton_eager=t_eager(lambda: verify_tree_triton(*args, counters)),
            triton_graph=t_graph(lambda: verify_tree_triton(*args, counters)),
        )
        if (v, b, n) in compile_shapes:
            cf = torch.compile(lambda x: torch.argmax(x, dim=-1), dynamic=False)
            cf(logits)
            times["compile_graph"] = t_graph(lambda: cf(logits))
        path = VT.dispatch(b * n, v)[0]
        row("verify_tree", f"B={b} N={n} R={b * n} V={v} [{path}]", "fp32", b * n * v * 4, bw, times,
            f"exact (mean acc {ref.accept_length.float().mean().item():.2f})" if ok else "MISMATCH")


def bench_select(bw, compile_shapes, quick):
    g = torch.Generator(device=DEV).manual_seed(3)
    shapes = [(b, k, d) for d in (4096, 7168) for b in (1, 8, 64) for k in (1, 4, 8)]
    if quick:
        shapes = [(8, 4, 4096)]
    for b, k, d in shapes:
        topk_p = torch.softmax(torch.randn(b * k, k, device=DEV, generator=g), -1)
        topk_index = torch.randint(0, 32000, (b * k, k), device=DEV, generator=g)
        hidden = torch.randn(b * k, d, device=DEV, generator=g).bfloat16()
        scores = torch.rand(b, k, device=DEV, generator=g)
        ref = select_tree_reference(1, topk_p, topk_index, hidden, scores, k)
        out = select_tree_triton(1, topk_p, topk_index, hidden, scores, k)
        ok = all(torch.equal(x, y) for x, y in zip(ref[:3], out[:3])) and all(torch.equal(x, y) for x, y in zip(ref[3], out[3]))
        times = dict(
            torch_eager=t_eager(lambda: sglang_select(1, topk_p, topk_index, hidden, scores, k)),
            torch_graph=t_graph(lambda: sglang_select(1, topk_p, topk_index, hidden, scores, k)),
            triton_eager=t_eager(lambda: select_tree_triton(1, topk_p, topk_index, hidden, scores, k)),
            triton_graph=t_graph(lambda: select_tree_triton(1, topk_p, topk_index, hidden, scores, k)),
        )
        if (b, k, d) in compile_shapes:
            cf = torch.compile(sglang_select, dynamic=True)  # as SGLang wraps it
            cf(1, topk_p, topk_index, hidden, scores, k)
            times["compile_graph"] = t_graph(lambda: cf(1, topk_p, topk_index, hidden, scores, k))
        row("select_tree", f"B={b} K={k} d={d} step 1", "bf16", 2 * b * k * d * 2, bw, times,
            "exact" if ok else "MISMATCH")
    for b, k, steps, n in ((1, 4, 4, 8), (8, 4, 4, 16), (64, 8, 4, 32), (64, 8, 5, 64)) if not quick else ((8, 4, 4, 16),):
        lists = ([], [], [])
        hidden = torch.randn(b, 16, device=DEV)
        p = torch.softmax(torch.randn(b, k, device=DEV, generator=g), -1)
        idx = torch.randint(0, 32000, (b, k), device=DEV, generator=g)
        scores = None
        for i in range(steps):
            _, hidden, scores, info = select_tree_reference(i, p, idx, hidden, scores, k)
            for acc, x in zip(lists, info):
                acc.append(x)
            p = torch.softmax(torch.randn(b * k, k, device=DEV, generator=g), -1)
            idx = torch.randint(0, 32000, (b * k, k), device=DEV, generator=g)
        ref = organize_reference(*lists, n)
        out = organize_triton(*lists, n)
        ok = all(torch.equal(x, y) for x, y in zip(ref, out))
        times = dict(
            torch_eager=t_eager(lambda: sglang_organize(*lists, n)),
            torch_graph=t_graph(lambda: sglang_organize(*lists, n)),
            triton_eager=t_eager(lambda: organize_triton(*lists, n)),
            triton_graph=t_graph(lambda: organize_triton(*lists, n)),
        )
        row("organize", f"B={b} K={k} S={steps} N={n}", "fp32", b * (k + (steps - 1) * k * k) * 12, bw, times,
            "exact" if ok else "MISMATCH")


def bench_aux(bw, quick):
    g = torch.Generator(device=DEV).manual_seed(4)
    shapes = [(t, d) for d in (4096, 7168) for t in (64, 512, 8192)]
    if quick:
        shapes = [(512, 7168)]
    for t, d in shapes:
        aux = (torch.randn(t, 3 * d, device=DEV, generator=g) * torch.tensor([1.0, 4.0, 16.0], device=DEV).repeat_interleave(d)).bfloat16()
        for with_ref in (False, True):
            ref = (aux.float() + 0.01 * torch.randn(t, 3 * d, device=DEV, generator=g)).bfloat16() if with_ref else None
            a = aux_stats_reference(aux, 3, ref)
            o = aux_stats_triton(aux, 3, ref)
            ok = all((x is None and y is None) or (torch.equal(x, y) if x.dtype == torch.int64 else
                     torch.allclose(x, y, rtol=1e-4, atol=1e-5)) for x, y in
                     ((getattr(a, f), getattr(o, f)) for f in a.__dataclass_fields__))
            base = (lambda: aux_stats_naive(aux)) if ref is None else (lambda: aux_stats_reference(aux, 3, ref))
            times = dict(
                torch_eager=t_eager(lambda: aux_stats_reference(aux, 3, ref)),
                torch_graph=t_graph(lambda: aux_stats_reference(aux, 3, ref)),
                naive_eager=t_eager(base),
                triton_eager=t_eager(lambda: aux_stats_triton(aux, 3, ref)),
                triton_graph=t_graph(lambda: aux_stats_triton(aux, 3, ref)),
            )
            row("aux_stats", f"T={t} C=3 d={d}" + (" +ref" if with_ref else ""), "bf16",
                t * 3 * d * 2 * (2 if with_ref else 1), bw, times, "within 1e-4" if ok else "MISMATCH")


# ---- --variants: candidate designs side by side (in graph), winners printed per shape ----
# Kept small (compile time counts): the lead's single GPU run picks the defaults from these.
# draft_topk: (label, fused, BLOCK, num_warps, programs per SM, maxnreg)
TOPK_VARIANTS = (
    ("2launch B4096 w4 p8", False, 4096, 4, 8, None),    # the measured kernel (74.1 us at 512x163840)
    ("fused B4096 w4 p8", True, 4096, 4, 8, None),
    ("fused B4096 w4 p8 r128", True, 4096, 4, 8, 128),   # default guess (TOPK_CONFIG)
    ("fused B4096 w8 p8", True, 4096, 8, 8, None),
    ("fused B8192 w8 p8", True, 8192, 8, 8, None),
    ("fused B4096 w4 p16 r128", True, 4096, 4, 16, 128),
    ("fused B2048 w4 p8", True, 2048, 4, 8, None),
)
TOPK_VARIANT_SHAPES = ((64, 8, 163840), (64, 4, 128256), (8, 8, 163840), (64, 8, 32000), (1, 8, 128256), (8, 1, 163840))
# verify_tree: every benchmarked shape (V, B, N); (label, fused, BLOCK, num_warps, programs per SM)
VERIFY_VARIANT_SHAPES = tuple((v, b, n) for v in (32000, 128256, 163840)
                              for b, n in ((1, 4), (1, 8), (8, 8), (64, 4), (64, 8), (64, 32)))
VERIFY_VARIANTS = (
    ("argmax+walk", False, None, None, None),            # default above 64 rows (VERIFY_DISPATCH)
    ("fused B2048 w4 p6", True, 2048, 4, 6),             # default fused config (measured before)
    ("fused B2048 w4 p16", True, 2048, 4, 16),
    ("fused B4096 w4 p16", True, 4096, 4, 16),           # more loads in flight per thread
    ("fused B8192 w8 p16", True, 8192, 8, 16),
    ("fused B4096 w4 p32", True, 4096, 4, 32),
)


def variants_draft_topk(bw):
    g = torch.Generator(device=DEV).manual_seed(6)
    winners = []
    for b, k, v in TOPK_VARIANT_SHAPES:
        r = b * k
        logits = torch.randn(r, v, device=DEV, generator=g).mul_(4).bfloat16()
        hot = torch.randint(0, 100, (v,), device=DEV, generator=g) + torch.arange(v, device=DEV)
        p_ref, i_ref = draft_topk_reference(logits, k, hot)
        floor = r * v * 2 / bw * 1e6
        res = []
        for label, fused, block, warps, pps, maxnreg in TOPK_VARIANTS:
            kw = dict(block=block, num_warps=warps, fused=fused, programs_per_sm=pps, maxnreg=maxnreg)
            p, i = draft_topk_triton(logits, k, hot, **kw)
            ok = torch.equal(i, i_ref) and torch.allclose(p, p_ref, rtol=1e-5, atol=1e-7)
            t = t_graph(lambda: draft_topk_triton(logits, k, hot, **kw))
            res.append((t, label, ok))
        dflt = t_graph(lambda: draft_topk_triton(logits, k, hot))
        res.sort()
        print(f"variants draft_topk B={b} K={k} R={r} V={v} bf16 floor {floor:.1f}us default {dflt:.1f}us "
              f"({dflt / floor:.2f}x floor) | " + ", ".join(
                  f"{t:.1f}us {lab}{'' if ok else ' MISMATCH'}" for t, lab, ok in res), flush=True)
        winners.append(f"  R={r} V={v} K={k}: {res[0][1]} {res[0][0]:.1f}us ({res[0][0] / floor:.2f}x floor)")
        del logits
    print("draft_topk variant winners (edit TOPK_CONFIG in kernels/_draft_topk_triton.py):\n" + "\n".join(winners),
          flush=True)


def variants_verify(bw):
    g = torch.Generator(device=DEV).manual_seed(7)
    winners, by_vocab = [], {}
    for v, b, n in VERIFY_VARIANT_SHAPES:
        steps, args = verify_inputs(g, v, b, n)
        logits = args[0]
        ref = verify_tree_reference(*args)
        counters = AcceptCounters.zeros(steps, DEV)
        argmax = t_graph(lambda: torch.argmax(logits, dim=-1))
        res = []
        for label, fused, block, warps, pps in VERIFY_VARIANTS:
            kw = dict(fused=fused, block=block, num_warps=warps, programs_per_sm=pps)
            out = verify_tree_triton(*args, **kw)
            ok = all(torch.equal(getattr(ref, f), getattr(out, f)) for f in ("accept_index", "accept_length", "target_predict", "bonus"))
            t = t_graph(lambda: verify_tree_triton(*args, counters, **kw))
            res.append((t, label, ok))
        res.sort()
        path = VT.dispatch(b * n, v)[0]
        print(f"variants verify_tree B={b} N={n} R={b * n} V={v} argmax alone {argmax:.1f}us default={path} | " +
              ", ".join(f"{t:.1f}us {lab} ({argmax / t:.2f}x){'' if ok else ' MISMATCH'}" for t, lab, ok in res),
              flush=True)
        best_fused = min((t, lab) for t, lab, _ in res if lab.startswith("fused"))
        walk_t = next(t for t, lab, _ in res if lab == "argmax+walk")
        by_vocab.setdefault(v, []).append((b * n, "fused " + best_fused[1][6:] if best_fused[0] < walk_t else "argmax"))
        winners.append(f"  R={b * n} V={v}: {res[0][1]} {res[0][0]:.1f}us vs argmax {argmax:.1f}us "
                       f"({argmax / res[0][0]:.2f}x){'' if res[0][0] <= argmax else '  SLOWER THAN ARGMAX'}")
    print("verify_tree variant winners (edit VERIFY_DISPATCH in kernels/_verify_tree_triton.py):\n" + "\n".join(winners),
          flush=True)
    for v, picks in by_vocab.items():
        print(f"verify_tree path per R at V={v} (fused vs argmax+walk): " +
              ", ".join(f"R={r_}: {pick}" for r_, pick in sorted(picks)), flush=True)


def check_irregular():
    """GPU exactness on the interpreter tests' irregular cases (ties, -inf masks, odd V, splits)."""
    g = torch.Generator(device=DEV).manual_seed(5)
    bad = []
    for r, v, k, block, ns in ((3, 1000, 4, None, None), (2, 3001, 8, 256, 3), (4, 2500, 1, 128, 2), (1, 50, 4, None, None),
                               (5, 777, 3, 64, 1), (7, 163840, 8, None, None), (300, 32001, 16, None, None)):
        for dtype in (torch.float32, torch.bfloat16):
            x = (torch.randn(r, v, device=DEV, generator=g) * 0.05).to(dtype)  # bf16 duplicates
            x[0, ::7] = 1.0
            if r > 1:
                x[1] = float("-inf")
                x[1, [3, v - 1]] = 0.0
            hot = torch.randperm(v, device=DEV)
            pr, ir = draft_topk_reference(x, k, hot)
            for fused in (True, False):
                for _ in range(2):  # twice: the fused kernel's tickets must come back reset
                    p, i = draft_topk_triton(x, k, hot, block=block, nsplit=ns, fused=fused)
                    if not (torch.equal(i, ir) and torch.allclose(p, pr, rtol=1e-5, atol=1e-7)):
                        bad.append(("draft_topk", r, v, k, dtype, fused))
    for b, k, steps, n in ((3, 1, 4, 5), (4, 3, 3, 8), (2, 8, 2, 16), (64, 8, 5, 32)):
        tree = random_tree(b, k, steps, n, 1300)
        for agree in (0.0, 0.7, 1.0):
            logits = torch.randn(b * n, 1300, device=DEV, generator=g)
            child = tree["retrive_next_token"].flatten()
            rows_ = torch.arange(b * n, device=DEV)
            tok = torch.where(child >= 0, tree["draft_token"].flatten()[(rows_ // n) * n + child.clamp(min=0)], 0)
            m = (torch.rand(b * n, device=DEV, generator=g) < agree) & (child >= 0)
            logits[rows_[m], tok[m]] = 30.0
            args = (logits, tree["draft_token"], tree["retrive_index"], tree["retrive_next_token"], tree["retrive_next_sibling"], steps + 1)
            for fused in (True, True, False):  # fused twice: the persistent workspace must come back reset
                c1, c2 = AcceptCounters.zeros(steps, DEV), AcceptCounters.zeros(steps, DEV)
                ref, out = verify_tree_reference(*args, c1), verify_tree_triton(*args, c2, block=256, fused=fused)
                if not all(torch.equal(getattr(ref, f), getattr(out, f)) for f in ("accept_index", "accept_length", "target_predict", "bonus")) \
                        or not all(torch.equal(getattr(c1, f), getattr(c2, f)) for f in ("accept_length_hist", "depth_attempted", "depth_accepted")):
                    bad.append(("verify_tree", b, k, steps, n, agree, fused))
    for b, k, d in ((3, 3, 40), (2, 4, 1100), (64, 8, 7168), (5, 1, 100)):
        p = torch.softmax(torch.randn(b * k, k, device=DEV, generator=g), -1)
        p[:, : max(1, k // 2)] = 0.125  # ties
        idx = torch.randint(0, 999, (b * k, k), device=DEV, generator=g)
        h = torch.randn(b * k, d, device=DEV, generator=g).bfloat16()
        sc = torch.rand(b, k, device=DEV, generator=g)
        for i in (0, 1, 3):
            pi, ii, hi, si = (p[:b], idx[:b], h[:b], None) if i == 0 else (p, idx, h, sc)
            ref, out = select_tree_reference(i, pi, ii, hi, si, k), select_tree_triton(i, pi, ii, hi, si, k)
            if not (all(torch.equal(x, y) for x, y in zip(ref[:3], out[:3])) and all(torch.equal(x, y) for x, y in zip(ref[3], out[3]))):
                bad.append(("select_tree", b, k, d, i))
    for t, d in ((5, 100), (33, 37), (1, 600), (700, 4096)):
        aux = torch.randn(t, 3 * d, device=DEV, generator=g).bfloat16()
        aux[0, 3] = float("nan")
        aux[-1, -1] = float("inf")
        ref = (aux.float() + 0.1).bfloat16()
        cand = torch.randn(t, 3, d, device=DEV, generator=g).bfloat16()
        a, o = aux_stats_reference(aux, 3, ref, cand), aux_stats_triton(aux, 3, ref, cand)
        for f in a.__dataclass_fields__:
            x, y = getattr(a, f), getattr(o, f)
            if not (torch.equal(x, y) if x.dtype == torch.int64 else torch.allclose(x, y, rtol=1e-4, atol=1e-5)):
                bad.append(("aux_stats", t, d, f))
    print("GPU irregular-shape check:", "all exact" if not bad else f"FAILURES {bad}", flush=True)
    return bad


def env_info() -> dict:
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.mem", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    return dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), gpu=smi,
                torch=torch.__version__, triton=triton.__version__, cuda=torch.version.cuda, python=platform.python_version(),
                sms=torch.cuda.get_device_properties(DEV).multi_processor_count)


def markdown(info: dict, bw: float) -> str:
    f = lambda v, p=1: "–" if v is None else f"{v:.{p}f}"
    lines = [f"GPU: {info['gpu']} · torch {info['torch']} (CUDA {info['cuda']}) · Triton {info['triton']} · "
             f"Python {info['python']} · {info['date']} · measured copy bandwidth {bw / 1e12:.2f} TB/s (floor = bytes / that)", "",
             "| kernel | shape | dtype | MB moved | HBM floor µs | torch eager µs | torch in graph µs | torch.compile in graph µs "
             "| torch.argmax + walk launch in graph µs (verify only) "
             "| Triton eager µs | Triton in graph µs | speed-up (graph vs graph) | speed-up vs argmax + walk | % of floor (graph) "
             "| exactness |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in ROWS:
        lines.append(f"| {r['kernel']} | {r['shape']} | {r['dtype']} | {r['bytes'] / 1e6:.2f} | {f(r['floor_us'], 2)} | "
                     f"{f(r.get('torch_eager'))} | {f(r.get('torch_graph'))} | {f(r.get('compile_graph'))} | "
                     f"{f(r.get('alt_graph'))} | "
                     f"{f(r.get('triton_eager'))} | {f(r.get('triton_graph'))} | {f(r.get('speedup_graph'))}× | "
                     f"{f(r.get('speedup_alt'), 2)}× | {f(r.get('pct_floor'), 0)}% | {r['exact']} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="write the markdown table here (and a .json beside it)")
    ap.add_argument("--only", default="draft_topk,verify_tree,select_tree,aux_stats")
    ap.add_argument("--sweep", action="store_true", help="also run the draft_topk tile sweep")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile columns")
    ap.add_argument("--check", action="store_true", help="first run the irregular-shape exactness checks on the GPU")
    ap.add_argument("--quick", action="store_true", help="two shapes per family (smoke test)")
    ap.add_argument("--variants", action="store_true",
                    help="also time the candidate designs of draft_topk / verify_tree (those in --only) side by side")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_kernels: needs a CUDA GPU (run it through the device tool)")
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    t0 = time.time()
    info = env_info()
    bw = measure_copy_bw()
    print(json.dumps(info), f"copy bandwidth {bw / 1e12:.2f} TB/s", flush=True)
    only = set(args.only.split(","))
    nc = args.no_compile
    steps = []
    if args.check:
        steps.append(("check", check_irregular))
    if args.sweep:
        steps.append(("sweep", lambda: sweep_draft_topk(bw)))
    if args.variants and "draft_topk" in only:
        steps.append(("variants draft_topk", lambda: variants_draft_topk(bw)))
    if args.variants and "verify_tree" in only:
        steps.append(("variants verify_tree", lambda: variants_verify(bw)))
    if "draft_topk" in only:
        steps.append(("draft_topk", lambda: bench_draft_topk(
            bw, set() if nc else {(1, 1, 32000), (64, 8, 32000), (64, 8, 163840), (8, 4, 128256)}, args.quick)))
    if "verify_tree" in only:
        steps.append(("verify_tree", lambda: bench_verify(bw, set() if nc else {(128256, 1, 4), (128256, 64, 8)}, args.quick)))
    if "select_tree" in only:
        steps.append(("select_tree", lambda: bench_select(bw, set() if nc else {(8, 4, 4096), (64, 8, 7168)}, args.quick)))
    if "aux_stats" in only:
        steps.append(("aux_stats", lambda: bench_aux(bw, args.quick)))
    for name, fn in steps:  # a failing family is reported and the others still run
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            import traceback
            traceback.print_exc()
            print(f"FAILED {name}: {type(e).__name__}: {e}", flush=True)
    table = markdown(info, bw)
    print(table)
    if args.out:
        Path(args.out).write_text(table)
        Path(args.out).with_suffix(".json").write_text(json.dumps(dict(info=info, copy_bw=bw, rows=ROWS), indent=1))
    print(f"total {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
