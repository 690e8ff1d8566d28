#!/usr/bin/env bash
# Configures (first time) and builds ferry into build/ (Release; CUDA backend when nvcc is found).
# Env: FERRY_BUILD (folder, default build), FERRY_CUDA (AUTO|ON|OFF, default AUTO),
#      JOBS (parallel jobs, default all cores). Extra arguments are ninja targets (default: all).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FERRY_BUILD:-$root/build}
jobs=${JOBS:-$(nproc)}

if [[ ! -f $build/build.ninja ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFERRY_CUDA="${FERRY_CUDA:-AUTO}"
fi
# ninja re-runs cmake by itself when a CMakeLists/sources.cmake changed.
ninja -C "$build" -j"$jobs" "$@"
