"""Doctor: a config served with a lossy acceptance rule (`lossy_verification`). Real logs ingested
into a real DuckDB file: SGLang 0.5.23's EAGLE-3 sample (its `server_args=` dict prints both accept
thresholds) and a real vLLM 0.32 CPU log (its `non-default args:` line), each with the setting
written in as a user would have passed it. Lossless settings and logs that print no setting say
nothing. `recommend` leaves such a config out of a schedule, saying why."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from specwatch.db import store
from specwatch.diagnose import doctor, recommend
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


DRAFT = "/models/sglang-EAGLE3-LLaMA3.1-Instruct-8B"   # the sample log's draft and target
TARGET = "/models/Llama-3.1-8B-Instruct"


def _lossy_sweep(tmp_path: Path, single: str) -> Path:
    """A sweep at concurrency 1, three repeats each: the baseline, k=1 and k=3 (clearly fastest);
    every k=3 run's server log is the SGLang sample with threshold_single `single`."""
    tmp_path.mkdir()
    db = tmp_path / "sweep.duckdb"
    plan = {"baseline": (None, [100, 104, 96]), "s1": (1, [130, 134, 126]),
            "s3": (3, [170, 176, 164])}
    with store.writer(db) as con:
        for config, (steps, xs) in plan.items():
            for rep, x in enumerate(xs):
                spec = steps is not None
                store.upsert_run(con, dict(
                    run_id=f"lossy/{config}/r{rep}", run_name=f"{config}/r{rep}", origin="sweep",
                    sweep_name="lossy", config_name=config, concurrency=1, repeat_idx=rep,
                    status="ok", engine="sglang", model_path=TARGET, tp_size=1, dp_size=1,
                    is_baseline=not spec, speculative_algorithm="EAGLE3" if spec else None,
                    draft_model_path=DRAFT if spec else None, speculative_num_steps=steps,
                    speculative_eagle_topk=1 if spec else None,
                    speculative_num_draft_tokens=steps + 1 if spec else None,
                    output_tok_s=float(x), sampling_fingerprint="fp",
                    created_at=dt.datetime(2026, 12, 1, 10, rep)))
    text = SGLANG.read_text().replace(SINGLE, SINGLE.replace("1.0", single))
    for rep in range(3):
        log = tmp_path / f"s3-r{rep}.log"
        log.write_text(f"[2026-12-01 10:0{rep}:00] repeat {rep}\n" + text)
        ingest.ingest_paths(db, [str(log)], run=f"lossy/s3/r{rep}")
    return db


def test_recommend_leaves_a_lossy_config_out_with_its_reason(tmp_path):
    exact = recommend.recommend(_lossy_sweep(tmp_path / "exact", "1.0"), "sglang")
    assert [b.config for b in exact.bands] == ["s3"] and not exact.excluded
    db = _lossy_sweep(tmp_path / "lossy", "0.5")
    lossy = recommend.recommend(db, "sglang")
    assert [b.config for b in lossy.bands] == ["s1"]
    (why,) = [e["reason"] for e in lossy.excluded if e["config"] == "s3"]
    assert "lossy" in why and "thresholds below 1.0" in why
    # the verdict stays (its throughput is real) and its reason says under which rule
    with store.reader(db) as con:
        got = dict(con.execute("SELECT config, lossy_verification FROM config_stats").fetchall())
        assert got == {"baseline": False, "s1": False, "s3": True}
        verdict, reason = con.execute("SELECT verdict, verdict_reason FROM config_stats "
                                      "WHERE config = 's3'").fetchone()
    assert verdict == "pays" and "measured under a lossy acceptance rule" in reason
    findings, _ = doctor.diagnose(str(db))
    assert {f.run_id for f in findings if f.code == "lossy_verification"} == {
        f"lossy/s3/r{i}" for i in range(3)}
