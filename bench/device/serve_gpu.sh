#!/usr/bin/env bash
# Serving throughput on the GPU host (issue 30): `ferry serve` against llama.cpp's `llama-server` at the same
# total VRAM, in the same call on the same machine. Per model of MODELS:
#   ferry   ferry-serve -m M --vram B --parallel SLOTS -c CELLS --ctx-per-request PER_REQ
#   llama   llama-server -m M -np SLOTS -c CELLS --kv-unified -fitt (free MiB - B) --metrics LLAMA_ARGS
#           (llama.cpp's own fit to the budget: it picks the layers it offloads)
# Both hold CELLS = SLOTS x PER_REQ KV cells in one pool and run at most SLOTS requests at once (more wait
# in the server's queue: llama-server fails every running request when a unified KV cache overflows, so
# SLOTS is what the cells hold). bench/serve_throughput.py then drives each server at LEVELS parallel
# clients (PROMPT-token prompts of token ids, GEN tokens generated, ignore_eos). nvidia-smi samples the
# GPU's memory every 50 ms while a server runs: its load and peak are reported above the idle GPU.
# If ferry-serve cannot start (e.g. the KV cache does not fit the budget), it is tried once with half the
# slots, and llama-server gets the same.
#
# On the GPU host, from the repository root (a device-tool call, carrying .devcarry with bin/ferry.xz,
# bin/ferry-serve.xz, lib/*.xz from bench/device/serve_carry.sh, and llama.cpp-src.tar.xz):
#   PREP=1 bash bench/device/serve_gpu.sh        # fresh machine: builds llama-server, synthesizes the
#                                                # models, measures ferry's profile; ~8 min, no figures
#   MODELS=qwen3-8b:Q4_K:4:16 bash bench/device/serve_gpu.sh        # one model per call (~9 min)
#   MODELS=qwen3-30b-a3b:Q4_K:8:32 bash bench/device/serve_gpu.sh
# Here, without a GPU (a dry run of the whole flow on the CPU; LLAMA_SERVER optional):
#   DEVICE=cpu BIN=build-nocuda MODELS_DIR=/tmp/m MODELS=tiny-qwen3:Q4_K:0:4 PROMPT=256 GEN=32 \
#     OUT=/tmp/serve_out bash bench/device/serve_gpu.sh
# Env:
#   MODELS    "preset:type:GB:SLOTS ..." (default "qwen3-8b:Q4_K:4:16 qwen3-30b-a3b:Q4_K:8:32"); models are
#             `ferry synth --preset P --type T --fast` files in MODELS_DIR (/root/m), made when missing
#   LEVELS    parallel clients (1,4,16,64)   PROMPT (1024)   GEN (128)   MIN_REQ (8: requests per level are
#             max(2 x clients, MIN_REQ))   PER_REQ (PROMPT + GEN + 32 cells per request)
#   LEVEL_S   longest a level may take (60 s): at its deadline the client stops and cuts open streams
#   TOTAL     seconds this script may take (570); each server side gets an equal share of what is left,
#             and its levels' deadlines shrink to fit it
#   SIDES     "ferry llama"   FERRY_ARGS ("")   LLAMA_ARGS ("-fa on --cache-ram 0": flash attention, no host
#             copy of finished prompts, which no request here could reuse)
#   DEVICE    cuda (default) or cpu (dry run: ferry-serve without --vram, no nvidia-smi; llama-server with
#             -ngl 0 when LLAMA_SERVER exists)
#   BIN (/root/bin; carry_setup.sh unpacks .devcarry/bin there on cuda), LLAMA_SERVER
#   (/root/lcb/build/bin/llama-server), CARRY (.devcarry: its lib/*.xz go to LIB_DIR, /root/lib/serve; on
#   cpu /tmp/serve_lib), GPU (0), JOBS (14, the peer's build)
# Results: $OUT/summary.md and $OUT/res.tgz (per model: both servers' logs and command lines, client JSON /
# tables, /metrics, memory samples).
set -u
DEVICE=${DEVICE:-cuda}
if [ "$DEVICE" = cuda ]; then
  BINS="ferry ferry-serve" . bench/device/carry_setup.sh   # /root/bin, cuBLAS on the path, el
else
  T0=$(date +%s)
  el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
fi
BIN=${BIN:-/root/bin}
MODELS=${MODELS:-qwen3-8b:Q4_K:4:16 qwen3-30b-a3b:Q4_K:8:32}
MODELS_DIR=${MODELS_DIR:-/root/m}
LEVELS=${LEVELS:-1,4,16,64}
PROMPT=${PROMPT:-1024}
GEN=${GEN:-128}
MIN_REQ=${MIN_REQ:-8}
PER_REQ=${PER_REQ:-$(( PROMPT + GEN + 32 ))}
LEVEL_S=${LEVEL_S:-60}
TOTAL=${TOTAL:-570}
SIDES=${SIDES:-ferry llama}
FERRY_ARGS=${FERRY_ARGS:-}
LLAMA_ARGS=${LLAMA_ARGS:--fa on --cache-ram 0}
LLAMA_SERVER=${LLAMA_SERVER:-/root/lcb/build/bin/llama-server}
LIB_DIR=${LIB_DIR:-$([ "$DEVICE" = cuda ] && echo /root/lib/serve || echo /tmp/serve_lib)}
GPU=${GPU:-0}
PORT=$(( 20000 + $$ % 20000 ))  # ferry-serve; llama-server PORT + 1 (not fixed: a stale server may hold one)
R=$(mktemp -d /tmp/serve_gpu.XXXXXX)  # the results; only res.tgz and summary.md go to $OUT (few files come back)
mkdir -p "$OUT" "$MODELS_DIR" "$LIB_DIR"
S=$R/summary.md
N_LEVELS=$(echo "$LEVELS" | tr ',' '\n' | wc -l)
log() { echo "$*" | tee -a "$S"; }

# ferry-serve's shared libraries (serve_carry.sh), for its process only.
for f in "${CARRY:-.devcarry}"/lib/*.xz; do [ -f "$f" ] && xz -dc "$f" > "$LIB_DIR/$(basename "$f" .xz)"; done
FERRY_LD="$LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# GPU memory in use (MiB) on the measured card; empty without a GPU.
smi_used() { [ "$DEVICE" = cuda ] && nvidia-smi -i "$GPU" --query-gpu=memory.used --format=csv,noheader,nounits; }
smi_free() { nvidia-smi -i "$GPU" --query-gpu=memory.free --format=csv,noheader,nounits; }
# health PORT: whether GET /health answers 200.
health() {
  python3 -c "import sys, urllib.request as u; sys.exit(u.urlopen('http://127.0.0.1:$1/health', timeout=3).status != 200)" \
    2>/dev/null
}
# wait_ready PID PORT SECONDS: until /health answers 200; fails when the server exits or time runs out.
wait_ready() {
  local end=$(( $(date +%s) + $3 ))
  while [ "$(date +%s)" -lt $end ]; do
    kill -0 "$1" 2>/dev/null || return 1
    health "$2" && return 0
    sleep 1
  done
  return 1
}
# stop PID: SIGTERM (both servers cancel their requests and exit), SIGKILL after 30 s.
stop() {
  kill -TERM "$1" 2>/dev/null
  for _ in $(seq 1 60); do kill -0 "$1" 2>/dev/null || break; sleep 0.5; done
  kill -KILL "$1" 2>/dev/null
  wait "$1" 2>/dev/null
}

# serve_side TAG PORT SECONDS CMD...: starts the server CMD (listening on PORT) with nvidia-smi sampling,
# waits for it, runs the client with level deadlines that fit SECONDS in all, fetches /metrics, stops it.
# Writes D/TAG.{log,json,md,client.txt,metrics,mem}; fails when the server never became ready.
serve_side() {
  local tag=$1 port=$2 seconds=$3; shift 3
  local end=$(( $(date +%s) + seconds )) base mon pid ok=1 load=- peak=- level_s
  base=$(smi_used)
  if [ -n "$base" ]; then
    nvidia-smi -i "$GPU" --query-gpu=memory.used --format=csv,noheader,nounits -lms 50 > "$D/$tag.smi" 2>/dev/null &
    mon=$!
  fi
  echo "$*" > "$D/$tag.cmd"
  "$@" > "$D/$tag.log" 2>&1 &
  pid=$!
  if wait_ready $pid "$port" $(( seconds / 2 )); then
    el "$tag ready"
    [ -n "$base" ] && load=$(( $(smi_used) - base ))
    # What is left, less a margin for stopping, shared by the levels (each also has a warm-up request).
    level_s=$(( (end - $(date +%s) - 20) / N_LEVELS - 5 ))
    [ $level_s -gt "$LEVEL_S" ] && level_s=$LEVEL_S
    [ $level_s -lt 5 ] && level_s=5
    timeout $(( end - $(date +%s) + 30 )) python3 bench/serve_throughput.py --url "http://127.0.0.1:$port" \
      --levels "$LEVELS" --prompt-tokens "$PROMPT" --max-tokens "$GEN" --min-requests "$MIN_REQ" \
      --level-seconds $level_s --timeout 300 --label "$tag" --json "$D/$tag.json" --md "$D/$tag.md" \
      > "$D/$tag.client.txt" 2>&1
    el "$tag levels done (deadline $level_s s per level)"
    python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:$port/metrics', timeout=10).read().decode())" \
      > "$D/$tag.metrics" 2>&1
    [ -n "$base" ] && nvidia-smi --query-compute-apps=pid,used_memory --format=csv >> "$D/$tag.metrics" 2>&1
  else
    ok=0
    el "$tag did not become ready; its log ends:"; tail -5 "$D/$tag.log"
  fi
  stop $pid
  if [ -n "$base" ]; then
    kill $mon 2>/dev/null; wait $mon 2>/dev/null
    peak=$(( $(sort -n "$D/$tag.smi" | tail -1) - base ))
  fi
  echo "$tag: GPU memory above the idle card: after load $load MiB, peak $peak MiB" > "$D/$tag.mem"
  [ $ok = 1 ]
}

# side_seconds SIDES_LEFT: this side's share of the time left (TOTAL less a margin for the summary).
side_seconds() { echo $(( (TOTAL - 15 - ($(date +%s) - T0)) / $1 )); }

# --- the peer and the models (a fresh machine: PREP=1 first) -------------------------------------------
n_models=$(echo $MODELS | wc -w)
if [ "$DEVICE" = cuda ] && [[ " $SIDES " == *" llama "* ]] && [ ! -x "$LLAMA_SERVER" ]; then
  TARGETS=llama-server JOBS=${JOBS:-14} bash bench/device/llama_cpp_build.sh
fi
for spec in $MODELS; do
  IFS=: read -r preset type gb slots <<< "$spec"
  m=$MODELS_DIR/$preset-$type.gguf
  left=$(( TOTAL - 60 - ($(date +%s) - T0) ))  # synth's time limit (timeout 0 would be none)
  if [ ! -f "$m" ] && [ $left -gt 10 ]; then
    timeout $left "$BIN/ferry" synth --preset "$preset" --type "$type" --fast -o "$m.part" \
      > "$R/synth_$preset-$type.log" 2>&1 && mv "$m.part" "$m"
    el "synth $preset $type: $(ls -la "$m" 2>&1)"
  fi
done
# Whether llama_cpp_build.sh's build still runs (its process exists and is no zombie).
building() {
  local pid state
  pid=$(cat /root/lcb/pid 2>/dev/null)
  state=$([ -n "$pid" ] && awk '{print $3}' /proc/$pid/stat 2>/dev/null)
  [ -n "$state" ] && [ "$state" != Z ]
}
# Nothing is measured while the peer builds (it loads every core).
if [ "$DEVICE" = cuda ] && building; then
  while building && [ $(( $(date +%s) - T0 )) -lt $(( TOTAL - 60 )) ]; do sleep 5; done
  el "llama.cpp build done: $([ -f /root/lcb/done ] && echo yes || echo no)"; tail -2 /root/lcb/build.log
fi
if [ "${PREP:-0}" = 1 ]; then
  # ferry's hardware profile (cached under /root/cache), measured only on an otherwise idle machine.
  if [ "$DEVICE" = cuda ] && ! building; then
    timeout 120 "$BIN/ferry" profile --quick > "$R/profile.txt" 2>&1; el "ferry profile rc $?"
  fi
  el "prep done"; ls -la "$MODELS_DIR" /root/lcb/build/bin 2>&1 | tee -a "$S"
  cd "$R" && tar czf "$OUT/res.tgz" . && cp "$S" "$OUT/summary.md"
  exit 0
fi

# --- per model: ferry, then llama-server --------------------------------------------------------------
card=$(nvidia-smi -i "$GPU" --query-gpu=name --format=csv,noheader 2>/dev/null || echo cpu)
log "# serve throughput: ferry serve vs llama-server, $card"
log "$("$BIN/ferry" --version 2>&1 | head -1); prompts $PROMPT tokens, $GEN generated, levels $LEVELS, $(nproc) cores"
sides_left=$(( n_models * $(echo $SIDES | wc -w) ))
for spec in $MODELS; do
  IFS=: read -r preset type gb slots <<< "$spec"
  m=$MODELS_DIR/$preset-$type.gguf
  D=$R/$preset-$type-${gb}G
  mkdir -p "$D"
  [ -f "$m" ] || { log "## $preset $type: no model file"; continue; }
  vram=(); [ "$DEVICE" = cuda ] && vram=(--vram "${gb}G")
  if [[ " $SIDES " == *" ferry "* ]]; then
    for try in 1 2; do
      cells=$(( slots * PER_REQ ))
      if serve_side ferry $PORT "$(side_seconds $sides_left)" env LD_LIBRARY_PATH="$FERRY_LD" "$BIN/ferry-serve" \
           -m "$m" "${vram[@]}" --parallel "$slots" -c $cells --ctx-per-request "$PER_REQ" --queue 128 \
           --host 127.0.0.1 --port $PORT $FERRY_ARGS; then break; fi
      [ $try = 2 ] && break
      for f in "$D"/ferry.*; do mv "$f" "${f/ferry./ferry_try1.}"; done
      slots=$(( slots > 1 ? slots / 2 : 1 )); el "ferry-serve again with $slots slots"
    done
    sides_left=$(( sides_left - 1 ))
  fi
  cells=$(( slots * PER_REQ ))
  if [[ " $SIDES " == *" llama "* ]]; then
    if [ ! -x "$LLAMA_SERVER" ]; then
      el "no $LLAMA_SERVER: llama side skipped"
    else
      sleep 2  # the driver returns the last server's memory
      if [ "$DEVICE" = cuda ]; then fit=(-fitt $(( $(smi_free) - gb * 1024 ))); else fit=(-ngl 0); fi
      serve_side llama $(( PORT + 1 )) "$(side_seconds $sides_left)" "$LLAMA_SERVER" -m "$m" --host 127.0.0.1 \
        --port $(( PORT + 1 )) \
        -np "$slots" -c $cells --kv-unified "${fit[@]}" --metrics $LLAMA_ARGS
    fi
    sides_left=$(( sides_left - 1 ))
  fi
  # The model's section: settings, both tables as one, ferry / llama ratios, memory, llama.cpp's fit.
  log ""
  log "## $preset $type at ${gb} GB: $slots requests at once, $cells KV cells ($PER_REQ per request)"
  python3 - "$D" >> "$S" <<'EOF'
import json, os, sys
d = sys.argv[1]
rows = {}
for side in ("ferry", "llama"):
    try:
        rows[side] = {r["clients"]: r for r in json.load(open(os.path.join(d, side + ".json")))["levels"]}
    except (OSError, ValueError, KeyError):
        pass
for side in ("ferry", "llama"):
    md = os.path.join(d, side + ".md")
    if not os.path.exists(md):
        print(f"({side}: no figures; see {side}.log and {side}.client.txt)")
    else:
        lines = open(md).read().splitlines()
        print("\n".join(lines if side == "ferry" or "ferry" not in rows else lines[2:]))
if len(rows) == 2:
    ratio = lambda k, n: rows["ferry"][n][k] / rows["llama"][n][k] if rows["llama"][n].get(k) else float("nan")
    print("\nferry / llama-server, gen tok/s: " + ", ".join(
        f"{n} clients {ratio('gen_tok_s', n):.2f}x" for n in rows["ferry"] if n in rows["llama"]))
EOF
  for side in ferry llama; do [ -f "$D/$side.mem" ] && log "$(cat "$D/$side.mem") (budget $(( gb * 1024 )) MiB)"; done
  [ -f "$D/llama.log" ] && grep -iE "fit|offloaded|n_ctx|kv_unified|n_slots" "$D/llama.log" | head -12 | sed 's/^/    /' >> "$S"
  [ -f "$D/ferry.log" ] && grep -E "^ferry|error|warning" "$D/ferry.log" | head -8 | sed 's/^/    /' >> "$S"
  el "$preset done"
done
cat "$S"
cd "$R" && tar czf "$OUT/res.tgz" --exclude='*.gguf' . && cp "$S" "$OUT/summary.md"
el done
