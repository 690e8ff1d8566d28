#!/usr/bin/env bash
# session 19 call 4: is the Q4_K fused gate / up + glu kernel slow because its 32-element groups land unevenly
# on the SMs? Three FFN widths with different group counts per SM (132 SMs, up to 4 blocks each): llama3-8b
# 14336 (448 groups: 4 or 3 an SM, the busiest 18 % above the mean), minitron-8b 11520 (360: 3 or 2, 10 %),
# qwen3-8b 12288 (384: 3 or 2, 3 %). For each, the matvec chain (norm, rope, attention, combine left out;
# timing only) with the glu epilogue and with plain gate / up (glu left out too), Q4_K, after 512 tokens, two
# rounds. decode_ab.sh reads MODELS/llama3-8b-TYPE.gguf, so each preset gets its own MODELS folder.
set -u
BINS="ferry" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
for p in llama3-8b minitron-8b qwen3-8b; do
  mkdir -p /root/p/$p
  (timeout 200 /root/bin/ferry synth --preset $p --type Q4_K --fast -o /root/p/$p/llama3-8b-Q4_K.gguf > $R/synth_$p.log 2>&1; touch /root/p/$p/done) &
done
A=FERRY_CUDA_ABLATE=norm+rope+attn+combine
for round in 1 2; do
  for p in llama3-8b minitron-8b qwen3-8b; do
    for i in $(seq 1 60); do [ -f /root/p/$p/done ] && break; sleep 3; done
    TYPES=Q4_K CONFIGS="chain:$A chain_noglu:$A+glu" P=512 N=128 LAYER=0 BIN=/root/bin MODELS=/root/p/$p \
      OUT=$R/$p$round timeout 100 bash bench/device/decode_ab.sh > /dev/null 2>&1
    sed "s/^/$p /" $R/$p$round/ab/summary.txt
  done
done
el done
