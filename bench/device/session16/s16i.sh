#!/usr/bin/env bash
# session 16 call 9: the review's mv_probe (one v3 kernel with an activation mode, llama3_step): the pair
# forms, the default run over every variant, and chain2, to check they measure as before.
set -u
BINS="mv_probe" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
/root/bin/mv_probe 14336 4096 pair 2>&1 | grep -v "^flat" | tee $R/pair.txt
/root/bin/mv_probe > $R/all.txt 2>&1; echo "all rc $?"; grep -E "Q4_K pair|Q4_0 full U2 MB4" $R/all.txt
timeout 120 /root/bin/mv_probe chain2 > $R/chain2.txt 2>&1; echo "chain2 rc $?"; head -5 $R/chain2.txt; el done
