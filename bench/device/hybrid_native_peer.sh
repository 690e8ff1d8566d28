#!/usr/bin/env bash
# The hybrid table in one device call, with the peer built on the GPU host itself: starts bench/device/llama_cpp_build.sh
# (llama.cpp from the llama-cpp-python sdist, native CPU flags, CUDA sm_90, ~290 s on 15 jobs) in the background,
# synthesizes the models (SYNTH="preset:type ..."), runs the equality checks (EQ, EQ_BUDGETS_GB; once more at 4 GiB
# with FERRY_GEMM_STAGING_MB=16), waits for the build (BUILD_WAIT s), checks that llama.cpp's CPU repack path
# runs on this host (else LB_ARGS="--repack 0"), then compare.sh HYB for what is left of TOTAL s. A second call
# on the still-warm machine finds the build done. Inputs: .devcarry/bin/*.xz (ferry), .devcarry/llama.cpp-src.tar.xz.
# Example (two calls on one warm machine, 1K and 4K prompts at 2 / 4 / 8 GB):
#   EQ=qwen3-8b:Q4_K HYB=qwen3-8b:Q4_K bash bench/device/hybrid_native_peer.sh
#   SYNTH=minitron-8b:F16 HYB=minitron-8b:F16 SEND_LB=0 TOTAL=590 bash bench/device/hybrid_native_peer.sh
# Results: $OUT/res.tgz (r/hyb/compare/summary.md and the JSON of every run); $OUT/llama-bench.xz (SEND_LB=1).
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
mkdir -p /root/bin /root/m; for f in .devcarry/bin/*.xz; do xz -dc "$f" > /root/bin/$(basename "$f" .xz); done; chmod +x /root/bin/*
R=$OUT/r; mkdir -p $R; F=/root/bin/ferry
export XDG_CACHE_HOME=/root/cache
[ -f /root/lcb/done ] || JOBS=${JOBS:-15} bash bench/device/llama_cpp_build.sh .devcarry/llama.cpp-src.tar.xz
for pt in ${SYNTH:-"qwen3-8b:Q4_K minitron-8b:F16"}; do p=${pt%%:*}; t=${pt#*:}; m=/root/m/$p-$t.gguf
  [ -s $m ] || { timeout 200 $F synth --preset $p --type $t --fast -o $m.tmp > /dev/null 2>&1 && mv $m.tmp $m; }; done; sync
echo "synth done at $(el) s"; ls -la /root/m
if [ -n "${EQ:-}" ]; then
  HYB="" BIN=/root/bin OUT=$R/eq_auto EQ="$EQ" EQ_BUDGETS_GB="${EQ_BUDGETS_GB:-2 4}" bash bench/device/compare.sh > /dev/null 2>&1
  grep -E "PASS|FAIL|equality" $R/eq_auto/compare/summary.md
  HYB="" FERRY_GEMM_STAGING_MB=16 BIN=/root/bin OUT=$R/eq_16 EQ="$EQ" EQ_BUDGETS_GB="4" bash bench/device/compare.sh > /dev/null 2>&1
  grep -E "PASS|FAIL" $R/eq_16/compare/summary.md | sed 's/^/staging16: /'
  echo "eq done at $(el) s"
fi
while [ ! -f /root/lcb/done ] && [ $(el) -lt ${BUILD_WAIT:-450} ]; do sleep 5; done
echo "llama build done=$([ -f /root/lcb/done ] && echo yes || echo no) at $(el) s; $(tail -1 /root/lcb/build.log)"
if [ -f /root/lcb/done ]; then
  cp /root/lcb/build/bin/llama-bench /root/lb; strip /root/lb 2>/dev/null
  [ "${SEND_LB:-1}" = 1 ] && xz -T16 -3 -c /root/lb > $OUT/llama-bench.xz
  if [ -z "${LB_ARGS+x}" ]; then  # repack (llama.cpp's default) unless it crashes on this build / host
    $F synth --preset tiny-llama --type Q4_0 -o /root/tl.gguf > /dev/null 2>&1
    CUDA_VISIBLE_DEVICES= timeout 60 /root/lb -m /root/tl.gguf -ngl 0 -nopo 1 -t 4 -p 64 -n 8 -r 1 > $R/lb_cpu_check.txt 2>&1
    rc=$?; echo "llama-bench CPU repack check: exit $rc"; [ $rc = 0 ] && LB_ARGS="" || LB_ARGS="--repack 0"
  fi
  echo "LB_ARGS='$LB_ARGS'"
  rem=$(( ${TOTAL:-570} - $(el) ))
  if [ -n "${HYB:-}" ] && [ $rem -gt 60 ]; then
    EQ="" BIN=/root/bin LLAMA_BENCH=/root/lb OUT=$R/hyb TIME_LIMIT=$(( rem - 60 )) HYB="$HYB" BUDGETS_GB="${BUDGETS_GB:-2 4 8}" PROMPTS="${PROMPTS:-1024 4096}" \
      LB_ARGS="$LB_ARGS" bash bench/device/compare.sh > /dev/null 2>&1
    grep -E "^\| " $R/hyb/compare/summary.md
  fi
fi
find $R -name '*.bin' -delete
tar czf $OUT/res.tgz -C $OUT r && rm -rf $R
echo "end at $(el) s"
