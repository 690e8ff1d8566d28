#!/usr/bin/env bash
# (Record of a measured experiment: the switch it A/Bs measured no better or slower and was removed
# afterwards; see bench/RESULTS.md, "GPU host, session 13". Its build is the commit named there.)
# session 13 call 6 (the device time's last 4.5 minutes): the tensor-core attention issuing its prologue's
# global loads (first tile's cells, rows' positions, q) before using any, and the next tile's cells stored at
# the end of the iteration: test_cuda_ops, then llama3-8b decode A/B FERRY_CUDA_ATTN_HOIST=1 (default) / 0.
set -u
BINS="ferry test_cuda_ops" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0 Q4_K
timeout 80 /root/bin/test_cuda_ops > $R/test_cuda_ops.txt 2>&1; echo "test_cuda_ops rc $?" >> $R/test_cuda_ops.txt
el tests; grep -E "PASSED|FAILED" $R/test_cuda_ops.txt | head -5; tail -1 $R/test_cuda_ops.txt
synth_wait $R
H=FERRY_CUDA_ATTN_HOIST
TYPES="Q4_0 Q4_K" CONFIGS="hoist: nohoist:$H=0 hoist_b: nohoist_b:$H=0" LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R/a \
  timeout 40 bash bench/device/decode_ab.sh > $R/ab_a.log 2>&1; el ab512
TYPES="Q4_0" CONFIGS="hoist: nohoist:$H=0" P=4096 N=32 LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R/d \
  timeout 20 bash bench/device/decode_ab.sh > $R/ab_d.log 2>&1; el ab4096
cat $R/a/ab/summary.txt $R/d/ab/summary.txt
