"""verify_tree: Triton (interpreted on CPU, or compiled on CUDA: tests/_kernel_device.py) against the torch reference, on trees built by the references."""

# Interpreted on CPU by default; compiled on CUDA with TRITON_INTERPRET=0 (see _kernel_device).
import _kernel_device  # noqa: E402,I001  (sets TRITON_INTERPRET before triton is imported)

import pytest
import torch

from kernels import AcceptCounters
from kernels.draft_topk import draft_topk_reference
from kernels.select_tree import build_tree_reference, organize_reference, select_tree_reference
from kernels.verify_tree import verify_tree_reference

FIELDS = ("accept_index", "accept_length", "target_predict", "bonus")


@pytest.fixture(scope="module", params=[_kernel_device.MODE])
def tri():
    """The Triton module: interpreted on CPU tensors, or compiled with inputs moved to the GPU."""
    return _kernel_device.load("kernels._verify_tree_triton", "_verify_tree_kernel")


def random_tree(batch, k, steps, n, vocab, seed):
    """A draft tree from random draft logits through select -> organize -> build (the references)."""
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(batch, 8, generator=g)
    p, idx = draft_topk_reference(torch.randn(batch, vocab, generator=g), k)
    scores, lists = None, ([], [], [])
    for i in range(steps):
        _, hidden, scores, info = select_tree_reference(i, p, idx, hidden, scores, k)
        for acc, x in zip(lists, info):
            acc.append(x)
        p, idx = draft_topk_reference(torch.randn(batch * k, vocab, generator=g), k)
    parent, top, tokens = organize_reference(*lists, n)
    verified = torch.randint(0, vocab, (batch,), generator=g)
    seq_lens = torch.randint(5, 50, (batch,), generator=g)
    return build_tree_reference(verified, parent, top, tokens, seq_lens, k, steps, n)


def target_logits(tree, vocab, agree, seed, dtype=torch.float32):
    """Target logits whose argmax at each node is its first child's token with probability `agree`."""
    g = torch.Generator().manual_seed(seed)
    batch, n = tree.draft_token.shape
    logits = torch.randn(batch * n, vocab, generator=g).to(dtype)
    for b in range(batch):
        for i in range(n):
            child = int(tree.retrive_next_token[b, i])
            if child != -1 and torch.rand((), generator=g) < agree:
                # pick any child, not always the first, to exercise the sibling scan
                sibs = [child]
                while int(tree.retrive_next_sibling[b, sibs[-1]]) != -1:
                    sibs.append(int(tree.retrive_next_sibling[b, sibs[-1]]))
                pick = sibs[int(torch.randint(len(sibs), (), generator=g))]
                logits[b * n + i, tree.draft_token[b, pick]] = 50.0
    return logits


def _run_both(tri, logits, tree, steps, **kw):
    args = (logits, tree.draft_token, tree.retrive_index, tree.retrive_next_token, tree.retrive_next_sibling, steps + 1)
    c_ref, c_tri = AcceptCounters.zeros(steps), AcceptCounters.zeros(steps)
    ref = verify_tree_reference(*args, c_ref)
    out = tri.verify_tree_triton(*args, c_tri, **kw)
    for f in FIELDS:
        assert torch.equal(getattr(ref, f), getattr(out, f)), (f, getattr(ref, f), getattr(out, f))
    # predict is defined only at accepted positions
    pos = ref.accept_index[ref.accept_index >= 0].long()
    assert torch.equal(ref.predict[pos], out.predict[pos])
    for f in ("accept_length_hist", "depth_attempted", "depth_accepted"):
        assert torch.equal(getattr(c_ref, f), getattr(c_tri, f)), f
    return ref


@pytest.mark.parametrize("batch,k,steps,n,nsplit", [
    (3, 1, 4, 5, 1),     # chain
    (4, 3, 3, 8, 2),     # tree
    (2, 4, 4, 12, 3),
    (2, 8, 2, 16, 2),
])
@pytest.mark.parametrize("agree", [0.0, 0.7, 1.0])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "argmax+walk"])
def test_random_trees(tri, batch, k, steps, n, nsplit, agree, fused):
    vocab = 1300  # not a multiple of the block
    tree = random_tree(batch, k, steps, n, vocab, seed=batch * 100 + k)
    logits = target_logits(tree, vocab, agree, seed=n)
    ref = _run_both(tri, logits, tree, steps, block=256, nsplit=nsplit, fused=fused)
    for b in range(batch):
        length = int(ref.accept_length[b])
        last = int(ref.accept_index[b, length]) - b * n
        assert int(tree.depth[b, last]) == length
        if agree == 1.0:
            # every node's target is one of its children: the walk stops only at a leaf or at depth S
            assert length == steps or int(tree.retrive_next_token[b, last]) == -1
        if agree == 0.0:
            assert length == 0


def test_chain_all_accept_and_none_accept(tri):
    batch, steps, vocab = 3, 4, 900
    tree = random_tree(batch, 1, steps, steps + 1, vocab, seed=7)
    logits = target_logits(tree, vocab, 1.0, seed=3)
    ref = _run_both(tri, logits, tree, steps)
    assert ref.accept_length.tolist() == [steps] * batch
    assert ref.accept_index.tolist() == [[b * (steps + 1) + j for j in range(steps + 1)] for b in range(batch)]
    # none accepted: the target always predicts a token no node holds
    logits = torch.randn(batch * (steps + 1), vocab)
    logits[:, vocab - 1] = 100.0
    assert not (tree.draft_token[:, 1:] == vocab - 1).any()
    ref = _run_both(tri, logits, tree, steps)
    assert ref.accept_length.tolist() == [0] * batch
    assert ref.bonus.tolist() == [vocab - 1] * batch
    assert ref.accept_index[:, 1:].eq(-1).all()


def test_ties_bf16_and_neg_inf(tri):
    vocab, steps = 1100, 3
    tree = random_tree(2, 2, steps, 6, vocab, seed=11)
    logits = torch.full((12, vocab), float("-inf"))
    logits[:, 100:1100:3] = 1.0  # argmax is a tie -> lowest index 100
    logits[5, 1099] = 2.0
    ref = _run_both(tri, logits.bfloat16(), tree, steps, block=128, nsplit=3)
    assert ref.target_predict.tolist() == [100] * 5 + [1099] + [100] * 6


def test_repeated_calls_reset_workspace(tri):
    """The kernel resets its persistent keys/tickets; a second call must give the same answer."""
    tree = random_tree(2, 3, 3, 7, 700, seed=5)
    logits = target_logits(tree, 700, 0.8, seed=9)
    args = (logits, tree.draft_token, tree.retrive_index, tree.retrive_next_token, tree.retrive_next_sibling, 4)
    first = tri.verify_tree_triton(*args)
    logits2 = -logits
    second = tri.verify_tree_triton(logits2, *args[1:])
    third = tri.verify_tree_triton(*args)
    assert torch.equal(first.target_predict, third.target_predict)
    assert torch.equal(second.target_predict, torch.argmax(logits2, -1))


def test_dispatch_rule_and_both_paths_agree(tri):
    """The default picks the fused kernel only where it measured faster than torch.argmax; both
    variants give the reference's answer (here a 40-row tree: the argmax + walk path)."""
    assert tri.fused_is_faster(4, 128256) and tri.fused_is_faster(64, 163840) and tri.fused_is_faster(8, 32000)
    assert not tri.fused_is_faster(256, 128256) and not tri.fused_is_faster(64, 32000)
    tree = random_tree(5, 2, 3, 8, 500, seed=21)
    logits = target_logits(tree, 500, 0.8, seed=4)
    ref = _run_both(tri, logits, tree, 3)  # default dispatch (40 rows, V=500: argmax + walk)
    assert ref.accept_length.sum() > 0
