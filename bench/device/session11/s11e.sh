#!/usr/bin/env bash
# session 11 call 5: the final build's CUDA checks: test_cuda_ops, whole-model GPU vs CPU on tiny models of
# every architecture (check_cuda.sh).
set -u
BINS="ferry test_cuda_ops" . bench/device/carry_setup.sh
R=$OUT; export XDG_CACHE_HOME=/root/cache
timeout 150 /root/bin/test_cuda_ops > $R/test_cuda_ops.txt 2>&1; echo "test_cuda_ops rc $?" | tee -a $R/test_cuda_ops.txt
grep -E "PASSED|FAILED" $R/test_cuda_ops.txt | head
BUILD=/root/bin SKIP_TESTS=1 SKIP_BENCH=1 REAL_MODELS=0 OUT=$R/check timeout 150 bash bench/device/check_cuda.sh > $R/check.log 2>&1
tail -15 $R/check/models.log 2>/dev/null || tail -20 $R/check.log
