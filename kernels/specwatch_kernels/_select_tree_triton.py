"""Triton candidate selection for one draft step, and the per-iteration `organize`. Loaded lazily.

select (i >= 1), grid (B, d / BLOCK_D): every program recomputes its request's K*K products
scores[b, r] * topk_p[b*K + r, c] (one fp32 multiply, so bit-exact) and their top-K (lowest flat
index wins ties); programs with column block 0 write the small outputs, and every program copies
its column slice of the K selected hidden rows. One launch, no inter-program dependency.
organize, grid (B,): binary search on order-preserving int32 keys for the (N-1)-th largest score,
then a stable fill of ties and a prefix sum give the selected indices in ascending order.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

NEG_INF = tl.constexpr(float("-inf"))
BIG_INDEX = tl.constexpr(2147483647)


@triton.jit
def _select_tree_kernel(
    topk_p_ptr, topk_index_ptr, scores_ptr, hidden_ptr, stride_hidden, d,
    ids_ptr, hidden_out_ptr, stride_out, new_scores_ptr, expand_ptr, parents_ptr, parent_offset,
    K: tl.constexpr, KP: tl.constexpr, KKP: tl.constexpr, BLOCK_D: tl.constexpr, HAS_HIDDEN: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    db = tl.program_id(1)
    e = tl.arange(0, KKP)
    valid = e < K * K
    sc = tl.load(scores_ptr + b * K + e // K, mask=valid, other=0.0)
    p = tl.load(topk_p_ptr + b * K * K + e, mask=valid, other=0.0)
    expand = sc * p
    slot = tl.arange(0, KP)
    cs_p = tl.zeros([KP], tl.float32)
    cs_i = tl.zeros([KP], tl.int32)
    taken = ~valid
    for j in tl.static_range(K):
        v = tl.where(taken, NEG_INF, expand)
        best_v = tl.max(v, axis=0)
        best_i = tl.min(tl.where((v == best_v) & (~taken), e, BIG_INDEX), axis=0)
        cs_p = tl.where(slot == j, best_v, cs_p)
        cs_i = tl.where(slot == j, best_i, cs_i)
        taken = taken | (e == best_i)
    ok = slot < K
    if db == 0:
        tl.store(expand_ptr + b * K * K + e, expand, mask=valid)
        tl.store(new_scores_ptr + b * K + slot, cs_p, mask=ok)
        tl.store(parents_ptr + b * K + slot, cs_i.to(tl.int64) + parent_offset, mask=ok)
        ids = tl.load(topk_index_ptr + b * K * K + cs_i, mask=ok, other=0)
        tl.store(ids_ptr + b * K + slot, ids, mask=ok)
    if HAS_HIDDEN:
        cols = db * BLOCK_D + tl.arange(0, BLOCK_D)
        src = b * K + (cs_i // K).to(tl.int64)
        m = ok[:, None] & (cols[None, :] < d)
        h = tl.load(hidden_ptr + src[:, None] * stride_hidden + cols[None, :], mask=m)
        tl.store(hidden_out_ptr + (b * K + slot)[:, None] * stride_out + cols[None, :], h, mask=m)


@triton.jit
def _select_first_kernel(
    hidden_ptr, stride_hidden, d, hidden_out_ptr, stride_out, parents_ptr,
    K: tl.constexpr, KP: tl.constexpr, PP: tl.constexpr, BLOCK_D: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    db = tl.program_id(1)
    if db == 0:
        q = tl.arange(0, PP)
        tl.store(parents_ptr + b * (K + 1) + q, q.to(tl.int64) - 1, mask=q < K + 1)
    cols = db * BLOCK_D + tl.arange(0, BLOCK_D)
    h = tl.load(hidden_ptr + b * stride_hidden + cols, mask=cols < d)
    slot = tl.arange(0, KP)
    m = (slot[:, None] < K) & (cols[None, :] < d)
    tl.store(hidden_out_ptr + (b * K + slot)[:, None] * stride_out + cols[None, :],
             tl.broadcast_to(h[None, :], [KP, BLOCK_D]), mask=m)


@triton.jit
def _organize_kernel(
    scores_ptr, tokens_ptr, m_cols, out_index_ptr, out_tokens_ptr,
    NEED: tl.constexpr, MP: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    e = tl.arange(0, MP)
    valid = e < m_cols
    x = tl.load(scores_ptr + b * m_cols + e, mask=valid, other=0.0) + 0.0  # -0.0 -> +0.0
    bits = x.to(tl.int32, bitcast=True)
    key = (bits ^ ((bits >> 31) & 0x7FFFFFFF)).to(tl.int64)
    key = tl.where(valid, key, -(2**40))
    # largest t with count(key >= t) >= NEED: the NEED-th largest key
    lo = tl.full([], -(2**31), tl.int64)
    hi = tl.full([], 2**31, tl.int64)
    for _ in range(33):
        mid = lo + (hi - lo) // 2
        enough = tl.sum((key >= mid).to(tl.int32), axis=0) >= NEED
        lo = tl.where(enough, mid, lo)
        hi = tl.where(enough, hi, mid)
    above = key > lo
    tie = key == lo
    fill = NEED - tl.sum(above.to(tl.int32), axis=0)
    chosen = above | (tie & (tl.cumsum(tie.to(tl.int32), axis=0) <= fill))
    rank = tl.cumsum(chosen.to(tl.int32), axis=0) - 1
    tok = tl.load(tokens_ptr + b * m_cols + e, mask=chosen, other=0)
    tl.store(out_index_ptr + b * NEED + rank, e.to(tl.int64), mask=chosen)
    tl.store(out_tokens_ptr + b * NEED + rank, tok, mask=chosen)


# 1024 bf16 columns per program: at d=4096..7168 that is 4..7 column blocks per request.
BLOCK_D = 1024


def select_tree_triton(i, topk_p, topk_index, hidden, scores, k, block_d: int | None = None):
    """Launch one select step; returns SGLang's (input_ids, hidden_states, scores, tree_info)."""
    block_d = block_d or BLOCK_D
    device = topk_p.device
    if hidden.dim() != 2:
        raise ValueError(f"select_tree: hidden must be [rows, d], got {tuple(hidden.shape)}")
    if hidden.numel() and hidden.stride(1) != 1:
        hidden = hidden.contiguous()
    d = hidden.shape[1]
    n_db = max(1, triton.cdiv(d, block_d))
    if i == 0:
        batch = topk_p.shape[0]
        parents = torch.empty(batch, k + 1, dtype=torch.int64, device=device)
        hidden_out = torch.empty(batch * k, d, dtype=hidden.dtype, device=device)
        if batch:
            _select_first_kernel[(batch, n_db)](
                hidden, hidden.stride(0), d, hidden_out, hidden_out.stride(0), parents,
                K=k, KP=triton.next_power_of_2(k), PP=triton.next_power_of_2(k + 1), BLOCK_D=block_d)
        return topk_index.flatten(), hidden_out, topk_p, (topk_p.unsqueeze(1), topk_index, parents)
    batch = scores.shape[0]
    topk_p = topk_p.contiguous()
    flat_index = topk_index.reshape(batch, k * k).contiguous()
    scores = scores.contiguous()
    has_hidden = hidden.shape[0] > 0
    ids = torch.empty(batch * k, dtype=torch.int64, device=device)
    hidden_out = torch.empty(batch * k, d, dtype=hidden.dtype, device=device) if has_hidden else hidden
    new_scores = torch.empty(batch, k, dtype=torch.float32, device=device)
    expand = torch.empty(batch, k, k, dtype=torch.float32, device=device)
    parents = torch.empty(batch, k, dtype=torch.int64, device=device)
    if batch:
        _select_tree_kernel[(batch, n_db if has_hidden else 1)](
            topk_p, flat_index, scores, hidden, hidden.stride(0) if has_hidden else 0, d,
            ids, hidden_out, hidden_out.stride(0) if has_hidden else 0, new_scores, expand, parents,
            k * k * (i - 1) + k,
            K=k, KP=triton.next_power_of_2(k), KKP=triton.next_power_of_2(k * k), BLOCK_D=block_d,
            HAS_HIDDEN=has_hidden, enable_fp_fusion=False)
    return ids, hidden_out, new_scores, (expand, flat_index, parents)


def organize_triton(score_list, token_list, parents_list, num_draft_tokens):
    """cat the step outputs (torch), then one kernel for top-(N-1), sort and gather."""
    scores = torch.cat(score_list, dim=1).flatten(1).contiguous()
    tokens = torch.cat(token_list, dim=1).contiguous()
    batch, m_cols = scores.shape
    need = num_draft_tokens - 1
    if not 0 < need <= m_cols:
        raise ValueError(f"organize: num_draft_tokens-1={need} must be in [1, {m_cols}] (K + (S-1)K^2)")
    device = scores.device
    top_index = torch.empty(batch, need, dtype=torch.int64, device=device)
    draft_tokens = torch.empty(batch, need, dtype=torch.int64, device=device)
    if batch:
        _organize_kernel[(batch,)](scores, tokens.to(torch.int64), m_cols, top_index, draft_tokens,
                                   NEED=need, MP=triton.next_power_of_2(m_cols))
    if len(parents_list) > 1:
        parent_list = torch.cat(parents_list[:-1], dim=1)
    else:
        parent_list = torch.empty(batch, 0, dtype=torch.int64, device=device)
    return parent_list, top_index, draft_tokens
