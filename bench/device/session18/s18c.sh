#!/usr/bin/env bash
# session 18 call 3: the decode kernel with 2 rows a lane a round (4 cells a warp at D = 128), the next
# round's loads before this one's arithmetic, and one round of every warp per split (36 splits after 576
# cells, 288 blocks): Nsight Compute (call 2) showed both attention kernels issue-latency bound with one
# warp per scheduler. Decode tok/s against the tensor-core kernel in the same binary, alternating.
set -u
BINS="ferry test_cuda_ops bench_cuda_ops" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0 Q4_K
timeout 100 /root/bin/test_cuda_ops --gtest_filter='CudaAttention.*' > $R/t.txt 2>&1; echo "attention tests rc $?"; tail -1 $R/t.txt
grep -E "Failure|Expected|Which is" $R/t.txt | head
timeout 100 /root/bin/bench_cuda_ops attention > $R/attn.txt 2>&1; el attention; grep -A4 "decode (1 token)" $R/attn.txt
FERRY_CUDA_ATTN_DEC_CELLS=32 timeout 100 /root/bin/bench_cuda_ops attention > $R/attn32.txt 2>&1; grep -A4 "decode (1 token)" $R/attn32.txt
synth_wait $R
for round in 1 2; do
  ab r$round 512 128 "Q4_0 Q4_K" "dec3: mma:FERRY_CUDA_ATTN_DEC=0 dec2:FERRY_CUDA_ATTN_DEC=2 d3c32:FERRY_CUDA_ATTN_DEC_CELLS=32"
done
ab k4 4096 32 "Q4_0 Q4_K" "dec3: mma:FERRY_CUDA_ATTN_DEC=0 dec2:FERRY_CUDA_ATTN_DEC=2"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 100 $NCU --clock-control none --section WarpStateStats --section SchedulerStats --section LaunchStats \
  --section Occupancy --section SpeedOfLight -k regex:attn_decode --launch-skip 10 --launch-count 1 \
  /root/bin/bench_cuda_ops attention > $R/ncu_dec.txt 2>&1
grep -v "^==PROF==" $R/ncu_dec.txt | grep -E "attn_|Duration|Elapsed|SM Active|Issued Warp|Eligible Warps|Active Warps Per|Registers|Warp Cycles Per Issued" | cut -c1-150 | head -20
el done
