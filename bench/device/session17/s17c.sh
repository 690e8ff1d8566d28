#!/usr/bin/env bash
# session 17 call 3: chain3 with the consumers' arithmetic off (copy only: each stage waited for and released)
# against on, with and without 10 us attention stand-ins: is the bulk-copy chain bound by its copies or its
# consumers, and do copies issued during a gap shorten the step when there is no arithmetic to wait for?
set -u
BINS="mv_probe" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
timeout 150 /root/bin/mv_probe chain3 2>&1 | tee $R/chain3.txt; el chain3
timeout 60 /root/bin/mv_probe 14336 4096 2>&1 | grep -E "copy d2d|flat" | tee $R/flat.txt; el flat
