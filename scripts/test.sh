#!/usr/bin/env bash
# The test command (README and .ci/run). Every run builds a fresh venv, installs the project into
# it with the lock (requirements/constraints.txt), then runs every tier to its end whatever the
# others did, prints one summary line per tier and exits 1 if any tier (or the install) failed.
#
#   bash scripts/test.sh
#
# Tiers: default (`pytest`, i.e. -m 'not slow'), slow (-m slow), contract-sglang (tests/contract
# under the real sglang of scripts/sglang_env.sh's side env), contract-vllm (scripts/vllm_env.sh).
# pytest's exit 5 (the tier selected no test) counts as passed.
#
# Environment:
#   SPECWATCH_CI_VENV       where the fresh venv goes (default .venv-ci in the clone, gitignored;
#                           deleted and rebuilt at every run)
#   SPECWATCH_CI_UNLOCKED=1 install without the lock: the newest releases pyproject.toml's bounds
#                           allow (how a bound is checked; scripts/refresh_constraints.sh uses it)
#   SPECWATCH_SIDE_PYTHON   the python3.11 both venvs are built from (default: python3.11 on PATH;
#                           scripts/_side_env.sh checks it is 3.11)
#   SPECWATCH_TIERS         the tiers to run, space-separated (default: all four)
#   SPECWATCH_PYTEST_ARGS   more pytest arguments for every tier (split on spaces), e.g. one test
#                           file to try this script itself
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
source scripts/_side_env.sh
VENV="${SPECWATCH_CI_VENV:-$ROOT/.venv-ci}"
TIERS="${SPECWATCH_TIERS:-default slow contract-sglang contract-vllm}"
REPORTS="$(mktemp -d)"
trap 'rm -rf "$REPORTS"' EXIT
SUMMARY=()
FAILED=0

# summarize NAME RC SECONDS [JUNIT_XML...]: one summary line; a tier failed unless pytest said 0 or 5.
summarize() {
  local name="$1" rc="$2" secs="$3" counts result=passed
  shift 3
  counts="$("$BASE_PY" - "$@" <<'EOF'
import sys
import xml.etree.ElementTree as ET
n = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
for path in sys.argv[1:]:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        continue
    for suite in ([root] if root.tag == "testsuite" else root.iter("testsuite")):
        for k in n:
            n[k] += int(suite.get(k, 0))
print(n["tests"] - n["failures"] - n["errors"] - n["skipped"], n["failures"] + n["errors"], n["skipped"])
EOF
)"
  read -r p f s <<<"$counts"
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then
    result=FAILED; FAILED=1
    # A tier that failed with no failed test (a broken side env, a crash, a usage error) still
    # counts one failure in the total line.
    [ "${f:-0}" -eq 0 ] && f=1
  fi
  SUMMARY+=("$(printf '%-16s %-7s %6s passed %4s failed %5s skipped %6ss  (exit %s)' \
    "$name" "$result" "${p:-0}" "${f:-0}" "${s:-0}" "$secs" "$rc")")
  TOTAL_P=$((TOTAL_P + ${p:-0})); TOTAL_F=$((TOTAL_F + ${f:-0})); TOTAL_S=$((TOTAL_S + ${s:-0}))
}
TOTAL_P=0; TOTAL_F=0; TOTAL_S=0

# tier NAME PYTHON PYTEST_ARGS...: one pytest run, its counts from its JUnit XML.
tier() {
  local name="$1" py="$2" start rc
  shift 2
  echo "=== tier $name: $py -m pytest $*" >&2
  start=$SECONDS
  # shellcheck disable=SC2086  (SPECWATCH_PYTEST_ARGS is split on purpose)
  "$py" -m pytest -q --junitxml="$REPORTS/$name.xml" "$@" ${SPECWATCH_PYTEST_ARGS:-}
  rc=$?
  summarize "$name" "$rc" $((SECONDS - start)) "$REPORTS/$name.xml"
}

# side_tier NAME ENV_SCRIPT PYTEST_ARGS...: a tier under a side env's python (a failed build fails
# the tier, never skips it).
side_tier() {
  local name="$1" script="$2" start py rc
  shift 2
  start=$SECONDS
  if ! py="$(bash "$script")"; then
    echo "=== tier $name: $script failed to build its env" >&2
    summarize "$name" 1 $((SECONDS - start))
    return
  fi
  tier "$name" "$py" "$@"
}

# Debian's chromium drives the dashboard's real-browser test (Playwright uses /usr/bin/chromium).
if ! command -v chromium >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "warning: could not install chromium; browser tests will fail" >&2
fi

# The fresh venv. [ray]: the Ray executor's tests run on a Ray cluster simulated on this machine;
# [slurm]: the Slurm executor's run on submitit's local executor.
start=$SECONDS
BASE_PY="$(side_env_python)" || exit 1
# Disk: the venv takes ~3.2 GB and the side envs ~5.7 GB (sglang) + ~3.5 GB (vllm) the first time.
# A full disk otherwise shows up as pip's bare "[Errno 28] No space left on device" mid-install.
check_disk() {  # check_disk DIR NEED_GB WHAT
  local dir="$1" need="$2" what="$3" free
  while [ ! -d "$dir" ]; do dir="$(dirname "$dir")"; done
  free="$(df -Pk "$dir" | awk 'NR == 2 { printf "%.1f", $4 / 1048576 }')"
  if awk -v f="$free" -v n="$need" 'BEGIN { exit !(f < n) }'; then
    echo "warning: only ${free} GB free on the filesystem of $dir; $what needs about ${need} GB:" \
         "free some space (or point SPECWATCH_CI_VENV / the side env caches elsewhere) if the" \
         "install fails with 'No space left on device'" >&2
  fi
}
check_disk "$(dirname "$VENV")" 4 "the test venv ($VENV)"
for cache in "${SPECWATCH_SGLANG_CACHE:-$HOME/.cache/specwatch-sglang}:6" \
             "${SPECWATCH_VLLM_CACHE:-$HOME/.cache/specwatch-vllm}:4"; do
  # a side env is built once per machine: only a cache that does not exist yet needs the space
  [ -d "${cache%:*}" ] || check_disk "${cache%:*}" "${cache##*:}" "the side env built into ${cache%:*}"
done
LOCK=(-c requirements/constraints.txt)
[ "${SPECWATCH_CI_UNLOCKED:-}" = 1 ] && LOCK=()
echo "=== install: fresh $VENV from $BASE_PY, pip install ${LOCK[*]} -e .[dev,ray,slurm]" >&2
rm -rf "$VENV"
if "$BASE_PY" -m venv "$VENV" && "$VENV/bin/python" -m pip install -q "${LOCK[@]}" -e '.[dev,ray,slurm]'; then
  SUMMARY+=("$(printf '%-16s %-7s %48ss' install ok $((SECONDS - start)))")
else
  SUMMARY+=("$(printf '%-16s %-7s %48ss' install FAILED $((SECONDS - start)))")
  printf '%s\n' "${SUMMARY[@]}"
  echo "total: 0 passed, 1 failed"
  exit 1
fi
PY="$VENV/bin/python"
# The contract tiers run the specwatch CLI with the interpreter specwatch is installed in.
export SPECWATCH_PY="$PY"

for t in $TIERS; do
  case "$t" in
    default) tier default "$PY" ;;
    slow) tier slow "$PY" -m slow ;;
    # tests/contract under the real sglang (scripts/sglang_env.sh caches the ~5 GB side env outside
    # the clone: ~5 min the first time on 2 cores, seconds when cached); -m '' runs its slow ones too.
    contract-sglang) side_tier contract-sglang scripts/sglang_env.sh -m '' tests/contract ;;
    # tests/contract_vllm under real vLLM for CPU (scripts/vllm_env.sh caches the ~3.5 GB side env:
    # a few minutes the first time, seconds when cached); its slow tests serve real vLLM (eager,
    # ~35 s a server start on an idle 2-core box) and run examples/vllm_cpu_sweep.toml.
    contract-vllm) side_tier contract-vllm scripts/vllm_env.sh -m '' tests/contract_vllm ;;
    *) echo "unknown tier '$t' in SPECWATCH_TIERS" >&2; SUMMARY+=("$t: unknown tier"); FAILED=1 ;;
  esac
done

echo
echo "=== summary ($VENV, lock: ${LOCK[*]:-none})"
printf '%s\n' "${SUMMARY[@]}"
echo "total: $TOTAL_P passed, $TOTAL_F failed, $TOTAL_S skipped"
exit "$FAILED"
