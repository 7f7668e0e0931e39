"""Doctor across engines: a real vLLM 0.32 log (tests/data/vllm, EAGLE-3 on CPU, its aux-layer line
`Using auxiliary layers from speculative config: (0, 1, 2)`) ingested into a real DuckDB file, with
the model directories it names written here in several shapes. vLLM captures at the ids as given,
SGLang at id + 1: doctor says what each engine feeds the draft and which ids make vLLM capture
what SGLang does; nothing when the architecture or depth is unknown. Expected layers are written
out by hand from the two engines' capture loops, not computed by aux_layers."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from specwatch.diagnose import doctor
from specwatch.logs import ingest

LOG = Path(__file__).parent / "data" / "vllm" / "eagle3-cpu-0.32.0.log"


def _store(tmp_path: Path, arch: str | None, layers: int | None) -> Path:
    models = tmp_path / "models"
    for name, cfg in (("tiny-llama", {"architectures": [arch] if arch else None,
                                      "num_hidden_layers": layers}),
                      ("tiny-eagle3-vllm", {"architectures": ["LlamaForCausalLMEagle3"],
                                            "eagle_config": {
                                                "eagle_aux_hidden_state_layer_ids": [0, 1, 2]}})):
        (models / name).mkdir(parents=True)
        (models / name / "config.json").write_text(json.dumps(
            {k: v for k, v in cfg.items() if v is not None}))
    log = tmp_path / "server.log"
    log.write_text(LOG.read_text().replace("MODEL_DIR", str(models)))
    db = tmp_path / "s.duckdb"
    ingest.ingest_paths(db, [str(log)])
    return db


@pytest.mark.parametrize("arch,layers,vllm_out,sglang_out,same", [
    # vLLM: index = id, index i = output of layer i-1 (0 = embedding, L = the last layer's)
    # SGLang (Llama, Qwen2): index = id + 1, so id k = output of layer k
    ("LlamaForCausalLM", 4, [-1, 0, 1], [0, 1, 2], [1, 2, 3]),
    ("LlamaForCausalLM", 32, [-1, 0, 1], [0, 1, 2], [1, 2, 3]),
    ("Qwen2ForCausalLM", 8, [-1, 0, 1], [0, 1, 2], [1, 2, 3]),
    # 3 layers: SGLang's id 2 is index 3, which its loop never reaches (captures nothing), so
    # no id list makes vLLM capture what SGLang does
    ("Qwen3ForCausalLM", 3, [-1, 0, 1], [0, 1, None], None),
])
def test_a_vllm_run_is_told_what_the_same_ids_capture_on_sglang(tmp_path, arch, layers,
                                                                 vllm_out, sglang_out, same):
    findings, _ = doctor.diagnose(str(_store(tmp_path, arch, layers)))
    (f,) = [f for f in findings if f.code == "engine_aux_capture"]
    n = f.evidence.numbers
    assert n["served_ids"] == [0, 1, 2] and n["draft_config_ids"] == [0, 1, 2]
    assert (n["vllm_outputs"], n["sglang_outputs"], n["ids_for_sglang_capture_on_vllm"]) == (
        vllm_out, sglang_out, same)
    assert f.severity in ("info", "warning")
    assert (str(same) in f.suggestion) if same else "serve it on vLLM with ids" not in f.suggestion
    (ref,) = f.evidence.rows
    line = Path(ref.file).read_bytes()[ref.byte_offset:].split(b"\n", 1)[0].decode()
    assert ref.table == "server_configs" and line.endswith(   # the real aux-layer line
        "Using auxiliary layers from speculative config: (0, 1, 2)")


@pytest.mark.parametrize("arch,layers", [
    ("MysteryForCausalLM", 4),      # no verified vLLM rule for it
    (None, 4),                      # config.json without architectures
    ("LlamaForCausalLM", None),     # depth unknown
])
def test_nothing_is_said_when_a_fact_is_missing(tmp_path, arch, layers):
    findings, _ = doctor.diagnose(str(_store(tmp_path, arch, layers)))
    assert [f for f in findings if f.code == "engine_aux_capture"] == []
