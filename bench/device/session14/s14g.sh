#!/usr/bin/env bash
# session 14 call 7: the second review (one warp Q8 quantizer for the four kernels that quantize a 32-block
# per warp, one type-to-adapter dispatch for matvec_quant_v2 / matvec_quant_glu, one occupancy query):
# test_cuda_ops, the whole-model check, and decode after 512 tokens against call 4's build (ferry_c4).
set -u
BINS="ferry ferry_c4 test_cuda_ops" . bench/device/carry_setup.sh
mkdir -p /root/c4 && mv /root/bin/ferry_c4 /root/c4/ferry
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0 Q4_K
cuda_checks $R
synth_wait $R
for b in /root/bin /root/c4; do
  TYPES="Q4_0 Q4_K" CONFIGS="$(basename $b):" P=512 N=128 LAYER=0 BIN=$b MODELS=/root/m OUT=$R/$(basename $b) \
    timeout 60 bash bench/device/decode_ab.sh > /dev/null 2>&1
  cat $R/$(basename $b)/ab/summary.txt
done
el ab512
