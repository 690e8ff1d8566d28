#!/usr/bin/env bash
# session 14 call 6: the review refactor (the v3 kernels' tile load and tile dot as shared helpers, one
# decode-launch helper in CudaOps): test_cuda_ops and the whole-model check on it, and decode after 512
# tokens against call 4's build (ferry_c4: the same kernels before the refactor, plus the neutral combine
# change) to show it changed nothing.
set -u
BINS="ferry ferry_c4 test_cuda_ops" . bench/device/carry_setup.sh
mkdir -p /root/c4 && mv /root/bin/ferry_c4 /root/c4/ferry
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0 Q4_K
cuda_checks $R
synth_wait $R
ab() {  # ab NAME BIN TYPES CONFIGS
  TYPES="$3" CONFIGS="$4" P=512 N=128 LAYER=0 BIN=$2 MODELS=/root/m OUT=$R/$1 timeout 100 bash bench/device/decode_ab.sh > $R/ab_$1.log 2>&1
  cat $R/$1/ab/summary.txt
}
ab n1 /root/bin "Q4_0 Q4_K" "refactor:"
ab o1 /root/c4 "Q4_0 Q4_K" "call4:"
ab n2 /root/bin "Q4_0 Q4_K" "refactor_b:"
ab o2 /root/c4 "Q4_0 Q4_K" "call4_b:"; el ab512
