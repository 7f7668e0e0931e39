"""Export the built-in engine's committed models to checkpoints that real SGLang and transformers load.

    python -m specwatch.engine.export_hf [OUT_DIR]      # default: ./exported-models (git-ignored)

Writes, deterministically (same bytes on every run, from the committed weights only):
- `target/`: `LlamaForCausalLM` (HF Llama config, `model.safetensors` with HF names, the committed
  fp16 tensors unchanged), and a byte-level tokenizer (`tokenizer.json`, `tokenizer_config.json`)
  that transformers loads offline: token id = UTF-8 byte, no special tokens, no BOS/EOS added, as
  `specwatch.engine.tokenizer`.
- `draft-eagle3/`: SGLang's `LlamaForCausalLMEagle3` layout (sglang 0.5.12
  python/sglang/srt/models/llama_eagle3.py): `fc.weight`, `midlayer.*` (SGLang maps the legacy
  `midlayer` prefix to `layers.0` and adds `model.`), `norm.weight`, `lm_head.weight` over the
  draft vocab, and the vocab maps `d2t` (int64, target id = draft id + d2t[draft id]; SGLang builds
  hot_token_id = d2t + arange) and `t2d` (bool [V], which target ids the draft vocab holds; SGLang
  skips it). No `embed_tokens`: SGLang's EAGLE worker calls `set_embed` with the target's embedding
  (eagle_worker.py), exactly what the built-in draft does (shared, frozen).
- `draft-eagle3-shifted/`: the same draft served with aux ids [-1, 1, 3] (the slot-shift incident),
  and `draft-eagle3-minus1/`: ids [0, 2, 4] (every id one layer early). See "differences" below.
- `MANIFEST.json`: sha256 of every file written and of the committed source weights.

Architecture facts, checked against sglang 0.5.12 (llama.py, llama_eagle3.py, eagle_worker.py):
- Target: RoPE theta 1e4, neox (rotate-half) layout, RMSNorm eps 1e-5, untied lm_head, MHA
  (num_key_value_heads = num_attention_heads), head_dim 64, SiLU-gated MLP: plain HF Llama.
- Aux capture: SGLang Llama captures `hidden_states + residual` before layer id+1, i.e. the output
  of layer id (`set_eagle3_layers_to_capture`: layers_to_capture = [id + 1]); the built-in target
  does the same (model.capture_layers).
- Draft layer input: cat([input_layernorm(embed), hidden_norm(fc(aux))]) with fc(aux) as the
  residual; the pre-norm residual stream is fed back to the next draft step (norm_output false).

Differences between the engines that the export cannot remove (stated so a divergence is explained):
- dtype: the committed weights are fp16; the built-in engine computes in fp32, SGLang in the
  config's torch_dtype (float16) unless `--dtype` says otherwise. Greedy outputs can differ at
  near-ties.
- aux id -1 (`draft-eagle3-shifted`): sglang 0.5.12 llama.py captures `hidden_states + residual`
  and `residual` is None before layer 0, so serving ids [-1, ...] on a Llama target fails in SGLang
  (TypeError; measured on the H200, 2026-12-02) where the built-in engine, like SGLang 0.5.23,
  serves the embedding output. `draft-eagle3-minus1` is a
  misconfiguration that SGLang can run.
- bos/eos: none (byte vocab). The configs say `bos_token_id`/`eos_token_id` null so that SGLang does
  not stop at byte 2 (HF Llama's default eos id); the built-in engine has no EOS either.

Not a trainer and not a converter for other models: it exports the committed built-in models only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from specwatch.engine import models_dir

DRAFTS = {  # exported dir -> (committed dir, aux ids override or None)
    "draft-eagle3": ("draft-eagle3", None),
    "draft-eagle3-shifted": ("draft-eagle3-shifted", None),
    "draft-eagle3-minus1": ("draft-eagle3", [0, 2, 4]),
}
DEFAULT_OUT = Path("exported-models")


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable-character table (what the ByteLevel pre-tokenizer emits)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def tokenizer_json() -> str:
    """A `tokenizers` JSON whose ids are the UTF-8 bytes: ByteLevel (no regex split, no prefix
    space), a BPE over the 256 byte characters with no merges, no normalizer, no post-processor."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    table = bytes_to_unicode()
    tok = Tokenizer(models.BPE(vocab={table[b]: b for b in range(256)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return json.dumps(json.loads(tok.to_str()), indent=2, ensure_ascii=False) + "\n"


def _tokenizer_config(max_len: int) -> dict:
    return {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_len,
            "clean_up_tokenization_spaces": False, "add_bos_token": False, "add_eos_token": False,
            "bos_token": None, "eos_token": None, "pad_token": None, "unk_token": None}


def _hf_config(src: Path, aux_ids: list[int] | None) -> dict:
    cfg = json.loads((src / "config.json").read_text())
    cfg.pop("tokenizer", None)  # the built-in engine's note; not an HF field
    cfg.update({"bos_token_id": None, "eos_token_id": None, "pad_token_id": None,
                "attention_bias": False, "mlp_bias": False, "rope_scaling": None,
                "torch_dtype": "float16"})
    if aux_ids is not None:
        cfg["eagle_config"] = dict(cfg["eagle_config"], eagle_aux_hidden_state_layer_ids=list(aux_ids))
    return dict(sorted(cfg.items()))


def _draft_tensors(src: Path) -> dict:
    """The committed draft tensors (already SGLang/HF names) plus t2d."""
    import torch
    from safetensors.torch import load_file

    tensors = load_file(str(src / "model.safetensors"))
    d2t = tensors["d2t"]
    target_vocab = json.loads((src / "config.json").read_text())["vocab_size"]
    t2d = torch.zeros(target_vocab, dtype=torch.bool)
    t2d[d2t + torch.arange(d2t.shape[0])] = True
    tensors["t2d"] = t2d
    return tensors


def _write(path: Path, data: bytes, manifest: dict, root: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    manifest[str(path.relative_to(root))] = hashlib.sha256(data).hexdigest()


def export(out: Path, source: Path | None = None) -> dict:
    """Write the export under `out` (files are overwritten, nothing else is touched). Returns the manifest."""
    from safetensors.torch import load_file, save

    source = Path(source) if source is not None else models_dir()
    out = Path(out)
    files: dict[str, str] = {}
    tok = tokenizer_json().encode()
    target_cfg = _hf_config(source / "target", None)
    tok_cfg = (json.dumps(_tokenizer_config(target_cfg["max_position_embeddings"]), indent=2) + "\n").encode()

    def add_tokenizer(d: Path) -> None:
        _write(d / "tokenizer.json", tok, files, out)
        _write(d / "tokenizer_config.json", tok_cfg, files, out)

    t = out / "target"
    _write(t / "config.json", (json.dumps(target_cfg, indent=2) + "\n").encode(), files, out)
    tensors = load_file(str(source / "target" / "model.safetensors"))
    _write(t / "model.safetensors", save(dict(sorted(tensors.items())), metadata={"format": "pt"}), files, out)
    add_tokenizer(t)
    for name, (src_name, ids) in DRAFTS.items():
        d, src = out / name, source / src_name
        _write(d / "config.json", (json.dumps(_hf_config(src, ids), indent=2) + "\n").encode(), files, out)
        tensors = _draft_tensors(src)
        _write(d / "model.safetensors", save(dict(sorted(tensors.items())), metadata={"format": "pt"}), files, out)
        add_tokenizer(d)
    manifest = {
        "what": "built-in engine models exported for real SGLang / transformers (specwatch.engine.export_hf)",
        "source_weights_sha256": {p.parent.name: hashlib.sha256(p.read_bytes()).hexdigest()
                                  for p in sorted(source.glob("*/model.safetensors"))},
        "files_sha256": dict(sorted(files.items())),
    }
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?", default=str(DEFAULT_OUT), help="output folder (default ./exported-models)")
    args = ap.parse_args(argv)
    manifest = export(Path(args.out))
    for name, digest in manifest["files_sha256"].items():
        print(f"{digest[:12]}  {Path(args.out) / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
