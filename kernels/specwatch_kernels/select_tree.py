"""Draft-tree candidate selection (one draft step), per-iteration `organize`, and tree construction.

Torch ports of SGLang's `select_top_k_tokens`, `organize_draft_results` and
`build_tree_kernel_efficient` (sgl-project/sglang:python/sglang/srt/speculative/eagle_utils.py,
spec_utils.py, sgl-kernel/csrc/speculative/eagle_utils.cu), with `torch.topk` replaced by a stable
sort so that ties are deterministic: the LOWEST index wins. Not a sampler and not the draft model.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


def _stable_topk_index(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k along the last dim, descending, ties -> lowest index first."""
    values, index = torch.sort(x, dim=-1, descending=True, stable=True)
    return values[..., :k], index[..., :k]


def select_tree_reference(
    i: int,
    topk_p: torch.Tensor,
    topk_index: torch.Tensor,
    hidden: torch.Tensor,
    scores: torch.Tensor | None,
    k: int,
):
    """One draft step's candidate selection: SGLang's `select_top_k_tokens(i, topk_p, topk_index, hidden, scores, topk)`.

    Contract (B requests, K = k):
      - i == 0 (first step after extend): topk_p [B, K] fp32, topk_index [B, K] int64, hidden [B, d].
        Returns input_ids = topk_index.flatten() [B*K]; hidden.repeat_interleave(K, 0) [B*K, d];
        scores = topk_p [B, K]; tree_info = (topk_p[:, None, :] [B, 1, K], topk_index [B, K],
        arange(-1, K) repeated [B, K+1] int64). `scores` is ignored (may be None).
      - i >= 1: topk_p [B*K, K] fp32, topk_index [B*K, K] int64 (already d2t-mapped), hidden [B*K, d],
        scores [B, K] fp32. expand = scores[:, :, None] * topk_p.view(B, K, K) (one fp32 multiply,
        probabilities not log-probs); (cs_p, cs_idx) = top-K of expand.flatten(1) in descending
        order, ties -> lowest flat index; input_ids = topk_index.view(B, K*K).gather(1, cs_idx)
        .flatten(); hidden rows hidden[cs_idx // K + b*K]; scores = cs_p;
        tree_info = (expand [B, K, K], topk_index.view(B, K*K), cs_idx + K*K*(i-1) + K [B, K] int64).
    Tolerance: everything bit-exact (the product is a single fp32 multiply; kernels must not fuse it
    into an FMA).
    """
    if i == 0:
        batch = topk_p.shape[0]
        input_ids = topk_index.flatten()
        hidden_out = hidden.repeat_interleave(k, dim=0)
        parents = torch.arange(-1, k, dtype=torch.int64, device=topk_p.device).unsqueeze(0).repeat(batch, 1)
        tree_info = (topk_p.unsqueeze(1), topk_index, parents)
        return input_ids, hidden_out, topk_p, tree_info
    batch = scores.shape[0]
    expand = scores.unsqueeze(2) * topk_p.reshape(batch, k, k)
    cs_p, cs_idx = _stable_topk_index(expand.flatten(1), k)
    flat_index = topk_index.reshape(batch, k * k)
    input_ids = torch.gather(flat_index, 1, cs_idx).flatten()
    if hidden.shape[0] > 0:
        rows = cs_idx.flatten() // k + torch.arange(0, hidden.shape[0], k, device=hidden.device).repeat_interleave(k)
        hidden_out = hidden[rows, :]
    else:
        hidden_out = hidden
    tree_info = (expand, flat_index, cs_idx + (k * k * (i - 1) + k))
    return input_ids, hidden_out, cs_p, tree_info


def organize_reference(
    score_list: list[torch.Tensor],
    token_list: list[torch.Tensor],
    parents_list: list[torch.Tensor],
    num_draft_tokens: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Once-per-iteration tree pruning: SGLang's `organize_draft_results`.

    Contract: score_list / token_list / parents_list are the S tree_info[0] / [1] / [2] entries of
    the draft steps ([B,1,K] then [B,K,K]...; [B,K] then [B,K*K]...; [B,K+1] then [B,K]...).
      scores = cat(score_list, 1).flatten(1) [B, K + (S-1)K^2] fp32
      top_scores_index = sort(top-(N-1) indices of scores, descending by score, ties -> lowest
                         index) ascending  [B, N-1] int64
      draft_tokens = cat(token_list, 1).gather(1, top_scores_index)  [B, N-1] int64
      parent_list = cat(parents_list[:-1], 1)  [B, K(S-1)+1] int64 (empty [B, 0] when S == 1)
    Returns (parent_list, top_scores_index, draft_tokens). Bit-exact.
    """
    scores = torch.cat(score_list, dim=1).flatten(1)
    tokens = torch.cat(token_list, dim=1)
    _, top_index = _stable_topk_index(scores, num_draft_tokens - 1)
    top_scores_index = torch.sort(top_index, dim=-1).values
    draft_tokens = torch.gather(tokens, 1, top_scores_index)
    if len(parents_list) > 1:
        parent_list = torch.cat(parents_list[:-1], dim=1)
    else:
        parent_list = torch.empty(parents_list[0].shape[0], 0, dtype=torch.int64, device=parents_list[0].device)
    return parent_list, top_scores_index, draft_tokens


@dataclass(frozen=True)
class DraftTree:
    """A verified-ready draft tree (QLEN_ONLY mask). Node 0 is the root (the last verified token).

    tree_mask [B, N, N] bool: node i may attend to node j iff j == i or j is an ancestor of i.
    positions [B, N] int64: seq_len + depth (root depth 0).
    retrive_index [B, N] int64: b*N + i.
    retrive_next_token / retrive_next_sibling [B, N] int64: first child / next sibling, -1 = none;
      siblings are listed lowest node index first.
    draft_token [B, N] int64: node tokens, draft_token[:, 0] = verified_id.
    depth [B, N] int64: node depth (root 0).
    """

    tree_mask: torch.Tensor
    positions: torch.Tensor
    retrive_index: torch.Tensor
    retrive_next_token: torch.Tensor
    retrive_next_sibling: torch.Tensor
    draft_token: torch.Tensor
    depth: torch.Tensor


def build_tree_reference(
    verified_id: torch.Tensor,
    parent_list: torch.Tensor,
    top_scores_index: torch.Tensor,
    draft_tokens: torch.Tensor,
    seq_lens: torch.Tensor,
    topk: int,
    num_steps: int,
    num_draft_tokens: int,
) -> DraftTree:
    """Torch port of SGLang's `build_tree_kernel_efficient` (QLEN_ONLY mask). See `DraftTree`.

    Node n >= 1 is score-list entry top_scores_index[b, n-1]; its parent is score-list entry
    parent_list[b, top_scores_index[b, n-1] // topk] (entry 0 of parent_list, -1, is the root).
    A node whose parent was not selected (only possible with NaN scores) raises ValueError, where
    SGLang prints a warning and reads out of bounds.
    Runs on the host (small, latency-bound); returns tensors on `seq_lens`' device.
    """
    device = seq_lens.device
    batch, n = seq_lens.shape[0], num_draft_tokens
    sel = top_scores_index.detach().cpu().tolist()
    par = parent_list.detach().cpu().tolist()
    lens = seq_lens.detach().cpu().tolist()
    mask = torch.zeros(batch, n, n, dtype=torch.bool)
    positions = torch.empty(batch, n, dtype=torch.int64)
    depth = torch.zeros(batch, n, dtype=torch.int64)
    next_token = torch.full((batch, n), -1, dtype=torch.int64)
    next_sibling = torch.full((batch, n), -1, dtype=torch.int64)
    for b in range(batch):
        node_of_entry = {entry: node + 1 for node, entry in enumerate(sel[b])}
        parent_node = [0] * n
        for node in range(1, n):
            parent_tb = sel[b][node - 1] // topk
            if parent_tb == 0:
                parent_node[node] = 0
                continue
            parent_entry = par[b][parent_tb]
            if parent_entry not in node_of_entry:
                raise ValueError(
                    f"build_tree: request {b} node {node} (score entry {sel[b][node - 1]}) has parent entry "
                    f"{parent_entry} that was not selected; scores probably contain NaN"
                )
            parent_node[node] = node_of_entry[parent_entry]
        # Children are inserted from the highest node index down, so the lowest index ends up first.
        for node in range(n - 1, 0, -1):
            p = parent_node[node]
            if next_token[b, p] != -1:
                next_sibling[b, node] = next_token[b, p]
            next_token[b, p] = node
        for node in range(n):
            mask[b, node, 0] = True
            cur, d = node, 0
            while cur != 0:
                mask[b, node, cur] = True
                cur = parent_node[cur]
                d += 1
            depth[b, node] = d
            positions[b, node] = lens[b] + d
    retrive_index = torch.arange(batch * n, dtype=torch.int64).view(batch, n)
    draft_token = torch.cat([verified_id.reshape(batch, 1).to(torch.int64), draft_tokens.to(torch.int64)], dim=1)
    return DraftTree(
        tree_mask=mask.to(device),
        positions=positions.to(device),
        retrive_index=retrive_index.to(device),
        retrive_next_token=next_token.to(device),
        retrive_next_sibling=next_sibling.to(device),
        draft_token=draft_token.to(device),
        depth=depth.to(device),
    )


def build_tree_device(
    verified_id: torch.Tensor,
    parent_list: torch.Tensor,
    top_scores_index: torch.Tensor,
    draft_tokens: torch.Tensor,
    seq_lens: torch.Tensor,
    topk: int,
    num_steps: int,
    num_draft_tokens: int,
) -> DraftTree:
    """`build_tree_reference` in fixed-shape tensor ops on the inputs' device: no host copy, no
    data-dependent shape, so it runs inside a CUDA graph. Same contract and outputs, bit for bit,
    for every tree whose parents were selected (the reference's ValueError case, NaN scores,
    gives an undefined tree here instead of an error)."""
    device = seq_lens.device
    batch, n = seq_lens.shape[0], num_draft_tokens
    sel = top_scores_index.to(torch.int64)
    parent_tb = sel // topk  # [B, n-1]: 0 = child of the root
    if parent_list.shape[1] > 1:
        entry = parent_list.to(torch.int64).gather(1, parent_tb.clamp(max=parent_list.shape[1] - 1))
        match = sel[:, None, :] == entry[:, :, None]  # [B, child, candidate parent]
        pnode = torch.where(match.any(-1), match.to(torch.int8).argmax(-1) + 1, 0)
        pnode = torch.where(parent_tb == 0, 0, pnode)
    else:
        pnode = torch.zeros_like(sel)
    parent = torch.cat([torch.zeros(batch, 1, dtype=torch.int64, device=device), pnode], dim=1)  # root -> root
    ar = torch.arange(n, device=device)
    cur = ar.expand(batch, n)
    mask = torch.zeros(batch, n, n, dtype=torch.bool, device=device)
    depth = torch.zeros(batch, n, dtype=torch.int64, device=device)
    for _ in range(num_steps + 1):  # a node is at most num_steps below the root
        mask |= cur[:, :, None] == ar
        depth += cur != 0
        cur = parent.gather(1, cur)
    # first child = lowest-index child; next sibling = next higher-index node of the same parent
    not_root = ar >= 1
    is_child = (parent[:, None, :] == ar[None, :, None]) & not_root  # [B, p, c]
    first = torch.where(is_child, ar, n).amin(-1)
    later_sib = (parent[:, :, None] == parent[:, None, :]) & (ar[None, :] > ar[:, None]) & not_root[:, None]
    nxt = torch.where(later_sib, ar, n).amin(-1)
    minus1 = torch.full_like(first, -1)
    return DraftTree(
        tree_mask=mask,
        positions=seq_lens.to(torch.int64)[:, None] + depth,
        retrive_index=torch.arange(batch * n, dtype=torch.int64, device=device).view(batch, n),
        retrive_next_token=torch.where(first == n, minus1, first),
        retrive_next_sibling=torch.where((nxt == n) | ~not_root, minus1, nxt),
        draft_token=torch.cat([verified_id.reshape(batch, 1).to(torch.int64), draft_tokens.to(torch.int64)], dim=1),
        depth=depth,
    )


def select_tree(i, topk_p, topk_index, hidden, scores, k):
    """Triton implementation of `select_tree_reference` (same contract)."""
    from specwatch_kernels._select_tree_triton import select_tree_triton

    return select_tree_triton(i, topk_p, topk_index, hidden, scores, k)


def organize(score_list, token_list, parents_list, num_draft_tokens):
    """Triton implementation of `organize_reference` (same contract)."""
    from specwatch_kernels._select_tree_triton import organize_triton

    return organize_triton(score_list, token_list, parents_list, num_draft_tokens)
