"""Built-in engine models: tokenizer, committed model dirs, aux capture convention, hidden dumps."""

from __future__ import annotations

import json
import sys

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

from specwatch.engine import tokenizer  # noqa: E402
from specwatch.engine.decode import SpecDecoder  # noqa: E402
from specwatch.engine.model import (capture_layers, dump_hidden_states, load_draft, load_target,  # noqa: E402
                                    models_dir, save_model)
from specwatch.engine.train import CORPUS_PATH, build_corpus  # noqa: E402

TARGET = models_dir() / "target"
DRAFT = models_dir() / "draft-eagle3"
SHIFTED = models_dir() / "draft-eagle3-shifted"


def test_tokenizer_roundtrip_and_incremental_utf8():
    text = "héllo → wörld ✓"
    ids = tokenizer.encode(text)
    assert ids == list(text.encode("utf-8")) and all(0 <= i < 256 for i in ids)
    assert tokenizer.decode(ids) == text
    dec = tokenizer.IncrementalDecoder()
    pieces = [dec.push([i]) for i in ids]
    assert "".join(pieces) + dec.flush() == text
    # the 3-byte arrow is held back until its last byte arrives
    arrow = text.index("→")
    start = len("héllo ".encode())
    assert pieces[start] == "" and pieces[start + 1] == "" and pieces[start + 2] == text[arrow]


def test_model_dirs_have_hf_configs():
    t = json.loads((TARGET / "config.json").read_text())
    assert t["architectures"] == ["LlamaForCausalLM"]
    assert (t["hidden_size"], t["num_hidden_layers"], t["vocab_size"]) == (256, 8, 256)
    for path, ids in ((DRAFT, [1, 3, 5]), (SHIFTED, [-1, 1, 3])):
        d = json.loads((path / "config.json").read_text())
        assert d["architectures"] == ["LlamaForCausalLMEagle3"]
        assert d["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == ids
        assert d["eagle_config"]["use_aux_hidden_state"] is True
        assert d["draft_vocab_size"] < 256  # a real draft vocab with a d2t map
    # the shifted pair serves the very same weights
    assert (DRAFT / "model.safetensors").read_bytes() == (SHIFTED / "model.safetensors").read_bytes()
    total = sum(p.stat().st_size for p in models_dir().rglob("*.safetensors"))
    assert total < 25e6


def test_draft_d2t_maps_into_target_vocab():
    target = load_target(TARGET)
    draft = load_draft(DRAFT, target)
    hot = draft.hot_token_id
    assert hot.shape == (draft.cfg.draft_vocab_size,)
    assert len(set(hot.tolist())) == len(hot) and 0 <= int(hot.min()) and int(hot.max()) < 256
    raw = safetensors_torch.load_file(str(DRAFT / "model.safetensors"))
    assert raw["d2t"].dtype == torch.int64 and "fc.weight" in raw and raw["fc.weight"].shape == (256, 768)
    assert "midlayer.self_attn.q_proj.weight" in raw and "embed_tokens.weight" not in raw


def test_aux_capture_follows_sglang_convention():
    """aux id k = output of layer k (= input of layer k+1); -1 = embedding output."""
    target = load_target(TARGET)
    x = torch.tensor([tokenizer.encode("The return statement leaves the function")])
    pos = torch.arange(x.shape[1])[None]
    # Layer outputs computed by hand, independently of the capture code.
    cos, sin = target.rope(pos)
    outs = {-1: target.embed_tokens(x)}
    h = outs[-1]
    for i, layer in enumerate(target.layers):
        h = layer(h, cos, sin, None, i)
        outs[i] = h
    for ids in ([1, 3, 5], [-1, 1, 3], [0, 2, 6]):
        _, aux = target(x, pos, capture=capture_layers(ids, 8))
        want = torch.cat([outs[i] for i in ids], dim=-1)
        torch.testing.assert_close(aux, want, rtol=0, atol=0)


@pytest.mark.parametrize("ids", [[1, 3, 7], [-2, 1, 3], [2, 4, 8]])
def test_out_of_range_aux_ids_raise_clear_error(ids):
    with pytest.raises(ValueError, match=r"outside \[-1, 6\]"):
        capture_layers(ids, 8)
    with pytest.raises(ValueError, match="eagle_aux_hidden_state_layer_ids"):
        SpecDecoder(TARGET, DRAFT, aux_layer_ids=ids)


def test_draft_config_with_bad_ids_is_rejected(tmp_path):
    target = load_target(TARGET)
    cfg = json.loads((DRAFT / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [2, 4, 7]
    bad = tmp_path / "bad-draft"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps(cfg))
    (bad / "model.safetensors").write_bytes((DRAFT / "model.safetensors").read_bytes())
    with pytest.raises(ValueError, match=r"config.json.*\[2, 4, 7\].*outside"):
        load_draft(bad, target)


def test_save_load_roundtrip_is_exact(tmp_path):
    target = load_target(TARGET)
    save_model(target, tmp_path / "t")
    again = load_target(tmp_path / "t")
    for (n1, p1), (n2, p2) in zip(target.state_dict().items(), again.state_dict().items()):
        assert n1 == n2 and torch.equal(p1, p2)


def test_dump_hidden_states(tmp_path):
    prompts = [tokenizer.encode("Assignment statements"), tokenizer.encode("The if statement")]
    out = tmp_path / "h.safetensors"
    dump_hidden_states(TARGET, prompts, out, [1, 3, 5])
    t = safetensors_torch.load_file(str(out))
    T = sum(len(p) for p in prompts)
    assert sorted(k for k in t if k.startswith("layer_")) == sorted(f"layer_{k}" for k in range(-1, 8))
    assert t["layer_-1"].shape == (T, 256) and t["aux"].shape == (T, 768)
    torch.testing.assert_close(t["aux"], torch.cat([t["layer_1"], t["layer_3"], t["layer_5"]], -1))
    assert t["seq_start"].tolist() == [0, len(prompts[0])]
    assert t["input_ids"].tolist() == prompts[0] + prompts[1]
    # norms grow with depth; the embedding output is far smaller (engine.md §4)
    rms = [t[f"layer_{k}"].pow(2).mean().sqrt().item() for k in range(-1, 8)]
    assert rms[0] < 0.2 * rms[2]


@pytest.mark.skipif(sys.version_info[:3] != (3, 11, 7), reason="pydoc topics text differs between CPython releases")
def test_corpus_file_is_the_filtered_pydoc_topics():
    import pydoc_data.topics

    assert build_corpus(pydoc_data.topics.topics) == CORPUS_PATH.read_bytes()
