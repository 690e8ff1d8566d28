#!/usr/bin/env bash
# session 16 call 10: mv_probe's v3 kernel for whole tiles (kXWhole: no clamp of the chunk index, so c % 32
# is the lane; ptxas: 8 fewer instructions for the Q4_K pairs, 32 for Q4_0) against the plain form, both
# shapes, twice.
set -u
BINS="mv_probe" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
for shape in "14336 4096" "4096 14336" "14336 4096" "4096 14336"; do
  /root/bin/mv_probe $shape pair 2>&1 | grep -E "copy d2d|strided  |whole" | tee -a $R/whole.txt
done; el probe
