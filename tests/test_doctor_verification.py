"""Doctor: a config served with a lossy acceptance rule (`lossy_verification`). Real logs ingested
into a real DuckDB file: SGLang 0.5.23's EAGLE-3 sample (its `server_args=` dict prints both accept
thresholds) and a real vLLM 0.32 CPU log (its `non-default args:` line), each with the setting
written in as a user would have passed it. Lossless settings and logs that print no setting say
nothing."""
from __future__ import annotations

from pathlib import Path

import pytest

from specwatch.diagnose import doctor
from specwatch.logs import ingest

ROOT = Path(__file__).resolve().parent.parent
SGLANG = ROOT / "sample_logs" / "sglang-0.5.23-llama8b-eagle3-s3k1.log"
VLLM = ROOT / "tests" / "data" / "vllm" / "eagle3-cpu-0.32.0.log"
SINGLE, ACC = "'speculative_accept_threshold_single': 1.0", "'speculative_accept_threshold_acc': 1.0"


def _diagnose(tmp_path: Path, text: str) -> list:
    tmp_path.mkdir(exist_ok=True)
    log = tmp_path / "server.log"
    log.write_text(text)
    db = tmp_path / "s.duckdb"
    ingest.ingest_paths(db, [str(log)])
    findings, checked = doctor.diagnose(str(db))
    assert checked, "the log's speculative config was checked"
    return [f for f in findings if f.code == "lossy_verification"]


def _line_at(ref) -> str:
    return Path(ref.file).read_bytes()[ref.byte_offset:].split(b"\n", 1)[0].decode()


@pytest.mark.parametrize("single,acc,relaxed", [
    ("0.5", "1.0", {"speculative_accept_threshold_single": 0.5}),
    ("1.0", "0.85", {"speculative_accept_threshold_acc": 0.85}),
    ("0.3", "0.6", {"speculative_accept_threshold_single": 0.3,
                    "speculative_accept_threshold_acc": 0.6}),
])
def test_relaxed_sglang_thresholds_are_a_lossy_rule(tmp_path, single, acc, relaxed):
    text = SGLANG.read_text()
    assert SINGLE in text and ACC in text
    text = text.replace(SINGLE, SINGLE.replace("1.0", single)).replace(ACC, ACC.replace("1.0", acc))
    (f,) = _diagnose(tmp_path, text)
    assert f.severity == "warning"
    n = f.evidence.numbers
    assert n["speculative_accept_threshold_single"] == float(single)
    assert n["speculative_accept_threshold_acc"] == float(acc)
    assert n["accept_len"] is not None and f"{n['accept_len']:.2f}" in f.title
    for k, v in relaxed.items():
        assert f"{k}={v:g}" in f.title
    (ref,) = f.evidence.rows
    line = _line_at(ref)
    assert ref.table == "server_configs" and "server_args=" in line and \
        f"'speculative_accept_threshold_single': {single}" in line


def test_default_sglang_thresholds_and_a_log_without_them_say_nothing(tmp_path):
    assert _diagnose(tmp_path / "a", SGLANG.read_text()) == []
    older = SGLANG.read_text().replace(SINGLE + ", ", "").replace(ACC + ", ", "")
    assert SINGLE not in older and ACC not in older
    assert _diagnose(tmp_path / "b", older) == []


@pytest.mark.parametrize("method,lossy", [("fly", True), ("standard", False), ("block", False)])
def test_vllm_fly_is_a_lossy_rule_standard_and_block_are_not(tmp_path, method, lossy):
    models = tmp_path / "models"
    text = VLLM.read_text().replace("MODEL_DIR", str(models))
    old = "'num_speculative_tokens': 3}}"
    assert old in text
    text = text.replace(old, f"'num_speculative_tokens': 3, 'rejection_sample_method': "
                             f"'{method}'}}}}")
    got = _diagnose(tmp_path, text)
    if not lossy:
        assert got == []
        return
    (f,) = got
    assert f.severity == "warning" and "rejection_sample_method='fly'" in f.title
    assert f.evidence.numbers["rejection_sample_method"] == "fly"
    (ref,) = f.evidence.rows
    assert "non-default args:" in _line_at(ref) and "'rejection_sample_method': 'fly'" in \
        _line_at(ref)


def test_a_vllm_log_that_prints_no_method_says_nothing(tmp_path):
    (tmp_path / "models").mkdir()
    assert _diagnose(tmp_path, VLLM.read_text().replace("MODEL_DIR", str(tmp_path / "models"))) == []
