#!/usr/bin/env bash
# (Record of a measured experiment: the x-ahead it A/Bs decoded 20 % slower and was reverted; see
# bench/RESULTS.md, "GPU host, session 16". Its build: the session-16 q4k_pair_int commit plus x-ahead.)
# session 16 call 4: x-ahead in the production one-token v3 kernels of the lane-pair Q4_K decoder (the
# activations of a tile loaded with its weights, one tile ahead; ptxas: 64 registers, 20-48 bytes of spill)
# against call 2's build (int-scale, no x-ahead; ferry_old): test_cuda_ops, then decode after 512 and 4096
# tokens, alternating.
set -u
BINS="ferry ferry_old test_cuda_ops" . bench/device/carry_setup.sh
mkdir -p /root/old && mv /root/bin/ferry_old /root/old/ferry
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_K
timeout 120 /root/bin/test_cuda_ops > $R/test_cuda_ops.txt 2>&1; echo "test_cuda_ops rc $?"; el tests
grep -E "^\[  PASSED|^\[  FAILED|Failure|Expected|Which is|nrmse|Value of" $R/test_cuda_ops.txt | head -20
synth_wait $R
for round in 1 2 3; do
  for b in /root/bin /root/old; do
    TYPES="Q4_K" CONFIGS="$(basename $b)_$round:" P=512 N=128 LAYER=0 BIN=$b MODELS=/root/m OUT=$R/$(basename $b)$round \
      timeout 60 bash bench/device/decode_ab.sh > /dev/null 2>&1
    cat $R/$(basename $b)$round/ab/summary.txt
  done
done; el ab512
A=FERRY_CUDA_ABLATE=norm+rope+attn+combine+glu
for b in /root/bin /root/old; do
  TYPES="Q4_K" CONFIGS="$(basename $b)_floor:$A" P=512 N=128 LAYER=0 BIN=$b MODELS=/root/m OUT=$R/$(basename $b)f \
    timeout 60 bash bench/device/decode_ab.sh > /dev/null 2>&1
  cat $R/$(basename $b)f/ab/summary.txt
  TYPES="Q4_K" CONFIGS="$(basename $b)_4k:" P=4096 N=32 LAYER=0 BIN=$b MODELS=/root/m OUT=$R/$(basename $b)4 \
    timeout 90 bash bench/device/decode_ab.sh > /dev/null 2>&1
  cat $R/$(basename $b)4/ab/summary.txt
done; el ab4096
