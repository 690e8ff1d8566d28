#!/usr/bin/env bash
# session 11 call 3: issue 4's full-VRAM table with the session's kernels (ChunkDecQ4KLean for Q4_K) against
# llama.cpp built here from the llama_cpp_python-0.3.36 sdist in the same call: llama3-8b Q4_0 / Q4_K,
# ferry `bench --device cuda -p 512 -n 128` / `-p 4096 -n 16` vs `llama-bench -ngl 99 -fa 1 -p 512,4096
# -n 128 -d 0,4096 -r 2`; mv_probe once more (the launch-size ceiling), bench_cuda_ops layer.
set -u
BINS="ferry bench_cuda_ops mv_probe" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R; export XDG_CACHE_HOME=/root/cache
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
JOBS=15 bash bench/device/llama_cpp_build.sh .devcarry/llama.cpp-src.tar.xz; el build started
for t in Q4_0 Q4_K; do timeout 200 /root/bin/ferry synth --preset llama3-8b --type $t --fast -o /root/m/llama3-8b-$t.gguf > $R/synth_$t.log 2>&1; el synth $t; done
for i in $(seq 1 60); do [ -f /root/lcb/done ] && break; sleep 5; done; el "llama.cpp done: $([ -f /root/lcb/done ] && echo yes || echo no)"
tail -3 /root/lcb/build.log > $R/lcb_tail.txt
sleep 5
timeout 60 /root/bin/mv_probe > $R/probe.txt 2>&1; el probe
timeout 90 /root/bin/bench_cuda_ops layer > $R/layer.txt 2>&1; el layer
LB=; [ -f /root/lcb/done ] && LB=/root/lcb/build/bin/llama-bench
FULL=1 FULL_TYPES="Q4_0 Q4_K" FULL_PROMPTS="512 4096" FULL_LB_DEPTH=0,4096 KEEP=1 BIN=/root/bin LLAMA_BENCH=$LB MODELS=/root/m OUT=$R/full \
  timeout $(( 585 - $(date +%s) + T0 )) bash bench/device/compare.sh > $R/full.log 2>&1; el full
cat $R/full/compare/summary.md 2>/dev/null | grep -E "^\||##" | head -30
grep -E "many" $R/layer.txt
grep -E "copy|flat|default" $R/probe.txt
tar czf $OUT/res.tgz -C $OUT r; el done
