"""Train the built-in engine's models deterministically from the corpus shipped in the repo.

    python -m specwatch.engine.train --out specwatch/engine/models

writes `target/` (Llama-style, 8 layers, d=256, byte vocab) and `draft-eagle3/` (EAGLE-3 head
trained on aux ids [1,3,5]) plus `draft-eagle3-shifted/` (the same weights served with the
slot-shifted ids [-1,1,3]: the classic misconfiguration). Recipe and measurements:
/work/shared/engine.md (run "M2"). Takes ~15 min on 2 CPU cores; CI never runs it, because
the small fp16 outputs are committed. Results are deterministic for a given torch version and
thread count (default 2).

`python -m specwatch.engine.train corpus` regenerates the frozen corpus file from this
interpreter's `pydoc_data.topics` (only needed if the filter changes; the text differs between
CPython patch releases, which is why the bytes are committed).
"""

from __future__ import annotations

import argparse
import math
import re
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from torch import nn

from specwatch.engine.model import (Eagle3Draft, KVView, ModelConfig, Target, capture_layers,
                                    init_weights, load_target, num_params, save_model)

CORPUS_PATH = Path(__file__).resolve().parent / "data" / "pydoc_topics_filtered.txt"
CORPUS_BYTES = 110_000
HELD_OUT_FRACTION = 0.05
TARGET_CFG = ModelConfig(hidden_size=256, num_hidden_layers=8, num_attention_heads=4,
                         intermediate_size=672, vocab_size=256, max_position_embeddings=512,
                         rope_theta=10000.0, rms_norm_eps=1e-5)
TRAIN_CTX = 256
AUX_IDS = (1, 3, 5)
# The target seed is the first one (0, 1, 2, ...) whose target passes the greedy-output health gate
# before any draft is trained: distinct 8-grams >= 0.5 (mean per output) and at most 2 of the 12
# prompts looping (< 0.3). With `llama_init`, seeds 0-2 failed it on this 2-core CPU (0.30, 4/12
# looping, 0.48); seed 3 passes (0.728, 1/12). Looping inflates every draft's accept length.
TARGET_SEED = 3
SHIFTED_AUX_IDS = (-1, 1, 3)


# ----------------------------------------------------------------------------- corpus


def build_corpus(topics: dict[str, str]) -> bytes:
    """The frozen training text: pydoc topics, keys sorted, joined by blank lines, keeping only
    lines that are empty or >= 60 % alphanumeric/space (drops ASCII tables and `****` rules),
    runs of 3+ newlines collapsed to 2, cut to the first 110,000 bytes."""
    text = "\n\n".join(topics[k] for k in sorted(topics))
    kept = [ln for ln in text.split("\n")
            if not ln or sum(c.isalnum() or c == " " for c in ln) / len(ln) >= 0.6]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(kept))
    return text.encode("utf-8")[:CORPUS_BYTES]


def load_corpus() -> tuple[torch.Tensor, torch.Tensor]:
    """(train, held_out) byte tensors of the shipped corpus (last 5 % held out)."""
    data = torch.tensor(list(CORPUS_PATH.read_bytes()), dtype=torch.long)
    cut = int(len(data) * (1 - HELD_OUT_FRACTION))
    return data[:cut], data[cut:]


def line_start_prompts(data: torch.Tensor, n: int, length: int) -> list[list[int]]:
    """`n` prompts of `length` bytes, each starting at a line start, spread evenly over `data`."""
    starts = [0] + [i + 1 for i in (data == 10).nonzero().flatten().tolist() if data[i + 1:i + 2].tolist() != [10]]
    starts = [s for s in starts if s + length <= len(data)]
    picks = [starts[round(j * (len(starts) - 1) / max(n - 1, 1))] for j in range(n)]
    return [data[s:s + length].tolist() for s in picks]


# ----------------------------------------------------------------------------- schedule helpers


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to 10 % of `peak`."""
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = (step - warmup) / max(total - warmup, 1)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def make_optimizer(params, lr: float):
    params = [p for p in params if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))


def windows(data: torch.Tensor, n: int, length: int, gen: torch.Generator) -> torch.Tensor:
    idx = torch.randint(0, len(data) - length, (n,), generator=gen)
    return data[idx[:, None] + torch.arange(length)]


# ----------------------------------------------------------------------------- target


def llama_init(model: nn.Module, std: float = 0.02) -> None:
    """Hugging Face Llama's init (`initializer_range` 0.02): N(0, std) for every linear and
    embedding, norms 1, *no* residual-projection scaling.

    Why not `model.init_weights` (GPT-2's 1/sqrt(2L) on o_proj/down_proj): with the same 450
    steps it trains a much stronger target (held-out 0.77 nats vs engine.md's 0.94), whose greedy
    text a 1-layer draft can largely predict from its own byte context. The draft then leans on
    that path, so serving it the slot-shifted aux ids [-1,1,3] costs too little to see (S=3 AL
    ratio 0.68-0.73, step-1 drop 0.27-0.29; aux-zeroed floor 1.47). With this init the target
    matches engine.md's (0.94-0.96 nats / 0.72-0.73 acc) and so does the draft's response to the
    slot shift (ratio ~0.56, step-1 drop ~0.44).
    """
    for p in model.parameters():
        if p.dim() >= 2:
            nn.init.normal_(p, 0.0, std)


def train_target(steps: int = 450, batch: int = 16, lr: float = 2e-3, seed: int = TARGET_SEED, log=print) -> Target:
    """Train the target on random 256-byte windows of the corpus (bf16 autocast, AdamW)."""
    train, held = load_corpus()
    torch.manual_seed(seed)
    model = Target(TARGET_CFG)
    llama_init(model)
    opt = make_optimizer(model.parameters(), lr)
    gen = torch.Generator().manual_seed(seed)
    pos = torch.arange(TRAIN_CTX)[None].expand(batch, TRAIN_CTX)
    log(f"target: {num_params(model) / 1e6:.2f} M params, {steps} steps of {batch}x{TRAIN_CTX}")
    t0 = time.time()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup=30)
        x = windows(train, batch, TRAIN_CTX + 1, gen)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits, _ = model(x[:, :-1], pos)
        loss = F.cross_entropy(logits.float().reshape(-1, 256), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 25 == 0 or step == steps - 1:
            log(f"target step {step} loss {loss.item():.4f} {time.time() - t0:.0f}s")
    model.eval().requires_grad_(False)
    with torch.inference_mode():
        x = held[: (len(held) - 1) // TRAIN_CTX * TRAIN_CTX + 1]
        xs = x[:-1].view(-1, TRAIN_CTX)
        ys = x[1:].view(-1, TRAIN_CTX)
        logits, _ = model(xs, torch.arange(TRAIN_CTX)[None].expand_as(xs))
        val = F.cross_entropy(logits.reshape(-1, 256), ys.reshape(-1)).item()
        acc = (logits.argmax(-1) == ys).float().mean().item()
    log(f"target held-out loss {val:.4f} nats, next-byte acc {acc:.3f}")
    return model


# ----------------------------------------------------------------------------- draft

DRAFT_STEPS = 600
NUM_SELF_DISTILL = 512
NUM_CORPUS_WINDOWS = 1024
TTT_STEPS = 3  # training-time test: unrolled draft steps per position, weighted 0.8**j


def draft_config(draft_vocab_size: int, aux_ids=AUX_IDS) -> ModelConfig:
    return ModelConfig(hidden_size=256, num_hidden_layers=1, num_attention_heads=4, intermediate_size=672,
                       vocab_size=256, max_position_embeddings=TARGET_CFG.max_position_embeddings,
                       rope_theta=10000.0, rms_norm_eps=1e-5, draft_vocab_size=draft_vocab_size,
                       aux_layer_ids=tuple(aux_ids), target_hidden_size=TARGET_CFG.hidden_size)


@torch.inference_mode()
def self_distill(target: Target, train: torch.Tensor, n: int, gen: torch.Generator, batch: int = 64,
                 length: int = TRAIN_CTX) -> torch.Tensor:
    """[n, length] sequences: a corpus prompt of 16-64 bytes starting at a line start, then the
    target's greedy fp32 continuation (KV-cached, `batch` sequences at a time)."""
    cfg = target.cfg
    starts = torch.tensor([0] + [i + 1 for i in (train[:-length] == 10).nonzero().flatten().tolist()])
    out = []
    for _ in range(0, n, batch):
        plen = int(torch.randint(16, 65, (1,), generator=gen))
        s = starts[torch.randint(0, len(starts), (batch,), generator=gen)]
        seq = torch.zeros(batch, length, dtype=torch.long)
        seq[:, :plen] = train[s[:, None] + torch.arange(plen)]
        k = torch.zeros(cfg.num_hidden_layers, batch, cfg.num_attention_heads, length, cfg.head_dim)
        v = torch.zeros_like(k)
        slots = torch.arange(batch)
        kv = KVView(k, v, slots, torch.arange(plen).expand(batch, plen), plen,
                    torch.ones(plen, plen, dtype=torch.bool).tril()[None, None], (0, batch))
        logits, _ = target(seq[:, :plen], torch.arange(plen).expand(batch, plen), kv)
        for t in range(plen, length):
            seq[:, t] = logits[:, -1].argmax(-1)
            if t == length - 1:
                break
            kv = KVView(k, v, slots, torch.full((batch, 1), t), t + 1, None, (0, batch))
            logits, _ = target(seq[:, t:t + 1], torch.full((batch, 1), t), kv)
        out.append(seq)
    return torch.cat(out)[:n]


@torch.inference_mode()
def dump_features(target: Target, seqs: torch.Tensor, hot: torch.Tensor, chunk: int = 32):
    """Aux states at AUX_IDS ([N, T, 3d] fp16) and the target's next-token distribution over the
    draft vocab ([N, T, Vd] fp16) for every sequence (bf16 forward)."""
    capture = capture_layers(AUX_IDS, target.cfg.num_hidden_layers)
    aux_all, probs_all = [], []
    pos = torch.arange(seqs.shape[1])
    for i in range(0, len(seqs), chunk):
        x = seqs[i:i + chunk]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits, aux = target(x, pos.expand_as(x), capture=capture)
        aux_all.append(aux.half())
        probs_all.append(logits.float().softmax(-1)[..., hot].half())
    return torch.cat(aux_all), torch.cat(probs_all)


def ttt_loss(draft: Eagle3Draft, embed, x, aux, probs):
    """EAGLE-3 training-time test over TTT_STEPS unrolled steps; returns (loss, step-1 agreement).

    Step j at row i stands for draft position i+j: it reads token x[i+1+j] and, for j > 0, the
    draft's own pre-norm output of step j-1 at row i; it attends causally to the step-0 keys and
    to its own row of steps 1..j (the keys a chain step sees at inference), and is trained toward
    the target's distribution of token x[i+2+j].
    """
    B, T = x.shape
    n = T - 1
    attn = draft.midlayer.self_attn
    xpad = F.pad(x, (0, TTT_STEPS))
    ppad = F.pad(probs, (0, 0, 0, TTT_STEPS))
    rows = torch.arange(n)
    hidden, keys, vals = aux[:, :n], [], []
    total, agree = 0.0, None
    eye = torch.eye(n, dtype=torch.bool)
    for j in range(TTT_STEPS):
        emb = embed(xpad[:, 1 + j:1 + j + n])
        xin, residual = draft.layer_input(emb, hidden)
        cos, sin = draft.rope((rows + j)[None])
        q, k, v = attn.qkv(xin, cos, sin)
        keys.append(k)
        vals.append(v)
        mask = torch.cat([torch.ones(n, n, dtype=torch.bool).tril()] + [eye] * j, dim=1)
        o = F.scaled_dot_product_attention(q, torch.cat(keys, 2), torch.cat(vals, 2), attn_mask=mask)
        logits, hidden = draft.layer_output(attn.out(o), residual)
        target_p = ppad[:, 1 + j:1 + j + n].float()
        valid = (rows <= n - 1 - j).float()[None]  # row i predicts x[i+2+j], which must exist
        ce = -(target_p * logits.float().log_softmax(-1)).sum(-1)
        total = total + (0.8 ** j) * (ce * valid).sum() / (valid.sum() * B)
        if j == 0:
            agree = ((logits.argmax(-1) == target_p.argmax(-1)).float() * valid).sum() / (valid.sum() * B)
    return total, agree.item()


def train_draft(target: Target, steps: int = DRAFT_STEPS, batch: int = 16, lr: float = 2e-3, seed: int = 0,
                log=print) -> Eagle3Draft:
    """Train the EAGLE-3 head on self-distilled + corpus sequences (recipe: engine.md run M2)."""
    train, _ = load_corpus()
    hot = torch.unique(train)  # draft vocab = bytes seen in the corpus; d2t maps back
    gen = torch.Generator().manual_seed(seed + 1)
    t0 = time.time()
    seqs = torch.cat([self_distill(target, train, NUM_SELF_DISTILL, gen),
                      windows(train, NUM_CORPUS_WINDOWS, TRAIN_CTX, gen)])
    log(f"draft: {len(seqs)} sequences ({NUM_SELF_DISTILL} self-distilled) {time.time() - t0:.0f}s")
    aux, probs = dump_features(target, seqs, hot)
    log(f"draft: features dumped {tuple(aux.shape)} {time.time() - t0:.0f}s")
    torch.manual_seed(seed)
    draft = Eagle3Draft(draft_config(len(hot)))
    init_weights(draft)
    draft.d2t.copy_(hot - torch.arange(len(hot)))
    opt = make_optimizer(draft.parameters(), lr)
    embed = target.embed_tokens  # shared and frozen, as in SGLang
    log(f"draft: {num_params(draft) / 1e6:.2f} M params, vocab {len(hot)}, {steps} steps of {batch}x{TRAIN_CTX}")
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup=20)
        idx = torch.randint(0, len(seqs), (batch,), generator=gen)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, agree = ttt_loss(draft, embed, seqs[idx], aux[idx].float(), probs[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            log(f"draft step {step} loss {loss.item():.4f} step-1 agreement {agree:.3f} {time.time() - t0:.0f}s")
    return draft.eval().requires_grad_(False)


def train_and_save_drafts(out: Path, log=print) -> None:
    """Train the draft against the *saved* (fp16-rounded) target and write both draft dirs."""
    target = load_target(out / "target")
    draft = train_draft(target, log=log)
    save_model(draft, out / "draft-eagle3")
    shifted = Eagle3Draft(draft_config(draft.cfg.draft_vocab_size, SHIFTED_AUX_IDS))
    shifted.load_state_dict(draft.state_dict())
    save_model(shifted, out / "draft-eagle3-shifted")
    log(f"wrote {out / 'draft-eagle3'} and {out / 'draft-eagle3-shifted'}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m specwatch.engine.train", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="?", default="models", choices=["models", "corpus"],
                    help="models (default): train and write the model dirs; corpus: rewrite the corpus file")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "models"))
    ap.add_argument("--phase", default="all", choices=["all", "target", "draft"],
                    help="draft reuses <out>/target")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (results depend on it)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.what == "corpus":
        import pydoc_data.topics

        CORPUS_PATH.write_bytes(build_corpus(pydoc_data.topics.topics))
        print(f"wrote {CORPUS_PATH} ({CORPUS_PATH.stat().st_size} bytes)")
        return
    out = Path(args.out)
    log = lambda msg: print(msg, flush=True)  # noqa: E731
    if args.phase in ("all", "target"):
        save_model(train_target(log=log), out / "target")
        log(f"wrote {out / 'target'}")
    if args.phase in ("all", "draft"):
        train_and_save_drafts(out, log=log)


if __name__ == "__main__":
    main()
