"""Speculative decoder core of the built-in engine: EAGLE-3 drafting, tree verification, batching.

`SpecDecoder` keeps a KV cache slot per running request and advances all of them together:
`prefill` admits new requests (target + draft prefill, first token), `decode_step` runs one
draft+verify iteration (or one plain target step without a draft) over whichever requests the
caller passes, so requests join and leave between steps (continuous batching). The algorithm
follows SGLang's EAGLE worker: S draft steps of top-k + candidate selection, `organize` to the
N-1 best nodes, a tree (chain when topk = 1) verified in one target forward under a prefix+tree
mask, greedy or sampling acceptance, accepted KV rows compacted, and a draft extend over the
accepted tokens with the verify pass's aux states. Top-k, candidate selection, tree building and
greedy verification go through `specwatch_kernels.ops` (torch reference on CPU, Triton on CUDA).

Devices: `device="cpu"` or `"cuda"`. On CUDA the weights, KV caches, masks, index tensors and each
request's draft state (first-step top-k and hidden, in per-slot buffers) live on the GPU; the tree
is built on the device (`ops.build_tree_device`) and the host reads back one tensor per step: the
argmax of a plain step, or the accept lengths and emitted tokens of a speculative step. Greedy
decode steps whose batch fits a bucket replay a CUDA graph of the whole step (graph_step.py:
draft loop, tree build, verify, KV compaction, draft extend); other steps run eagerly. Small
host->device inputs go through pinned memory without a sync. Sampling (temperature > 0) draws on
the host from the request's CPU generator, so the draws do not depend on the device's RNG.

Not a server: no HTTP, stop strings, scheduling policy or logging (see server.py / scheduler.py).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path

import torch

from specwatch_kernels import ops
from specwatch.engine.graph_step import GraphRunner
from specwatch.engine.model import KVView, attention_mask, capture_layers, load_draft, load_target, models_dir  # noqa: F401

DEFAULT_NUM_SLOTS = 32


@dataclass
class Request:
    rid: str
    input_ids: list[int]
    max_new_tokens: int
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int | None = None
    output_ids: list[int] = field(default_factory=list)  # appended by prefill/decode_step
    finished: bool = False  # set when max_new_tokens is reached
    spec_verify_ct: int = 0  # verify steps this request took part in
    spec_accepted_drafts: int = 0  # accepted draft tokens (bonus excluded)
    spec_accept_histogram: list[int] = field(default_factory=list)  # verify steps by accepted drafts


@dataclass
class StepStats:
    """One decode iteration (draft + verify, or one plain step) over the running batch."""

    batch_size: int
    num_accepted_drafts: int  # sum over requests, bonus excluded (SGLang's num_accepted)
    num_generated_tokens: int  # tokens appended this step over all requests
    num_proposed_drafts: int  # batch_size * (num_draft_tokens - 1); 0 without speculation
    cuda_graph: bool = False  # the step was a CUDA-graph replay (SGLang's "cuda graph: True")


@dataclass
class PrefillStats:
    num_new_seqs: int
    num_new_tokens: int
    num_cached_tokens: int


@dataclass
class _Seq:
    """Decoder state of one running request."""

    slot: int
    seq_len: int  # tokens with target KV cached = all tokens except the last emitted one
    last_token: int  # last emitted token: root of the next draft tree
    gen: torch.Generator
    topk_p: torch.Tensor | None = None  # [K] draft's first-step candidates (from prefill/extend)
    topk_index: torch.Tensor | None = None  # [K] target ids
    hidden: torch.Tensor | None = None  # [d] draft pre-norm state at the last position


def resolve_model_path(name_or_path: str | Path) -> Path:
    """`builtin:<name>` or a bare built-in name -> models_dir()/<name>; anything else is a path."""
    s = str(name_or_path)
    name = s.removeprefix("builtin:")
    if s.startswith("builtin:") or (not Path(s).exists() and (models_dir() / name).is_dir()):
        return models_dir() / name
    return Path(s)


_mask = attention_mask


def sample_tree(probs: torch.Tensor, next_token: list[int], next_sibling: list[int], tokens: list[int],
                gen: torch.Generator) -> tuple[list[int], list[int]]:
    """Speculative sampling down one draft tree; returns (accepted path nodes, emitted tokens).

    probs [N, V]: the target's distribution after each node (softmax(logits/T), top-p applied);
    next_token / next_sibling: the tree's first-child / next-sibling lists (-1 = none); tokens:
    node tokens (node 0 = root). Drafts are deterministic top-k picks, i.e. one-hot proposals, so
    the rule is: at the current node with residual r (initially its probs), try the children in
    sibling order, accepting child x with probability r(x)/sum(r); on rejection set r(x) = 0 and
    try the next; if none is accepted (or there are no children), sample the last token from
    r/sum(r). Each emitted token is then distributed exactly as the target's probs at its
    position (SGLang's target-only tree sampling rule; Leviathan et al. with one-hot drafts).
    """
    node, path, out = 0, [0], []
    while True:
        r = probs[node].clone()
        child = next_token[node]
        accepted = False
        while child != -1:
            x = tokens[child]
            if float(torch.rand((), generator=gen)) * float(r.sum()) < float(r[x]):
                path.append(child)
                out.append(x)
                node, accepted = child, True
                break
            r[x] = 0.0
            child = next_sibling[child]
        if not accepted:
            out.append(int(torch.multinomial(r / r.sum(), 1, generator=gen)))
            return path, out


def _resolve_device(device) -> torch.device:
    """"cpu" | "cuda" | "cuda:N" -> torch.device; raises ValueError naming what to do otherwise."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device={device!r}: not a torch device ({e}); use 'cpu' or 'cuda'") from None
    if dev.type == "cpu":
        return dev
    if dev.type != "cuda":
        raise ValueError(f"device={device!r}: the built-in engine runs on 'cpu' or 'cuda'")
    if not torch.cuda.is_available():
        raise ValueError(f"device={device!r}: torch {torch.__version__} sees no CUDA GPU; "
                         f"use device='cpu' (--device cpu) or a CUDA build of torch on a GPU machine")
    return torch.device("cuda", torch.cuda.current_device() if dev.index is None else dev.index)


class SpecDecoder:
    """EAGLE-3 speculative decoder (or a plain decoder when `draft_path` is None).

    num_steps (S), topk (K), num_draft_tokens (N) follow SGLang's speculative_* flags; defaults
    S=3, K=1, N=S+1 (a chain). aux_layer_ids overrides the draft config's
    eagle_aux_hidden_state_layer_ids (what a server would be misconfigured with).
    max_total_tokens sets the KV capacity (slots = max_total_tokens // max_position_embeddings).
    device: "cpu" or "cuda" ("cuda:N"); specwatch_kernels.ops then runs the torch references or Triton.
    cuda_graph: replay CUDA graphs of greedy decode steps (default: on CUDA); cuda_graph_max_bs:
    the largest bucket (default: the number of KV slots). static_steps (tests): run the graph
    bodies eagerly, on any device, instead of the per-step eager code.
    """

    def __init__(self, target_path, draft_path=None, *, num_steps=None, topk=None, num_draft_tokens=None,
                 device="cpu", max_total_tokens=None, seed=0, aux_layer_ids=None, cuda_graph=None,
                 cuda_graph_max_bs=None, static_steps=False):
        self.device = _resolve_device(device)
        self._on_cuda = self.device.type == "cuda"  # host<->device copies go through pinned memory
        self.target = load_target(resolve_model_path(target_path)).to(self.device)
        tcfg = self.target.cfg
        self.context_len = tcfg.max_position_embeddings
        self.draft = None
        self.num_steps = self.topk = self.num_draft_tokens = None
        if draft_path is not None:
            self.draft = load_draft(resolve_model_path(draft_path), self.target).to(self.device)
            self.num_steps = 3 if num_steps is None else int(num_steps)
            self.topk = 1 if topk is None else int(topk)
            max_n = self.topk + (self.num_steps - 1) * self.topk ** 2 + 1
            self.num_draft_tokens = (self.num_steps + 1 if self.topk == 1 else min(max_n, 2 * self.num_steps + 2)) \
                if num_draft_tokens is None else int(num_draft_tokens)
            if self.num_steps < 1 or self.topk < 1 or self.topk > self.draft.cfg.draft_vocab_size:
                raise ValueError(f"speculative_num_steps={self.num_steps}, speculative_eagle_topk={self.topk}: "
                                 f"need steps >= 1 and 1 <= topk <= {self.draft.cfg.draft_vocab_size}")
            if not 2 <= self.num_draft_tokens <= max_n:
                raise ValueError(
                    f"speculative_num_draft_tokens={self.num_draft_tokens} must be in [2, {max_n}] "
                    f"(= topk + (steps-1)*topk^2 + 1 with steps={self.num_steps}, topk={self.topk}); "
                    f"lower it or raise --speculative-num-steps / --speculative-eagle-topk")
            ids = self.draft.cfg.aux_layer_ids if aux_layer_ids is None else tuple(aux_layer_ids)
            self.aux_layer_ids = ids
            self.capture = capture_layers(ids, tcfg.num_hidden_layers, f"aux_layer_ids {list(ids)}")
            if len(self.capture) != 3:
                raise ValueError(f"aux_layer_ids {list(ids)}: the EAGLE-3 draft needs exactly 3 ids")
            self.hot = self.draft.hot_token_id
        self.zero_aux = False  # debug: feed the draft zeros instead of aux states (no-information floor)
        self.skip_zero_step_extend = False  # steps 0 leaves the draft cold (see _zero_step)
        self.seed = seed
        slots = DEFAULT_NUM_SLOTS if max_total_tokens is None else max(1, int(max_total_tokens) // self.context_len)
        self.max_total_num_tokens = slots * self.context_len
        # Headroom past the context for tree nodes and padded extend rows (stale, never read).
        cap = self.context_len + (self.num_draft_tokens or 1) + (self.num_steps or 1) * (self.topk or 1) + 1
        hd, H = tcfg.head_dim, tcfg.num_attention_heads
        self.kv_capacity = cap
        self.num_slots = slots
        use_graph = self._on_cuda if cuda_graph is None else bool(cuda_graph) and self._on_cuda
        # Static steps pad batches; their padded rows may use one scratch slot past the real ones.
        slots += 1 if (use_graph or static_steps) else 0
        self._tk = torch.zeros(tcfg.num_hidden_layers, slots, H, cap, hd, device=self.device)
        self._tv = torch.zeros_like(self._tk)
        # Draft state per KV slot on the device (CUDA, static steps); on CPU it stays on _Seq.
        self._slot_state = self.draft is not None and (self._on_cuda or static_steps)
        if self.draft is not None:
            dcfg = self.draft.cfg
            self._dk = torch.zeros(1, slots, dcfg.num_attention_heads, cap, dcfg.head_dim, device=self.device)
            self._dv = torch.zeros_like(self._dk)
            if self._slot_state:
                self._st_p = torch.zeros(slots, self.topk, device=self.device)
                self._st_i = torch.zeros(slots, self.topk, dtype=torch.long, device=self.device)
                self._st_h = torch.zeros(slots, dcfg.hidden_size, device=self.device)
        self._seqs: dict[str, _Seq] = {}
        self._free = list(range(self.num_slots))
        max_bs = self.num_slots if cuda_graph_max_bs is None else max(1, min(self.num_slots, int(cuda_graph_max_bs)))
        self.graphs = GraphRunner(self, max_bs, capture=use_graph) if (use_graph or static_steps) else None

    # ------------------------------------------------------------------ bookkeeping

    def tokens_in_use(self) -> int:
        """Tokens held in the KV cache by running requests."""
        return sum(s.seq_len + 1 for s in self._seqs.values())

    def can_admit(self, req: Request) -> bool:
        """True if a KV slot is free for `req` (prefill raises otherwise)."""
        return bool(self._free) and req.rid not in self._seqs

    def release(self, req: Request) -> None:
        """Free `req`'s KV slot (finished, aborted or stopped by the server). Idempotent."""
        seq = self._seqs.pop(req.rid, None)
        if seq is None:
            return
        # Keep the used slots dense (0..n-1) so the batch's cache reads are views, not copies:
        # move the highest used slot into the freed one.
        used = [s for s in self._seqs.values() if s.slot > seq.slot]
        if used:
            top = max(used, key=lambda s: s.slot)
            self._move_slot(top.slot, seq.slot)
            self._free.append(top.slot)
            top.slot = seq.slot
        else:
            self._free.append(seq.slot)
        self._free.sort()

    def capture_cuda_graphs(self) -> int:
        """Capture the decode graphs of every batch-size bucket now, as SGLang does at startup
        (call before any request runs). Returns how many graphs exist; 0 without CUDA graphs."""
        if self.graphs is None or not self.graphs.capture:
            return 0
        if self._seqs:
            raise RuntimeError("capture_cuda_graphs: call it before any request is prefilled")
        return self.graphs.capture_all()

    def flush_cache(self) -> None:
        """Drop every request's KV state (call only when nothing is running)."""
        self._seqs.clear()
        self._free = list(range(self.num_slots))

    def _move_slot(self, src: int, dst: int) -> None:
        caches = [self._tk, self._tv] + ([self._dk, self._dv] if self.draft is not None else [])
        if self._slot_state:
            caches += [self._st_p, self._st_i, self._st_h]
        for c in caches:
            if c.dim() == 2:  # per-slot draft state
                c[dst] = c[src]
            else:
                c[:, dst] = c[:, src]

    def _view(self, k, v, slots: list[int], slots_t, seq_lens, write_rel, kv_len, local) -> KVView:
        """KVView for the rows of `slots` (host list; `slots_t` the same on the device)."""
        rng = (slots[0], slots[0] + len(slots)) if slots == list(range(slots[0], slots[0] + len(slots))) else None
        return KVView(k, v, slots_t, seq_lens[:, None] + write_rel, kv_len, _mask(seq_lens, kv_len, local), rng)

    # ------------------------------------------------------------------ host <-> device

    def _dev(self, data, dtype=torch.long) -> torch.Tensor:
        """Host data (nested lists) -> a tensor on the decoder's device. On CUDA via pinned memory
        and a non-blocking copy: torch.tensor(..., device="cuda") would wait for the queued GPU work."""
        if not self._on_cuda:
            return torch.tensor(data, dtype=dtype)
        return torch.tensor(data, dtype=dtype, pin_memory=True).to(self.device, non_blocking=True)

    def _to_host(self, *ts: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Integer (or fp32) device tensors -> host tensors in ONE copy (one sync) on CUDA; as-is
        on CPU. fp32 travels bit for bit as its int32 pattern."""
        if not self._on_cuda:
            return ts
        flat = torch.cat([(t.contiguous().view(torch.int32) if t.dtype == torch.float32 else t).reshape(-1).long()
                          for t in ts]).cpu()
        out, at = [], 0
        for t in ts:
            part = flat[at: at + t.numel()].view(t.shape)
            out.append(part.to(torch.int32).view(torch.float32) if t.dtype == torch.float32 else part.to(t.dtype))
            at += t.numel()
        return tuple(out)

    # ------------------------------------------------------------------ sampling helpers

    @staticmethod
    def _probs(logits: torch.Tensor, req: Request) -> torch.Tensor:
        """Target distribution for a sampling request: softmax(logits / T), top-p truncated."""
        p = torch.softmax(logits.float() / req.temperature, dim=-1)
        if req.top_p < 1.0:
            sp, si = torch.sort(p, descending=True, stable=True)
            keep = (sp.cumsum(-1) - sp) < req.top_p  # smallest prefix reaching top_p
            p = torch.zeros_like(p).scatter_(-1, si, sp * keep)
            p = p / p.sum()
        return p

    def _pick(self, logits: torch.Tensor, req: Request, seq_gen: torch.Generator) -> int:
        if req.temperature <= 0:
            return int(torch.argmax(logits))
        return int(torch.multinomial(self._probs(logits, req).cpu(), 1, generator=seq_gen))

    # ------------------------------------------------------------------ prefill

    @torch.inference_mode()
    def prefill(self, reqs: list[Request]) -> PrefillStats:
        """Admit `reqs`: fill their KV caches and append their first token."""
        for req in reqs:
            self._prefill_one(req)
        return PrefillStats(len(reqs), sum(len(r.input_ids) for r in reqs), 0)

    def _prefill_one(self, req: Request) -> None:
        n = len(req.input_ids)
        if n == 0:
            raise ValueError(f"request {req.rid}: empty input_ids")
        if n + req.max_new_tokens > self.context_len:
            raise ValueError(f"request {req.rid}: {n} input + {req.max_new_tokens} new tokens exceed the "
                             f"context length {self.context_len}; shorten the prompt or max_new_tokens")
        if req.rid in self._seqs:
            raise ValueError(f"request {req.rid}: already running")
        if not self._free:
            raise RuntimeError(f"request {req.rid}: no free KV slot ({len(self._seqs)} running); "
                               f"check can_admit() first or raise max_total_tokens")
        slot = self._free.pop(0)
        seed = req.seed if req.seed is not None else (self.seed * 1_000_003 + zlib.crc32(req.rid.encode()))
        seq = _Seq(slot=slot, seq_len=n, last_token=-1, gen=torch.Generator().manual_seed(seed))
        self._seqs[req.rid] = seq
        if self.num_steps is not None and not req.spec_accept_histogram:
            req.spec_accept_histogram = [0] * (self.num_steps + 1)
        if self.graphs is not None and self.graphs.fits_prefill(req):
            seq.last_token = self.graphs.prefill(slot, list(req.input_ids))
        else:
            seq.last_token = self._prefill_eager(req, seq)
        if req.max_new_tokens > 0:
            req.output_ids.append(seq.last_token)
        req.finished = len(req.output_ids) >= req.max_new_tokens

    def _prefill_eager(self, req: Request, seq: _Seq) -> int:
        """Fill seq's slot for req's prompt (and the draft state); returns the first token."""
        n, dev, slot = len(req.input_ids), self.device, seq.slot
        ids = self._dev([req.input_ids])
        slot_t = self._dev([slot])
        pos = torch.arange(n, device=dev)[None]
        causal = torch.ones(n, n, dtype=torch.bool, device=dev).tril()[None]
        zero = torch.zeros(1, dtype=torch.long, device=dev)
        kv = self._view(self._tk, self._tv, [slot], slot_t, zero, pos[0], n, causal)
        logits, aux = self.target(ids, pos, kv, capture=self.capture if self.draft is not None else None)
        first = self._pick(logits[0, -1], req, seq.gen)
        if self.draft is not None:
            # Draft position p consumes (token p+1, aux p): the prompt shifted by one + the first token.
            toks = self._dev([req.input_ids[1:] + [first]])
            kvd = self._view(self._dk, self._dv, [slot], slot_t, zero, pos[0], n, causal)
            dlogits, h = self.draft(self.target.embed_tokens(toks), self._aux(aux), pos, kvd)
            p, idx = ops.draft_topk(dlogits[0, -1:], self.topk, self.hot)
            self._set_state([seq], slot_t, p, idx, h[:, -1])
        return first

    def _set_state(self, seqs, slots_t, p, idx, hidden) -> None:
        """Store the draft's next first-step candidates [B, K] and hidden [B, d] of `seqs`."""
        if self._slot_state:
            self._st_p[slots_t], self._st_i[slots_t], self._st_h[slots_t] = p, idx, hidden
            return
        for b, seq in enumerate(seqs):
            seq.topk_p, seq.topk_index, seq.hidden = p[b], idx[b], hidden[b]

    def _get_state(self, seqs, slots_t):
        if self._slot_state:
            return self._st_p[slots_t], self._st_i[slots_t], self._st_h[slots_t]
        return (torch.stack([s.topk_p for s in seqs]), torch.stack([s.topk_index for s in seqs]),
                torch.stack([s.hidden for s in seqs]))

    def _aux(self, aux: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(aux) if self.zero_aux else aux

    # ------------------------------------------------------------------ decode

    @torch.inference_mode()
    def decode_step(self, reqs: list[Request], num_steps: int | None = None) -> StepStats:
        """One iteration over `reqs` (running, unfinished): draft + verify, or one plain step.

        num_steps: this step's speculation depth (SGLang's adaptive mode, adaptive.py), 0..S of
        the decoder, chains only (topk 1, draft tokens = steps + 1); 0 = no drafting: a one-node
        verify, then the draft extend (skipped with `skip_zero_step_extend`). None = S."""
        unknown = [r.rid for r in reqs if r.rid not in self._seqs and not r.finished]
        if unknown:
            raise KeyError(f"decode_step: requests {unknown} were never prefilled or were released")
        S = self.num_steps if num_steps is None or self.draft is None else int(num_steps)
        if S != self.num_steps and not (0 <= S <= self.num_steps and self.topk == 1):
            raise ValueError(f"decode_step: num_steps={S}: a step runs 0..{self.num_steps} draft "
                             f"steps of a chain (topk 1, this decoder: topk {self.topk}); build "
                             f"the decoder with the largest steps of the schedule")
        reqs = sorted((r for r in reqs if not r.finished), key=lambda r: self._seqs[r.rid].slot)
        if not reqs:
            return StepStats(0, 0, 0, 0)
        seqs = [self._seqs[r.rid] for r in reqs]
        if S == self.num_steps and self.graphs is not None and self.graphs.fits(reqs, seqs):
            return self._graph_step(reqs, seqs)  # graphs are captured at the decoder's own S
        if self.draft is None:
            return self._plain_step(reqs, seqs)
        if S == 0:
            return self._zero_step(reqs, seqs)
        return self._spec_step(reqs, seqs, S, S + 1 if S != self.num_steps else self.num_draft_tokens)

    def _graph_step(self, reqs, seqs) -> StepStats:
        """One greedy step through graph_step (a CUDA-graph replay, or its body run eagerly)."""
        B = len(seqs)
        out = self.graphs.run([s.slot for s in seqs], [s.seq_len for s in seqs], [s.last_token for s in seqs])
        if self.draft is None:
            for req, seq, tok in zip(reqs, seqs, out):
                seq.seq_len += 1
                seq.last_token = tok
                req.output_ids.append(tok)
                req.finished = len(req.output_ids) >= req.max_new_tokens
            return StepStats(B, 0, B, 0, self.graphs.capture)
        N = self.num_draft_tokens
        stats = StepStats(B, 0, 0, B * (N - 1), self.graphs.capture)
        for req, seq, row in zip(reqs, seqs, out):
            self._account(req, seq, row[0] + 1, row[1: row[0] + 2], stats)
        return stats

    def _account(self, req, seq, path_len: int, toks: list[int], stats: StepStats) -> None:
        """Apply one verify step's result (accepted path length incl. root, emitted tokens) to req."""
        seq.seq_len += path_len
        seq.last_token = toks[-1]
        room = req.max_new_tokens - len(req.output_ids)
        toks = toks[:room]
        accepted = min(path_len - 1, len(toks))
        req.output_ids.extend(toks)
        req.finished = len(req.output_ids) >= req.max_new_tokens
        req.spec_verify_ct += 1
        req.spec_accepted_drafts += accepted
        req.spec_accept_histogram[accepted] += 1
        stats.num_accepted_drafts += accepted
        stats.num_generated_tokens += len(toks)

    def _plain_step(self, reqs, seqs) -> StepStats:
        B, dev = len(seqs), self.device
        lens, slots = [s.seq_len for s in seqs], [s.slot for s in seqs]
        meta = self._dev([lens, slots, [s.last_token for s in seqs]])  # one host->device copy
        seq_lens = meta[0]
        kv = self._view(self._tk, self._tv, slots, meta[1], seq_lens, torch.arange(1, device=dev),
                        max(lens) + 1, torch.ones(1, 1, 1, dtype=torch.bool, device=dev))
        logits, _ = self.target(meta[2][:, None], seq_lens[:, None], kv)
        greedy = torch.argmax(logits[:, 0], dim=-1).tolist()
        for b, (req, seq) in enumerate(zip(reqs, seqs)):
            tok = greedy[b] if req.temperature <= 0 else self._pick(logits[b, 0], req, seq.gen)
            seq.seq_len += 1
            seq.last_token = tok
            req.output_ids.append(tok)
            req.finished = len(req.output_ids) >= req.max_new_tokens
        return StepStats(B, 0, B, 0)

    def _draft_tree(self, topk_p, topk_index, hidden, seq_lens, kv_len, slots_t, slot_range=None,
                    static=False, S=None, N=None):
        """S draft steps (select -> draft forward -> top-k) and `organize` to N tokens, as in
        SGLang (S, N: the decoder's own unless given).

        kv_len: the longest prefix in the batch (eager: the cache read grows by K per step) or,
        with `static`, the fixed cache length every step reads (a CUDA graph's shapes)."""
        K, B = self.topk, seq_lens.shape[0]
        S = self.num_steps if S is None else S
        N = self.num_draft_tokens if N is None else N
        dev, d = seq_lens.device, self.draft.cfg.hidden_size
        score_list, token_list, parents_list = [], [], []
        scores = None
        anc = torch.zeros(B, K, 0, dtype=torch.bool, device=dev)  # ancestors of this step's lanes among drafted nodes
        eye = torch.eye(K, dtype=torch.bool, device=dev)[None].expand(B, K, K)
        lanes = torch.arange(K, device=dev)
        for i in range(S):
            input_ids, hidden_in, scores, info = ops.select_tree(i, topk_p, topk_index, hidden, scores, K)
            score_list.append(info[0])
            token_list.append(info[1])
            parents_list.append(info[2])
            if i == S - 1:
                break
            if i > 0:  # lane l of step i continues lane info[2] // K ... of step i-1
                parent = (info[2] - (K * K * (i - 1) + K)) // K  # [B, K]
                anc = torch.cat([anc.gather(1, parent[:, :, None].expand(B, K, anc.shape[2])),
                                 parent[:, :, None] == lanes], dim=2)
            # Step i's lanes sit at draft position seq_len + i; their KV goes to seq_len + i*K + lane.
            kv = KVView(self._dk, self._dv, slots_t, seq_lens[:, None] + (i * K + lanes),
                        kv_len if static else kv_len + (i + 1) * K,
                        attention_mask(seq_lens, kv_len if static else kv_len + (i + 1) * K,
                                       torch.cat([anc, eye], dim=2)), slot_range)
            logits, h = self.draft(self.target.embed_tokens(input_ids.view(B, K)), hidden_in.view(B, K, d),
                                   (seq_lens + i)[:, None].expand(B, K), kv)
            topk_p, topk_index = ops.draft_topk(logits.view(B * K, -1), K, self.hot)
            hidden = h.reshape(B * K, d)
        return ops.organize(score_list, token_list, parents_list, N)

    def _zero_step(self, reqs, seqs) -> StepStats:
        """Steps 0 (SGLang's `_build_trivial_verify_input`): verify the root alone, i.e. a plain
        target step that captures the aux states, then the draft extend over the one emitted
        token so the draft state stays warm; with `skip_zero_step_extend`
        (SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND) the extend is skipped and the draft state
        zeroed, as SGLang's `_stub_skipped_draft_extend` does: the next positive step drafts cold."""
        B, dev = len(seqs), self.device
        lens, slots = [s.seq_len for s in seqs], [s.slot for s in seqs]
        meta = self._dev([lens, slots, [s.last_token for s in seqs]])  # one host->device copy
        seq_lens, slots_t, max_len = meta[0], meta[1], max(lens)
        rng = (slots[0], slots[0] + B) if slots == list(range(slots[0], slots[0] + B)) else None
        kv = self._view(self._tk, self._tv, slots, slots_t, seq_lens, torch.arange(1, device=dev),
                        max_len + 1, torch.ones(1, 1, 1, dtype=torch.bool, device=dev))
        logits, aux = self.target(meta[2][:, None], seq_lens[:, None], kv, capture=self.capture)
        greedy = self._to_host(torch.argmax(logits[:, 0], dim=-1))[0].tolist()
        emitted = [[greedy[b] if r.temperature <= 0 else self._pick(logits[b, 0], r, seqs[b].gen)]
                   for b, r in enumerate(reqs)]
        paths = [[0] for _ in seqs]
        if self.skip_zero_step_extend:
            d = self.draft.cfg.hidden_size
            self._set_state(seqs, slots_t, torch.zeros(B, self.topk, device=dev),
                            torch.zeros(B, self.topk, dtype=torch.long, device=dev),
                            torch.zeros(B, d, device=dev))
        else:
            self._extend(seqs, slots, slots_t, seq_lens, max_len, paths, emitted, aux, rng)
        stats = StepStats(B, 0, 0, 0)
        for req, seq, toks in zip(reqs, seqs, emitted):
            self._account(req, seq, 1, toks, stats)
        return stats

    def _spec_step(self, reqs, seqs, S=None, N=None) -> StepStats:
        K, B = self.topk, len(seqs)
        S = self.num_steps if S is None else S
        N = self.num_draft_tokens if N is None else N
        lens, slots = [s.seq_len for s in seqs], [s.slot for s in seqs]
        meta = self._dev([lens, slots, [s.last_token for s in seqs]])  # one host->device copy
        seq_lens, slots_t, max_len = meta[0], meta[1], max(lens)
        rng = (slots[0], slots[0] + B) if slots == list(range(slots[0], slots[0] + B)) else None
        parent_list, top_idx, draft_tokens = self._draft_tree(*self._get_state(seqs, slots_t), seq_lens, max_len,
                                                              slots_t, rng, S=S, N=N)
        if self._on_cuda:  # built on the device: the verify result is the step's only read-back
            tree = ops.build_tree_device(meta[2], parent_list, top_idx, draft_tokens, seq_lens, K, S, N)
        else:
            tree = ops.build_tree(meta[2], parent_list, top_idx, draft_tokens, seq_lens, K, S, N)
        # Verify: N tree tokens at cache positions seq_len + node, RoPE positions seq_len + depth.
        kv = self._view(self._tk, self._tv, slots, slots_t, seq_lens, torch.arange(N, device=self.device),
                        max_len + N, tree.tree_mask)
        logits, aux = self.target(tree.draft_token, tree.positions, kv, capture=self.capture)
        res = ops.verify_tree(logits.view(B * N, -1), tree.draft_token, tree.retrive_index,
                              tree.retrive_next_token, tree.retrive_next_sibling, S + 1)
        # One device->host copy: the verify result (+ on CUDA the emitted tokens, predict at the
        # accepted nodes; + with sampling requests the tree lists that sample_tree walks).
        sampling = any(r.temperature > 0 for r in reqs)
        parts = [res.accept_index, res.accept_length, res.bonus]
        if self._on_cuda:
            parts.append(res.predict.long()[res.accept_index.long().clamp(min=0)])
        if sampling or not self._on_cuda:
            parts += [tree.draft_token, tree.retrive_next_token, tree.retrive_next_sibling]
        sampled = [b for b, r in enumerate(reqs) if r.temperature > 0]
        if sampled and self._on_cuda:  # the sampling rows' target distributions ride in the same copy
            probs = self._to_host(torch.stack([self._probs(logits[b], reqs[b]) for b in sampled]), *parts)
            probs, host = {b: p for b, p in zip(sampled, probs[0])}, [t.tolist() for t in probs[1:]]
        else:
            probs, host = None, [t.tolist() for t in self._to_host(*parts)]
        acc_index, acc_len, bonus = host[:3]
        emitted_dev = host[3] if self._on_cuda else None
        tokens, next_token, next_sibling = host[-3:] if len(host) > 3 + self._on_cuda else (None, None, None)
        paths, emitted = [], []
        for b, req in enumerate(reqs):
            if req.temperature > 0:
                path, toks = sample_tree(probs[b] if probs is not None else self._probs(logits[b], req),
                                         next_token[b], next_sibling[b], tokens[b], seqs[b].gen)
            else:
                path = [g - b * N for g in acc_index[b][:acc_len[b] + 1]]
                toks = emitted_dev[b][: acc_len[b] + 1] if emitted_dev is not None else \
                    [tokens[b][n] for n in path[1:]] + [bonus[b]]
            paths.append(path)
            emitted.append(toks)
        self._compact(slots, lens, paths)
        self._extend(seqs, slots, slots_t, seq_lens, max_len, paths, emitted, aux, rng)
        stats = StepStats(B, 0, 0, B * (N - 1))
        for req, seq, path, toks in zip(reqs, seqs, paths, emitted):
            self._account(req, seq, len(path), toks, stats)
        return stats

    def _compact(self, slots, seq_lens, paths) -> None:
        """Move accepted tree nodes' target KV to consecutive positions seq_len + depth
        (one gather + scatter for the whole batch; rows already in place are skipped)."""
        moves = [(slot, base + node, base + depth) for slot, base, path in zip(slots, seq_lens, paths)
                 for depth, node in enumerate(path) if node != depth]
        if not moves:
            return
        slot_i, src, dst = self._dev(list(zip(*moves)))
        for c in (self._tk, self._tv):
            c[:, slot_i, :, dst] = c[:, slot_i, :, src]  # the right side is a copy: overlaps are safe

    def _extend(self, seqs, slots, slots_t, seq_lens, max_len, paths, emitted, aux, rng) -> None:
        """Draft extend over each request's accepted tokens with the verify pass's aux rows."""
        B, dev = len(seqs), self.device
        T = max(len(p) for p in paths)
        # One host->device copy: tokens [B, T] and aux rows [B, T] (both padded with 0: stale,
        # unread), then each request's last row [B].
        flat = [t for path, out in zip(paths, emitted) for t in (*out[: len(path)], *[0] * (T - len(path)))]
        flat += [r for path in paths for r in (*path, *[0] * (T - len(path)))]
        flat += [len(p) - 1 for p in paths]
        meta = self._dev(flat)
        toks, rows, last = meta[: B * T].view(B, T), meta[B * T: 2 * B * T].view(B, T), meta[2 * B * T:]
        ext_aux = aux.gather(1, rows[:, :, None].expand(B, T, aux.shape[2]))  # padded rows: stale, unread
        causal = torch.ones(T, T, dtype=torch.bool, device=dev).tril()[None]
        steps = torch.arange(T, device=dev)
        kv = KVView(self._dk, self._dv, slots_t, seq_lens[:, None] + steps, max_len + T,
                    attention_mask(seq_lens, max_len + T, causal), rng)
        logits, h = self.draft(self.target.embed_tokens(toks), self._aux(ext_aux), seq_lens[:, None] + steps, kv)
        ar = torch.arange(B, device=dev)
        p, idx = ops.draft_topk(logits[ar, last], self.topk, self.hot)
        self._set_state(seqs, slots_t, p, idx, h[ar, last])
