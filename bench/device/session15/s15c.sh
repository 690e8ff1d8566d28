#!/usr/bin/env bash
# session 15 call 3 (right after call 2, on the same warm machine): issue 4's table with the fold and the lane-pair
# Q4_K decoder on; llama.cpp from call 2's background build (this waits for it), the models call 2 synthesized,
# ferry from call 2's carry; the device-to-device copy rate (mv_probe) and compare.sh FULL for Q4_0, Q4_K, F16.
set -u
BINS="ferry mv_probe" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv
timeout 30 /root/bin/mv_probe > $R/probe.txt 2>&1; grep -iE "copy" $R/probe.txt | head -3
for i in $(seq 1 80); do [ -f /root/lcb/done ] && break; sleep 3; done; el "llama.cpp done: $([ -f /root/lcb/done ] && echo yes || echo no)"
tail -2 /root/lcb/build.log
LB=; [ -f /root/lcb/done ] && LB=/root/lcb/build/bin/llama-bench
FULL=1 FULL_TYPES="Q4_0 Q4_K F16" FULL_PROMPTS="512 4096" FULL_LB_DEPTH=0,4096 KEEP=1 BIN=/root/bin LLAMA_BENCH=$LB MODELS=/root/m OUT=$R/full \
  timeout $(( 585 - $(date +%s) + T0 )) bash bench/device/compare.sh > $R/full.log 2>&1; el full
cat $R/full/compare/summary.md 2>/dev/null | grep -E "^\||##|at " | head -30
