#!/usr/bin/env bash
# session 17 call 7: chain3 with x-regs consumers at two 8-warp blocks per SM (2-row stages for K = 14336, so
# the activations still fit in registers), 100 / 110 KiB each, and the trace of that configuration: do faster
# consumers plus a second matvec beside each one hide more of the 10 us gap?
set -u
BINS="mv_probe" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
timeout 150 /root/bin/mv_probe chain3 2>&1 | tee $R/chain3.txt; el chain3
