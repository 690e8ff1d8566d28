#!/usr/bin/env bash
# session 19 call 2 (right after call 1, on the same warm machine): issue 4's whole table with the landed
# build. llama.cpp built in call 1 (this waits for it), the models call 1 synthesized; the device-to-device
# copy rate (bench_cuda_ops, read + write) and compare.sh FULL for Q4_0, Q4_K and F16 at 512 and 4096 tokens.
set -u
BINS="ferry bench_cuda_ops" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
timeout 60 /root/bin/bench_cuda_ops attention > $R/bco.txt 2>&1; grep -iE "read\+write" $R/bco.txt | head -2
for i in $(seq 1 80); do [ -f /root/lcb/done ] && break; sleep 3; done; el "llama.cpp done: $([ -f /root/lcb/done ] && echo yes || echo no)"
tail -2 /root/lcb/build.log
LB=; [ -f /root/lcb/done ] && LB=/root/lcb/build/bin/llama-bench
FULL=1 FULL_TYPES="Q4_0 Q4_K F16" FULL_PROMPTS="512 4096" FULL_LB_DEPTH=0,4096 KEEP=1 BIN=/root/bin LLAMA_BENCH=$LB MODELS=/root/m OUT=$R/full \
  timeout $(( 585 - $(date +%s) + T0 )) bash bench/device/compare.sh > $R/full.log 2>&1; el full
cat $R/full/compare/summary.md 2>/dev/null | grep -E "^\||##|at " | head -30
