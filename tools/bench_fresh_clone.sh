#!/usr/bin/env bash
# `make local` cold and warm, as a newcomer meets it: for each commit given (default HEAD), a fresh clone
# of this repository with every cache empty (the image runtimes, uv's, pip's, npm's), `make local` once
# (cold), then three times more with nothing changed (warm). Several commits run one after the other in
# one invocation, for side-by-side figures. Needs about 12 GB free under $BENCH_DIR; leaves nothing there.
#
#   tools/bench_make_local.sh [COMMIT ...]        (docs/getting-started.md quotes its output)
set -euo pipefail
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
  make -C "$work/clone" local >"$work/cold.log" 2>&1 || { tail -20 "$work/cold.log"; exit 1; }
  cold=$(echo "$(date +%s.%N) - $start" | bc)
  runtime=$(grep -o "built in [0-9]* s" "$work/cold.log" | head -1)
  warm=()
  for _ in 1 2 3; do
    start=$(date +%s.%N)
    make -C "$work/clone" local >/dev/null 2>&1
    warm+=("$(echo "$(date +%s.%N) - $start" | bc)")
  done
  median=$(printf '%s\n' "${warm[@]}" | sort -n | sed -n 2p)
  printf '%s: cold %.1f s (runtime %s; load %s to %s); warm median %.1f s of %s\n' "$commit" "$cold" "${runtime#built in }" \
    "$load" "$(cut -d' ' -f1 /proc/loadavg)" "$median" "${warm[*]}"
done
