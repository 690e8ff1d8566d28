#!/usr/bin/env bash
# session 19 call 3: what the matvec chain alone costs in each of its production forms (timing only: the small
# kernels left out with FERRY_CUDA_ABLATE, so the results are wrong). "chain": norm, rope, attention and combine
# left out, the norm fold and the glu epilogue kept (the matvecs as built); "chain_noglu": glu in the list too,
# which also turns the glu epilogue off (gate / up as one plain v3 launch, s19a's "nosmall"); "chain_plain":
# that without the norm fold (plain v3 output / down projections); "chain_nopdl": "chain" without PDL. Also the
# step as built and without attention + combine. llama3-8b Q4_0 / Q4_K after 512 tokens, two rounds.
set -u
BINS="ferry" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
synth_bg $R Q4_0 Q4_K; synth_wait $R
A=FERRY_CUDA_ABLATE=norm+rope+attn+combine
for round in 1 2; do
  ab r$round 512 128 "Q4_0 Q4_K" "base: noattn:FERRY_CUDA_ABLATE=attn+combine chain:$A chain_noglu:$A+glu chain_plain:$A+glu,FERRY_CUDA_NORM_FOLD=0 chain_nopdl:$A,FERRY_CUDA_PDL=0"
done
el done
