#!/usr/bin/env bash
# vision_check.sh: images on the GPU (issue 31, the vision tower under the VRAM budget) on the GPU host, in
# one call (a few minutes). Run from the repo root with the CUDA build's binaries carried:
#   carry: build-cuda/ferry build-cuda/test_cuda_ops
#   command: bash bench/device/vision_check.sh
# 1. test_cuda_ops --gtest_filter='CudaVision*': CudaOps::rope_multi and attention_segments vs RefOps.
# 2. The tiny Qwen2.5-VL pair (TINY_TYPES, default "F16 Q8_0"; two images): `ferry run --image` on
#    --device cuda, and with --vram at 1 GiB and at VRAM_SMALL (default 760M, just above the minimum with the H100's measured CUDA context: the language model streams)
#    against --device cpu. Gate: the images were encoded on cuda, the embeddings within EMBD_TOL (0.02 for F16 /
#    F32 towers, 0.1 for quantized ones: the CPU multiplies them with Q8 activations, the GPU with F16, as for
#    the logits gate of check_cuda.sh; measured on an H100: F16 2.4e-3, Q8_0 6.9e-2) of
#    the CPU's in units of their std, the logits as check_cuda.sh gates them (compare_logits.py).
# 3. The qwen2.5-vl-7b shape (LAYERS text layers, default 4, Q4_K; the full 32-block tower in F16): a 720p
#    image at --vram 2G against --device cpu (the same gates), then a 1440p image at --vram 2G alone: the
#    image encoded on cuda, vram_peak_process_bytes <= 2 GiB, encode and prefill times printed.
# Writes under $OUT (./out/vision_check otherwise); prints a summary last. BUILD=<folder> picks another build;
# SKIP_REAL=1 skips part 3. DEVICE=emulated PROFILE=FILE dry-runs parts 2 and 3 on the emulated GPU (here:
# `DEVICE=emulated PROFILE=tests/data/profiles/h200-host-measured.json BUILD=build-nocuda SKIP_REAL=1`).
set -uo pipefail

BUILD=${BUILD:-build-cuda}
DEVICE=${DEVICE:-cuda}
if [ "$DEVICE" = emulated ]; then
  GPU=(--device emulated --profile "${PROFILE:?DEVICE=emulated needs PROFILE=a GPU profile}")
  WHOLE=(--vram 4G)  # the emulated device needs a budget; it stands for --device cuda here
else
  GPU=()
  WHOLE=(--device cuda)
fi
export WANT_DEVICE=$DEVICE
OUT=${OUT:-$PWD/out/vision_check}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
mkdir -p "$OUT"
start=$(date +%s)
results=()

# cuBLAS comes from the CUDA toolkit or the nvidia-cublas wheel; make sure the loader finds it.
if ldd "$BUILD/ferry" | grep -q "not found"; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
           $(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null); do
    if [ -e "$d/libcublas.so.13" ]; then
      export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      break
    fi
  done
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# ---- 1. kernels ------------------------------------------------------------------------------------
if [ -x "$BUILD/test_cuda_ops" ]; then
  timeout 240 "$BUILD/test_cuda_ops" --gtest_filter='CudaVision*' --gtest_color=no > "$OUT/test_cuda_vision.log" 2>&1
  rc=$?
  grep -E "^\[  FAILED|^\[  PASSED|Failure|nrmse" "$OUT/test_cuda_vision.log" | head -n 40
  results+=("test_cuda_ops CudaVision*: exit $rc")
fi

# PNG test patterns (tests/python/vision_images.py: lossless, so every run sees the same pixels).
png() {  # png FILE W H SEED
  python3 -c "import sys; sys.path.insert(0, '$ROOT/tests/python'); import vision_images as v
v.write_png(sys.argv[1], v.test_pattern(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))" "$@"
}

# compare NAME A B: the embeddings and logits of two `ferry run --json` results (A the CPU reference).
compare() {
  local name=$1 a=$2 b=$3 tol=${EMBD_TOL:-0.02}
  case "$name" in *F16*|*F32*|*qwen2.5-vl-7b*) ;; *) tol=${EMBD_TOL:-0.1} ;; esac
  python3 - "$name" "$a" "$b" "$tol" <<'EOF'
import json, os, sys
import numpy as np
name, a, b, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
ja, jb = json.load(open(a + ".json")), json.load(open(b + ".json"))
ea, eb = np.fromfile(a + ".embd", dtype="<f4"), np.fromfile(b + ".embd", dtype="<f4")
err = float(np.abs(ea - eb).max() / max(ea.std(), 1e-12)) if ea.size == eb.size else float("inf")
where = [i["encode_device"] for i in jb["images"]]
ok = err <= tol and all(w == os.environ["WANT_DEVICE"] for w in where)
print(f"{name:40s} embeddings {err:.2e} spreads (tol {tol}), encoded on {where}, "
      f"encode_ms {[round(i['encode_ms'], 1) for i in jb['images']]}: {'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
EOF
}

# run_pair NAME LM MM PROMPT IMAGES... -- EXTRA...: ferry run with --json / --logits-out / --image-embd-out.
run_one() {
  local base=$1 lm=$2 mm=$3 prompt=$4
  shift 4
  timeout 600 "$BUILD/ferry" run -m "$lm" --mmproj "$mm" -p "$prompt" -n 8 --temp 0 --ignore-eos --json \
    --logits-out "$base.f32" --image-embd-out "$base.embd" "$@" > "$base.json" 2> "$base.err"
}

# ---- 2. the tiny pair ------------------------------------------------------------------------------
tdir="$OUT/tiny"
mkdir -p "$tdir"
png "$tdir/a.png" 300 200 1
png "$tdir/b.png" 90 160 2
imgs=(--image "$tdir/a.png" --image "$tdir/b.png")
prompt="Compare <__media__> with <__media__> please."
for t in ${TINY_TYPES:-F16 Q8_0}; do
  lm="$tdir/vl-$t.gguf"
  mm="$tdir/vl-$t-mmproj.gguf"
  "$BUILD/ferry" synth --preset tiny-qwen2.5-vl --type "$t" -o "$lm" --mmproj-out "$mm" --mmproj-type "$t" \
    > "$tdir/synth.log" 2>&1 || { results+=("synth tiny $t: FAIL"); continue; }
  run_one "$tdir/$t.cpu" "$lm" "$mm" "$prompt" "${imgs[@]}" --device cpu -c 512 || {
    results+=("tiny $t cpu: FAIL $(grep -m1 error: "$tdir/$t.cpu.err")"); continue; }
  for cfg in "whole:${WHOLE[*]}" "vram1G:--vram 1G" "vram${VRAM_SMALL:-760M}:--vram ${VRAM_SMALL:-760M}"; do
    tag=${cfg%%:*}
    # shellcheck disable=SC2086
    if ! run_one "$tdir/$t.$tag" "$lm" "$mm" "$prompt" "${imgs[@]}" -c 512 "${GPU[@]}" ${cfg#*:}; then
      results+=("tiny $t $tag: FAIL $(grep -m1 error: "$tdir/$t.$tag.err")")
      continue
    fi
    grep -h "^note:" "$tdir/$t.$tag.err"
    r1=$(compare "tiny $t $tag" "$tdir/$t.cpu" "$tdir/$t.$tag")
    # compare_logits.py reads BASE.cpu.{json,f32} and BASE.cuda.{json,f32}.
    cp "$tdir/$t.cpu.json" "$tdir/cmp.cpu.json"; cp "$tdir/$t.cpu.f32" "$tdir/cmp.cpu.f32"
    cp "$tdir/$t.$tag.json" "$tdir/cmp.cuda.json"; cp "$tdir/$t.$tag.f32" "$tdir/cmp.cuda.f32"
    r2=$(python3 "$HERE/compare_logits.py" "$tdir/cmp" "tiny-$t-$tag")
    echo "$r1"
    echo "$r2"
    results+=("$r1" "$r2")
  done
done

# ---- 3. the qwen2.5-vl-7b shape ----------------------------------------------------------------------
if [ "${SKIP_REAL:-0}" != 1 ]; then
rdir="$OUT/real"
mkdir -p "$rdir"
lm="$rdir/vl7b.gguf"
mm="$rdir/vl7b-mmproj.gguf"
if [ ! -f "$mm" ]; then
  "$BUILD/ferry" synth --preset qwen2.5-vl-7b --type Q4_K --layers "${LAYERS:-4}" -o "$lm" --mmproj-out "$mm" \
    --mmproj-type F16 > "$rdir/synth.log" 2>&1 || results+=("synth qwen2.5-vl-7b: FAIL $(tail -n 1 "$rdir/synth.log")")
fi
png "$rdir/720p.png" 1280 720 3
png "$rdir/1440p.png" 2560 1440 4
if run_one "$rdir/720p.cpu" "$lm" "$mm" "Describe the picture." --image "$rdir/720p.png" --device cpu -c 2048 &&
   run_one "$rdir/720p.2G" "$lm" "$mm" "Describe the picture." --image "$rdir/720p.png" "${GPU[@]}" --vram 2G -c 2048; then
  r=$(compare "qwen2.5-vl-7b 720p --vram 2G" "$rdir/720p.cpu" "$rdir/720p.2G")
  echo "$r"
  results+=("$r")
else
  results+=("qwen2.5-vl-7b 720p: FAIL $(cat "$rdir"/720p.*.err | grep -m1 error:)")
fi
if run_one "$rdir/1440p.2G" "$lm" "$mm" "Describe the picture." --image "$rdir/1440p.png" "${GPU[@]}" --vram 2G -c 4608; then
  r=$(python3 - "$rdir/1440p.2G.json" <<'EOF'
import json, os, sys
j = json.load(open(sys.argv[1]))
img = j["images"][0]
peak = j.get("vram_peak_process_bytes", 0)
ok = img["encode_device"] == os.environ["WANT_DEVICE"] and 0 < peak <= 2 * 1024**3
print(f"qwen2.5-vl-7b 1440p --vram 2G: {img['tokens']} image tokens encoded on {img['encode_device']} in "
      f"{img['encode_ms']:.0f} ms, TTFT {j['ttft_ms']:.0f} ms, peak process VRAM {peak / 2**30:.2f} GiB "
      f"({j.get('vram_peak_process_source')}): {'PASS' if ok else 'FAIL'} {img['encode_note']}")
sys.exit(0 if ok else 1)
EOF
)
  echo "$r"
  results+=("$r")
else
  results+=("qwen2.5-vl-7b 1440p: FAIL $(grep -m1 error: "$rdir/1440p.2G.err")")
fi
fi

echo "== summary ($(( $(date +%s) - start )) s)" | tee "$OUT/summary.txt"
printf "%s\n" "${results[@]}" | tee -a "$OUT/summary.txt"
! grep -q "FAIL\|exit [1-9]" "$OUT/summary.txt"
