"""aux_stats: Triton (interpreted on CPU, or compiled on CUDA: tests/_kernel_device.py) against the reference; the reference against hand values."""

# Interpreted on CPU by default; compiled on CUDA with TRITON_INTERPRET=0 (see _kernel_device).
import _kernel_device  # noqa: E402,I001  (sets TRITON_INTERPRET before triton is imported)

import pytest
import torch

from specwatch_kernels.aux_stats import aux_stats_reference

FLOAT_TOL = dict(rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module", params=[_kernel_device.MODE])
def tri():
    """The Triton module: interpreted on CPU tensors, or compiled with inputs moved to the GPU."""
    return _kernel_device.load("specwatch_kernels._aux_stats_triton", "_aux_stats_kernel")


def _compare(a, b):
    for name in a.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        if x is None:
            assert y is None, name
        elif x.dtype == torch.int64:
            assert torch.equal(x, y), (name, x, y)
        else:
            torch.testing.assert_close(y, x, **FLOAT_TOL, msg=name)


def test_reference_hand_values():
    aux = torch.tensor([[1.0, -1.0, 2.0, 2.0, float("nan"), 3.0],
                        [1.0, 1.0, 2.0, -2.0, float("inf"), 4.0]])  # C=3, d=2
    s = aux_stats_reference(aux, 3, ref=aux.clone())
    assert s.nonfinite_count.tolist() == [0, 0, 2]
    torch.testing.assert_close(s.mean_square, torch.tensor([1.0, 4.0, 25.0 / 4]))
    torch.testing.assert_close(s.max_abs, torch.tensor([1.0, 2.0, 4.0]))
    torch.testing.assert_close(s.mean, torch.tensor([0.5, 1.0, 7.0 / 4]))
    torch.testing.assert_close(s.ref_cosine_min, torch.ones(3))
    torch.testing.assert_close(s.ref_rel_l2_max, torch.zeros(3))


@pytest.mark.parametrize("tokens,d,dtype,block_t", [
    (5, 100, torch.bfloat16, None),
    (33, 37, torch.float32, 4),
    (1, 600, torch.bfloat16, 1),   # d > one column tile
    (20, 520, torch.bfloat16, 16),
])
def test_triton_aux_stats_equal_reference_with_nan_and_inf(tri, tokens, d, dtype, block_t):
    g = torch.Generator().manual_seed(tokens + d)
    scale = torch.tensor([1.0, 5.0, 20.0]).repeat_interleave(d)  # RMS grows with depth
    aux = (torch.randn(tokens, 3 * d, generator=g) * scale).to(dtype)
    aux[0, 3] = float("nan")
    aux[-1, -1] = float("-inf")
    ref = (aux.float() + 0.1 * torch.randn(tokens, 3 * d, generator=g)).to(dtype)
    cand = torch.randn(tokens, 4, d, generator=g).to(dtype)
    cand[:, 2] = aux[:, d:2 * d]
    _compare(aux_stats_reference(aux, 3, ref, cand), tri.aux_stats_triton(aux, 3, ref, cand, block_t=block_t))
    _compare(aux_stats_reference(aux), tri.aux_stats_triton(aux, block_t=block_t))


def test_candidates_identify_captured_layer(tri):
    """Each segment is a copy of one candidate layer: the cosine argmax names it (the off-by-one check)."""
    g = torch.Generator().manual_seed(0)
    tokens, d, layers = 9, 64, 5
    cand = torch.randn(tokens, layers, d, generator=g)
    aux = torch.cat([cand[:, 1], cand[:, 3], cand[:, 4]], dim=1)
    stats = tri.aux_stats_triton(aux, 3, candidates=cand)
    assert stats.candidate_cosine.argmax(1).tolist() == [1, 3, 4]
    torch.testing.assert_close(stats.candidate_cosine.amax(1), torch.ones(3), **FLOAT_TOL)
    _compare(aux_stats_reference(aux, 3, candidates=cand), stats)
