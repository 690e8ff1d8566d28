#!/usr/bin/env bash
# session 15 call 6: review refactor (the glu and the fold producer kernels walk their rows through one
# helper, v3_walk_rows; same arithmetic): test_cuda_ops, the whole-model check, and decode after 512 and
# 4096 tokens against call 5's build (ferry_c5: the committed kernels, as measured in calls 1-5).
set -u
BINS="ferry ferry_c5 test_cuda_ops" . bench/device/carry_setup.sh
mkdir -p /root/c5 && mv /root/bin/ferry_c5 /root/c5/ferry
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0 Q4_K
timeout 150 /root/bin/test_cuda_ops > $R/test_cuda_ops.txt 2>&1; echo "test_cuda_ops rc $?"; el tests
grep -E "^\[  PASSED|^\[  FAILED|Failure|Expected|Which is|nrmse|Value of" $R/test_cuda_ops.txt | head -30
BUILD=/root/bin SKIP_TESTS=1 SKIP_BENCH=1 REAL_MODELS=0 OUT=$R/check timeout 150 bash bench/device/check_cuda.sh > $R/check.log 2>&1
el check; echo "models ok: $(grep -c ' ok ' $R/check/models.log 2>/dev/null)"; grep -v " ok " $R/check/models.log 2>/dev/null | head -5
synth_wait $R
for round in 1 2; do
  for b in /root/bin /root/c5; do
    TYPES="Q4_0 Q4_K" CONFIGS="$(basename $b)_$round:" P=512 N=128 LAYER=0 BIN=$b MODELS=/root/m OUT=$R/$(basename $b)$round \
      timeout 60 bash bench/device/decode_ab.sh > /dev/null 2>&1
    cat $R/$(basename $b)$round/ab/summary.txt
  done
done; el ab512
for b in /root/bin /root/c5; do
  TYPES="Q4_0 Q4_K" CONFIGS="$(basename $b)_4096:" P=4096 N=32 LAYER=0 BIN=$b MODELS=/root/m OUT=$R/$(basename $b)4k \
    timeout 60 bash bench/device/decode_ab.sh > /dev/null 2>&1
  cat $R/$(basename $b)4k/ab/summary.txt
done; el ab4096
