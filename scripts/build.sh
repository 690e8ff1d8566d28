#!/usr/bin/env bash
# Configures and builds ferry into build/ (Ninja, Release). Usage: build.sh [--for run|test] [TARGET...]
#   --for run   what `make run` needs: the `ferry` target only. A new build folder gets the CUDA backend
#               only when a GPU answers `nvidia-smi -L` (a CPU-only run skips the nvcc compile); a folder
#               that exists keeps its setting.
#   --for test  what `make test` needs: every target, tests on, the CUDA backend when nvcc is found
#               (FERRY_CUDA=AUTO); a folder set up by `--for run` is reconfigured to that first.
#   (neither)   the TARGETs named (default: all); a new folder gets FERRY_CUDA=AUTO.
# Env: FERRY_BUILD (folder, default build), FERRY_CUDA (AUTO|ON|OFF; overrides the choices above),
#      JOBS (parallel jobs, default all cores).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FERRY_BUILD:-$root/build}
jobs=${JOBS:-$(nproc)}

purpose=
if [[ ${1:-} == --for ]]; then
  purpose=${2:-}
  shift 2 || true
  [[ $purpose == run || $purpose == test ]] || { echo "usage: build.sh [--for run|test] [TARGET...]" >&2; exit 2; }
fi

cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt" 2>/dev/null; }
configured=0
[[ -f $build/build.ninja ]] && configured=1

cuda=${FERRY_CUDA:-}
tests=
case $purpose in
  run)
    if [[ -z $cuda && $configured == 0 ]]; then
      if nvidia-smi -L >/dev/null 2>&1; then cuda=AUTO; else cuda=OFF; fi
    fi
    (($#)) || set -- ferry
    ;;
  test)
    cuda=${cuda:-AUTO}
    tests=ON
    ;;
esac

args=()
reconfigure=$((1 - configured))
if [[ -n $cuda ]]; then
  args+=(-DFERRY_CUDA="$cuda")
  [[ $(cache_value FERRY_CUDA) == "$cuda" ]] || reconfigure=1
fi
if [[ -n $tests ]]; then
  args+=(-DFERRY_TESTS="$tests")
  [[ $(cache_value FERRY_TESTS) == "$tests" ]] || reconfigure=1
fi
if [[ $reconfigure == 1 ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${args[@]}"
fi
# ninja re-runs cmake by itself when a CMakeLists/sources.cmake changed.
ninja -C "$build" -j"$jobs" "$@"
