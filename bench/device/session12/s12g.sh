#!/usr/bin/env bash
# session 12 call 7: the session's final build (norm weights loaded before the PDL wait; pdl_enter; the
# FERRY_CUDA_ABLATE timing switch): test_cuda_ops, whole-model check, llama3-8b Q4_0 / Q4_K decode after 512
# and after 4096 prompt tokens (`ferry bench --device cuda -p 512 -n 128` / `-p 4096 -n 32`), twice.
set -u
BINS="ferry test_cuda_ops" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0 Q4_K
cuda_checks $R
synth_wait $R
for rep in 1 2; do
  TYPES="Q4_0 Q4_K" CONFIGS="p512:" LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R/a$rep timeout 100 bash bench/device/decode_ab.sh > $R/ab_a$rep.log 2>&1
  TYPES="Q4_0 Q4_K" CONFIGS="p4096:" P=4096 N=32 LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R/d$rep timeout 150 bash bench/device/decode_ab.sh > $R/ab_d$rep.log 2>&1
done
cat $R/a1/ab/summary.txt $R/d1/ab/summary.txt $R/a2/ab/summary.txt $R/d2/ab/summary.txt
tar czf $OUT/res.tgz -C $OUT r; el done
