"""Triton drafting kernels for EAGLE-3 speculative decoding, each with a torch reference.

Importing this package imports torch but not triton: the Triton code lives in private
`_*_triton` modules loaded on first use. Use `specwatch_kernels.ops.<name>` to dispatch by device
(Triton on CUDA, reference on CPU). Never imports `specwatch`.
"""
from specwatch_kernels import ops
from specwatch_kernels.aux_stats import AuxStats, aux_stats_reference
from specwatch_kernels.draft_topk import draft_topk_reference
from specwatch_kernels.select_tree import DraftTree, build_tree_reference, organize_reference, select_tree_reference
from specwatch_kernels.verify_tree import AcceptCounters, VerifyResult, verify_tree_reference

__all__ = [
    "ops",
    "AuxStats",
    "aux_stats_reference",
    "draft_topk_reference",
    "DraftTree",
    "build_tree_reference",
    "organize_reference",
    "select_tree_reference",
    "AcceptCounters",
    "VerifyResult",
    "verify_tree_reference",
]
