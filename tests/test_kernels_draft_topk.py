"""draft_topk: Triton (interpreted on CPU, or compiled on CUDA: tests/_kernel_device.py) against the torch reference; the reference against hand values."""
import math

# Interpreted on CPU by default; compiled on CUDA with TRITON_INTERPRET=0 (see _kernel_device).
import _kernel_device  # noqa: E402,I001  (sets TRITON_INTERPRET before triton is imported)

import pytest
import torch

from specwatch_kernels import ops
from specwatch_kernels.draft_topk import draft_topk_reference

NEG = float("-inf")


@pytest.fixture(scope="module", params=[_kernel_device.MODE])
def tri():
    """The Triton module: interpreted on CPU tensors, or compiled with inputs moved to the GPU."""
    return _kernel_device.load("specwatch_kernels._draft_topk_triton", "_draft_topk_partial_kernel")


# The merge designs `bench_kernels.py --variants` times: each must give the reference's answer.
VARIANTS = {
    "fused": dict(fused=True),
    "two-launch": dict(fused=False),                             # 4-8 warp merge over V/32 group maxima
    "two-launch-smax-w1": dict(fused=False, merge_warps=1),      # pass 1 writes super-group maxima
    "two-launch-smax-w2": dict(fused=False, merge_warps=2),
}
# the variants whose pass 1 writes super-group maxima when BLOCK is a multiple of 1024
SMAX_VARIANTS = ("fused", "two-launch-smax-w1", "two-launch-smax-w2")


@pytest.fixture(params=list(VARIANTS))
def variant(request):
    return VARIANTS[request.param]


def _check(tri, logits, k, hot=None, **kw):
    p, i = tri.draft_topk_triton(logits, k, hot, **kw)
    p_ref, i_ref = draft_topk_reference(logits, k, hot)
    assert i.dtype == torch.int64 and p.dtype == torch.float32
    assert torch.equal(i, i_ref), (i, i_ref)
    torch.testing.assert_close(p, p_ref, rtol=1e-5, atol=1e-7)


def test_reference_hand_values():
    logits = torch.tensor([[0.0, 2.0, 2.0, NEG, 1.0]])
    p, i = draft_topk_reference(logits, 3)
    z = 1 + 2 * math.e**2 + math.e
    assert i.tolist() == [[1, 2, 4]]  # tie 1 vs 2: lowest index first
    torch.testing.assert_close(p, torch.tensor([[math.e**2 / z, math.e**2 / z, math.e / z]]), rtol=1e-6, atol=0)
    _, mapped = draft_topk_reference(logits, 2, torch.tensor([10, 11, 12, 13, 14]))
    assert mapped.tolist() == [[11, 12]]


@pytest.mark.parametrize("rows,vocab,k,dtype,block,nsplit", [
    (3, 1000, 4, torch.float32, None, None),
    (2, 3001, 8, torch.bfloat16, 256, 3),      # several tiles per split, V % block != 0
    (4, 2500, 1, torch.bfloat16, 128, 2),
    (1, 50, 4, torch.float32, None, None),     # V smaller than a block
    (5, 777, 3, torch.float32, 64, 1),         # many tiles, one split: early-exit path
])
def test_triton_topk_equals_reference_on_random_logits(tri, rows, vocab, k, dtype, block, nsplit, variant):
    torch.manual_seed(rows * vocab + k)
    logits = (torch.randn(rows, vocab) * 3).to(dtype)
    _check(tri, logits, k, block=block, nsplit=nsplit, **variant)


@pytest.mark.parametrize("k,nsplit", [(1, 1), (1, 3), (8, 2), (4, 3)])
def test_triton_topk_breaks_ties_by_lowest_index_like_reference(tri, k, nsplit, variant):
    logits = torch.zeros(3, 2000)
    logits[0, ::7] = 1.0           # ~286-way tie at the top
    logits[2, 1900:] = 0.5         # 100-way tie at the end of the vocabulary
    _check(tri, logits, k, block=128, nsplit=nsplit, **variant)
    bf = (torch.randn(2, 1500) * 0.05).bfloat16()  # bf16 rounding makes many duplicates
    _check(tri, bf, k, block=256, nsplit=nsplit, **variant)


@pytest.mark.parametrize("k", [1, 8])
def test_neg_inf_mask_and_d2t(tri, k, variant):
    logits = torch.full((3, 2100), NEG)
    logits[0, 5] = 1.0                  # one finite logit, k-1 -inf ties after it
    logits[1, [17, 2000]] = 0.0
    logits[2, 1000:1003] = 3.0
    logits[2, :900] = torch.randn(900)
    hot = torch.randperm(2100) + 5
    for nsplit in (1, 3):
        _check(tri, logits, k, hot, block=256, nsplit=nsplit, **variant)
    _check(tri, logits, k, hot, block=1024, nsplit=2, **variant)  # super-group maxima from pass 1


def test_zero_rows_give_empty_topk(tri):
    p, i = tri.draft_topk_triton(torch.randn(0, 300), 4)
    assert p.shape == (0, 4) and i.shape == (0, 4)


def test_matches_sglang_path_on_tie_free_input():
    """SGLang: softmax(fp32) then torch.topk; same indices when the logits have no ties."""
    torch.manual_seed(1)
    logits = torch.randn(4, 3000)
    p, i = draft_topk_reference(logits, 8)
    sp, si = torch.topk(torch.softmax(logits, -1), 8)
    assert torch.equal(i, si)
    torch.testing.assert_close(p, sp, rtol=1e-5, atol=1e-7)


def test_specwatch_kernels_env_picks_triton_or_torch_and_rejects_others(tri, monkeypatch):
    logits = torch.randn(2, 900, device=_kernel_device.DEVICE)
    monkeypatch.delenv("SPECWATCH_KERNELS", raising=False)
    assert ops.use_triton(logits) == logits.is_cuda  # default: Triton exactly on CUDA tensors
    monkeypatch.setenv("SPECWATCH_KERNELS", "torch")
    assert not ops.use_triton(logits)
    monkeypatch.setenv("SPECWATCH_KERNELS", "triton")
    assert ops.use_triton(logits)
    p, i = ops.draft_topk(logits, 4)
    assert torch.equal(i.cpu(), draft_topk_reference(logits.cpu(), 4)[1])
    monkeypatch.setenv("SPECWATCH_KERNELS", "bogus")
    with pytest.raises(ValueError, match="SPECWATCH_KERNELS"):
        ops.use_triton(logits)


@pytest.mark.parametrize("k", [1, 3])
def test_super_group_pruning_with_ties(tri, k, variant):
    """V/1024 super-groups > K, so the merge prunes at both levels; ties span super-groups."""
    logits = torch.randn(2, 9000) - 10
    logits[0, [8999, 5000, 2047, 2048, 1]] = 3.0     # 5-way tie across four super-groups
    logits[1, 4096:4100] = 2.0
    logits[1, 7000] = 2.0
    _check(tri, logits, k, block=512, nsplit=2, **variant)
    _check(tri, logits.bfloat16(), k, block=1024, nsplit=3, **variant)


@pytest.mark.parametrize("k,nsplit", [(1, 5), (8, 1), (16, 2)])
@pytest.mark.parametrize("name", SMAX_VARIANTS)
def test_super_group_maxima_from_pass1(tri, k, nsplit, name):
    """BLOCK a multiple of 1024: pass 1 writes super-group maxima (fused, and two-launch with
    merge_warps); ties across super-groups and splits, a partial last super-group, -inf runs, and
    -0.0 vs +0.0."""
    variant = VARIANTS[name]
    logits = torch.randn(3, 10_500) - 6
    logits[0, [10_499, 9_216, 2_047, 2_048, 5]] = 2.5     # 5-way tie over four super-groups
    logits[1, :4096] = float("-inf")
    logits[1, 6000:6040] = 1.0                            # 40-way tie inside two groups
    logits[2] = 0.0
    logits[2, ::3] = -0.0                                 # all equal: the lowest indices win
    _check(tri, logits, k, block=1024, nsplit=nsplit, **variant)
    _check(tri, logits.bfloat16(), k, block=2048, nsplit=nsplit, maxnreg=128, **variant)


def test_fused_tickets_reset_between_calls(tri):
    """The fused kernel resets its per-row tickets: repeated and differently shaped calls stay exact."""
    for rows, vocab in ((4, 3000), (4, 3000), (7, 1200), (4, 3000)):
        torch.manual_seed(rows + vocab)
        _check(tri, torch.randn(rows, vocab), 4, block=256, nsplit=3, fused=True)


def test_plan_picks_first_matching_topk_config_row_and_rows_are_launchable(tri):
    """plan() is the first TOPK_CONFIG row whose bounds hold; every row is a launchable config."""
    for rows, vocab in ((1, 5000), (8, 128256), (9, 163840), (64, 163840), (256, 128256), (257, 32000),
                        (512, 163840), (4096, 9000)):
        want = next(r for r in tri.TOPK_CONFIG
                    if (r[0] is None or rows <= r[0]) and (r[1] is None or vocab <= r[1]))
        assert tri.plan(rows, vocab) == tuple(want[2:])
        assert tri._config(rows, vocab) == tuple(want[3:5])
    for row in tri.TOPK_CONFIG:
        _, _, fused, block, warps, pps, maxnreg, merge_warps = row  # 8 fields
        assert block in (1024, 2048, 4096, 8192) and warps in (1, 2, 4, 8) and pps >= 1, row
        assert maxnreg in (None, 128, 168, 255), row
        # merge_warps is a two-launch field; with it, pass 1 writes super-group maxima (BLOCK % 1024 == 0)
        assert merge_warps is None or (not fused and merge_warps in (1, 2, 4, 8) and block % 1024 == 0), row
    assert tri.TOPK_CONFIG[-1][:2] == (None, None)  # every shape has a row


def test_variant_check_explains_a_probability_mismatch():
    """bench_kernels' variants check: ids equal and p off by a per-row factor inside the fp32 bound
    -> "p-tol" and says so; p beyond the bound, or ids that differ -> MISMATCH naming the row."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_kernels.py"
    spec = importlib.util.spec_from_file_location("bench_kernels_for_test", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    torch.manual_seed(3)
    x = torch.randn(3, 5000) * 4
    p, i = draft_topk_reference(x, 4)
    assert bench.topk_agreement(x, p, i, p, i) == ("", "")
    scale = torch.tensor([[1 + 3e-5], [1 - 2e-5], [1.0]])  # what another summation order does to lse
    flag, detail = bench.topk_agreement(x, p * scale, i, p, i)
    assert flag == "p-tol" and "token ids identical" in detail and "per-row factor" in detail
    flag, detail = bench.topk_agreement(x, p * 1.5, i, p, i)
    assert flag == "MISMATCH" and "BEYOND the fp32 bound" in detail
    wrong = i.clone()
    wrong[2, 1] += 1
    flag, detail = bench.topk_agreement(x, p, wrong, p, i)
    assert flag == "MISMATCH" and "DIFFER in 1 of 3 rows (row 2" in detail


@pytest.mark.parametrize("rows", [3, 8, 20])
def test_default_config_each_row(tri, rows):
    """The default entry point (no overrides) on a shape each TOPK_CONFIG row picks (V <= 8192: the
    small-vocabulary row; V > 8192: the R <= 8 fused row and the R <= 256 two-launch row with the
    1-warp merge; the R > 256 row launches the same kernels with another split count, and 257+
    interpreted rows cost ~30 s) gives the reference's answer, ties included."""
    torch.manual_seed(rows)
    for vocab in (9000, 5000) if rows == 3 else (9000,):
        logits = (torch.randn(rows, vocab) * 0.05).bfloat16()  # bf16 duplicates: ties
        logits[:, 8999 % vocab] = 1.0
        logits[0, 100] = 1.0                                   # a tie at the top of row 0
        _check(tri, logits, 8 if rows > 3 else 1)
