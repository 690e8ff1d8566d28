#!/usr/bin/env bash
# (Record of a measured experiment: the deferred group sums it A/Bs measured +0.6 % Q4_0, -5 % Q4_K and were
# not kept; see bench/RESULTS.md, "GPU host, session 15". Its build: 6607efc plus that change.)
# session 15 call 7: the fold's consumers load the group sums right after the PDL wait and add them when
# their first row is done (fold_load / fold_finish: the same sums in the same order), instead of before the
# first tile's work: test_cuda_ops, and decode after 512 tokens against call 6's build (ferry_c6), alternating.
set -u
BINS="ferry ferry_c6 test_cuda_ops" . bench/device/carry_setup.sh
mkdir -p /root/c6 && mv /root/bin/ferry_c6 /root/c6/ferry
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0 Q4_K
timeout 120 /root/bin/test_cuda_ops > $R/test_cuda_ops.txt 2>&1; echo "test_cuda_ops rc $?"; el tests
grep -E "^\[  PASSED|^\[  FAILED|Failure|Expected|Which is|nrmse|Value of" $R/test_cuda_ops.txt | head -20
synth_wait $R
for round in 1 2; do
  for b in /root/bin /root/c6; do
    TYPES="Q4_0 Q4_K" CONFIGS="$(basename $b)_$round:" P=512 N=128 LAYER=0 BIN=$b MODELS=/root/m OUT=$R/$(basename $b)$round \
      timeout 40 bash bench/device/decode_ab.sh > /dev/null 2>&1
    cat $R/$(basename $b)$round/ab/summary.txt
  done
done; el ab512
