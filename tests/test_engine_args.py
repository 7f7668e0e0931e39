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
