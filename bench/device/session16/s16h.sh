#!/usr/bin/env bash
# (Record of a measured experiment: row_w, which it A/Bs, decoded 1-2 % slower and was reverted; see
# bench/RESULTS.md, "GPU host, session 16".)
# session 16 call 8: the v3 walks carry only a row's weight pointer from tile to tile (row_w; the out pointer
# is looked up when the row is done): fewer live registers, so ptxas issues a tile's activation loads at
# once in the fold producer (SASS). test_cuda_ops, then decode after 512 tokens against the committed build
# (ferry_old), Q4_K and Q4_0 alternating, and after 4096 tokens.
set -u
BINS="ferry ferry_old test_cuda_ops" . bench/device/carry_setup.sh
mkdir -p /root/old && mv /root/bin/ferry_old /root/old/ferry
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_K Q4_0
timeout 120 /root/bin/test_cuda_ops > $R/test_cuda_ops.txt 2>&1; echo "test_cuda_ops rc $?"; el tests
grep -E "^\[  PASSED|^\[  FAILED|Failure|Expected|Which is|nrmse|Value of" $R/test_cuda_ops.txt | head -20
synth_wait $R
for round in 1 2; do
  for b in /root/bin /root/old; do
    TYPES="Q4_K Q4_0" CONFIGS="$(basename $b)_$round:" P=512 N=128 LAYER=0 BIN=$b MODELS=/root/m OUT=$R/$(basename $b)$round \
      timeout 80 bash bench/device/decode_ab.sh > /dev/null 2>&1
    cat $R/$(basename $b)$round/ab/summary.txt
  done
done; el ab512
for b in /root/bin /root/old; do
  TYPES="Q4_K" CONFIGS="$(basename $b)_4k:" P=4096 N=32 LAYER=0 BIN=$b MODELS=/root/m OUT=$R/$(basename $b)4 \
    timeout 90 bash bench/device/decode_ab.sh > /dev/null 2>&1
  cat $R/$(basename $b)4/ab/summary.txt
done; el ab4096
