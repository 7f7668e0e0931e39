"""doctor's schedule checks (diagnose/schedule.py) on logs the tests write and the real ingest
stores: a vLLM schedule under data parallelism, and SGLang's adaptive steps-0 slots with and
without SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND in specwatch's launch line."""
from __future__ import annotations

import json

import pytest

from conftest import SAMPLES
from specwatch.diagnose import doctor
from specwatch.logs import ingest

ARGS = (SAMPLES / "sglang-0.5.23-llama8b-eagle3-wrong-aux-ids.log").read_text().splitlines()[0]
DECODE = ("[2026-10-31 09:30:{s:02d}] Decode batch, #running-req: 8, #token: 4096, token usage: "
          "0.01, accept len: 3.10, accept rate: 0.70, cuda graph: True, gen throughput (token/s): "
          "900.00, #queue-req: 0")
VLLM_ARGS = ("(APIServer pid=1) INFO 09-04 10:58:01 [startup.py:96] non-default args: {{'model': "
             "'/models/Qwen3-8B', 'data_parallel_size': {dp}, 'speculative_config': {{'method': "
             "'eagle3', 'model': '/models/Qwen3-8B-EAGLE3', 'num_speculative_tokens': 5{sched}}}}}")
VLLM_SPEC = ("(APIServer pid=1) INFO 09-04 10:58:{s:02d} [metrics.py:100] SpecDecoding metrics: "
             "Mean acceptance length: 3.10, Accepted throughput: 50.00 tokens/s, Drafted "
             "throughput: 100.00 tokens/s, Accepted: 500 tokens, Drafted: 1000 tokens, "
             "Per-position acceptance rate: 0.800, 0.600, 0.400, 0.200, 0.100, Avg Draft "
             "acceptance rate: 50.0%")


def _findings(tmp_path, name, lines, code):
    log = tmp_path / f"{name}.log"
    log.write_text("\n".join(lines) + "\n")
    db = tmp_path / f"{name}.duckdb"
    ingest.ingest_paths(db, [str(log)], run=name)
    return [f for f in doctor.diagnose(db)[0] if f.code == code], log


def _adaptive_args(cfg_path):
    extra = "'speculative_adaptive': True" + (
        f", 'speculative_adaptive_config': '{cfg_path}'" if cfg_path else "")
    return ARGS[:-1] + ", " + extra + "}"


@pytest.mark.parametrize("env,config,severity", [
    ("SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1", {"1": [3], "8": [0]}, "warning"),
    ("SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=yes", {"1": [3], "4": [1, 0]}, "warning"),
    ("SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=True", None, "warning"),   # default config: 8/32/64
    ("SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=0", {"1": [3], "8": [0]}, None),
    ("SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=maybe", {"1": [3], "8": [0]}, None),  # SGLang: default
    ("SGLANG_LOG_MS=1", {"1": [3], "8": [0]}, None),         # specwatch launched it without it
    ("SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1", {"1": [3], "8": [1]}, None),   # no steps-0 slot
    (None, {"1": [3], "8": [0]}, "info"),                    # not launched by specwatch: unknown
], ids=["set-1", "set-yes", "default-config", "set-0", "invalid", "unset", "no-zero-slot",
        "env-unknown"])
def test_adaptive_steps0_cold_draft(tmp_path, env, config, severity):
    cfg_path = None
    if config is not None:
        cfg_path = tmp_path / "adaptive.json"
        cfg_path.write_text(json.dumps({k: {"candidate_steps": v} for k, v in config.items()}))
    lines = ([f"specwatch: launching env {env} python -m sglang.launch_server --model-path /m"]
             if env else []) + [_adaptive_args(cfg_path)] + [DECODE.format(s=s) for s in (51, 52, 53)]
    found, log = _findings(tmp_path, "adaptive", lines, "adaptive_steps0_cold_draft")
    if severity is None:
        assert found == []
        return
    assert [f.severity for f in found] == [severity]
    f = found[0]
    zero = [k for k, v in (config or {"8": [0], "32": [0], "64": [0]}).items() if 0 in v]
    assert f.evidence.numbers["steps0_slots"] == zero
    ref = f.evidence.rows[0]
    assert (ref.table, ref.file, ref.line_no) == ("server_configs", str(log), 2 if env else 1)


@pytest.mark.parametrize("dp,sched,expect", [
    (2, ", 'num_speculative_tokens_per_batch_size': [(1, 8, 5), (9, 64, 2)]", True),
    (4, ", 'num_speculative_tokens_per_batch_size': [[1, 64, 3]]", True),
    (1, ", 'num_speculative_tokens_per_batch_size': [(1, 8, 5), (9, 64, 2)]", False),
    (2, "", False),                                          # no schedule: nothing was dropped
], ids=["dp2", "dp4", "dp1", "dp2-static"])
def test_vllm_schedule_dropped_under_data_parallelism(tmp_path, dp, sched, expect):
    lines = [VLLM_ARGS.format(dp=dp, sched=sched)] + [VLLM_SPEC.format(s=s) for s in (10, 20)]
    found, log = _findings(tmp_path, "vllm", lines, "schedule_dropped_under_dp")
    assert bool(found) is expect
    if expect:
        f = found[0]
        assert f.severity == "warning" and f.evidence.numbers["data_parallel_size"] == dp
        assert (f.evidence.rows[0].file, f.evidence.rows[0].line_no) == (str(log), 1)
        assert "num_speculative_tokens" in f.suggestion
