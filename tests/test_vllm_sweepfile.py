"""`engine = "vllm"` sweep files: vLLM's keys, what is refused where (file:line), the stored chain
equivalent, and the command line with its --speculative-config JSON. Real vLLM checks these
argv in tests/contract_vllm; here no vLLM is needed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from specwatch.run import launch, sweepfile, vllm_config
from specwatch.run.sweepfile import SweepFileError

ROOT = Path(__file__).resolve().parent.parent
HEAD = """\
name = "v"
engine = "vllm"
model = "/models/target"
draft_model = "/models/eagle3"
concurrency = [1]
"""


def load(text: str, tmp_path: Path):
    p = tmp_path / "sweep.toml"
    p.write_text(text)
    return sweepfile.load(p)


def spec_of(argv: list[str]) -> dict | None:
    return json.loads(argv[argv.index("--speculative-config") + 1]) \
        if "--speculative-config" in argv else None


def test_example_expands_to_baseline_eagle3_and_ngram_with_their_speculative_configs():
    s = sweepfile.load(ROOT / "examples" / "vllm_cpu_sweep.toml")
    assert [c.name for c in s.configs] == ["baseline", "eagle3-k3", "ngram-k3"]
    base, eagle, ngram = s.configs
    assert s.engine == "vllm" and s.skipped == ()
    # stored as SGLang's equivalent chain: steps = k, topk = 1, draft tokens = k + 1
    for c in (eagle, ngram):
        assert (c.speculative_num_steps, c.speculative_eagle_topk,
                c.speculative_num_draft_tokens) == (3, 1, 4)
    assert eagle.speculative_algorithm == "eagle3" and ngram.draft_model is None
    assert spec_of(launch.command("vllm", base, 8000)) is None
    assert spec_of(launch.command("vllm", ngram, 8000)) == {
        "method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3,
        "prompt_lookup_min": 2}


@pytest.mark.parametrize("method,draft,expect_model", [
    ("eagle3", True, True), ("eagle", True, True), ("draft_model", True, True),
    ("ngram", True, False), ("suffix", True, False), ("mtp", False, False),
])
def test_each_method_gets_a_draft_model_only_when_it_takes_one(tmp_path, method, draft,
                                                              expect_model):
    head = HEAD if draft else HEAD.replace('draft_model = "/models/eagle3"\n', "")
    s = load(head + f'[[config]]\nspeculative_algorithm = "{method}"\n'
             "num_speculative_tokens = 2\n", tmp_path)
    c = s.configs[1]
    argv = launch.command("vllm", c, 8123, draft_path="/run/draft" if expect_model else None)
    spec = spec_of(argv)
    assert spec["method"] == method and spec["num_speculative_tokens"] == 2
    assert ("model" in spec) == expect_model
    if expect_model:
        assert spec["model"] == "/run/draft"          # the aux-ids copy, when there is one
    assert argv[argv.index("--model") + 1] == "/models/target"
    assert argv[argv.index("--port") + 1] == "8123" and argv[argv.index("--host") + 1] == HOST


HOST = launch.HOST


def test_grid_sweeps_k_and_speculative_config_tables_and_names_them_apart(tmp_path):
    s = load(HEAD + "[[grid]]\nnum_speculative_tokens = [1, 2, 4]\n"
             "speculative_config = [{}, {draft_tensor_parallel_size = 1}]\n", tmp_path)
    spec = [c for c in s.configs if not c.is_baseline]
    assert len(spec) == 6 and len({c.name for c in spec}) == 6
    ks = sorted({c.speculative_num_steps for c in spec})
    assert ks == [1, 2, 4]
    extra = [c for c in spec if c.speculative_config]
    assert len(extra) == 3 and all(spec_of(launch.command("vllm", c, 1))[
        "draft_tensor_parallel_size"] == 1 for c in extra)


@pytest.mark.parametrize("body,line,expect", [
    ("[[config]]\nspeculative_num_steps = 3\n", 7, "an SGLang key"),
    ("[[config]]\nnum_speculative_tokens = 3\nspeculative_eagle_topk = 1\n", 8, "an SGLang key"),
    ("[[grid]]\nspeculative_num_draft_tokens = [4]\n", 7, "an SGLang key"),
    ("[[config]]\nnum_speculative_tokens = 3\nspeculative_config = {method = \"ngram\"}\n", 8,
     "speculative_config.method: set by specwatch from the sweep key speculative_algorithm"),
    ("[[config]]\nnum_speculative_tokens = 3\nspeculative_config = {model = \"/d\"}\n", 8,
     "speculative_config.model: set by specwatch from the sweep key draft_model"),
    ("[[grid]]\nnum_speculative_tokens = [3]\n"
     "speculative_config = [{num_speculative_tokens = 2}]\n", 8,
     "speculative_config.num_speculative_tokens"),
    ("[[config]]\nnum_speculative_tokens = 0\n", 7, "num_speculative_tokens"),
    ("[[config]]\nnum_speculative_tokens = 3\nserver_flags = [\"--speculative-config\", \"{}\"]\n",
     8, "--speculative-config is set by specwatch itself"),
    ("[[config]]\nnum_speculative_tokens = 3\nserver_flags = [\"-sc\", \"{}\"]\n", 8,
     "-sc is set by specwatch itself"),
    ("[[config]]\nnum_speculative_tokens = 3\nserver_flags = [\"-tp\", \"2\"]\n", 8,
     "use the sweep key tp_size"),
    ("[[config]]\nnum_speculative_tokens = 3\nserver_flags = [\"--spec-tokens=2\"]\n", 8,
     "--spec-tokens is set by specwatch itself"),
])
def test_keys_of_the_other_engine_and_flags_specwatch_sets_are_refused_with_their_line(
        tmp_path, body, line, expect):
    with pytest.raises(SweepFileError) as e:
        load(HEAD + body, tmp_path)
    assert f"sweep.toml:{line}:" in str(e.value) and expect in str(e.value)


@pytest.mark.parametrize("engine", ["sglang", "builtin"])
@pytest.mark.parametrize("key,value", [("num_speculative_tokens", "3"),
                                       ("speculative_config", "{prompt_lookup_max = 3}")])
def test_vllm_keys_are_refused_on_the_other_engines(tmp_path, engine, key, value):
    text = HEAD.replace('engine = "vllm"', f'engine = "{engine}"') + (
        f"[[config]]\nspeculative_num_steps = 2\nspeculative_eagle_topk = 1\n{key} = {value}\n")
    with pytest.raises(SweepFileError) as e:
        load(text, tmp_path)
    assert "sweep.toml:9:" in str(e.value) and "a vLLM key" in str(e.value)


@pytest.mark.parametrize("body,reason", [
    ("[[config]]\nspeculative_algorithm = \"eagle3\"\n", "num_speculative_tokens is required"),
    ("[[config]]\nspeculative_algorithm = \"EAGLE3\"\nnum_speculative_tokens = 2\n",
     "lower case"),
    ("[[config]]\nspeculative_algorithm = \"draft_model\"\nnum_speculative_tokens = 2\n"
     "draft_model = \"\"\n", "draft_model: missing"),
])
def test_configs_vllm_cannot_run_are_skipped_with_a_reason(tmp_path, body, reason):
    s = load(HEAD + body, tmp_path)
    assert [c.name for c in s.configs] == ["baseline"]
    assert len(s.skipped) == 1 and reason in s.skipped[0].reason
    assert "sweep.toml:6" in s.skipped[0].reason


def test_parallel_sizes_use_vllms_flags_and_a_baseline_per_shape(tmp_path):
    s = load(HEAD + "[[config]]\nnum_speculative_tokens = 2\ntp_size = 2\ndp_size = 2\n"
             "pp_size = 2\n", tmp_path)
    assert [c.name for c in s.configs] == ["baseline-tp2-dp2-pp2", "eagle3-k2-tp2-dp2-pp2"]
    argv = launch.command("vllm", s.configs[1], 1)
    for flag in ("--tensor-parallel-size", "--data-parallel-size", "--pipeline-parallel-size"):
        assert argv[argv.index(flag) + 1] == "2"
    assert launch.gpus_needed(s.configs[1]) == 8


def test_launch_interpreter_is_the_launch_command_then_specwatch_vllm_python(tmp_path,
                                                                           monkeypatch):
    s = load(HEAD + "[[config]]\nnum_speculative_tokens = 2\n", tmp_path)
    monkeypatch.setenv("SPECWATCH_VLLM_PYTHON", "/opt/vllm/bin/python")
    argv = launch.command("vllm", s.configs[1], 1)
    assert argv[:3] == ["/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    own = ("/x/python3", "-m", "vllm.entrypoints.openai.api_server")
    assert launch.command("vllm", s.configs[1], 1, launch_command=own)[:3] == list(own)
    assert launch.launch_python(own, "vllm") == "/x/python3"
    monkeypatch.delenv("SPECWATCH_VLLM_PYTHON")
    import sys
    assert launch.launch_python(None, "vllm") == sys.executable


def test_spec_json_is_canonical_so_equal_configs_give_equal_argv(tmp_path):
    a = load(HEAD + "[[config]]\nnum_speculative_tokens = 2\n"
             "speculative_config = {prompt_lookup_min = 1, draft_tensor_parallel_size = 1}\n",
             tmp_path).configs[1]
    b = load(HEAD + "[[config]]\nnum_speculative_tokens = 2\n"
             "speculative_config = {draft_tensor_parallel_size = 1, prompt_lookup_min = 1}\n",
             tmp_path).configs[1]
    assert vllm_config.spec_json(a) == vllm_config.spec_json(b)
    assert a.name == b.name
