#!/usr/bin/env bash
# session 16 call 1: the GPU checks of 91082d8 (the session-15 review commit, checked on the host only), and
# `mv_probe chain2`: can a side prefetcher (a forked graph branch on a few SMs, started by each layer's
# attention stand-in) keep DRAM busy under the attention gap and make the following matvecs cheaper?
set -u
BINS="ferry test_cuda_ops mv_probe" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
timeout 200 /root/bin/mv_probe chain2 > $R/chain2.txt 2>&1; echo "mv_probe rc $?"; el chain2
cat $R/chain2.txt
cuda_checks $R
