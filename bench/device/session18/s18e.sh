#!/usr/bin/env bash
# session 18 call 5: the kept form (the decode kernel with the combine kernel, 32 cells a split, up to 1024
# cells; its own split merge removed): every CUDA test, the whole-model check, the kernels alone, and decode
# tok/s against the tensor-core kernel (FERRY_CUDA_ATTN_DEC=0) after 512 and 896 tokens, alternating.
set -u
BINS="ferry test_cuda_ops bench_cuda_ops" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0 Q4_K
cuda_checks $R
timeout 100 /root/bin/bench_cuda_ops attention > $R/attn.txt 2>&1; el attention; grep -A5 "decode (1 token)" $R/attn.txt
synth_wait $R
for round in 1 2; do ab r$round 512 128 "Q4_0 Q4_K" "dec: mma:FERRY_CUDA_ATTN_DEC=0"; done
ab k896 896 128 "Q4_0 Q4_K" "dec: mma:FERRY_CUDA_ATTN_DEC=0 dec1:"
el done
