#!/usr/bin/env bash
# l2_ab.sh: A/B of the v3 decode matvec's L2 hints and unroll (issue 4) in one device call, on synthetic
# llama3-8b models in /root/m (synthesized here when missing). For each configuration in CONFIGS
# ("name:VAR=V,VAR=V" with FERRY_CUDA_MVU / FERRY_CUDA_L2AHEAD / FERRY_CUDA_L2NEXT):
#   bench_cuda_ops layer (LAYER=1)  matmuls of one layer + 1/32 of the head, tok/s bound and % of copy
#   ferry bench -m M --device cuda -p 512 -n 128 --json for each type in TYPES
# then (NCU=1) Nsight Compute metrics of the v3 kernels of two Q4_K decode steps. Summary: $OUT/l2/summary.txt.
set -uo pipefail
BIN=${BIN:-/root/bin}
MODELS=${MODELS:-/root/m}
O=${OUT:-$PWD/out}/l2
mkdir -p "$O" "$MODELS"
S="$O/summary.txt"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -e "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" && break
done
CONFIGS=${CONFIGS:-"base: mvu8:FERRY_CUDA_MVU=8 ahead1:FERRY_CUDA_L2AHEAD=1 ahead2:FERRY_CUDA_L2AHEAD=2 next16:FERRY_CUDA_L2NEXT=16 next32:FERRY_CUDA_L2NEXT=32 a2n32:FERRY_CUDA_L2AHEAD=2,FERRY_CUDA_L2NEXT=32"}
run_env() {  # "VAR=V,VAR=V" command... : runs command with those variables set
  local kv=$1; shift
  env $(echo "$kv" | tr ',' ' ') "$@"
}
for t in ${TYPES:-Q4_0 Q4_K F16}; do
  m="$MODELS/llama3-8b-$t.gguf"
  if [ ! -s "$m" ]; then
    ts=$(date +%s)
    timeout 200 "$BIN/ferry" synth --preset llama3-8b --type "$t" --fast -o "$m.tmp" > "$O/synth_$t.log" 2>&1 && mv "$m.tmp" "$m"
    echo "synth $t: $(( $(date +%s) - ts )) s" | tee -a "$S"
  fi
done
for c in $CONFIGS; do
  name=${c%%:*}; kv=${c#*:}
  if [ "${LAYER:-1}" = 1 ]; then
    echo "== $name ($kv) bench_cuda_ops layer" | tee -a "$S"
    run_env "$kv" timeout 90 "$BIN/bench_cuda_ops" layer 2>&1 | grep -E "many|copy" | grep -v "^RESULT" | tee -a "$S"
  fi
  for t in ${TYPES:-Q4_0 Q4_K F16}; do
    m="$MODELS/llama3-8b-$t.gguf"
    [ -s "$m" ] || continue
    run_env "$kv" timeout 120 "$BIN/ferry" bench -m "$m" --device cuda -p ${P:-512} -n ${N:-128} --json \
      > "$O/$t.$name.json" 2> "$O/$t.$name.err"
    python3 - "$O/$t.$name.json" "$t $name" <<'PY' | tee -a "$S"
import json, sys
try:
    j = json.load(open(sys.argv[1]))
    print("%-14s pp %8.1f  tg %7.2f tok/s  decode %6.0f GB/s" % (sys.argv[2], j["prefill_tok_s"], j["decode_tok_s"], j.get("decode_gb_s", 0)))
except Exception as e:
    print("%-14s failed (%s)" % (sys.argv[2], e))
PY
  done
done
if [ "${NCU:-0}" = 1 ]; then
  NCU_BIN=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  MET=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,lts__t_sector_hit_rate.pct,l1tex__t_sector_hit_rate.pct,launch__registers_per_thread,sm__maximum_warps_per_active_cycle_pct
  for t in ${NCU_TYPES:-Q4_K Q4_0}; do
    m="$MODELS/llama3-8b-$t.gguf"
    [ -n "$NCU_BIN" ] && [ -s "$m" ] || continue
    timeout ${NCU_TIMEOUT:-150} "$NCU_BIN" --graph-profiling node --metrics $MET --csv --kernel-name regex:"matvec_v3" \
      --launch-skip ${NCU_SKIP:-300} --launch-count ${NCU_COUNT:-8} \
      "$BIN/ferry" bench -m "$m" --device cuda -p 512 -n 4 --no-warmup --no-membw > "$O/ncu_$t.csv" 2> "$O/ncu_$t.err"
    echo "== ncu $t exit $?" | tee -a "$S"
    python3 - "$O/ncu_$t.csv" <<'PY' | tee -a "$S"
import csv, sys, collections
rows = [l for l in open(sys.argv[1]) if l.startswith('"')]
per = collections.OrderedDict()
for r in csv.DictReader(rows):
    key = (r["ID"], r["Kernel Name"][:60], r.get("Grid Size", ""))
    per.setdefault(key, {})[r["Metric Name"]] = r["Metric Value"]
for (i, k, g), m in per.items():
    print(i, k.replace("ferry::kernels::cuda::", "")[:40], g, " ".join(f"{a}={v}" for a, v in m.items()))
PY
  done
fi
