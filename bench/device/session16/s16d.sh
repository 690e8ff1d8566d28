#!/usr/bin/env bash
# (Record of a measured experiment: the x-ahead it A/Bs decoded 20 % slower and was reverted; see
# bench/RESULTS.md, "GPU host, session 16". Its build: the session-16 q4k_pair_int commit plus x-ahead.)
# session 16 call 4: x-ahead in the production one-token v3 kernels of the lane-pair Q4_K decoder (the
# activations of a tile loaded with its weights, one tile ahead; ptxas: 64 registers, 20-48 bytes of spill)
# against call 2's build (int-scale, no x-ahead; ferry_old): test_cuda_ops, then decode after 512 and 4096
# tokens, alternating.
set -u
BINS="ferry ferry_old test_cuda_ops" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_K
cuda_tests $R
synth_wait $R
alt_ab _ Q4_K 512 128 3; el ab512
alt_ab _floor Q4_K 512 128 1 FERRY_CUDA_ABLATE=norm+rope+attn+combine+glu
alt_ab _4k Q4_K 4096 32 1; el ab4096
