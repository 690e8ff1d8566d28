#!/usr/bin/env bash
# check_cuda.sh: the CUDA backend's checks and timings on the GPU host, in one call (< 8 minutes).
# Run from the repo root with the CUDA build's binaries carried:
#   carry: build-cuda/test_cuda_ops build-cuda/bench_cuda_ops   (and build-cuda/ferry when present)
#   command: bash bench/device/check_cuda.sh
# Writes under $OUT (set on the GPU host; ./out/check_cuda otherwise): env.txt (nvidia-smi, ldd),
# test_cuda_ops.log, bench_cuda_ops.log, summary.txt; prints the summary table last.
# BUILD=<folder> picks another build folder; BENCH_ONLY=matvec|layer|crossover|gemm|attention|moe runs
# one benchmark section; SKIP_TESTS=1 / SKIP_BENCH=1 / SKIP_MODELS=1 skip a part.
# Whole-model check (needs $BUILD/ferry): tiny synthetic models of every architecture (MODEL_TYPES, default
# "Q4_0 Q4_K Q5_1 F16") plus any GGUF under models/ (REAL_MODELS=0 skips them): `ferry run --device cuda
# --logits-out` vs `--device cpu` on the same tokens; one line per model: top-1 agreement and relative
# L2 difference of the logits rows, gated on the worst row (compare_logits.py; models.log).
set -uo pipefail

BUILD=${BUILD:-build-cuda}
OUT=${OUT:-$PWD/out/check_cuda}
mkdir -p "$OUT"
start=$(date +%s)

# cuBLAS 13 comes from the CUDA toolkit or the nvidia-cublas wheel; make sure the loader finds it.
if [ -x "$BUILD/test_cuda_ops" ] && ldd "$BUILD/test_cuda_ops" | grep -q "not found"; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
           $(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null); do
    if [ -e "$d/libcublas.so.13" ]; then
      export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      break
    fi
  done
fi

{
  echo "== date: $(date -u +%FT%TZ)  host: $(hostname)  build: $BUILD"
  echo "== nvidia-smi"
  nvidia-smi 2>&1
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>&1
  echo "== LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
  for b in test_cuda_ops bench_cuda_ops ferry; do
    if [ -x "$BUILD/$b" ]; then
      echo "== ldd $BUILD/$b"
      ldd "$BUILD/$b" 2>&1
    fi
  done
} > "$OUT/env.txt" 2>&1
head -n 30 "$OUT/env.txt"
grep -A12 "== ldd" "$OUT/env.txt"

test_rc=-1
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  echo "== test_cuda_ops"
  timeout 240 "$BUILD/test_cuda_ops" --gtest_color=no > "$OUT/test_cuda_ops.log" 2>&1
  test_rc=$?
  grep -E "^\[  FAILED|^\[  PASSED|^\[  SKIPPED \] [0-9]|Failure|error|no GPU|Which is|nrmse" "$OUT/test_cuda_ops.log" | head -n 80
  echo "test_cuda_ops exit code: $test_rc"
fi

bench_rc=-1
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  echo "== bench_cuda_ops ${BENCH_ONLY:-}"
  timeout 300 "$BUILD/bench_cuda_ops" ${BENCH_ONLY:-} > "$OUT/bench_cuda_ops.log" 2>&1
  bench_rc=$?
  grep -v "^RESULT" "$OUT/bench_cuda_ops.log"
  echo "bench_cuda_ops exit code: $bench_rc"
fi

# ---- whole-model logits: GPU vs CPU ----------------------------------------------------------------
models_rc=-1
if [ "${SKIP_MODELS:-0}" != 1 ] && [ -x "$BUILD/ferry" ]; then
  echo "== whole-model logits, --device cuda vs --device cpu"
  models_rc=0
  mdir="$OUT/models"
  mkdir -p "$mdir"
  list=()
  for p in tiny-llama tiny-qwen2 tiny-qwen3 tiny-gemma3; do
    for t in ${MODEL_TYPES:-Q4_0 Q4_K Q5_1 F16}; do
      f="$mdir/$p-$t.gguf"
      if "$BUILD/ferry" synth --preset "$p" --type "$t" -o "$f" --seed 7 > "$mdir/synth.log" 2>&1; then
        list+=("$f")
      else
        echo "synth $p $t failed: $(tail -n 1 "$mdir/synth.log")"
        models_rc=1
      fi
    done
  done
  if [ "${REAL_MODELS:-1}" = 1 ]; then
    for f in models/*.gguf; do [ -e "$f" ] && list+=("$f"); done
  fi
  # ids below 512: the tiny presets have vocabularies of 512 tokens (tiny-gemma3) and more
  toks="1,17,33,250,7,99,511,3,41,300,8,15,230,77,5,301,12,64,128,9,400,2,150,44"
  for f in "${list[@]}"; do
    name=$(basename "$f" .gguf)
    ok=1
    for dev in cpu cuda; do
      if ! timeout 120 "$BUILD/ferry" run -m "$f" --tokens "$toks" -n 8 --temp 0 -c 256 --device "$dev" \
             --logits-out "$mdir/$name.$dev.f32" --json > "$mdir/$name.$dev.json" 2> "$mdir/$name.$dev.err"; then
        printf "%-36s FAIL (%s): %s\n" "$name" "$dev" "$(grep -m1 error: "$mdir/$name.$dev.err")"
        ok=0
        models_rc=1
        break
      fi
    done
    [ $ok = 1 ] || continue
    # Gate: top-1 agreement and every row's relative L2 difference (compare_logits.py says how).
    python3 "$(dirname "${BASH_SOURCE[0]}")/compare_logits.py" "$mdir/$name" "$name" || models_rc=1
  done 2>&1 | tee "$OUT/models.log"
  grep -q "FAIL" "$OUT/models.log" && models_rc=1
  echo "whole-model check exit code: $models_rc"
fi

# ---- summary -------------------------------------------------------------------------------------
{
  echo "== summary ($(( $(date +%s) - start )) s)"
  if [ -f "$OUT/test_cuda_ops.log" ]; then
    passed=$(grep -c "^\[       OK \]" "$OUT/test_cuda_ops.log")
    failed=$(grep -c "^\[  FAILED  \] .*(" "$OUT/test_cuda_ops.log")
    skipped=$(grep -c "^\[  SKIPPED \] .*(" "$OUT/test_cuda_ops.log")
    printf "%-44s %s\n" "test_cuda_ops (exit $test_rc)" "$passed passed, $failed failed, $skipped skipped"
  fi
  if [ -f "$OUT/bench_cuda_ops.log" ]; then
    awk '
      $1 == "RESULT" { v[$2] = $3 }
      END {
        copy = v["copy_d2d_rw_gbps"];
        if (copy <= 0) copy = 1e-9;
        printf "%-44s %8.0f GB/s\n", "d2d copy (read+write)", copy;
        n = split("F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K", ts, " ");
        for (i = 1; i <= n; i++) {
          k = "matvec_gbps_" ts[i] "_mean";
          if (k in v) printf "%-44s %8.0f GB/s %5.0f%% of copy   rpw2 %5.0f  rpw4 %5.0f\n", "matvec T=1 " ts[i] " (mean of 3 shapes)", v[k], 100 * v[k] / copy, v["matvec_rpw2_gbps_" ts[i] "_mean"], v["matvec_rpw4_gbps_" ts[i] "_mean"];
        }
        split("Q4_0 Q4_K F16", ls, " ");
        for (i = 1; i <= 3; i++) {
          k = "llama3_8b_decode_matmul_tok_s_" ls[i];
          if (k in v) printf "%-44s %8.0f tok/s %5.0f GB/s\n", "llama3-8b decode matmuls " ls[i], v[k], v["llama3_8b_decode_matmul_gbps_" ls[i]];
        }
        split("F16 Q4_0 Q4_K Q8_0", gs, " ");
        for (i = 1; i <= 4; i++) for (T = 512; T <= 4096; T *= 8) {
          k = "gemm_tflops_" gs[i] "_4096x14336_T" T;
          if (k in v) printf "%-44s %8.1f TFLOP/s\n", "gemm " gs[i] " 4096x14336 T=" T, v[k];
        }
        for (c = 512; c <= 32768; c *= 8) {
          k = "attn_decode_us_ctx" c;
          if (k in v) printf "%-44s %8.1f us %5.0f GB/s\n", "attention decode ctx " c, v[k], v["attn_decode_gbps_ctx" c];
        }
        for (T = 1; T <= 512; T *= 2) {
          k = "moe_experts_us_T" T;
          if (k in v) printf "%-44s %8.1f us %5.0f GB/s (Ops default %.0f us)\n", "qwen3-30b-a3b moe_experts Q4_K T=" T, v[k], v["moe_experts_gbps_T" T], v["moe_default_us_T" T];
        }
        for (T = 512; T <= 4096; T *= 8) {
          k = "attn_prefill_tflops_T" T;
          if (k in v) printf "%-44s %8.1f TFLOP/s (plain %.1f)\n", "attention prefill causal T=" T, v[k], v["attn_prefill_plain_tflops_T" T];
        }
      }' "$OUT/bench_cuda_ops.log"
    printf "%-44s %s\n" "bench_cuda_ops" "exit $bench_rc"
  fi
  if [ -f "$OUT/models.log" ]; then
    printf "%-44s %s\n" "whole-model logits cuda vs cpu (exit $models_rc)" \
      "$(grep -c ' ok  ' "$OUT/models.log") ok, $(grep -c 'FAIL' "$OUT/models.log") failed"
  fi
} | tee "$OUT/summary.txt"

[ "$test_rc" -le 0 ] && [ "$bench_rc" -le 0 ] && [ "$models_rc" -le 0 ]
