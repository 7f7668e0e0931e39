"""Check SGLang server flags with the launch interpreter's own SGLang parser, before any server starts.

`check_argv(python, argv)` runs `python` (the interpreter the server will run under) in a
subprocess that imports that interpreter's `sglang`, builds the parser exactly as
`sglang.launch_server` does (`prepare_server_args`: `ServerArgs.add_cli_args` on an argparse
parser, `parse_args`, `ServerArgs.from_cli_args`) and reports SGLang's own error message. No GPU,
no model files, no network: parsing never touches them.

`argv` is the full server command line (`python -m sglang.launch_server --model-path ...`) or only
its flags; everything up to `sglang.launch_server` is dropped.

Not here: choosing the interpreter (launch.launch_python) or mapping a message to the sweep file's
line (the sweep does that).
"""
from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

TIMEOUT_S = 180  # importing sglang's server_args (and torch, via prepare_server_args) on a busy box

# Runs inside the launch interpreter. Reads a JSON list of flag lists on stdin; prints one JSON
# object per line: {"ok": true, "fields": {...}} or {"ok": false, "error": "..."}.
_CHILD = r"""
import argparse, contextlib, io, json, sys
argvs = json.loads(sys.stdin.read())
from sglang.srt.server_args import ServerArgs
try:
    from sglang.srt.server_args import prepare_server_args
except ImportError:
    prepare_server_args = None

def fields(sa):
    try:
        import msgspec
        names = [f.name for f in msgspec.structs.fields(type(sa))]
    except Exception:
        import dataclasses
        names = [f.name for f in dataclasses.fields(sa)]
    out = {}
    for n in names:
        v = getattr(sa, n, None)
        try:
            json.dumps(v)
        except (TypeError, ValueError):
            v = repr(v)
        out[n] = v
    return out

for argv in argvs:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            if prepare_server_args is not None:
                sa = prepare_server_args(list(argv))
            else:
                p = argparse.ArgumentParser()
                ServerArgs.add_cli_args(p)
                sa = ServerArgs.from_cli_args(p.parse_args(list(argv)))
        res = {"ok": True, "fields": fields(sa)}
    except SystemExit as e:
        lines = [l for l in err.getvalue().splitlines() if l.strip()]
        msg = next((l.split(" error: ", 1)[1] for l in reversed(lines) if " error: " in l),
                   lines[-1] if lines else f"exited with code {e.code}")
        res = {"ok": False, "error": msg, "exit_code": e.code}
    except Exception as e:
        res = {"ok": False, "error": f"{type(e).__name__}: {e}", "exit_code": None}
    print("SPECWATCH-CHECK " + json.dumps(res), flush=True)
"""


class FlagError(ValueError):
    """SGLang's own parser rejected a flag; the message is SGLang's."""


class CheckUnavailable(RuntimeError):
    """The interpreter could not run SGLang's parser (no sglang there, not a Python, timeout)."""


@dataclass(frozen=True)
class Checked:
    ok: bool
    error: str | None
    fields: dict | None


def server_flags(argv: list[str]) -> list[str]:
    """The flags of a server command line: what follows `sglang.launch_server` (or all of argv)."""
    argv = list(argv)
    for i, tok in enumerate(argv):
        if tok in ("sglang.launch_server", "sglang.srt.server") or tok.endswith("launch_server.py"):
            return argv[i + 1:]
    return argv


def check_many(python: str, argvs: list[list[str]], timeout_s: float = TIMEOUT_S) -> list[Checked]:
    """Parse every command line with one start of `python`; one Checked per argv, in order."""
    flag_lists = [server_flags(a) for a in argvs]
    try:
        out = subprocess.run([python, "-c", _CHILD], input=json.dumps(flag_lists),
                             capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise CheckUnavailable(f"{python}: no such interpreter") from None
    except subprocess.TimeoutExpired:
        raise CheckUnavailable(f"{python}: SGLang's parser did not answer within {timeout_s:.0f} s"
                               ) from None
    except OSError as e:
        raise CheckUnavailable(f"{python}: cannot run it: {e}") from None
    results = [json.loads(line[len("SPECWATCH-CHECK "):]) for line in out.stdout.splitlines()
               if line.startswith("SPECWATCH-CHECK ")]
    if len(results) != len(flag_lists):
        tail = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise CheckUnavailable(f"{python} could not run SGLang's argument parser: {tail}")
    return [Checked(r["ok"], r.get("error"), r.get("fields")) for r in results]


def check_argv(python: str, argv: list[str]) -> None:
    """None when SGLang's parser accepts argv; raises FlagError(SGLang's message) otherwise."""
    (res,) = check_many(python, [argv])
    if not res.ok:
        raise FlagError(res.error)


# ----------------------------------------------------------------------------- sweep files

_FLAG_IN_MESSAGE = re.compile(r"(?:unrecognized arguments: |ambiguous option: |argument )(-[-\w]+)")


def rejected_flag(message: str) -> str | None:
    """The flag an argparse message names (`unrecognized arguments: --x`, `ambiguous option: --x
    could match ...`, `argument --x/--y: invalid ...`), or None."""
    m = _FLAG_IN_MESSAGE.search(message or "")
    return m.group(1).split("=", 1)[0] if m else None


def locate(path: str, flag: str | None, fallback: str) -> str:
    """`path:LINE` of the first line of the sweep file that writes `flag` as a quoted string, else
    `fallback` (the config's own `file:line`)."""
    if not flag:
        return fallback
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return fallback
    pat = re.compile(r"""["']""" + re.escape(flag) + r"""(?:=[^"']*)?["']""")
    for n, line in enumerate(lines, 1):
        if pat.search(line.split("#", 1)[0]):
            return f"{path}:{n}"
    return fallback


def check_sweep(sweep, python: str | None = None) -> int:
    """For `engine = "sglang"`: parse every config's server command line with the launch
    interpreter's SGLang parser (one interpreter start for all). Raises FlagError
    `SWEEP.toml:LINE: config NAME: <SGLang's message>` for the first rejected one; returns how many
    command lines were checked (0 for the built-in engine). Raises CheckUnavailable when the
    interpreter cannot run SGLang's parser (not a Python, no sglang there)."""
    from specwatch.run import launch

    if sweep.engine != "sglang" or not sweep.configs:
        return 0
    python = python or launch.launch_python(sweep.launch_command)
    if python is None:
        raise CheckUnavailable(f"launch_command {list(sweep.launch_command or ())} does not start "
                               "with a Python interpreter, so its SGLang flags cannot be checked")
    configs, argvs = [], []
    for c in sweep.configs:
        try:
            argvs.append(launch.command(sweep.engine, c, sweep.port or 30000, None,
                                        sweep.launch_command, sweep.sglang_version))
            configs.append(c)
        except launch.LaunchFailed:
            continue  # measuring it reports this config's own error
    for c, res in zip(configs, check_many(python, argvs)):
        if not res.ok:
            where = locate(sweep.path, rejected_flag(res.error), c.where)
            raise FlagError(f"{where}: config {c.name}: SGLang's parser ({python}) rejects the "
                            f"server flags: {res.error}")
    return len(argvs)
