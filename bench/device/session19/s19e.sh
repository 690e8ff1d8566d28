#!/usr/bin/env bash
# session 19 call 5: the fused gate / up + glu kernel only where its groups fill >= 80 % of its block slots
# (CudaOpsOptions::matvec_glu_min_fill; below, the folded norm's image feeds plain gate / up matvecs and the
# glu kernel runs). Every CUDA test, then decode after 512 tokens, the new default ("fill") against the fused
# kernel everywhere (FERRY_CUDA_GLU_MIN_FILL=0, the previous behaviour), two rounds, on qwen3-8b Q4_K / Q4_0
# (fill 73 %: switches), minitron-8b Q4_K (68 %: switches) and llama3-8b Q4_K (85 %: stays fused, control).
# decode_ab.sh reads MODELS/llama3-8b-TYPE.gguf, so each preset gets its own MODELS folder.
set -u
BINS="ferry test_cuda_ops" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
run_synth() {  # preset type
  mkdir -p /root/p/$1
  timeout 200 /root/bin/ferry synth --preset $1 --type $2 --fast -o /root/p/$1/llama3-8b-$2.gguf > $R/synth_$1_$2.log 2>&1
}
(run_synth qwen3-8b Q4_K; touch /root/p/qwen3-8b/done) &
(run_synth minitron-8b Q4_K; touch /root/p/minitron-8b/done) &
(run_synth llama3-8b Q4_K; touch /root/p/llama3-8b/done) &
(sleep 20; run_synth qwen3-8b Q4_0; touch /root/p/qwen3-8b/done0) &
cuda_tests $R
for round in 1 2; do
  for pt in qwen3-8b:Q4_K minitron-8b:Q4_K llama3-8b:Q4_K qwen3-8b:Q4_0; do
    p=${pt%%:*}; t=${pt#*:}; mark=/root/p/$p/done; [ $t = Q4_0 ] && mark=/root/p/$p/done0
    for i in $(seq 1 60); do [ -f $mark ] && break; sleep 3; done
    TYPES=$t CONFIGS="fill: fused:FERRY_CUDA_GLU_MIN_FILL=0" P=512 N=128 LAYER=0 BIN=/root/bin MODELS=/root/p/$p \
      OUT=$R/$p$t$round timeout 100 bash bench/device/decode_ab.sh > /dev/null 2>&1
    sed "s/^/$p /" $R/$p$t$round/ab/summary.txt
  done
done
el done
