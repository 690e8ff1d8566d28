#!/usr/bin/env bash
# Where a full-VRAM decode step's time goes (issue 4): ferry bench --explain (per sub-layer, compute-stream
# events, no graphs) and Nsight Compute's per-kernel GPU time over a few decode steps (grouped by kernel).
# Usage: bash bench/device/diag.sh MODEL [FERRY]   (writes $OUT/r/diag_*.txt)
set -u
M=$1; F=${2:-/root/bin/ferry}; R=${OUT:-/tmp}/r; mkdir -p "$R"
timeout 120 "$F" bench -m "$M" --device cuda -p 512 -n 32 --explain > "$R/diag_explain.txt" 2>&1
grep -E 'tier|decode|prefill' "$R/diag_explain.txt" | head -12
python3 - "$R/diag_explain.txt" <<'PY'
import re, sys, collections
tot = collections.defaultdict(float); tier = None
for line in open(sys.argv[1]):
    m = re.match(r"tier (\d+):", line)
    if m: tier = int(m.group(1)); continue
    m = re.match(r"\s+(\S+)\s+(\S+)\s+([\d.]+)$", line)
    if m and tier == 1:
        kind = m.group(1).split(".")[-1]
        tot[kind] += float(m.group(3))
print("tier 1 ms per step by sub-layer kind:", {k: round(v, 3) for k, v in tot.items()}, "sum", round(sum(tot.values()), 3))
PY
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ] && [ "${NO_NCU:-0}" != 1 ]; then
  timeout ${NCU_TIMEOUT:-150} "$NCU" --graph-profiling node --metrics gpu__time_duration.sum --csv --launch-skip ${NCU_SKIP:-0} \
    --launch-count ${NCU_COUNT:-1400} "$F" bench -m "$M" --device cuda -p 8 -n 2 --no-warmup --no-membw > "$R/diag_ncu.csv" 2> "$R/diag_ncu.err"
  echo "ncu exit $?"
  python3 - "$R/diag_ncu.csv" <<'PY'
import csv, sys, collections
rows = [l for l in open(sys.argv[1]) if l.startswith('"')]
t = collections.defaultdict(float); n = collections.Counter()
for r in csv.DictReader(rows):
    if r.get("Metric Name") != "gpu__time_duration.sum": continue
    v = float(r["Metric Value"].replace(",", "")); unit = r.get("Metric Unit", "nsecond")
    v = v / 1e3 if unit.startswith("n") else (v if unit.startswith("u") else v * 1e3)
    name = r["Kernel Name"].split("(")[0].split("<")[0]
    t[name] += v; n[name] += 1
total = sum(t.values())
print(f"ncu: {sum(n.values())} kernels, {total/1e3:.3f} ms GPU time in all (prefill of 8 + 2 decode steps)")
for k, v in sorted(t.items(), key=lambda kv: -kv[1])[:25]:
    print(f"  {k[:60]:60s} {n[k]:6d} x {v/n[k]:8.2f} us = {v/1e3:8.3f} ms")
PY
fi
