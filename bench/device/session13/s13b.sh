#!/usr/bin/env bash
# (Record of a measured experiment: the switch it A/Bs measured no better or slower and was removed
# afterwards; see bench/RESULTS.md, "GPU host, session 13". Its build is the commit named there.)
# session 13 call 2: the small decode kernels letting the next kernel go before their own PDL wait
# (FERRY_CUDA_PDL_EARLY=1; 2 = every kernel, session 12's deep chain, as the control): test_cuda_ops and the
# whole-model check with 1, then llama3-8b Q4_0 / Q4_K decode A/B 0 / 1 / 2 after 512 and after 4096 tokens.
set -u
BINS="ferry test_cuda_ops" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0 Q4_K
FERRY_CUDA_PDL_EARLY=1 cuda_checks $R
synth_wait $R
E=FERRY_CUDA_PDL_EARLY
TYPES="Q4_0 Q4_K" CONFIGS="late:$E=0 early:$E=1 deep:$E=2 late_b:$E=0 early_b:$E=1 early_abl:$E=1,FERRY_CUDA_ABLATE=norm+rope+attn+combine+glu late_abl:$E=0,FERRY_CUDA_ABLATE=norm+rope+attn+combine+glu" \
  LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R/a timeout 240 bash bench/device/decode_ab.sh > $R/ab_a.log 2>&1; el ab512
TYPES="Q4_0 Q4_K" CONFIGS="late:$E=0 early:$E=1 late_b:$E=0 early_b:$E=1" P=4096 N=32 \
  LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R/d timeout $(( 590 - $(date +%s) + T0 )) bash bench/device/decode_ab.sh > $R/ab_d.log 2>&1; el ab4096
cat $R/a/ab/summary.txt $R/d/ab/summary.txt
tar czf $OUT/res.tgz -C $OUT r; el done
