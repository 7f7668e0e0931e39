"""The built-in engine's two models: a small Llama-style target and an EAGLE-3 draft head.

Both live in Hugging Face-shaped directories (`config.json` + `model.safetensors`, HF tensor
names, fp16 on disk, fp32 in memory). The target exposes the hidden states of chosen layers with
SGLang's capture convention: aux id k captures the *input* of layer k+1 (= output of layer k),
id -1 is the embedding output, and ids must lie in [-1, L-2]. The draft follows SGLang's
`LlamaForCausalLMEagle3`: fc(3d->d) over the concatenated aux states, one decoder layer fed
[input_layernorm(embed); hidden_norm(hidden)], a final norm, an lm_head over the draft vocab and
a `d2t` offset map (target id = draft id + d2t[draft id]).

This module holds the math only: no scheduling, no sampling (see decode.py), no training
(see train.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from specwatch.engine import models_dir

ROPE_TABLE_MIN = 4096  # positions precomputed for RoPE; grows on demand


# ----------------------------------------------------------------------------- configs


@dataclass(frozen=True)
class ModelConfig:
    """Fields shared by target and draft config.json (Hugging Face names)."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    rope_theta: float
    rms_norm_eps: float
    draft_vocab_size: int | None = None  # draft only
    aux_layer_ids: tuple[int, ...] | None = None  # draft only: eagle_aux_hidden_state_layer_ids
    target_hidden_size: int | None = None  # draft only

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def is_draft(self) -> bool:
        return self.draft_vocab_size is not None

    def to_hf(self) -> dict:
        out = {
            "architectures": ["LlamaForCausalLMEagle3" if self.is_draft else "LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_attention_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "hidden_act": "silu",
            "vocab_size": self.vocab_size,
            "max_position_embeddings": self.max_position_embeddings,
            "rope_theta": self.rope_theta,
            "rms_norm_eps": self.rms_norm_eps,
            "tie_word_embeddings": False,
            "torch_dtype": "float16",
            "tokenizer": "bytes (specwatch.engine.tokenizer: token id = UTF-8 byte)",
        }
        if self.is_draft:
            out["draft_vocab_size"] = self.draft_vocab_size
            out["target_hidden_size"] = self.target_hidden_size
            out["eagle_config"] = {
                "eagle_aux_hidden_state_layer_ids": list(self.aux_layer_ids or ()),
                "use_aux_hidden_state": True,
            }
        return out

    @classmethod
    def from_dir(cls, path: str | Path) -> "ModelConfig":
        cfg_path = Path(path) / "config.json"
        try:
            raw = json.loads(cfg_path.read_text())
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{cfg_path}: no config.json; a built-in model dir needs config.json + "
                f"model.safetensors (see {models_dir()})"
            ) from None
        arch = (raw.get("architectures") or ["?"])[0]
        is_draft = arch == "LlamaForCausalLMEagle3"
        if arch not in ("LlamaForCausalLM", "LlamaForCausalLMEagle3"):
            raise ValueError(
                f"{cfg_path}: architectures={raw.get('architectures')!r}; the built-in engine "
                f"runs only LlamaForCausalLM targets and LlamaForCausalLMEagle3 drafts"
            )
        need = ["hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "vocab_size", "max_position_embeddings", "rope_theta", "rms_norm_eps"]
        missing = [k for k in need if k not in raw]
        if missing:
            raise ValueError(f"{cfg_path}: missing field(s) {missing}")
        if raw.get("num_key_value_heads", raw["num_attention_heads"]) != raw["num_attention_heads"]:
            raise ValueError(f"{cfg_path}: num_key_value_heads != num_attention_heads; the "
                             f"built-in engine has no grouped-query attention")
        aux = None
        if is_draft:
            eagle = raw.get("eagle_config") or {}
            if "eagle_aux_hidden_state_layer_ids" not in eagle:
                raise ValueError(f"{cfg_path}: draft config lacks "
                                 f"eagle_config.eagle_aux_hidden_state_layer_ids")
            aux = tuple(int(i) for i in eagle["eagle_aux_hidden_state_layer_ids"])
        return cls(
            **{k: raw[k] for k in need},
            draft_vocab_size=raw.get("draft_vocab_size", raw["vocab_size"]) if is_draft else None,
            aux_layer_ids=aux,
            target_hidden_size=raw.get("target_hidden_size", raw["hidden_size"]) if is_draft else None,
        )


def capture_layers(aux_layer_ids, num_layers: int, where: str = "aux ids") -> list[int]:
    """Layer indices whose *input* is captured for `aux_layer_ids` (SGLang: id + 1).

    Raises ValueError for ids outside [-1, L-2]: SGLang would silently capture fewer states
    (the input of layer L does not exist) and the draft's fc would then fail on its shape.
    """
    bad = [i for i in aux_layer_ids if not -1 <= i <= num_layers - 2]
    if bad:
        raise ValueError(
            f"{where}: aux hidden-state layer ids {list(aux_layer_ids)} contain {bad}, outside "
            f"[-1, {num_layers - 2}] for a {num_layers}-layer target (id k captures the input of "
            f"layer k+1; -1 = embedding output); fix eagle_aux_hidden_state_layer_ids"
        )
    from specwatch import aux_layers  # the one rule; the built-in target is a Llama-family model
    return aux_layers.capture_indices(aux_layers.PLUS_ONE, list(aux_layer_ids), num_layers)


# ----------------------------------------------------------------------------- building blocks


@dataclass
class KVView:
    """Where one forward reads and writes its KV cache.

    k, v: [layers, slots, heads, capacity, head_dim]. Row b of the batch owns cache slot
    `slots[b]`; its T new keys go to positions `write_pos[b]`; attention reads positions
    [0, kv_len) of the slot under `mask` [B, 1, T, kv_len] (True = may attend).
    `slot_range` = (first, last+1) when the slots are consecutive, which lets reads be views.
    RoPE positions of a forward with a KVView must be < kv_len (a token never sits past the cache
    it attends to): the models pass kv_len to `Rope` as the bound instead of reading positions back.
    """

    k: torch.Tensor
    v: torch.Tensor
    slots: torch.Tensor
    write_pos: torch.Tensor
    kv_len: int
    mask: torch.Tensor
    slot_range: tuple[int, int] | None = None


class Rope:
    """RoPE cos/sin tables (Llama's rotate-half layout), indexed by absolute position."""

    def __init__(self, head_dim: int, theta: float, n: int = ROPE_TABLE_MIN):
        self.head_dim, self.theta = head_dim, theta
        self._build(n)

    def _build(self, n: int) -> None:
        inv = 1.0 / (self.theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float64) / self.head_dim))
        ang = torch.outer(torch.arange(n, dtype=torch.float64), inv)
        ang = torch.cat([ang, ang], dim=-1)
        self.cos, self.sin = ang.cos().float(), ang.sin().float()

    def __call__(self, positions: torch.Tensor, bound: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [B, 1, T, hd] at `positions` [B, T]. `bound` (optional): an exclusive upper
        bound on the positions that the caller knows on the host, which saves reading
        positions.max() back from the device (a sync on CUDA)."""
        top = int(positions.max()) + 1 if bound is None else int(bound)
        if top > self.cos.shape[0]:
            self._build(2 * top)
        if self.cos.device != positions.device:  # tables follow the model to its device, once
            self.cos, self.sin = self.cos.to(positions.device), self.sin.to(positions.device)
        # [B, T, hd] -> [B, 1, T, hd] to broadcast over heads
        return self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)


def attention_mask(seq_lens: torch.Tensor, kv_len: int, local: torch.Tensor) -> torch.Tensor:
    """Attention mask [B, 1, T, kv_len]: the whole prefix [0, seq_len) plus `local` [B|1, T, M]
    over the M new cache positions seq_len .. seq_len+M-1 (stale entries beyond stay masked).
    Device ops only (no host read), so it can be captured in a CUDA graph."""
    M = local.shape[-1]
    rel = torch.arange(kv_len, device=seq_lens.device)[None, :] - seq_lens[:, None]  # [B, kv_len]
    local = local.expand(seq_lens.shape[0], -1, -1)
    picked = local.gather(2, rel.clamp(0, M - 1)[:, None, :].expand(-1, local.shape[1], -1))
    return ((rel < 0)[:, None, :] | (picked & (rel < M)[:, None, :]))[:, None]


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rot * sin


class Attention(nn.Module):
    """Multi-head attention with a fused qkv projection (split into q/k/v_proj on disk)."""

    def __init__(self, d_in: int, d: int, n_heads: int):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, d // n_heads
        self.qkv_proj = nn.Linear(d_in, 3 * d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)

    def qkv(self, x, cos, sin):
        """Rotated q, k and v, each [B, H, T, hd] (q and k rotated in one pass: fewer kernels)."""
        B, T, _ = x.shape
        qkv = self.qkv_proj(x).view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        qk = _rotate(qkv[:2], cos, sin)
        return qk[0], qk[1], qkv[2]

    def out(self, o: torch.Tensor) -> torch.Tensor:
        B, H, T, hd = o.shape
        return self.o_proj(o.transpose(1, 2).reshape(B, T, H * hd))

    def forward(self, x, cos, sin, kv: KVView | None, layer: int):
        q, k, v = self.qkv(x, cos, sin)
        if kv is None:  # training / cache-free: plain causal attention over the given tokens
            return self.out(F.scaled_dot_product_attention(q, k, v, is_causal=True))
        kc, vc = kv.k[layer], kv.v[layer]
        kc[kv.slots[:, None], :, kv.write_pos] = k.transpose(1, 2)
        vc[kv.slots[:, None], :, kv.write_pos] = v.transpose(1, 2)
        if kv.slot_range is not None:
            s0, s1 = kv.slot_range
            K, V = kc[s0:s1, :, : kv.kv_len], vc[s0:s1, :, : kv.kv_len]
        else:
            K, V = kc[kv.slots, :, : kv.kv_len], vc[kv.slots, :, : kv.kv_len]
        return self.out(F.scaled_dot_product_attention(q, K, V, attn_mask=kv.mask))


class MLP(nn.Module):
    """SwiGLU with a fused gate/up projection (split into gate_proj/up_proj on disk)."""

    def __init__(self, d: int, ffn: int):
        super().__init__()
        self.gate_up_proj = nn.Linear(d, 2 * ffn, bias=False)
        self.down_proj = nn.Linear(ffn, d, bias=False)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d = cfg.hidden_size
        self.input_layernorm = RMSNorm(d, cfg.rms_norm_eps)
        self.self_attn = Attention(d, d, cfg.num_attention_heads)
        self.post_attention_layernorm = RMSNorm(d, cfg.rms_norm_eps)
        self.mlp = MLP(d, cfg.intermediate_size)

    def forward(self, h, cos, sin, kv, layer):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, kv, layer)
        return h + self.mlp(self.post_attention_layernorm(h))


# ----------------------------------------------------------------------------- target


class Target(nn.Module):
    """Llama-style causal LM over bytes that can return aux hidden states (SGLang convention)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.hidden_size
        self.embed_tokens = nn.Embedding(cfg.vocab_size, d)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(d, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(d, cfg.vocab_size, bias=False)
        self.rope = Rope(cfg.head_dim, cfg.rope_theta)

    def forward(self, input_ids, positions, kv: KVView | None = None, capture: list[int] | None = None,
                all_hidden: list | None = None):
        """Logits [B, T, V] and the captured aux states [B, T, len(capture)*d] (or None).

        capture: layer indices whose input is captured (see `capture_layers`); like SGLang,
        states are concatenated in layer order and index L is never reached. all_hidden: if a list is given, the
        embedding output and every layer output are appended to it (for `dump_hidden_states`).
        """
        cos, sin = self.rope(positions, kv.kv_len if kv is not None else None)
        h = self.embed_tokens(input_ids)
        aux = []
        for i, layer in enumerate(self.layers):
            if capture and i in capture:
                aux.append(h)
            if all_hidden is not None:
                all_hidden.append(h)
            h = layer(h, cos, sin, kv, i)
        if all_hidden is not None:
            all_hidden.append(h)
        logits = self.lm_head(self.norm(h))
        return logits, (torch.cat(aux, dim=-1) if capture else None)


# ----------------------------------------------------------------------------- draft


class Eagle3Draft(nn.Module):
    """EAGLE-3 draft head in SGLang's `LlamaForCausalLMEagle3` layout (embedding shared, not owned)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        d, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.fc = nn.Linear(3 * cfg.target_hidden_size, d, bias=False)
        self.midlayer = nn.Module()
        self.midlayer.input_layernorm = RMSNorm(d, eps)
        self.midlayer.hidden_norm = RMSNorm(d, eps)
        self.midlayer.self_attn = Attention(2 * d, d, cfg.num_attention_heads)
        self.midlayer.post_attention_layernorm = RMSNorm(d, eps)
        self.midlayer.mlp = MLP(d, cfg.intermediate_size)
        self.norm = RMSNorm(d, eps)
        self.lm_head = nn.Linear(d, cfg.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        self.rope = Rope(cfg.head_dim, cfg.rope_theta)

    @property
    def hot_token_id(self) -> torch.Tensor:
        """Target id of each draft id (SGLang: d2t + arange(Vd))."""
        return self.d2t + torch.arange(self.d2t.shape[0], device=self.d2t.device)

    def layer_input(self, embeds, hidden):
        """[input_layernorm(embeds); hidden_norm(hidden)] with fc applied to 3d-wide aux input.

        Returns (x [B,T,2d], residual [B,T,d])."""
        if hidden.shape[-1] != self.cfg.hidden_size:
            hidden = self.fc(hidden)
        m = self.midlayer
        return torch.cat([m.input_layernorm(embeds), m.hidden_norm(hidden)], dim=-1), hidden

    def layer_output(self, attn_out, residual):
        """Logits [B,T,Vd] and the pre-norm hidden [B,T,d] fed back to the next draft step."""
        m = self.midlayer
        h = residual + attn_out
        h = h + m.mlp(m.post_attention_layernorm(h))
        return self.lm_head(self.norm(h)), h

    def forward(self, embeds, hidden, positions, kv: KVView | None = None):
        cos, sin = self.rope(positions, kv.kv_len if kv is not None else None)
        x, residual = self.layer_input(embeds, hidden)
        return self.layer_output(self.midlayer.self_attn(x, cos, sin, kv, 0), residual)


# ----------------------------------------------------------------------------- (de)serialisation

_FUSED = {"self_attn.qkv_proj.weight": ("q_proj", "k_proj", "v_proj"),
          "mlp.gate_up_proj.weight": ("gate_proj", "up_proj")}


def _to_hf(state: dict) -> dict:
    """Split fused weights into Hugging Face names; drop buffers that are not weights."""
    out = {}
    for name, t in state.items():
        for fused, parts in _FUSED.items():
            if name.endswith(fused):
                prefix, kind = name[: -len(fused)], fused.split(".")[0]
                for part, chunk in zip(parts, t.chunk(len(parts), dim=0)):
                    out[f"{prefix}{kind}.{part}.weight"] = chunk.contiguous()
                break
        else:
            out[name] = t
    return out


def _from_hf(state: dict) -> dict:
    out = dict(state)
    for fused, parts in _FUSED.items():
        kind = fused.split(".")[0]
        for name in [n for n in state if n.endswith(f"{kind}.{parts[0]}.weight")]:
            prefix = name[: -len(f"{kind}.{parts[0]}.weight")]
            keys = [f"{prefix}{kind}.{p}.weight" for p in parts]
            out[prefix + fused] = torch.cat([out.pop(k) for k in keys], dim=0)
    return out


def _hf_names(model: nn.Module) -> dict:
    """Our module names -> HF names (target: `model.` prefix on everything but lm_head)."""
    state = {k: v for k, v in model.state_dict().items()}
    if isinstance(model, Target):
        state = {(k if k.startswith("lm_head") else "model." + k): v for k, v in state.items()}
    return _to_hf(state)


def save_model(model: nn.Module, path: str | Path) -> None:
    """Write `config.json` + fp16 `model.safetensors` (d2t stays int64)."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(model.cfg.to_hf(), indent=2) + "\n")
    tensors = {k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in _hf_names(model).items()}
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})


def _load_state(path: Path, model: nn.Module, strip_model_prefix: bool) -> None:
    from safetensors.torch import load_file

    file = path / "model.safetensors"
    if not file.exists():
        raise FileNotFoundError(f"{file}: missing weights (run `python -m specwatch.engine.train`)")
    state = {k: (v.float() if v.is_floating_point() else v) for k, v in load_file(str(file)).items()}
    if strip_model_prefix:
        state = {k.removeprefix("model."): v for k, v in state.items()}
    state = _from_hf(state)
    state.pop("t2d", None)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"{file}: weights do not match {model.cfg.to_hf()['architectures'][0]}: "
                         f"missing {missing}, unexpected {unexpected}")


def load_target(path: str | Path) -> Target:
    """Load a target model directory into fp32, eval mode."""
    path = Path(path)
    cfg = ModelConfig.from_dir(path)
    if cfg.is_draft:
        raise ValueError(f"{path}: is a draft (LlamaForCausalLMEagle3), expected a target model")
    model = Target(cfg)
    _load_state(path, model, strip_model_prefix=True)
    return model.eval().requires_grad_(False)


def load_draft(path: str | Path, target: Target) -> Eagle3Draft:
    """Load a draft directory; checks its aux ids and widths against `target`."""
    path = Path(path)
    cfg = ModelConfig.from_dir(path)
    if not cfg.is_draft:
        raise ValueError(f"{path}: architectures is not LlamaForCausalLMEagle3; not a draft")
    capture_layers(cfg.aux_layer_ids, target.cfg.num_hidden_layers, f"{path / 'config.json'}")
    if len(cfg.aux_layer_ids) != 3 or cfg.target_hidden_size != target.cfg.hidden_size:
        raise ValueError(f"{path}/config.json: expects 3 aux states of width "
                         f"{cfg.target_hidden_size}; target has hidden_size {target.cfg.hidden_size}")
    model = Eagle3Draft(cfg)
    _load_state(path, model, strip_model_prefix=False)
    return model.eval().requires_grad_(False)


# ----------------------------------------------------------------------------- hidden-state dump


@torch.inference_mode()
def dump_hidden_states(target_path, prompts: list[list[int]], out_path, layer_ids) -> dict:
    """Write the target's hidden states for `prompts` to a safetensors file (for doctor/align).

    Tensors (rows = the prompts' tokens concatenated, T in total):
    - `layer_{k}` [T, d] for k in -1..L-1: output of layer k; `layer_-1` = embedding output.
      SGLang's aux id k captures exactly `layer_{k}`.
    - `aux` [T, 3d]: what a draft serving `layer_ids` receives (= cat of `layer_{k}` for k in ids).
    - `input_ids` [T] int64 and `seq_start` [n_prompts] int64 (row of each prompt's first token).
    Returns the dict that was written.
    """
    from safetensors.torch import save_file

    target = load_target(target_path)
    capture = capture_layers(layer_ids, target.cfg.num_hidden_layers)
    per_layer, aux_rows = [[] for _ in range(target.cfg.num_hidden_layers + 1)], []
    for ids in prompts:
        x = torch.tensor([ids])
        hidden: list = []
        _, aux = target(x, torch.arange(len(ids))[None], capture=capture, all_hidden=hidden)
        for k, h in enumerate(hidden):
            per_layer[k].append(h[0])
        aux_rows.append(aux[0])
    out = {f"layer_{k - 1}": torch.cat(rows).contiguous() for k, rows in enumerate(per_layer)}
    out["aux"] = torch.cat(aux_rows).contiguous()
    out["input_ids"] = torch.tensor([t for ids in prompts for t in ids], dtype=torch.long)
    out["seq_start"] = torch.tensor([0] + [len(p) for p in prompts[:-1]], dtype=torch.long).cumsum(0)
    save_file(out, str(out_path), metadata={"layer_ids": json.dumps(list(layer_ids))})
    return out


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def init_weights(model: nn.Module, std: float = 0.02) -> None:
    """Deterministic (under torch.manual_seed) init: N(0, std) linears/embeddings, residual
    output projections scaled by 1/sqrt(2*layers) (GPT-2 style) so deep stacks start stable."""
    n = getattr(model.cfg, "num_hidden_layers", 1)
    for name, p in model.named_parameters():
        if p.dim() == 1:
            continue  # norm weights stay 1
        scale = 1 / math.sqrt(2 * n) if name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0
        nn.init.normal_(p, 0.0, std * scale)
