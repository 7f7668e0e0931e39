"""select_tree / organize: Triton (interpreted on CPU, or compiled on CUDA: tests/_kernel_device.py) against the references; build_tree against hand trees."""

# Interpreted on CPU by default; compiled on CUDA with TRITON_INTERPRET=0 (see _kernel_device).
import _kernel_device  # noqa: E402,I001  (sets TRITON_INTERPRET before triton is imported)

import pytest
import torch

from specwatch_kernels.draft_topk import draft_topk_reference
from specwatch_kernels.select_tree import build_tree_device, build_tree_reference, organize_reference, select_tree_reference


@pytest.fixture(scope="module", params=[_kernel_device.MODE])
def tri():
    """The Triton module: interpreted on CPU tensors, or compiled with inputs moved to the GPU."""
    return _kernel_device.load("specwatch_kernels._select_tree_triton", "_select_tree_kernel")


def _equal(a, b, what):
    assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), (what, a, b)


@pytest.mark.parametrize("batch,k,steps,n,d,ties", [
    (3, 3, 4, 8, 40, False),
    (2, 1, 3, 4, 17, False),      # topk = 1
    (2, 4, 3, 16, 1100, True),    # two hidden column blocks, tied probabilities
    (1, 8, 3, 40, 8, True),       # K^2 = 64 candidates
])
def test_select_and_organize_bit_exact(tri, batch, k, steps, n, d, ties):
    g = torch.Generator().manual_seed(batch * 10 + k)
    vocab = 60
    hidden = torch.randn(batch, d, generator=g).bfloat16()
    p, idx = draft_topk_reference(torch.randn(batch, vocab, generator=g), k)
    scores, lists = None, ([], [], [])
    for i in range(steps):
        ref = select_tree_reference(i, p, idx, hidden, scores, k)
        out = tri.select_tree_triton(i, p, idx, hidden, scores, k)
        for name, a, b in zip(("input_ids", "hidden", "scores"), ref[:3], out[:3]):
            _equal(a, b, f"step {i} {name}")
        for name, a, b in zip(("expand", "tokens", "parents"), ref[3], out[3]):
            _equal(a, b, f"step {i} {name}")
        _, hidden, scores, info = ref
        for acc, x in zip(lists, info):
            acc.append(x)
        logits = torch.randn(batch * k, vocab, generator=g)
        if ties:
            logits[:, :6] = 4.0  # equal probabilities -> tied products
        p, idx = draft_topk_reference(logits, k)
    for a, b, name in zip(organize_reference(*lists, n), tri.organize_triton(*lists, n), ("parents", "index", "tokens")):
        _equal(a, b, name)


def test_select_without_hidden(tri):
    p = torch.rand(6, 3)
    idx = torch.randint(0, 100, (6, 3))
    scores = torch.rand(2, 3)
    hidden = torch.empty(0, 16)
    ref = select_tree_reference(1, p, idx, hidden, scores, 3)
    out = tri.select_tree_triton(1, p, idx, hidden, scores, 3)
    _equal(ref[0], out[0], "input_ids")
    assert out[1].shape == (0, 16)


def test_organize_all_tied(tri):
    """All scores equal: the first N-1 entries win (lowest index)."""
    scores = [torch.full((2, 1, 4), 0.25), torch.full((2, 4, 4), 0.25)]
    tokens = [torch.arange(4).repeat(2, 1), torch.arange(100, 116).repeat(2, 1)]
    parents = [torch.arange(-1, 4).repeat(2, 1), torch.zeros(2, 4, dtype=torch.int64)]
    for n in (2, 6, 21):
        ref = organize_reference(scores, tokens, parents, n)
        assert ref[1].tolist() == [list(range(n - 1))] * 2
        for a, b in zip(ref, tri.organize_triton(scores, tokens, parents, n)):
            _equal(a, b, f"n={n}")


def test_select_reference_matches_sglang_topk_on_distinct_scores():
    torch.manual_seed(3)
    k = 4
    p = torch.rand(8, k)
    scores = torch.rand(2, k)
    _, _, cs_p, info = select_tree_reference(2, p, torch.randint(0, 50, (8, k)), torch.randn(8, 4), scores, k)
    expand = scores[:, :, None] * p.view(2, k, k)
    sp, si = torch.topk(expand.flatten(1), k)
    assert torch.equal(cs_p, sp)
    assert torch.equal(info[2], si + (k * k * 1 + k))


def test_build_tree_hand_example():
    """K=2, S=2, N=4: root -> a (entry 0), b (entry 1); a -> c (entry 2 = K + 0*K + 0)."""
    parent_list = torch.tensor([[-1, 0, 1]])            # arange(-1, K) for step 0
    top_scores_index = torch.tensor([[0, 1, 2]])
    draft_tokens = torch.tensor([[11, 12, 13]])
    tree = build_tree_reference(torch.tensor([5]), parent_list, top_scores_index, draft_tokens,
                                torch.tensor([100]), topk=2, num_steps=2, num_draft_tokens=4)
    assert tree.draft_token.tolist() == [[5, 11, 12, 13]]
    assert tree.positions.tolist() == [[100, 101, 101, 102]]
    assert tree.retrive_index.tolist() == [[0, 1, 2, 3]]
    assert tree.retrive_next_token.tolist() == [[1, 3, -1, -1]]
    assert tree.retrive_next_sibling.tolist() == [[-1, 2, -1, -1]]
    assert tree.tree_mask.int().tolist() == [[[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]]


def test_build_tree_unselected_parent_raises():
    with pytest.raises(ValueError, match="not selected"):
        # entry 4 = K + 1*K + 0: its parent is step-0 entry 1, which was not selected
        build_tree_reference(torch.tensor([5]), torch.tensor([[-1, 0, 1]]), torch.tensor([[0, 4]]),
                             torch.tensor([[1, 2]]), torch.tensor([3]), topk=2, num_steps=2, num_draft_tokens=3)


@pytest.mark.parametrize("k,steps,n", [(1, 1, 2), (1, 3, 4), (1, 5, 6), (2, 2, 4), (4, 3, 8), (3, 4, 12),
                                       (8, 2, 16), (4, 1, 5), (2, 3, 9)])
def test_build_tree_device_equals_reference(k, steps, n):
    """The fixed-shape (CUDA-graph) tree build gives the host reference's tree, bit for bit, on
    trees from random draft steps (chains, wide and deep trees, one-step trees)."""
    for seed in range(4):
        g = torch.Generator().manual_seed(seed * 10 + k)
        batch, vocab = 3, 9 if seed % 2 else 40
        hidden = torch.randn(batch, 8, generator=g)
        p, idx = draft_topk_reference(torch.randn(batch, vocab, generator=g), k)
        scores, lists = None, ([], [], [])
        for i in range(steps):
            _, hidden, scores, info = select_tree_reference(i, p, idx, hidden, scores, k)
            for acc, x in zip(lists, info):
                acc.append(x)
            p, idx = draft_topk_reference(torch.randn(batch * k, vocab, generator=g), k)
        parent, top, tokens = organize_reference(*lists, n)
        args = (torch.randint(0, vocab, (batch,), generator=g), parent, top, tokens,
                torch.randint(5, 50, (batch,), generator=g), k, steps, n)
        ref = build_tree_reference(*args)
        dev = build_tree_device(*(a.to(_kernel_device.DEVICE) if isinstance(a, torch.Tensor) else a for a in args))
        for name in ref.__dataclass_fields__:
            _equal(getattr(ref, name), getattr(dev, name).cpu(), f"{name} k={k} steps={steps} n={n} seed={seed}")


def test_build_tree_device_hand_example():
    tree = build_tree_device(torch.tensor([5]), torch.tensor([[-1, 0, 1]]), torch.tensor([[0, 1, 2]]),
                             torch.tensor([[11, 12, 13]]), torch.tensor([100]), topk=2, num_steps=2,
                             num_draft_tokens=4)
    assert tree.positions.tolist() == [[100, 101, 101, 102]]
    assert tree.retrive_next_token.tolist() == [[1, 3, -1, -1]]
    assert tree.retrive_next_sibling.tolist() == [[-1, 2, -1, -1]]
    assert tree.tree_mask.int().tolist() == [[[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]]
