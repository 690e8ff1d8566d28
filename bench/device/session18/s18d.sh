#!/usr/bin/env bash
# session 18 call 4: call 3 ran the decode kernel at 64 cells a split by mistake (the host's cells per warp
# round still said 8 rows a lane); now 16 cells a split (36 splits after 576 cells) against 32, with the
# combine kernel (dec2) or its own merge (dec3), and the tensor-core kernel; after 2048 cells the same
# forced on (FERRY_CUDA_ATTN_DEC_MAX_CELLS) against mma, to place the cut-over.
set -u
BINS="ferry test_cuda_ops bench_cuda_ops" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0 Q4_K
timeout 100 /root/bin/test_cuda_ops --gtest_filter='CudaAttention.*' > $R/t.txt 2>&1; echo "attention tests rc $?"; tail -1 $R/t.txt
grep -E "Failure|Expected|Which is" $R/t.txt | head
for c in 16 32; do
  FERRY_CUDA_ATTN_DEC_CELLS=$c timeout 100 /root/bin/bench_cuda_ops attention > $R/attn$c.txt 2>&1; grep -A4 "decode (1 token)" $R/attn$c.txt
done
el attention
synth_wait $R
for round in 1 2; do
  ab r$round 512 128 "Q4_0 Q4_K" "dec3: mma:FERRY_CUDA_ATTN_DEC=0 dec2:FERRY_CUDA_ATTN_DEC=2 d3c32:FERRY_CUDA_ATTN_DEC_CELLS=32 d2c32:FERRY_CUDA_ATTN_DEC=2,FERRY_CUDA_ATTN_DEC_CELLS=32"
done
ab k2 2048 32 "Q4_0" "mma:FERRY_CUDA_ATTN_DEC=0 dec3:FERRY_CUDA_ATTN_DEC_MAX_CELLS=99999 d3c32:FERRY_CUDA_ATTN_DEC_MAX_CELLS=99999,FERRY_CUDA_ATTN_DEC_CELLS=32 dec2:FERRY_CUDA_ATTN_DEC=2,FERRY_CUDA_ATTN_DEC_MAX_CELLS=99999"
el done
