#!/usr/bin/env bash
# session 14 call 1: the gate / up matvec with the FFN activation in its epilogue (matvec_quant_glu, no glu
# kernel): test_cuda_ops and the whole-model check with it on, llama3-8b decode A/B against
# FERRY_CUDA_GLU_FUSE=0 after 512 and 4096 tokens; bench_cuda_ops attention from the -DFERRY_CUDA_ATTN_STAMPS
# build (where the decode attention's blocks spend their time); ferry bench -n 16 after 4096 with the new
# warm-up (whole prompt, one step at the measured depth) against -n 32.
set -u
BINS="ferry test_cuda_ops bench_cuda_ops bench_cuda_ops_stamps" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0 Q4_K
/root/bin/bench_cuda_ops_stamps attention > $R/attn_stamps.txt 2>&1; el stamps; cat $R/attn_stamps.txt | grep -v "^{" | head -60
cuda_checks $R
synth_wait $R
G=FERRY_CUDA_GLU_FUSE
ab() {  # ab NAME P N TYPES CONFIGS
  TYPES="$4" CONFIGS="$5" P=$2 N=$3 LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R/$1 timeout 100 bash bench/device/decode_ab.sh > $R/ab_$1.log 2>&1
  cat $R/$1/ab/summary.txt
}
ab a 512 128 "Q4_0 Q4_K" "fused: unfused:$G=0 fused_b: unfused_b:$G=0"; el ab512
ab d 4096 32 "Q4_0 Q4_K" "fused: unfused:$G=0"; el ab4096
ab n 4096 16 "Q4_0 Q4_K" "fused_n16:"; el n16
tar czf $OUT/res.tgz -C $OUT r; el done
