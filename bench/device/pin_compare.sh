#!/usr/bin/env bash
# pin_compare.sh: streamed weights copied once into pinned memory (--pin copy) vs the model's mmap
# registered in place (--pin register), same model and VRAM budget: load time, the pin phase (copy:
# pinned alloc + threaded memcpy; register: cudaHostRegister), TTFT, prefill / decode tok/s and copy GB/s.
#   bash bench/device/pin_compare.sh MODEL.gguf BUDGET [BUDGET...]     (BUDGET as --vram: 4G, 6000M, ...)
# Env: BUILD (build-cuda), DEVICE (cuda; emulated for a dry run), PROFILE=FILE, OUT (./out/pin_compare),
#      P (1024), N (64), EXPLAIN=1 (an extra --explain run per mode: exact in-step copy GB/s, no prefetch).
# Copy GB/s: copy_bytes / copy_ms of the --explain run when there is one, else decode's streamed bytes
# per step / measured step time (a lower bound: the step includes compute).
set -uo pipefail
[ $# -ge 2 ] || { sed -n 2,9p "$0"; exit 2; }
MODEL=$1; shift
BUILD=${BUILD:-build-cuda}; F="$BUILD/ferry"; DEVICE=${DEVICE:-cuda}
OUT=${OUT:-$PWD/out/pin_compare}; mkdir -p "$OUT"
P=${P:-1024}; N=${N:-64}
PROF=(); [ -n "${PROFILE:-}" ] && PROF=(--profile "$PROFILE")
export XDG_CACHE_HOME="$OUT/cache"
if [ -x "$F" ] && ldd "$F" | grep -q "not found"; then  # cuBLAS from the toolkit or the pip wheel
  for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia.cublas,os; print(os.path.join(list(nvidia.cublas.__path__)[0],"lib"))' 2>/dev/null); do
    ls "$d"/libcublas.so* > /dev/null 2>&1 && { export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; break; }
  done
fi
[ -x "$F" ] || { echo "no $F"; exit 1; }
cat "$MODEL" > /dev/null  # page cache warm for both modes (else the first one pays the disk)

for B in "$@"; do
  for mode in copy register; do
    tag="${B}_${mode}"
    timeout 300 "$F" bench -m "$MODEL" --device "$DEVICE" --vram "$B" "${PROF[@]}" -p "$P" -n "$N" --pin "$mode" --json \
      > "$OUT/$tag.json" 2> "$OUT/$tag.err" || { echo "$tag: exit $? $(tail -1 "$OUT/$tag.err")"; continue; }
    rm -f "$OUT/${tag}_explain.json"
    if [ "${EXPLAIN:-0}" = 1 ]; then
      timeout 300 "$F" bench -m "$MODEL" --device "$DEVICE" --vram "$B" "${PROF[@]}" -p "$P" -n "$N" --pin "$mode" --json \
        --explain > "$OUT/${tag}_explain.json" 2> "$OUT/${tag}_explain.err" || echo "$tag explain: exit $?"
    fi
    python3 - "$OUT/$tag.json" "$OUT/${tag}_explain.json" "$tag" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); p = j.get("plan", {}); pin = p.get("pin", {})
try: ex = json.load(open(sys.argv[2]))
except (OSError, ValueError): ex = None
gbs, how = 0.0, "derived"
if ex:
    b = sum(t["copy_bytes"] for t in ex["plan"]["tiers"]); ms = sum(t.get("copy_ms", 0) for t in ex["plan"]["tiers"])
    if ms > 0: gbs, how = b / ms / 1e6, "explain"
if how == "derived":
    for t in p.get("tiers", []):
        if t["tokens"] == 1 and t["steps"] and t["measured_ms"] > 0:
            gbs = t["copy_bytes"] / t["steps"] / t["measured_ms"] / 1e6
print(f"{sys.argv[3]:>16}: mode {pin.get('mode','?'):8} load {j['load_ms']/1e3:6.2f} s  pin {pin.get('seconds',0):6.2f} s "
      f"({pin.get('threads',0)} thr, alloc/reg {pin.get('alloc_s',0):.2f} + copy {pin.get('copy_s',0):.2f} thread-s, "
      f"{pin.get('bytes',0)/2**30:.2f} GiB in {pin.get('ranges',0)})  TTFT {j['ttft_ms']:8.1f} ms  "
      f"prefill {j['prefill_tok_s']:8.1f} tok/s  decode {j['decode_tok_s']:7.2f} tok/s  copy {gbs:5.1f} GB/s ({how})"
      + (f"  NOTE: {pin['note']}" if pin.get("note") else ""))
PY
  done
done 2>&1 | tee "$OUT/summary.txt"
