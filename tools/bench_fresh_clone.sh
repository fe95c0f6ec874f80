#!/usr/bin/env bash
# `make local` or `make test` as a newcomer meets it: for each commit given (default HEAD), a fresh clone of
# this repository with every cache empty (the image runtimes, uv's, pip's, npm's), the target once (cold);
# `make local` then three times more with nothing changed (warm). Several commits run one after the other
# in one invocation, for side-by-side figures. Needs about 12 GB (local) or 25 GB (test) free under
# $BENCH_DIR; leaves nothing there. The system packages (apt's) are the machine's: they stay installed.
#
#   tools/bench_fresh_clone.sh local|test [COMMIT ...]      (docs/getting-started.md quotes its output)
set -euo pipefail
target=${1:?usage: tools/bench_fresh_clone.sh local|test [COMMIT ...]}
shift
case $target in local) warm_runs=3 ;; test) warm_runs=0 ;; *) echo "target: local or test, not $target" >&2; exit 2 ;; esac
repo=$(git rev-parse --show-toplevel)
work=${BENCH_DIR:-$(mktemp -d)}
# As from a new shell: not this checkout's venv first on PATH, nor the make that may have called this.
PATH=$(printf '%s' "$PATH" | tr ':' '\n' | grep -v '/\.venv/bin$' | paste -sd:)
unset MAKEFLAGS MAKELEVEL MFLAGS CHECKOV
trap 'rm -rf "$work/clone" "$work/cache"' EXIT
for commit in "${@:-HEAD}"; do
  rm -rf "$work/clone" "$work/cache"
  git clone -q "$repo" "$work/clone" && git -C "$work/clone" checkout -q "$(git -C "$repo" rev-parse "$commit")"
  mkdir -p "$work/cache"
  export TRAINSTACK_RUNTIME_CACHE=$work/cache/runtimes UV_CACHE_DIR=$work/cache/uv PIP_CACHE_DIR=$work/cache/pip \
    npm_config_cache=$work/cache/npm XDG_CACHE_HOME=$work/cache
  load=$(cut -d' ' -f1 /proc/loadavg)
  start=$(date +%s.%N)
  make -C "$work/clone" "$target" >"$work/cold.log" 2>&1 || { tail -40 "$work/cold.log"; exit 1; }
  cold=$(echo "$(date +%s.%N) - $start" | bc)
  runtimes=$(grep -o "built in [0-9]* s" "$work/cold.log" | awk '{total += $3} END {print total + 0}')
  pytest=$(grep -Eo "passed.* in [0-9.]+s" "$work/cold.log" | grep -Eo "[0-9.]+s$" || true)
  warm=()
  for _ in $(seq "$warm_runs"); do
    start=$(date +%s.%N)
    make -C "$work/clone" "$target" >/dev/null 2>&1
    warm+=("$(echo "$(date +%s.%N) - $start" | bc)")
  done
  printf '%s: make %s cold %.1f s (image runtimes built in %s s%s; load %s to %s)' "$commit" "$target" "$cold" \
    "$runtimes" "${pytest:+; pytest $pytest}" "$load" "$(cut -d' ' -f1 /proc/loadavg)"
  if ((warm_runs)); then
    median=$(printf '%s\n' "${warm[@]}" | sort -n | sed -n "$(((warm_runs + 1) / 2))p")
    printf '; warm median %.1f s of %s' "$median" "${warm[*]}"
  fi
  echo
done
