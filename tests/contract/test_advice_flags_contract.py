"""Every SGLang flag doctor's advice names (tests/advice_flags.py, run with specwatch's interpreter)
is one the installed SGLang's server parser takes, and SGLang's own start-up message for a KV
pool that does not fit gets the KV hint in SGLang's words."""
from __future__ import annotations

import argparse
import inspect
import json
import re
import subprocess
from pathlib import Path

from .conftest import SPECWATCH_PY

ROOT = Path(__file__).resolve().parents[2]


def _specwatch(code_or_script: list[str], stdin: str | None = None) -> str:
    return subprocess.run([SPECWATCH_PY, *code_or_script], input=stdin, capture_output=True,
                          text=True, check=True, cwd=ROOT).stdout


def test_every_flag_doctor_advises_on_sglang_is_sglangs():
    from sglang.srt.server_args import ServerArgs
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    named = json.loads(_specwatch(["tests/advice_flags.py"]))["sglang"]
    assert "--mem-fraction-static" in named and "--max-running-requests" in named
    assert [f for f in named if f not in parser._option_string_actions] == []


def test_sglangs_kv_pool_error_gets_the_kv_hint_in_sglangs_words():
    from sglang.srt.model_executor import pool_configurator
    msg = re.search(r'"(Not enough memory\.[^"]*)"', inspect.getsource(pool_configurator)).group(1)
    hint = _specwatch(["-c", "import sys\nfrom specwatch.diagnose.serving import failure_hint\n"
                             "print(failure_hint(sys.stdin.read(), {'served_by': 'sglang'}))"],
                      stdin=f"RuntimeError: {msg}")
    assert "KV cache does not fit" in hint and "raise --mem-fraction-static" in hint
