#!/usr/bin/env bash
# Build (once) and print the path of the side Python environment holding the real `sglang` wheel,
# the reference the contract tests (tests/contract/) compare specwatch against.
#
#   bash scripts/sglang_env.sh [VERSION]     -> prints the env's bin/python
#
# VERSION defaults to $SPECWATCH_SGLANG_VERSION, else 0.5.23. CACHE is $SPECWATCH_SGLANG_CACHE, else
# ~/.cache/specwatch-sglang: outside the clone, kept between CI runs on the same machine. One env
# per requirement set (scripts/_side_env.sh: built under a lock, published atomically, so two runs
# at once never harm each other; the stamp below decides whether a cached env is valid).
#
# Built from an explicit python3.11 ($SPECWATCH_SIDE_PYTHON, else `python3.11` on PATH, checked to
# be 3.11; never whatever `python3` comes first). Isolated: no --system-site-packages, so what it
# holds does not depend on the machine's or the caller's Python. What goes in: `sglang==VERSION`
# with --no-deps, the torch/torchvision pair sglang pins (PyPI's CUDA build: sglang imports
# torchvision at `sglang.srt.configs`, and PyPI's torchvision needs libtorch_cuda; ~5 GB, about a
# minute from PyPI), the small packages its parser, reporter, model modules and `launch_server`
# import (at the versions sglang's own metadata pins when it pins one), and what the contract tier
# imports in-process besides sglang: specwatch's own dependencies (pyproject.toml's bounds; the
# specwatch source itself comes from the clone the tests run in) and pytest. The CLI the tier
# starts runs under $SPECWATCH_PY (scripts/test.sh sets it), specwatch's own environment.
#
# Tests of the cache (tests/test_side_env.py) replace the whole requirement set:
#   SPECWATCH_SGLANG_TEST_SPECS  pip arguments installed instead of sglang and everything above
#   SPECWATCH_SGLANG_TEST_CHECK  the modules the check imports instead of sglang's
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/_side_env.sh"
VERSION="${SPECWATCH_SGLANG_VERSION:-0.5.23}"
[ "${1:-}" != --build-into ] && [ -n "${1:-}" ] && VERSION="$1"
CACHE="${SPECWATCH_SGLANG_CACHE:-$HOME/.cache/specwatch-sglang}"
BASE_PY="$(side_env_python)"
# Imports of sglang $VERSION's parser, reporter, models, launch_server up to model construction and
# its HTTP server (found by importing them; on CPU launch_server then dies in RotaryEmbedding: no
# module 'vllm').
DEPS=(psutil pybase64 msgspec pyzmq tqdm aiohttp transformers einops apache-tvm-ffi dill
      sentencepiece compressed-tensors gguf openai partial_json_parser uvloop fastapi uvicorn
      setproctitle xgrammar soundfile orjson python-multipart)
CHECK="sglang.srt.server_args sglang.srt.managers.scheduler_components.metrics_reporter sglang.srt.entrypoints.http_server"
# specwatch's own dependencies and the test runner, with pyproject.toml's bounds.
mapfile -t OURS < <("$BASE_PY" - "$HERE/../pyproject.toml" <<'EOF'
import re, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
dev = {re.match(r"[A-Za-z0-9_.\-]+", r).group(0): r for r in project["optional-dependencies"]["dev"]}
for req in project["dependencies"] + [dev["pytest"], dev["pytest-timeout"], dev["safetensors"]]:
    print(req)
EOF
)
if [ -n "${SPECWATCH_SGLANG_TEST_SPECS:-}" ]; then
  NAME="test-$VERSION"
  STAMP="$BASE_PY test: $SPECWATCH_SGLANG_TEST_SPECS check: ${SPECWATCH_SGLANG_TEST_CHECK:-}"
  CHECK="${SPECWATCH_SGLANG_TEST_CHECK:-}"
else
  NAME="sglang-$VERSION"
  STAMP="$BASE_PY sglang==$VERSION ${DEPS[*]} torch torchvision | ${OURS[*]} | check: $CHECK"
fi

if [ "${1:-}" = --build-into ]; then   # the build itself, run by side_env_ensure: $2 = env dir
  PY="$2/bin/python"
  "$BASE_PY" -m venv "$2"
  if [ -n "${SPECWATCH_SGLANG_TEST_SPECS:-}" ]; then
    # shellcheck disable=SC2086  (pip arguments, split on purpose)
    "$PY" -m pip install -q $SPECWATCH_SGLANG_TEST_SPECS
    exit 0
  fi
  "$PY" -m pip install -q --no-deps "sglang==$VERSION"
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
  "$PY" -m pip install -q "${SPECS[@]}" "${OURS[@]}" \
    2> >(grep -v "^WARNING: Location\|dependency resolver\|requires .*, but you have" >&2)
  # Whatever the check modules import that the list above misses (a new sglang release imports a
  # new package: 0.5.23's utils import orjson): each missing module is installed from sglang's own
  # requirement for it, until the check imports or 40 rounds pass (then the check below fails).
  for _ in $(seq 40); do
    # shellcheck disable=SC2086
    MISSING="$("$PY" - $CHECK <<'EOF'
import importlib, sys
try:
    [importlib.import_module(m) for m in sys.argv[1:]]
except ModuleNotFoundError as exc:
    print((exc.name or "").split(".")[0])
EOF
)"
    [ -z "$MISSING" ] && break
    REQ="$("$PY" - "$MISSING" <<'EOF'
import re, sys
from importlib.metadata import requires
norm = lambda s: re.sub(r"[-_.]+", "-", s).lower()
# import names that differ from their distribution's name
alias = {"zmq": "pyzmq", "yaml": "pyyaml", "PIL": "pillow", "cv2": "opencv-python-headless",
         "google": "protobuf", "sklearn": "scikit-learn", "dateutil": "python-dateutil",
         "multipart": "python-multipart", "IPython": "ipython", "jwt": "pyjwt"}
want = norm(alias.get(sys.argv[1], sys.argv[1]))
for req in requires("sglang") or []:
    spec = req.split(";")[0].strip()
    if "extra ==" not in req and norm(re.match(r"[A-Za-z0-9_.\-]+", spec).group(0)) == want:
        print(spec)
        break
else:
    print(want)   # a transitive import sglang does not pin
EOF
)"
    echo "side env: sglang imports $MISSING; installing $REQ" >&2
    "$PY" -m pip install -q "$REQ" "${OURS[@]}" \
      2> >(grep -v "^WARNING: Location\|dependency resolver\|requires .*, but you have" >&2)
  done
  "$PY" -m pip freeze > "$2/.freeze"   # what it resolved to, for reading when a contract changes
  exit 0
fi

check_sglang() {
  [ -z "$CHECK" ] && return 0
  # shellcheck disable=SC2086
  "$1/bin/python" -c "import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]" $CHECK
}
export SPECWATCH_SGLANG_VERSION="$VERSION"   # for the build process
ENV_DIR="$(side_env_ensure "$CACHE" "$NAME" "$STAMP" check_sglang bash "$0" --build-into)"
echo "$ENV_DIR/bin/python"
