#!/usr/bin/env bash
# session 19 call 1: the landed build (session 18's HEAD) on a fresh machine: every CUDA test and the
# whole-model GPU-vs-CPU check; the llama.cpp peer built in the background from the carried
# llama_cpp_python-0.3.36 source and Q4_0 / Q4_K / F16 synthesized meanwhile, for call 2's table (s19b.sh);
# while they run, where a Q4_0 step's time goes now (FERRY_CUDA_ABLATE, timing only: the small kernels left
# out of the decode graph) after 512 and 4096 tokens.
set -u
BINS="ferry test_cuda_ops bench_cuda_ops" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader
JOBS=12 bash bench/device/llama_cpp_build.sh
synth_bg $R Q4_0 Q4_K F16
cuda_checks $R
for i in $(seq 1 60); do [ -s /root/m/llama3-8b-Q4_0.gguf ] && break; sleep 3; done; el "Q4_0 ready"
ab p512 512 128 "Q4_0" "base: noattn:FERRY_CUDA_ABLATE=attn+combine nosmall:FERRY_CUDA_ABLATE=norm+rope+attn+combine+glu base2:"
ab p4096 4096 32 "Q4_0" "base: noattn:FERRY_CUDA_ABLATE=attn+combine nosmall:FERRY_CUDA_ABLATE=norm+rope+attn+combine+glu"
synth_wait $R; ls -la /root/m
for i in $(seq 1 100); do [ -f /root/lcb/done ] && break; sleep 3; done
el "llama.cpp done: $([ -f /root/lcb/done ] && echo yes || echo no)"; tail -2 /root/lcb/build.log
