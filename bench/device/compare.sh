#!/usr/bin/env bash
# compare.sh: ferry vs llama.cpp in the same run on the GPU host, one section per issue:
#   FULL=1   full VRAM (issue 4): synthetic llama3-8b Q4_0 / Q4_K / F16, `ferry bench --device cuda` vs
#            `llama-bench -ngl 99 -fa 1`, prefill 512 and 4096, decode 128. FULL_LB_DEPTH=0,512: llama.cpp's
#            decode also after 512 tokens (ferry decodes after its -p prompt); FULL_BATCH: ferry -b.
#   HYB=...  hybrid under a VRAM budget (issue 6): e.g. HYB="qwen3-8b:Q4_K minitron-8b:F16", BUDGETS_GB="2 4 8",
#            PROMPTS="1024 4096": `ferry bench --vram` vs `llama-bench -fitt <free - budget>` (llama.cpp's own
#            fit to the budget, flash attention on), peak device memory of each process from nvidia-smi.
#   EQ=...   equality at budgets: e.g. EQ="qwen3-8b:Q4_K minitron-8b:F16", EQ_BUDGETS_GB="2 4 8".
#   CPU=1    CPU only (issue 3): llama3-8b Q4_0 / Q4_K / Q8_0 / F16 (CPU_TYPES), `ferry bench --device cpu -t T`
#            vs `llama-bench -t T` with the GPU hidden (CUDA_VISIBLE_DEVICES= and -nopo 1).
# Inputs (carried): BIN (default .devcarry/bin) with ferry; LLAMA_BENCH (default .devcarry/llama-bench, or
# .devcarry/llama-bench.xz unpacked to /root/lb). Models are synthesized with `ferry synth --fast` into
# MODELS (default /root/m) and kept there while the machine stays warm.
# Writes $OUT/compare/{summary.md,*.json,*.log}. Each run has a timeout; a failure prints a row and goes on.
set -uo pipefail

BIN=${BIN:-.devcarry/bin}
F="$BIN/ferry"
MODELS=${MODELS:-/root/m}
OUTD=${OUT:-$PWD/out}/compare
mkdir -p "$OUTD" "$MODELS"
S="$OUTD/summary.md"
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
log() { echo "$*" | tee -a "$S"; }

LB=${LLAMA_BENCH:-}
if [ -z "$LB" ]; then
  if [ -x /root/lb ]; then LB=/root/lb
  elif [ -f .devcarry/llama-bench.xz ]; then xz -dc .devcarry/llama-bench.xz > /root/lb && chmod +x /root/lb && LB=/root/lb
  elif [ -x .devcarry/llama-bench ]; then LB=.devcarry/llama-bench
  fi
fi
# cuBLAS for ferry (toolkit or wheel)
if ldd "$F" | grep -q "not found"; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           $(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null); do
    if ls "$d"/libcublas.so* > /dev/null 2>&1; then export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; break; fi
  done
fi
{ nvidia-smi; lscpu | head -20; ldd "$F"; [ -n "$LB" ] && ldd "$LB"; } > "$OUTD/env.txt" 2>&1
# PROFILE_CACHE: an XDG_CACHE_HOME holding a profile measured earlier on this machine (moe_queue.sh: /root/cache);
# unset, the first ferry run measures a quick profile into this run's output.
export XDG_CACHE_HOME="${PROFILE_CACHE:-$OUTD/cache}"
log "# compare.sh $(date -u +%FT%TZ) ferry=$F llama-bench=${LB:-none}"

synth() {  # preset type -> path
  local m="$MODELS/$1-$2.gguf"
  if [ ! -s "$m" ]; then
    local ts=$(date +%s)
    timeout 200 "$F" synth --preset "$1" --type "$2" --fast -o "$m.tmp" > "$OUTD/synth_$1_$2.log" 2>&1 && mv "$m.tmp" "$m"
    # The file's dirty pages go to disk now, not while the next ferry run measures its quick profile
    # (a profile taken right after a multi-GB synth reads the CPU far slower than it is).
    sync
    echo "synth $1 $2: $(( $(date +%s) - ts )) s" >> "$OUTD/synth.log"
  fi
  [ -s "$m" ] && echo "$m"
}

# Peak GPU memory used (MiB above the idle baseline) while a command runs: nvidia-smi sampled every 50 ms.
BASE_MIB=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
peak_run() {  # file_for_peak cmd...
  local pf=$1; shift
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 50 > "$pf.samples" 2>/dev/null &
  local mon=$!
  "$@"
  local rc=$?
  kill $mon 2>/dev/null; wait $mon 2>/dev/null
  sort -n "$pf.samples" | tail -1 | awk -v b="${BASE_MIB:-0}" '{print $1 - b}' > "$pf"
  return $rc
}

lb_json() {  # llama-bench json file -> "pp=... tg=..." (avg tok/s per test)
  python3 - "$1" <<'PY'
import json, sys
try:
    rows = json.load(open(sys.argv[1]))
except Exception as e:
    print("fail"); sys.exit(0)
out = []
for r in rows:
    d = f"@d{r['n_depth']}" if r.get("n_depth") else ""  # -d: the test runs after that many tokens
    if r.get("n_gen", 0) > 0: out.append(f"tg{r['n_gen']}{d}={r['avg_ts']:.2f}")
    else: out.append(f"pp{r['n_prompt']}{d}={r['avg_ts']:.1f}")
print(" ".join(out) + (f" ngl={rows[0].get('n_gpu_layers')}" if rows else ""))
PY
}

fr_json() {  # ferry bench json -> summary fields
  python3 - "$1" <<'PY'
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except Exception:
    print("fail"); sys.exit(0)
f = lambda k, fmt="%.1f": (fmt % j[k]) if isinstance(j.get(k), (int, float)) else "-"
s = f"pp={f('prefill_tok_s')} tg={f('decode_tok_s', '%.2f')} ttft={f('ttft_ms', '%.0f')}ms decode_gb_s={f('decode_gb_s')}"
h = j.get("hybrid") or j.get("plan") or {}
if h:
    s += " arena_peak=%.2fGiB outside=%.2fGiB" % (h.get("arena_peak", 0) / 2**30, h.get("outside_arena", 0) / 2**30)
    s += " ffn_slices=%s" % h.get("ffn_slices", "-")
    d = [t for t in h.get("tiers", []) if t.get("steps")]
    s += " tiers=" + ",".join("%d:%s:%.1f/%.1fms" % (t["tokens"], t["strategy"][:3], t["predicted_ms"], t["measured_ms"]) for t in d)
    if h.get("limit_h_ms"):
        t1 = [t for t in d if t["tokens"] == 1]
        if t1: s += " (W-R)/H=%.0f%% (W-R)/(C+P)=%.0f%%" % (100 * h["limit_h_ms"] / t1[0]["measured_ms"], 100 * h["limit_cp_ms"] / t1[0]["measured_ms"])
        if t1 and h.get("limit_serial_ms"): s += " serial=%.0f%%" % (100 * h["limit_serial_ms"] / t1[0]["measured_ms"])
g = sum(t.get("graph_replays", 0) for t in h.get("tiers", []))
if g: s += f" graph_replays={g}"
print(s)
PY
}

# ---- full VRAM ----------------------------------------------------------------------------------------
if [ -n "${FULL:-}" ] && [ "${FULL:-0}" != 0 ]; then
  log "## full VRAM: llama3-8b, ferry --device cuda vs llama-bench -ngl 99 -fa 1"
  for t in ${FULL_TYPES:-Q4_0 Q4_K F16}; do
    m=$(synth llama3-8b "$t") || { log "synth llama3-8b $t failed"; continue; }
    for p in ${FULL_PROMPTS:-512 4096}; do
      timeout 180 "$F" bench -m "$m" --device cuda -p $p -n $([ $p = 512 ] && echo 128 || echo 16) ${FULL_BATCH:+-b $FULL_BATCH} --json \
        > "$OUTD/full_ferry_${t}_$p.json" 2> "$OUTD/full_ferry_${t}_$p.err"
      log "| ferry llama3-8b $t p$p | $(fr_json "$OUTD/full_ferry_${t}_$p.json") |"
    done
    if [ -n "$LB" ] && [ "${SKIP_LLAMA:-0}" != 1 ]; then
      timeout 240 "$LB" -m "$m" -ngl 99 -fa 1 -p ${FULL_LB_PROMPTS:-512,4096} -n 128 ${FULL_LB_DEPTH:+-d $FULL_LB_DEPTH} -r 2 -o json > "$OUTD/full_llama_${t}.json" 2> "$OUTD/full_llama_${t}.err"
      log "| llama.cpp llama3-8b $t | $(lb_json "$OUTD/full_llama_${t}.json") |"
    fi
    [ "${KEEP:-0}" = 1 ] || [ "$t" != F16 ] || rm -f "$m"
    log "(at $(elapsed) s)"
  done
fi

# ---- CPU only -------------------------------------------------------------------------------------------
if [ "${CPU:-0}" = 1 ]; then
  T=${CPU_THREADS:-$(lscpu -p=core | grep -v '^#' | sort -u | wc -l)}
  log "## CPU only, $T threads: ferry --device cpu vs llama-bench (GPU hidden, -nopo 1)"
  cpu_ok=1
  for t in ${CPU_TYPES:-Q4_0 Q4_K Q8_0 F16}; do
    m=$(synth llama3-8b "$t") || { log "synth llama3-8b $t failed"; continue; }
    if [ $cpu_ok = 1 ]; then  # a short probe first: a hang costs 60 s, not 200
      ts=$(date +%s)
      timeout 60 "$F" bench -m "$m" --device cpu -t "$T" -p 64 -n 4 --no-membw > "$OUTD/cpu_probe_$t.txt" 2>&1
      rc=$?
      log "probe ferry cpu $t -p 64 -n 4: exit $rc in $(( $(date +%s) - ts )) s: $(tail -2 "$OUTD/cpu_probe_$t.txt" | tr '\n' ' ')"
      [ $rc = 0 ] || cpu_ok=0
    fi
    [ $cpu_ok = 1 ] && timeout 200 "$F" bench -m "$m" --device cpu -t "$T" -p 512 -n ${CPU_GEN:-32} --json \
      > "$OUTD/cpu_ferry_$t.json" 2> "$OUTD/cpu_ferry_$t.err"
    log "| ferry cpu llama3-8b $t | $(fr_json "$OUTD/cpu_ferry_$t.json") host_gb_s=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("host_gb_s","-"))' "$OUTD/cpu_ferry_$t.json" 2>/dev/null) |"
    if [ -n "$LB" ]; then
      CUDA_VISIBLE_DEVICES= timeout 300 "$LB" -m "$m" -ngl 0 -nopo 1 ${LB_ARGS:-} -t "$T" -p 512 -n ${CPU_GEN:-32} -r 1 -o json \
        > "$OUTD/cpu_llama_$t.json" 2> "$OUTD/cpu_llama_$t.err"
      log "| llama.cpp cpu llama3-8b $t | $(lb_json "$OUTD/cpu_llama_$t.json") |"
    fi
    log "(at $(elapsed) s)"
  done
fi

# ---- hybrid under a budget ------------------------------------------------------------------------------
if [ -n "${HYB:-}" ]; then
  log "## hybrid: ferry --vram B vs llama-bench -fitt (free - B) -fa 1; peak = nvidia-smi max - idle"
  for spec in $HYB; do
    p=${spec%%:*}; t=${spec#*:}
    m=$(synth "$p" "$t") || { log "synth $p $t failed"; continue; }
    for gb in ${BUDGETS_GB:-2 4 8}; do
      for np in ${PROMPTS:-1024 4096}; do
        [ $(elapsed) -gt ${TIME_LIMIT:-520} ] && { log "time limit: skipping $p $gb G p$np"; continue; }
        tag="${p}_${t}_${gb}G_p$np"
        peak_run "$OUTD/hyb_ferry_$tag.peak" timeout 200 "$F" bench -m "$m" --device cuda --vram "${gb}G" -p "$np" -n ${GEN:-128} \
          ${FERRY_HYB_ARGS:-} --json > "$OUTD/hyb_ferry_$tag.json" 2> "$OUTD/hyb_ferry_$tag.err"
        log "| ferry $p $t ${gb}G p$np | $(fr_json "$OUTD/hyb_ferry_$tag.json") smi_peak=$(cat "$OUTD/hyb_ferry_$tag.peak")MiB |"
        if [ -n "$LB" ] && [ "${SKIP_LLAMA:-0}" != 1 ]; then
          free=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1)
          margin=$(( free - gb * 1024 ))
          peak_run "$OUTD/hyb_llama_$tag.peak" timeout 300 "$LB" -m "$m" -fitt "$margin" -fa 1 ${LB_ARGS:-} -p "$np" -n ${GEN:-128} -r 1 -o json \
            > "$OUTD/hyb_llama_$tag.json" 2> "$OUTD/hyb_llama_$tag.err"
          log "| llama.cpp $p $t ${gb}G p$np (fitt $margin) | $(lb_json "$OUTD/hyb_llama_$tag.json") smi_peak=$(cat "$OUTD/hyb_llama_$tag.peak")MiB |"
        fi
      done
      log "(at $(elapsed) s)"
    done
  done
fi
# ---- equality at budgets (issue 6): ferry --vram B vs --device cpu, logits of a 40-token prompt + 8 steps ----
if [ -n "${EQ:-}" ]; then
  log "## equality: --vram B (cuda) vs --device cpu, logits of every position (prompt rows compared)"
  toks=$(python3 -c "print(','.join(str((37*i+11)%120000+10) for i in range(40)))")
  for spec in $EQ; do
    p=${spec%%:*}; t=${spec#*:}
    m=$(synth "$p" "$t") || { log "synth $p $t failed"; continue; }
    vocab=$("$F" inspect "$m" --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["spec"]["n_vocab"])')
    common=(-m "$m" --tokens "$toks" -n 8 --temp 0 --ignore-eos -c 256 -b 64 --json)
    timeout 150 "$F" run "${common[@]}" --device cpu --logits-out "$OUTD/eq_cpu.bin" > "$OUTD/eq_${p}_cpu.json" 2> "$OUTD/eq_${p}_cpu.err"
    for gb in ${EQ_BUDGETS_GB:-2 4 8}; do
      timeout 150 "$F" run "${common[@]}" --device cuda --vram "${gb}G" ${FERRY_EQ_ARGS:-} --logits-out "$OUTD/eq_gpu.bin" > "$OUTD/eq_${p}_${gb}G.json" 2> "$OUTD/eq_${p}_${gb}G.err"
      res=$(python3 - "$OUTD/eq_cpu.bin" "$OUTD/eq_gpu.bin" "$vocab" <<'PY'
import sys, numpy as np
a = np.fromfile(sys.argv[1], dtype=np.float32); b = np.fromfile(sys.argv[2], dtype=np.float32); v = int(sys.argv[3])
if a.size == 0 or a.size != b.size: print(f"FAIL sizes {a.size} vs {b.size}"); sys.exit(0)
a = a.reshape(-1, v)[:40]; b = b.reshape(-1, v)[:40]
rel = float(np.max(np.abs(a - b)) / max(1e-6, float(np.max(np.abs(a)))))
top = float(np.mean(a.argmax(1) == b.argmax(1)))
print(f"{'PASS' if np.isfinite(b).all() and rel < 0.05 and top >= 0.9 else 'FAIL'} max_rel_diff {rel:.2e} top1_agree {top:.3f}")
PY
)
      log "| eq $p $t ${gb}G ${FERRY_EQ_ARGS:-} | $res | $(fr_json "$OUTD/eq_${p}_${gb}G.json" | grep -o 'arena_peak=[^ ]*\|ffn_slices=[^ ]*\|tiers=[^ ]*' | tr '\n' ' ') |"
      rm -f "$OUTD/eq_gpu.bin"
    done
    rm -f "$OUTD/eq_cpu.bin"
  done
fi
log "done in $(elapsed) s"
