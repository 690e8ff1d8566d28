#!/usr/bin/env bash
# session 18 call 6: issue 4's decode and 512-token prefill against llama.cpp in one call with the session's
# last build (the one-token decode attention kernel): llama.cpp built here in the background from the
# carried llama_cpp_python-0.3.36 source, Q4_0 and Q4_K synthesized meanwhile, the copy rate from
# bench_cuda_ops, then compare.sh FULL for prompts of 512 (session 16's table holds the 4096 columns and F16).
set -u
BINS="ferry bench_cuda_ops" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
JOBS=15 bash bench/device/llama_cpp_build.sh
synth_bg $R Q4_0 Q4_K
timeout 60 /root/bin/bench_cuda_ops attention > $R/bco.txt 2>&1; grep -iE "read\+write" $R/bco.txt | head -2
synth_wait $R
for i in $(seq 1 110); do [ -f /root/lcb/done ] && break; sleep 3; done; el "llama.cpp done: $([ -f /root/lcb/done ] && echo yes || echo no)"
tail -2 /root/lcb/build.log
LB=; [ -f /root/lcb/done ] && LB=/root/lcb/build/bin/llama-bench
FULL=1 FULL_TYPES="Q4_0 Q4_K" FULL_PROMPTS="512" FULL_LB_PROMPTS=512 FULL_LB_DEPTH=0 KEEP=1 BIN=/root/bin LLAMA_BENCH=$LB \
  MODELS=/root/m OUT=$R/full timeout $(( 560 - $(date +%s) + T0 )) bash bench/device/compare.sh > $R/full.log 2>&1; el full
cat $R/full/compare/summary.md 2>/dev/null | grep -E "^\||##|at " | head -30
