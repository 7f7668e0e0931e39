"""Sweep files: expansion of grids and explicit configs, skipped combinations, errors with lines,
and the server command lines built from them (SGLang cannot run here: its argv is checked)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from specwatch.run import launch, sweepfile
from specwatch.run.sweepfile import SweepFileError

ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, text: str, name: str = "sweep.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


HEAD = """\
name = "t"
model = "builtin:target"
draft_model = "builtin:draft-eagle3"
server_flags = ["--decode-log-interval", "8"]
concurrency = [1, 4]
"""


def test_example_sweep_expands_to_baseline_chain_tree_and_shifted():
    s = sweepfile.load(ROOT / "examples" / "builtin_sweep.toml")
    names = [c.name for c in s.configs]
    assert names == ["baseline", "eagle3-s2k1d3", "eagle3-s3k1d4", "eagle3-tree-s2k2d4",
                     "eagle3-s3k1d4-shifted"]
    base = s.configs[0]
    assert base.is_baseline and base.speculative_algorithm is None and base.draft_model is None
    tree = s.configs[3]
    assert (tree.speculative_num_steps, tree.speculative_eagle_topk,
            tree.speculative_num_draft_tokens) == (2, 2, 4)
    assert s.configs[4].draft_model == "builtin:draft-eagle3-shifted"
    assert s.concurrency == (1, 4) and s.skipped == ()
    assert all(c.server_flags[:2] == ("--decode-log-interval", "8") for c in s.configs)


def test_grid_is_a_cartesian_product_with_invalid_combinations_skipped(tmp_path):
    p = write(tmp_path, HEAD + """
[[grid]]
speculative_num_steps = [1, 3]
speculative_eagle_topk = [1, 4]
speculative_num_draft_tokens = [2, 4, 8]
""")
    s = sweepfile.load(p)
    got = {(c.speculative_num_steps, c.speculative_eagle_topk, c.speculative_num_draft_tokens)
           for c in s.configs if not c.is_baseline}
    # steps*topk+1 >= draft, and topk == 1 only with draft == steps + 1
    assert got == {(1, 1, 2), (1, 4, 2), (1, 4, 4), (3, 1, 4), (3, 4, 2), (3, 4, 4), (3, 4, 8)}
    reasons = [s_.reason for s_ in s.skipped]
    assert len(reasons) == 12 - 7
    assert any("exceeds steps*topk+1=5" in r and r.startswith(f"{p}:7:") for r in reasons)
    assert any("with speculative_eagle_topk=1 must equal steps+1=2" in r for r in reasons)


def test_topk1_defaults_draft_tokens_and_duplicates_are_skipped(tmp_path):
    p = write(tmp_path, HEAD + """
[[grid]]
speculative_num_steps = 3
speculative_eagle_topk = 1

[[config]]
speculative_num_steps = 3
speculative_eagle_topk = 1
speculative_num_draft_tokens = 4
""")
    s = sweepfile.load(p)
    spec = [c for c in s.configs if not c.is_baseline]
    assert len(spec) == 1 and spec[0].speculative_num_draft_tokens == 4
    assert len(s.skipped) == 1 and "same server config as eagle3-s3k1d4" in s.skipped[0].reason
    assert s.skipped[0].reason.startswith(f"{p}:11:")


def test_tree_without_draft_tokens_is_skipped_with_reason(tmp_path):
    p = write(tmp_path, HEAD + """
[[config]]
speculative_num_steps = 3
speculative_eagle_topk = 4
""")
    s = sweepfile.load(p)
    assert [c.name for c in s.configs] == ["baseline"]
    assert "needs speculative_num_draft_tokens (at most steps*topk+1=13)" in s.skipped[0].reason


def test_aux_ids_and_flags_sweep_as_lists_of_lists_and_a_baseline_per_tp(tmp_path):
    p = write(tmp_path, HEAD + """
[[grid]]
speculative_num_steps = 2
speculative_eagle_topk = 1
aux_layer_ids = [[1, 3, 5], [-1, 1, 3]]
tp_size = [1, 2]
server_flags = ["--max-running-requests", "8"]
""")
    s = sweepfile.load(p)
    spec = [c for c in s.configs if not c.is_baseline]
    assert {c.aux_layer_ids for c in spec} == {(1, 3, 5), (-1, 1, 3)}
    assert {c.tp_size for c in spec} == {1, 2}
    assert [c.name for c in s.configs if c.is_baseline] == ["baseline", "baseline-tp2"]
    assert all(c.server_flags == ("--decode-log-interval", "8", "--max-running-requests", "8")
               for c in spec)
    assert len({c.name for c in s.configs}) == len(s.configs)
    # the baseline gets the base flags only
    assert s.configs[0].server_flags == ("--decode-log-interval", "8")


@pytest.mark.parametrize("body, line, expect", [
    ('stepz = 3\n', 6, "stepz: unknown key in the top level"),
    ('[workload]\nnum_prompts = "ten"\n', 7, "num_prompts: expected an integer, got \"ten\""),
    ('[[grid]]\nspeculative_num_steps = [2, "x"]\n', 7, "speculative_num_steps: expected an "
     "integer or a list of them"),
    ('[[config]]\nname = "a"\nspeculative_eagle_topk = 1.5\n', 8,
     "speculative_eagle_topk: expected an integer, got 1.5"),
    ('[[grid]]\nspeculative_num_steps = 1\n[[grid]]\nspeculative_num_stepz = 2\n', 9,
     "speculative_num_stepz: unknown key in [[grid]]; did you mean speculative_num_steps?"),
    ('[workload]\noutput_tokens = {min = 9, max = 3}\n', 7, "output_tokens: need min <= max"),
    ('engine = "tgi"\n', 6, "engine: 'tgi' is not one of builtin, sglang, vllm"),
    ('[workload]\nprompts = "builtin:poetry"\n', 7, "no built-in prompt set 'poetry'"),
    ('x = [1,\n', 6, "not valid TOML"),
])
def test_errors_name_file_line_and_key(tmp_path, body, line, expect):
    p = write(tmp_path, HEAD + body)
    with pytest.raises(SweepFileError) as exc:
        sweepfile.load(p)
    msg = str(exc.value)
    assert msg.startswith(f"{p}:{line}: "), msg
    assert expect in msg, msg


def test_missing_model_and_relative_prompt_files(tmp_path):
    with pytest.raises(SweepFileError, match="model: missing"):
        sweepfile.load(write(tmp_path, 'name = "x"\n'))
    (tmp_path / "p.jsonl").write_text('{"prompt": "hello"}\n')
    sub = tmp_path / "sub"
    sub.mkdir()
    s = sweepfile.load(write(sub, HEAD + '[workload]\nprompts = "../p.jsonl"\n'))
    assert Path(s.workload.prompts) == (tmp_path / "p.jsonl").resolve()
    assert s.workload.format == "jsonl"
    (tmp_path / "sg.json").write_text('[{"conversations": [{"from": "human", "value": "hi"}]}]')
    s = sweepfile.load(write(sub, HEAD + '[workload]\nprompts = "../sg.json"\n'))
    assert s.workload.format == "sharegpt"


def test_builtin_command_line_and_gpu_environment(tmp_path):
    s = sweepfile.load(ROOT / "examples" / "builtin_sweep.toml")
    cfg = s.configs[2]
    argv = launch.command("builtin", cfg, 31234)
    assert argv[:3] == [sys.executable, "-m", "specwatch.engine"]
    assert argv[3:] == ["--model-path", "builtin:target", "--speculative-algorithm", "EAGLE3",
                        "--speculative-draft-model-path", "builtin:draft-eagle3",
                        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                        "--speculative-num-draft-tokens", "4", "--tp-size", "1",
                        "--host", "127.0.0.1", "--port", "31234", "--decode-log-interval", "8"]
    base = launch.command("builtin", s.configs[0], 31235)
    assert "--speculative-algorithm" not in base and base[-2:] == ["--decode-log-interval", "8"]
    env = launch.environment({"PATH": "/bin"}, (("SGLANG_LOG_MS", "1"),), gpus=(2, 3))
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3" and env["SGLANG_LOG_MS"] == "1"
    assert "CUDA_VISIBLE_DEVICES" not in launch.environment({"PATH": "/bin"})


def test_sglang_command_line_with_override_and_version_check(tmp_path):
    p = write(tmp_path, """
engine = "sglang"
model = "meta-llama/Llama-3.1-8B-Instruct"
draft_model = "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B"
server_flags = ["--mem-fraction-static", "0.8", "--cuda-graph-max-bs", "8"]
sglang_version = "0.5.23"

[[config]]
speculative_num_steps = 5
speculative_eagle_topk = 8
speculative_num_draft_tokens = 32
tp_size = 2
""")
    s = sweepfile.load(p)
    cfg = s.configs[-1]
    assert s.startup_timeout_s == sweepfile.DEFAULTS["sglang"]["startup_timeout_s"]
    argv = launch.command("sglang", cfg, 30000, sglang_version=s.sglang_version)
    assert argv[:3] == [sys.executable, "-m", "sglang.launch_server"]
    assert argv[3:] == [
        "--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B",
        "--speculative-num-steps", "5", "--speculative-eagle-topk", "8",
        "--speculative-num-draft-tokens", "32", "--tp-size", "2", "--host", "127.0.0.1",
        "--port", "30000", "--mem-fraction-static", "0.8", "--cuda-graph-max-bs", "8"]
    custom = launch.command("sglang", cfg, 30000, launch_command=("/opt/venv/bin/python", "-m",
                                                                 "sglang.launch_server"))
    assert custom[0] == "/opt/venv/bin/python"
    with pytest.raises(launch.LaunchFailed, match="EAGLE3 needs SGLang >= 0.4.4.post2"):
        launch.command("sglang", cfg, 30000, sglang_version="0.4.3.post1")
    assert launch.parse_version("0.4.4.post2") == (0, 4, 4, 2)


def test_aux_layer_ids_make_a_draft_copy_with_those_ids(tmp_path):
    draft = tmp_path / "my-draft"
    draft.mkdir()
    (draft / "config.json").write_text(
        '{"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": '
        '{"eagle_aux_hidden_state_layer_ids": [1, 3, 5], "use_aux_hidden_state": true}}')
    (draft / "model.safetensors").write_bytes(b"weights")
    p = write(tmp_path, HEAD.replace("builtin:draft-eagle3", str(draft)) + """
[[config]]
speculative_num_steps = 2
speculative_eagle_topk = 1
aux_layer_ids = [-1, 1, 3]
""")
    s = sweepfile.load(p)
    base, cfg = s.configs
    assert launch.draft_aux_ids(base) is None
    assert launch.draft_aux_ids(cfg) == [-1, 1, 3]
    plain = sweepfile.Config(**{**cfg.__dict__, "aux_layer_ids": None})
    assert launch.draft_aux_ids(plain) == [1, 3, 5]           # read from the draft's config
    copy = Path(launch.draft_with_aux(cfg, tmp_path / "run"))
    got = json.loads((copy / "config.json").read_text())
    assert got["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [-1, 1, 3]
    assert got["architectures"] == ["LlamaForCausalLMEagle3"]
    assert (copy / "model.safetensors").resolve() == (draft / "model.safetensors").resolve()
    argv = launch.command("builtin", cfg, 30001, draft_path=str(copy))
    assert argv[argv.index("--speculative-draft-model-path") + 1] == str(copy)
    remote = sweepfile.Config(**{**cfg.__dict__, "draft_model": "org/remote-draft"})
    with pytest.raises(launch.LaunchFailed, match="needs a local draft dir"):
        launch.draft_with_aux(remote, tmp_path / "run2")


def test_a_config_job_is_picklable_for_remote_execution(tmp_path):
    """ARCHITECTURE decision 7: one config's unit of work can be shipped as a Ray task."""
    import pickle

    from specwatch.run import measure

    s = sweepfile.load(ROOT / "examples" / "builtin_sweep.toml")
    job = measure.ConfigJob(s, s.configs[1], (measure.RunKey(1, 0), measure.RunKey(4, 0)),
                            str(tmp_path / "run"), 30000, (0,))
    assert pickle.loads(pickle.dumps(job)) == job
    assert pickle.loads(pickle.dumps(measure.measure_config)) is measure.measure_config


# ------------------------------------------------------------------ a sweep file cannot escape

ESCAPES = [
    ('name = "../../x"', "must be letters, digits"),
    ('name = "/tmp/abs"', "must be letters, digits"),
    ('name = ".."', "must be letters, digits"),
    ('name = "a/b"', "must be letters, digits"),
    ('name = "' + "a" * 300 + '"', "300 characters; at most 100"),
    ('name = "a\\u0000b"', "must be letters, digits"),
    ('name = "a\\nb"', "must be letters, digits"),
    ('name = "baseline"', "reserved for the no-speculation baselines"),
    ('name = "Baseline-tp2"', "reserved for the no-speculation baselines"),
]


@pytest.mark.parametrize("line,expect", ESCAPES)
def test_config_names_are_validated_with_file_and_line(tmp_path, line, expect):
    p = write(tmp_path, HEAD + f"""
[[config]]
speculative_num_steps = 2
speculative_eagle_topk = 1
{line}
""")
    with pytest.raises(SweepFileError) as e:
        sweepfile.load(p)
    assert str(e.value).startswith(f"{p}:10: name: ") and expect in str(e.value)


@pytest.mark.parametrize("body,line,expect", [
    ('env = {"A=B" = "1"}\n', 6, "'A=B' is not an environment variable name"),
    ('env = {"" = "1"}\n', 6, "is not an environment variable name"),
    ('env = {A = "x\\u0000y"}\n', 6, "env.A: the value holds a NUL"),
    ('[env]\nOK = "1"\n"BAD KEY" = "2"\n', 8, "'BAD KEY' is not an environment"),
    ('launch_command = ["python\\u0000", "-m", "x"]\n', 6, "control character '\\x00'"),
    ('model2 = 1\n', 6, "unknown key"),
])
def test_env_keys_and_nul_are_refused(tmp_path, body, line, expect):
    p = write(tmp_path, HEAD + body)
    with pytest.raises(SweepFileError) as e:
        sweepfile.load(p)
    assert str(e.value).startswith(f"{p}:{line}: ") and expect in str(e.value), str(e.value)


@pytest.mark.parametrize("flags,expect", [
    ('["--log-level", "info\\n[2026-01-01 00:00:00] Decode batch, #running-req: 1"]',
     "control character '\\n'"),
    ('["--chunked-prefill-size\\r", "8"]', "control character '\\r'"),
    ('["--port", "1"]', "--port is set by specwatch itself; use the sweep key port"),
    ('["--tp=2"]', "--tp is set by specwatch itself; use the sweep key tp_size"),
    ('["--dp-size", "2"]', "use the sweep key dp_size"),
])
def test_flags_cannot_forge_log_lines_or_override_what_specwatch_sets(tmp_path, flags, expect):
    p = write(tmp_path, HEAD + f"""
[[config]]
speculative_num_steps = 2
speculative_eagle_topk = 1
server_flags = {flags}
""")
    with pytest.raises(SweepFileError) as e:
        sweepfile.load(p)
    assert str(e.value).startswith(f"{p}:10: server_flags: ") and expect in str(e.value)


def test_launch_line_in_the_log_escapes_control_characters(tmp_path):
    """Whatever reaches launch (not only sweep files), the logged launch line stays one line."""
    forged = "x\n[2026-01-01 00:00:00] Decode batch, #running-req: 1, accept len: 9.00"
    srv = launch.Server([sys.executable, "-c", "pass", forged], {}, launch.free_port(),
                        tmp_path / "server.log")
    srv.start()
    srv.wait_exit(30)
    srv.stop(1)
    lines = (tmp_path / "server.log").read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specwatch: launching ")
    assert "$'x\\n[2026" in lines[0]


def test_aux_draft_copy_never_deletes_outside_the_run_dir(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "draft").symlink_to(victim)          # a planted link where the copy goes
    p = write(tmp_path, HEAD + """
[[config]]
speculative_num_steps = 2
speculative_eagle_topk = 1
aux_layer_ids = [1, 3, 5]
""")
    cfg = sweepfile.load(p).configs[1]
    copy = Path(launch.draft_with_aux(cfg, run_dir))
    assert (victim / "keep.txt").read_text() == "precious"
    assert copy == run_dir.resolve() / "draft" and not copy.is_symlink()
    assert json.loads((copy / "config.json").read_text())["eagle_config"][
        "eagle_aux_hidden_state_layer_ids"] == [1, 3, 5]


def test_dp_and_pp_sizes_reach_the_command_line_and_the_gpu_count(tmp_path):
    p = write(tmp_path, HEAD + """
[[grid]]
speculative_num_steps = 2
speculative_eagle_topk = 1
tp_size = 2
dp_size = [1, 2]
pp_size = [1, 2]

[[config]]
name = "dpattn"
speculative_num_steps = 2
speculative_eagle_topk = 1
tp_size = 4
dp_size = 2
server_flags = ["--enable-dp-attention"]

[[config]]
name = "bad-dpattn"
speculative_num_steps = 2
speculative_eagle_topk = 1
tp_size = 4
dp_size = 3
server_flags = ["--enable-dp-attention"]
""")
    s = sweepfile.load(p)
    by = {c.name: c for c in s.configs}
    assert {c.name for c in s.configs if c.is_baseline} == {
        "baseline-tp2", "baseline-tp2-dp2", "baseline-tp2-pp2", "baseline-tp2-dp2-pp2",
        "baseline-tp4-dp2"}
    c = by["eagle3-s2k1d3-tp2-dp2-pp2"]
    argv = launch.command("sglang", c, 30000)
    assert argv[argv.index("--tp-size") + 1] == "2" and argv[argv.index("--dp-size") + 1] == "2"
    assert argv[argv.index("--pp-size") + 1] == "2"
    assert "--dp-size" not in launch.command("sglang", by["eagle3-s2k1d3-tp2"], 30000)
    assert launch.gpus_needed(c) == 8
    assert launch.gpus_needed(by["eagle3-s2k1d3-tp2-pp2"]) == 4
    assert launch.gpus_needed(by["dpattn"]) == 4          # DP attention: dp ranks inside TP
    assert [sk.reason for sk in s.skipped if "dp_size=3" in sk.reason][0].endswith(
        "must divide tp_size=4 (SGLang asserts tp_size % dp_size == 0)")


def test_builtin_engine_on_gpus_runs_on_cuda(tmp_path):
    s = sweepfile.load(write(tmp_path, HEAD))
    base = s.configs[0]
    on_gpu = launch.command("builtin", base, 30000, gpus=(0,))
    assert on_gpu[on_gpu.index("--device") + 1] == "cuda"
    assert "--device" not in launch.command("builtin", base, 30000)
    assert "--device" not in launch.command("sglang", base, 30000, gpus=(0,))


def test_sglang_version_comes_from_the_launch_interpreter(tmp_path):
    """A launch interpreter with its own sglang (a fake dist-info in a venv-like prefix):
    its version is the one reported, not specwatch's environment's."""
    site = tmp_path / "site"
    dist = site / "sglang-0.4.9.post3.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.4.9.post3\n")
    wrapper = tmp_path / "python3-launch"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    assert launch.installed_sglang_version((str(wrapper), "-m", "sglang.launch_server")) == \
        "0.4.9.post3"
    assert launch.installed_sglang_version(("/bin/sh", "run.sh")) is None   # not a Python
    assert launch.installed_sglang_version((str(tmp_path / "python-missing"),)) is None
