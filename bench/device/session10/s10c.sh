#!/usr/bin/env bash
# session 10 call 3 (same warm machine as call 2): minitron-8b F16 A/B (--ffn-slices 1 vs the planner's
# choice), then the 4K-prompt hybrid table against llama.cpp built by call 2 (compare.sh HYB).
set -u
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s]"; }
F=/root/bin/ferry; R=$OUT/r; mkdir -p $R; export XDG_CACHE_HOME=/root/cache
[ -x $F ] || { echo "cold machine: call 2's files are gone"; exit 3; }
MT=/root/m/minitron-8b-F16.gguf
sm() { python3 - "$1" <<'PY'
import json, sys
try: j = json.load(open(sys.argv[1]))
except Exception: print("fail"); sys.exit(0)
h = j.get("hybrid") or j.get("plan") or {}
t1 = [t for t in h.get("tiers", []) if t.get("tokens") == 1 and t.get("steps")]
s = "decode %.2f ttft %.0f slices %s resident %.2fGiB peak %.2fGiB" % (j.get("decode_tok_s", 0), j.get("ttft_ms", 0), h.get("ffn_slices"), h.get("weights_resident", 0) / 2**30, h.get("arena_peak", 0) / 2**30)
if t1: s += " t1 %s %.1f/%.1fms (W-R)/H %.0f%% serial %.0f%%" % (t1[0]["strategy"][:3], t1[0]["predicted_ms"], t1[0]["measured_ms"], 100 * h["limit_h_ms"] / t1[0]["measured_ms"], 100 * h.get("limit_serial_ms", 0) / t1[0]["measured_ms"])
s += " cpu_vs_profile %s" % h.get("cpu_vs_profile")
print(s)
PY
}
ab() { m=$1; v=$2; p=$3; n=$4; shift 4
  for i in 1 2; do for sl in 1 0; do a=""; [ $sl = 1 ] && a="--ffn-slices 1"
    tag=ab_$(basename $m .gguf)_${v}_p${p}_s${sl}_$i
    timeout 150 $F bench -m $m --device cuda --vram $v -p $p -n $n --profile /root/prof.json $a --json > $R/$tag.json 2> $R/$tag.err
    echo "$tag exit $? $(sm $R/$tag.json)"; el
  done; done; }
ab $MT 8G 4096 64
ab $MT 2G 4096 64
if [ -f /root/lcb/done ]; then
  cp /root/lcb/build/bin/llama-bench /root/lb 2>/dev/null; strip /root/lb 2>/dev/null
  rem=$(( ${TOTAL:-585} - $(( $(date +%s) - T0 )) ))
  EQ= BIN=/root/bin LLAMA_BENCH=/root/lb OUT=$R/hyb TIME_LIMIT=$(( rem - 70 )) HYB="${HYB:-qwen3-8b:Q4_K minitron-8b:F16}" \
    BUDGETS_GB="${BUDGETS_GB:-2 4 8}" PROMPTS="${PROMPTS:-4096}" FERRY_HYB_ARGS="--profile /root/prof.json --ffn-slices 1" LB_ARGS="" \
    bash bench/device/compare.sh > /dev/null 2>&1
  grep -E "^\| |time limit" $R/hyb/compare/summary.md
else echo "no llama.cpp build"; fi
find $R -name '*.bin' -delete; tar czf $OUT/res.tgz -C $OUT r && rm -rf $R; el
