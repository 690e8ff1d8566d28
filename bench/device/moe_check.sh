#!/usr/bin/env bash
# moe_check.sh: mixture-of-experts models on the GPU host (issue 29), in one call (< 10 minutes).
#   1. test_cuda_ops --gtest_filter='CudaMoe*:CudaMxfp4*:CudaSinks*:CudaSwigluOai*:CudaOps.AddScaleGlu:CudaOps.Rope'
#      (the device router, grouped expert matvec, combine; gpt-oss's MXFP4, sinks, clamped SwiGLU, expert
#      biases and YaRN);
#   2. equality: tiny-qwen3moe (Q8_0), tiny-mixtral (Q4_K) and tiny-gpt-oss (Q8_0, MXFP4 experts) with
#      `ferry run --logits-out` on --device cuda
#      (whole model) and under --vram at the minimum and at 1G, against --device cpu (compare_logits.py);
#   3. figures: each of MODELS (preset:type, default "qwen3-30b-a3b:Q4_K"; gpt-oss-20b:Q8_0 gives MXFP4 experts),
#      synthesized with --fast and LAYERS layers (default all), with `ferry bench --vram` at
#      BUDGETS_GB (default "2 4 8"), PROMPTS (default 1024) tokens and GEN (64) generated, nvidia-smi peak; with
#      LLAMA_BENCH=<llama-bench built for this host> the same file through llama.cpp at the same total memory:
#      `-fitt (free - B)` (llama.cpp fits itself, experts first to the CPU) and `-ngl 99 -ot exps=CPU`.
# Run from the repo root; BIN=<folder with ferry, test_cuda_ops> (default build-cuda). Results: $OUT/summary.md
# and small logs (model files stay in $WORK, default /root/moe). Dry run without a GPU: GPU_ARGS="--device
# emulated --profile tests/data/profiles/h200-host-measured.json" WHOLE="--vram 4G" BIN=build-nocuda.
set -uo pipefail
BIN=${BIN:-build-cuda}; F=$BIN/ferry
OUT=${OUT:-$PWD/out/moe_check}; WORK=${WORK:-/root/moe}
mkdir -p "$OUT" "$WORK"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
start=$(date +%s); el() { echo $(( $(date +%s) - start )); }
S="$OUT/summary.md"; : > "$S"
log() { echo "$*" | tee -a "$S"; }
if ldd "$F" | grep -q "not found"; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    ls "$d"/libcublas.so* > /dev/null 2>&1 && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" && break; done
fi
export XDG_CACHE_HOME="$WORK/cache"
{ nvidia-smi -L; lscpu | grep -E "Model name|^CPU\(s\)|Flags" | cut -c1-300; } > "$OUT/env.txt" 2>&1
log "# moe_check $(date -u +%FT%TZ) $(nvidia-smi -L | head -1)"

if [ "${SKIP_TESTS:-0}" != 1 ] && [ -x "$BIN/test_cuda_ops" ]; then
  timeout 180 "$BIN/test_cuda_ops" --gtest_color=no \
    --gtest_filter='CudaMoe*:CudaMxfp4*:CudaSinks*:CudaSwigluOai*:CudaOps.AddScaleGlu:CudaOps.Rope' \
    > "$OUT/test_cuda_moe.log" 2>&1
  log "test_cuda_ops CudaMoe* + gpt-oss kernels: exit $? — $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$OUT/test_cuda_moe.log" | tr '\n' ' ') (at $(el) s)"
  grep -E "^\[  FAILED  \] Cuda" "$OUT/test_cuda_moe.log" | head -20 | tee -a "$S"
fi

if [ "${SKIP_EQ:-0}" != 1 ]; then
  toks="1,17,33,250,7,99,511,3,41,300,8,15,230,77,5,301,12,64,128,9,400,2,150,44"
  for pt in tiny-qwen3moe:Q8_0 tiny-mixtral:Q4_K tiny-gpt-oss:Q8_0; do
    p=${pt%%:*}; t=${pt#*:}; name=$p-$t; m="$WORK/$name.gguf"; base="$OUT/eq"; mkdir -p "$base"
    "$F" synth --preset "$p" --type "$t" -o "$m" --seed 7 > /dev/null 2>&1 || { log "synth $name: FAIL"; continue; }
    run() {  # tag args...
      local tag=$1; shift
      timeout 120 "$F" run -m "$m" --tokens "$toks" -n 8 --temp 0 -c 256 "$@" --logits-out "$base/$name.$tag.f32" \
        --json > "$base/$name.$tag.json" 2> "$base/$name.$tag.err"
    }
    run cpu --device cpu || { log "eq $name cpu: FAIL $(grep -m1 error: "$base/$name.cpu.err")"; continue; }
    run min --vram 1K ${GPU_ARGS:-}
    min=$(python3 -c "import re,sys; m=re.search(r'needs at least ([0-9.]+) (KiB|MiB|GiB)', open(sys.argv[1]).read()); print(str(int(float(m.group(1)) + 2)) + {'KiB':'K','MiB':'M','GiB':'G'}[m.group(2)] if m else '')" "$base/$name.min.err")
    for cfg in "whole:${WHOLE:---device cuda}" "vram-min:--vram ${min:-900M}" "vram1G:--vram 1G" "stream:--vram ${min:-900M} --strategy gpu-stream"; do
      tag=${cfg%%:*}
      # shellcheck disable=SC2086
      if ! run "$tag" ${cfg#*:} ${GPU_ARGS:-}; then log "eq $name $tag: FAIL $(grep -m1 error: "$base/$name.$tag.err")"; continue; fi
      cp "$base/$name.$tag.f32" "$base/$name-$tag.cuda.f32"; cp "$base/$name.$tag.json" "$base/$name-$tag.cuda.json"
      cp "$base/$name.cpu.f32" "$base/$name-$tag.cpu.f32"; cp "$base/$name.cpu.json" "$base/$name-$tag.cpu.json"
      log "eq $(python3 "$HERE/compare_logits.py" "$base/$name-$tag" "$name-$tag" 2>&1 | tail -1)"
      rm -f "$base/$name-$tag".*.f32
    done
    rm -f "$base"/*.f32
  done
  log "(equality done at $(el) s)"
fi

if [ "${SKIP_BENCH:-0}" != 1 ]; then
  [ -z "${GPU_ARGS:-}" ] && { timeout 120 "$F" profile --quick > "$OUT/profile.txt" 2>&1; log "quick profile: exit $? at $(el) s"; }
  BASE_MIB=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
  peak_run() {  # peakfile cmd...
    local pf=$1; shift
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 50 > "$pf.samples" 2>/dev/null &
    local mon=$!
    "$@"; local rc=$?
    kill $mon 2>/dev/null; wait $mon 2>/dev/null
    echo $(( $(sort -n "$pf.samples" | tail -1) - ${BASE_MIB:-0} )) > "$pf" 2>/dev/null; rm -f "$pf.samples"
    return $rc
  }
  fr() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print('pp %.1f tok/s, tg %.2f tok/s, TTFT %.0f ms, proc_peak %.2f GiB' % (j.get('prefill_tok_s',0), j.get('decode_tok_s',0), j.get('ttft_ms',0), (j.get('vram_peak_process_bytes') or 0)/2**30))" "$1" 2>/dev/null || echo "no result: $(grep -m1 error: "${1%.json}.err")"; }
  lb() { python3 -c "
import json,sys
r=json.load(open(sys.argv[1])); pp=[x['avg_ts'] for x in r if x['n_prompt']>0]; tg=[x['avg_ts'] for x in r if x['n_gen']>0]
print('pp %.1f tok/s, tg %.2f tok/s' % (pp[0] if pp else 0, tg[0] if tg else 0))" "$1" 2>/dev/null || echo "no result: $(tail -c 300 "${1%.json}.err" | tr '\n' ' ')"; }
  for pt in ${MODELS:-qwen3-30b-a3b:Q4_K}; do
  preset=${pt%%:*}; type=${pt#*:}; m="$WORK/$preset-$type-${LAYERS:-all}.gguf"
  # sync: the file's dirty pages go to disk now, not while the quick profile measures the CPU
  [ -s "$m" ] || { timeout 300 "$F" synth --preset "$preset" --type "$type" --fast ${LAYERS:+--layers $LAYERS} -o "$m" > /dev/null 2>&1; sync; }
  log "synth $preset $type ($(du -h "$m" | cut -f1)) at $(el) s"
  log "| run | budget | prompt | result | smi peak MiB |"
  log "|---|---|---|---|---|"
  for np in ${PROMPTS:-1024}; do
    for gb in ${BUDGETS_GB:-2 4 8}; do
      tag="$preset-${gb}G-p$np"
      peak_run "$OUT/ferry_$tag.peak" timeout 240 "$F" bench -m "$m" --vram "${gb}G" -p "$np" -n "${GEN:-64}" --json \
        ${GPU_ARGS:-} ${FERRY_ARGS:-} > "$OUT/ferry_$tag.json" 2> "$OUT/ferry_$tag.err"
      log "| ferry | ${gb}G | $np | $(fr "$OUT/ferry_$tag.json") | $(cat "$OUT/ferry_$tag.peak") |"
      grep -E "^(plan|predicted|note)" "$OUT/ferry_$tag.err" | head -5 >> "$OUT/ferry_notes.txt"
      if [ -n "${LLAMA_BENCH:-}" ]; then
        free=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1)
        margin=$(( free - gb * 1024 ))
        peak_run "$OUT/lfit_$tag.peak" timeout 240 "$LLAMA_BENCH" -m "$m" -fitt "$margin" -fa 1 -p "$np" -n "${GEN:-64}" -r 1 -o json \
          > "$OUT/lfit_$tag.json" 2> "$OUT/lfit_$tag.err"
        log "| llama.cpp -fitt $margin | ${gb}G | $np | $(lb "$OUT/lfit_$tag.json") | $(cat "$OUT/lfit_$tag.peak") |"
        if [ "$gb" = "${OT_GB:-2}" ]; then
          peak_run "$OUT/lot_$tag.peak" timeout 240 "$LLAMA_BENCH" -m "$m" -ngl 99 -ot "exps=CPU" -fa 1 -p "$np" -n "${GEN:-64}" -r 1 -o json \
            > "$OUT/lot_$tag.json" 2> "$OUT/lot_$tag.err"
          log "| llama.cpp -ngl 99 -ot exps=CPU | (any) | $np | $(lb "$OUT/lot_$tag.json") | $(cat "$OUT/lot_$tag.peak") |"
        fi
      fi
      log "(at $(el) s)"
    done
  done
  done
fi
log "done in $(el) s"
