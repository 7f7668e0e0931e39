"""Triton draft top-k (split-V online log-sum-exp + two-level top-k). Loaded lazily by `draft_topk`.

Pass 1, grid (R, nsplit): each program streams its vocabulary chunk in [BLOCK // 32, 32] tiles,
keeps an online (max, sum-exp) and writes the maximum of every GROUP of 32 consecutive logits
(R * V/32 fp32: 1/16 of the bf16 logits' bytes). No data-dependent branch in the streaming loop.
Pass 2, one program per row: merges the (max, sum) pairs into the lse, picks the top-K groups by
(max desc, group index asc), re-reads those K*32 logits and extracts the exact top-K (lowest index
wins ties).
(A first version kept a running top-K of group maxima per program and examined a tile only when
it could enter; with ~20 tiles per program nearly every tile was examined, and the K-step
insertion loop made it 5x slower than this at 512 x 163840 on the H200.)
Why it is exact: every top-K element lies in one of the top-K groups under that group order: a
group ranked before an element's group holds an element that beats it (larger, or equal and at a
lower index), so K such groups would push the element out of the top-K.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

GROUP = 32
LOG2E = tl.constexpr(1.4426950408889634)
NEG_INF = tl.constexpr(float("-inf"))
SENTINEL_GROUP = tl.constexpr(1 << 30)  # groups of empty slots; above every real group index
BIG_INDEX = tl.constexpr(2147483647)


@triton.jit
def _draft_topk_partial_kernel(
    logits_ptr, stride_row, vocab, chunk, n_groups,
    part_m_ptr, part_s_ptr, gmax_ptr, nsplit,
    BLOCK: tl.constexpr, GROUP_SIZE: tl.constexpr,
):
    row = tl.program_id(0)
    split = tl.program_id(1)
    NG: tl.constexpr = BLOCK // GROUP_SIZE
    row_ptr = logits_ptr + row.to(tl.int64) * stride_row
    gmax_row = gmax_ptr + row.to(tl.int64) * n_groups
    start = split * chunk
    end = tl.minimum(start + chunk, vocab)
    gi_local = tl.arange(0, NG)
    col = tl.arange(0, GROUP_SIZE)
    # Online softmax per group slot: the running max is per group (a reduction inside the few
    # lanes that hold one group), the running sum per element; one exp2 per element plus one per
    # group for the rescale. No cross-warp reduction inside the loop.
    m_g = tl.full([NG], float("-inf"), tl.float32)
    s_vec = tl.zeros([NG, GROUP_SIZE], tl.float32)
    for tile_start in range(start, end, BLOCK):
        offs = tile_start + gi_local[:, None] * GROUP_SIZE + col[None, :]
        x = tl.load(row_ptr + offs, mask=offs < end, other=NEG_INF).to(tl.float32)
        gmax = tl.max(x, axis=1)
        g_idx = tile_start // GROUP_SIZE + gi_local
        tl.store(gmax_row + g_idx, gmax, mask=(tile_start + gi_local * GROUP_SIZE) < end)
        new_m = tl.maximum(m_g, gmax)
        safe = tl.where(new_m == NEG_INF, 0.0, new_m) * LOG2E
        scale = tl.math.exp2(m_g * LOG2E - safe)
        s_vec = s_vec * scale[:, None] + tl.math.exp2(x * LOG2E - safe[:, None])
        m_g = new_m
    run_m = tl.max(m_g, axis=0)
    safe_m = tl.where(run_m == NEG_INF, 0.0, run_m)
    w = tl.math.exp2((m_g - safe_m) * LOG2E)
    run_s = tl.sum(tl.sum(s_vec, axis=1) * w, axis=0)
    out = row.to(tl.int64) * nsplit + split
    tl.store(part_m_ptr + out, run_m)
    tl.store(part_s_ptr + out, run_s)


@triton.jit
def _draft_topk_merge_kernel(
    logits_ptr, stride_row, vocab, n_groups,
    part_m_ptr, part_s_ptr, gmax_ptr, nsplit,
    hot_ptr, out_p_ptr, out_i_ptr,
    K: tl.constexpr, KP: tl.constexpr, NSP: tl.constexpr, SGP: tl.constexpr, GROUP_SIZE: tl.constexpr,
    HAS_HOT: tl.constexpr,
):
    row = tl.program_id(0)
    row64 = row.to(tl.int64)
    # log-sum-exp over splits
    sp = tl.arange(0, NSP)
    pm = tl.load(part_m_ptr + row64 * nsplit + sp, mask=sp < nsplit, other=NEG_INF)
    ps = tl.load(part_s_ptr + row64 * nsplit + sp, mask=sp < nsplit, other=0.0)
    m = tl.max(pm, axis=0)
    safe_m = tl.where(m == NEG_INF, 0.0, m)
    s = tl.sum(ps * tl.math.exp2((pm - safe_m) * LOG2E), axis=0)
    lse = safe_m + tl.log(s)
    # top-K groups by (max desc, group index asc), in two levels: top-K super-groups (32 groups
    # each) first, then top-K groups inside them. The argument that makes groups exact applies
    # to super-groups too, and K passes over V/1024 + 32K values replace K passes over V/32.
    sg = tl.arange(0, SGP)
    c32 = tl.arange(0, 32)
    gidx2 = sg[:, None] * 32 + c32[None, :]
    gv2 = tl.load(gmax_ptr + row64 * n_groups + gidx2, mask=gidx2 < n_groups, other=NEG_INF)
    smax = tl.max(gv2, axis=1)
    taken_s = (sg * 32) >= n_groups
    slot = tl.arange(0, KP)
    sel_s = tl.full([KP], SENTINEL_GROUP, tl.int32)
    for j in tl.static_range(K):
        v = tl.where(taken_s, NEG_INF, smax)
        best_v = tl.max(v, axis=0)
        best_s = tl.min(tl.where((v == best_v) & (~taken_s), sg, BIG_INDEX), axis=0)
        sel_s = tl.where(slot == j, best_s, sel_s)
        taken_s = taken_s | (sg == best_s)
    g = sel_s[:, None] * 32 + c32[None, :]
    g_ok = (slot[:, None] < K) & (sel_s[:, None] < SENTINEL_GROUP) & (g < n_groups)
    gv = tl.load(gmax_ptr + row64 * n_groups + g, mask=g_ok, other=NEG_INF)
    taken = ~g_ok
    sel_g = tl.full([KP], SENTINEL_GROUP, tl.int32)
    for j in tl.static_range(K):
        v = tl.where(taken, NEG_INF, gv)
        best_v = tl.max(tl.max(v, axis=1), axis=0)
        best_g = tl.min(tl.min(tl.where((v == best_v) & (~taken), g, BIG_INDEX), axis=1), axis=0)
        sel_g = tl.where(slot == j, best_g, sel_g)
        taken = taken | (g == best_g)
    # exact top-K among the selected groups' logits
    col = tl.arange(0, GROUP_SIZE)
    idx = sel_g[:, None] * GROUP_SIZE + col[None, :]
    ok = (slot[:, None] < K) & (sel_g[:, None] < SENTINEL_GROUP) & (idx < vocab)
    row_ptr = logits_ptr + row64 * stride_row
    x = tl.load(row_ptr + idx, mask=ok, other=NEG_INF).to(tl.float32)
    taken2 = ~ok
    out_v = tl.full([KP], NEG_INF, tl.float32)
    out_i = tl.zeros([KP], tl.int32)
    for j in tl.static_range(K):
        v = tl.where(taken2, NEG_INF, x)
        best_v = tl.max(tl.max(v, axis=1), axis=0)
        best_i = tl.min(tl.min(tl.where((v == best_v) & (~taken2), idx, BIG_INDEX), axis=1), axis=0)
        out_v = tl.where(slot == j, best_v, out_v)
        out_i = tl.where(slot == j, best_i, out_i)
        taken2 = taken2 | (idx == best_i)
    p = tl.exp(out_v - lse)
    out_idx = out_i.to(tl.int64)
    if HAS_HOT:
        out_idx = tl.load(hot_ptr + out_idx, mask=slot < K, other=0)
    tl.store(out_p_ptr + row64 * K + slot, p, mask=slot < K)
    tl.store(out_i_ptr + row64 * K + slot, out_idx, mask=slot < K)


# (rows, vocab) -> (BLOCK, num_warps). Chosen on the H200 sweep in benchmarks/bench_kernels.py
# (--sweep); see benchmarks/results/kernels_h200.md.
# Sweep at 512x163840, 256x128256, 512x32000, 64x163840, 8x128256 (K=8): BLOCK 4096 / 4 warps /
# 8 programs per SM was best or within 6% of best on each shape (2048..8192 x 4..8 warps x 2..8).
def _config(rows: int, vocab: int) -> tuple[int, int]:
    if vocab <= 8192:
        return 1024, 4
    return 4096, 4


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4  # interpreter: a few splits so the merge path is exercised


def plan_splits(rows: int, vocab: int, block: int, device: torch.device, programs_per_sm: int = 8) -> tuple[int, int]:
    """(nsplit, chunk): vocabulary split so that rows * nsplit ~ programs_per_sm * #SMs; chunk is a multiple of block."""
    tiles = triton.cdiv(vocab, block)
    want = max(1, triton.cdiv(programs_per_sm * _num_sms(device), max(rows, 1)))
    nsplit = min(tiles, want)
    chunk = triton.cdiv(tiles, nsplit) * block
    return triton.cdiv(vocab, chunk), chunk


def draft_topk_triton(logits: torch.Tensor, k: int, hot_token_id: torch.Tensor | None = None,
                      block: int | None = None, num_warps: int | None = None, nsplit: int | None = None):
    """Launch both passes. `block`, `num_warps`, `nsplit` override the tuned choice (benchmarks, tests)."""
    if logits.dim() != 2 or logits.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"draft_topk: logits must be [R, V] fp32/bf16/fp16, got {tuple(logits.shape)} {logits.dtype}")
    rows, vocab = logits.shape
    if not 1 <= k <= vocab or k > 64:
        raise ValueError(f"draft_topk: k={k} must be in [1, min(V={vocab}, 64)]")
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    device = logits.device
    out_p = torch.empty(rows, k, dtype=torch.float32, device=device)
    out_i = torch.empty(rows, k, dtype=torch.int64, device=device)
    if rows == 0:
        return out_p, out_i
    cfg_block, cfg_warps = _config(rows, vocab)
    block = block or cfg_block
    num_warps = num_warps or cfg_warps
    if nsplit is None:
        nsplit, chunk = plan_splits(rows, vocab, block, device)
    else:
        chunk = triton.cdiv(triton.cdiv(vocab, nsplit), block) * block
        nsplit = triton.cdiv(vocab, chunk)
    kp = triton.next_power_of_2(k)
    n_groups = triton.cdiv(vocab, GROUP)
    part_m = torch.empty(rows, nsplit, dtype=torch.float32, device=device)
    part_s = torch.empty(rows, nsplit, dtype=torch.float32, device=device)
    gmax = torch.empty(rows, n_groups, dtype=torch.float32, device=device)
    _draft_topk_partial_kernel[(rows, nsplit)](
        logits, logits.stride(0), vocab, chunk, n_groups, part_m, part_s, gmax, nsplit,
        BLOCK=block, GROUP_SIZE=GROUP, num_warps=num_warps, enable_fp_fusion=True)
    hot = hot_token_id if hot_token_id is not None else out_i
    if hot_token_id is not None and (hot.device != device or hot.dtype != torch.int64):
        hot = hot.to(device=device, dtype=torch.int64)
    sgp = triton.next_power_of_2(triton.cdiv(n_groups, 32))
    _draft_topk_merge_kernel[(rows,)](
        logits, logits.stride(0), vocab, n_groups, part_m, part_s, gmax, nsplit,
        hot, out_p, out_i,
        K=k, KP=kp, NSP=triton.next_power_of_2(nsplit), SGP=sgp, GROUP_SIZE=GROUP,
        HAS_HOT=hot_token_id is not None, num_warps=8 if sgp >= 64 else 4)
    return out_p, out_i
