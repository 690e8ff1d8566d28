#!/usr/bin/env bash
# session 17 call 1: mv_probe tma (the bulk-copy Q4_0 matvec: its result against the v3 kernel, % of copy
# per smem budget / stage, plain and PDL launches) and chain3 (the llama3-8b step's 129 matvecs as bulk-copy
# matvecs with PDL, attention stand-ins of 0 / 5 / 10 us), then chain2 (the v3 chain) as the same-call baseline.
set -u
BINS="mv_probe" . bench/device/carry_setup.sh
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $R/gpu.txt 2>&1
timeout 120 /root/bin/mv_probe tma 2>&1 | tee $R/tma.txt; el tma
timeout 150 /root/bin/mv_probe chain3 2>&1 | tee $R/chain3.txt; el chain3
timeout 100 /root/bin/mv_probe chain2 2>&1 | head -4 | tee $R/chain2.txt; el chain2
