"""Triton draft top-k (split-V online log-sum-exp + two-level top-k). Loaded lazily by `draft_topk`.

Pass 1, grid (R, nsplit): each program streams its vocabulary chunk in [BLOCK // 32, 32] tiles,
keeps an online (max, sum-exp) and writes the maximum of every GROUP of 32 consecutive logits
(R * V/32 fp32: 1/16 of the bf16 logits' bytes). No data-dependent branch in the streaming loop.
Pass 2 (merge) for a row: merges the (max, sum) pairs into the lse, picks the top-K groups by
(max desc, group index asc), re-reads those K*32 logits and extracts the exact top-K (lowest index
wins ties); each extraction is one max over int64 (value, index) keys.
TOPK_CONFIG picks per shape: fused (`_draft_topk_fused_kernel`, R <= 8 or V <= 8192 now): both
passes in one launch; the split that arrives last on its row's ticket runs that row's merge,
reading the super-group maxima pass 1 wrote. Two-launch (`fused=False`, the other shapes): pass 1
then a separate merge launch (one program per row); with `merge_warps` set, pass 1 also writes the
super-group maxima and the merge runs that many warps.
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

from specwatch_kernels._workspace import workspace

GROUP = 32
LOG2E = tl.constexpr(1.4426950408889634)
NEG_INF = tl.constexpr(float("-inf"))
SENTINEL_GROUP = tl.constexpr(1 << 30)  # groups of empty slots; above every real group index
BIG_INDEX = tl.constexpr(2147483647)
KEY_MIN = tl.constexpr(-9223372036854775807 - 1)


@triton.jit
def _partial_body(logits_ptr, stride_row, vocab, chunk, n_groups, part_m_ptr, part_s_ptr, gmax_ptr, nsplit,
                  smax_ptr, n_sg, row, split, BLOCK: tl.constexpr, GROUP_SIZE: tl.constexpr,
                  WRITE_SMAX: tl.constexpr):
    """Pass 1 for (row, split). WRITE_SMAX (BLOCK a multiple of 32 groups): also store the
    super-group (32 groups) maxima, so the merge starts from V/1024 values instead of V/32."""
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
        if WRITE_SMAX:
            NSG: tl.constexpr = NG // 32
            sgl = tl.arange(0, NSG)
            smax = tl.max(tl.reshape(gmax, [NSG, 32]), axis=1)
            tl.store(smax_ptr + row.to(tl.int64) * n_sg + tile_start // (32 * GROUP_SIZE) + sgl, smax,
                     mask=(tile_start + sgl * (32 * GROUP_SIZE)) < end)
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
def _draft_topk_partial_kernel(
    logits_ptr, stride_row, vocab, chunk, n_groups,
    part_m_ptr, part_s_ptr, gmax_ptr, nsplit, smax_ptr, n_sg,
    BLOCK: tl.constexpr, GROUP_SIZE: tl.constexpr, WRITE_SMAX: tl.constexpr,
):
    _partial_body(logits_ptr, stride_row, vocab, chunk, n_groups, part_m_ptr, part_s_ptr, gmax_ptr, nsplit,
                  smax_ptr, n_sg, tl.program_id(0), tl.program_id(1), BLOCK, GROUP_SIZE, WRITE_SMAX)


@triton.jit
def _key(v, idx):
    """int64 key ordered by (value desc, index asc): orderable fp32 bits << 32 | (2^31-1 - index).
    -0.0 + 0.0 == +0.0, so both zeros get one key. One max-reduction per extraction instead of a
    max and an index-min."""
    bits = (v + 0.0).to(tl.int32, bitcast=True)
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    return (ordered.to(tl.int64) << 32) | (2147483647 - idx).to(tl.int64)


@triton.jit
def _key_index(key):
    return (2147483647 - (key & 0xFFFFFFFF)).to(tl.int32)


@triton.jit
def _key_value(key):
    ordered = (key >> 32).to(tl.int32)
    return (ordered ^ ((ordered >> 31) & 0x7FFFFFFF)).to(tl.float32, bitcast=True)


@triton.jit
def _merge_body(logits_ptr, stride_row, vocab, n_groups, part_m_ptr, part_s_ptr, gmax_ptr, nsplit,
                hot_ptr, out_p_ptr, out_i_ptr, smax_ptr, n_sg, row,
                K: tl.constexpr, KP: tl.constexpr, NSP: tl.constexpr, SGP: tl.constexpr,
                GROUP_SIZE: tl.constexpr, HAS_HOT: tl.constexpr, READ_SMAX: tl.constexpr):
    # K max-extractions, not tl.topk: compiled by Triton 3.6.0 on the H200 it failed test_*[*topk*] at K=1 (12 cases).
    # .cg loads (L2, not L1): in the fused kernel other programs wrote these moments ago.
    row64 = row.to(tl.int64)
    # log-sum-exp over splits
    sp = tl.arange(0, NSP)
    pm = tl.load(part_m_ptr + row64 * nsplit + sp, mask=sp < nsplit, other=NEG_INF, cache_modifier=".cg")
    ps = tl.load(part_s_ptr + row64 * nsplit + sp, mask=sp < nsplit, other=0.0, cache_modifier=".cg")
    m = tl.max(pm, axis=0)
    safe_m = tl.where(m == NEG_INF, 0.0, m)
    s = tl.sum(ps * tl.math.exp2((pm - safe_m) * LOG2E), axis=0)
    lse = safe_m + tl.log(s)
    # top-K groups by (max desc, group index asc), in two levels: top-K super-groups (32 groups
    # each) first, then top-K groups inside them. The argument that makes groups exact applies
    # to super-groups too, and K passes over V/1024 + 32K values replace K passes over V/32.
    # Each extraction is one int64 max over (value, index) keys; KEY_MIN marks used/absent slots.
    sg = tl.arange(0, SGP)
    c32 = tl.arange(0, 32)
    if READ_SMAX:  # written by pass 1: a [SGP] vector instead of an [SGP, 32] tile in registers
        smv = tl.load(smax_ptr + row64 * n_sg + sg, mask=sg < n_sg, other=NEG_INF, cache_modifier=".cg")
    else:
        gidx2 = sg[:, None] * 32 + c32[None, :]
        gv2 = tl.load(gmax_ptr + row64 * n_groups + gidx2, mask=gidx2 < n_groups, other=NEG_INF,
                      cache_modifier=".cg")
        smv = tl.max(gv2, axis=1)
    skey = tl.where((sg * 32) < n_groups, _key(smv, sg), KEY_MIN)
    slot = tl.arange(0, KP)
    sel_s = tl.full([KP], SENTINEL_GROUP, tl.int32)
    for j in tl.static_range(K):
        best = tl.max(skey, axis=0)
        sel_s = tl.where(slot == j, tl.where(best != KEY_MIN, _key_index(best), SENTINEL_GROUP), sel_s)
        skey = tl.where(skey == best, KEY_MIN, skey)
    g = sel_s[:, None] * 32 + c32[None, :]
    g_ok = (slot[:, None] < K) & (sel_s[:, None] < SENTINEL_GROUP) & (g < n_groups)
    gv = tl.load(gmax_ptr + row64 * n_groups + g, mask=g_ok, other=NEG_INF, cache_modifier=".cg")
    gkey = tl.where(g_ok, _key(gv, g), KEY_MIN)
    sel_g = tl.full([KP], SENTINEL_GROUP, tl.int32)
    for j in tl.static_range(K):
        best = tl.max(tl.max(gkey, axis=1), axis=0)
        sel_g = tl.where(slot == j, tl.where(best != KEY_MIN, _key_index(best), SENTINEL_GROUP), sel_g)
        gkey = tl.where(gkey == best, KEY_MIN, gkey)
    # exact top-K among the selected groups' logits
    col = tl.arange(0, GROUP_SIZE)
    idx = sel_g[:, None] * GROUP_SIZE + col[None, :]
    ok = (slot[:, None] < K) & (sel_g[:, None] < SENTINEL_GROUP) & (idx < vocab)
    row_ptr = logits_ptr + row64 * stride_row
    x = tl.load(row_ptr + idx, mask=ok, other=NEG_INF).to(tl.float32)
    xkey = tl.where(ok, _key(x, idx), KEY_MIN)
    out_v = tl.full([KP], NEG_INF, tl.float32)
    out_i = tl.zeros([KP], tl.int32)
    for j in tl.static_range(K):
        best = tl.max(tl.max(xkey, axis=1), axis=0)
        out_v = tl.where(slot == j, _key_value(best), out_v)
        out_i = tl.where(slot == j, _key_index(best), out_i)
        xkey = tl.where(xkey == best, KEY_MIN, xkey)
    p = tl.exp(out_v - lse)
    out_idx = out_i.to(tl.int64)
    if HAS_HOT:
        out_idx = tl.load(hot_ptr + out_idx, mask=slot < K, other=0)
    tl.store(out_p_ptr + row64 * K + slot, p, mask=slot < K)
    tl.store(out_i_ptr + row64 * K + slot, out_idx, mask=slot < K)


@triton.jit
def _draft_topk_merge_kernel(
    logits_ptr, stride_row, vocab, n_groups,
    part_m_ptr, part_s_ptr, gmax_ptr, nsplit,
    hot_ptr, out_p_ptr, out_i_ptr, smax_ptr, n_sg,
    K: tl.constexpr, KP: tl.constexpr, NSP: tl.constexpr, SGP: tl.constexpr, GROUP_SIZE: tl.constexpr,
    HAS_HOT: tl.constexpr, READ_SMAX: tl.constexpr,
):
    """One program per row. READ_SMAX: pass 1 wrote the super-group maxima, so a row's merge holds
    [SGP] + [KP, 32] values and runs in one warp (intra-warp reductions, every row in one wave)."""
    _merge_body(logits_ptr, stride_row, vocab, n_groups, part_m_ptr, part_s_ptr, gmax_ptr, nsplit,
                hot_ptr, out_p_ptr, out_i_ptr, smax_ptr, n_sg, tl.program_id(0), K, KP, NSP, SGP, GROUP_SIZE, HAS_HOT,
                READ_SMAX)


@triton.jit
def _draft_topk_fused_kernel(
    logits_ptr, stride_row, vocab, chunk, n_groups,
    part_m_ptr, part_s_ptr, gmax_ptr, nsplit, ticket_ptr,
    hot_ptr, out_p_ptr, out_i_ptr, smax_ptr, n_sg,
    BLOCK: tl.constexpr, GROUP_SIZE: tl.constexpr,
    K: tl.constexpr, KP: tl.constexpr, NSP: tl.constexpr, SGP: tl.constexpr, HAS_HOT: tl.constexpr,
    SMAX: tl.constexpr,
):
    """Both passes in one launch: grid (R * nsplit,), a row's splits adjacent in launch order; the
    split that arrives last on the row's ticket merges it (and resets the ticket), so merges of
    finished rows overlap the streaming of later ones and there is no second graph node."""
    pid = tl.program_id(0)
    row = pid // nsplit
    split = pid % nsplit
    _partial_body(logits_ptr, stride_row, vocab, chunk, n_groups, part_m_ptr, part_s_ptr, gmax_ptr, nsplit,
                  smax_ptr, n_sg, row, split, BLOCK, GROUP_SIZE, SMAX)
    tl.debug_barrier()
    ticket = tl.atomic_add(ticket_ptr + row, 1)
    if ticket == nsplit - 1:
        tl.atomic_xchg(ticket_ptr + row, 0)
        _merge_body(logits_ptr, stride_row, vocab, n_groups, part_m_ptr, part_s_ptr, gmax_ptr, nsplit,
                    hot_ptr, out_p_ptr, out_i_ptr, smax_ptr, n_sg, row, K, KP, NSP, SGP, GROUP_SIZE, HAS_HOT, SMAX)


# ---- configuration (data): edit from `bench_kernels.py --variants` output ----
# First row whose bounds hold wins: (max rows R or None, max vocab or None) ->
#   (fused, BLOCK, num_warps, programs per SM, maxnreg or None, merge_warps or None).
# fused=True: one launch, the last-arriving split of each row merges it (`_draft_topk_fused_kernel`);
# fused=False: the streaming pass then a merge launch (one program per row).
# maxnreg caps registers per thread (None: no cap; 128 was slower at every shape measured on
# 2026-12-01: 35.5 vs 31.5, 79.0 vs 69.2 us).
# merge_warps (two-launch only): None = the merge reads the V/32 group maxima (8 warps when
# V/1024 >= 64 else 4); an int = pass 1 also writes the super-group maxima (BLOCK a multiple of
# 1024) and the merge runs that many warps per row ("smax m1": every reduction inside one warp).
# Where the numbers come from: `bench_kernels.py --variants` on the H200 (2026-12-02, commit
# 23566ac, Triton 3.6.0; benchmarks/results/kernels_h200.md), exact variants only:
#   R = 512, V = 163840, K = 8: 2launch B4096 w4 p8 smax m1 60.0 us (1.52x the 39.5 us floor; m2 61.0,
#     fused B4096 p8 69.2); R = 512, V = 32000, K = 8: the same, 18.5 us (m2 18.5, a tie);
#   R = 256, V = 128256, K = 4: 2launch B4096 w4 p4 smax m1 27.8 us (fused B2048 p8 28.7);
#   R = 64, V = 163840, K = 8: 2launch B4096 w4 p4 smax m1 13.5 us (p8 smax m1 14.1); one row
#     for R <= 256 since both shapes pick the same variant.
# Tried on the H200 at commit 795915b (2026-12-02 05:23 run, same shapes) and removed, all slower at
# 512 x 163840 than the row above (59.8 us there): group and super-group maxima stored in bf16
# (exact, half the maxima bytes; pass 1 56.9 vs 51.8 us, variant 65.2 us), groups of 64 (pass 1
# 57.7 us at 96 registers vs 80; variant 65.8 us), both (65.3 us), and the merge as a programmatic
# dependent launch (griddepcontrol; 76.6-80.7 us: the waiting merge programs take pass 1's slots).
# Also slower there at commit b790d11 (05:27 run): more splits (p16 63.0, p24 60.6 us), a cap on pass
# 1's registers (72: 63.0, 64: 70.3 us), 8 warps on 8192-wide tiles (77.3 us).
# Not measured in that run, kept from 2026-12-01: fused B4096/4 warps/8 per SM at R = 8 (9.5,
# 5.6 us) and the V <= 8192 row.
TOPK_CONFIG: tuple[tuple[int | None, int | None, bool, int, int, int, int | None, int | None], ...] = (
    (None, 8192, True, 1024, 4, 8, None, None),
    (8, None, True, 4096, 4, 8, None, None),
    (256, None, False, 4096, 4, 4, None, 1),
    (None, None, False, 4096, 4, 8, None, 1),
)
_FROM_CONFIG = object()


def _config(rows: int, vocab: int) -> tuple[int, int]:
    """(BLOCK, num_warps) that TOPK_CONFIG picks."""
    return plan(rows, vocab)[1:3]


def plan(rows: int, vocab: int) -> tuple:
    """(fused, BLOCK, num_warps, programs per SM, maxnreg, merge_warps) from TOPK_CONFIG."""
    for max_rows, max_vocab, *cfg in TOPK_CONFIG:
        if (max_rows is None or rows <= max_rows) and (max_vocab is None or vocab <= max_vocab):
            return tuple(cfg)
    return True, 4096, 4, 8, None, None


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
                      block: int | None = None, num_warps: int | None = None, nsplit: int | None = None,
                      fused: bool | None = None, programs_per_sm: int | None = None, maxnreg: int | None = 0,
                      merge_warps=_FROM_CONFIG):
    """Launch the kernel(s) TOPK_CONFIG picks. `block`, `num_warps`, `nsplit`, `fused`,
    `programs_per_sm`, `maxnreg` (None: no cap), `merge_warps` override it
    (benchmarks, tests)."""
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
    cfg_fused, cfg_block, cfg_warps, cfg_pps, cfg_maxnreg, cfg_mwarps = plan(rows, vocab)
    maxnreg = cfg_maxnreg if maxnreg == 0 else maxnreg
    extra = {"maxnreg": maxnreg} if maxnreg else {}
    fused = cfg_fused if fused is None else fused
    merge_warps = cfg_mwarps if merge_warps is _FROM_CONFIG else merge_warps
    block = block or cfg_block
    num_warps = num_warps or cfg_warps
    if nsplit is None:
        nsplit, chunk = plan_splits(rows, vocab, block, device, programs_per_sm or cfg_pps)
    else:
        chunk = triton.cdiv(triton.cdiv(vocab, nsplit), block) * block
        nsplit = triton.cdiv(vocab, chunk)
    kp = triton.next_power_of_2(k)
    n_groups = triton.cdiv(vocab, GROUP)
    part_m = torch.empty(rows, nsplit, dtype=torch.float32, device=device)
    part_s = torch.empty(rows, nsplit, dtype=torch.float32, device=device)
    gmax = torch.empty(rows, n_groups, dtype=torch.float32, device=device)
    hot = hot_token_id if hot_token_id is not None else out_i
    if hot_token_id is not None and (hot.device != device or hot.dtype != torch.int64):
        hot = hot.to(device=device, dtype=torch.int64)
    sgp = triton.next_power_of_2(triton.cdiv(n_groups, 32))
    nsp = triton.next_power_of_2(nsplit)
    n_sg = triton.cdiv(n_groups, 32)
    if fused:
        tickets = workspace("topk_tickets", rows, torch.int32, 0, device)
        use_smax = block % (32 * GROUP) == 0
        smax = torch.empty(rows, n_sg, dtype=torch.float32, device=device) if use_smax else gmax
        _draft_topk_fused_kernel[(rows * nsplit,)](
            logits, logits.stride(0), vocab, chunk, n_groups, part_m, part_s, gmax, nsplit, tickets,
            hot, out_p, out_i, smax, n_sg,
            BLOCK=block, GROUP_SIZE=GROUP, K=k, KP=kp, NSP=nsp, SGP=sgp,
            HAS_HOT=hot_token_id is not None, SMAX=use_smax, num_warps=num_warps,
            enable_fp_fusion=True, **extra)
        return out_p, out_i
    use_smax = merge_warps is not None and block % (32 * GROUP) == 0
    smax = torch.empty(rows, n_sg, dtype=torch.float32, device=device) if use_smax else gmax
    _draft_topk_partial_kernel[(rows, nsplit)](
        logits, logits.stride(0), vocab, chunk, n_groups, part_m, part_s, gmax, nsplit, smax, n_sg,
        BLOCK=block, GROUP_SIZE=GROUP, WRITE_SMAX=use_smax, num_warps=num_warps, enable_fp_fusion=True, **extra)
    _draft_topk_merge_kernel[(rows,)](
        logits, logits.stride(0), vocab, n_groups, part_m, part_s, gmax, nsplit,
        hot, out_p, out_i, smax, n_sg,
        K=k, KP=kp, NSP=nsp, SGP=sgp, GROUP_SIZE=GROUP,
        HAS_HOT=hot_token_id is not None, READ_SMAX=use_smax,
        num_warps=merge_warps or (8 if sgp >= 64 else 4))
    return out_p, out_i
