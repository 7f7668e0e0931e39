"""The built-in engine: a small EAGLE-3-style speculative decoder served like SGLang.

`python -m specwatch.engine --model-path builtin:target ...` accepts SGLang `launch_server` flags,
serves SGLang's HTTP API and writes SGLang-format logs to stderr. It is a stand-in for SGLang on
machines without a GPU, not a production server.

Importing this package is cheap (no torch): the server, scheduler and decoder load lazily.
"""

from __future__ import annotations

from pathlib import Path

BUILTIN_PREFIX = "builtin:"


def models_dir() -> Path:
    """Folder of the committed built-in models (`target`, `draft-eagle3`, `draft-eagle3-shifted`)."""
    return Path(__file__).resolve().parent / "models"
