#!/usr/bin/env bash
# (Record of a measured experiment: the switch it A/Bs measured slower and was removed afterwards; see
# bench/RESULTS.md, "GPU host, session 12".)
# session 12 call 4: the deep PDL chain (every kernel lets the next go before its own wait) and the v3
# matvec's L2 prefetch of each warp's first rows before its wait: test_cuda_ops and the whole-model check
# with both on, then decode A/B on llama3-8b Q4_0 / Q4_K: FERRY_CUDA_PF_ROWS 0 / 1 / 2 / 4, early vs the
# one-deep chain (ferry_late, FERRY_CUDA_PDL_EARLY=0).
set -u
BINS="ferry ferry_late test_cuda_ops" . bench/device/carry_setup.sh
mkdir -p /root/bl && mv /root/bin/ferry_late /root/bl/ferry
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0 Q4_K
FERRY_CUDA_PF_ROWS=2 cuda_checks $R
synth_wait $R
P=FERRY_CUDA_PF_ROWS
for rep in 1 2; do
  TYPES="Q4_0 Q4_K" CONFIGS="early_pf0:$P=0 early_pf1:$P=1 early_pf2:$P=2 early_pf4:$P=4" LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R/e$rep timeout 200 bash bench/device/decode_ab.sh > $R/ab_e$rep.log 2>&1
  TYPES="Q4_0 Q4_K" CONFIGS="late_pf0:$P=0 late_pf2:$P=2" LAYER=0 BIN=/root/bl MODELS=/root/m OUT=$R/l$rep timeout 120 bash bench/device/decode_ab.sh > $R/ab_l$rep.log 2>&1
  el rep $rep
done
cat $R/e1/ab/summary.txt $R/l1/ab/summary.txt $R/e2/ab/summary.txt $R/l2/ab/summary.txt
tar czf $OUT/res.tgz -C $OUT r; el done
