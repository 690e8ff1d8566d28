#!/usr/bin/env bash
# Device call: unpack carried binaries (.devcarry/bin/*.xz, llama-bench.xz) to /root, collect the pieces of
# the real bundled model (.devcarry*/smol.part*, split because one call carries at most 64 MiB) in /root
# and assemble it under models/ once complete; then (env) CPU facts, the llama.cpp CPU sanity check,
# check_cuda.sh, exec_check.sh and compare.sh sections. Results: $OUT/res.tgz (small files only).
set -u
mkdir -p /root/bin /root/smol
for f in .devcarry/bin/*.xz; do [ -f "$f" ] && xz -dc "$f" > /root/bin/$(basename "$f" .xz); done
chmod +x /root/bin/* 2>/dev/null
[ -x /root/lb ] || { [ -f .devcarry/llama-bench.xz ] && xz -dc .devcarry/llama-bench.xz > /root/lb && chmod +x /root/lb; }
for d in .devcarry .devcarry-b .devcarry-c; do cp $d/smol.part* /root/smol/ 2>/dev/null; done
mkdir -p models
if [ -f /root/smol/smol.part1 ] && [ -f /root/smol/smol.part2 ] && [ -f /root/smol/smol.part3 ]; then
  cat /root/smol/smol.part1 /root/smol/smol.part2 /root/smol/smol.part3 > models/smollm2-135m-instruct-q4_1.gguf
  echo "real model: $(md5sum models/smollm2-135m-instruct-q4_1.gguf)"
fi
R=$OUT/r; mkdir -p "$R"
if [ "${FACTS:-0}" = 1 ]; then
  { lscpu; grep -o -w 'avx512[a-z_0-9]*\|amx[a-z_0-9]*\|avx_vnni' /proc/cpuinfo | sort | uniq -c; } > $R/cpu.txt 2>&1
  grep -E 'Model name|^CPU\(s\)|Thread|Core|Socket|NUMA node0' $R/cpu.txt; grep -c . $R/cpu.txt; grep -o -w 'avx512[a-z_0-9]*\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
  /root/bin/ferry synth --preset tiny-llama --type Q4_0 -o /root/tl.gguf > /dev/null 2>&1
  for rp in 1 0; do
    CUDA_VISIBLE_DEVICES= timeout 60 /root/lb -m /root/tl.gguf -ngl 0 -nopo 1 -t 4 -p 64 -n 8 -r 1 --repack $rp > $R/lb_cpu_rp$rp.txt 2>&1
    echo "llama-bench CPU --repack $rp: exit $? $(grep -E 'tg8|pp64' $R/lb_cpu_rp$rp.txt | tr -s ' ' | tr '\n' ' ')"
  done
  timeout 60 /root/lb -m /root/tl.gguf -ngl 2 -t 4 -p 64 -n 8 -r 1 > $R/lb_part.txt 2>&1; echo "llama-bench partial offload -ngl 2: exit $?"
fi
if [ "${CHECK:-0}" = 1 ]; then
  BUILD=/root/bin SKIP_BENCH=${CHECK_BENCH_SKIP:-1} BENCH_ONLY=${BENCH_ONLY:-} OUT=$R/cc timeout ${CHECK_TIMEOUT:-240} bash bench/device/check_cuda.sh > $R/check_cuda.log 2>&1
  echo "check_cuda exit $?"; grep -E 'PASSED|FAILED|exit code|agree|FAIL|PASS|GB/s|%' $R/check_cuda.log | head -${CHECK_LINES:-80}
fi
if [ "${EXEC_EQ:-0}" = 1 ]; then
  BUILD=/root/bin SKIP_BENCH=1 OUT=$R/ex timeout ${EXEC_TIMEOUT:-200} bash bench/device/exec_check.sh > $R/exec_check.log 2>&1
  echo "exec_check exit $?"; cat $R/ex/summary.txt
fi
BIN=/root/bin LLAMA_BENCH=/root/lb OUT=$R bash bench/device/compare.sh
if [ -n "${DIAG:-}" ]; then
  [ -s /root/m/llama3-8b-$DIAG.gguf ] || /root/bin/ferry synth --preset llama3-8b --type $DIAG --fast -o /root/m/llama3-8b-$DIAG.gguf > /dev/null 2>&1
  OUT=$OUT bash bench/device/diag.sh /root/m/llama3-8b-$DIAG.gguf /root/bin/ferry
fi
if [ -n "${EXTRA:-}" ]; then bash -c "$EXTRA"; fi
find $R -name '*.gguf' -o -name '*.bin' -o -name '*.samples' | xargs rm -f
tar czf $OUT/res.tgz -C $OUT r && rm -rf $R
ls -la $OUT
