"""CUDA graphs of the built-in engine's greedy decode steps, one per batch-size bucket (as SGLang).

A step body here is one whole decoder iteration in fixed shapes, with no host read: a plain target
step, or a speculative step (draft loop, `organize`, tree build on the device, tree verify, KV
compaction of the accepted path, draft extend, and the next first-step candidates written back
to the per-slot draft state). Every forward reads the KV cache up to its full capacity under a
mask, so the shapes depend only on the bucket. A batch of B requests is padded to the smallest
bucket >= B; padded rows run on KV slots no live request uses and their results are dropped.

Inputs are one [3, bucket] int64 tensor (seq_lens, last tokens, KV slots), copied from pinned
memory; the output is one tensor read back in one copy: the plain step's tokens, or per request
(accept length, S+1 emitted tokens). Two variants per bucket: "dense" (the batch holds slots
0..B-1 and slots B..bucket-1 are free, so cache reads are views) and "gather" (any slots; padded
rows go to the scratch slot past the real ones). `SpecDecoder` picks the graph when a greedy
batch fits (see `fits`), else runs its eager step. Without capture (CPU tests) the same bodies run
eagerly, which is how CI checks them.

Prefill (one request, greedy) has graphs too, one per prompt-length bucket (`PREFILL_BUCKETS`,
as SGLang's piecewise graphs pad the token count): the prompt is padded at its end, causal masking
keeps the real positions blind to the padding, the padded positions' KV entries lie past the
request's seq_len (masked until a decode step overwrites them), and the first token, the draft
prefill and the draft's first candidates are read at position n-1 on the device. Without the graph
a speculative prefill waits for the target's token before it can launch the draft (a sync in the
middle of ~2x the launches of a plain prefill).

Not here: sampling (temperature > 0 runs eagerly), scheduling.
"""

from __future__ import annotations

import os
import time

import torch

from specwatch_kernels import ops
from specwatch_kernels.select_tree import DraftTree
from specwatch.engine.model import KVView, attention_mask

BUCKETS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256)  # SGLang's small-bs list
PREFILL_BUCKETS = (16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)  # prompt tokens


def plain_step_body(dec, inp: torch.Tensor, rng) -> torch.Tensor:
    """inp [3, Bp]: seq_lens, last tokens, slots. Returns the greedy next token [Bp]."""
    seq_lens, tok, slots = inp[0], inp[1], inp[2]
    cap = dec.kv_capacity
    one = torch.ones(1, 1, 1, dtype=torch.bool, device=inp.device)
    kv = KVView(dec._tk, dec._tv, slots, seq_lens[:, None], cap, attention_mask(seq_lens, cap, one), rng)
    logits, _ = dec.target(tok[:, None], seq_lens[:, None], kv)
    return torch.argmax(logits[:, 0], dim=-1)


def spec_step_body(dec, inp: torch.Tensor, rng) -> torch.Tensor:
    """inp [3, Bp]: seq_lens, last tokens (tree roots), slots. Returns [Bp, 1 + S+1]: accepted
    drafts, then the emitted tokens (accepted drafts + bonus; entries past it are stale)."""
    seq_lens, verified, slots = inp[0], inp[1], inp[2]
    K, S, N = dec.topk, dec.num_steps, dec.num_draft_tokens
    B, dev, cap = seq_lens.shape[0], inp.device, dec.kv_capacity
    chain = K == 1 and N == S + 1
    # rel[b, j] = cache position j relative to the request's first new position
    rel = torch.arange(cap, device=dev)[None, :] - seq_lens[:, None]
    # prefix + causal over the S+1 new positions: attention_mask(seq_lens, cap, tril), in 1 op
    causal = (rel[:, None, :] <= torch.arange(S + 1, device=dev)[None, :, None])[:, None]
    if chain:
        tree = _chain_tree(dec, verified, seq_lens, slots, rng, rel)
        verify_mask = causal  # the chain's tree mask is the causal one
    else:
        parent_list, top_idx, draft_tokens = dec._draft_tree(
            dec._st_p[slots], dec._st_i[slots], dec._st_h[slots], seq_lens, cap, slots, rng, static=True)
        tree = ops.build_tree_device(verified, parent_list, top_idx, draft_tokens, seq_lens, K, S, N)
        verify_mask = attention_mask(seq_lens, cap, tree.tree_mask)
    # Verify: node n at cache position seq_len + n, RoPE position seq_len + depth.
    kv = KVView(dec._tk, dec._tv, slots, seq_lens[:, None] + torch.arange(N, device=dev), cap, verify_mask, rng)
    logits, aux = dec.target(tree.draft_token, tree.positions, kv, capture=dec.capture)
    res = ops.verify_tree(logits.view(B * N, -1), tree.draft_token, tree.retrive_index,
                          tree.retrive_next_token, tree.retrive_next_sibling, S + 1)
    acc_index, acc_len = res.accept_index.long(), res.accept_length.long()
    valid = acc_index >= 0
    node = torch.where(valid, acc_index - torch.arange(B, device=dev)[:, None] * N, 0)  # [B, S+1]
    # predict at accepted node j = the token emitted after it (next accepted draft, or the bonus)
    toks = res.predict.long()[acc_index.clamp(min=0)]
    steps = torch.arange(S + 1, device=dev)
    dst = seq_lens[:, None] + steps
    src = torch.where(valid, seq_lens[:, None] + node, dst)
    slot_i = slots[:, None].expand(B, S + 1)
    for c in (dec._tk, dec._tv):  # accepted path -> consecutive positions (right side is a copy)
        c[:, slot_i, :, dst] = c[:, slot_i, :, src]
    # Draft extend over the emitted tokens with the verify pass's aux rows of the accepted nodes.
    ext_aux = aux.gather(1, node[:, :, None].expand(B, S + 1, aux.shape[2]))
    kvd = KVView(dec._dk, dec._dv, slots, dst, cap, causal, rng)
    dlogits, h = dec.draft(dec.target.embed_tokens(toks), dec._aux(ext_aux), dst, kvd)
    ar = torch.arange(B, device=dev)
    p, idx = ops.draft_topk(dlogits[ar, acc_len], K, dec.hot)
    dec._st_p[slots], dec._st_i[slots], dec._st_h[slots] = p, idx, h[ar, acc_len]
    return torch.cat([acc_len[:, None], toks], dim=1)


def prefill_body(dec, inp: torch.Tensor, rng) -> torch.Tensor:
    """inp [3, L]: the prompt padded to L, the draft's input (prompt shifted by one, padded), and
    (n, slot, 0, ...). Fills the slot's target (and draft) cache for positions [0, L), sets the
    draft state from position n-1; returns the greedy first token [1]."""
    L, dev = inp.shape[1], inp.device
    ids, shifted, last, slot = inp[0:1], inp[1], inp[2, 0:1] - 1, inp[2, 1:2]
    pos = torch.arange(L, device=dev)[None]
    mask = attention_mask(torch.zeros(1, dtype=torch.long, device=dev), L,
                          torch.ones(L, L, dtype=torch.bool, device=dev).tril()[None])
    kv = KVView(dec._tk, dec._tv, slot, pos, L, mask, None)
    logits, aux = dec.target(ids, pos, kv, capture=dec.capture if dec.draft is not None else None)
    tok = torch.argmax(logits[0].index_select(0, last), dim=-1)  # [1]
    if dec.draft is None:
        return tok
    # Draft position p consumes (token p+1, aux p): the shifted prompt with the first token at n-1.
    toks = shifted.scatter(0, last, tok)[None]
    kvd = KVView(dec._dk, dec._dv, slot, pos, L, mask, None)
    dlogits, h = dec.draft(dec.target.embed_tokens(toks), dec._aux(aux), pos, kvd)
    p, idx = ops.draft_topk(dlogits[0].index_select(0, last), dec.topk, dec.hot)
    dec._st_p[slot], dec._st_i[slot], dec._st_h[slot] = p, idx, h[0].index_select(0, last)
    return tok


def _chain_tree(dec, verified, seq_lens, slots, rng, rel) -> DraftTree:
    """The draft loop + tree of a chain (topk 1, N = S+1) without the generic selection: with one
    lane per step, select_top_k_tokens only forwards the token and hidden, `organize` keeps every
    node in step order (N-1 = S: scores cannot reorder them) and the tree is the chain 0-1-..-S.
    Same draft forwards, masks and top-k as `_draft_tree`, so the same tokens bit for bit; fewer
    kernels (the per-step overhead is what a launch-bound speculative step pays)."""
    S, B, dev, cap = dec.num_steps, seq_lens.shape[0], seq_lens.device, dec.kv_capacity
    tok, hidden = dec._st_i[slots], dec._st_h[slots][:, None]  # [B, 1], [B, 1, d]
    tokens = [tok]
    for i in range(S - 1):  # step i: draft position seq_len + i, its KV at seq_len + i
        # prefix + the i+1 draft positions so far (attention_mask with an all-true local block)
        kv = KVView(dec._dk, dec._dv, slots, (seq_lens + i)[:, None], cap, (rel <= i)[:, None, None, :], rng)
        logits, hidden = dec.draft(dec.target.embed_tokens(tok), hidden, (seq_lens + i)[:, None], kv)
        tok = ops.draft_topk(logits[:, 0], 1, dec.hot)[1]
        tokens.append(tok)
    n = torch.arange(S + 1, device=dev)
    nxt = torch.where(n < S, n + 1, -1).expand(B, S + 1)
    return DraftTree(
        tree_mask=(n[:, None] >= n[None, :]).expand(B, S + 1, S + 1),
        positions=seq_lens[:, None] + n, retrive_index=torch.arange(B * (S + 1), device=dev).view(B, S + 1),
        retrive_next_token=nxt, retrive_next_sibling=torch.full_like(nxt, -1),
        draft_token=torch.cat([verified[:, None]] + tokens, dim=1), depth=n.expand(B, S + 1))


class _Entry:
    def __init__(self, bs: int, dev: torch.device, pinned: bool):
        self.inp = torch.zeros(3, bs, dtype=torch.long, device=dev)
        self.host_in = torch.zeros(3, bs, dtype=torch.long, pin_memory=pinned)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.out: torch.Tensor | None = None
        self.host_out: torch.Tensor | None = None


class GraphRunner:
    """Per-bucket CUDA graphs of a decoder's greedy step (or, capture=False, the bodies run eagerly)."""

    def __init__(self, dec, max_bs: int, capture: bool):
        self.dec = dec
        self.capture = capture
        self.buckets = sorted({b for b in BUCKETS if b < max_bs} | {max_bs})
        self.body = plain_step_body if dec.draft is None else spec_step_body
        cap = min(dec.context_len, dec.kv_capacity)
        self.prefill_buckets = sorted({b for b in PREFILL_BUCKETS if b < cap} | {cap})
        self._entries: dict[tuple[int, bool], _Entry] = {}
        self._pool = None

    def bucket(self, batch: int) -> int | None:
        return next((b for b in self.buckets if b >= batch), None)

    def _capturable(self) -> bool:
        """Kernels that can be captured: with SPECWATCH_KERNELS=torch the references read back to
        the host, so speculative steps (and prefills) run eagerly."""
        return not (self.capture and self.dec.draft is not None and
                    os.environ.get("SPECWATCH_KERNELS", "").strip().lower() == "torch")

    def fits(self, reqs, seqs) -> bool:
        """A greedy batch of at most the largest bucket, and kernels that can be captured."""
        return self._capturable() and len(seqs) <= self.buckets[-1] and all(r.temperature <= 0 for r in reqs)

    def fits_prefill(self, req) -> bool:
        """A greedy request whose prompt fits the largest prefill bucket."""
        return self._capturable() and req.temperature <= 0 and len(req.input_ids) <= self.prefill_buckets[-1]

    def _dense(self, slots: list[int], bs: int) -> bool:
        if slots != list(range(len(slots))):
            return False
        return all(not len(slots) <= s.slot < bs for s in self.dec._seqs.values())

    @torch.inference_mode()
    def capture_all(self) -> int:
        """Capture both variants of every bucket now (call with no request running), so that no
        step pays a capture later. Returns the number of graphs."""
        for bs in self.buckets:
            for dense in (True, False):
                self._entry(bs, dense)
        for L in self.prefill_buckets:
            self._entry(L, "prefill")
        return len(self._entries)

    def _wait(self) -> None:
        torch.cuda.current_stream(self.dec.device).synchronize()

    def _entry(self, bs: int, dense: bool | str) -> _Entry:
        """The graph of decode bucket `bs` (dense or gather variant), or with dense="prefill" the
        prefill graph of `bs` prompt tokens."""
        key = (bs, dense)
        if key in self._entries:
            return self._entries[key]
        dec = self.dec
        e = _Entry(bs, dec.device, pinned=self.capture)
        prefill = dense == "prefill"
        body = prefill_body if prefill else self.body
        rng = (0, bs) if dense is True else None
        if self.capture:
            # Warm up (Triton compiles, cuBLAS/SDPA pick kernels, workspaces get allocated) on the
            # scratch slot only, so live requests' caches are never touched; then capture.
            if prefill:
                e.inp[2, :2] = torch.tensor([1, dec.num_slots])
            else:
                e.inp[2] = dec.num_slots
            side = torch.cuda.Stream(dec.device)
            side.wait_stream(torch.cuda.current_stream(dec.device))
            with torch.cuda.stream(side):
                for _ in range(2):
                    body(dec, e.inp, None)
            torch.cuda.current_stream(dec.device).wait_stream(side)
            e.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(e.graph, pool=self._pool):
                e.out = body(dec, e.inp, rng)
            if self._pool is None:
                self._pool = e.graph.pool()
            e.host_out = torch.empty(e.out.shape, dtype=e.out.dtype, pin_memory=True)
        e.rng = rng
        self._entries[key] = e
        return e

    def run(self, slots: list[int], seq_lens: list[int], last: list[int]) -> list:
        """One step for B requests; returns the body's output rows for the B real requests."""
        B = len(slots)
        bs = self.bucket(B)
        dense = self._dense(slots, bs)
        e = self._entry(bs, dense)
        pad = bs - B
        pad_slots = list(range(B, bs)) if dense else [self.dec.num_slots] * pad
        e.host_in.copy_(torch.tensor([seq_lens + [0] * pad, last + [0] * pad, slots + pad_slots]))
        return self._launch(e, self.body)[:B].tolist()

    def _launch(self, e: _Entry, body) -> torch.Tensor:
        """Run entry `e` on its host_in: a graph replay (one host->device copy in, one
        device->host copy out, the one wait), or without capture its body eagerly (CPU tests)."""
        if e.graph is None:
            e.inp.copy_(e.host_in)
            return body(self.dec, e.inp, e.rng)
        e.inp.copy_(e.host_in, non_blocking=True)
        e.graph.replay()
        e.host_out.copy_(e.out, non_blocking=True)
        self._wait()
        return e.host_out

    def prefill_bucket(self, n: int) -> int | None:
        return next((b for b in self.prefill_buckets if b >= n), None)

    def prefill(self, slot: int, input_ids: list[int]) -> int:
        """Greedy prefill of one request's prompt on `slot` (len <= the largest prefill bucket);
        returns its first token. Fills the caches and, with a draft, the slot's draft state."""
        n = len(input_ids)
        L = self.prefill_bucket(n)
        e = self._entry(L, "prefill")
        pad = [0] * (L - n)
        e.host_in.copy_(torch.tensor([input_ids + pad, input_ids[1:] + [0] + pad, [n, slot] + [0] * (L - 2)]))
        return int(self._launch(e, prefill_body)[0])

    def replay_seconds(self, bs: int, iters: int = 50) -> float:
        """Mean wall time of one bare replay of the dense graph of bucket `bs` (no request may be
        running: it writes the caches of slots 0..bs-1). For benchmarks."""
        e = self._entry(bs, True)
        e.graph.replay()
        torch.cuda.synchronize(self.dec.device)
        t0 = time.perf_counter()
        for _ in range(iters):
            e.graph.replay()
        torch.cuda.synchronize(self.dec.device)
        return (time.perf_counter() - t0) / iters
