"""Contracts 1 and 2: every argv `launch.command` builds is accepted by SGLang's own parser and
resolves to the intended ServerArgs fields; `sglang_check` reports SGLang's own message for a
rejected flag, and a sweep with one stops before any server starts, naming SWEEP.toml:LINE."""
from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
from pathlib import Path

import pytest
from sglang.srt.server_args import prepare_server_args

from specwatch.run import launch, sglang_check, sweepfile

from .conftest import SGLANG_PY, SGLANG_VERSION, SPECWATCH_PY

ROOT = Path(__file__).resolve().parents[2]

SWEEP = """\
name = "contract"
engine = "sglang"
model = "{target}"
draft_model = "{draft}"
sglang_version = "{version}"
server_flags = ["--mem-fraction-static", "0.8", "--decode-log-interval", "8"]
concurrency = [1]

[[config]]
name = "chain"
speculative_num_steps = 3
speculative_eagle_topk = 1

[[config]]
name = "tree"
speculative_num_steps = 4
speculative_eagle_topk = 4
speculative_num_draft_tokens = 8

[[config]]
name = "tp2"
speculative_num_steps = 3
speculative_eagle_topk = 1
tp_size = 2

[[config]]
name = "dp2"
speculative_num_steps = 3
speculative_eagle_topk = 1
dp_size = 2

[[config]]
name = "dp2-attn"
speculative_num_steps = 3
speculative_eagle_topk = 1
tp_size = 2
dp_size = 2
server_flags = ["--enable-dp-attention"]

[[config]]
name = "pp2"
speculative_num_steps = 3
speculative_eagle_topk = 1
pp_size = 2

[[config]]
name = "aux"
speculative_num_steps = 3
speculative_eagle_topk = 1
aux_layer_ids = [2, 30, 58]

[[config]]
name = "extra"
speculative_num_steps = 2
speculative_eagle_topk = 2
speculative_num_draft_tokens = 4
server_flags = ["--cuda-graph-max-bs-decode", "8", "--disable-radix-cache",
                "--attention-backend=triton"]
"""


@pytest.fixture
def models(tmp_path):
    target, draft = tmp_path / "target", tmp_path / "draft"
    for d, cfg in ((target, {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 61}),
                   (draft, {"architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1,
                            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57]}})):
        d.mkdir()
        (d / "config.json").write_text(json.dumps(cfg))
    return target, draft


@pytest.fixture
def sweep(tmp_path, models):
    target, draft = models
    path = tmp_path / "sweep.toml"
    path.write_text(SWEEP.format(target=target, draft=draft, version=SGLANG_VERSION))
    return sweepfile.load(str(path))


def real_parse(argv: list[str]):
    """SGLang's own `prepare_server_args` (what `python -m sglang.launch_server` runs)."""
    with contextlib.redirect_stderr(io.StringIO()) as err:
        try:
            return prepare_server_args(sglang_check.server_flags(argv))
        except SystemExit as e:
            raise AssertionError(f"SGLang's parser rejected {argv}: {err.getvalue()}") from e


def test_every_generated_argv_is_accepted_and_resolves_to_the_intended_fields(sweep, tmp_path):
    by_name = {c.name: c for c in sweep.configs}
    assert {"baseline", "chain", "tree", "tp2", "dp2", "dp2-attn", "pp2", "aux", "extra"} <= \
        set(by_name) | {"baseline"}
    assert any(c.is_baseline for c in sweep.configs)
    for c in sweep.configs:
        draft = launch.draft_with_aux(c, tmp_path / c.name) if c.aux_layer_ids else None
        argv = launch.command("sglang", c, 31234, draft, None, SGLANG_VERSION)
        sa = real_parse(argv)
        want = {"model_path": c.model, "port": 31234, "host": launch.HOST, "tp_size": c.tp_size,
                "dp_size": c.dp_size, "pp_size": c.pp_size, "mem_fraction_static": 0.8,
                "decode_log_interval": 8}
        if c.is_baseline:
            want.update(speculative_algorithm=None, speculative_draft_model_path=None)
        else:
            want.update(speculative_algorithm=c.speculative_algorithm,
                        speculative_draft_model_path=draft or c.draft_model,
                        speculative_num_steps=c.speculative_num_steps,
                        speculative_eagle_topk=c.speculative_eagle_topk,
                        speculative_num_draft_tokens=c.speculative_num_draft_tokens)
        got = {k: getattr(sa, k) for k in want}
        assert got == want, f"config {c.name}: {argv}"
    extra = real_parse(launch.command("sglang", by_name["extra"], 1, None, None, SGLANG_VERSION))
    assert (extra.cuda_graph_max_bs_decode, extra.disable_radix_cache, extra.attention_backend) \
        == (8, True, "triton")
    assert real_parse(launch.command("sglang", by_name["dp2-attn"], 1, None, None,
                                     SGLANG_VERSION)).enable_dp_attention is True
    aux_cfg = json.loads((Path(launch.draft_with_aux(by_name["aux"], tmp_path / "aux2"))
                          / "config.json").read_text())
    assert aux_cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]


def test_check_many_agrees_with_the_real_parser_in_process(sweep):
    argvs = [launch.command("sglang", c, 31234, None, None, SGLANG_VERSION) for c in sweep.configs]
    checked = sglang_check.check_many(SGLANG_PY, argvs)
    for argv, res in zip(argvs, checked):
        assert res.ok, (argv, res.error)
        sa = real_parse(argv)
        for k in ("model_path", "tp_size", "dp_size", "pp_size", "speculative_num_steps",
                  "speculative_eagle_topk", "speculative_num_draft_tokens", "port"):
            assert res.fields[k] == getattr(sa, k)


@pytest.mark.parametrize("flags, message", [
    (["--cuda-graph-max-bs", "8"], "ambiguous option: --cuda-graph-max-bs could match "
                                   "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"),
    (["--stream-output"], "unrecognized arguments: --stream-output"),
    (["--speculative-draft", "x"], "ambiguous option: --speculative-draft could match"),
    (["--tp-size", "two"], "argument --tp-size/--tensor-parallel-size: invalid int value: 'two'"),
])
def test_check_argv_raises_sglangs_own_message(flags, message):
    argv = [SGLANG_PY, "-m", "sglang.launch_server", "--model-path", "/m", *flags]
    with contextlib.redirect_stderr(io.StringIO()) as err:
        with pytest.raises(SystemExit):
            prepare_server_args(argv[3:])
    real = err.getvalue().strip().splitlines()[-1].split(" error: ", 1)[1]
    assert real.startswith(message)
    with pytest.raises(sglang_check.FlagError) as exc:
        sglang_check.check_argv(SGLANG_PY, argv)
    assert str(exc.value) == real


def test_sweep_with_a_rejected_flag_stops_before_any_server_starts(tmp_path, models):
    target, draft = models
    path = tmp_path / "typo.toml"
    text = SWEEP.format(target=target, draft=draft, version=SGLANG_VERSION)
    text = text.replace('"--cuda-graph-max-bs-decode", "8"', '"--cuda-graph-max-bs", "8"')
    # launch_command is a top-level key: it goes before the first table
    head, sep, rest = text.partition("[[config]]")
    path.write_text(head + f'launch_command = ["{SGLANG_PY}", "-m", "sglang.launch_server"]\n'
                    + sep + rest)
    line = next(n for n, l in enumerate(path.read_text().splitlines(), 1)
                if '"--cuda-graph-max-bs", "8"' in l)
    db, out = tmp_path / "sw.duckdb", tmp_path / "out"
    proc = subprocess.run([SPECWATCH_PY, "-m", "specwatch.cli", "run-sweep", str(path), "--db",
                           str(db), "--out-dir", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert f"{path}:{line}: config extra: " in text, text
    assert ("ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
            "--cuda-graph-max-bs-prefill") in text
    assert not (out / "contract").exists() or not any((out / "contract").rglob("*.log"))


def test_real_sglang_argparse_error_is_the_cause(tmp_path):
    """A real sglang launch_server that rejects a flag: LaunchFailed names SGLang's own error, not
    the exit code (the built-in engine's case is in tests/test_lifecycle.py)."""
    argv = [SGLANG_PY, "-m", "sglang.launch_server", "--model-path", str(tmp_path), "--bogus-flag", "1"]
    srv = launch.Server(argv, dict(os.environ), launch.free_port(), tmp_path / "s.log")
    srv.start()
    try:
        with pytest.raises(launch.LaunchFailed) as e:
            srv.wait_ready(120)
    finally:
        srv.stop(2)
    assert "error: unrecognized arguments: --bogus-flag 1" in str(e.value).split(" (server exited")[0]
