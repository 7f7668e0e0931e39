#!/usr/bin/env bash
# The lock and the bounds. scripts/test.sh (and the README's main job) install with the lock,
# requirements/constraints.txt: every package of a fresh install pinned, so two fresh machines get
# the same releases. pyproject.toml's bounds say which releases specwatch works with; this script
# checks both ends of them and writes the lock from the newest end.
#
#   bash scripts/refresh_constraints.sh            # newest: a fresh venv, `pip install -e
#                                                  # .[dev,ray,slurm]` with no lock (the newest
#                                                  # releases the bounds allow), the checks, then
#                                                  # requirements/constraints.txt = its pip freeze
#   bash scripts/refresh_constraints.sh --lowest   # lowest: every lower bound pinned (>=X as ==X),
#                                                  # the checks; writes nothing
#
# The checks: the representative tests below (transformers' export, a Triton kernel, the parser,
# the SQL sandbox on DuckDB, the dashboard on Streamlit, the C scanner, both `kernels` packages).
# After a refresh, run `bash scripts/test.sh` (every tier, with the new lock) before committing
# the lock; after raising a bound, run both modes. torch stays the CPU build 2.13.0 that pip finds
# in /opt/wheels on this kind of machine (the lock says torch==2.13.0, which that +cpu build
# satisfies; PyPI's 2.13.0 is a multi-GB CUDA build). Needs the same python3.11 as scripts/test.sh
# ($SPECWATCH_SIDE_PYTHON, else python3.11 on PATH); ~2 min install and ~5 min of tests on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_side_env.sh
MODE="${1:-newest}"
CHECKS=(tests/test_parse.py tests/test_engine_export.py tests/test_kernels_select_tree.py
        tests/test_stats.py tests/test_sql_sandbox.py tests/test_dashboard_app.py
        tests/test_fastscan.py tests/test_import_names.py)
EXTRAS='.[dev,ray,slurm]'
BASE_PY="$(side_env_python)"
VENV="$(mktemp -d)/venv"
trap 'rm -rf "$(dirname "$VENV")"' EXIT
"$BASE_PY" -m venv "$VENV"
PY="$VENV/bin/python"

case "$MODE" in
  newest) PINS=() ;;
  --lowest)
    # Each requirement of the project, its extras dev/ray/slurm included, at its lower bound.
    "$BASE_PY" - pyproject.toml > "$(dirname "$VENV")/lowest.txt" <<'EOF'
import re, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
reqs = project["dependencies"] + [r for x in ("dev", "ray", "slurm")
                                  for r in project["optional-dependencies"].get(x, [])]
pins = {}
for req in reqs:
    name = re.match(r"[A-Za-z0-9_.\-]+", req).group(0)
    low = re.search(r"(?:>=|==)\s*([^,;\s]+)", req)
    if low is None:
        sys.exit(f"pyproject.toml: {req!r} has no lower bound; give it one (>=X) that is tested")
    pins[name.lower()] = f"{name}=={low.group(1)}"
print("\n".join(sorted(pins.values())))
EOF
    PINS=(-c "$(dirname "$VENV")/lowest.txt")
    echo "lower bounds:" && cat "$(dirname "$VENV")/lowest.txt" ;;
  *) echo "usage: bash scripts/refresh_constraints.sh [--lowest]" >&2; exit 2 ;;
esac

start=$SECONDS
"$PY" -m pip install -q "${PINS[@]}" -e "$EXTRAS"
echo "installed in $((SECONDS - start)) s ($MODE)"
"$PY" -m pip freeze --exclude-editable | grep -v '^specwatch[= @]' > "$(dirname "$VENV")/freeze.txt"
"$PY" -m pytest -q -m '' -p no:cacheprovider "${CHECKS[@]}"

if [ "$MODE" = newest ]; then
  mkdir -p requirements
  {
    echo "# The lock: a fresh \`pip install -e '$EXTRAS'\` resolved $(date -u +%Y-%m-%d) on"
    echo "# $("$PY" --version), then pip freeze. Regenerate with scripts/refresh_constraints.sh;"
    echo "# install with \`pip install -c requirements/constraints.txt -e '$EXTRAS'\`."
    # torch: the public version only, so that the CPU build on disk (2.13.0+cpu) satisfies it.
    sed -E 's/^(torch==[^+]+)\+cpu$/\1/' "$(dirname "$VENV")/freeze.txt"
  } > requirements/constraints.txt
  echo "wrote requirements/constraints.txt ($(grep -vc '^#' requirements/constraints.txt) packages)"
fi
