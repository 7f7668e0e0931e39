"""specwatch.engine.export_hf: the built-in models exported for real SGLang and transformers.

The target is reloaded with the real `transformers` LlamaForCausalLM (offline, CPU) and must give
the built-in target's logits, aux states and greedy tokens; the byte tokenizer is reloaded with
AutoTokenizer. The draft is loaded the way sglang 0.5.12's `LlamaForCausalLMEagle3.load_weights`
maps names (python/sglang/srt/models/llama_eagle3.py: legacy `midlayer` -> `layers.0`, `model.`
prefix, q/k/v and gate/up stacked, d2t -> hot_token_id, t2d skipped) into the parameter shapes that
module creates from the exported config, and run with that file's decoder-layer forward; its
logits must equal the built-in draft's. The export must be byte-for-byte deterministic.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
import transformers

from specwatch.engine import export_hf, tokenizer
from specwatch.engine.decode import Request, SpecDecoder
from specwatch.engine.model import capture_layers, load_draft, load_target, models_dir


@pytest.fixture(scope="module", autouse=True)
def _offline_one_thread():
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.setenv("TRANSFORMERS_OFFLINE", "1")
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
    mp.undo()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("export")
    manifest = export_hf.export(out)
    return out, manifest


@pytest.fixture(scope="module")
def target():
    return load_target(models_dir() / "target")


PROMPT = list(b"The module level function accepts one argument, the name of")


def test_export_is_deterministic_and_manifest_matches(exported, tmp_path):
    out, manifest = exported
    again = export_hf.export(tmp_path / "again")
    assert again["files_sha256"] == manifest["files_sha256"]
    for rel in manifest["files_sha256"]:
        assert (out / rel).read_bytes() == (tmp_path / "again" / rel).read_bytes(), rel
    # the target's tensors are the committed fp16 ones, unchanged (same file bytes)
    assert (out / "target" / "model.safetensors").read_bytes() == (models_dir() / "target" / "model.safetensors").read_bytes()
    assert set(manifest["files_sha256"]) >= {f"{d}/{f}" for d in ("target", *export_hf.DRAFTS)
                                             for f in ("config.json", "model.safetensors", "tokenizer.json")}


def test_transformers_llama_equals_builtin_target(exported, target):
    out, _ = exported
    hf = transformers.LlamaForCausalLM.from_pretrained(out / "target", dtype=torch.float32).eval()
    assert hf.config.eos_token_id is None and hf.config.tie_word_embeddings is False
    x = torch.tensor([PROMPT])
    for ids in ([1, 3, 5], [0, 2, 4], [2, 4, 6]):
        with torch.no_grad():
            ref, aux = target(x, torch.arange(x.shape[1])[None], capture=capture_layers(ids, 8))
            got = hf(x, output_hidden_states=True)
        scale = ref.abs().max()
        assert (got.logits - ref).abs().max() <= 1e-5 * scale, "logits"
        # SGLang's aux id k = output of layer k = HF hidden_states[k + 1]
        hf_aux = torch.cat([got.hidden_states[k + 1] for k in ids], dim=-1)
        assert (hf_aux - aux).abs().max() <= 1e-5 * aux.abs().max(), ids


def test_transformers_greedy_equals_builtin_plain(exported):
    out, _ = exported
    hf = transformers.LlamaForCausalLM.from_pretrained(out / "target", dtype=torch.float32).eval()
    n = 24
    with torch.no_grad():
        gen = hf.generate(torch.tensor([PROMPT]), max_new_tokens=n, do_sample=False, min_new_tokens=n)
    dec = SpecDecoder(models_dir() / "target")
    req = Request("x", PROMPT, n)
    dec.prefill([req])
    while not req.finished:
        dec.decode_step([req])
    assert gen[0, len(PROMPT):].tolist() == req.output_ids


def test_byte_tokenizer_loads_offline_and_matches_the_engine(exported):
    out, _ = exported
    for d in ("target", "draft-eagle3"):
        tok = transformers.AutoTokenizer.from_pretrained(out / d)
        for text in ["plain ascii", "  two spaces\tand tab\n", "héllo wörld €", "𝄞 emoji 🙂", ""]:
            ids = tok.encode(text)
            assert ids == tokenizer.encode(text), text
            assert tok.decode(ids) == tokenizer.decode(ids) == text
        assert tok.decode([0xE2, 0x82]) == tokenizer.decode([0xE2, 0x82])  # invalid UTF-8 -> U+FFFD
        assert tok.bos_token_id is None and tok.eos_token_id is None and len(tok) == 256


# ----------------------------------------------------------------------------- draft, SGLang's way


def _sglang_eagle3_params(cfg: dict) -> dict[str, tuple]:
    """Parameter shapes of sglang 0.5.12 LlamaForCausalLMEagle3 for `cfg` (one layer, TP 1).
    embed_tokens is replaced by the target's (eagle_worker set_embed), so it is not loaded."""
    d, ffn, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    n_aux = len(cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
    L = "model.layers.0."
    return {
        "model.fc.weight": (d, cfg["target_hidden_size"] * n_aux),
        L + "self_attn.qkv_proj.weight": ((H + 2 * Hkv) * hd, 2 * d),  # input layer: 2d wide
        L + "self_attn.o_proj.weight": (d, H * hd),
        L + "mlp.gate_up_proj.weight": (2 * ffn, d),
        L + "mlp.down_proj.weight": (d, ffn),
        L + "input_layernorm.weight": (d,), L + "post_attention_layernorm.weight": (d,),
        L + "hidden_norm.weight": (d,), "model.norm.weight": (d,),
        "lm_head.weight": (cfg["draft_vocab_size"], d),
    }


def _sglang_load(tensors: dict, params: dict[str, tuple]):
    """LlamaForCausalLMEagle3.load_weights' name handling, on plain tensors."""
    stacked = [(".qkv_proj", ".q_proj", 0), (".qkv_proj", ".k_proj", 1), (".qkv_proj", ".v_proj", 2),
               (".gate_up_proj", ".gate_proj", 0), (".gate_up_proj", ".up_proj", 1)]
    legacy = {"midlayer": "layers.0", "aux_norm_low": "fc_norm.0", "aux_norm_mid": "fc_norm.1",
              "aux_norm_high": "fc_norm.2"}
    shards: dict[str, dict[int, torch.Tensor]] = {}
    loaded, hot, unused = {}, None, []
    for name, w in tensors.items():
        for old, new in legacy.items():
            if old in name:
                name = name.replace(old, new)
        if "d2t" in name:
            hot = w + torch.arange(w.shape[0])
            continue
        if "t2d" in name:
            continue
        for param, shard, sid in stacked:
            if shard in name:
                name = name.replace(shard, param)
                pname = name if name in params else f"model.{name}"
                if pname in params:
                    shards.setdefault(pname, {})[sid] = w
                else:
                    unused.append(name)
                break
        else:
            pname = name if name in params else f"model.{name}"
            if pname in params:
                loaded[pname] = w
            else:
                unused.append(name)
    for pname, parts in shards.items():
        loaded[pname] = torch.cat([parts[i] for i in sorted(parts)], dim=0)
    return loaded, hot, unused


def _rms(x, w, eps):
    x32 = x.float()
    return w * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps))


def _rope(x, pos, theta):
    hd = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
    ang = pos[:, None].float() * inv[None]
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    rot = torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], -1)  # neox style
    return x * cos + rot * sin


def _sglang_draft_forward(p, cfg, embeds, aux, pos):
    """llama_eagle3.py LlamaModel.forward + LlamaDecoderLayer.forward (input layer), causal
    attention over one sequence; returns (logits, aux fed back)."""
    eps, d, H, hd = cfg["rms_norm_eps"], cfg["hidden_size"], cfg["num_attention_heads"], cfg["head_dim"]
    L = "model.layers.0."
    h = aux @ p["model.fc.weight"].T if aux.shape[-1] != d else aux
    residual = h
    x = torch.cat([_rms(embeds, p[L + "input_layernorm.weight"], eps), _rms(h, p[L + "hidden_norm.weight"], eps)], -1)
    q, k, v = (x @ p[L + "self_attn.qkv_proj.weight"].T).split(H * hd, dim=-1)
    T = x.shape[0]
    q, k, v = (t.view(T, H, hd).transpose(0, 1) for t in (q, k, v))
    q, k = _rope(q, pos, cfg["rope_theta"]), _rope(k, pos, cfg["rope_theta"])
    att = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True, scale=1 / math.sqrt(hd))[0]
    o = att.transpose(0, 1).reshape(T, H * hd) @ p[L + "self_attn.o_proj.weight"].T
    residual = residual + o
    gate, up = (_rms(residual, p[L + "post_attention_layernorm.weight"], eps) @ p[L + "mlp.gate_up_proj.weight"].T).chunk(2, -1)
    residual = residual + (F.silu(gate) * up) @ p[L + "mlp.down_proj.weight"].T
    return _rms(residual, p["model.norm.weight"], eps) @ p["lm_head.weight"].T, residual


@pytest.mark.parametrize("name", list(export_hf.DRAFTS))
def test_draft_loads_into_sglang_eagle3_layout_and_equals_builtin(exported, target, name):
    from safetensors.torch import load_file

    out, _ = exported
    cfg = json.loads((out / name / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["num_hidden_layers"] == 1
    assert cfg["tie_word_embeddings"] is False and cfg["draft_vocab_size"] < cfg["vocab_size"]
    params = _sglang_eagle3_params(cfg)
    tensors = {k: (v.float() if v.is_floating_point() else v) for k, v in load_file(str(out / name / "model.safetensors")).items()}
    loaded, hot, unused = _sglang_load(tensors, params)
    assert not unused, unused
    assert {k: tuple(v.shape) for k, v in loaded.items()} == params  # every parameter, right shape
    builtin = load_draft(out / name, target)  # the built-in engine loads the export too
    assert torch.equal(hot, builtin.hot_token_id)
    assert torch.equal(tensors["t2d"].nonzero()[:, 0], torch.sort(hot).values)  # t2d marks the hot ids
    ids = cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    x = torch.tensor([PROMPT])
    pos = torch.arange(x.shape[1])
    with torch.no_grad():
        _, aux = target(x, pos[None], capture=capture_layers(ids, 8))
        toks = torch.tensor([PROMPT[1:] + [32]])  # draft position p consumes (token p+1, aux p)
        embeds = target.embed_tokens(toks)
        ref_logits, ref_h = builtin(embeds, aux, pos[None])
        got_logits, got_h = _sglang_draft_forward(loaded, cfg, embeds[0], aux[0], pos)
    assert (got_logits - ref_logits[0]).abs().max() <= 1e-5 * ref_logits.abs().max()
    assert (got_h - ref_h[0]).abs().max() <= 1e-5 * ref_h.abs().max()
