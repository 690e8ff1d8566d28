#!/usr/bin/env bash
# session 18 call 7: the review build (one combine launcher shared by the decode and tensor-core paths):
# every CUDA test and the whole-model check, then one decode A/B round after 512 tokens.
set -u
BINS="ferry test_cuda_ops" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0
cuda_checks $R
synth_wait $R
ab r1 512 128 "Q4_0" "dec: mma:FERRY_CUDA_ATTN_DEC=0"
el done
