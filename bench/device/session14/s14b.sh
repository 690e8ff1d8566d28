#!/usr/bin/env bash
# session 14 call 2: the decode attention with 32-bit row arithmetic (no 64-bit divisions), padded merge
# rows (no bank conflicts) and a merge loop over the real rows only; the combine kernels' row division in 32
# bits. test_cuda_ops (with the fused glu's test fixed), stamps of the new attention, bench_cuda_ops
# attention new / call 1's, and llama3-8b decode A/B: this build against call 1's (ferry_c1: fused glu, old
# attention), after 512 and 4096 tokens.
set -u
BINS="ferry ferry_c1 test_cuda_ops bench_cuda_ops bench_cuda_ops_c1 bench_cuda_ops_stamps" . bench/device/carry_setup.sh
mkdir -p /root/c1 && mv /root/bin/ferry_c1 /root/c1/ferry
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0 Q4_K
/root/bin/bench_cuda_ops_stamps attention 2>&1 | grep -E "stamps|median|decode|^ +[0-9]+ " | head -40; el stamps
/root/bin/bench_cuda_ops_c1 attention 2>&1 | grep -E "^ +(512|4096|32768) " | head -3; el attn_c1
timeout 150 /root/bin/test_cuda_ops > $R/test_cuda_ops.txt 2>&1; echo "test_cuda_ops rc $?"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|Abort|assert" $R/test_cuda_ops.txt | head -20; tail -3 $R/test_cuda_ops.txt; el tests
synth_wait $R
ab() {  # ab NAME BIN P N TYPES CONFIGS
  TYPES="$5" CONFIGS="$6" P=$3 N=$4 LAYER=0 BIN=$2 MODELS=/root/m OUT=$R/$1 timeout 100 bash bench/device/decode_ab.sh > $R/ab_$1.log 2>&1
  cat $R/$1/ab/summary.txt
}
ab n1 /root/bin 512 128 "Q4_0 Q4_K" "new:"
ab o1 /root/c1 512 128 "Q4_0 Q4_K" "call1:"
ab n2 /root/bin 512 128 "Q4_0 Q4_K" "new_b:"
ab o2 /root/c1 512 128 "Q4_0 Q4_K" "call1_b:"; el ab512
ab n3 /root/bin 4096 32 "Q4_0 Q4_K" "new:"
ab o3 /root/c1 4096 32 "Q4_0 Q4_K" "call1:"; el ab4096
