#!/usr/bin/env bash
# session 16 call 5: the session's last build (q4k_pair_int; x-ahead reverted): test_cuda_ops and the
# whole-model GPU-vs-CPU check; starts the llama.cpp build (background) and synthesizes Q4_0, Q4_K and F16
# for call 6's table (s16f.sh), and waits for both.
set -u
BINS="ferry test_cuda_ops mv_probe" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
JOBS=14 bash bench/device/llama_cpp_build.sh
synth_bg $R Q4_0 Q4_K F16
cuda_checks $R
synth_wait $R; ls -la /root/m
for i in $(seq 1 120); do [ -f /root/lcb/done ] && break; sleep 3; done
el "llama.cpp done: $([ -f /root/lcb/done ] && echo yes || echo no)"; tail -2 /root/lcb/build.log
