#!/usr/bin/env bash
# session 13 call 5: the session's final build (test_cuda_ops, whole-model check, decode after 512 / 4096
# tokens), and where the small decode kernels' cost sits: a timing build whose small kernels return right
# after their PDL entry (ferry_empty: -DFERRY_CUDA_EMPTY_SMALL, every launch and hand-off kept, no work)
# against the normal build and against FERRY_CUDA_ABLATE (those kernels not launched at all).
set -u
BINS="ferry test_cuda_ops ferry_empty" . bench/device/carry_setup.sh
mkdir -p /root/be && mv /root/bin/ferry_empty /root/be/ferry
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0 Q4_K
cuda_checks $R
synth_wait $R
A="FERRY_CUDA_ABLATE=norm+rope+attn+combine+glu"
ab() {  # ab NAME BIN P N CONFIGS
  TYPES="Q4_0 Q4_K" CONFIGS="$5" P=$3 N=$4 LAYER=0 BIN=$2 MODELS=/root/m OUT=$R/$1 timeout 100 bash bench/device/decode_ab.sh > $R/ab_$1.log 2>&1
}
ab r1 /root/bin 512 128 "real: ablated:$A"
ab e1 /root/be 512 128 "empty:"
ab r2 /root/bin 512 128 "real_b:"
ab e2 /root/be 512 128 "empty_b:"
el ab512
ab r3 /root/bin 4096 32 "real:"
ab e3 /root/be 4096 32 "empty:"
ab r4 /root/bin 4096 32 "ablated:$A"
el ab4096
cat $R/r1/ab/summary.txt $R/e1/ab/summary.txt $R/r2/ab/summary.txt $R/e2/ab/summary.txt $R/r3/ab/summary.txt $R/e3/ab/summary.txt $R/r4/ab/summary.txt
tar czf $OUT/res.tgz -C $OUT r; el done
