#!/usr/bin/env bash
# (Record of a measured experiment: the switch it A/Bs measured slower and was removed afterwards; see
# bench/RESULTS.md, "GPU host, session 12".)
# session 12 call 6: decode attention merging its splits in the tensor-core kernel's last block
# (FERRY_CUDA_ATTN_FUSE, default on) and the norm weights loaded before the PDL wait: test_cuda_ops,
# whole-model check, decode A/B on llama3-8b Q4_0 / Q4_K after 512 and after 4096 prompt tokens.
set -u
BINS="ferry test_cuda_ops" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0 Q4_K
cuda_checks $R
synth_wait $R
F=FERRY_CUDA_ATTN_FUSE
for rep in 1 2; do
  TYPES="Q4_0 Q4_K" CONFIGS="fuse:$F=1 sep:$F=0" LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R/a$rep timeout 100 bash bench/device/decode_ab.sh > $R/ab_a$rep.log 2>&1
  TYPES="Q4_0 Q4_K" CONFIGS="fuse4k:$F=1 sep4k:$F=0" P=4096 N=32 LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R/d$rep timeout 150 bash bench/device/decode_ab.sh > $R/ab_d$rep.log 2>&1
  el rep $rep
done
cat $R/a1/ab/summary.txt $R/d1/ab/summary.txt $R/a2/ab/summary.txt $R/d2/ab/summary.txt
tar czf $OUT/res.tgz -C $OUT r; el done
