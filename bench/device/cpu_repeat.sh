#!/usr/bin/env bash
# cpu_repeat.sh: CPU-only decode bandwidth on the GPU host, R runs per type (issue 3): each run is
# `ferry bench --device cpu -t T -p 64 -n N --json`, which measures the host's read bandwidth in the same
# process right before its decode; prints decode GB/s, host GB/s and their ratio per run, and the medians.
# Models: $MODELS/llama3-8b-<type>.gguf (compare.sh synthesizes them). Writes $OUT/r/cpu_repeat.txt.
# Usage: TYPES="Q4_K Q8_0" R=3 bash bench/device/cpu_repeat.sh
set -u
F=${F:-/root/bin/ferry}; MODELS=${MODELS:-/root/m}; O=${OUT:-/tmp}/r; mkdir -p "$O"
T=${T:-$(lscpu -p=core | grep -v '^#' | sort -u | wc -l)}
for t in ${TYPES:-Q4_K Q8_0}; do
  m="$MODELS/llama3-8b-$t.gguf"
  [ -s "$m" ] || { echo "no $m" | tee -a "$O/cpu_repeat.txt"; continue; }
  for i in $(seq 1 "${R:-3}"); do
    timeout 120 "$F" bench -m "$m" --device cpu -t "$T" -p 64 -n "${N:-32}" --json > "$O/cpu_rep_${t}_$i.json" 2>/dev/null
  done
  python3 - "$t" "$O"/cpu_rep_"${t}"_*.json <<'PY' | tee -a "$O/cpu_repeat.txt"
import json, statistics, sys
runs = []
for f in sys.argv[2:]:
    try:
        j = json.load(open(f)); runs.append((j["decode_tok_s"], j["decode_gb_s"], j["host_gb_s"]))
    except Exception as e:
        print(f"{sys.argv[1]} {f}: failed ({e})")
for tok, gb, host in runs:
    print(f"{sys.argv[1]} run: decode {tok:.2f} tok/s  {gb:.1f} GB/s of weights  host {host:.1f} GB/s  -> {100 * gb / host:.0f} %")
if runs:
    med = lambda k: statistics.median(r[k] for r in runs)
    ratios = [r[1] / r[2] for r in runs]
    print(f"{sys.argv[1]} median of {len(runs)}: decode {med(0):.2f} tok/s  {med(1):.1f} GB/s  host {med(2):.1f} GB/s  ratio median {100 * statistics.median(ratios):.0f} %  (median GB/s / median host {100 * med(1) / med(2):.0f} %)")
PY
done
