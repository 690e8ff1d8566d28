#!/usr/bin/env bash
# (Record of a measured experiment: the switch it A/Bs measured no better or slower and was removed
# afterwards; see bench/RESULTS.md, "GPU host, session 13". Its build is the commit named there.)
# session 13 call 3: which decode matvec kernel for the 4096-row projections (o, down; and QKV's 6144):
# llama3-8b Q4_0 / Q4_K decode A/B FERRY_CUDA_V3_MIN_N unset (v3 everywhere, the default) / 5000 (o and down
# on v2) / 8192 (QKV too) / FERRY_CUDA_MATVEC=2 (v2 everywhere), after 512 and after 4096 tokens.
set -u
BINS="ferry" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0 Q4_K
synth_wait $R
V=FERRY_CUDA_V3_MIN_N
TYPES="Q4_0 Q4_K" CONFIGS="base: n5k:$V=5000 n8k:$V=8192 v2:FERRY_CUDA_MATVEC=2 base_b: n5k_b:$V=5000 n8k_b:$V=8192" \
  LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R/a timeout 200 bash bench/device/decode_ab.sh > $R/ab_a.log 2>&1; el ab512
TYPES="Q4_0 Q4_K" CONFIGS="base: n5k:$V=5000 n8k:$V=8192 base_b: n5k_b:$V=5000" P=4096 N=32 \
  LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R/d timeout 200 bash bench/device/decode_ab.sh > $R/ab_d.log 2>&1; el ab4096
cat $R/a/ab/summary.txt $R/d/ab/summary.txt
tar czf $OUT/res.tgz -C $OUT r; el done
