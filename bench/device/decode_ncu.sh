#!/usr/bin/env bash
# decode_ncu.sh: GPU time per kernel of full-VRAM decode steps at a realistic context (issue 4), from
# Nsight Compute: `ferry bench -p 512 -n 2` with only the decode-path kernels profiled (graph nodes
# too); every kernel after the prefill's last attention belongs to the prefill's tail + head or to the
# two decode steps, summed per kernel name and divided by 2.
# Usage: [NL=attention calls of the prefill = layers x chunks of -b 1024, default 32] [P=prompt, default 512] bash bench/device/decode_ncu.sh MODEL [FERRY]
# (writes $OUT/r/ncu_<model>.csv / .txt)
set -u
M=$1; F=${2:-/root/bin/ferry}; R=${OUT:-/tmp}/r; mkdir -p "$R"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "no ncu"; exit 0; }
n=$(basename "$M" .gguf)
timeout ${NCU_TIMEOUT:-200} "$NCU" --clock-control none --cache-control none --graph-profiling node --metrics gpu__time_duration.sum --csv \
  --kernel-name regex:"matvec|attn|rms_norm|rope|glu|quantize|add_kernel|kv_store|gather|argmax|scale_kernel" \
  "$F" bench -m "$M" --device cuda -p ${P:-512} -n 2 --no-warmup --no-membw > "$R/ncu_$n.csv" 2> "$R/ncu_$n.err"
echo "ncu exit $?"
python3 - "$R/ncu_$n.csv" "${NL:-32}" <<'PY' | tee "$R/ncu_$n.txt"
import csv, sys, collections
rows = [l for l in open(sys.argv[1]) if l.startswith('"')]
ks = []
for r in csv.DictReader(rows):
    if r.get("Metric Name") != "gpu__time_duration.sum": continue
    v = float(r["Metric Value"].replace(",", "")); unit = r.get("Metric Unit", "nsecond")
    v = v / 1e3 if unit.startswith("n") else (v if unit.startswith("u") else v * 1e3)
    ks.append((r["Kernel Name"].split("(")[0].split("<")[0].replace("ferry::kernels::cuda::", ""), v))
att = [i for i, (k, _) in enumerate(ks) if "attn" in k and "combine" not in k]
nl = int(sys.argv[2])
start = att[nl - 1] + 1 if len(att) > nl else 0
t = collections.defaultdict(float); n = collections.Counter()
for k, v in ks[start:]:
    t[k] += v; n[k] += 1
total = sum(t.values())
print(f"{len(ks)} kernels profiled; after the prefill's attention: {sum(n.values())} kernels, {total/2e3:.3f} ms GPU time per decode step (~, 2 steps + prefill tail)")
for k, v in sorted(t.items(), key=lambda kv: -kv[1]):
    print(f"  {k[:58]:58s} {n[k]/2:6.0f}/step x {v/n[k]:8.2f} us = {v/2e3:7.3f} ms/step")
PY
