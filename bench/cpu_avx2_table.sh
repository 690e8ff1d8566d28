#!/usr/bin/env bash
# The CPU table of issue 33, end to end: ferry's CPU kernels at one dispatch level (--cpu-isa, default
# avx2) against llama.cpp's llama-bench on the same GGUF files, same threads; prefill of 128 and 512
# tokens and decode of 32, per model shape and weight type. Runs alternate (ferry, llama.cpp, ferry, ...)
# R times per figure and the table gives the medians, their ratio, and decode's weight GB/s against the
# host's streaming read bandwidth (measured by `ferry bench` at the same thread count).
#
# Usage: bench/cpu_avx2_table.sh [OUT_DIR]   (prints the markdown table; raw JSON per run in OUT_DIR,
#        default build-bench/cpu_avx2_<UTC time>)
# Env:
#   FERRY        ferry binary (default build/ferry)
#   LLAMA_BENCH  llama-bench binary; when it is not executable and LLAMA_SRC is set, llama.cpp is built
#                from LLAMA_SRC into LLAMA_BUILD with LLAMA_CMAKE_FLAGS (default: the AVX2 level, matching
#                --cpu-isa avx2: -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
#                -DGGML_BMI2=ON; add -DGGML_AVX_VNNI=ON for avx2-vnni, or use -DGGML_NATIVE=ON for a native
#                comparison with the automatic level)
#   LLAMA_SRC    llama.cpp source tree, e.g. the vendor/llama.cpp of the llama-cpp-python source package
#   ISA          ferry --cpu-isa level (default avx2; auto for the automatic one)
#   T            threads for both (default 2)          R  alternating repetitions per figure (default 3)
#   MODELS_DIR   where the synthetic models are, written with `ferry synth --fast` when missing
#                (default build-bench/models; qwen3-4b in full, llama3-8b with LAYERS layers, default 8)
#   SHAPES       default "qwen3-4b llama3-8b"      TYPES  default "Q4_0 Q4_K Q5_K Q6_K Q8_0 F16"
#   PP           prompt sizes (default "128 512")   TG  decode tokens (default 32)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/build-bench/cpu_avx2_$(date -u +%Y%m%dT%H%M%SZ)}
FERRY=${FERRY:-$root/build/ferry}
LLAMA_BUILD=${LLAMA_BUILD:-$root/.llama-build/avx2}
LLAMA_BENCH=${LLAMA_BENCH:-$LLAMA_BUILD/bin/llama-bench}
LLAMA_CMAKE_FLAGS=${LLAMA_CMAKE_FLAGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON}
ISA=${ISA:-avx2}
T=${T:-2}
R=${R:-3}
MODELS_DIR=${MODELS_DIR:-$root/build-bench/models}
LAYERS=${LAYERS:-8}
SHAPES=${SHAPES:-qwen3-4b llama3-8b}
TYPES=${TYPES:-Q4_0 Q4_K Q5_K Q6_K Q8_0 F16}
PP=${PP:-128 512}
TG=${TG:-32}

die() { echo "error: $*" >&2; exit 1; }
[[ -x $FERRY ]] || die "no ferry binary at $FERRY (set FERRY)"
if [[ ! -x $LLAMA_BENCH ]]; then
  [[ -n ${LLAMA_SRC:-} ]] || die "no llama-bench at $LLAMA_BENCH (set LLAMA_BENCH, or LLAMA_SRC to build it)"
  # shellcheck disable=SC2086  # the flags are a list
  cmake -S "$LLAMA_SRC" -B "$LLAMA_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF $LLAMA_CMAKE_FLAGS >&2
  ninja -C "$LLAMA_BUILD" llama-bench >&2
  LLAMA_BENCH=$LLAMA_BUILD/bin/llama-bench
fi
mkdir -p "$out" "$MODELS_DIR"

model_path() {  # shape type -> file (synthesized when missing)
  local shape=$1 type=$2 f extra=()
  if [[ $shape == qwen3-4b ]]; then
    f=$MODELS_DIR/$shape-$type.gguf
  else
    f=$MODELS_DIR/$shape-L$LAYERS-$type.gguf
    extra=(--layers "$LAYERS")
  fi
  if [[ ! -f $f ]]; then
    echo "synth $f" >&2
    "$FERRY" synth --preset "$shape" --fast --type "$type" "${extra[@]}" -o "$f" >&2
  fi
  echo "$f"
}

# The host's read bandwidth at T threads, once.
"$FERRY" bench -m "$(model_path "${SHAPES%% *}" "${TYPES%% *}")" -t "$T" -p 0 -n 1 --no-warmup --json \
  --cpu-isa "$ISA" > "$out/host.json"

for shape in $SHAPES; do
  for type in $TYPES; do
    m=$(model_path "$shape" "$type")
    tag=$shape-$type
    for rep in $(seq 1 "$R"); do
      for p in $PP; do
        echo "$tag pp$p rep $rep" >&2
        "$FERRY" bench -m "$m" -t "$T" -p "$p" -n 0 --no-membw --json --cpu-isa "$ISA" > "$out/$tag.ferry.pp$p.$rep.json"
        "$LLAMA_BENCH" -m "$m" -t "$T" -p "$p" -n 0 -r 1 -o json > "$out/$tag.llama.pp$p.$rep.json" 2>/dev/null
      done
      echo "$tag tg$TG rep $rep" >&2
      "$FERRY" bench -m "$m" -t "$T" -p 0 -n "$TG" --no-membw --json --cpu-isa "$ISA" > "$out/$tag.ferry.tg$TG.$rep.json"
      "$LLAMA_BENCH" -m "$m" -t "$T" -p 0 -n "$TG" -r 1 -o json > "$out/$tag.llama.tg$TG.$rep.json" 2>/dev/null
    done
  done
done

python3 - "$out" "$SHAPES" "$TYPES" "$PP" "$TG" "$ISA" "$T" "$R" <<'EOF'
import glob, json, os, statistics, sys
out, shapes, types, pps, tg, isa, threads, reps = sys.argv[1:]
host = json.load(open(os.path.join(out, "host.json")))
host_gbs = host["host_gb_s"]

def med(tag, who, test, key):
    vals = []
    for f in sorted(glob.glob(os.path.join(out, f"{tag}.{who}.{test}.*.json"))):
        j = json.load(open(f))
        if who == "ferry":
            vals.append(j[key])
        else:  # llama-bench: one entry per test
            vals.append(j[0]["avg_ts"])
    return statistics.median(vals) if vals else float("nan")

tests = [f"pp{p}" for p in pps.split()] + [f"tg{tg}"]
print(f"ferry --cpu-isa {isa} vs llama-bench, {threads} threads, median of {reps} alternating runs; "
      f"host read bandwidth {host_gbs:.1f} GB/s ({host['cpu']})\n")
head = "| model | type | " + " | ".join(f"{t} ferry | llama.cpp | ratio" for t in tests) + " | decode GB/s | of host |"
print(head)
print("|" + "---|" * (head.count("|") - 1))
for shape in shapes.split():
    for type_ in types.split():
        tag = f"{shape}-{type_}"
        cells = []
        for t in tests:
            key = "decode_tok_s" if t.startswith("tg") else "prefill_tok_s"
            f, l = med(tag, "ferry", t, key), med(tag, "llama", t, key)
            cells.append(f"{f:.2f} | {l:.2f} | {f / l:.2f}x")
        wb = [json.load(open(p))["weight_bytes_per_token"] for p in glob.glob(os.path.join(out, f"{tag}.ferry.tg{tg}.*.json"))]
        gbs = med(tag, "ferry", f"tg{tg}", "decode_tok_s") * (wb[0] if wb else 0) / 1e9
        print(f"| {shape} | {type_} | " + " | ".join(cells) + f" | {gbs:.2f} | {100 * gbs / host_gbs:.0f}% |")
EOF
