"""Dispatchers: the Triton kernel when the input is on CUDA, the torch reference otherwise.

`SPECWATCH_KERNELS=triton` forces Triton (on CPU this needs TRITON_INTERPRET=1, for tests);
`SPECWATCH_KERNELS=torch` forces the references everywhere. `build_tree` is always the torch port
(a host loop); `build_tree_device` is the same contract in fixed-shape tensor ops (CUDA graphs).
"""
from __future__ import annotations

import os

import torch

from specwatch_kernels import aux_stats as _aux
from specwatch_kernels import draft_topk as _topk
from specwatch_kernels import select_tree as _sel
from specwatch_kernels import verify_tree as _ver
from specwatch_kernels.select_tree import build_tree_device  # noqa: F401  (tensor ops, any device, graph-safe)
from specwatch_kernels.select_tree import build_tree_reference as build_tree  # noqa: F401  (host loop)


def use_triton(t: torch.Tensor) -> bool:
    """True when the Triton path should run for a tensor living where `t` lives."""
    mode = os.environ.get("SPECWATCH_KERNELS", "").strip().lower()
    if mode == "torch":
        return False
    if mode == "triton":
        return True
    if mode not in ("", "auto"):
        raise ValueError(f"SPECWATCH_KERNELS={mode!r}: expected 'triton', 'torch' or 'auto'")
    return t.is_cuda


def draft_topk(logits, k, hot_token_id=None):
    """See specwatch_kernels.draft_topk.draft_topk_reference."""
    fn = _topk.draft_topk if use_triton(logits) else _topk.draft_topk_reference
    return fn(logits, k, hot_token_id)


def verify_tree(logits, candidates, retrive_index, retrive_next_token, retrive_next_sibling,
                num_steps_plus_one, counters=None):
    """See specwatch_kernels.verify_tree.verify_tree_reference."""
    fn = _ver.verify_tree if use_triton(logits) else _ver.verify_tree_reference
    return fn(logits, candidates, retrive_index, retrive_next_token, retrive_next_sibling,
              num_steps_plus_one, counters)


def select_tree(i, topk_p, topk_index, hidden, scores, k):
    """See specwatch_kernels.select_tree.select_tree_reference."""
    fn = _sel.select_tree if use_triton(topk_p) else _sel.select_tree_reference
    return fn(i, topk_p, topk_index, hidden, scores, k)


def organize(score_list, token_list, parents_list, num_draft_tokens):
    """See specwatch_kernels.select_tree.organize_reference."""
    fn = _sel.organize if use_triton(score_list[0]) else _sel.organize_reference
    return fn(score_list, token_list, parents_list, num_draft_tokens)


def aux_stats(aux, num_segments=3, ref=None, candidates=None):
    """See specwatch_kernels.aux_stats.aux_stats_reference."""
    fn = _aux.aux_stats if use_triton(aux) else _aux.aux_stats_reference
    return fn(aux, num_segments, ref, candidates)
