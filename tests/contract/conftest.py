"""The contract tier: tests that compare specwatch with the real `sglang` package.

They run under the side environment's interpreter (scripts/sglang_env.sh builds it; scripts/test.sh
runs `$SGLANG_PY -m pytest tests/contract`), which imports the real sglang in-process. The default
suite runs in specwatch's own environment, where sglang is absent: tests/conftest.py leaves this
directory out there, so nothing here is ever skipped.
"""
from __future__ import annotations

import os
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

import sglang  # noqa: F401  (an ImportError here is a broken side environment: fail, never skip)

SGLANG_VERSION = version("sglang")
SGLANG_PY = sys.executable
# The interpreter specwatch itself is installed in: the CLI runs there, as a user's. scripts/test.sh
# sets SPECWATCH_PY to its fresh venv's python (the side env holds no specwatch install).
SPECWATCH_PY = os.environ.get("SPECWATCH_PY") or getattr(sys, "_base_executable", sys.executable)


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.contract)


def pytest_report_header(config):
    return f"contract tier: real sglang {SGLANG_VERSION} under {SGLANG_PY}"
