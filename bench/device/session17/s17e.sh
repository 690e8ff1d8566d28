#!/usr/bin/env bash
# session 17 call 5: the bulk-copy consumers with the activations in registers (loaded once) and each
# row's weights loaded before any dot (x-regs) against x-smem: standalone, in chain3, and Nsight Compute
# (14336 x 4096, x-regs); chain3 also with the max-shared carveout ("carve") and two 8-warp blocks per SM
# ("2/SM"), so the next matvec can load beside the one running or the stand-in.
set -u
BINS="mv_probe" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
timeout 100 /root/bin/mv_probe tma 2>&1 | tee $R/tma.txt; el tma
timeout 150 /root/bin/mv_probe chain3 2>&1 | tee $R/chain3.txt; el chain3
ncu_tma $R; el ncu
