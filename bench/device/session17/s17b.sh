#!/usr/bin/env bash
# session 17 call 2: the bulk-copy matvec with 8 / 16 consumer warps, whole rows per warp writing out directly,
# bigger stages; chain3 with the attention stand-in's carveout at max shared memory (so the next matvec's blocks
# can sit beside it and load during the gap) against the default.
set -u
BINS="mv_probe" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
timeout 120 /root/bin/mv_probe tma 2>&1 | tee $R/tma.txt; el tma
timeout 150 /root/bin/mv_probe chain3 2>&1 | tee $R/chain3.txt; el chain3
