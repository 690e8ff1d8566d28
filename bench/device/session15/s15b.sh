#!/usr/bin/env bash
# (FERRY_CUDA_ROPE_FAST, A/B'd here, measured no better and was removed afterwards; bench/RESULTS.md,
# "GPU host, session 15".)
# session 15 call 2: the lane-pair Q4_K decoder on by default; test_cuda_ops (the fold test's comparison
# fixed: pair vs wide residuals are not the same bits) with failures printed; what the remaining small
# kernels cost with the fold on (FERRY_CUDA_ABLATE, timing only) and the rope's angle in float after a
# double range reduction (FERRY_CUDA_ROPE_FAST=1). Starts the llama.cpp build and synthesizes Q4_0, Q4_K
# and F16 for call 3's table.
set -u
BINS="ferry test_cuda_ops" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
JOBS=8 bash bench/device/llama_cpp_build.sh
synth_bg $R Q4_0 Q4_K F16
timeout 150 /root/bin/test_cuda_ops > $R/test_cuda_ops.txt 2>&1; echo "test_cuda_ops rc $?"; el tests
grep -E "^\[  PASSED|^\[  FAILED|Failure|Expected|Which is|nrmse|Value of" $R/test_cuda_ops.txt | head -40
for i in $(seq 1 60); do [ -s /root/m/llama3-8b-Q4_K.gguf ] && [ -f $R/synth_F16.log ] && break; sleep 3; done; el synth_q4k
X=FERRY_CUDA_ABLATE RF=FERRY_CUDA_ROPE_FAST=1
ab a 512 128 "Q4_0 Q4_K" "base: ropefast:$RF no_rope:$X=rope no_attn:$X=attn+combine no_small:$X=rope+attn+combine+norm+glu base_b: ropefast_b:$RF"; el ab512
ab c 4096 32 "Q4_0 Q4_K" "base: ropefast:$RF no_attn:$X=attn+combine"; el ab4096
synth_wait $R; ls -la /root/m; tail -2 /root/lcb/build.log; el end
