"""Triton greedy tree verification in one launch (or argmax + a walk launch). Loaded lazily by `verify_tree`.

Grid (B*N rows, nsplit): each program takes the argmax of its vocabulary chunk and folds it into
the row's 64-bit key (orderable fp32 bits << 32 | (2^31-1 - index)) with atomic_max, so the largest
value and then the lowest index win. It then takes a ticket on its request's counter; the program
that arrives last reads (and resets) the request's N keys, writes target_predict and walks the tree
exactly like SGLang's VerifyTreeGreedy, updating the acceptance counters with atomics.
Where torch.argmax alone is faster than the fused kernel (`fused_is_faster`), target_predict comes
from torch.argmax and `_walk_kernel` (one program per request) does the same walk.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._workspace import workspace

KEY_INIT = -(2**63)
NEG_INF = tl.constexpr(float("-inf"))
LOW_MASK = tl.constexpr(0xFFFFFFFF)
IDX_FLIP = tl.constexpr(2147483647)


@triton.jit
def _verify_tree_kernel(
    logits_ptr, stride_row, vocab, chunk, nsplit,
    cand_ptr, ridx_ptr, next_ptr, sib_ptr,
    key_ptr, ticket_ptr,
    predict_ptr, accept_ptr, accept_len_ptr, tp_ptr, bonus_ptr,
    hist_ptr, attempted_ptr, accepted_ptr,
    N: tl.constexpr, NP: tl.constexpr, W: tl.constexpr, WP: tl.constexpr,
    BLOCK: tl.constexpr, HAS_COUNTERS: tl.constexpr,
):
    row = tl.program_id(0)
    split = tl.program_id(1)
    row_ptr = logits_ptr + row.to(tl.int64) * stride_row
    start = split * chunk
    end = tl.minimum(start + chunk, vocab)
    offs0 = tl.arange(0, BLOCK)
    # Lane-wise running argmax (a lane sees increasing offsets, so '>' keeps its first maximum);
    # one cross-warp reduction at the end instead of two per tile.
    lane_v = tl.full([BLOCK], float("-inf"), tl.float32)
    lane_i = tl.zeros([BLOCK], tl.int32) + 2147483647
    for tile_start in range(start, end, BLOCK):
        offs = tile_start + offs0
        x = tl.load(row_ptr + offs, mask=offs < end, other=NEG_INF).to(tl.float32)
        upd = (x > lane_v) | ((lane_i == 2147483647) & (offs < end))
        lane_v = tl.where(upd, x, lane_v)
        lane_i = tl.where(upd, offs, lane_i)
    best_v = tl.max(lane_v, axis=0)
    best_i = tl.min(tl.where(lane_v == best_v, lane_i, 2147483647), axis=0)
    # -0.0 + 0.0 == +0.0, so both zeros get one key (argmax treats them as equal)
    bits = (best_v + 0.0).to(tl.int32, bitcast=True)
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    key = (ordered.to(tl.int64) << 32) | (2147483647 - best_i).to(tl.int64)
    tl.atomic_max(key_ptr + row, key)
    tl.debug_barrier()
    b = row // N
    ticket = tl.atomic_add(ticket_ptr + b, 1)
    if ticket == N * nsplit - 1:
        tl.atomic_xchg(ticket_ptr + b, 0)
        base = b.to(tl.int64) * N
        node = tl.arange(0, NP)
        keys = tl.atomic_xchg(key_ptr + base + node, tl.full([NP], -9223372036854775807 - 1, tl.int64),
                              mask=node < N)
        tp = 2147483647 - (keys & 0xFFFFFFFF)
        tl.store(tp_ptr + base + node, tp, mask=node < N)
        _walk(b, base, node, tp, cand_ptr, ridx_ptr, next_ptr, sib_ptr, predict_ptr, accept_ptr,
              accept_len_ptr, bonus_ptr, hist_ptr, attempted_ptr, accepted_ptr, N, NP, W, WP, HAS_COUNTERS)


@triton.jit
def _walk_kernel(
    tp_ptr, cand_ptr, ridx_ptr, next_ptr, sib_ptr,
    predict_ptr, accept_ptr, accept_len_ptr, bonus_ptr,
    hist_ptr, attempted_ptr, accepted_ptr,
    N: tl.constexpr, NP: tl.constexpr, W: tl.constexpr, WP: tl.constexpr, HAS_COUNTERS: tl.constexpr,
):
    """The tree walk alone, one program per request, on a precomputed target_predict [B*N]."""
    b = tl.program_id(0)
    base = b.to(tl.int64) * N
    node = tl.arange(0, NP)
    tp = tl.load(tp_ptr + base + node, mask=node < N, other=0)
    _walk(b, base, node, tp, cand_ptr, ridx_ptr, next_ptr, sib_ptr, predict_ptr, accept_ptr,
          accept_len_ptr, bonus_ptr, hist_ptr, attempted_ptr, accepted_ptr, N, NP, W, WP, HAS_COUNTERS)


@triton.jit
def _walk(b, base, node, tp, cand_ptr, ridx_ptr, next_ptr, sib_ptr, predict_ptr, accept_ptr,
          accept_len_ptr, bonus_ptr, hist_ptr, attempted_ptr, accepted_ptr,
          N: tl.constexpr, NP: tl.constexpr, W: tl.constexpr, WP: tl.constexpr, HAS_COUNTERS: tl.constexpr):
    """Walk request b's tree exactly like VerifyTreeGreedy, given its N target tokens `tp`."""
    # The walk reads the request's tree from registers: a dependent global load per step
    # (~0.5-1 us each) made an 8-deep chain walk cost ~10 us on the H200.
    ok = node < N
    cand = tl.load(cand_ptr + base + node, mask=ok, other=-1)
    nxt_v = tl.load(next_ptr + base + node, mask=ok, other=-1)
    sib_v = tl.load(sib_ptr + base + node, mask=ok, other=-1)
    ridx_v = tl.load(ridx_ptr + base + node, mask=ok, other=-1)
    pred = tl.zeros([NP], tl.int32)
    col = tl.arange(0, WP)
    last_node = 0
    acc = tl.where(col == 0, tl.sum(tl.where(node == 0, ridx_v, 0), axis=0), -1)
    num = 0
    cur = last_node
    j = 1
    go = 1
    while (go != 0) & (j < W):
        cur = tl.sum(tl.where(node == cur, nxt_v, 0), axis=0).to(tl.int32)
        if HAS_COUNTERS:
            if cur != -1:
                tl.atomic_add(attempted_ptr + (j - 1), 1)
        found = 0
        target = tl.sum(tl.where(node == last_node, tp, 0), axis=0)
        while (cur != -1) & (found == 0):
            draft = tl.sum(tl.where(node == cur, cand, 0), axis=0)
            if draft == target:
                pred = tl.where(node == last_node, target.to(tl.int32), pred)
                num += 1
                acc = tl.where(col == num, tl.sum(tl.where(node == cur, ridx_v, 0), axis=0), acc)
                last_node = cur
                found = 1
            else:
                cur = tl.sum(tl.where(node == cur, sib_v, 0), axis=0).to(tl.int32)
        if HAS_COUNTERS:
            if found != 0:
                tl.atomic_add(accepted_ptr + (j - 1), 1)
        go = found
        j += 1
    bonus = tl.sum(tl.where(node == last_node, tp, 0), axis=0)
    pred = tl.where(node == last_node, bonus.to(tl.int32), pred)
    tl.store(predict_ptr + base + node, pred, mask=ok)
    tl.store(bonus_ptr + b, bonus)
    tl.store(accept_len_ptr + b, num)
    tl.store(accept_ptr + b.to(tl.int64) * W + col, acc.to(tl.int32), mask=col < W)
    if HAS_COUNTERS:
        tl.atomic_add(hist_ptr + num, 1)


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


# BLOCK 2048 / 4 warps: chosen on the H200 (benchmarks/bench_kernels.py); see kernels_h200.md.
BLOCK = 2048
NUM_WARPS = 4


def fused_is_faster(rows: int, vocab: int) -> bool:
    """Whether the single-launch kernel beats `torch.argmax` + the walk kernel at this shape.

    From the H200 measurements in benchmarks/results/kernels_h200.md (in graph): the fused kernel
    wins for up to 64 rows at V >= 128256 and for up to 8 rows at V = 32000; elsewhere
    (R >= 256, or V = 32000 with R >= 64) torch.argmax alone was already faster than the fused
    kernel (its split-V partials + ticket cost more than the single argmax pass)."""
    return rows <= 64 and (vocab >= 65536 or rows <= 8)


def verify_tree_triton(logits, candidates, retrive_index, retrive_next_token, retrive_next_sibling,
                       num_steps_plus_one, counters=None, block: int | None = None, nsplit: int | None = None,
                       fused: bool | None = None):
    """Launch the single-pass verify kernel, or torch.argmax + the walk kernel where that is
    faster (`fused_is_faster`; `fused` forces one of them, for tests and benchmarks).

    Precondition: retrive_index[b, i] == b*N + i (as build_tree makes): the walk indexes
    target_predict and predict by node within the request, and writes accept_index from retrive_index.
    """
    from kernels.verify_tree import VerifyResult

    batch, n = candidates.shape
    rows, vocab = logits.shape
    if rows != batch * n:
        raise ValueError(f"verify_tree: logits has {rows} rows, expected B*N = {batch}*{n}")
    device = logits.device
    width = num_steps_plus_one
    predict = torch.empty(batch * n, dtype=torch.int32, device=device)
    accept_index = torch.empty(batch, width, dtype=torch.int32, device=device)
    accept_length = torch.empty(batch, dtype=torch.int32, device=device)
    target_predict = torch.empty(batch * n, dtype=torch.int64, device=device)
    bonus = torch.empty(batch, dtype=torch.int64, device=device)
    if batch == 0:
        return VerifyResult(predict, accept_index, accept_length, target_predict, bonus)
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    cand = candidates.to(torch.int64).contiguous()
    ridx = retrive_index.to(torch.int64).contiguous()
    nxt = retrive_next_token.to(torch.int64).contiguous()
    sib = retrive_next_sibling.to(torch.int64).contiguous()
    if counters is not None:
        hist, att, acc = counters.accept_length_hist, counters.depth_attempted, counters.depth_accepted
    else:
        hist = att = acc = accept_length  # unused (HAS_COUNTERS=False)
    if not (fused_is_faster(rows, vocab) if fused is None else fused):
        torch.argmax(logits, dim=-1, out=target_predict)
        _walk_kernel[(batch,)](
            target_predict, cand, ridx, nxt, sib, predict, accept_index, accept_length, bonus, hist, att, acc,
            N=n, NP=triton.next_power_of_2(n), W=width, WP=triton.next_power_of_2(width),
            HAS_COUNTERS=counters is not None, num_warps=1)
        return VerifyResult(predict, accept_index, accept_length, target_predict, bonus)
    block = block or BLOCK
    tiles = triton.cdiv(vocab, block)
    if nsplit is None:
        nsplit = min(tiles, max(1, triton.cdiv(6 * _num_sms(device), rows)))
    chunk = triton.cdiv(tiles, nsplit) * block
    nsplit = triton.cdiv(vocab, chunk)
    keys = workspace("verify_keys", rows, torch.int64, KEY_INIT, device)
    tickets = workspace("verify_tickets", batch, torch.int32, 0, device)
    _verify_tree_kernel[(rows, nsplit)](
        logits, logits.stride(0), vocab, chunk, nsplit,
        cand, ridx, nxt, sib, keys, tickets,
        predict, accept_index, accept_length, target_predict, bonus,
        hist, att, acc,
        N=n, NP=triton.next_power_of_2(n), W=width, WP=triton.next_power_of_2(width),
        BLOCK=block, HAS_COUNTERS=counters is not None, num_warps=NUM_WARPS)
    return VerifyResult(predict, accept_index, accept_length, target_predict, bonus)
