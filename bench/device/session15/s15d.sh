#!/usr/bin/env bash
# (Record of a measured experiment: the last-arriver producer it A/Bs measured 7 % slower and was removed
# afterwards; see bench/RESULTS.md, "GPU host, session 15".)
# session 15 call 5: the fold's producer as plain v3 blocks whose last warp per 32-row group quantizes it
# (FERRY_CUDA_FOLD_LA=1) against the 1024-thread blocks with a barrier per group (the default);
# test_cuda_ops (the fold test now runs both) and the whole-model check; decode A/Bs after 512 and 4096
# tokens, and the step's floor with the small kernels left out with the fold on, off and last-arriver.
set -u
BINS="ferry test_cuda_ops" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0 Q4_K
timeout 150 /root/bin/test_cuda_ops > $R/test_cuda_ops.txt 2>&1; echo "test_cuda_ops rc $?"; el tests
grep -E "^\[  PASSED|^\[  FAILED|Failure|Expected|Which is|nrmse|Value of" $R/test_cuda_ops.txt | head -30
BUILD=/root/bin SKIP_TESTS=1 SKIP_BENCH=1 REAL_MODELS=0 OUT=$R/check timeout 150 bash bench/device/check_cuda.sh > $R/check.log 2>&1
el check; cat $R/check/models.log 2>/dev/null | grep -c " ok " ; grep -v " ok " $R/check/models.log 2>/dev/null | head -5
synth_wait $R
X=FERRY_CUDA_ABLATE=rope+attn+combine+norm+glu LA=FERRY_CUDA_FOLD_LA=1 NF=FERRY_CUDA_NORM_FOLD=0
ab a 512 128 "Q4_0 Q4_K" "barrier: la:$LA barrier_b: la_b:$LA floor:$X floor_la:$X,$LA floor_nofold:$X,$NF"; el ab512
ab c 4096 32 "Q4_0 Q4_K" "barrier: la:$LA"; el ab4096
