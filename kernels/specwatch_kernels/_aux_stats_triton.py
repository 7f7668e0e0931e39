"""Triton one-pass statistics of the captured aux hidden states. Loaded lazily by `aux_stats`.

_aux_stats_kernel, grid (row blocks, C segments): streams its rows of one segment (and of `ref`)
once, in [BT, BD] tiles with fp32 accumulators, and writes per-block partials: sum x^2, sum x,
max|x|, non-finite count, and with `ref` the sum/min of row cosines and max row rel-L2.
_aux_finalize_kernel, grid (C,): reduces the partials (fixed order, so results are deterministic).
_aux_candidates_kernel, grid (row blocks, Lc): cosine of every segment against one candidate layer.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

COSINE_EPS = tl.constexpr(1e-12)
INF = tl.constexpr(float("inf"))


@triton.jit
def _aux_stats_kernel(
    aux_ptr, stride_aux, ref_ptr, stride_ref, tokens, d,
    part_f_ptr, part_n_ptr,
    C: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr, HAS_REF: tl.constexpr,
):
    blk = tl.program_id(0)
    c = tl.program_id(1)
    rows = blk * BT + tl.arange(0, BT)
    row_ok = rows < tokens
    rows64 = rows.to(tl.int64)
    col0 = tl.arange(0, BD)
    acc_sq = tl.zeros([BT, BD], tl.float32)
    acc_sum = tl.zeros([BT, BD], tl.float32)
    acc_max = tl.zeros([BT, BD], tl.float32)
    acc_nf = tl.zeros([BT, BD], tl.int32)
    acc_dot = tl.zeros([BT, BD], tl.float32)
    acc_rr = tl.zeros([BT, BD], tl.float32)
    acc_diff = tl.zeros([BT, BD], tl.float32)
    for d0 in range(0, d, BD):
        cols = c * d + d0 + col0
        m = row_ok[:, None] & ((d0 + col0) < d)[None, :]
        x = tl.load(aux_ptr + rows64[:, None] * stride_aux + cols[None, :], mask=m, other=0.0).to(tl.float32)
        finite = tl.abs(x) < INF  # False for NaN and +-inf
        acc_nf += (~finite).to(tl.int32)
        x = tl.where(finite, x, 0.0)
        acc_sq += x * x
        acc_sum += x
        acc_max = tl.maximum(acc_max, tl.abs(x))
        if HAS_REF:
            r = tl.load(ref_ptr + rows64[:, None] * stride_ref + cols[None, :], mask=m, other=0.0).to(tl.float32)
            r = tl.where(tl.abs(r) < INF, r, 0.0)
            acc_dot += x * r
            acc_rr += r * r
            acc_diff += (x - r) * (x - r)
    row_sq = tl.sum(acc_sq, axis=1)
    out = (blk * C + c).to(tl.int64) * 8
    tl.store(part_f_ptr + out + 0, tl.sum(row_sq, axis=0))
    tl.store(part_f_ptr + out + 1, tl.sum(tl.sum(acc_sum, axis=1), axis=0))
    tl.store(part_f_ptr + out + 2, tl.max(tl.max(acc_max, axis=1), axis=0))
    tl.store(part_n_ptr + blk * C + c, tl.sum(tl.sum(acc_nf, axis=1), axis=0))
    if HAS_REF:
        dot = tl.sum(acc_dot, axis=1)
        rr = tl.sum(acc_rr, axis=1)
        cos = dot / tl.maximum(tl.sqrt(row_sq) * tl.sqrt(rr), COSINE_EPS)
        rel = tl.sqrt(tl.sum(acc_diff, axis=1)) / tl.maximum(tl.sqrt(rr), COSINE_EPS)
        tl.store(part_f_ptr + out + 3, tl.sum(tl.where(row_ok, cos, 0.0), axis=0))
        tl.store(part_f_ptr + out + 4, tl.min(tl.where(row_ok, cos, INF), axis=0))
        tl.store(part_f_ptr + out + 5, tl.max(tl.where(row_ok, rel, 0.0), axis=0))


@triton.jit
def _aux_finalize_kernel(
    part_f_ptr, part_n_ptr, nblk, count, tokens,
    out_f_ptr, out_n_ptr,
    C: tl.constexpr, BB: tl.constexpr, HAS_REF: tl.constexpr,
):
    c = tl.program_id(0)
    sq = tl.zeros([BB], tl.float32)
    sm = tl.zeros([BB], tl.float32)
    mx = tl.zeros([BB], tl.float32)
    nf = tl.zeros([BB], tl.int64)
    cs = tl.zeros([BB], tl.float32)
    cm = tl.full([BB], float("inf"), tl.float32)
    rl = tl.zeros([BB], tl.float32)
    for b0 in range(0, nblk, BB):
        blk = b0 + tl.arange(0, BB)
        ok = blk < nblk
        base = (blk * C + c).to(tl.int64) * 8
        sq += tl.load(part_f_ptr + base + 0, mask=ok, other=0.0)
        sm += tl.load(part_f_ptr + base + 1, mask=ok, other=0.0)
        mx = tl.maximum(mx, tl.load(part_f_ptr + base + 2, mask=ok, other=0.0))
        nf += tl.load(part_n_ptr + blk * C + c, mask=ok, other=0).to(tl.int64)
        if HAS_REF:
            cs += tl.load(part_f_ptr + base + 3, mask=ok, other=0.0)
            cm = tl.minimum(cm, tl.load(part_f_ptr + base + 4, mask=ok, other=float("inf")))
            rl = tl.maximum(rl, tl.load(part_f_ptr + base + 5, mask=ok, other=0.0))
    mean_square = tl.sum(sq, axis=0) / count
    tl.store(out_f_ptr + 0 * C + c, mean_square)
    tl.store(out_f_ptr + 1 * C + c, tl.sqrt(mean_square))
    tl.store(out_f_ptr + 2 * C + c, tl.max(mx, axis=0))
    tl.store(out_f_ptr + 3 * C + c, tl.sum(sm, axis=0) / count)
    tl.store(out_n_ptr + c, tl.sum(nf, axis=0))
    if HAS_REF:
        tl.store(out_f_ptr + 4 * C + c, tl.sum(cs, axis=0) / tokens)
        tl.store(out_f_ptr + 5 * C + c, tl.min(cm, axis=0))
        tl.store(out_f_ptr + 6 * C + c, tl.max(rl, axis=0))


@triton.jit
def _aux_candidates_kernel(
    aux_ptr, stride_aux, cand_ptr, stride_ct, stride_cl, tokens, d, part_ptr,
    C: tl.constexpr, CP: tl.constexpr, LC: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr,
):
    blk = tl.program_id(0)
    layer = tl.program_id(1)
    rows = blk * BT + tl.arange(0, BT)
    row_ok = rows < tokens
    rows64 = rows.to(tl.int64)
    seg = tl.arange(0, CP)
    col0 = tl.arange(0, BD)
    acc_dot = tl.zeros([BT, CP, BD], tl.float32)
    acc_aa = tl.zeros([BT, CP, BD], tl.float32)
    acc_cc = tl.zeros([BT, BD], tl.float32)
    for d0 in range(0, d, BD):
        col_ok = (d0 + col0) < d
        m2 = row_ok[:, None] & col_ok[None, :]
        y = tl.load(cand_ptr + rows64[:, None] * stride_ct + layer * stride_cl + (d0 + col0)[None, :],
                    mask=m2, other=0.0).to(tl.float32)
        y = tl.where(tl.abs(y) < INF, y, 0.0)
        m3 = m2[:, None, :] & (seg < C)[None, :, None]
        offs = rows64[:, None, None] * stride_aux + (seg * d)[None, :, None] + (d0 + col0)[None, None, :]
        x = tl.load(aux_ptr + offs, mask=m3, other=0.0).to(tl.float32)
        x = tl.where(tl.abs(x) < INF, x, 0.0)
        acc_dot += x * y[:, None, :]
        acc_aa += x * x
        acc_cc += y * y
    dot = tl.sum(acc_dot, axis=2)
    na = tl.sqrt(tl.sum(acc_aa, axis=2))
    nc = tl.sqrt(tl.sum(acc_cc, axis=1))
    cos = dot / tl.maximum(na * nc[:, None], COSINE_EPS)
    cos = tl.where(row_ok[:, None], cos, 0.0)
    tl.store(part_ptr + (blk * LC + layer).to(tl.int64) * C + seg, tl.sum(cos, axis=0), mask=seg < C)


def _row_block(tokens: int, segments: int, device: torch.device) -> int:
    """Rows per program: enough programs for ~4 per SM, at most 16 rows (register budget)."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4
    bt = 1
    while bt < 16 and tokens * segments // (bt * 2) >= 4 * sms:
        bt *= 2
    return bt


# A [BT, BD] tile holds TILE elements: up to 7 fp32 accumulators of that size stay in registers
# with 4 warps (16 rows x 512 columns spilled on the H200 and ran 16x slower with `ref`).
TILE = 2048


def aux_stats_triton(aux, num_segments=3, ref=None, candidates=None, block_t: int | None = None):
    """Launch the statistics (and optional candidate-cosine) kernels; returns `AuxStats`."""
    from specwatch_kernels.aux_stats import AuxStats

    if aux.dim() != 2 or aux.shape[1] % num_segments:
        raise ValueError(f"aux_stats: aux must be [T, C*d] with C={num_segments}, got {tuple(aux.shape)}")
    tokens = aux.shape[0]
    if tokens == 0:
        raise ValueError("aux_stats: T must be >= 1")
    c = num_segments
    d = aux.shape[1] // c
    device = aux.device
    if aux.stride(1) != 1:
        aux = aux.contiguous()
    if ref is not None:
        if ref.shape != aux.shape:
            raise ValueError(f"aux_stats: ref shape {tuple(ref.shape)} != aux shape {tuple(aux.shape)}")
        ref = ref if ref.stride(1) == 1 else ref.contiguous()
    bt = block_t or _row_block(tokens, c, device)
    nblk = triton.cdiv(tokens, bt)
    part_f = torch.empty(nblk * c * 8, dtype=torch.float32, device=device)
    part_n = torch.empty(nblk * c, dtype=torch.int32, device=device)
    has_ref = ref is not None
    _aux_stats_kernel[(nblk, c)](
        aux, aux.stride(0), ref if has_ref else aux, ref.stride(0) if has_ref else 0, tokens, d,
        part_f, part_n, C=c, BT=bt, BD=TILE // bt, HAS_REF=has_ref, num_warps=4)
    out_f = torch.empty(7, c, dtype=torch.float32, device=device)
    out_n = torch.empty(c, dtype=torch.int64, device=device)
    _aux_finalize_kernel[(c,)](part_f, part_n, nblk, float(tokens * d), float(tokens), out_f, out_n,
                               C=c, BB=256, HAS_REF=has_ref, num_warps=4)
    fields = dict(mean_square=out_f[0], rms=out_f[1], max_abs=out_f[2], nonfinite_count=out_n, mean=out_f[3])
    if has_ref:
        fields.update(ref_cosine_mean=out_f[4], ref_cosine_min=out_f[5], ref_rel_l2_max=out_f[6])
    if candidates is not None:
        if candidates.dim() != 3 or candidates.shape[0] != tokens or candidates.shape[2] != d:
            raise ValueError(f"aux_stats: candidates must be [T={tokens}, Lc, d={d}], got {tuple(candidates.shape)}")
        if candidates.stride(2) != 1:
            candidates = candidates.contiguous()
        lc = candidates.shape[1]
        bt_c = min(bt, 4)
        nblk_c = triton.cdiv(tokens, bt_c)
        part = torch.empty(nblk_c, lc, c, dtype=torch.float32, device=device)
        _aux_candidates_kernel[(nblk_c, lc)](
            aux, aux.stride(0), candidates, candidates.stride(0), candidates.stride(1), tokens, d, part,
            C=c, CP=triton.next_power_of_2(c), LC=lc, BT=bt_c, BD=TILE // (4 * bt_c), num_warps=4)
        fields.update(candidate_cosine=(part.sum(0) / tokens).t().contiguous())
    return AuxStats(**fields)
