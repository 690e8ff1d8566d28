#!/usr/bin/env bash
# session 16 call 2: the lane-pair Q4_K decoder's scale step with the scales multiplied into the integer sums
# and no conversion instructions (q4k_pair_int): test_cuda_ops; mv_probe's pair forms (s15 / int-scale /
# Q4_0) and Nsight Compute's warp-state and pipe sections on them; decode A/B against 91082d8 (ferry_old).
set -u
BINS="ferry ferry_old test_cuda_ops mv_probe" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_K
cuda_tests $R
/root/bin/mv_probe 14336 4096 pair 2>&1 | tee $R/pair.txt; el probe
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ]; then
  for skip in 0 72 144; do
    timeout 60 $NCU --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
      --section MemoryWorkloadAnalysis -k regex:v3_kernel --launch-skip $skip --launch-count 1 \
      /root/bin/mv_probe 14336 4096 pair > $R/ncu_$skip.txt 2>&1
    grep -E "v3_kernel|Stall|Issue Slots|Issued Warp|No Eligible|Active Warps|Eligible Warps|Pipe|Memory Throughput|DRAM Throughput|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Executed Ipc|warp-cycles|cycles being stalled|scoreboard|throttle" $R/ncu_$skip.txt | cut -c1-200 | head -40
  done
fi; el ncu
synth_wait $R
alt_ab _ Q4_K 512 128 2; el ab512
