"""What specwatch assumes about vLLM's command line and SpeculativeConfig, checked against the
installed vLLM in-process: the argv specwatch builds for every kind of config is accepted by
vLLM's own parser and gives the speculative config specwatch meant; the flags specwatch sets
itself are vLLM flags with the meaning it claims; the methods and keys vllm_config names exist;
and vllm_check refuses what vLLM refuses, naming the key."""
from __future__ import annotations

import json
import typing

import pytest

from specwatch.run import launch, sweepfile, vllm_check, vllm_config

from .conftest import VLLM_PY

HEAD = """\
name = "c"
engine = "vllm"
model = "/models/target"
draft_model = "/models/draft"
concurrency = [1]
"""


def _parser():
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    return make_arg_parser(FlexibleArgumentParser())


def _methods() -> set[str]:
    from vllm.config.speculative import SpeculativeMethod

    def flat(t):
        for a in typing.get_args(t):
            yield from (flat(a) if typing.get_args(a) else [a])
    return set(flat(SpeculativeMethod))


CONFIGS = [
    '[[config]]\nspeculative_algorithm = "eagle3"\nnum_speculative_tokens = 3\n',
    '[[config]]\nspeculative_algorithm = "eagle"\nnum_speculative_tokens = 1\n',
    '[[config]]\nspeculative_algorithm = "draft_model"\nnum_speculative_tokens = 4\n'
    'speculative_config = {draft_tensor_parallel_size = 1}\n',
    '[[config]]\nspeculative_algorithm = "ngram"\nnum_speculative_tokens = 2\n'
    'speculative_config = {prompt_lookup_max = 4, prompt_lookup_min = 2}\n',
    '[[config]]\nspeculative_algorithm = "suffix"\nnum_speculative_tokens = 8\n',
    '[[config]]\nspeculative_algorithm = "mtp"\nnum_speculative_tokens = 1\n',
    '[[config]]\nnum_speculative_tokens = 2\ntp_size = 2\ndp_size = 2\npp_size = 2\n'
    'server_flags = ["--enforce-eager", "--max-model-len", "512"]\n',
    '[[grid]]\nnum_speculative_tokens = [1, 5]\n'
    'speculative_config = [{num_speculative_tokens_per_batch_size = [[1, 4, 3], [5, 64, 0]]}]\n',
]


@pytest.mark.parametrize("body", CONFIGS)
def test_vllms_parser_accepts_what_specwatch_builds_and_reads_it_as_meant(tmp_path, body):
    p = tmp_path / "s.toml"
    p.write_text(HEAD + body)
    sweep = sweepfile.load(p)
    parser = _parser()
    for c in sweep.configs:
        argv = launch.command("vllm", c, 8123)
        args = parser.parse_args(vllm_check.server_flags(argv))
        assert args.model == "/models/target" and args.port == 8123 and args.host == launch.HOST
        assert (args.tensor_parallel_size, args.data_parallel_size,
                args.pipeline_parallel_size) == (c.tp_size, c.dp_size, c.pp_size)
        if c.is_baseline:
            assert args.speculative_config is None
            continue
        assert args.speculative_config == json.loads(vllm_config.spec_json(c))
        assert args.speculative_config["num_speculative_tokens"] == c.speculative_num_steps


def test_vllm_check_accepts_every_config_vllm_accepts(tmp_path):
    argvs = []
    for n, body in enumerate(CONFIGS):
        p = tmp_path / f"s{n}.toml"
        p.write_text(HEAD + body)
        argvs += [launch.command("vllm", c, 1) for c in sweepfile.load(p).configs]
    res = vllm_check.check_many(VLLM_PY, argvs)
    assert len(res) == len(argvs) and all(r.ok for r in res), [r.error for r in res if not r.ok]


def test_the_flags_specwatch_sets_are_vllm_flags_with_the_meaning_it_claims():
    dest = {o: a.dest for a in _parser()._actions for o in a.option_strings}
    claims = {"tp_size": "tensor_parallel_size", "dp_size": "data_parallel_size",
              "pp_size": "pipeline_parallel_size", "port": "port", "model": "model"}
    for flag, key in sweepfile.OWN_FLAGS.items():
        if flag in dest and key in claims:
            assert dest[flag] == claims[key], flag
    for flag in ("--speculative-config", "-sc", "--spec-method", "--spec-model", "--spec-tokens",
                 "-tp", "-dp", "-pp", "--tensor-parallel-size", "--model", "--host", "--port"):
        assert flag in dest and flag in sweepfile.OWN_FLAGS, flag


def test_the_methods_and_keys_specwatch_names_are_vllms():
    from vllm.config.speculative import SpeculativeConfig
    fields = SpeculativeConfig.__pydantic_fields__
    methods = _methods()
    assert set(vllm_config.DRAFT_METHODS + vllm_config.NO_DRAFT_METHODS) <= methods
    assert vllm_config.DEFAULT_METHOD in methods and "mtp" in methods
    assert set(vllm_config.OWN_SPEC_KEYS) <= set(fields)


BAD_SPECS = [  # (extra SpeculativeConfig fields, key at fault, what the message says, vLLM raises)
    ({"prompt_lookup_mx": 3}, "prompt_lookup_mx", "did you mean prompt_lookup_max?", True),
    ({"num_speculative_token_per_batch_size": []}, "num_speculative_token_per_batch_size",
     "did you mean num_speculative_tokens_per_batch_size?", True),
    ({"draft_tp": 1}, "draft_tp", "not a field", True),
    ({"tensor_parallel_size": 2}, "tensor_parallel_size", "draft_tensor_parallel_size", True),
    ({"draft_tensor_parallel_size": 0}, "draft_tensor_parallel_size", "greater than or equal",
     True),
    ({"prompt_lookup_max": "three"}, "prompt_lookup_max", "valid integer", True),
    ({"rejection_sample_method": "lucky"}, "rejection_sample_method", "Input should be", True),
    # vLLM overwrites this one silently at start-up (EngineArgs.create_speculative_config):
    # specwatch refuses it, so the sweep file never says something vLLM ignores
    ({"target_model_config": {}}, "target_model_config", "fills this", False),
]


def _spec_argv(spec: dict) -> list[str]:
    return ["--model", "/models/target", "--speculative-config",
            json.dumps({"method": "ngram", "num_speculative_tokens": 2, **spec})]


@pytest.fixture(scope="module")
def bad_checked():
    """vllm_check on every BAD_SPECS case with one interpreter start (importing vLLM: 10-30 s)."""
    return vllm_check.check_many(VLLM_PY, [_spec_argv(s) for s, *_ in BAD_SPECS])


@pytest.mark.parametrize("i", range(len(BAD_SPECS)))
def test_vllm_check_refuses_what_vllm_refuses_and_names_the_key(bad_checked, i):
    spec, key, says, vllm_raises = BAD_SPECS[i]
    res = bad_checked[i]
    assert not res.ok and res.key == key and says in res.error, res.error
    from vllm.config.speculative import SpeculativeConfig
    if vllm_raises:       # and vLLM itself refuses it when it builds its SpeculativeConfig
        with pytest.raises(Exception):
            SpeculativeConfig(method="ngram", num_speculative_tokens=2, **spec)


def test_a_rejected_speculative_config_key_stops_the_sweep_at_its_line(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text(HEAD + '[[config]]\nspeculative_algorithm = "ngram"\nnum_speculative_tokens = 2\n'
                 "speculative_config = {prompt_lookup_mx = 3}\n")
    with pytest.raises(vllm_check.FlagError) as e:
        vllm_check.check_sweep(sweepfile.load(p), VLLM_PY)
    assert "s.toml:9: config ngram-k2" in str(e.value) and "prompt_lookup_max?" in str(e.value)


BAD_FLAGS = [
    (["--enforce-eagr"], "unrecognized arguments: --enforce-eagr"),
    (["--max-model-len", "many"], "--max-model-len"),
    (["--per-request-spec-decode-metrics", "all"], "invalid choice"),
]


def test_a_flag_vllm_rejects_stops_the_sweep_at_its_line(tmp_path):
    for n, (flags, says) in enumerate(BAD_FLAGS):
        p = tmp_path / f"s{n}.toml"
        p.write_text(HEAD + f'[[config]]\nname = "bad{n}"\nnum_speculative_tokens = 2\n'
                     f"server_flags = {json.dumps(flags)}\n")
    sweeps = [sweepfile.load(tmp_path / f"s{n}.toml") for n in range(len(BAD_FLAGS))]
    res = vllm_check.check_many(VLLM_PY, [launch.command("vllm", s.configs[1], 1) for s in sweeps])
    for n, ((flags, says), r) in enumerate(zip(BAD_FLAGS, res)):
        assert not r.ok and says in r.error, r.error
        path = str(tmp_path / f"s{n}.toml")
        assert vllm_check.locate(path, vllm_check.rejected_flag(r.error), "?") == f"{path}:9"
