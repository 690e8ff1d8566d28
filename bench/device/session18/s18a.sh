#!/usr/bin/env bash
# session 18 call 1: the one-token decode attention kernel (attention kernels 2 / 3: registers instead of
# shared-memory tiles, its own split merge) on the GPU: test_cuda_ops, the whole-model check, the kernels
# alone (bench_cuda_ops attention), and decode tok/s against the tensor-core kernel (FERRY_CUDA_ATTN_DEC=0)
# in the same binary, alternating.
set -u
BINS="ferry test_cuda_ops bench_cuda_ops" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0 Q4_K
cuda_checks $R
timeout 100 /root/bin/bench_cuda_ops attention > $R/attn.txt 2>&1; el attention; grep -A4 "decode (1 token)" $R/attn.txt
synth_wait $R
for round in 1 2; do
  ab r$round 512 128 "Q4_0 Q4_K" "dec3: mma:FERRY_CUDA_ATTN_DEC=0 dec2:FERRY_CUDA_ATTN_DEC=2"
done
ab k4 4096 32 "Q4_0" "dec3: mma:FERRY_CUDA_ATTN_DEC=0 dec2:FERRY_CUDA_ATTN_DEC=2 dec3b:"
el done
