#!/usr/bin/env bash
# session 12 call 2: `mv_probe chain` with L2 bulk prefetch of the next matrix in the gaps between the
# matvecs (does the weight stream go on during the small kernels?).
set -u
BINS="mv_probe" . bench/device/carry_setup.sh
timeout 300 /root/bin/mv_probe chain 2>&1 | tee $OUT/chain_pf.txt
