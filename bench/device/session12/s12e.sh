#!/usr/bin/env bash
# (Record of a measured experiment: the switch it A/Bs measured slower and was removed afterwards; see
# bench/RESULTS.md, "GPU host, session 12".)
# session 12 call 5: the norm weights loaded before the PDL wait, and one shared-memory carveout for every
# kernel (FERRY_CUDA_CARVEOUT): test_cuda_ops, whole-model check, decode A/B on llama3-8b Q4_0 / Q4_K against
# ferry_ref (call 4's one-deep-chain build, no norm change); the all-small-kernels ablation.
set -u
BINS="ferry ferry_ref test_cuda_ops" . bench/device/carry_setup.sh
mkdir -p /root/br && mv /root/bin/ferry_ref /root/br/ferry
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0 Q4_K
cuda_checks $R
synth_wait $R
C=FERRY_CUDA_CARVEOUT
for rep in 1 2; do
  TYPES="Q4_0 Q4_K" CONFIGS="ref:" LAYER=0 BIN=/root/br MODELS=/root/m OUT=$R/r$rep timeout 100 bash bench/device/decode_ab.sh > $R/ab_r$rep.log 2>&1
  TYPES="Q4_0 Q4_K" CONFIGS="new: car100:$C=100 car50:$C=50" LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R/n$rep timeout 200 bash bench/device/decode_ab.sh > $R/ab_n$rep.log 2>&1
  el rep $rep
done
TYPES="Q4_0" CONFIGS="small:FERRY_CUDA_ABLATE=norm+rope+attn+combine+glu car100_attn:$C=100,FERRY_CUDA_ABLATE=attn" LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R/s timeout 100 bash bench/device/decode_ab.sh > $R/ab_s.log 2>&1
cat $R/r1/ab/summary.txt $R/n1/ab/summary.txt $R/r2/ab/summary.txt $R/n2/ab/summary.txt $R/s/ab/summary.txt
tar czf $OUT/res.tgz -C $OUT r; el done
