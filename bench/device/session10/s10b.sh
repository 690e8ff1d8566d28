#!/usr/bin/env bash
# session 10 call 2: FFN slices on the H200 host. llama.cpp builds in the background (for call 3) while the
# models are synthesized and the equality checks run; then a quick profile on the idle machine and the
# qwen3-8b Q4_K A/B: --ffn-slices 1 (whole FFNs) against the planner's choice, alternated.
set -u
T0=$(date +%s); el() { echo "[t=$(( $(date +%s) - T0 ))s]"; }
mkdir -p /root/bin /root/m; xz -dc .devcarry/bin/ferry10.xz > /root/bin/ferry; chmod +x /root/bin/ferry
F=/root/bin/ferry; R=$OUT/r; mkdir -p $R; export XDG_CACHE_HOME=/root/cache
JOBS=15 bash bench/device/llama_cpp_build.sh .devcarry/llama.cpp-src.tar.xz
for pt in qwen3-8b:Q4_K minitron-8b:F16; do p=${pt%%:*}; t=${pt#*:}; m=/root/m/$p-$t.gguf
  [ -s $m ] || { timeout 200 $F synth --preset $p --type $t --fast -o $m.tmp > /dev/null 2>&1 && mv $m.tmp $m; }; done; sync; el
Q=/root/m/qwen3-8b-Q4_K.gguf; MT=/root/m/minitron-8b-F16.gguf
eq() { tag=$1; shift; env "$@" HYB= BIN=/root/bin OUT=$R/$tag bash bench/device/compare.sh > /dev/null 2>&1; grep -E "\| eq" $R/$tag/compare/summary.md; el; }
eq eq_auto EQ=qwen3-8b:Q4_K EQ_BUDGETS_GB="2 4 8"
eq eq_s2 EQ=qwen3-8b:Q4_K EQ_BUDGETS_GB="2 4" FERRY_EQ_ARGS="--ffn-slices 2"
eq eq_s3 EQ=qwen3-8b:Q4_K EQ_BUDGETS_GB="4" FERRY_EQ_ARGS="--ffn-slices 3"
eq eq_mt EQ=minitron-8b:F16 EQ_BUDGETS_GB="2 8" FERRY_EQ_ARGS="--ffn-slices 2"
while [ ! -f /root/lcb/done ] && [ $(( $(date +%s) - T0 )) -lt 420 ]; do sleep 5; done
echo "llama build done=$([ -f /root/lcb/done ] && echo yes || echo no); $(tail -1 /root/lcb/build.log)"; el
timeout 60 $F profile --quick -o /root/prof.json > $R/profile.log 2>&1; cp /root/prof.json $R/
python3 -c "import json; p=json.load(open('/root/prof.json')); l=p['link']; print('profile: h2d', round(l['h2d_gbs'],1), 'busy', round(l['h2d_busy_gbs'],1), 'share', round(l['cpu_share_while_copying'],3), 'host_combined', round(l.get('host_combined_gbs',0),1))"; el
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
ab $Q 4G 4096 128
ab $Q 2G 4096 128
ab $Q 4G 1024 128
find $R -name '*.bin' -delete; tar czf $OUT/res.tgz -C $OUT r && rm -rf $R; el
