#!/usr/bin/env bash
# Device call: unpack carried binaries (.devcarry/bin/*.xz, llama-bench.xz) to /root, then the CUDA checks
# (tests + whole-model logits incl. CUDA-graph decode) and compare.sh sections given in the environment.
# Everything lands in $OUT/res.tgz (the transfer returns few files).
set -u
mkdir -p /root/bin
for f in .devcarry/bin/*.xz; do xz -dc "$f" > /root/bin/$(basename "$f" .xz); done
chmod +x /root/bin/*
[ -x /root/lb ] || { xz -dc .devcarry/llama-bench.xz > /root/lb && chmod +x /root/lb; }
[ -f .devcarry/smol.part1 ] && cp .devcarry/smol.part1 /root/
R=$OUT/r; mkdir -p "$R"
if [ "${CHECK:-1}" = 1 ]; then
  BUILD=/root/bin SKIP_BENCH=${CHECK_BENCH_SKIP:-1} OUT=$R/cc timeout ${CHECK_TIMEOUT:-240} bash bench/device/check_cuda.sh > $R/check_cuda.log 2>&1
  echo "check_cuda exit $?"; grep -E 'PASSED|FAILED|exit code|agree|FAIL|PASS' $R/check_cuda.log | head -60
fi
BIN=/root/bin LLAMA_BENCH=/root/lb OUT=$R bash bench/device/compare.sh
tar czf $OUT/res.tgz -C $OUT r && rm -rf $R
