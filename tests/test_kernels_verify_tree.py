"""verify_tree: Triton (interpreted on CPU, or compiled on CUDA: tests/_kernel_device.py) against the torch reference, on trees built by the references."""

# Interpreted on CPU by default; compiled on CUDA with TRITON_INTERPRET=0 (see _kernel_device).
import _kernel_device  # noqa: E402,I001  (sets TRITON_INTERPRET before triton is imported)

import pytest
import torch

from specwatch_kernels import AcceptCounters
from specwatch_kernels.draft_topk import draft_topk_reference
from specwatch_kernels.select_tree import build_tree_reference, organize_reference, select_tree_reference
from specwatch_kernels.verify_tree import verify_tree_reference

FIELDS = ("accept_index", "accept_length", "target_predict", "bonus")


@pytest.fixture(scope="module", params=[_kernel_device.MODE])
def tri():
    """The Triton module: interpreted on CPU tensors, or compiled with inputs moved to the GPU."""
    return _kernel_device.load("specwatch_kernels._verify_tree_triton", "_verify_tree_kernel")


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


# The verify designs `bench_kernels.py --variants` times (VERIFY_DISPATCH picks among them): each
# must give the reference's answer. num_warps changes the compiled layouts (GPU runs), not the
# interpreter's semantics.
PATH_VARIANTS = {
    "fused": dict(path="fused", num_warps=4),       # split-V
    "fused-w1": dict(path="fused", num_warps=1),
    "fused-w2": dict(path="fused", num_warps=2),
    "rowwise": dict(path="rowwise", num_warps=8),   # one program per row
    "argmax+walk": dict(path="argmax"),
    # issue 17 candidates (`_verify_split_kernel`, SPLIT_PATHS): shorter hand-off chains
    "fused-relaxed": dict(path="fused-relaxed", num_warps=4),     # relaxed atomic_max, plain reset
    "slots": dict(path="slots", num_warps=4),                     # per-split key slots, no atomic_max
    "slots-prefetch-w1": dict(path="slots-prefetch", num_warps=1),
    "rowwise-prefetch": dict(path="rowwise-prefetch", num_warps=8),
}


@pytest.fixture(params=list(PATH_VARIANTS))
def variant(request):
    return PATH_VARIANTS[request.param]


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


@pytest.mark.parametrize("batch,k,steps,n,nsplit,agree", [
    (3, 1, 4, 5, 1, 1.0),     # chain, all accepted
    (3, 1, 4, 5, 1, 0.7),
    (4, 3, 3, 8, 2, 0.0),     # tree, none accepted
    (4, 3, 3, 8, 2, 0.7),
    (2, 4, 4, 12, 3, 1.0),
    (2, 8, 2, 16, 2, 0.7),
])
def test_verify_accepts_the_longest_agreeing_path_on_random_trees(tri, batch, k, steps, n, nsplit, agree, variant):
    vocab = 1300  # not a multiple of the block
    tree = random_tree(batch, k, steps, n, vocab, seed=batch * 100 + k)
    logits = target_logits(tree, vocab, agree, seed=n)
    ref = _run_both(tri, logits, tree, steps, block=256, nsplit=nsplit, **variant)
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


def test_dispatch_rule_reads_the_table(tri):
    """dispatch() is the first VERIFY_DISPATCH row whose bounds hold; fused_is_faster agrees; every
    row is a launchable config and every shape has a row."""
    for rows in (1, 4, 5, 8, 40, 64, 65, 256, 300, 512, 513, 2048):
        for vocab in (500, 32000, 32001, 128256, 163840):
            want = next(r for r in tri.VERIFY_DISPATCH
                        if (r[0] is None or rows <= r[0]) and (r[1] is None or vocab <= r[1]))
            assert tri.dispatch(rows, vocab) == (want[2], want[3])
            assert tri.fused_is_faster(rows, vocab) == (want[2] != "argmax")
    for max_rows, max_vocab, path, (block, warps, pps) in tri.VERIFY_DISPATCH:
        assert path in tri.PATHS and block in (1024, 2048, 4096, 8192) and warps in (1, 2, 4, 8)
        split_v = path == "fused" or (path in tri.SPLIT_PATHS and not tri.SPLIT_PATHS[path][2])
        assert pps >= 1 if split_v else pps == 0  # programs per SM: the split-V kernels only
    assert tri.VERIFY_DISPATCH[-1][:2] == (None, None)


@pytest.mark.parametrize("batch,n", [(1, 4), (1, 8), (5, 8), (9, 8), (3, 32)])
def test_default_dispatch_both_branches(tri, batch, n):
    """The default entry point (no `path`), at shapes that pick different rows (4, 8, 40 rows: split-V
    with 4, 1, 4 warps; 72, 96 rows: row-wise), gives the reference's answer."""
    steps, k = (n - 1, 1) if n <= 8 else (4, 4)
    tree = random_tree(batch, k, steps, n, 500, seed=batch * 7 + n)
    logits = target_logits(tree, 500, 0.8, seed=batch)
    path = tri.dispatch(batch * n, 500)[0]
    ref = _run_both(tri, logits, tree, steps)
    assert path in tri.PATHS and ref.accept_length.sum() > 0


@pytest.mark.parametrize("batch,k,steps,n,agree", [
    (3, 2, 5, 19, 0.5),    # NP = 32
    (2, 4, 5, 40, 1.0),    # NP = 64: six pointer-jumping rounds
    (2, 4, 5, 40, 0.5),
    (4, 8, 1, 9, 0.0),     # one level of 8 siblings
])
def test_parallel_walk_larger_trees(tri, batch, k, steps, n, agree, variant):
    tree = random_tree(batch, k, steps, n, 700, seed=n * 13 + k)
    logits = target_logits(tree, 700, agree, seed=steps + n)
    _run_both(tri, logits, tree, steps, block=256, **variant)


def _hand_tree():
    """Root 0 with children in sibling order 3 -> 1 -> 5 (not index order); 1 has children 6 -> 2;
    3 has child 4; 4 has child 7. Nodes 3 and 1 carry the same token (the first in sibling order
    must win), as do 6 and 2."""
    nxt = torch.tensor([[3, 6, -1, 4, 7, -1, -1, -1]])
    sib = torch.tensor([[-1, 5, -1, 1, -1, -1, 2, -1]])
    cand = torch.tensor([[9, 11, 12, 11, 13, 14, 12, 15]])
    ridx = torch.arange(8).view(1, 8)
    return cand, ridx, nxt, sib


def test_hand_tree_sibling_order_duplicates_and_depth_cap(tri, variant):
    cand, ridx, nxt, sib = _hand_tree()
    vocab = 40

    def logits_for(targets):
        x = torch.randn(8, vocab, generator=torch.Generator().manual_seed(len(targets)))
        for node, tok in targets.items():
            x[node, tok] = 20.0
        return x

    cases = [
        ({0: 11, 3: 13, 4: 15}, 4),   # 0 -> 3 (before 1 in sibling order) -> 4 -> 7
        ({0: 11, 3: 13, 4: 15}, 2),   # same targets, depth capped at S = 2
        ({0: 14, 5: 12}, 3),          # last sibling 5 accepted; 5 has no child
        ({0: 12, 1: 12}, 3),          # token 12 only below node 1: none accepted at depth 1
        ({0: 11, 3: 15}, 3),          # 3 accepted, its child 4 does not match
    ]
    for targets, steps in cases:
        logits = logits_for(targets)
        args = (logits, cand, ridx, nxt, sib, steps + 1)
        c_ref, c_tri = AcceptCounters.zeros(steps), AcceptCounters.zeros(steps)
        ref = verify_tree_reference(*args, c_ref)
        out = tri.verify_tree_triton(*args, c_tri, block=128, **variant)
        for f in FIELDS:
            assert torch.equal(getattr(ref, f), getattr(out, f)), (targets, steps, f, getattr(ref, f), getattr(out, f))
        pos = ref.accept_index[ref.accept_index >= 0].long()
        assert torch.equal(ref.predict[pos], out.predict[pos])
        for f in ("accept_length_hist", "depth_attempted", "depth_accepted"):
            assert torch.equal(getattr(c_ref, f), getattr(c_tri, f)), (targets, steps, f)
    # the reference itself on the first two cases (hand values)
    ref = verify_tree_reference(logits_for(cases[0][0]), cand, ridx, nxt, sib, 5)
    assert ref.accept_index.tolist() == [[0, 3, 4, 7, -1]] and ref.accept_length.tolist() == [3]
    ref = verify_tree_reference(logits_for(cases[1][0]), cand, ridx, nxt, sib, 3)
    assert ref.accept_index.tolist() == [[0, 3, 4]] and ref.accept_length.tolist() == [2]


def test_ties_neg_inf_all_and_none_accept_every_path(tri, variant):
    """Ties and -inf rows on every path; all-accept and none-accept chains."""
    vocab, steps = 600, 4
    tree = random_tree(3, 1, steps, steps + 1, vocab, seed=31)
    logits = torch.full((15, vocab), float("-inf"))
    logits[:, 7::5] = 0.5                       # argmax a many-way tie: lowest index 7
    ref = _run_both(tri, logits, tree, steps, block=128, nsplit=2, **variant)
    assert ref.target_predict.eq(7).all()
    ref = _run_both(tri, target_logits(tree, vocab, 1.0, seed=2), tree, steps, **variant)
    assert ref.accept_length.tolist() == [steps] * 3
    none = torch.randn(15, vocab)
    none[:, vocab - 1] = 99.0
    assert not (tree.draft_token[:, 1:] == vocab - 1).any()
    ref = _run_both(tri, none, tree, steps, **variant)
    assert ref.accept_length.tolist() == [0] * 3


@pytest.mark.parametrize("block,num_warps", [(128, 1), (256, 2), (1024, 4)])
def test_rowwise_tiles_ties_and_repeats(tri, block, num_warps):
    """Row-wise path: V neither a multiple of BLOCK nor above it, first-maximum ties that straddle
    tiles, -inf rows with one finite entry, +0.0 vs -0.0, three calls in a row (its tickets are
    persistent and must come back reset), and a differently shaped call in between."""
    vocab, steps = 1031, 3
    tree = random_tree(3, 2, steps, 7, vocab, seed=41)
    logits = target_logits(tree, vocab, 0.7, seed=5)
    logits[0, [3, 130, 1030]] = 80.0            # tie across tiles: lowest index 3
    logits[1] = float("-inf")
    logits[1, 1030] = -5.0                      # only the last column is finite
    logits[2] = 0.0
    logits[2, :500] = -0.0                      # all zeros of both signs: index 0
    for _ in range(3):
        ref = _run_both(tri, logits, tree, steps, path="rowwise", block=block, num_warps=num_warps)
        assert ref.target_predict[:3].tolist() == [3, 1030, 0]
        small = random_tree(2, 1, 2, 3, 50, seed=3)
        _run_both(tri, target_logits(small, 50, 1.0, seed=1), small, 2, path="rowwise", block=block)


def test_unknown_path_is_an_error(tri):
    tree = random_tree(1, 1, 2, 3, 40, seed=1)
    args = (torch.randn(3, 40), tree.draft_token, tree.retrive_index, tree.retrive_next_token,
            tree.retrive_next_sibling, 3)
    with pytest.raises(ValueError, match="path 'bogus'"):
        tri.verify_tree_triton(*args, path="bogus")


SPLIT_PATHS = ("fused-relaxed", "slots", "slots-prefetch", "rowwise-prefetch")


@pytest.mark.parametrize("path", [p if p == "fused-relaxed" else pytest.param(p, marks=pytest.mark.slow)
                                  for p in SPLIT_PATHS])  # ~6 s each interpreted
def test_split_paths_reset_across_shapes_and_calls(tri, path):
    """`_verify_split_kernel` leaves its tickets (and, relaxed, its keys) reset: calls in a row that
    change the split count, the batch and N, and the sign of the logits (so a stale key would win
    the max), each give the reference's answer; +0.0/-0.0 and -inf-only-but-one rows included."""
    vocab, steps = 1031, 3
    tree = random_tree(3, 2, steps, 7, vocab, seed=43)
    logits = target_logits(tree, vocab, 0.7, seed=6)
    logits[0, [5, 300, 1030]] = 70.0            # tie across splits: lowest index 5
    logits[1] = float("-inf")
    logits[1, 1030] = -5.0
    logits[2] = 0.0
    logits[2, 1:400] = -0.0                     # zeros of both signs: index 0
    small = random_tree(2, 1, 2, 3, 50, seed=4)
    for nsplit in (3, 1, 4, 2):
        ref = _run_both(tri, logits, tree, steps, path=path, block=128, nsplit=nsplit, num_warps=2)
        assert ref.target_predict[:3].tolist() == [5, 1030, 0]
        _run_both(tri, -logits, tree, steps, path=path, block=128, nsplit=nsplit)
        _run_both(tri, target_logits(small, 50, 1.0, seed=1), small, 2, path=path, block=128, nsplit=2)


@pytest.mark.parametrize("path", ("slots", "rowwise-prefetch", "fused-relaxed"))
def test_split_stages_decomposition(tri, path):
    """The benchmark's decomposition stages: stages=1 writes target_predict alone (exact), and
    stages=0 then 1 then the full walk leave the workspace as the full kernel needs it."""
    tree = random_tree(2, 3, 3, 8, 900, seed=12)
    logits = target_logits(tree, 900, 0.8, seed=4)
    args = (logits, tree.draft_token, tree.retrive_index, tree.retrive_next_token, tree.retrive_next_sibling, 4)
    if path == "fused-relaxed":  # its keys are reset by the last program, which stages=0 skips
        with pytest.raises(ValueError, match="stages=0"):
            tri.verify_tree_triton(*args, path=path, stages=0)
    else:
        tri.verify_tree_triton(*args, path=path, block=128, nsplit=3, stages=0)
    out = tri.verify_tree_triton(*args, path=path, block=128, nsplit=3, stages=1)
    assert torch.equal(out.target_predict, torch.argmax(logits, -1))
    _run_both(tri, logits, tree, 3, path=path, block=128, nsplit=3)
