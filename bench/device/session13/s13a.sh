#!/usr/bin/env bash
# (Record of a measured experiment: the switch it A/Bs measured no better or slower and was removed
# afterwards; see bench/RESULTS.md, "GPU host, session 13". Its build is the commit named there.)
# session 13 call 1: one-token attention as thread-block clusters that merge their splits (no combine kernel):
# test_cuda_ops (cluster merge bit for bit the combine kernel), whole-model check, llama3-8b Q4_0 / Q4_K decode
# A/B clusters up to 16 (default) / none (FERRY_CUDA_ATTN_CLUSTER=0) / up to 8, after 512 and 4096 tokens.
set -u
BINS="ferry test_cuda_ops" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv > $R/smi.txt
synth_bg $R Q4_0 Q4_K
cuda_checks $R
synth_wait $R
TYPES="Q4_0 Q4_K" CONFIGS="cl: nocl:FERRY_CUDA_ATTN_CLUSTER=0 cl8:FERRY_CUDA_ATTN_CLUSTER=8 cl_b: nocl_b:FERRY_CUDA_ATTN_CLUSTER=0" \
  LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R/a timeout 260 bash bench/device/decode_ab.sh > $R/ab_a.log 2>&1; el ab512
TYPES="Q4_0" CONFIGS="cl: nocl:FERRY_CUDA_ATTN_CLUSTER=0 cl8:FERRY_CUDA_ATTN_CLUSTER=8" P=4096 N=32 \
  LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R/d timeout $(( 590 - $(date +%s) + T0 )) bash bench/device/decode_ab.sh > $R/ab_d.log 2>&1; el ab4096
cat $R/a/ab/summary.txt $R/d/ab/summary.txt
tar czf $OUT/res.tgz -C $OUT r; el done
