#!/bin/sh
# OpenBLAS sgemm vs ferry's float prefill matmul (F32 / F16 weights) on llama3-8b shapes (issue 3;
# bench/RESULTS_cpu.md, "OpenBLAS vs ferry's float prefill kernels"). Not part of CI or the default
# build. Builds ferry's kernel libraries in BUILD (own folder), links bench/cpu/blas_compare/blas_compare.cc
# against them and -lopenblas, then runs each variant in its own process, interleaved over ROUNDS, and
# prints a summary (best GFLOP/s over all rounds and reps, and the range of the per-round bests).
#   bench/cpu/blas_compare.sh        env: BUILD=build-blas ROUNDS=4 REPS=3 THREADS="1 2" JOBS=1
#       VARIANTS="ferry_f32 blas_f32 ferry_f16 blas_f16_whole blas_f16_chunk blas_f16_rows"
#       CORETYPE=SkylakeX (OPENBLAS_CORETYPE for the blas_* runs; OpenBLAS 0.3.21 does not detect newer
#       Xeons and falls back to Prescott/SSE3 kernels; CORETYPE= keeps its own detection)
#       DEFAULT_CORE_RUN=1 (one extra blas_f32 round with OpenBLAS's own detection, for reference)
#       LOG=BUILD/blas_compare.log
set -e
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-blas}; ROUNDS=${ROUNDS:-4}; REPS=${REPS:-3}; THREADS=${THREADS:-"1 2"}; JOBS=${JOBS:-1}
VARIANTS=${VARIANTS:-"ferry_f32 blas_f32 ferry_f16 blas_f16_whole blas_f16_chunk blas_f16_rows"}
CORETYPE=${CORETYPE-SkylakeX}; DEFAULT_CORE_RUN=${DEFAULT_CORE_RUN:-1}
LOG=${LOG:-$BUILD/blas_compare.log}
CXX=${CXX:-g++}

# OpenBLAS present? (header + library)
if ! printf '#include <cblas.h>\nint main(){openblas_set_num_threads(1);return 0;}\n' |
     "$CXX" -x c++ - -lopenblas -o /dev/null 2>/dev/null; then
  echo "error: OpenBLAS not found (cblas.h + libopenblas); install it: apt-get install libopenblas-dev" >&2
  exit 1
fi

if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DFERRY_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
ninja -C "$BUILD" -j"$JOBS" ferry_kernels_cpu ferry_tensor ferry_base >/dev/null
"$CXX" -std=c++20 -O2 -I src bench/cpu/blas_compare/blas_compare.cc "$BUILD/libferry_kernels_cpu.a" \
  "$BUILD/libferry_tensor.a" "$BUILD/libferry_base.a" -lopenblas -lpthread -o "$BUILD/blas_compare"

run() {  # variant threads
  echo "# load $(cut -d' ' -f1-3 /proc/loadavg)"
  case $1 in
    blas_*) if [ -n "$CORETYPE" ]; then OPENBLAS_CORETYPE=$CORETYPE "$BUILD/blas_compare" "$1" "$2" "$REPS"
            else "$BUILD/blas_compare" "$1" "$2" "$REPS"; fi ;;
    *) "$BUILD/blas_compare" "$1" "$2" "$REPS" ;;
  esac
}
{
  echo "# start $(date -u +%FT%TZ) $(uptime)"
  r=1
  while [ "$r" -le "$ROUNDS" ]; do
    echo "# round $r"
    for t in $THREADS; do
      for v in $VARIANTS; do run "$v" "$t"; done
    done
    r=$((r + 1))
  done
  if [ "$DEFAULT_CORE_RUN" = 1 ]; then
    for t in $THREADS; do
      echo "# load $(cut -d' ' -f1-3 /proc/loadavg) (OpenBLAS's own core detection)"
      "$BUILD/blas_compare" blas_f32 "$t" 1 | sed 's/^blas_f32 /blas_f32_auto/'
    done
  fi
  echo "# end $(date -u +%FT%TZ) $(uptime)"
} | tee "$LOG"

# Summary: best GFLOP/s over all rounds and reps; range of the per-round bests.
python3 - "$LOG" <<'PY'
import re, sys, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r'(\S+)\s+thr=(\d) N=\s*(\d+) K=\s*(\d+) T=\s*(\d+) best .*?([\d.]+) GFLOP/s', line)
    if m:
        runs[(m[2], m[3], m[4], m[5], m[1])].append(float(m[6]))
print('\nthreads  N      K      T    variant         best GFLOP/s  (per-round bests min..max, n)')
for k in sorted(runs, key=lambda k: (k[0], int(k[1]) * 100000 + int(k[2]), int(k[3]), k[4])):
    v = runs[k]
    print('%-7s  %-6s %-6s %-4s %-15s %7.1f       (%.1f..%.1f, %d)' % (k[0], k[1], k[2], k[3], k[4], max(v), min(v), max(v), len(v)))
PY
