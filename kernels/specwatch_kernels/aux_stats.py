"""One-pass statistics of captured EAGLE-3 aux hidden states, to detect wrong capture layer ids.

The target captures 3 hidden states (layer inputs at `eagle_aux_hidden_state_layer_ids` + 1 in
SGLang's convention) and concatenates them to [T, 3d]. Hidden-state norms grow with depth, so
per-segment RMS identifies the captured layer; cosine against a reference capture or against a stack
of candidate layers (l-1, l, l+1) pins an off-by-one. Monitoring only: not used by the draft model.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

COSINE_EPS = 1e-12  # floor on |a|*|b| so all-zero rows give cosine 0, not NaN


@dataclass(frozen=True)
class AuxStats:
    """Per-segment statistics (C segments of width d). Non-finite elements are counted and otherwise treated as 0.

    mean_square [C] fp32: mean of x^2 over T*d elements.   rms [C] fp32: sqrt(mean_square).
    max_abs [C] fp32: max |x| over finite elements.       nonfinite_count [C] int64: NaN/inf elements.
    mean [C] fp32: mean of x over T*d elements.
    ref_cosine_mean / ref_cosine_min [C] fp32: row-wise cosine(aux[t, seg c], ref[t, seg c]) mean/min
      over t; ref_rel_l2_max [C] fp32: max_t |a-r| / max(|r|, 1e-12). None without `ref`.
    candidate_cosine [C, Lc] fp32: mean over t of cosine(aux[t, seg c], candidates[t, l]); its argmax
      over l names the candidate layer each segment matches. None without `candidates`.
    """

    mean_square: torch.Tensor
    rms: torch.Tensor
    max_abs: torch.Tensor
    nonfinite_count: torch.Tensor
    mean: torch.Tensor
    ref_cosine_mean: torch.Tensor | None = None
    ref_cosine_min: torch.Tensor | None = None
    ref_rel_l2_max: torch.Tensor | None = None
    candidate_cosine: torch.Tensor | None = None


def _cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise cosine over the last dim, fp32: dot / max(|a| |b|, COSINE_EPS)."""
    dot = (a * b).sum(-1)
    denom = torch.sqrt((a * a).sum(-1)) * torch.sqrt((b * b).sum(-1))
    return dot / torch.clamp(denom, min=COSINE_EPS)


def aux_stats_reference(
    aux: torch.Tensor,
    num_segments: int = 3,
    ref: torch.Tensor | None = None,
    candidates: torch.Tensor | None = None,
) -> AuxStats:
    """Statistics of aux [T, C*d] (bf16 or fp32) per segment; see `AuxStats` for every field.

    Contract: all arithmetic in fp32 on the up-cast inputs; non-finite aux/ref/candidate elements
    count in nonfinite_count (aux only) and are replaced by 0 everywhere else. T >= 1.
    ref: [T, C*d] like aux. candidates: [T, Lc, d].
    Tolerance of a kernel against this reference: rtol 1e-4, atol 1e-5 (summation order differs);
    nonfinite_count exact; max_abs exact.
    """
    if aux.dim() != 2 or aux.shape[1] % num_segments:
        raise ValueError(f"aux_stats: aux must be [T, C*d] with C={num_segments}, got {tuple(aux.shape)}")
    tokens = aux.shape[0]
    d = aux.shape[1] // num_segments
    x = aux.float().reshape(tokens, num_segments, d)
    finite = torch.isfinite(x)
    nonfinite = (~finite).sum(dim=(0, 2)).to(torch.int64)
    x = torch.where(finite, x, torch.zeros((), device=x.device))
    count = tokens * d
    mean_square = (x * x).sum(dim=(0, 2)) / count
    mean = x.sum(dim=(0, 2)) / count
    max_abs = x.abs().amax(dim=(0, 2))
    out = dict(mean_square=mean_square, rms=torch.sqrt(mean_square), max_abs=max_abs,
               nonfinite_count=nonfinite, mean=mean)
    if ref is not None:
        r = ref.float().reshape(tokens, num_segments, d)
        r = torch.where(torch.isfinite(r), r, torch.zeros((), device=r.device))
        cos = _cosine(x, r)  # [T, C]
        diff = torch.sqrt(((x - r) ** 2).sum(-1))
        rel = diff / torch.clamp(torch.sqrt((r * r).sum(-1)), min=COSINE_EPS)
        out.update(ref_cosine_mean=cos.mean(0), ref_cosine_min=cos.amin(0), ref_rel_l2_max=rel.amax(0))
    if candidates is not None:
        c = candidates.float()
        c = torch.where(torch.isfinite(c), c, torch.zeros((), device=c.device))  # [T, Lc, d]
        cos = _cosine(x[:, :, None, :], c[:, None, :, :])  # [T, C, Lc]
        out.update(candidate_cosine=cos.mean(0))
    return AuxStats(**out)


def aux_stats(aux, num_segments=3, ref=None, candidates=None) -> AuxStats:
    """Triton implementation of `aux_stats_reference` (same contract). Needs CUDA or TRITON_INTERPRET=1."""
    from specwatch_kernels._aux_stats_triton import aux_stats_triton

    return aux_stats_triton(aux, num_segments, ref, candidates)
