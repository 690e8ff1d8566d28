#!/usr/bin/env bash
# (Record of a measured experiment: row_w, which it A/Bs, decoded 1-2 % slower and was reverted; see
# bench/RESULTS.md, "GPU host, session 16".)
# session 16 call 8: the v3 walks carry only a row's weight pointer from tile to tile (row_w; the out pointer
# is looked up when the row is done): fewer live registers, so ptxas issues a tile's activation loads at
# once in the fold producer (SASS). test_cuda_ops, then decode after 512 tokens against the committed build
# (ferry_old), Q4_K and Q4_0 alternating, and after 4096 tokens.
set -u
BINS="ferry ferry_old test_cuda_ops" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_K Q4_0
cuda_tests $R
synth_wait $R
alt_ab _ "Q4_K Q4_0" 512 128 2; el ab512
alt_ab _4k Q4_K 4096 32 1; el ab4096
