"""Draft top-k: draft logits -> log-sum-exp -> top-k probabilities and indices -> d2t remap.

Replaces SGLang's per-draft-step `logits.float()` + `softmax` + `fast_topk` + `hot_token_id[idx]`
(sgl-project/sglang:python/sglang/srt/speculative/eagle_worker.py). Not a sampler: greedy top-k only.
"""
from __future__ import annotations

import torch


def draft_topk_reference(
    logits: torch.Tensor, k: int, hot_token_id: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k probabilities and (mapped) token ids of each row of `logits`. Defines the contract.

    Contract:
      - logits: [R, V] bf16 or fp32 (any device), R >= 0, 1 <= k <= V. Rows need at least one finite
        logit; -inf entries are allowed (probability 0). NaN logits are unsupported (undefined output).
      - p = exp(l - logsumexp(l)) computed in fp32 from the fp32 up-cast of the logits.
      - Order: descending by logit (the fp32 up-cast, i.e. ranking on logits, not on rounded
        probabilities); ties broken by the LOWEST vocabulary index (stable descending sort).
        `torch.topk`'s tie order is unspecified, so it is not the reference.
      - hot_token_id: optional LongTensor [V]; when given, returned indices are `hot_token_id[idx]`
        (SGLang stores hot_token_id = d2t + arange(V)).
      - Returns (topk_p [R, k] fp32, topk_index [R, k] int64) on the logits' device.
    Tolerance of a kernel against this reference: indices bit-exact, topk_p rtol 1e-5 / atol 1e-7
    (the log-sum-exp is accumulated in a different order).
    """
    if logits.dim() != 2:
        raise ValueError(f"draft_topk: logits must be [R, V], got shape {tuple(logits.shape)}")
    rows, vocab = logits.shape
    if not 1 <= k <= vocab:
        raise ValueError(f"draft_topk: k={k} must be in [1, V={vocab}]")
    x = logits.float()
    if rows == 0:
        return (torch.empty(0, k, dtype=torch.float32, device=logits.device),
                torch.empty(0, k, dtype=torch.int64, device=logits.device))
    lse = torch.logsumexp(x, dim=-1, keepdim=True)
    values, index = torch.sort(x, dim=-1, descending=True, stable=True)
    values, index = values[:, :k], index[:, :k]
    topk_p = torch.exp(values - lse)
    if hot_token_id is not None:
        index = hot_token_id.to(device=index.device, dtype=torch.int64)[index]
    return topk_p.contiguous(), index.contiguous()


def draft_topk(
    logits: torch.Tensor, k: int, hot_token_id: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton implementation of `draft_topk_reference` (same contract). Needs CUDA or TRITON_INTERPRET=1."""
    from specwatch_kernels._draft_topk_triton import draft_topk_triton

    return draft_topk_triton(logits, k, hot_token_id)
