"""specwatch align on synthetic hidden-state dumps with known layer offsets, on the built-in
target's real dump, and on broken files (errors name the file and tensor)."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from conftest import run_cli
from specwatch.diagnose import align
from specwatch.engine import models_dir


def _stack(num_layers=8, tokens=96, d=64, seed=0, orthogonal=True) -> torch.Tensor:
    """[T, L+1, d]: an embedding-sized start, then each layer = random orthogonal map of the
    previous state plus a growing update (so RMS rises with depth and neighbours stay correlated)."""
    g = torch.Generator().manual_seed(seed)
    h = [torch.randn(tokens, d, generator=g) * 0.05]
    for k in range(num_layers):
        q = torch.linalg.qr(torch.randn(d, d, generator=g))[0] if orthogonal else torch.eye(d)
        mix = 0.9 * h[-1] + 0.1 * h[-1] @ q
        h.append(mix + torch.randn(tokens, d, generator=g) * (0.5 + 0.15 * k))
    return torch.stack(h, dim=1)


def _save(path, layers, captured_layers, configured_ids=None, dtype=torch.bfloat16):
    t = {f"layer_{k - 1}": layers[:, k].contiguous() for k in range(layers.shape[1])}
    t["aux"] = torch.cat([layers[:, k + 1] for k in captured_layers], dim=-1).to(dtype).contiguous()
    meta = {"layer_ids": json.dumps(configured_ids)} if configured_ids is not None else None
    save_file(t, str(path), metadata=meta)
    return path


@pytest.mark.parametrize("configured, captured", [
    ([1, 3, 5], [1, 3, 5]),        # correct
    ([-1, 1, 3], [1, 3, 5]),       # slot shift: the draft's training layers vs a shifted config
    ([1, 3, 5], [2, 4, 6]),        # SGLang's +1 convention applied twice
    ([2, 4, 6], [1, 3, 5]),        # ids written in the input-of-layer convention
    ([0, 3, 6], [-1, 3, 6]),       # embedding output captured
])
def test_each_segment_matches_its_known_layer_and_offset(tmp_path, configured, captured):
    layers = _stack()
    f = _save(tmp_path / "both.safetensors", layers, captured, configured)
    res = align.align_files(f, f)
    assert res.captured_layers == captured
    assert res.configured_ids == configured
    assert res.offsets == [c - i for c, i in zip(captured, configured)]
    assert res.suggested_ids == captured
    assert all(s.confirmed for s in res.segments) and res.problems == []
    assert res.matches_config is (captured == configured)


def test_separate_torch_files_read_the_stored_ids_and_explicit_ids_override_them(tmp_path):
    layers = _stack(num_layers=6, d=48, seed=3, orthogonal=False)
    dump = tmp_path / "layers.pt"
    torch.save({f"layer_{k - 1}": layers[:, k] for k in range(7)}, dump)
    cap = tmp_path / "cap.pt"
    torch.save({"aux": torch.cat([layers[:, 1], layers[:, 3], layers[:, 5]], -1),
                "layer_ids": torch.tensor([1, 3, 5])}, cap)
    res = align.align_files(dump, cap)
    # id 5 on a 6-layer Llama names the input of layer 6, which does not exist: SGLang's Llama
    # forward captures nothing for it (tests/contract checks the rule), so it has no offset
    assert res.captured_layers == [0, 2, 4] and res.offsets == [-1, -1, None]
    res2 = align.align_files(dump, cap, configured_ids=[0, 2, 4])
    assert res2.matches_config


def test_rescaled_capture_is_not_confirmed(tmp_path):
    """Cosine alone would pick the layer; the RMS profile says the capture is not that layer's
    state as served (normalised or rescaled), so no ids are suggested."""
    layers = _stack()
    t = {f"layer_{k - 1}": layers[:, k].contiguous() for k in range(9)}
    t["aux"] = torch.cat([layers[:, 2] * 4.0, layers[:, 4], layers[:, 6]], -1)
    save_file(t, str(tmp_path / "x.safetensors"))
    res = align.align_files(tmp_path / "x.safetensors", tmp_path / "x.safetensors")
    assert res.captured_layers == [1, 3, 5]
    assert not res.segments[0].confirmed and res.suggested_ids is None
    assert "RMS" in res.problems[0]


def test_cli_text_and_json_name_the_offset_and_exit_1_on_mismatch_0_on_match(tmp_path):
    layers = _stack()
    f = _save(tmp_path / "d.safetensors", layers, [1, 3, 5], [-1, 1, 3])
    text = run_cli("align", "--dump", f, "--capture", f, check=False)
    assert text.returncode == 1
    assert "offset per id [2, 2, 2]" in text.stdout and "[1, 3, 5]" in text.stdout
    js = run_cli("align", "--dump", f, "--capture", f, "--format", "json", check=False)
    out = json.loads(js.stdout)
    assert out["captured_layers"] == [1, 3, 5] and out["suggested_ids"] == [1, 3, 5]
    assert out["matches_config"] is False and len(out["cosine"]) == 3 and len(out["cosine"][0]) == 9
    ok = _save(tmp_path / "ok.safetensors", layers, [1, 3, 5], [1, 3, 5])
    assert run_cli("align", "--dump", ok, "--capture", ok, check=False).returncode == 0


def test_shape_errors_name_file_and_tensor(tmp_path):
    layers = _stack(d=64)
    dump = tmp_path / "dump.safetensors"
    save_file({f"layer_{k - 1}": layers[:, k].contiguous() for k in range(9)}, str(dump))
    wide = tmp_path / "wide.safetensors"
    save_file({"aux": torch.zeros(96, 100)}, str(wide))
    with pytest.raises(align.AlignError, match=r"wide\.safetensors: tensor aux is 100 wide.*d=64"):
        align.align_files(dump, wide)
    short = tmp_path / "short.safetensors"
    save_file({"aux": torch.zeros(10, 192)}, str(short))
    with pytest.raises(align.AlignError, match=r"short\.safetensors: tensor aux has 10 rows.*96"):
        align.align_files(dump, short)
    gap = tmp_path / "gap.safetensors"
    save_file({"layer_-1": torch.zeros(4, 8), "layer_1": torch.zeros(4, 8), "aux": torch.zeros(4, 24)}, str(gap))
    with pytest.raises(align.AlignError, match=r"gap\.safetensors: layer tensors \[-1, 1\].*missing \[0\]"):
        align.align_files(gap, gap)
    bad = tmp_path / "bad.safetensors"
    save_file({"layer_-1": torch.zeros(4, 8), "layer_0": torch.zeros(4, 9), "aux": torch.zeros(4, 24)}, str(bad))
    with pytest.raises(align.AlignError, match=r"bad\.safetensors: tensor layer_0 has shape \(4, 9\)"):
        align.align_files(bad, bad)
    with pytest.raises(align.AlignError, match=r"dump\.safetensors: no tensor named aux"):
        align.align_files(dump, dump)
    proc = run_cli("align", "--dump", dump, "--capture", wide, check=False)
    assert proc.returncode == 2 and "wide.safetensors: tensor aux" in proc.stderr


def test_builtin_target_dump_matches_its_ids(tmp_path):
    """The engine's own dump (real target, SGLang convention): ids [-1, 1, 3] capture exactly the
    embedding output and layers 1 and 3, and the per-layer RMS grows with depth."""
    from specwatch.engine.model import dump_hidden_states

    text = b"The module level should accept one argument which is the name of the file."
    out = tmp_path / "dump.safetensors"
    dump_hidden_states(models_dir() / "target", [list(text), list(text[::-1])], out, [-1, 1, 3])
    res = align.align_files(out, out)
    assert res.configured_ids == [-1, 1, 3] and res.captured_layers == [-1, 1, 3]
    assert res.matches_config and all(s.cosine > 0.999 for s in res.segments)
    assert res.layer_rms[0] < res.layer_rms[1] < res.layer_rms[-1]


def test_probe_finds_the_ids_the_builtin_draft_was_trained_on():
    """engine/models/README.md: draft-eagle3 was trained on [1, 3, 5]; served with the slot shift
    [-1, 1, 3] its step-1 agreement collapses, and the probe names [1, 3, 5]."""
    d = models_dir() / "draft-eagle3"
    if not (d / "model.safetensors").is_file():
        pytest.skip("built-in draft weights not present")
    shifted = align.probe_draft_ids(models_dir() / "target", d, [-1, 1, 3])
    assert shifted.best_ids == [1, 3, 5]
    assert shifted.best_agreement - shifted.served_agreement > 0.2
    assert shifted.capture_check.captured_layers == [-1, 1, 3]   # the engine captured what it was told
    right = align.probe_draft_ids(models_dir() / "target", d, [1, 3, 5])
    assert right.best_ids == [1, 3, 5] and right.served_agreement == right.best_agreement


def test_suggested_ids_follow_the_targets_sglang_rule(tmp_path):
    """Same capture (outputs of layers 1, 3, 5): a Llama-family target wants ids [1, 3, 5]; a
    DeepseekV3-family one (index = id unless the first id is 1) wants [2, 4, 6]; there, configured
    [2, 4, 6] matches and [-1, 2, 4] does not (-1 captures nothing: no offset for it)."""
    from specwatch import aux_layers
    layers = _stack()
    f = _save(tmp_path / "cap.safetensors", layers, [1, 3, 5])
    aux = align.load_tensors(f)[0]["aux"]
    stack = align.layer_stack(align.load_tensors(f)[0], f)
    llama = align.align(stack, aux, [1, 3, 5], rule=aux_layers.PLUS_ONE)
    assert llama.suggested_ids == [1, 3, 5] and llama.matches_config is True
    ds_rule = aux_layers.rule("DeepseekV3ForCausalLM")
    ds = align.align(stack, aux, [2, 4, 6], rule=ds_rule)
    assert ds.suggested_ids == [2, 4, 6] and ds.matches_config is True
    assert "only when the first id is 1" in align.render_text(ds)
    wrong = align.align(stack, aux, [-1, 2, 4], rule=ds_rule)
    assert wrong.offsets == [None, 2, 2] and wrong.matches_config is None
