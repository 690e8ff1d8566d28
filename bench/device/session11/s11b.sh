#!/usr/bin/env bash
# session 11 call 2: the rms_norm fused into the persistent matvec (norm_matmul_many, FERRY_CUDA_NORM_FUSE) and
# rope + cache store in its epilogue (norm_qkv_rope_store, FERRY_CUDA_ROPE_FUSE):
# test_cuda_ops (incl. NormMatmulManyFusedIsBitExact), whole-model GPU vs CPU on tiny models of every arch,
# decode A/B fused / unfused on llama3-8b Q4_0 and Q4_K (alternated), bench_cuda_ops layer once.
set -u
BINS="ferry test_cuda_ops bench_cuda_ops" . bench/device/carry_setup.sh
R=$OUT; export XDG_CACHE_HOME=/root/cache
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
(for t in Q4_0 Q4_K; do [ -s /root/m/llama3-8b-$t.gguf ] || timeout 200 /root/bin/ferry synth --preset llama3-8b --type $t --fast -o /root/m/llama3-8b-$t.gguf > $R/synth_$t.log 2>&1; done; echo done > $R/synth.done) &
SP=$!
timeout 200 /root/bin/test_cuda_ops > $R/test_cuda_ops.txt 2>&1; echo "test_cuda_ops rc $?" >> $R/test_cuda_ops.txt; el tests
grep -E "FAILED|NormMatmul|NormQkv" $R/test_cuda_ops.txt | head -20
BUILD=/root/bin SKIP_TESTS=1 SKIP_BENCH=1 REAL_MODELS=0 OUT=$R/check timeout 150 bash bench/device/check_cuda.sh > $R/check.log 2>&1; el models
tail -15 $R/check/models.log 2>/dev/null || tail -20 $R/check.log
wait $SP; el synth
TYPES="Q4_0 Q4_K" CONFIGS="all: norope:FERRY_CUDA_ROPE_FUSE=0 none:FERRY_CUDA_NORM_FUSE=0 all_b: norope_b:FERRY_CUDA_ROPE_FUSE=0 none_b:FERRY_CUDA_NORM_FUSE=0" \
  LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R timeout 240 bash bench/device/decode_ab.sh > $R/ab.log 2>&1; el ab
P=4096 N=64 TYPES="Q4_K" CONFIGS="all4k: none4k:FERRY_CUDA_NORM_FUSE=0" LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R timeout 120 bash bench/device/decode_ab.sh > $R/ab4k.log 2>&1; el ab4k
cat $R/ab/summary.txt
cd $R && tar czf res.tgz *.txt *.log check ab 2>/dev/null; ls
