#!/usr/bin/env bash
# session 12 call 1: `mv_probe chain` (does a persistent decode step get past the per-launch cost?),
# test_cuda_ops and the whole-model GPU check of the folded q4k_pair (6fb3183), Q4_0 / Q4_K decode.
set -u
BINS="ferry test_cuda_ops mv_probe" . bench/device/session12/setup.sh
R=$OUT/r; mkdir -p $R; export XDG_CACHE_HOME=/root/cache
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $R/smi.txt
(for t in Q4_0 Q4_K; do timeout 200 /root/bin/ferry synth --preset llama3-8b --type $t --fast -o /root/m/llama3-8b-$t.gguf > $R/synth_$t.log 2>&1; done; echo done > $R/synth.done) &
timeout 150 /root/bin/mv_probe chain > $R/chain.txt 2>&1; el chain
cat $R/chain.txt
timeout 150 /root/bin/test_cuda_ops > $R/test_cuda_ops.txt 2>&1; echo "test_cuda_ops rc $?" >> $R/test_cuda_ops.txt; el tests
tail -2 $R/test_cuda_ops.txt
BUILD=/root/bin SKIP_TESTS=1 SKIP_BENCH=1 REAL_MODELS=0 OUT=$R/check timeout 150 bash bench/device/check_cuda.sh > $R/check.log 2>&1; el check
tail -16 $R/check/models.log 2>/dev/null || tail -20 $R/check.log
for i in $(seq 1 60); do [ -f $R/synth.done ] && break; sleep 5; done; el synth
TYPES="Q4_0 Q4_K" CONFIGS="a: b: c:" LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R timeout 200 bash bench/device/decode_ab.sh > $R/ab.log 2>&1; el ab
cat $R/ab/summary.txt
tar czf $OUT/res.tgz -C $OUT r; el done
