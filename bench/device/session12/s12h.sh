#!/usr/bin/env bash
# session 12 call 8: decode attention's split count (FERRY_CUDA_ATTN_SPLITS, one-token steps only; unset =
# pick_splits: 9 at ~576 cells, 33 at ~4100), llama3-8b Q4_0, after 512 and after 4096 prompt tokens.
set -u
BINS="ferry" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0; synth_wait $R
S=FERRY_CUDA_ATTN_SPLITS
TYPES=Q4_0 CONFIGS="auto: s1:$S=1 s2:$S=2 s4:$S=4 s5:$S=5 s16:$S=16 auto_b:" LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R/a timeout 90 bash bench/device/decode_ab.sh > $R/ab_a.log 2>&1
TYPES=Q4_0 CONFIGS="auto4k: s8_4k:$S=8 s16_4k:$S=16 s64_4k:$S=64" P=4096 N=32 LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R/d timeout 60 bash bench/device/decode_ab.sh > $R/ab_d.log 2>&1
cat $R/a/ab/summary.txt $R/d/ab/summary.txt
