#!/usr/bin/env bash
# session 16 call 3: mv_probe's v3 kernels with the next tile's activations loaded with its weights (x-ahead),
# Q4_K lane pairs (int-scale) and Q4_0, at 4 / 3 / 2 blocks per SM, against the plain v3 forms; twice, for
# the 14336 x 4096 and the 4096 x 14336 shapes.
set -u
BINS="mv_probe" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
for shape in "14336 4096" "4096 14336" "14336 4096"; do
  /root/bin/mv_probe $shape pair 2>&1 | grep -v "^flat" | tee -a $R/xahead.txt
done; el probe
