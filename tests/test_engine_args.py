"""SGLang flag handling of the built-in engine (specwatch/engine/args.py): real config dirs on disk.

Expected values come from SGLang's rules as written in LOG_FORMATS.md section 6, not from the code.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specwatch.engine import models_dir
from specwatch.engine.args import ArgsError, ArgsUsageError, error_text, parse_args


def _model_dir(root: Path, name: str, arch: str) -> str:
    d = root / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": [arch], "max_position_embeddings": 256}))
    return str(d)


@pytest.fixture
def dirs(tmp_path):
    return {
        "llama": _model_dir(tmp_path, "llama", "LlamaForCausalLM"),
        "qwen": _model_dir(tmp_path, "qwen", "Qwen2ForCausalLM"),
        "draft": _model_dir(tmp_path, "draft", "LlamaForCausalLMEagle3"),
    }


def spec_of(parsed):
    a = parsed.server_args
    return (a.speculative_algorithm, a.speculative_num_steps, a.speculative_eagle_topk,
            a.speculative_num_draft_tokens)


def test_no_speculation_leaves_spec_fields_unset(dirs):
    p = parse_args(["--model-path", dirs["llama"]])
    assert spec_of(p) == (None, None, None, None)
    assert p.server_args.max_running_requests is None
    assert p.server_args.decode_log_interval == 40
    assert p.server_args.tp_size == 1 and p.server_args.dp_size == 1
    assert p.warnings == []


def test_auto_choice_by_target_architecture(dirs):
    # SGLang 0.5.8-0.5.23: LlamaForCausalLM -> (5, 4, 8); other architectures -> (3, 1, 4).
    llama = parse_args(["--model-path", dirs["llama"], "--speculative-algorithm", "EAGLE3",
                        "--speculative-draft-model-path", dirs["draft"]])
    assert spec_of(llama) == ("EAGLE3", 5, 4, 8)
    qwen = parse_args(["--model-path", dirs["qwen"], "--speculative-algorithm", "EAGLE",
                       "--speculative-draft-model-path", dirs["draft"]])
    assert spec_of(qwen) == ("EAGLE", 3, 1, 4)


def test_max_running_requests_48_with_spec_and_its_warning(dirs):
    p = parse_args(["--model-path", dirs["llama"], "--speculative-algorithm", "EAGLE3",
                    "--speculative-draft-model-path", dirs["draft"]])
    assert p.server_args.max_running_requests == 48
    assert ("Max running requests is reset to 48 for speculative decoding. You can override this "
            "by explicitly setting --max-running-requests.") in p.warnings
    explicit = parse_args(["--model-path", dirs["llama"], "--speculative-algorithm", "EAGLE3",
                           "--speculative-draft-model-path", dirs["draft"],
                           "--max-running-requests", "8"])
    assert explicit.server_args.max_running_requests == 8


def test_nextn_means_eagle_and_lower_case_is_accepted(dirs):
    p = parse_args(["--model-path", dirs["llama"], "--speculative-algorithm", "nextn",
                    "--speculative-draft-model-path", dirs["draft"], "--speculative-num-steps", "2",
                    "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3"])
    assert spec_of(p) == ("EAGLE", 2, 1, 3)


def test_topk_one_forces_draft_tokens_with_sglang_warning(dirs):
    p = parse_args(["--model-path", dirs["llama"], "--speculative-algorithm", "EAGLE3",
                    "--speculative-draft-model-path", dirs["draft"], "--speculative-num-steps", "3",
                    "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "2"])
    assert spec_of(p) == ("EAGLE3", 3, 1, 4)
    assert ("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
            "speculative_eagle_topk == 1") in p.warnings
    omitted = parse_args(["--model-path", dirs["llama"], "--speculative-algorithm", "EAGLE3",
                          "--speculative-draft-model-path", dirs["draft"],
                          "--speculative-num-steps", "2", "--speculative-eagle-topk", "1"])
    assert spec_of(omitted) == ("EAGLE3", 2, 1, 3)


def test_draft_tokens_above_steps_times_topk_plus_one_is_an_error(dirs):
    with pytest.raises(ArgsError, match=r"exceeds steps\*topk\+1 = 7"):
        parse_args(["--model-path", dirs["llama"], "--speculative-algorithm", "EAGLE3",
                    "--speculative-draft-model-path", dirs["draft"], "--speculative-num-steps", "3",
                    "--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "8"])
    ok = parse_args(["--model-path", dirs["llama"], "--speculative-algorithm", "EAGLE3",
                     "--speculative-draft-model-path", dirs["draft"], "--speculative-num-steps", "3",
                     "--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "7"])
    assert spec_of(ok) == ("EAGLE3", 3, 2, 7)


def test_topk_or_draft_tokens_without_steps_is_an_error(dirs):
    with pytest.raises(ArgsError, match="--speculative-num-steps"):
        parse_args(["--model-path", dirs["llama"], "--speculative-algorithm", "EAGLE3",
                    "--speculative-draft-model-path", dirs["draft"], "--speculative-eagle-topk", "1"])


def test_spec_without_draft_path_and_unknown_algorithm_are_errors(dirs):
    with pytest.raises(ArgsError, match="--speculative-draft-model-path"):
        parse_args(["--model-path", dirs["llama"], "--speculative-algorithm", "EAGLE3"])
    with pytest.raises(ArgsError, match="NGRAM"):
        parse_args(["--model-path", dirs["llama"], "--speculative-algorithm", "NGRAM"])


def test_other_sglang_flags_are_accepted_with_warnings(dirs):
    p = parse_args(["--model-path", dirs["llama"], "--mem-fraction-static", "0.8",
                    "--cuda-graph-max-bs-decode", "8", "--trust-remote-code", "--disable-radix-cache",
                    "--enable-metrics", "--attention-backend=triton", "--port", "31001",
                    "--mem-frac", "0.7"])  # a unique prefix, as argparse (and SGLang) allows
    a = p.server_args
    assert a.mem_fraction_static == 0.7 and a.cuda_graph_max_bs == 8
    assert a.trust_remote_code and a.disable_radix_cache and a.enable_metrics
    assert a.attention_backend == "triton" and a.port == 31001
    text = "\n".join(p.warnings)
    for flag in ("--mem-fraction-static", "--trust-remote-code",
                 "--disable-radix-cache", "--enable-metrics", "--attention-backend"):
        assert flag in text
    assert "--cuda-graph-max-bs-decode" not in text  # honoured (CUDA graphs on --device cuda)


@pytest.mark.parametrize("argv, message", [
    (["--some-future-flag", "x"], "unrecognized arguments: --some-future-flag x"),
    (["--stream-output"], "unrecognized arguments: --stream-output"),
    (["--cuda-graph-max-bs", "8"], "ambiguous option: --cuda-graph-max-bs could match "
                                   "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"),
    (["--speculative-draft", "x"], "ambiguous option: --speculative-draft could match "
                                   "--speculative-draft-model-path, --speculative-draft-model,"),
    (["--tp-size", "two"], "argument --tp-size/--tensor-parallel-size: invalid int value: 'two'"),
    (["--port"], "argument --port: expected one argument"),
])
def test_flags_sglang_rejects_are_rejected_with_argparse_messages(dirs, argv, message):
    with pytest.raises(ArgsUsageError) as exc:
        parse_args(["--model-path", dirs["llama"], *argv])
    assert str(exc.value).startswith(message)
    assert error_text(exc.value).splitlines()[-1] == f"python -m specwatch.engine: error: {exc.value}"


def test_bad_values_name_the_flag(dirs):
    with pytest.raises(ArgsError, match="--decode-log-interval 0"):
        parse_args(["--model-path", dirs["llama"], "--decode-log-interval", "0"])
    with pytest.raises(ArgsUsageError, match="required: --model-path/--model"):
        parse_args(["--port", "30000"])
    with pytest.raises(ArgsError, match="not a directory with a config.json"):
        parse_args(["--model-path", "/nonexistent/model"])


def test_builtin_model_paths_resolve_to_the_packaged_dirs():
    p = parse_args(["--model-path", "builtin:target", "--speculative-algorithm", "EAGLE3",
                    "--speculative-draft-model-path", "builtin:draft-eagle3",
                    "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"])
    a = p.server_args
    assert Path(a.model_path) == models_dir() / "target"
    assert Path(a.speculative_draft_model_path) == models_dir() / "draft-eagle3"
    assert a.served_model_name == "builtin:target"
    with pytest.raises(ArgsError, match="no built-in model named 'nope'"):
        parse_args(["--model-path", "builtin:nope"])


def test_server_args_repr_is_the_sglang_dataclass_line(dirs):
    p = parse_args(["--model-path", dirs["llama"], "--speculative-algorithm", "EAGLE3",
                    "--speculative-draft-model-path", dirs["draft"], "--speculative-num-steps", "3",
                    "--speculative-eagle-topk", "1", "--tp-size", "2", "--dp-size", "2"])
    line = repr(p.server_args)
    assert line.startswith(f"ServerArgs(model_path='{dirs['llama']}', ")
    for part in ("tp_size=2", "dp_size=2", "decode_log_interval=40", "speculative_algorithm='EAGLE3'",
                 "speculative_num_steps=3", "speculative_eagle_topk=1",
                 "speculative_num_draft_tokens=4", "max_running_requests=48"):
        assert part in line


# ----------------------------------------------------------------------------- adaptive (SGLang 0.5.23)

def _adaptive(dirs, tmp_path, cfg, *extra):
    argv = ["--model-path", dirs["llama"], "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", dirs["draft"], "--speculative-adaptive"]
    if cfg is not None:
        path = tmp_path / "adaptive.json"
        path.write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
        argv += ["--speculative-adaptive-config", str(path)]
    return parse_args(argv + list(extra))


@pytest.mark.parametrize("cfg,extra,expect", [
    # the middle of the union of candidate steps; topk 1; draft tokens = steps + 1
    ({"1": {"candidate_steps": [3]}, "8": {"candidate_steps": [0, 1]}}, [], ("EAGLE3", 1, 1, 2)),
    ({"1": {"candidate_steps": [5]}, "4": {"candidate_steps": [2]}}, [], ("EAGLE3", 5, 1, 6)),
    # SGLang's DEFAULT_ADAPTIVE_CONFIG: candidates 0, 1, 3, 5, 7 -> 3
    (None, [], ("EAGLE3", 3, 1, 4)),
    # given steps (a candidate) win; a given draft-token count is overridden without a warning
    ({"1": {"candidate_steps": [2, 4]}}, ["--speculative-num-steps", "2",
                                          "--speculative-num-draft-tokens", "9"], ("EAGLE3", 2, 1, 3)),
    # initial steps 0 (a candidate): the server still runs the largest candidate when a slot says so
    ({"1": {"candidate_steps": [3]}, "2": {"candidate_steps": [0]}},
     ["--speculative-num-steps", "0"], ("EAGLE3", 0, 1, 1)),
], ids=["middle", "two-slots", "default-config", "given-steps", "initial-zero"])
def test_adaptive_resolves_as_sglang(dirs, tmp_path, cfg, extra, expect):
    p = _adaptive(dirs, tmp_path, cfg, *extra)
    assert p.server_args.speculative_adaptive is True
    assert spec_of(p) == expect
    assert not any("adjusted" in w or "Ignoring" in w for w in p.warnings), p.warnings


@pytest.mark.parametrize("extra,reason", [
    (["--speculative-eagle-topk", "2", "--speculative-num-steps", "3",
      "--speculative-num-draft-tokens", "4"], "speculative_eagle_topk=2 (only topk=1 is supported)"),
    (["--enable-dp-attention", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"],
     "attention DP is not supported"),
], ids=["topk-2", "dp-attention"])
def test_adaptive_falls_back_to_static_with_sglangs_warning(dirs, tmp_path, extra, reason):
    p = _adaptive(dirs, tmp_path, {"1": {"candidate_steps": [3]}}, *extra)
    assert p.server_args.speculative_adaptive is False
    assert any(w.startswith("speculative_adaptive disabled: " + reason)
               and w.endswith("Falling back to static speculative params.") for w in p.warnings)


@pytest.mark.parametrize("cfg,message", [
    ({"1": {"candidate_steps": [2, 4]}}, r"--speculative-num-steps=3 is not in the adaptive config "
                                        r"candidate_steps \[2, 4\]"),
    ({"1": {"candidate_steps": []}}, "BS 1: candidate_steps must be a list of non-negative ints"),
    ({"1": {"candidate_steps": [1, -2]}}, "BS 1: candidate_steps must be a list"),
    ({"ema_alpha": 0.3}, "at least one integer-string BS key"),
    ("{not json", "not JSON"),
    ("[1, 2]", "expected a JSON object"),
    ({"1": {"candidate_steps": [0]}, "4": {"candidate_steps": [0]}}, "every candidate step is 0"),
], ids=["steps-not-candidate", "empty-candidates", "negative", "no-bs-key", "not-json",
        "not-object", "all-zero"])
def test_adaptive_config_errors_name_the_file_and_the_fix(dirs, tmp_path, cfg, message):
    extra = ["--speculative-num-steps", "3"] if "steps-not" in message or "num-steps=3" in message else []
    with pytest.raises(ArgsError, match=message):
        _adaptive(dirs, tmp_path, cfg, *extra)


def test_adaptive_config_file_missing_is_an_error(dirs, tmp_path):
    with pytest.raises(ArgsError, match=r"adaptive-config .*nope\.json: cannot read it"):
        parse_args(["--model-path", dirs["llama"], "--speculative-algorithm", "EAGLE3",
                    "--speculative-draft-model-path", dirs["draft"], "--speculative-adaptive",
                    "--speculative-adaptive-config", str(tmp_path / "nope.json")])
