#!/usr/bin/env bash
# session 12 call 3: where a Q4_0 decode step's time goes inside the CUDA graph: decode with the small
# kernels left out one kind at a time (FERRY_CUDA_ABLATE, timing only, results wrong), llama3-8b Q4_0.
set -u
BINS="ferry" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0; synth_wait $R
A=FERRY_CUDA_ABLATE
TYPES="Q4_0" CONFIGS="base: norm:$A=norm rope:$A=rope attn:$A=attn combine:$A=combine glu:$A=glu small:$A=norm,rope,attn,combine,glu matvec:$A=matvec base2:" \
  LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R timeout 300 bash bench/device/decode_ab.sh > $R/ab.log 2>&1
cat $R/ab/summary.txt
