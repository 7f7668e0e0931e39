"""Check vLLM server flags with the launch interpreter's own vLLM, before any server starts.

`check_many(python, argvs)` runs `python` (the interpreter the server will run under) once, in a
subprocess that imports that interpreter's `vllm` and, for each command line:
1. parses the flags exactly as `python -m vllm.entrypoints.openai.api_server` / `vllm serve` do
   (vLLM 0.32 `vllm/entrypoints/launchers/api_server/entry.py`: `FlexibleArgumentParser`,
   `make_arg_parser`, `parse_args`, `validate_parsed_serve_args`) and reports vLLM's own message;
2. checks `--speculative-config`'s JSON against the installed `SpeculativeConfig`: every key must
   be one of its fields (an unknown one gets a did-you-mean from those fields), none of the fields
   vLLM fills itself (`SkipValidation` ones: target/draft model and parallel configs), each value
   valid for its field's type and constraints (pydantic, as vLLM validates it), then vLLM's own
   `_verify_args` model validator on those values (e.g. it refuses `tensor_parallel_size` there
   and asks for `draft_tensor_parallel_size`). What needs the model files (the draft's config,
   method auto-detection in `__post_init__`) is left to the server, whose log says why.
No GPU, no model files, no network.

`check_sweep(sweep)` does this for every config of an `engine = "vllm"` sweep and maps a rejection
to the sweep file's line (`sglang_check.locate`): `SWEEP.toml:LINE: config NAME: ...`.

Not here: choosing the interpreter (launch.launch_python), building argv (launch.command).
"""
from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass

from specwatch.run.sglang_check import CheckUnavailable, FlagError, locate, rejected_flag

TIMEOUT_S = 240  # importing vLLM's arg parser (torch, transformers) on a busy 2-core box: 10-30 s
ENTRY = "vllm.entrypoints.openai.api_server"

# Runs inside the launch interpreter. Reads a JSON list of flag lists on stdin; prints one JSON
# object per line: {"ok": true, "speculative_config": {...}} or {"ok": false, "error": "...",
# "key": the speculative_config key at fault or null}.
_CHILD = r"""
import contextlib, difflib, io, json, sys, types
from typing import Annotated
argvs = json.loads(sys.stdin.read())
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.config.speculative import SpeculativeConfig
import pydantic

FIELDS = SpeculativeConfig.__pydantic_fields__
INTERNAL = {n for n, f in FIELDS.items()
            if any(type(m).__name__ == "SkipValidation" for m in f.metadata)
            or "SkipValidation" in repr(f.annotation)}
DECOS = SpeculativeConfig.__pydantic_decorators__
VALIDATED_BEFORE = {f for d in DECOS.field_validators.values() for f in d.info.fields}
VERIFY = [d.func for d in DECOS.model_validators.values() if d.info.mode == "after"]

def check_spec(spec):
    if not isinstance(spec, dict):
        return "--speculative-config must be a JSON object", None
    spec = {k.replace("-", "_"): v for k, v in spec.items()}
    for key, value in spec.items():
        if key not in FIELDS or key in INTERNAL:
            known = sorted(set(FIELDS) - INTERNAL)
            if key in INTERNAL:
                return (f"{key}: vLLM fills this SpeculativeConfig field itself at start-up; "
                        "drop it"), key
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else ""
            return (f"{key}: not a field of vLLM's SpeculativeConfig{hint} (fields: "
                    f"{', '.join(known)})"), key
        if key in VALIDATED_BEFORE:
            continue      # a `before` validator converts it first (e.g. attention_backend names)
        f = FIELDS[key]
        try:
            kind = Annotated[(f.annotation, *f.metadata)] if f.metadata else f.annotation
            pydantic.TypeAdapter(kind).validate_python(value)
        except pydantic.ValidationError as e:
            msg = e.errors()[0].get("msg", str(e))
            return f"{key}={json.dumps(value)}: {msg}", key
        except Exception:
            pass          # a type pydantic cannot check alone: the server will
    values = {n: (f.default if f.default is not pydantic.fields.PydanticUndefined else None)
              for n, f in FIELDS.items()}
    values.update(spec)
    for fn in VERIFY:
        try:
            fn(types.SimpleNamespace(**values))
        except (ValueError, TypeError) as e:
            text = str(e)
            key = next((k for k in spec if f"'{k}'" in text or k in text.split()), None)
            return text, key
        except Exception:
            pass          # needs the model configs vLLM builds at start-up
    return None, None

for argv in argvs:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser = make_arg_parser(FlexibleArgumentParser())
            args = parser.parse_args(list(argv))
            validate_parsed_serve_args(args)
        msg, key = check_spec(args.speculative_config) if args.speculative_config is not None \
            else (None, None)
        res = ({"ok": False, "error": "--speculative-config: " + msg, "key": key} if msg else
               {"ok": True, "speculative_config": args.speculative_config})
    except SystemExit as e:
        lines = [l for l in err.getvalue().splitlines() if l.strip()]
        msg = next((l.split(" error: ", 1)[1] for l in reversed(lines) if " error: " in l),
                   lines[-1] if lines else f"exited with code {e.code}")
        res = {"ok": False, "error": msg, "key": None}
    except Exception as e:
        res = {"ok": False, "error": f"{type(e).__name__}: {e}", "key": None}
    print("SPECWATCH-CHECK " + json.dumps(res, default=str), flush=True)
"""


@dataclass(frozen=True)
class Checked:
    ok: bool
    error: str | None
    key: str | None                 # the --speculative-config key at fault, if one is
    speculative_config: dict | None  # what vLLM's parser made of --speculative-config


def server_flags(argv: list[str]) -> list[str]:
    """The flags of a server command line: what follows the vLLM entry point (`-m
    vllm.entrypoints.openai.api_server`, or `serve` of `vllm serve`), or all of argv."""
    argv = list(argv)
    for i, tok in enumerate(argv):
        if tok == ENTRY or tok.endswith("api_server.py"):
            return argv[i + 1:]
        if tok == "serve" and i > 0:
            rest = argv[i + 1:]
            return rest if not rest or rest[0].startswith("-") else ["--model", *rest]
    return argv


def check_many(python: str, argvs: list[list[str]], timeout_s: float = TIMEOUT_S
               ) -> list[Checked]:
    """Check every command line with one start of `python`; one Checked per argv, in order."""
    flag_lists = [server_flags(a) for a in argvs]
    try:
        out = subprocess.run([python, "-c", _CHILD], input=json.dumps(flag_lists),
                             capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise CheckUnavailable(f"{python}: no such interpreter") from None
    except subprocess.TimeoutExpired:
        raise CheckUnavailable(f"{python}: vLLM's parser did not answer within {timeout_s:.0f} s"
                               ) from None
    except OSError as e:
        raise CheckUnavailable(f"{python}: cannot run it: {e}") from None
    results = [json.loads(line[len("SPECWATCH-CHECK "):]) for line in out.stdout.splitlines()
               if line.startswith("SPECWATCH-CHECK ")]
    if len(results) != len(flag_lists):
        tail = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise CheckUnavailable(f"{python} could not run vLLM's argument parser: {tail} (for CPU "
                               "runs, build the vLLM env: bash scripts/vllm_env.sh)")
    return [Checked(r["ok"], r.get("error"), r.get("key"), r.get("speculative_config"))
            for r in results]


def check_argv(python: str, argv: list[str]) -> None:
    """None when vLLM accepts argv; raises FlagError(vLLM's or the SpeculativeConfig message)."""
    (res,) = check_many(python, [argv])
    if not res.ok:
        raise FlagError(res.error)


def locate_key(path: str, key: str | None, fallback: str) -> str:
    """`path:LINE` of the first line of the sweep file that sets `key` (a speculative_config
    table key, `key = ...` or `key: ...` inline), else `fallback`."""
    if not key:
        return fallback
    import re
    from pathlib import Path
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return fallback
    pat = re.compile(r"(?:^|[{,\s])" + re.escape(key) + r"\s*=")
    for n, line in enumerate(lines, 1):
        if pat.search(line.split("#", 1)[0]):
            return f"{path}:{n}"
    return fallback


def check_sweep(sweep, python: str | None = None) -> int:
    """For `engine = "vllm"`: check every config's server command line with the launch
    interpreter's vLLM (one interpreter start for all). Raises FlagError `SWEEP.toml:LINE: config
    NAME: ...` for the first rejected one; returns how many command lines were checked (0 for
    other engines). Raises CheckUnavailable when the interpreter cannot run vLLM's parser."""
    from specwatch.run import launch

    if sweep.engine != "vllm" or not sweep.configs:
        return 0
    python = python or launch.launch_python(sweep.launch_command, sweep.engine)
    if python is None:
        raise CheckUnavailable(f"launch_command {list(sweep.launch_command or ())} does not start "
                               "with a Python interpreter, so its vLLM flags cannot be checked")
    configs, argvs = [], []
    for c in sweep.configs:
        try:
            argvs.append(launch.command(sweep.engine, c, sweep.port or 30000, None,
                                        sweep.launch_command, None))
            configs.append(c)
        except launch.LaunchFailed:
            continue  # measuring it reports this config's own error
    for c, res in zip(configs, check_many(python, argvs)):
        if not res.ok:
            where = locate_key(sweep.path, res.key, None) if res.key else None
            where = where or locate(sweep.path, rejected_flag(res.error), c.where)
            raise FlagError(f"{where}: config {c.name}: vLLM ({python}) rejects the server "
                            f"flags: {res.error}")
    return len(argvs)
