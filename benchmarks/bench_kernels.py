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
TOPK_CONFIG (kernels/specwatch_kernels/_draft_topk_triton.py) and VERIFY_DISPATCH (kernels/specwatch_kernels/_verify_tree_triton.py).

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
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels"))  # specwatch_kernels

import torch  # noqa: E402
import triton  # noqa: E402
from triton.testing import do_bench, do_bench_cudagraph  # noqa: E402

from specwatch_kernels import AcceptCounters  # noqa: E402
from specwatch_kernels._aux_stats_triton import aux_stats_triton  # noqa: E402
from specwatch_kernels._draft_topk_triton import draft_topk_triton  # noqa: E402
from specwatch_kernels._select_tree_triton import organize_triton, select_tree_triton  # noqa: E402
import specwatch_kernels._verify_tree_triton as VT  # noqa: E402
from specwatch_kernels._verify_tree_triton import verify_tree_triton  # noqa: E402
from specwatch_kernels.aux_stats import aux_stats_reference  # noqa: E402
from specwatch_kernels.draft_topk import draft_topk_reference  # noqa: E402
from specwatch_kernels.select_tree import build_tree_reference, organize_reference, select_tree_reference  # noqa: E402
from specwatch_kernels.verify_tree import verify_tree_reference  # noqa: E402

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


FP32_U = 2.0 ** -24  # unit roundoff of fp32


def topk_agreement(logits, p, i, p_ref, i_ref) -> tuple[str, str]:
    """(flag, detail) of a draft_topk output against the reference: flag "" (ids equal, p within
    rtol 1e-5 / atol 1e-7), "p-tol" (ids equal; p outside that tolerance but inside the sound fp32
    bound of the log-sum-exp below) or "MISMATCH"; detail says by how much and why.

    Bound, per implementation: p = exp(v - lse) with lse = m + log(sum_j exp(x_j - m)). A sum of V
    positive fp32 terms in ANY order has relative error <= gamma_V = V u / (1 - V u); each exp
    term carries <= (2 |x - m| + 4) u from the scaled argument and exp2; the final exp adds
    (2 |v - lse| + 4) u and the log 2 u |lse|. Two implementations with different orders may differ
    by twice that. Order-free and so loose at V = 163840 (~2e-2); sqrt(V) u is the typical size."""
    ids_equal = torch.equal(i, i_ref)
    if ids_equal and torch.allclose(p, p_ref, rtol=1e-5, atol=1e-7):
        return "", ""
    x = logits.float()
    finite = torch.isfinite(x)
    m = x.max(dim=1).values
    lo = torch.where(finite, x, m[:, None]).min(dim=1).values
    spread = (m - lo).max().item()
    vocab = x.shape[1]
    gamma = vocab * FP32_U / (1 - vocab * FP32_U)
    lse = torch.logsumexp(x, dim=1).abs().max().item()
    eps = gamma + (2 * spread + 4) * FP32_U + (2 * (spread + lse) + 4) * FP32_U + 2 * lse * FP32_U
    bound = 2 * eps
    d = (p - p_ref).abs()
    pos = p_ref > 0
    rel = torch.where(pos, d / p_ref.clamp_min(1e-38), torch.zeros_like(d))
    ratio = torch.where(pos, p / p_ref.clamp_min(1e-38), torch.ones_like(p))
    factor_spread = (torch.where(pos, ratio, -torch.inf).max(1).values
                     - torch.where(pos, ratio, torch.inf).min(1).values).clamp_min(0).max().item()
    zero_mismatch = bool(((p_ref == 0) != (p == 0)).any())
    text = (f"max |dp| {d.max().item():.2e}, max rel {rel.max().item():.2e} (rtol 1e-5; typical sqrt(V) u "
            f"{vocab ** 0.5 * FP32_U:.1e}, sound fp32 bound {bound:.1e}); p/p_ref spread within a row "
            f"{factor_spread:.1e}" + (" (a per-row factor: the rows' log-sum-exp differ, i.e. summation order)"
                                      if factor_spread <= 8 * FP32_U * (1 + spread) else ""))
    if not ids_equal:
        bad = (i != i_ref).any(dim=1).nonzero().flatten()
        r0 = int(bad[0])
        return "MISMATCH", (f"token ids DIFFER in {bad.numel()} of {i.shape[0]} rows (row {r0}: got "
                            f"{i[r0].tolist()} want {i_ref[r0].tolist()}); {text}")
    if rel.max().item() <= bound and not zero_mismatch:
        return "p-tol", f"token ids identical; probabilities within the fp32 bound, outside rtol 1e-5: {text}"
    return "MISMATCH", f"token ids identical; probabilities BEYOND the fp32 bound: {text}"


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
            flag, detail = topk_agreement(logits, p, i, p_ref, i_ref)
            if detail:
                print(f"  draft_topk B={b} K={k} V={v}: {flag}: {detail}", flush=True)
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
            exact = ({"": "exact", "p-tol": "ids exact, p within fp32 bound"}.get(flag, "MISMATCH")
                     + ("" if same_set else " (sglang set differs: ties)"))
            row("draft_topk", f"B={b} K={k} R={r} V={v}", "bf16" if dtype == torch.bfloat16 else "fp32",
                r * v * logits.element_size(), bw, times, exact)
            del logits


def pass1_only(logits, block=None, warps=None, pps=8, smax=False):
    """The streaming pass of draft_topk alone (to split its time from the merge)."""
    import specwatch_kernels._draft_topk_triton as D

    r, v = logits.shape
    cb, cw = D._config(r, v)
    block, warps = block or cb, warps or cw
    ns, chunk = D.plan_splits(r, v, block, logits.device, pps)
    ng = triton.cdiv(v, D.GROUP)
    nsg = triton.cdiv(ng, 32)
    pm = torch.empty(r, ns, device=DEV)
    ps = torch.empty(r, ns, device=DEV)
    gm = torch.empty(r, ng, device=DEV)
    sm = torch.empty(r, nsg, device=DEV) if smax else gm
    D._draft_topk_partial_kernel[(r, ns)](logits, logits.stride(0), v, chunk, ng, pm, ps, gm, ns, sm, nsg,
                                          BLOCK=block, GROUP_SIZE=D.GROUP, WRITE_SMAX=smax, num_warps=warps,
                                          enable_fp_fusion=True)


def sweep_draft_topk(bw):
    """Tile/warps/programs-per-SM sweep that chose _config (printed, not tabled)."""
    import specwatch_kernels._draft_topk_triton as D

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
# draft_topk: (label, fused, BLOCK, num_warps, programs per SM, maxnreg, merge_warps)
# (merge_warps: two-launch only; None = the merge that reads V/32 group maxima with 4-8 warps, an int =
# pass 1 writes super-group maxima and the merge runs that many warps per row.)
# (The tl.topk merges of 23566ac are gone: compiled by Triton 3.6.0 on the H200 they were not exact.)
TOPK_VARIANTS = (
    ("2launch B4096 w4 p8 smax m1", False, 4096, 4, 8, None, 1),  # TOPK_CONFIG at R > 256 (2026-12-02)
    ("2launch B4096 w4 p4 smax m1", False, 4096, 4, 4, None, 1),  # TOPK_CONFIG at 8 < R <= 256
    ("2launch B4096 w4 p8 smax m2", False, 4096, 4, 8, None, 2),
    ("2launch B4096 w4 p8", False, 4096, 4, 8, None, None),       # the 8-warp merge over V/32 maxima
    ("fused B4096 w4 p8", True, 4096, 4, 8, None, None),          # TOPK_CONFIG at R <= 8
    ("fused B2048 w4 p8", True, 2048, 4, 8, None, None),
    ("fused B4096 w4 p4", True, 4096, 4, 4, None, None),          # fewer, longer splits
    ("fused B4096 w4 p2", True, 4096, 4, 2, None, None),          # ~1 split per row at R = 512
)
TOPK_VARIANT_SHAPES = ((64, 8, 163840), (64, 4, 128256), (8, 8, 163840), (64, 8, 32000), (1, 8, 128256), (8, 1, 163840))
# verify_tree: every benchmarked shape (V, B, N); (label, path, BLOCK, num_warps, programs per SM)
VERIFY_VARIANT_SHAPES = tuple((v, b, n) for v in (32000, 128256, 163840)
                              for b, n in ((1, 4), (1, 8), (8, 8), (64, 4), (64, 8), (64, 32)))
VERIFY_VARIANTS = (
    ("argmax+walk", "argmax", None, None, None),           # SGLang's shape (no VERIFY_DISPATCH row since 2026-12-02)
    ("fused B2048 w4 p6", "fused", 2048, 4, 6),            # VERIFY_DISPATCH rows (see the table's comment)
    ("fused B2048 w4 p16", "fused", 2048, 4, 16),
    ("fused B4096 w4 p16", "fused", 4096, 4, 16),
    ("fused B1024 w1 p16", "fused", 1024, 1, 16),          # 1-warp programs: the walk's reductions stay in a warp
    ("fused B2048 w2 p16", "fused", 2048, 2, 16),
    ("rowwise B4096 w4", "rowwise", 4096, 4, None),        # one program per row, plain store + ticket
    ("rowwise B8192 w8", "rowwise", 8192, 8, None),
    ("rowwise B4096 w8", "rowwise", 4096, 8, None),        # VERIFY_DISPATCH at R = 65-512 (most V)
    ("rowwise B2048 w2", "rowwise", 2048, 2, None),
    # issue 17 candidates (`_verify_split_kernel`, SPLIT_PATHS in kernels/specwatch_kernels/_verify_tree_triton.py):
    ("fused B2048 w4 p6 relaxed", "fused-relaxed", 2048, 4, 6),  # red.relaxed max, plain-load/-store reset
    ("slots B2048 w4 p6", "slots", 2048, 4, 6),                  # per-split key slots: plain stores, no reset
    # 1-warp programs: the walk's reductions stay in a warp (shuffles; 4-8 warps compile its [NP, NP]
    # gathers to ~44 bar.sync + shared-memory round trips); the tree loaded before the logits
    ("slots B1024 w1 p16 prefetch", "slots-prefetch", 1024, 1, 16),
    ("slots B2048 w1 p8 prefetch", "slots-prefetch", 2048, 1, 8),  # 64 fp32 per thread per tile
    ("rowwise B4096 w8 prefetch", "rowwise-prefetch", 4096, 8, None),  # slots with nsplit = 1
)
# where the time of a single-launch verify goes (stages of `_verify_split_kernel`): 0 = split argmax +
# key store alone, 1 = + ticket and target_predict (a complete argmax), 2 = + walk and counters
VERIFY_DECOMPOSE = (("slots B2048 w4 p6", "slots", 2048, 4, 6),
                    ("slots B1024 w1 p16 prefetch", "slots-prefetch", 1024, 1, 16),
                    ("rowwise B4096 w8 prefetch", "rowwise-prefetch", 4096, 8, None))
SHAPES: set[tuple[int, int]] | None = None  # --shapes: (rows, vocab) pairs the variants run; None = all


def _wanted(rows: int, vocab: int) -> bool:
    return SHAPES is None or (rows, vocab) in SHAPES


def variants_draft_topk(bw):
    g = torch.Generator(device=DEV).manual_seed(6)
    winners = []
    for b, k, v in TOPK_VARIANT_SHAPES:
        r = b * k
        if not _wanted(r, v):
            continue
        logits = torch.randn(r, v, device=DEV, generator=g).mul_(4).bfloat16()
        hot = torch.randint(0, 100, (v,), device=DEV, generator=g) + torch.arange(v, device=DEV)
        p_ref, i_ref = draft_topk_reference(logits, k, hot)
        floor = r * v * 2 / bw * 1e6
        res, notes = [], []
        for label, fused, block, warps, pps, maxnreg, mwarps in TOPK_VARIANTS:
            kw = dict(block=block, num_warps=warps, fused=fused, programs_per_sm=pps, maxnreg=maxnreg,
                      merge_warps=mwarps)
            try:
                p, i = draft_topk_triton(logits, k, hot, **kw)
                flag, detail = topk_agreement(logits, p, i, p_ref, i_ref)
                t = t_graph(lambda: draft_topk_triton(logits, k, hot, **kw))
            except Exception as e:  # noqa: BLE001  (one candidate failing to compile must not hide the rest)
                notes.append(f"{label}: FAILED {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                continue
            if detail:
                notes.append(f"{label}: {flag}: {detail}")
            res.append((t, label, flag))
        dflt = t_graph(lambda: draft_topk_triton(logits, k, hot))
        res.sort()
        print(f"variants draft_topk B={b} K={k} R={r} V={v} bf16 floor {floor:.1f}us default {dflt:.1f}us "
              f"({dflt / floor:.2f}x floor) | " + ", ".join(
                  f"{t:.1f}us {lab}{' ' + flag if flag else ''}" for t, lab, flag in res), flush=True)
        # where the time goes: the streaming pass alone (as the two-launch variants run it)
        p1 = {(pps, sm): t_graph(lambda: pass1_only(logits, 4096, 4, pps, sm)) for pps in (8, 4) for sm in (False, True)}
        print(f"  pass 1 alone B4096 w4: p8 {p1[(8, False)]:.1f}us, p8+smax {p1[(8, True)]:.1f}us, "
              f"p4 {p1[(4, False)]:.1f}us, p4+smax {p1[(4, True)]:.1f}us (floor {floor:.1f}us); "
              f"merge = a two-launch variant minus its pass 1", flush=True)
        for note in notes:
            print(f"  {note}", flush=True)
        ok_res = [x for x in res if x[2] != "MISMATCH"]
        if ok_res:
            t0_, lab0, _ = ok_res[0]
            winners.append(f"  R={r} V={v} K={k}: {lab0} {t0_:.1f}us ({t0_ / floor:.2f}x floor; "
                           f"1.5x floor = {1.5 * floor:.1f}us)")
        del logits
    print("draft_topk variant winners, exact ones only (edit TOPK_CONFIG in kernels/specwatch_kernels/_draft_topk_triton.py):\n"
          + "\n".join(winners), flush=True)


def variants_verify(bw):
    g = torch.Generator(device=DEV).manual_seed(7)
    winners, by_vocab = [], {}
    for v, b, n in VERIFY_VARIANT_SHAPES:
        if not _wanted(b * n, v):
            continue
        steps, args = verify_inputs(g, v, b, n)
        logits = args[0]
        ref = verify_tree_reference(*args)
        counters = AcceptCounters.zeros(steps, DEV)
        argmax = t_graph(lambda: torch.argmax(logits, dim=-1))
        res, notes = [], []
        for label, path, block, warps, pps in VERIFY_VARIANTS:
            kw = dict(path=path, block=block, num_warps=warps, programs_per_sm=pps)
            try:
                out = verify_tree_triton(*args, **kw)
                ok = all(torch.equal(getattr(ref, f), getattr(out, f))
                         for f in ("accept_index", "accept_length", "target_predict", "bonus"))
                t = t_graph(lambda: verify_tree_triton(*args, counters, **kw))
            except Exception as e:  # noqa: BLE001
                notes.append(f"{label}: FAILED {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                continue
            res.append((t, label, ok))
        res.sort()
        path = VT.dispatch(b * n, v)[0]
        print(f"variants verify_tree B={b} N={n} R={b * n} V={v} fp32 floor {b * n * v * 4 / bw * 1e6:.1f}us "
              f"argmax alone {argmax:.1f}us default={path} | " +
              ", ".join(f"{t:.1f}us {lab} ({argmax / t:.2f}x){'' if ok else ' MISMATCH'}" for t, lab, ok in res),
              flush=True)
        parts = []
        for label, dpath, block, warps, pps in VERIFY_DECOMPOSE:
            kw = dict(path=dpath, block=block, num_warps=warps, programs_per_sm=pps)
            ts = [t_graph(lambda: verify_tree_triton(*args, counters, stages=st, **kw)) for st in (0, 1, 2)]
            parts.append(f"{label}: split argmax + key store {ts[0]:.1f}us, + ticket/target_predict {ts[1]:.1f}us, "
                         f"+ walk/counters {ts[2]:.1f}us")
        print("  stages (in graph): " + " | ".join(parts) + f" | argmax alone {argmax:.1f}us", flush=True)
        for note in notes:
            print(f"  {note}", flush=True)
        exact = [x for x in res if x[2]]
        if not exact:
            continue
        best = exact[0]
        by_vocab.setdefault(v, []).append((b * n, best[1]))
        bpath, bblock, bwarps, bpps = next(x[1:] for x in VERIFY_VARIANTS if x[0] == best[1])
        cfg = (bblock or 2048, bwarps or 4, 6 if bpath == "argmax" else bpps or 0)
        winners.append(f"  R={b * n} V={v}: {best[1]} {best[0]:.1f}us vs argmax {argmax:.1f}us "
                       f"({argmax / best[0]:.2f}x){'' if best[0] <= argmax else '  SLOWER THAN ARGMAX'}"
                       f"  row ({b * n}, {v}, \"{bpath}\", {cfg})")
    print("verify_tree variant winners, exact ones only (edit VERIFY_DISPATCH in kernels/specwatch_kernels/_verify_tree_triton.py "
          "with the rows printed):\n" + "\n".join(winners), flush=True)
    for v, picks in by_vocab.items():
        print(f"verify_tree winner per R at V={v}: " + ", ".join(f"R={r_}: {pick}" for r_, pick in sorted(picks)),
              flush=True)


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
            kws = [dict(fused=True), dict(fused=False), dict(fused=False, merge_warps=1), dict(fused=False, merge_warps=2)]
            for kw in kws:
                for _ in range(2):  # twice: the fused kernel's tickets must come back reset
                    p, i = draft_topk_triton(x, k, hot, block=block, nsplit=ns, **kw)
                    if not (torch.equal(i, ir) and torch.allclose(p, pr, rtol=1e-5, atol=1e-7)):
                        bad.append(("draft_topk", r, v, k, dtype, kw))
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
            # twice each: workspaces come back reset
            for path in ("fused", "fused", "rowwise", "rowwise", "argmax") + tuple(x for x in VT.SPLIT_PATHS for _ in "12"):
                c1, c2 = AcceptCounters.zeros(steps, DEV), AcceptCounters.zeros(steps, DEV)
                ref, out = verify_tree_reference(*args, c1), verify_tree_triton(*args, c2, block=256, path=path)
                if not all(torch.equal(getattr(ref, f), getattr(out, f)) for f in ("accept_index", "accept_length", "target_predict", "bonus")) \
                        or not all(torch.equal(getattr(c1, f), getattr(c2, f)) for f in ("accept_length_hist", "depth_attempted", "depth_accepted")):
                    bad.append(("verify_tree", b, k, steps, n, agree, path))
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
    ap.add_argument("--shapes", help="comma list of RxV (rows x vocab, e.g. 512x163840,64x32000): the "
                    "--variants shapes to run (default: all)")
    ap.add_argument("--no-table", action="store_true", help="skip the main tables (with --variants / --check)")
    args = ap.parse_args()
    global SHAPES
    if args.shapes:
        try:
            SHAPES = {tuple(int(x) for x in item.lower().split("x")) for item in args.shapes.split(",")}
        except ValueError:
            sys.exit(f"bench_kernels: --shapes {args.shapes!r}: expected RxV,RxV,... (e.g. 512x163840)")
        known = {(b * k, v) for b, k, v in TOPK_VARIANT_SHAPES} | {(b * n, v) for v, b, n in VERIFY_VARIANT_SHAPES}
        if not SHAPES <= known:
            sys.exit(f"bench_kernels: --shapes {sorted(SHAPES - known)} are not variant shapes; known: {sorted(known)}")
    if not torch.cuda.is_available():
        sys.exit("bench_kernels: needs a CUDA GPU (run it through the device tool)")
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    t0 = time.time()
    out_file = None
    if args.out:  # the whole console log goes into the results file as it is printed (a cut-off run keeps it)
        from _provenance import commit
        out_file = open(args.out, "w")
        out_file.write(f"# bench_kernels.py output\n\n- commit: {commit()}\n- command: `python "
                       f"{' '.join(sys.argv)}`\n- weights: none (random inputs, seeds in the script)\n\n```text\n")
        sys.stdout = _Tee(sys.stdout, out_file)
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
    if args.no_table:
        only = set()
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
    print(f"total {time.time() - t0:.0f} s", flush=True)
    table = markdown(info, bw) if ROWS else ""
    if out_file is not None:
        sys.stdout = sys.__stdout__
        out_file.write("```\n\n" + table)
        out_file.close()
        if ROWS:
            Path(args.out).with_suffix(".json").write_text(json.dumps(dict(info=info, copy_bw=bw, rows=ROWS), indent=1))
    print(table)


class _Tee:
    """stdout that also writes (and flushes) every line into the results file."""

    def __init__(self, *streams):
        self.streams = streams

    def write(self, text):
        for st in self.streams:
            st.write(text)
            st.flush()
        return len(text)

    def flush(self):
        for st in self.streams:
            st.flush()


if __name__ == "__main__":
    main()
