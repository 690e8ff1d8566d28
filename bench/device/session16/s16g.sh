#!/usr/bin/env bash
# session 16 call 7: mv_probe's v3 kernels with the block's int8 activations staged in shared memory
# (x-smem) against the plain v3 forms and x-ahead, Q4_K lane pairs and Q4_0, for the 14336 x 4096 and
# 4096 x 14336 shapes, twice.
set -u
BINS="mv_probe" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
for shape in "14336 4096" "4096 14336" "14336 4096" "4096 14336"; do
  /root/bin/mv_probe $shape pair 2>&1 | grep -v "^flat" | tee -a $R/xsmem.txt
done; el probe
