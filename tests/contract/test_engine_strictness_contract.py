"""Contract 3: the built-in engine is never more lenient than SGLang.

Flags: its flag table is the one the installed sglang's parser yields (scripts/gen_engine_flags.py
--check); every command line it accepts, SGLang's parser accepts; what SGLang's parser rejects
(unknown flags, every ambiguous prefix, bad values) it rejects with argparse's same message.
Request fields: every `sampling_params` body real `/generate` refuses (its JSON contract check,
`SamplingParams(**sp)`, `verify()`), the engine refuses with a 400."""
from __future__ import annotations

import argparse
import contextlib
import io
import math
import subprocess
import sys
from pathlib import Path

import pytest
from sglang.srt.entrypoints.api_contract import generate_contract_error
from sglang.srt.sampling.sampling_params import SamplingParams
from sglang.srt.server_args import ServerArgs

from specwatch.engine import args as engine_args
from specwatch.engine import http_api

ROOT = Path(__file__).resolve().parents[2]


class _Refused(Exception):
    pass


class _RealParser(argparse.ArgumentParser):
    def error(self, message):
        raise _Refused(message)


@pytest.fixture(scope="module")
def real():
    p = _RealParser(prog="sglang serve")   # as prepare_server_args builds it
    ServerArgs.add_cli_args(p)
    return p


def _norm(msg: str) -> str:
    """argparse lists a set's choices in the set's order, which changes per process (hash seed):
    compare them sorted (the committed table keeps them sorted)."""
    head, sep, rest = msg.partition("(choose from ")
    if not sep:
        return msg
    items, close, tail = rest.rpartition(")")
    return head + sep + ", ".join(sorted(items.split(", "))) + close + tail


def outcome(parser, argv):
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(argv)
        return None
    except (_Refused, engine_args.ArgsUsageError) as e:
        return _norm(str(e))
    except SystemExit as e:   # a prefix of --help: help printed, exit 0
        return f"exit {e.code}"


def test_committed_flag_table_is_the_installed_parsers():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_engine_flags.py"),
                           "--check"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_engine_claims_the_version_it_is_checked_against():
    """The built-in engine says it is the SGLang these contracts run under (its /server_info
    version, its flag table's source): the version whose aux capture it implements (id -1 on a
    Llama target = the embedding output; 0.5.12-0.5.20 raise TypeError there)."""
    import json

    import sglang

    from specwatch.engine.server import SGLANG_VERSION
    table = json.loads((ROOT / "specwatch" / "engine" / "sglang_flags.json").read_text())
    assert SGLANG_VERSION == table["sglang_version"] == sglang.__version__


def _value(a: argparse.Action) -> list[str]:
    if a.nargs == 0:
        return []
    if a.choices is not None:
        v = str(sorted(a.choices, key=str)[0])
    elif a.type is int:
        v = "1"
    elif a.type is float:
        v = "0.5"
    elif getattr(a.type, "__name__", "") == "loads":
        v = "{}"
    elif getattr(a.type, "__name__", "") == "json_list_type":
        v = "[]"
    elif getattr(a.type, "__name__", "") == "human_readable_int":
        v = "8"
    else:
        v = "x"
    return [v] * (2 if a.nargs in ("+", "*") else 1)


def test_every_flag_the_engine_accepts_sglang_accepts(real):
    engine = engine_args.build_parser()
    stricter, accepted = [], 0
    for a in real._actions:
        if isinstance(a, argparse._HelpAction):
            continue
        for opt in a.option_strings:
            for argv in (["--model-path", "m", opt, *_value(a)],
                         ["--model-path", "m", opt + "=" + _value(a)[0]] if _value(a) else None):
                if argv is None:
                    continue
                mine, theirs = outcome(engine, argv), outcome(real, argv)
                if mine is None:
                    accepted += 1
                    assert theirs is None, (argv, theirs)
                elif theirs is None:
                    stricter.append(opt)
                elif opt not in unchecked(real):
                    assert mine == theirs, argv
    assert accepted > 900   # nearly every flag, both spellings
    # the engine refuses only flags whose values it cannot check as SGLang does
    assert set(stricter) <= unchecked(real), stricter


def unchecked(real) -> set[str]:
    """Flags whose values the engine refuses to take unchecked: SGLang's own type functions
    (other than int, float, str, json.loads, nullable_str) and custom actions."""
    plain = (int, float, str, None)
    return {o for a in real._actions for o in a.option_strings
            if (a.type not in plain and getattr(a.type, "__name__", "") not in
                ("loads", "nullable_str")) or type(a).__name__ == "LoRAPathAction"}


def test_every_ambiguous_prefix_and_unknown_flag_is_rejected_alike(real):
    engine = engine_args.build_parser()
    opts = [o for a in real._actions for o in a.option_strings if o.startswith("--")]
    prefixes = set()
    for o in opts:
        parts = o[2:].split("-")
        for n in range(1, len(parts)):
            prefixes.add("--" + "-".join(parts[:n]))
        prefixes.add(o[:-1])
    prefixes -= set(opts)
    ambiguous = 0
    for p in sorted(prefixes):
        argv = ["--model-path", "m", p, "1"]
        theirs, mine = outcome(real, argv), outcome(engine, argv)
        if theirs is not None:
            ambiguous += theirs.startswith("ambiguous option")
            flag = theirs.split("argument ", 1)[1].split(":")[0].split("/")[0] \
                if theirs.startswith("argument ") else None
            if flag in unchecked(real):
                assert mine is not None, argv  # refused too, in the engine's own words
            else:
                assert mine == theirs, argv
        else:
            assert mine is None or theirs is None  # both accept a unique prefix (allow_abbrev)
    assert ambiguous > 50
    for argv in (["--stream-output"], ["--cuda-graph-max-bs", "8"], ["--speculative-draft", "d"],
                 ["--no-such-flag"], ["positional"], ["--tp-size", "x"], ["--port"],
                 ["--load-balance-method", "nope"], []):
        full = (["--model-path", "m"] if argv != [] else []) + argv
        theirs = outcome(real, full)
        assert theirs is not None and outcome(engine, full) == theirs, full


SAMPLING_BODIES = [
    {"seed": 1}, {"bogus": True}, {"max_new_tokens": "x"}, {"max_new_tokens": -1},
    {"max_new_tokens": 1.5}, {"temperature": -1}, {"temperature": "hot"},
    {"temperature": math.nan}, {"temperature": math.inf}, {"top_p": 0}, {"top_p": 2},
    {"top_p": "x"}, {"top_k": 0}, {"top_k": -2}, {"top_k": "x"}, {"min_p": 2},
    {"stop": 3}, {"stop": [1, 2]}, {"stop_token_ids": "x"}, {"stop_token_ids": [1.5]},
    {"n": 0}, {"n": "x"}, {"repetition_penalty": -1}, {"frequency_penalty": 5},
    {"presence_penalty": -5}, {"min_new_tokens": -1}, {"ignore_eos": "yes"},
    {"no_stop_trim": 1}, {"sampling_seed": "x"}, {"sampling_seed": 1.5}, {"logit_bias": 3},
    {"json_schema": 3}, {"stream_interval": "x"}, {"max_new_tokens": 8, "temperature": 0},
    {"sampling_seed": 7, "temperature": 0.7, "top_p": 0.9}, {"stop": ["\n"], "top_k": 1},
]


def real_refuses(sp: dict) -> str | None:
    err = generate_contract_error({"text": "hi", "sampling_params": sp})
    if err:
        return err
    try:
        params = SamplingParams(**sp)
        params.verify(256)
    except (TypeError, ValueError) as e:
        return f"{type(e).__name__}: {e}"
    return None


@pytest.mark.parametrize("sp", SAMPLING_BODIES, ids=[str(b) for b in SAMPLING_BODIES])
def test_request_fields_real_generate_refuses_the_engine_refuses(sp):
    why = real_refuses(sp)
    if why is None:
        return  # the engine may still refuse what it cannot honour (stricter is allowed)
    with pytest.raises(http_api.BadRequest):
        http_api.parse_sampling(dict(sp))


def test_seed_is_refused_by_both_and_sampling_seed_accepted_by_both():
    assert "unknown field `seed`" in real_refuses({"seed": 1})
    with pytest.raises(http_api.BadRequest, match="unknown field `seed`"):
        http_api.parse_sampling({"seed": 1})
    assert real_refuses({"sampling_seed": 1}) is None
    assert http_api.parse_sampling({"sampling_seed": 1}).seed == 1


def test_engine_sampling_fields_are_sglangs():
    """Every sampling field the engine accepts is a field of SGLang's SamplingParams."""
    import msgspec
    real_fields = {f.name for f in msgspec.structs.fields(SamplingParams)}
    assert http_api._SAMPLING_ALL <= real_fields, http_api._SAMPLING_ALL - real_fields
