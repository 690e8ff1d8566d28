#!/usr/bin/env bash
# (Record of a measured experiment: the switch it A/Bs measured slower and was removed afterwards; see
# bench/RESULTS.md, "GPU host, session 14". Its build: b3fd6b4 plus the norm prologue, not committed.)
# session 14 call 3: the RMS norm in the decode matvec's prologue (norm_matmul_many / norm_matmul_glu: no
# rms_norm kernels in a llama decode step) and ld_xds as a plain load. test_cuda_ops; llama3-8b decode
# A/B: this build, the same with FERRY_CUDA_NORM_FUSE=0, and call 2's build (ferry_c2), after 512 and 4096
# tokens; the whole-model GPU-vs-CPU check on the tiny Q4_0 presets and on the llama3-8b synthetic models
# (their K = 4096 takes the fused norm; the tiny presets' do not).
set -u
BINS="ferry ferry_c2 test_cuda_ops" . bench/device/carry_setup.sh
mkdir -p /root/c2 && mv /root/bin/ferry_c2 /root/c2/ferry
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0 Q4_K
timeout 150 /root/bin/test_cuda_ops > $R/test_cuda_ops.txt 2>&1; echo "test_cuda_ops rc $?"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|Abort|assert|Expected|Which is" $R/test_cuda_ops.txt | head -30; tail -2 $R/test_cuda_ops.txt; el tests
synth_wait $R
ab() {  # ab NAME BIN P N TYPES CONFIGS
  TYPES="$5" CONFIGS="$6" P=$3 N=$4 LAYER=0 BIN=$2 MODELS=/root/m OUT=$R/$1 timeout 100 bash bench/device/decode_ab.sh > $R/ab_$1.log 2>&1
  cat $R/$1/ab/summary.txt
}
N0=FERRY_CUDA_NORM_FUSE=0
ab n1 /root/bin 512 128 "Q4_0 Q4_K" "norm: nonorm:$N0"
ab o1 /root/c2 512 128 "Q4_0 Q4_K" "call2:"
ab n2 /root/bin 512 128 "Q4_0 Q4_K" "norm_b: nonorm_b:$N0"
ab o2 /root/c2 512 128 "Q4_0 Q4_K" "call2_b:"; el ab512
ab n3 /root/bin 4096 32 "Q4_0 Q4_K" "norm:"
ab o3 /root/c2 4096 32 "Q4_0 Q4_K" "call2:"; el ab4096
mkdir -p models && ln -sf /root/m/llama3-8b-Q4_0.gguf /root/m/llama3-8b-Q4_K.gguf models/
BUILD=/root/bin SKIP_TESTS=1 SKIP_BENCH=1 REAL_MODELS=1 MODEL_TYPES=Q4_0 OUT=$R/check timeout 280 bash bench/device/check_cuda.sh \
  > $R/check.log 2>&1
el check; cat $R/check/models.log 2>/dev/null || tail -20 $R/check.log
