#!/usr/bin/env bash
# (Record of a measured experiment: the switch it A/Bs measured slower and was removed afterwards; see
# bench/RESULTS.md, "GPU host, session 12".)
# session 12 call 4: the deep PDL chain (every kernel lets the next go before its own wait) and the v3
# matvec's L2 prefetch of each warp's first rows before its wait: test_cuda_ops and the whole-model check
# with both on, then decode A/B on llama3-8b Q4_0 / Q4_K: FERRY_CUDA_PF_ROWS 0 / 1 / 2 / 4, early vs the
# one-deep chain (ferry_late, FERRY_CUDA_PDL_EARLY=0).
set -u
BINS="ferry ferry_late test_cuda_ops" . bench/device/session12/setup.sh
mkdir -p /root/bl && mv /root/bin/ferry_late /root/bl/ferry
R=$OUT/r; mkdir -p $R; export XDG_CACHE_HOME=/root/cache
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
(for t in Q4_0 Q4_K; do timeout 200 /root/bin/ferry synth --preset llama3-8b --type $t --fast -o /root/m/llama3-8b-$t.gguf > $R/synth_$t.log 2>&1; done; echo done > $R/synth.done) &
FERRY_CUDA_PF_ROWS=2 timeout 150 /root/bin/test_cuda_ops > $R/test_cuda_ops.txt 2>&1; echo "test_cuda_ops rc $?" >> $R/test_cuda_ops.txt; el tests
tail -2 $R/test_cuda_ops.txt; grep -E "FAILED" $R/test_cuda_ops.txt | head
FERRY_CUDA_PF_ROWS=2 BUILD=/root/bin SKIP_TESTS=1 SKIP_BENCH=1 REAL_MODELS=0 OUT=$R/check timeout 150 bash bench/device/check_cuda.sh > $R/check.log 2>&1; el check
grep -c " ok " $R/check/models.log; grep -v " ok " $R/check/models.log | head
for i in $(seq 1 60); do [ -f $R/synth.done ] && break; sleep 5; done; el synth
P=FERRY_CUDA_PF_ROWS
for rep in 1 2; do
  TYPES="Q4_0 Q4_K" CONFIGS="early_pf0:$P=0 early_pf1:$P=1 early_pf2:$P=2 early_pf4:$P=4" LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R/e$rep timeout 200 bash bench/device/decode_ab.sh > $R/ab_e$rep.log 2>&1
  TYPES="Q4_0 Q4_K" CONFIGS="late_pf0:$P=0 late_pf2:$P=2" LAYER=0 BIN=/root/bl MODELS=/root/m OUT=$R/l$rep timeout 120 bash bench/device/decode_ab.sh > $R/ab_l$rep.log 2>&1
  el rep $rep
done
cat $R/e1/ab/summary.txt $R/l1/ab/summary.txt $R/e2/ab/summary.txt $R/l2/ab/summary.txt
tar czf $OUT/res.tgz -C $OUT r; el done
