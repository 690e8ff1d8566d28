#!/usr/bin/env bash
# decode_ab.sh: A/B of ferry's CUDA decode options in one call, on the models compare.sh synthesized
# (MODELS, default /root/m): for each type in TYPES and each "matvec:fuse" pair in CONFIGS,
# `FERRY_CUDA_MATVEC=matvec FERRY_CUDA_FUSE=fuse ferry bench -m M --device cuda -p 512 -n 128 --json`
# (one line each), then bench_cuda_ops layer with each matvec kernel. Writes $OUT/ab/summary.txt.
set -uo pipefail
BIN=${BIN:-/root/bin}
MODELS=${MODELS:-/root/m}
O=${OUT:-$PWD/out}/ab
mkdir -p "$O"
S="$O/summary.txt"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -e "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" && break
done
for t in ${TYPES:-Q4_0 Q4_K F16}; do
  m="$MODELS/llama3-8b-$t.gguf"
  [ -s "$m" ] || { echo "no $m" | tee -a "$S"; continue; }
  for c in ${CONFIGS:-2:0 3:0 2:1 3:1}; do
    mv=${c%%:*}; fu=${c##*:}
    FERRY_CUDA_MATVEC=$mv FERRY_CUDA_FUSE=$fu timeout 120 "$BIN/ferry" bench -m "$m" --device cuda -p ${P:-512} \
      -n ${N:-128} --json > "$O/$t.$mv.$fu.json" 2> "$O/$t.$mv.$fu.err"
    python3 - "$O/$t.$mv.$fu.json" "$t matvec=$mv fuse=$fu" <<'PY' | tee -a "$S"
import json, sys
try:
    j = json.load(open(sys.argv[1]))
    print("%-26s pp512 %8.1f  tg %7.2f tok/s  decode %6.0f GB/s" % (sys.argv[2], j["prefill_tok_s"], j["decode_tok_s"], j.get("decode_gb_s", 0)))
except Exception as e:
    print("%-26s failed (%s)" % (sys.argv[2], e))
PY
  done
done
if [ "${LAYER:-1}" = 1 ]; then
  for mv in 2 3; do
    echo "== bench_cuda_ops layer, FERRY_CUDA_MATVEC=$mv" | tee -a "$S"
    FERRY_CUDA_MATVEC=$mv timeout 120 "$BIN/bench_cuda_ops" layer 2>&1 | grep -v "^RESULT" | tee -a "$S"
  done
fi
