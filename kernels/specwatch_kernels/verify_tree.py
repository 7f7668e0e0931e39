"""Greedy tree verification: target argmax + walk of the draft tree + on-device acceptance counters.

Replaces SGLang's `torch.argmax(logits)` + `verify_tree_greedy` (sgl-project/sglang:
sgl-kernel/csrc/speculative/eagle_utils.cu `VerifyTreeGreedy`). Not the sampling (temperature > 0) path.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class AcceptCounters:
    """Acceptance counters updated in place on the logits' device (no host sync).

    accept_length_hist [S+1] int64: requests whose accept_length (draft tokens accepted) was j.
    depth_attempted [S] int64: element j-1 counts requests whose walk reached depth j with at least
      one draft candidate there (all depths < j accepted).
    depth_accepted [S] int64: element j-1 counts requests that accepted a draft token at depth j.
    """

    accept_length_hist: torch.Tensor
    depth_attempted: torch.Tensor
    depth_accepted: torch.Tensor

    @classmethod
    def zeros(cls, num_steps: int, device: torch.device | str = "cpu") -> "AcceptCounters":
        """Counters for trees of depth `num_steps` (S), all zero."""
        return cls(
            accept_length_hist=torch.zeros(num_steps + 1, dtype=torch.int64, device=device),
            depth_attempted=torch.zeros(num_steps, dtype=torch.int64, device=device),
            depth_accepted=torch.zeros(num_steps, dtype=torch.int64, device=device),
        )


@dataclass(frozen=True)
class VerifyResult:
    """Outputs of greedy tree verification (SGLang's layout and dtypes).

    predict [B*N] int32: target token at each accepted node and at the last accepted node (the bonus);
      other entries are undefined (0 here).
    accept_index [B, S+1] int32: global node indices (b*N + i) of the accepted path, root at column 0,
      -1 padded.
    accept_length [B] int32: accepted DRAFT tokens (bonus excluded), as SGLang's accept_token_num.
    target_predict [B*N] int64: argmax of each logits row (first maximum).
    bonus [B] int64: target_predict at the last accepted node.
    """

    predict: torch.Tensor
    accept_index: torch.Tensor
    accept_length: torch.Tensor
    target_predict: torch.Tensor
    bonus: torch.Tensor


def verify_tree_reference(
    logits: torch.Tensor,
    candidates: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    num_steps_plus_one: int,
    counters: AcceptCounters | None = None,
) -> VerifyResult:
    """Greedy verification of B draft trees of N nodes each. Defines the contract.

    Contract:
      - logits [B*N, V] bf16 or fp32; candidates, retrive_index, retrive_next_token,
        retrive_next_sibling [B, N] int64 (as built by `build_tree_reference`); node 0 is the root.
      - target_predict = argmax per row, ties -> lowest vocabulary index (torch.argmax's first
        maximum). NaN rows are unsupported.
      - Walk (mirrors VerifyTreeGreedy): start at the root; for depth j = 1..S (S = num_steps_plus_one-1)
        scan the current node's children in sibling order; the first child whose candidate equals
        target_predict[last accepted node] is accepted (predict[last] = that token) and the walk
        descends; stop when no child matches or there are no children. Finally
        predict[last] = target_predict[last] (the bonus).
      - counters (optional) are updated in place: see `AcceptCounters`.
    Every output is integer and must be bit-exact; `predict` is compared only at positions listed
    in accept_index (SGLang leaves the others undefined).
    """
    device = logits.device
    batch, n = candidates.shape
    width = num_steps_plus_one
    target_predict = torch.argmax(logits, dim=-1).to(torch.int64) if logits.shape[0] else \
        torch.empty(0, dtype=torch.int64, device=device)
    tp = target_predict.cpu().tolist()
    cand = candidates.cpu().tolist()
    ridx = retrive_index.cpu().tolist()
    nxt = retrive_next_token.cpu().tolist()
    sib = retrive_next_sibling.cpu().tolist()
    predict = [0] * (batch * n)
    accept_index = [[-1] * width for _ in range(batch)]
    accept_length = [0] * batch
    bonus = [0] * batch
    hist = [0] * width
    attempted = [0] * max(width - 1, 0)
    accepted = [0] * max(width - 1, 0)
    for b in range(batch):
        last = ridx[b][0]
        accept_index[b][0] = last
        num_accepted = 0
        cur = 0
        for j in range(1, width):
            cur = nxt[b][cur]
            if cur != -1:
                attempted[j - 1] += 1
            while cur != -1:
                if cand[b][cur] == tp[last]:
                    predict[last] = tp[last]
                    num_accepted += 1
                    accept_index[b][num_accepted] = ridx[b][cur]
                    last = ridx[b][cur]
                    accepted[j - 1] += 1
                    break
                cur = sib[b][cur]
            if cur == -1:
                break
        accept_length[b] = num_accepted
        predict[last] = tp[last]
        bonus[b] = tp[last]
        hist[num_accepted] += 1
    if counters is not None:
        counters.accept_length_hist += torch.tensor(hist, dtype=torch.int64, device=counters.accept_length_hist.device)
        counters.depth_attempted += torch.tensor(attempted, dtype=torch.int64, device=counters.depth_attempted.device)
        counters.depth_accepted += torch.tensor(accepted, dtype=torch.int64, device=counters.depth_accepted.device)
    return VerifyResult(
        predict=torch.tensor(predict, dtype=torch.int32, device=device),
        accept_index=torch.tensor(accept_index, dtype=torch.int32, device=device).reshape(batch, width),
        accept_length=torch.tensor(accept_length, dtype=torch.int32, device=device),
        target_predict=target_predict,
        bonus=torch.tensor(bonus, dtype=torch.int64, device=device),
    )


def verify_tree(logits, candidates, retrive_index, retrive_next_token, retrive_next_sibling,
                num_steps_plus_one, counters=None) -> VerifyResult:
    """Triton implementation of `verify_tree_reference` (same contract). Needs CUDA or TRITON_INTERPRET=1.

    Dispatches per shape (specwatch_kernels._verify_tree_triton.VERIFY_DISPATCH): a single-launch kernel
    (split-V "fused" or one program per row "rowwise"; the last-arriving program walks the tree in
    parallel), or torch.argmax + the parallel walk kernel where a row says "argmax"."""
    from specwatch_kernels._verify_tree_triton import verify_tree_triton

    return verify_tree_triton(logits, candidates, retrive_index, retrive_next_token, retrive_next_sibling,
                              num_steps_plus_one, counters)
