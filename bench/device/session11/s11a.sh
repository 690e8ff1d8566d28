#!/usr/bin/env bash
# session 11 call 1: mv_probe (where the Q4 matvecs lose bandwidth), test_cuda_ops, Q4_K decode A/B of
# ChunkDecQ4KLean (FERRY_CUDA_Q4K_LEAN=0 wide / 1 lean / 2 lean at 2 chunks a tile), bench_cuda_ops layer.
set -u
BINS="ferry test_cuda_ops bench_cuda_ops mv_probe" . bench/device/carry_setup.sh
R=$OUT; export XDG_CACHE_HOME=/root/cache
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv | tee $R/smi.txt
(timeout 200 /root/bin/ferry synth --preset llama3-8b --type Q4_K --fast -o /root/m/llama3-8b-Q4_K.gguf > $R/synth.log 2>&1; echo synth done >> $R/synth.log) &
SP=$!
timeout 60 /root/bin/mv_probe > $R/probe.txt 2>&1; el probe
timeout 60 /root/bin/mv_probe 4096 4096 > $R/probe_4096.txt 2>&1; el probe4096
timeout 150 /root/bin/test_cuda_ops > $R/test_cuda_ops.txt 2>&1; echo "test_cuda_ops rc $?" >> $R/test_cuda_ops.txt; el tests
wait $SP; el synth
TYPES=Q4_K CONFIGS="wide:FERRY_CUDA_Q4K_LEAN=0 lean:FERRY_CUDA_Q4K_LEAN=1 lean2:FERRY_CUDA_Q4K_LEAN=2 wide_b:FERRY_CUDA_Q4K_LEAN=0 lean_b:FERRY_CUDA_Q4K_LEAN=1 lean2_b:FERRY_CUDA_Q4K_LEAN=2" \
  LAYER=1 BIN=/root/bin MODELS=/root/m OUT=$R timeout 300 bash bench/device/decode_ab.sh > $R/ab.log 2>&1; el ab
tail -3 $R/test_cuda_ops.txt
cat $R/probe.txt $R/ab/summary.txt
cd $R && tar czf res.tgz *.txt *.log ab 2>/dev/null; ls
