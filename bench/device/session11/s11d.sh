#!/usr/bin/env bash
# session 11 call 4: the 1-token v3 matvec of Q4_0 and Q4_K at 5 or 6 blocks per SM (FERRY_CUDA_V3MB) against
# 4: mv_probe, decode A/B alternated, bench_cuda_ops layer per configuration.
set -u
BINS="ferry bench_cuda_ops mv_probe" . bench/device/carry_setup.sh
R=$OUT; export XDG_CACHE_HOME=/root/cache
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
(for t in Q4_0 Q4_K; do [ -s /root/m/llama3-8b-$t.gguf ] || timeout 200 /root/bin/ferry synth --preset llama3-8b --type $t --fast -o /root/m/llama3-8b-$t.gguf > $R/synth_$t.log 2>&1; done) &
SP=$!
timeout 60 /root/bin/mv_probe > $R/probe.txt 2>&1; el probe
wait $SP; sync; sleep 3; el synth
TYPES="Q4_0 Q4_K" CONFIGS="mb4: mb5:FERRY_CUDA_V3MB=5 mb6:FERRY_CUDA_V3MB=6 mb4_b: mb5_b:FERRY_CUDA_V3MB=5 mb6_b:FERRY_CUDA_V3MB=6" \
  LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R timeout 300 bash bench/device/decode_ab.sh > $R/ab.log 2>&1; el ab
for c in 4 5 6; do echo "== layer MB $c"; FERRY_CUDA_V3MB=$c timeout 60 /root/bin/bench_cuda_ops layer 2>&1 | grep -E "many" | grep -E "Q4_0|Q4_K"; done | tee $R/layer.txt; el layer
cat $R/ab/summary.txt
grep -E "lean U1|full U2|copy" $R/probe.txt
cd $R && tar czf res.tgz *.txt ab 2>/dev/null
