#!/usr/bin/env bash
# session 15 call 1: the rms_norm folded into the matvecs around it (FERRY_CUDA_NORM_FOLD, default on: the
# o-proj / down matvec writes the residual, the Q8 image of h * nw and the group sums of squares; the next
# gate / up or q / k / v matvec scales its rows; no norm kernel in a llama layer) and the lane-pair Q4_K
# decoder (FERRY_CUDA_Q4K_PAIR, default off here). test_cuda_ops and the whole-model check, then decode
# A/Bs after 512 and 4096 tokens, and the matvec-only floor (FERRY_CUDA_ABLATE) with and without pairs.
set -u
BINS="ferry test_cuda_ops" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0 Q4_K
cuda_checks $R
synth_wait $R
F=FERRY_CUDA_NORM_FOLD P=FERRY_CUDA_Q4K_PAIR
ab a 512 128 "Q4_0" "fold: nofold:$F=0 fold_b: nofold_b:$F=0"; el ab512_q40
ab b 512 128 "Q4_K" "fold: nofold:$F=0 pair:$P=1 pair_nofold:$P=1,$F=0 fold_b: pair_b:$P=1"; el ab512_q4k
ab c 4096 32 "Q4_0 Q4_K" "fold: nofold:$F=0 pair:$P=1"; el ab4096
A=FERRY_CUDA_ABLATE=norm+rope+attn+combine+glu
ab d 512 128 "Q4_K" "floor:$A floor_pair:$A,$P=1"; el floor
tar czf $OUT/res.tgz -C $OUT r; el done
