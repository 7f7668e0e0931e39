"""Generate specwatch/engine/sglang_flags.json from the real SGLang parser.

Run with the side environment's interpreter (scripts/sglang_env.sh prints it):

    $(bash scripts/sglang_env.sh) scripts/gen_engine_flags.py            # rewrite the file
    $(bash scripts/sglang_env.sh) scripts/gen_engine_flags.py --check    # exit 1 if it differs

The table is what `specwatch.engine.args` builds its argparse parser from, so the built-in engine
accepts exactly the flags, spellings, nargs, choices and abbreviation rules SGLang's
`prepare_server_args` parser accepts. tests/contract/test_engine_flags_contract.py runs `--check`.
"""
from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import version
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "specwatch" / "engine" / "sglang_flags.json"


def _jsonable(v):
    try:
        json.dumps(v)
        return v
    except (TypeError, ValueError):
        return repr(v)


def _type_name(t) -> str | None:
    if t is None:
        return None
    if t in (int, float, str):
        return t.__name__
    return f"{getattr(t, '__module__', '?')}.{getattr(t, '__qualname__', repr(t))}"


def table() -> dict:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")   # as prepare_server_args builds it
    ServerArgs.add_cli_args(parser)
    actions = []
    for a in parser._actions:
        if isinstance(a, argparse._HelpAction):
            continue
        actions.append({
            "option_strings": list(a.option_strings),
            "dest": a.dest,
            "action": type(a).__name__,
            "nargs": a.nargs,
            # SGLang's DeprecatedStoreConstAction keeps its stored value in const_value
            "const": _jsonable(a.const if a.const is not None else getattr(a, "const_value", None)),
            "default": _jsonable(a.default),
            "type": _type_name(a.type),
            # A set's order changes per process (hash seed): sorted, so the table is stable.
            "choices": None if a.choices is None else [_jsonable(c) for c in (
                sorted(a.choices, key=str) if isinstance(a.choices, (set, frozenset))
                else a.choices)],
            "required": bool(a.required),
        })
    return {
        "sglang_version": version("sglang"),
        "generated_by": "scripts/gen_engine_flags.py",
        "prog": parser.prog,
        "allow_abbrev": parser.allow_abbrev,
        "prefix_chars": parser.prefix_chars,
        "actions": actions,
    }


def main(argv: list[str]) -> int:
    text = json.dumps(table(), indent=1, sort_keys=True) + "\n"
    if "--check" in argv:
        old = OUT.read_text() if OUT.is_file() else ""
        if old != text:
            print(f"{OUT} differs from the parser of the installed sglang {version('sglang')}: "
                  f"regenerate it with scripts/gen_engine_flags.py", file=sys.stderr)
            return 1
        print(f"{OUT.name} matches sglang {version('sglang')}")
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(json.loads(text)['actions'])} flags, sglang {version('sglang')})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
