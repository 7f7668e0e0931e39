#!/usr/bin/env bash
# The test command (README and .ci/run): installs what the tests need, then runs the default
# suite, the slow suite and the contract tier (against the real sglang). Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
# Debian's chromium drives the dashboard's real-browser test (Playwright uses /usr/bin/chromium).
if ! command -v chromium >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "warning: could not install chromium; browser tests will fail" >&2
fi
# [ray]: the Ray executor's tests run on a Ray cluster simulated on this machine; [slurm]:
# the Slurm executor's run on submitit's local executor.
python -m pip install -q -e '.[dev,ray,slurm]'
python -m pytest -q
# Slower end-to-end tests; pytest exits 5 when a marker selects nothing.
python -m pytest -q -m slow || { rc=$?; [ "$rc" -eq 5 ] || exit "$rc"; }
# Contract tier: tests/contract compares specwatch with the real sglang wheel, run under the side
# environment scripts/sglang_env.sh builds once and caches outside the clone (~5 GB, ~5 min the
# first time on 2 cores; seconds when cached). A broken side env fails here, never skips.
SGLANG_PY="$(bash scripts/sglang_env.sh)"
"$SGLANG_PY" -m pytest -q tests/contract
"$SGLANG_PY" -m pytest -q -m slow tests/contract || { rc=$?; [ "$rc" -eq 5 ] || exit "$rc"; }
