#!/usr/bin/env bash
# session 17 call 6: chain3 again, then a trace of one replay (globaltimer stamps per block of layer 10's
# matvecs: entry, after the PDL wait, first stage in, end; the 10 us stand-in's start and end): does the
# matvec after the stand-in start and fetch during it?
set -u
BINS="mv_probe" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
timeout 150 /root/bin/mv_probe chain3 2>&1 | tee $R/chain3.txt | grep -E "trace|entry"; el chain3
