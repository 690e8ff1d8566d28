#!/usr/bin/env bash
# session 11 call 5: the final build's CUDA checks: test_cuda_ops, whole-model GPU vs CPU on tiny models of
# every architecture (check_cuda.sh).
set -u
mkdir -p /root/bin
for b in ferry test_cuda_ops; do xz -dc .devcarry/bin/$b.xz > /root/bin/$b; done; chmod +x /root/bin/*
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -e "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" && break
done
R=$OUT; export XDG_CACHE_HOME=/root/cache
timeout 150 /root/bin/test_cuda_ops > $R/test_cuda_ops.txt 2>&1; echo "test_cuda_ops rc $?" | tee -a $R/test_cuda_ops.txt
grep -E "PASSED|FAILED" $R/test_cuda_ops.txt | head
BUILD=/root/bin SKIP_TESTS=1 SKIP_BENCH=1 REAL_MODELS=0 OUT=$R/check timeout 150 bash bench/device/check_cuda.sh > $R/check.log 2>&1
tail -15 $R/check/models.log 2>/dev/null || tail -20 $R/check.log
