"""Triton greedy tree verification in one launch (or argmax + a walk launch). Loaded lazily by `verify_tree`.

Split-V ("fused"), grid (B*N rows, nsplit): each program takes the argmax of its vocabulary chunk and folds it into
the row's 64-bit key (orderable fp32 bits << 32 | (2^31-1 - index)) with atomic_max, so the largest
value and then the lowest index win. It then takes a ticket on its request's counter; the program
that arrives last reads (and resets) the request's N keys, writes target_predict and walks the tree
exactly like SGLang's VerifyTreeGreedy, updating the acceptance counters with atomics.
Row-wise ("rowwise", grid (B*N,)): one program per row stores its argmax and takes the ticket.
Path "argmax" (`VERIFY_DISPATCH` can pick it; no row does since 2026-12-02): target_predict comes
from torch.argmax and `_walk_kernel` (one program per request) does the same walk. The walk (`_walk`)
is parallel over the nodes: no per-node serial scan, no atomics inside a loop.
`_verify_split_kernel` (paths in SPLIT_PATHS, candidates for issue 17): the same two designs with a
shorter chain of dependent memory round trips between the argmax and the walk (its docstring says
which, and why the weaker memory orders are enough).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from specwatch_kernels._workspace import workspace

KEY_INIT = -(2**63)
NEG_INF = tl.constexpr(float("-inf"))
LOW_MASK = tl.constexpr(0xFFFFFFFF)
IDX_FLIP = tl.constexpr(2147483647)


@triton.jit
def _first_argmax(row_ptr, start, end, BLOCK: tl.constexpr):
    """(value, index) of the first maximum of row[start:end]: a lane-wise running argmax (a lane
    sees increasing offsets, so '>' keeps its first maximum), then one cross-warp reduction: the
    largest value, and the lowest index holding it (+0.0 == -0.0, as in torch.argmax)."""
    offs0 = tl.arange(0, BLOCK)
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
    return best_v, best_i


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
    best_v, best_i = _first_argmax(row_ptr, start, end, BLOCK)
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
def _verify_rowwise_kernel(
    logits_ptr, stride_row, vocab,
    cand_ptr, ridx_ptr, next_ptr, sib_ptr, ticket_ptr,
    predict_ptr, accept_ptr, accept_len_ptr, tp_ptr, bonus_ptr,
    hist_ptr, attempted_ptr, accepted_ptr,
    N: tl.constexpr, NP: tl.constexpr, W: tl.constexpr, WP: tl.constexpr,
    BLOCK: tl.constexpr, HAS_COUNTERS: tl.constexpr,
):
    """One program per row (no split-V): the row's argmax is final in the program, so it is stored
    with a plain store (no 64-bit atomic_max, no key workspace to read back and reset); the program
    that arrives last on its request's ticket reads the request's N argmaxes from L2 and walks."""
    row = tl.program_id(0)
    row_ptr = logits_ptr + row.to(tl.int64) * stride_row
    best_v, best_i = _first_argmax(row_ptr, 0, vocab, BLOCK)
    tl.store(tp_ptr + row, best_i.to(tl.int64))
    tl.debug_barrier()
    b = row // N
    ticket = tl.atomic_add(ticket_ptr + b, 1)  # acq_rel: publishes the store above, acquires the others'
    if ticket == N - 1:
        tl.atomic_xchg(ticket_ptr + b, 0)
        base = b.to(tl.int64) * N
        node = tl.arange(0, NP)
        tp = tl.load(tp_ptr + base + node, mask=node < N, other=0, cache_modifier=".cg")
        _walk(b, base, node, tp, cand_ptr, ridx_ptr, next_ptr, sib_ptr, predict_ptr, accept_ptr,
              accept_len_ptr, bonus_ptr, hist_ptr, attempted_ptr, accepted_ptr, N, NP, W, WP, HAS_COUNTERS)


@triton.jit
def _verify_split_kernel(
    logits_ptr, stride_row, vocab, chunk, nsplit,
    cand_ptr, ridx_ptr, next_ptr, sib_ptr,
    key_ptr, ticket_ptr,
    predict_ptr, accept_ptr, accept_len_ptr, tp_ptr, bonus_ptr,
    hist_ptr, attempted_ptr, accepted_ptr,
    N: tl.constexpr, NP: tl.constexpr, W: tl.constexpr, WP: tl.constexpr, SP: tl.constexpr,
    BLOCK: tl.constexpr, HAS_COUNTERS: tl.constexpr, SLOTS: tl.constexpr, PREFETCH: tl.constexpr,
    STAGES: tl.constexpr,
):
    """Split-V (grid (B*N, nsplit)) with a shorter hand-off chain than `_verify_tree_kernel`
    (candidates for issue 17; `SPLIT_PATHS` names the combinations).

    SLOTS=True: each program stores its split's 64-bit key with a plain store into its own slot
      key[row * nsplit + split] (no atomic_max; every slot is rewritten on every call, so nothing
      needs resetting); the last program loads the request's [N, nsplit] slots and takes the max
      per row. nsplit=1 makes this the row-wise design.
    SLOTS=False: `_verify_tree_kernel`'s hand-off relaxed: atomic_max(sem="relaxed") into key[row],
      and the last program reads the keys with plain L2 loads and resets them with plain stores
      (instead of atomic_xchg), and resets the ticket with a plain store.
    PREFETCH: every program loads its request's tree before streaming its logits, so the last one
      starts the walk without another round trip.
    STAGES (benchmark decomposition): 0 = the split argmax and its key store alone (no ticket:
      outputs are not written); 1 = + the ticket, the last program writes target_predict only;
      2 = everything (the walk and counters, with relaxed counter atomics).

    Memory order (the interpreter runs programs one after another, so the tests cannot see any of
    this; the argument is the CUDA/PTX memory model): a program's key write (plain store or
    relaxed atomic_max, issued by some thread of the CTA) precedes, through bar.sync (CTA-scope
    synchronisation), the ticket's atomic_add, which is acq_rel at gpu scope: a release, cumulative
    over the key write. The ticket's RMWs form one release sequence, so the program that reads
    N*nsplit-1 acquires every other program's release: all N*nsplit key writes happen before its
    loads, which go to L2 (.cg: L1 is not coherent) and so return the final keys. No program of
    this request touches its keys or ticket after its own ticket, so the last program's plain
    reset stores are ordered after all of them; the next launch sees them (kernel boundary). The
    keys are read, then a bar.sync, then reset: Triton replicates a small tensor over threads of
    several warps, and without the barrier one warp's reset could land before another warp's load.
    """
    row = tl.program_id(0)
    split = tl.program_id(1)
    b = row // N
    base = b.to(tl.int64) * N
    node = tl.arange(0, NP)
    if PREFETCH:
        cand, nxt, sib, ridx = _load_tree(base, node, cand_ptr, ridx_ptr, next_ptr, sib_ptr, N)
    row_ptr = logits_ptr + row.to(tl.int64) * stride_row
    start = split * chunk
    end = tl.minimum(start + chunk, vocab)
    best_v, best_i = _first_argmax(row_ptr, start, end, BLOCK)
    bits = (best_v + 0.0).to(tl.int32, bitcast=True)  # -0.0 + 0.0 == +0.0: one key for both zeros
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    key = (ordered.to(tl.int64) << 32) | (2147483647 - best_i).to(tl.int64)
    if SLOTS:
        tl.store(key_ptr + row.to(tl.int64) * nsplit + split, key)
    else:
        tl.atomic_max(key_ptr + row, key, sem="relaxed")
    if STAGES >= 1:
        tl.debug_barrier()
        ticket = tl.atomic_add(ticket_ptr + b, 1, sem="acq_rel")
        if ticket == N * nsplit - 1:
            tl.store(ticket_ptr + b, 0)
            ok = node < N
            if SLOTS:
                sp = tl.arange(0, SP)
                slot = (base + node)[:, None] * nsplit + sp[None, :]
                keys = tl.load(key_ptr + slot, mask=ok[:, None] & (sp[None, :] < nsplit),
                               other=-9223372036854775807 - 1, cache_modifier=".cg")
                best = tl.max(keys, axis=1)
            else:
                best = tl.load(key_ptr + base + node, mask=ok, other=-9223372036854775807 - 1, cache_modifier=".cg")
                tl.debug_barrier()
                tl.store(key_ptr + base + node, tl.full([NP], -9223372036854775807 - 1, tl.int64), mask=ok)
            tp = 2147483647 - (best & 0xFFFFFFFF)
            tl.store(tp_ptr + base + node, tp, mask=ok)
            if STAGES >= 2:
                if not PREFETCH:
                    cand, nxt, sib, ridx = _load_tree(base, node, cand_ptr, ridx_ptr, next_ptr, sib_ptr, N)
                _walk_tree(b, base, node, tp, cand, nxt, sib, ridx, predict_ptr, accept_ptr, accept_len_ptr,
                           bonus_ptr, hist_ptr, attempted_ptr, accepted_ptr, N, NP, W, WP, HAS_COUNTERS,
                           "relaxed")


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
def _gather(x, idx, node, none):
    """x[idx[j]] for each j (a register gather as an [NP, NP] select-and-sum); `none` where idx < 0."""
    hit = node[:, None] == idx[None, :]
    return tl.where(idx >= 0, tl.sum(tl.where(hit, x[:, None], 0), axis=0), none)


@triton.jit
def _walk(b, base, node, tp, cand_ptr, ridx_ptr, next_ptr, sib_ptr, predict_ptr, accept_ptr,
          accept_len_ptr, bonus_ptr, hist_ptr, attempted_ptr, accepted_ptr,
          N: tl.constexpr, NP: tl.constexpr, W: tl.constexpr, WP: tl.constexpr, HAS_COUNTERS: tl.constexpr):
    """Request b's VerifyTreeGreedy walk, computed for all nodes at once (no serial scan).

    A node is accepted iff it is the first child in sibling order whose candidate equals its
    parent's target token, all its ancestors are accepted, and its depth is <= S: exactly the
    nodes the serial walk visits and accepts (each parent has at most one such child, so they form
    one root path). Sibling ranks, parents and depths come from pointer jumping over the
    next-sibling / first-child lists in registers: ceil(log2 NP) rounds of [NP, NP] gathers, no
    data-dependent loop. The counters are added with one vector atomic each at the end (the serial
    walk issued two dependent scalar atomics per depth: most of its 6-13 us on the H200).
    """
    cand, nxt, sib, ridx = _load_tree(base, node, cand_ptr, ridx_ptr, next_ptr, sib_ptr, N)
    _walk_tree(b, base, node, tp, cand, nxt, sib, ridx, predict_ptr, accept_ptr, accept_len_ptr, bonus_ptr,
               hist_ptr, attempted_ptr, accepted_ptr, N, NP, W, WP, HAS_COUNTERS, "acq_rel")


@triton.jit
def _load_tree(base, node, cand_ptr, ridx_ptr, next_ptr, sib_ptr, N: tl.constexpr):
    """Request `base // N`'s tree: candidates, first-child / next-sibling lists, retrive_index."""
    ok = node < N
    cand = tl.load(cand_ptr + base + node, mask=ok, other=-1)
    nxt = tl.load(next_ptr + base + node, mask=ok, other=-1).to(tl.int32)
    sib = tl.load(sib_ptr + base + node, mask=ok, other=-1).to(tl.int32)
    ridx = tl.load(ridx_ptr + base + node, mask=ok, other=-1)
    return cand, nxt, sib, ridx


@triton.jit
def _walk_tree(b, base, node, tp, cand, nxt, sib, ridx, predict_ptr, accept_ptr, accept_len_ptr, bonus_ptr,
               hist_ptr, attempted_ptr, accepted_ptr, N: tl.constexpr, NP: tl.constexpr, W: tl.constexpr,
               WP: tl.constexpr, HAS_COUNTERS: tl.constexpr, COUNTER_SEM: tl.constexpr):
    """`_walk` on a tree already in registers. COUNTER_SEM: the counters' atomics' memory order
    ("acq_rel", Triton's default, fences around each of the three; "relaxed" lets them issue back
    to back: nothing in this launch reads them, and the launch's end publishes them anyway)."""
    ok = node < N
    # prev[j]: the sibling before j; fc[j]: the node whose first child is j (set for list heads)
    prev = tl.max(tl.where(sib[:, None] == node[None, :], node[:, None], -1), axis=0)
    fc = tl.max(tl.where(nxt[:, None] == node[None, :], node[:, None], -1), axis=0)
    # list ranking along prev: head[j] = first sibling of j's list, rank[j] = position in it
    head = tl.where(prev >= 0, prev, node)
    rank = (prev >= 0).to(tl.int32)
    for r in tl.static_range(8):
        if (1 << r) < NP:
            rank = rank + _gather(rank, head, node, 0)
            head = _gather(head, head, node, 0)
    parent = _gather(fc, head, node, -1)
    match = (parent >= 0) & (cand == _gather(tp, parent, node, -1))
    # first matching child of each parent (lowest rank among matching siblings)
    first = tl.min(tl.where(match[:, None] & (head[:, None] == head[None, :]), rank[:, None], 2147483647), axis=0)
    sel = match & (rank == first)
    # ancestor product and depth by pointer jumping along parent (root: node 0, depth 0)
    good = tl.where(node == 0, 1, sel.to(tl.int32))
    depth = (parent >= 0).to(tl.int32)
    up = parent
    for r in tl.static_range(8):
        if (1 << r) < NP:
            good = good * _gather(good, up, node, 1)
            depth = depth + _gather(depth, up, node, 0)
            up = _gather(up, up, node, -1)
    acc = (good != 0) & (depth <= W - 1) & ok
    num = tl.sum(tl.where(acc & (depth >= 1), 1, 0), axis=0)
    col = tl.arange(0, WP)
    onpath = acc[None, :] & (depth[None, :] == col[:, None])  # [WP, NP]: accepted node at depth col
    hit = tl.max(tl.where(onpath, 1, 0), axis=1)
    acc_idx = tl.where(hit > 0, tl.sum(tl.where(onpath, ridx[None, :], 0), axis=1), -1)
    bonus = tl.sum(tl.where(acc & (depth == num), tp, 0), axis=0)
    # predict[i] = target at every accepted node (the last one's is the bonus)
    pred = tl.where(acc, tp, 0).to(tl.int32)
    tl.store(predict_ptr + base + node, pred, mask=ok)
    tl.store(bonus_ptr + b, bonus)
    tl.store(accept_len_ptr + b, num)
    tl.store(accept_ptr + b.to(tl.int64) * W + col, acc_idx.to(tl.int32), mask=col < W)
    if HAS_COUNTERS:
        # depth c+1 was attempted iff the walk reached depth c (c <= num) and that node has a child
        has_child = tl.max(tl.where(onpath & (nxt[None, :] >= 0), 1, 0), axis=1)
        att = (col <= num) & (has_child > 0) & (col < W - 1)
        tl.atomic_add(attempted_ptr + col, att.to(tl.int64), mask=att, sem=COUNTER_SEM)
        dacc = col < num
        tl.atomic_add(accepted_ptr + col, dacc.to(tl.int64), mask=dacc, sem=COUNTER_SEM)
        tl.atomic_add(hist_ptr + num, 1, sem=COUNTER_SEM)


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


# ---- dispatch rule (data): edit from `bench_kernels.py --variants` output ----
# First row whose bounds hold wins: (max rows R = B*N or None, max vocab or None, path, config).
# path "fused": the single-launch split-V kernel (argmax per chunk + walk by the last-arriving
#   program), config (BLOCK, num_warps, programs per SM for the split count).
# path "rowwise": one program per row (`_verify_rowwise_kernel`: whole-row argmax, plain store, the
#   last row of each request walks it), config (BLOCK, num_warps, unused 0).
# path "argmax": torch.argmax + `_walk_kernel` (SGLang's shape); no row picks it since 2026-12-02.
# SPLIT_PATHS ("fused-relaxed", "slots", "slots-prefetch": config as "fused"; "rowwise-prefetch":
#   as "rowwise"): `_verify_split_kernel` (relaxed hand-off, per-split key slots, tree prefetch).
# Measured (H200, in graph, `bench_kernels.py --only verify_tree --variants`, all 18 shapes,
# benchmarks/results/kernels_h200.md), exact variants only, time vs torch.argmax alone.
# 2026-12-02 05:05 UTC run (commit b38ecb1):
#   R=4: fused-relaxed B2048 w4 p6 3.8 / 4.0 / 4.3 us at V=32000 / 128256 / 163840 (argmax 8.9 / 26.7 / 9.0);
#   R=8: slots-prefetch B1024 w1 p16 5.1 / 5.9 us at V=32000 / 128256 (8.9 / 26.7);
#     fused-relaxed B2048 w4 p6 6.7 us at V=163840 (10.7; slots-prefetch B2048 w1 p8 7.4);
#   R=64: slots-prefetch B2048 w1 p8 6.6 / 9.5 / 11.7 us (9.0 / 27.1 / 23.1; was fused 9.5 us at
#     V=32000, 0.95x argmax);
#   R=256: slots-prefetch B2048 w1 p8 8.1 us at V=32000 (12.7); rowwise B4096 w8 37.4 / 45.6 us
#     at V=128256 / 163840 (47.2 / 60.6);
#   R=512: rowwise B4096 w8 23.9 / 67.5 / 83.1 us (23.5 / 74.3 / 100.5): at V=32000 0.98x argmax
#     alone, the one shape of 18 where no exact variant beats it (the split argmax stage alone is
#     20.5 us; the ticket and the walk of 64 requests add ~3-4 us);
#   R=2048: fused B2048 w4 p6 73.5 / 249.6 / 317.4 us (80.0 / 270.9 / 342.0).
VERIFY_DISPATCH: tuple[tuple[int | None, int | None, str, tuple[int, int, int]], ...] = (
    (4, None, "fused-relaxed", (2048, 4, 6)),
    (8, 128256, "slots-prefetch", (1024, 1, 16)),
    (8, None, "fused-relaxed", (2048, 4, 6)),
    (64, None, "slots-prefetch", (2048, 1, 8)),
    (256, 32000, "slots-prefetch", (2048, 1, 8)),
    (512, None, "rowwise", (4096, 8, 0)),
    (None, None, "fused", (2048, 4, 6)),
)
# num_warps of `_walk_kernel` by NP (next power of two of N): [NP, NP] gathers in registers.
WALK_WARPS = {8: 1, 16: 1, 32: 2, 64: 4}

# kept for callers of the old names
BLOCK = 2048
NUM_WARPS = 4


def dispatch(rows: int, vocab: int) -> tuple[str, tuple[int, int, int]]:
    """(path, (BLOCK, num_warps, programs per SM)) that VERIFY_DISPATCH picks for this shape."""
    for max_rows, max_vocab, path, cfg in VERIFY_DISPATCH:
        if (max_rows is None or rows <= max_rows) and (max_vocab is None or vocab <= max_vocab):
            return path, cfg
    return "argmax", (BLOCK, NUM_WARPS, 6)


# `_verify_split_kernel`'s candidate paths (issue 17): name -> (SLOTS, PREFETCH, one split per row).
# Config as "fused" (BLOCK, num_warps, programs per SM); "rowwise-prefetch" as "rowwise" (pps 0).
SPLIT_PATHS = {
    "fused-relaxed": (False, False, False),   # relaxed atomic_max, plain-load/plain-store reset
    "slots": (True, False, False),            # one key slot per split, plain stores, no key reset
    "slots-prefetch": (True, True, False),    # + the tree loaded before the logits
    "rowwise-prefetch": (True, True, True),   # nsplit = 1: the row-wise design, prefetch, plain reset
}
PATHS = ("fused", "rowwise", "argmax") + tuple(SPLIT_PATHS)


def fused_is_faster(rows: int, vocab: int) -> bool:
    """Whether VERIFY_DISPATCH picks a single-launch kernel (split-V or row-wise) at this shape."""
    return dispatch(rows, vocab)[0] != "argmax"


def verify_tree_triton(logits, candidates, retrive_index, retrive_next_token, retrive_next_sibling,
                       num_steps_plus_one, counters=None, block: int | None = None, nsplit: int | None = None,
                       fused: bool | None = None, num_warps: int | None = None,
                       programs_per_sm: int | None = None, walk_warps: int | None = None,
                       path: str | None = None, stages: int = 2):
    """Launch the single-pass verify kernel (split-V or row-wise), or torch.argmax + the walk
    kernel, as VERIFY_DISPATCH says (`path` forces one of PATHS, `fused` True/False forces
    "fused"/"argmax"; `block`, `nsplit`, `num_warps`, `programs_per_sm`, `walk_warps` override the
    configuration: tests and benchmarks). `stages` < 2 (SPLIT_PATHS only, benchmark decomposition)
    stops early: 1 = target_predict only, 0 = the split argmax alone (no output written).

    Precondition: retrive_index[b, i] == b*N + i (as build_tree makes): the walk indexes
    target_predict and predict by node within the request, and writes accept_index from retrive_index.
    """
    from specwatch_kernels.verify_tree import VerifyResult

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
    cfg_path, (cfg_block, cfg_warps, cfg_pps) = dispatch(rows, vocab)
    if path is None:
        path = cfg_path if fused is None else ("fused" if fused else "argmax")
    if path not in PATHS:
        raise ValueError(f"verify_tree: path {path!r} is not one of {PATHS}")
    np_ = triton.next_power_of_2(n)
    if path == "argmax":
        torch.argmax(logits, dim=-1, out=target_predict)
        _walk_kernel[(batch,)](
            target_predict, cand, ridx, nxt, sib, predict, accept_index, accept_length, bonus, hist, att, acc,
            N=n, NP=np_, W=width, WP=triton.next_power_of_2(width),
            HAS_COUNTERS=counters is not None, num_warps=walk_warps or WALK_WARPS.get(np_, 4))
        return VerifyResult(predict, accept_index, accept_length, target_predict, bonus)
    block = block or cfg_block
    if path == "rowwise":
        tickets = workspace("verify_row_tickets", batch, torch.int32, 0, device)
        _verify_rowwise_kernel[(rows,)](
            logits, logits.stride(0), vocab, cand, ridx, nxt, sib, tickets,
            predict, accept_index, accept_length, target_predict, bonus, hist, att, acc,
            N=n, NP=np_, W=width, WP=triton.next_power_of_2(width),
            BLOCK=block, HAS_COUNTERS=counters is not None, num_warps=num_warps or cfg_warps)
        return VerifyResult(predict, accept_index, accept_length, target_predict, bonus)
    tiles = triton.cdiv(vocab, block)
    if path in SPLIT_PATHS and SPLIT_PATHS[path][2]:
        nsplit = 1
    if nsplit is None:
        nsplit = min(tiles, max(1, triton.cdiv((programs_per_sm or cfg_pps) * _num_sms(device), rows)))
    chunk = triton.cdiv(tiles, nsplit) * block
    nsplit = triton.cdiv(vocab, chunk)
    if path in SPLIT_PATHS:
        slots, prefetch, _ = SPLIT_PATHS[path]
        if stages not in (0, 1, 2) or (stages == 0 and not slots):
            raise ValueError(f"verify_tree: stages={stages} on path {path!r}: 1 or 2 (0 = no ticket, so "
                             "the last program that resets the relaxed keys never runs: slot paths only)")
        # slots: every slot is written before it is read, so the buffer needs no initial value
        keys = (workspace("verify_slots", rows * nsplit, torch.int64, KEY_INIT, device) if slots
                else workspace("verify_keys_relaxed", rows, torch.int64, KEY_INIT, device))
        tickets = workspace("verify_split_tickets", batch, torch.int32, 0, device)
        _verify_split_kernel[(rows, nsplit)](
            logits, logits.stride(0), vocab, chunk, nsplit,
            cand, ridx, nxt, sib, keys, tickets,
            predict, accept_index, accept_length, target_predict, bonus,
            hist, att, acc,
            N=n, NP=np_, W=width, WP=triton.next_power_of_2(width), SP=triton.next_power_of_2(nsplit),
            BLOCK=block, HAS_COUNTERS=counters is not None, SLOTS=slots, PREFETCH=prefetch, STAGES=stages,
            num_warps=num_warps or cfg_warps)
        return VerifyResult(predict, accept_index, accept_length, target_predict, bonus)
    keys = workspace("verify_keys", rows, torch.int64, KEY_INIT, device)
    tickets = workspace("verify_tickets", batch, torch.int32, 0, device)
    _verify_tree_kernel[(rows, nsplit)](
        logits, logits.stride(0), vocab, chunk, nsplit,
        cand, ridx, nxt, sib, keys, tickets,
        predict, accept_index, accept_length, target_predict, bonus,
        hist, att, acc,
        N=n, NP=np_, W=width, WP=triton.next_power_of_2(width),
        BLOCK=block, HAS_COUNTERS=counters is not None, num_warps=num_warps or cfg_warps)
    return VerifyResult(predict, accept_index, accept_length, target_predict, bonus)
