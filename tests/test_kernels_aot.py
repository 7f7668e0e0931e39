"""Ahead-of-time compile of every Triton kernel for sm_90 on a machine without a GPU.

The interpreter accepts code the GPU compiler rejects (and the reverse), so CI also runs the real
compiler (Triton's bundled ptxas). Runs in a subprocess: the interpreter tests in this pytest
process set TRITON_INTERPRET=1, which turns @triton.jit functions into interpreted ones.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import importlib.util

import pytest

# find_spec, not import: importing triton here would fix its jit mode for the interpreter tests.
if importlib.util.find_spec("triton") is None:
    pytest.skip("triton not installed", allow_module_level=True)

SCRIPT = r'''
import json, triton
from triton.compiler import ASTSource
from triton.backends.compiler import GPUTarget
from specwatch_kernels import _draft_topk_triton as D, _verify_tree_triton as V, _select_tree_triton as S, _aux_stats_triton as A

P = lambda t: "*" + t
SPECS = []
for dt in ("bf16", "fp32"):
    for K in (1, 4, 8):
        KP = triton.next_power_of_2(K)
        for smax in (False, True):
            SPECS.append((D._draft_topk_partial_kernel, dict(logits_ptr=P(dt), stride_row="i64", vocab="i32", chunk="i32",
                n_groups="i32", part_m_ptr="*fp32", part_s_ptr="*fp32", gmax_ptr="*fp32", nsplit="i32",
                smax_ptr="*fp32", n_sg="i32"),
                dict(BLOCK=4096, GROUP_SIZE=32, WRITE_SMAX=smax), 4))
        # the 8-warp merge over V/32 group maxima and the 1-warp merge over pass 1's super-group
        # maxima (TOPK_CONFIG's two-launch rows)
        for smax, warps in ((False, 8), (True, 1)):
            SPECS.append((D._draft_topk_merge_kernel, dict(logits_ptr=P(dt), stride_row="i64", vocab="i32", n_groups="i32",
                part_m_ptr="*fp32", part_s_ptr="*fp32", gmax_ptr="*fp32", nsplit="i32",
                hot_ptr="*i64", out_p_ptr="*fp32", out_i_ptr="*i64", smax_ptr="*fp32", n_sg="i32"),
                dict(K=K, KP=KP, NSP=64, SGP=256, GROUP_SIZE=32, HAS_HOT=True, READ_SMAX=smax), warps))
        SPECS.append((D._draft_topk_fused_kernel, dict(logits_ptr=P(dt), stride_row="i64", vocab="i32", chunk="i32",
            n_groups="i32", part_m_ptr="*fp32", part_s_ptr="*fp32", gmax_ptr="*fp32", nsplit="i32",
            ticket_ptr="*i32", hot_ptr="*i64", out_p_ptr="*fp32", out_i_ptr="*i64", smax_ptr="*fp32", n_sg="i32"),
            dict(BLOCK=4096, GROUP_SIZE=32, K=K, KP=KP, NSP=8, SGP=256, HAS_HOT=True, SMAX=True), 4))
    # VERIFY_DISPATCH's configs: split-V B2048 w4 and B1024 w1, row-wise B4096 w8 (and B1024 w1)
    for warps, block in ((4, 2048), (1, 1024)):
        SPECS.append((V._verify_tree_kernel, dict(logits_ptr=P(dt), stride_row="i64", vocab="i32", chunk="i32", nsplit="i32",
            cand_ptr="*i64", ridx_ptr="*i64", next_ptr="*i64", sib_ptr="*i64", key_ptr="*i64", ticket_ptr="*i32",
            predict_ptr="*i32", accept_ptr="*i32", accept_len_ptr="*i32", tp_ptr="*i64", bonus_ptr="*i64",
            hist_ptr="*i64", attempted_ptr="*i64", accepted_ptr="*i64"),
            dict(N=8, NP=8, W=5, WP=8, BLOCK=block, HAS_COUNTERS=True), warps))
    for warps, block in ((1, 1024), (8, 4096)):
        SPECS.append((V._verify_rowwise_kernel, dict(logits_ptr=P(dt), stride_row="i64", vocab="i32",
            cand_ptr="*i64", ridx_ptr="*i64", next_ptr="*i64", sib_ptr="*i64", ticket_ptr="*i32",
            predict_ptr="*i32", accept_ptr="*i32", accept_len_ptr="*i32", tp_ptr="*i64", bonus_ptr="*i64",
            hist_ptr="*i64", attempted_ptr="*i64", accepted_ptr="*i64"),
            dict(N=8, NP=8, W=5, WP=8, BLOCK=block, HAS_COUNTERS=True), warps))
    # SPLIT_PATHS (`_verify_split_kernel`): fused-relaxed B2048 w4, slots(-prefetch) B1024 w1 and
    # B2048 w4, rowwise-prefetch B4096 w8 (one split)
    for warps, block, slots, prefetch, sp in ((4, 2048, False, False, 8), (4, 2048, True, False, 8),
                                              (1, 1024, True, True, 16), (8, 4096, True, True, 1)):
        SPECS.append((V._verify_split_kernel, dict(logits_ptr=P(dt), stride_row="i64", vocab="i32", chunk="i32",
            nsplit="i32", cand_ptr="*i64", ridx_ptr="*i64", next_ptr="*i64", sib_ptr="*i64", key_ptr="*i64",
            ticket_ptr="*i32", predict_ptr="*i32", accept_ptr="*i32", accept_len_ptr="*i32", tp_ptr="*i64",
            bonus_ptr="*i64", hist_ptr="*i64", attempted_ptr="*i64", accepted_ptr="*i64"),
            dict(N=8, NP=8, W=5, WP=8, SP=sp, BLOCK=block, HAS_COUNTERS=True, SLOTS=slots, PREFETCH=prefetch,
                 STAGES=2), warps))
    if dt == "fp32":  # the walk alone (after torch.argmax) takes no logits
        SPECS.append((V._walk_kernel, dict(tp_ptr="*i64", cand_ptr="*i64", ridx_ptr="*i64", next_ptr="*i64",
            sib_ptr="*i64", predict_ptr="*i32", accept_ptr="*i32", accept_len_ptr="*i32", bonus_ptr="*i64",
            hist_ptr="*i64", attempted_ptr="*i64", accepted_ptr="*i64"),
            dict(N=8, NP=8, W=5, WP=8, HAS_COUNTERS=True), 1))
    SPECS.append((A._aux_stats_kernel, dict(aux_ptr=P(dt), stride_aux="i64", ref_ptr=P(dt), stride_ref="i64",
        tokens="i32", d="i32", part_f_ptr="*fp32", part_n_ptr="*i32"), dict(C=3, BT=16, BD=128, HAS_REF=True), 4))
    SPECS.append((A._aux_candidates_kernel, dict(aux_ptr=P(dt), stride_aux="i64", cand_ptr=P(dt), stride_ct="i64",
        stride_cl="i64", tokens="i32", d="i32", part_ptr="*fp32"), dict(C=3, CP=4, LC=3, BT=4, BD=256), 4))
SPECS.append((A._aux_finalize_kernel, dict(part_f_ptr="*fp32", part_n_ptr="*i32", nblk="i32", count="fp32",
    tokens="fp32", out_f_ptr="*fp32", out_n_ptr="*i64"), dict(C=3, BB=256, HAS_REF=True), 4))
for K in (1, 4, 8):
    SPECS.append((S._select_tree_kernel, dict(topk_p_ptr="*fp32", topk_index_ptr="*i64", scores_ptr="*fp32",
        hidden_ptr="*bf16", stride_hidden="i64", d="i32", ids_ptr="*i64", hidden_out_ptr="*bf16", stride_out="i64",
        new_scores_ptr="*fp32", expand_ptr="*fp32", parents_ptr="*i64", parent_offset="i64"),
        dict(K=K, KP=triton.next_power_of_2(K), KKP=triton.next_power_of_2(K * K), BLOCK_D=1024, HAS_HIDDEN=True), 4))
SPECS.append((S._select_first_kernel, dict(hidden_ptr="*bf16", stride_hidden="i64", d="i32", hidden_out_ptr="*bf16",
    stride_out="i64", parents_ptr="*i64"), dict(K=4, KP=4, PP=8, BLOCK_D=1024), 4))
SPECS.append((S._organize_kernel, dict(scores_ptr="*fp32", tokens_ptr="*i64", m_cols="i32", out_index_ptr="*i64",
    out_tokens_ptr="*i64"), dict(NEED=63, MP=256), 4))

target = GPUTarget("cuda", 90, 32)
rows = []
for fn, sig, const, warps in SPECS:
    full = dict(sig)
    full.update({k: "constexpr" for k in const})
    k = triton.compile(ASTSource(fn, full, const), target=target, options={"num_warps": warps, "enable_fp_fusion": True})
    rows.append(dict(name=fn.__name__, const=const, cubin_bytes=len(k.asm["cubin"]),
                     ptx_entry=(".entry " + fn.__name__) in k.asm["ptx"], target=str(k.asm["ptx"].count(".target sm_90"))))
print(json.dumps(rows))
'''

KERNEL_NAMES = {"_draft_topk_partial_kernel", "_draft_topk_merge_kernel", "_draft_topk_fused_kernel",
                "_verify_tree_kernel", "_verify_rowwise_kernel", "_verify_split_kernel", "_walk_kernel",
                "_aux_stats_kernel",
                "_aux_candidates_kernel", "_aux_finalize_kernel", "_select_tree_kernel", "_select_first_kernel",
                "_organize_kernel"}


def test_every_kernel_compiles_for_sm90():
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {r["name"] for r in rows} == KERNEL_NAMES
    for r in rows:
        assert r["cubin_bytes"] > 1000, r
        assert r["ptx_entry"] and r["target"] == "1", r
