#!/usr/bin/env bash
# decode_ab.sh: A/B of ferry's CUDA decode switches in one call, on the models compare.sh synthesized
# (MODELS, default /root/m): for each type in TYPES and each configuration in CONFIGS, a name and the
# environment it runs with ("name:VAR=V,VAR=V"; "name:" = defaults), e.g.
#   CONFIGS="base: wide:FERRY_CUDA_Q4K_WIDE=1 v2:FERRY_CUDA_MATVEC=2 nofuse:FERRY_CUDA_FUSE=0"
# `ferry bench -m M --device cuda -p P -n N --json` (one line each), then (LAYER=1) bench_cuda_ops layer per
# configuration. Writes $OUT/ab/summary.txt; tar $OUT/ab yourself if you need the JSON back (a call
# returns only a few loose files).
# The FERRY_CUDA_* switches are read only by an experiments build: BIN must hold ferry and bench_cuda_ops
# built with -DFERRY_EXPERIMENTS=ON (docs/ENVIRONMENT.md); a production build ignores them, says so on
# stderr (kept in $OUT/ab/*.err) and every configuration would run the same kernels.
set -uo pipefail
BIN=${BIN:-/root/bin}
MODELS=${MODELS:-/root/m}
O=${OUT:-$PWD/out}/ab
mkdir -p "$O"
S="$O/summary.txt"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -e "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" && break
done
CONFIGS=${CONFIGS:-"base: v2:FERRY_CUDA_MATVEC=2 nofuse:FERRY_CUDA_FUSE=0"}
if FERRY_CUDA_FUSE=1 "$BIN/ferry" inspect --help 2>&1 | grep -q "this build ignores"; then
  echo "error: $BIN/ferry is a production build: it ignores the FERRY_CUDA_* switches (build with -DFERRY_EXPERIMENTS=ON)" | tee -a "$S"
  exit 1
fi
with_env() {  # "VAR=V,VAR=V" command...
  local kv=$1; shift
  env $(echo "$kv" | tr ',' ' ') "$@"
}
for t in ${TYPES:-Q4_0 Q4_K F16}; do
  m="$MODELS/llama3-8b-$t.gguf"
  [ -s "$m" ] || { echo "no $m" | tee -a "$S"; continue; }
  for c in $CONFIGS; do
    name=${c%%:*}; kv=${c#*:}
    with_env "$kv" timeout 120 "$BIN/ferry" bench -m "$m" --device cuda -p ${P:-512} -n ${N:-128} --json \
      > "$O/$t.$name.json" 2> "$O/$t.$name.err"
    python3 - "$O/$t.$name.json" "$t $name" <<'PY' | tee -a "$S"
import json, sys
try:
    j = json.load(open(sys.argv[1]))
    print("%-20s pp %8.1f  tg %7.2f tok/s  decode %6.0f GB/s" % (sys.argv[2], j["prefill_tok_s"], j["decode_tok_s"], j.get("decode_gb_s", 0)))
except Exception as e:
    print("%-20s failed (%s)" % (sys.argv[2], e))
PY
  done
done
if [ "${LAYER:-1}" = 1 ]; then
  for c in $CONFIGS; do
    name=${c%%:*}; kv=${c#*:}
    echo "== bench_cuda_ops layer, $name ($kv)" | tee -a "$S"
    with_env "$kv" timeout 120 "$BIN/bench_cuda_ops" layer 2>&1 | grep -E "many|separate" | tee -a "$S"
  done
fi
