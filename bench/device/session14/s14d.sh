#!/usr/bin/env bash
# (Record of a measured experiment: the combine change it A/Bs measured no better and was removed
# afterwards; see bench/RESULTS.md, "GPU host, session 14". Its build: b3fd6b4 plus that change.)
# session 14 call 4: the combine warp kernel issuing the first group of partials before the splits' (m, l)
# loads (decode after 512 tokens: 8 splits, one round of loads instead of two): test_cuda_ops; llama3-8b
# decode A/B against call 2's build (ferry_c2, b3fd6b4 = everything else the same) after 512 and 4096 tokens;
# the step with the small kernels left out (FERRY_CUDA_ABLATE), the floor they leave. Starts the llama.cpp
# build (call 5 uses it on the warm machine) and synthesizes the F16 model for call 5 too.
set -u
BINS="ferry ferry_c2 test_cuda_ops mv_probe" . bench/device/carry_setup.sh
mkdir -p /root/c2 && mv /root/bin/ferry_c2 /root/c2/ferry
R=$OUT/r; mkdir -p $R
JOBS=12 bash bench/device/llama_cpp_build.sh .devcarry/llama.cpp-src.tar.xz; el build started
synth_bg $R Q4_0 Q4_K F16
timeout 150 /root/bin/test_cuda_ops > $R/test_cuda_ops.txt 2>&1; echo "test_cuda_ops rc $?"
grep -E "^\[  (PASSED|FAILED) |FAILED|Failure|Abort|assert" $R/test_cuda_ops.txt | head -20; el tests
for i in $(seq 1 60); do [ -s /root/m/llama3-8b-Q4_K.gguf ] && [ -f $R/synth_F16.log ] && break; sleep 3; done; el q4 synth
ab() {  # ab NAME BIN P N TYPES CONFIGS
  TYPES="$5" CONFIGS="$6" P=$3 N=$4 LAYER=0 BIN=$2 MODELS=/root/m OUT=$R/$1 timeout 100 bash bench/device/decode_ab.sh > $R/ab_$1.log 2>&1
  cat $R/$1/ab/summary.txt
}
ab n1 /root/bin 512 128 "Q4_0 Q4_K" "new:"
ab o1 /root/c2 512 128 "Q4_0 Q4_K" "call2:"
ab n2 /root/bin 512 128 "Q4_0 Q4_K" "new_b:"
ab o2 /root/c2 512 128 "Q4_0 Q4_K" "call2_b:"; el ab512
ab n3 /root/bin 4096 32 "Q4_0 Q4_K" "new:"
ab o3 /root/c2 4096 32 "Q4_0 Q4_K" "call2:"; el ab4096
ab f /root/bin 512 128 "Q4_0 Q4_K" "floor:FERRY_CUDA_ABLATE=norm+rope+attn+combine+glu"; el floor
synth_wait $R; ls -la /root/m; tail -2 /root/lcb/build.log
