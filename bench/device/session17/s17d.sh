#!/usr/bin/env bash
# session 17 call 4: chain3 with the attention stand-in letting the next matvec go before its own wait
# ("early") against after it, copy only and with the arithmetic; Nsight Compute on the bulk-copy kernel
# (14336 x 4096, 16 consumer warps, 36 KiB stages): where its consumers spend their cycles.
set -u
BINS="mv_probe" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
timeout 150 /root/bin/mv_probe chain3 2>&1 | tee $R/chain3.txt; el chain3
ncu_tma $R; el ncu
