"""Slow end to end: `specwatch run-sweep` with engine = "sglang" launching the side env's real
`python -m sglang.launch_server` on a tiny random local Llama + EAGLE-3 draft made here (no
downloads), --device cpu. On this CPU machine SGLang gets through argument parsing, logs its real
`server_args={...}` line and dies at model construction: every config must end `failed` with that
real cause, its server_args stored, no process left, exit non-zero; a re-run retries the failed
configs and exits non-zero again."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from specwatch.db import query

from .conftest import SGLANG_PY, SPECWATCH_PY

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _tiny_models(root: Path) -> tuple[Path, Path]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    torch.manual_seed(0)
    target = root / "tiny-llama"
    LlamaForCausalLM(LlamaConfig(**cfg)).save_pretrained(target)
    draft = root / "tiny-eagle3"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps({
        **cfg, "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
        "num_hidden_layers": 1, "draft_vocab_size": 256,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 1, 2],
                         "use_aux_hidden_state": True}}))
    return target, draft


def _ours(marker: str) -> list[str]:
    """Command lines of live processes that mention this test's directory."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = (Path("/proc") / pid / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmd and "pytest" not in cmd:
            out.append(f"{pid}: {cmd[:200]}")
    return out


def test_real_sglang_launch_fails_with_its_real_cause_and_is_retried(tmp_path):
    target, draft = _tiny_models(tmp_path)
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f"""\
name = "real-sglang"
engine = "sglang"
launch_command = ["{SGLANG_PY}", "-m", "sglang.launch_server"]
model = "{target}"
draft_model = "{draft}"
server_flags = ["--device", "cpu", "--skip-tokenizer-init"]
concurrency = [1]
startup_timeout_s = 400

[workload]
num_prompts = 2
warmup_requests = 0
output_tokens = 8

[[config]]
name = "chain"
speculative_num_steps = 2
speculative_eagle_topk = 1
""")
    db, out = tmp_path / "e2e.duckdb", tmp_path / "out"
    cmd = [SPECWATCH_PY, "-m", "specwatch.cli", "run-sweep", str(sweep), "--db", str(db),
           "--out-dir", str(out)]
    first = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    text = first.stdout + first.stderr
    assert first.returncode != 0, text
    runs = query.run_sql(db, "SELECT run_id, config_name, status, failure_reason FROM runs "
                             "ORDER BY run_id").dicts()
    assert {r["config_name"] for r in runs} == {"baseline", "chain"}
    for r in runs:
        assert r["status"] == "failed", r
        # the real cause from SGLang's own log, not "exited with code -9" (SGLang kills its tree)
        assert r["failure_reason"].startswith("ModuleNotFoundError: No module named 'vllm'"), r
        assert r["failure_reason"] in text
    # SGLang 0.5.x logs do not print their version: the sweep records the launch interpreter's
    # (the aux-id capture rules doctor applies depend on it)
    installed = subprocess.run([SGLANG_PY, "-c", "import importlib.metadata as m; print(m.version('sglang'))"],
                               capture_output=True, text=True, check=True).stdout.strip()
    versions = query.run_sql(db, "SELECT DISTINCT sglang_version FROM config_summary").dicts()
    assert [v["sglang_version"] for v in versions] == [installed], versions
    cfgs = query.run_sql(db, "SELECT model_path, draft_model_path, speculative_algorithm, "
                             "speculative_num_steps FROM server_configs ORDER BY 2 NULLS FIRST"
                         ).dicts()
    assert [(c["model_path"], c["draft_model_path"], c["speculative_algorithm"],
             c["speculative_num_steps"]) for c in cfgs] == [
        (str(target), None, None, None), (str(target), str(draft), "EAGLE3", 2)]
    time.sleep(1)
    assert _ours(str(tmp_path)) == []
    logs_before = {p: p.stat().st_mtime_ns for p in out.rglob("server-*.log")}
    assert len(logs_before) == 2

    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert again.returncode != 0, again.stdout + again.stderr
    logs_after = set(out.rglob("server-*.log"))
    assert len(logs_after - set(logs_before)) == 2, "the re-run did not launch both configs again"
    rerun = query.run_sql(db, "SELECT status, failure_reason FROM runs").dicts()
    assert len(rerun) == 2 and all(r["status"] == "failed" and "No module named 'vllm'"
                                   in r["failure_reason"] for r in rerun)
    time.sleep(1)
    assert _ours(str(tmp_path)) == []
