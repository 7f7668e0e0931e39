# Shared by the side-env builders (scripts/sglang_env.sh, scripts/vllm_env.sh): one cached Python
# environment per requirement set, built under a lock and published atomically, so two runs on one
# machine never delete or use each other's half-built env. Source it; do not run it.
#
#   # in scripts/x_env.sh (which runs under set -euo pipefail):
#   source "$(dirname "${BASH_SOURCE[0]}")/_side_env.sh"
#   if [ "${1:-}" = --build-into ]; then     # the build, run as its own process (below), so set -e
#     "$(side_env_python)" -m venv "$2"      # holds in it; $2 is an empty dir that is the env's final
#     "$2/bin/python" -m pip install -q ...  # path (never moved: venv scripts keep working)
#     exit 0
#   fi
#   check_x() { "$1/bin/python" -c "import x"; }   # is a finished env usable? (`true` if nothing)
#   ENV_DIR="$(side_env_ensure "$CACHE" x-1.2.3 "$STAMP" check_x bash "$0" --build-into)"
#   echo "$ENV_DIR/bin/python"
#
# The build is a command (BUILD_CMD..., the build dir appended), not a function: bash ignores
# set -e inside any function called from a condition or a $(...) used in one, even in a subshell
# that sets it again, so a failing step in a function would go unnoticed. Its stdout goes to stderr
# (stdout is side_env_ensure's result).
#
# STAMP is the whole requirement set as text (interpreter, versions, package list): its sha256
# names the env, so a different set is a different env and a cached one is valid exactly when its
# stamp matches. Layout under CACHE (outside any clone, e.g. ~/.cache/specwatch-sglang):
#   .build/NAME-HASH.RANDOM/   the env itself, built in place; .complete holds STAMP once it passed
#   NAME-HASH -> .build/...    published by rename(2) of a symlink (atomic) only after the check
#   .NAME.lock                 flock: one builder per NAME at a time; readers of a published env
#                              take no lock
# side_env_ensure prints the env's real directory (not the link), so a run keeps using the same
# files even if the link is later replaced. After publishing it removes unpublished build dirs of
# NAME (left by a killed build; none can be in progress, we hold the lock) and all but the newest
# $SPECWATCH_SIDE_ENV_KEEP (default 2) published envs of NAME. The lock waits at most
# $SPECWATCH_SIDE_ENV_LOCK_WAIT_S (default 3600) seconds for another builder.

# The interpreter a side env is built from: $SPECWATCH_SIDE_PYTHON if set, else `python3.11` on
# PATH; it must be CPython 3.11 (the project's version), or this fails saying so. Printed as the
# real path of its base interpreter (never a venv's python, which may be deleted, e.g. .venv-ci).
side_env_python() {
  local cand="${SPECWATCH_SIDE_PYTHON:-python3.11}" out
  if ! out="$("$cand" -c 'import os, sys
assert sys.version_info[:2] == (3, 11), sys.version
print(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))' 2>&1)"; then
    echo "side env: interpreter '$cand' is not a working Python 3.11 ($out);" \
         "set SPECWATCH_SIDE_PYTHON to a python3.11" >&2
    return 1
  fi
  echo "$out"
}

# side_env_ensure CACHE NAME STAMP CHECK_FN BUILD_CMD...  -> prints the env's directory
side_env_ensure() {
  local cache="$1" name="$2" stamp="$3" check="$4"
  shift 4
  local hash link dir fd tmp newlink
  hash="$(printf '%s' "$stamp" | sha256sum | cut -c1-12)"
  link="$cache/$name-$hash"
  # Fast path: a published env whose stamp matches and which passes the check.
  if dir="$(_side_env_valid "$link" "$stamp" "$check")"; then echo "$dir"; return 0; fi
  mkdir -p "$cache/.build"
  exec {fd}>>"$cache/.$name.lock"
  if ! flock -w "${SPECWATCH_SIDE_ENV_LOCK_WAIT_S:-3600}" "$fd"; then
    echo "side env: $cache/.$name.lock still held by another build after" \
         "${SPECWATCH_SIDE_ENV_LOCK_WAIT_S:-3600} s; is one hung? (see: fuser $cache/.$name.lock)" >&2
    exec {fd}>&-
    return 1
  fi
  # Another run may have built it while we waited.
  if dir="$(_side_env_valid "$link" "$stamp" "$check")"; then
    exec {fd}>&-; echo "$dir"; return 0
  fi
  tmp="$(mktemp -d "$cache/.build/$name-$hash.XXXXXX")"
  chmod 755 "$tmp"
  echo "side env: building $name ($hash) in $tmp" >&2
  # The build's processes do not inherit the lock fd: one left behind cannot hold the lock.
  if ! "$@" "$tmp" {fd}>&- >&2 || ! "$check" "$tmp" {fd}>&- >&2; then
    echo "side env: building $name failed; $tmp removed" >&2
    rm -rf "$tmp"; exec {fd}>&-; return 1
  fi
  printf '%s\n' "$stamp" > "$tmp/.complete"
  newlink="$cache/.link.$name.$$"
  ln -sfn ".build/${tmp##*/}" "$newlink"
  mv -Tf "$newlink" "$link"
  _side_env_prune "$cache" "$name" "$link"
  exec {fd}>&-
  echo "$tmp"
}

# Prints the real directory of a published env and succeeds when its stamp matches and CHECK_FN
# passes on it.
_side_env_valid() {
  local link="$1" stamp="$2" check="$3" dir
  [ -L "$link" ] || return 1
  dir="$(readlink -f "$link")" || return 1
  [ "$(cat "$dir/.complete" 2>/dev/null)" = "$stamp" ] || return 1
  "$check" "$dir" >/dev/null 2>&1 || return 1
  echo "$dir"
}

# Under the lock: keep the newest $SPECWATCH_SIDE_ENV_KEEP published envs of NAME (always KEEP_LINK),
# delete the others and every build dir of NAME no kept link points to.
_side_env_prune() {
  local cache="$1" name="$2" keep_link="$3" keep="${SPECWATCH_SIDE_ENV_KEEP:-2}" l d n=0
  local -A kept=()
  kept["$(readlink -f "$keep_link")"]=1
  n=1
  while IFS= read -r l; do
    [ "$l" = "$keep_link" ] && continue
    if [ "$n" -lt "$keep" ]; then
      kept["$(readlink -f "$l")"]=1; n=$((n + 1))
    else
      rm -f "$l"
    fi
  done < <(ls -1td "$cache/$name"-???????????? 2>/dev/null)
  for d in "$cache/.build/$name"-????????????.*; do
    [ -d "$d" ] || continue
    [ -n "${kept[$(readlink -f "$d")]:-}" ] || rm -rf "$d"
  done
  rm -f "$cache/.link.$name".* 2>/dev/null || true
}
