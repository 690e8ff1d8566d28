#!/usr/bin/env bash
# session 19 call 2 (right after call 1, on the same warm machine): issue 4's whole table with the landed
# build. llama.cpp built in call 1 (this waits for it), the models call 1 synthesized; the device-to-device
# copy rate (bench_cuda_ops, read + write) and compare.sh FULL for Q4_0, Q4_K and F16 at 512 and 4096 tokens.
set -u
BINS="ferry bench_cuda_ops" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
timeout 60 /root/bin/bench_cuda_ops attention > $R/bco.txt 2>&1; grep -iE "read\+write" $R/bco.txt | head -2
full_table $R "Q4_0 Q4_K F16" "512 4096" 0,4096
