#!/usr/bin/env bash
# session 18 call 2: the decode kernel's split merge with one round of loads (kernel 3) against the combine
# kernel (2) and the tensor-core kernel (FERRY_CUDA_ATTN_DEC=0) in decode; Nsight Compute: every kernel of a
# llama3-8b Q4_0 decode step timed alone (gpu__time_duration), and the two attention kernels' warp states.
set -u
BINS="ferry test_cuda_ops bench_cuda_ops" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0
timeout 100 /root/bin/test_cuda_ops --gtest_filter='CudaAttention.*' > $R/t.txt 2>&1; echo "attention tests rc $?"; tail -3 $R/t.txt
grep -E "Failure|Expected|Which is" $R/t.txt | head
timeout 100 /root/bin/bench_cuda_ops attention > $R/attn.txt 2>&1; el attention; grep -A4 "decode (1 token)" $R/attn.txt
synth_wait $R
for round in 1 2; do ab r$round 512 128 "Q4_0" "dec3: mma:FERRY_CUDA_ATTN_DEC=0 dec2:FERRY_CUDA_ATTN_DEC=2"; done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
el "ncu $NCU"
timeout 200 $NCU --clock-control none --metrics gpu__time_duration.sum --csv \
  /root/bin/ferry bench -m /root/m/llama3-8b-Q4_0.gguf --device cuda -p 8 -n 3 > $R/ncu_step.csv 2> $R/ncu_step.err
echo "ncu step rc $? lines $(wc -l < $R/ncu_step.csv)"; el ncu-step
xz -9 -c $R/ncu_step.csv > $OUT/ncu_step.csv.xz
for k in attn_decode attn_mma; do
  timeout 100 $NCU --clock-control none --section WarpStateStats --section SchedulerStats --section LaunchStats \
    --section Occupancy --section MemoryWorkloadAnalysis --section SpeedOfLight -k regex:$k --launch-skip 10 --launch-count 1 \
    /root/bin/bench_cuda_ops attention > $R/ncu_$k.txt 2>&1
  grep -v "^==PROF==" $R/ncu_$k.txt | grep -E "attn_|Duration|Stall|Issue|Eligible|Active Warps|Registers|Theoretical|Achieved|Throughput|Block Limit" | cut -c1-150 | head -40
done
el done
