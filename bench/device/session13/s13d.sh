#!/usr/bin/env bash
# (Record of a measured experiment: the switch it A/Bs measured no better or slower and was removed
# afterwards; see bench/RESULTS.md, "GPU host, session 13". Its build is the commit named there.)
# session 13 call 4: the decode attention copying its first K/V tile before its PDL wait (the batch's cells
# copied again after it): test_cuda_ops and the whole-model check with it on; decode A/B on / off
# (FERRY_CUDA_ATTN_PREWAIT=0) after 512 and 4096 tokens; then issue 4's table against llama.cpp built here in
# the same call (bench/device/llama_cpp_build.sh, started first), with the A/B's faster setting, and the
# device copy rate (mv_probe).
set -u
BINS="ferry test_cuda_ops mv_probe" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv > $R/smi.txt
JOBS=14 bash bench/device/llama_cpp_build.sh .devcarry/llama.cpp-src.tar.xz; el build started
synth_bg $R Q4_0 Q4_K
cuda_checks $R
synth_wait $R
W=FERRY_CUDA_ATTN_PREWAIT
TYPES="Q4_0 Q4_K" CONFIGS="pw: nopw:$W=0 pw_b: nopw_b:$W=0" LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R/a \
  timeout 120 bash bench/device/decode_ab.sh > $R/ab_a.log 2>&1; el ab512
TYPES="Q4_0 Q4_K" CONFIGS="pw: nopw:$W=0" P=4096 N=32 LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R/d \
  timeout 90 bash bench/device/decode_ab.sh > $R/ab_d.log 2>&1; el ab4096
cat $R/a/ab/summary.txt $R/d/ab/summary.txt
# The faster setting for the table: pw unless nopw's Q4_0 + Q4_K decode after 512 tokens (both runs) is higher.
KEEP_PW=$(python3 - $R/a/ab <<'PY'
import json, sys, os
def tg(n):
    try: return json.load(open(os.path.join(sys.argv[1], n)))["decode_tok_s"]
    except Exception: return 0.0
on = sum(tg(f"{t}.{c}.json") for t in ("Q4_0", "Q4_K") for c in ("pw", "pw_b"))
off = sum(tg(f"{t}.{c}.json") for t in ("Q4_0", "Q4_K") for c in ("nopw", "nopw_b"))
print(1 if on >= off else 0)
PY
)
[ "$KEEP_PW" = 1 ] || export FERRY_CUDA_ATTN_PREWAIT=0
el "table with prewait=$KEEP_PW"
timeout 30 /root/bin/mv_probe > $R/probe.txt 2>&1; grep -iE "copy" $R/probe.txt | head -3
for i in $(seq 1 60); do [ -f /root/lcb/done ] && break; sleep 5; done; el "llama.cpp done: $([ -f /root/lcb/done ] && echo yes || echo no)"
tail -3 /root/lcb/build.log > $R/lcb_tail.txt
LB=; [ -f /root/lcb/done ] && LB=/root/lcb/build/bin/llama-bench
FULL=1 FULL_TYPES="Q4_0 Q4_K" FULL_PROMPTS="512 4096" FULL_LB_DEPTH=0,4096 KEEP=1 BIN=/root/bin LLAMA_BENCH=$LB MODELS=/root/m OUT=$R/full \
  timeout $(( 590 - $(date +%s) + T0 )) bash bench/device/compare.sh > $R/full.log 2>&1; el full
cat $R/full/compare/summary.md 2>/dev/null | grep -E "^\||##|at " | head -30
tar czf $OUT/res.tgz -C $OUT r; el done
