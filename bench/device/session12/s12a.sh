#!/usr/bin/env bash
# session 12 call 1: `mv_probe chain` (does a persistent decode step get past the per-launch cost?),
# test_cuda_ops and the whole-model GPU check of the folded q4k_pair (6fb3183), Q4_0 / Q4_K decode.
set -u
BINS="ferry test_cuda_ops mv_probe" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $R/smi.txt
synth_bg $R Q4_0 Q4_K
timeout 150 /root/bin/mv_probe chain > $R/chain.txt 2>&1; el chain
cat $R/chain.txt
cuda_checks $R
synth_wait $R
TYPES="Q4_0 Q4_K" CONFIGS="a: b: c:" LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R timeout 200 bash bench/device/decode_ab.sh > $R/ab.log 2>&1; el ab
cat $R/ab/summary.txt
tar czf $OUT/res.tgz -C $OUT r; el done
