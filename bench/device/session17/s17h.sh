#!/usr/bin/env bash
# session 17 call 8: the review's mv_probe (now_ns, the split kept in TmaGeom, [[maybe_unused]] helpers; same
# kernels) measures as before: tma standalone and chain3.
set -u
BINS="mv_probe" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
timeout 100 /root/bin/mv_probe tma 2>&1 | grep -E "^--|v3|x-regs NW 16 R (16|  4) S  2" | tee $R/tma.txt; el tma
timeout 150 /root/bin/mv_probe chain3 2>&1 | grep -E "NW 16 gap|trace|entry" | head -12 | tee $R/chain3.txt; el chain3
