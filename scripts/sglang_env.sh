#!/usr/bin/env bash
# Build (once) and print the path of the side Python environment holding the real `sglang` wheel,
# the reference the contract tests (tests/contract/) compare specwatch against.
#
#   bash scripts/sglang_env.sh [VERSION]     -> prints  $CACHE/VERSION/bin/python
#
# VERSION defaults to $SPECWATCH_SGLANG_VERSION, else 0.5.23. CACHE is $SPECWATCH_SGLANG_CACHE, else
# ~/.cache/specwatch-sglang: outside the clone, kept between CI runs on the same machine, one venv
# per version (a finished one has a .complete stamp; a half-built one is rebuilt).
#
# What goes in: `sglang==VERSION` with --no-deps, the torch/torchvision pair sglang pins (PyPI's
# CUDA build: sglang imports torchvision at `sglang.srt.configs`, and PyPI's torchvision needs
# libtorch_cuda, so the suite's CPU torch cannot import sglang's reporter or model code; ~5 GB,
# about a minute from PyPI), and the small packages its parser, reporter, model modules and
# `launch_server` import, at the versions sglang's own metadata pins when it pins one. The venv
# sees the main environment's packages (--system-site-packages) but its own come first.
set -euo pipefail
VERSION="${1:-${SPECWATCH_SGLANG_VERSION:-0.5.23}}"
CACHE="${SPECWATCH_SGLANG_CACHE:-$HOME/.cache/specwatch-sglang}"
DEST="$CACHE/$VERSION"
PY="$DEST/bin/python"
# Imports of sglang $VERSION's parser, reporter, models and launch_server up to model construction
# (found by importing them; on CPU launch_server then dies in RotaryEmbedding: no module 'vllm').
DEPS=(psutil pybase64 msgspec pyzmq tqdm aiohttp transformers einops apache-tvm-ffi dill
      sentencepiece compressed-tensors gguf openai partial_json_parser uvloop fastapi setproctitle
      xgrammar soundfile)
STAMP="sglang==$VERSION ${DEPS[*]}"
if [ "$(cat "$DEST/.complete" 2>/dev/null)" = "$STAMP" ] \
    && "$PY" -c "import sglang.srt.server_args" >/dev/null 2>&1; then
  echo "$PY"
  exit 0
fi
mkdir -p "$CACHE"
rm -rf "$DEST"
BASE_PY="${SPECWATCH_BASE_PYTHON:-python3}"
"$BASE_PY" -m venv --system-site-packages "$DEST" >&2
"$PY" -m pip install -q --no-deps "sglang==$VERSION" >&2
# sglang's own pins for the packages above (Requires-Dist lines without an extra marker).
mapfile -t SPECS < <("$PY" - "${DEPS[@]}" <<'EOF'
import re, sys
from importlib.metadata import requires
wanted = {re.sub(r"[-_.]+", "-", d).lower() for d in sys.argv[1:]}
seen = set()
for req in requires("sglang") or []:
    if "extra ==" in req:
        continue
    spec = req.split(";")[0].strip()
    name = re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.\-]+", spec).group(0)).lower()
    if name in wanted or name in ("torch", "torchvision"):
        print(spec)
        seen.add(name)
for name in sorted(wanted - seen):
    print(name)
if "torchvision" not in seen:
    print("torchvision")
EOF
)
"$PY" -m pip install -q "${SPECS[@]}" >&2 2> >(grep -v "^WARNING: Location\|dependency resolver\|requires .*, but you have" >&2)
"$PY" -c "import sglang.srt.server_args, sglang.srt.managers.scheduler_components.metrics_reporter, sglang.srt.entrypoints.http_server" >&2
echo "$STAMP" > "$DEST/.complete"
echo "$PY"
