#!/usr/bin/env bash
# CPU speed of ferry against llama.cpp's llama-bench on the same GGUF files, same thread count:
#   bench/cpu_compare.sh FERRY_BIN LLAMA_BENCH_BIN THREADS OUTDIR MODEL...
# Per model and round: `ferry bench --device cpu -t T -p P -n N -r R --json`, then llama-bench
# (-t T -p P -n N -r R -o json, CUDA hidden: CUDA_VISIBLE_DEVICES= -ngl 0 -nopo 1), each under
# a time limit. Writes OUTDIR/cpu_compare.md (a table: prefill and decode tok/s of both, ratios, ferry's
# decode GB/s against the host bandwidth it measured, CPU ms per token of both) and the raw logs in
# OUTDIR/raw/. A run that fails or times out gives "fail" in its cells; the others go on.
# Env: P (512) N (64) R (2) TIMEOUT (300 s per run) ROUNDS (1; >1 alternates ferry and llama.cpp and
#      reports the best round of each), LLAMA_ARGS (extra llama-bench flags, e.g. "-fa 1"),
#      FERRY_ARGS (extra ferry bench flags), CPU_TIME (1: also time llama-bench's CPU use, below),
#      REPORT_ONLY (1: no runs, only the table from OUTDIR/raw; same ROUNDS and models).
# CPU ms per token (how much work a token costs, the steadier figure on a shared machine): ferry prints
# its own; for llama.cpp, prefill and decode run as separate llama-bench calls, timed by bash (user +
# sys of the process), less a baseline call (-p 0 -n 1 -r 1 --no-warmup: load + one token), over the
# tokens processed (llama-bench's warm-up runs a whole prompt once, and one decode token).
# ferry's CPU engine copies the weights into transparent huge pages at load (engine/huge_weights.h;
# 1-8 s of page zeroing for an 8B model on the 2-core VM, not in the timed rates); FERRY_CPU_HUGEPAGES=0
# in the environment keeps them in the file mapping, as llama.cpp's default mmap does.
# Note: llama-bench decodes from an empty context, ferry bench after the P-token prompt (its attention
# reads P more KV rows per token: ~2% of the weight bytes for llama3-8b at P = 512).
set -uo pipefail

if (($# < 5)); then
  sed -n '2,3p' "$0" | sed 's/^# //' >&2
  exit 2
fi
FERRY=$1 LB=$2 T=$3 OUT=$4
shift 4
P=${P:-512} N=${N:-64} R=${R:-2} TMO=${TIMEOUT:-300} ROUNDS=${ROUNDS:-1} CPU_TIME=${CPU_TIME:-1}
REPORT_ONLY=${REPORT_ONLY:-0}
LLAMA_ARGS=${LLAMA_ARGS:-} FERRY_ARGS=${FERRY_ARGS:-}
mkdir -p "$OUT/raw" || exit 1
RAW=$OUT/raw

((REPORT_ONLY)) || {
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "host: $(hostname); cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1); $(nproc) CPUs usable"
  echo "ferry: $FERRY ($(cd "$(dirname "$0")" && git rev-parse --short HEAD 2>/dev/null || echo '?'))"
  echo "llama-bench: $LB"
  echo "threads $T, P=$P N=$N R=$R, timeout ${TMO}s, rounds $ROUNDS"
  echo "LLAMA_ARGS: $LLAMA_ARGS  FERRY_ARGS: $FERRY_ARGS"
} > "$RAW/machine.txt"
cat "$RAW/machine.txt"

# run TAG CMD...: runs CMD with stdout/stderr to RAW/TAG.{out,err}; writes "rc wall_s user_s sys_s
# loadavg1" to RAW/TAG.time. Past TIMEOUT seconds the run is killed (rc 124), after its threads' states
# and, when gdb is installed, their stacks are saved to RAW/TAG.hang (what a hang was waiting on).
# Sets CPU to "user sys" seconds of this shell's finished children, from `times` (which must run in
# this shell: a $(...) subshell has no children of its own).
children_cpu() {
  times > "$RAW/.times"
  CPU=$(sed -n 2p "$RAW/.times" | sed 's/m/ /g; s/s//g' | awk '{printf "%.3f %.3f", $1 * 60 + $2, $3 * 60 + $4}')
}
dump_hang() {
  local pid=$1 out=$2
  {
    echo "timed out after ${TMO}s; load $(cat /proc/loadavg)"
    grep -E '^(State|Threads|VmRSS|voluntary|nonvoluntary)' "/proc/$pid/status" 2>/dev/null
    for t in /proc/"$pid"/task/*; do
      echo "thread ${t##*/}: $(cut -d' ' -f3 "$t/stat" 2>/dev/null) wchan=$(cat "$t/wchan" 2>/dev/null) utime+stime=$(cut -d' ' -f14,15 "$t/stat" 2>/dev/null)"
    done
    if command -v gdb > /dev/null; then
      timeout 60 gdb -p "$pid" -batch -ex "thread apply all bt" 2>&1 | grep -E '^(Thread|#)' | head -400
    fi
  } > "$out" 2>&1
}
run() {
  local tag=$1
  shift
  local load rc c0 c1 t0 t1 pid wd
  load=$(cut -d' ' -f1 /proc/loadavg)
  rm -f "$RAW/$tag.hang"
  children_cpu
  c0=$CPU
  t0=$(date +%s.%N)
  "$@" > "$RAW/$tag.out" 2> "$RAW/$tag.err" &
  pid=$!
  (
    trap 'kill "$sp" 2> /dev/null; exit 0' TERM
    sleep "$TMO" &
    sp=$!
    wait "$sp"
    if kill -0 "$pid" 2> /dev/null; then
      dump_hang "$pid" "$RAW/$tag.hang"
      kill -TERM "$pid" 2> /dev/null
      for _ in 1 2 3 4 5 6 7 8 9 10; do
        kill -0 "$pid" 2> /dev/null || exit 0
        sleep 0.5
      done
      kill -KILL "$pid" 2> /dev/null
    fi
  ) &
  wd=$!
  wait "$pid"
  rc=$?
  kill -TERM "$wd" 2> /dev/null
  wait "$wd" 2> /dev/null
  t1=$(date +%s.%N)
  children_cpu
  c1=$CPU
  [[ -e $RAW/$tag.hang ]] && rc=124
  echo "$rc $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b - a}') $(echo "$c0 $c1" | awk '{printf "%.3f %.3f", $3 - $1, $4 - $2}') $load" > "$RAW/$tag.time"
  if ((rc != 0)); then echo "  $tag: exit $rc (see $RAW/$tag.err, and $tag.hang when 124)" >&2; fi
  return 0
}

names=()
for model in "$@"; do
  name=$(basename "$model" .gguf)
  names+=("$name")
  ((REPORT_ONLY)) && continue
  if [[ ! -r $model ]]; then
    echo "$model: not readable" > "$RAW/$name.missing"
    echo "$name: not readable, skipped" >&2
    continue
  fi
  for ((round = 1; round <= ROUNDS; ++round)); do
    echo "== $name round $round (load $(cut -d' ' -f1-3 /proc/loadavg))"
    # shellcheck disable=SC2086
    run "$name.r$round.ferry" "$FERRY" bench -m "$model" --device cpu -t "$T" -p "$P" -n "$N" -r "$R" --json $FERRY_ARGS
    lb=(env CUDA_VISIBLE_DEVICES= "$LB" -m "$model" -t "$T" -ngl 0 -nopo 1 -r "$R" -o json)
    if ((CPU_TIME)); then
      # shellcheck disable=SC2086
      run "$name.r$round.llama_pp" "${lb[@]}" -p "$P" -n 0 $LLAMA_ARGS
      # shellcheck disable=SC2086
      run "$name.r$round.llama_tg" "${lb[@]}" -p 0 -n "$N" $LLAMA_ARGS
      # shellcheck disable=SC2086
      run "$name.r$round.llama_base" env CUDA_VISIBLE_DEVICES= "$LB" -m "$model" -t "$T" -ngl 0 -nopo 1 \
        -p 0 -n 1 -r 1 --no-warmup -o json $LLAMA_ARGS
    else
      # shellcheck disable=SC2086
      run "$name.r$round.llama" "${lb[@]}" -p "$P" -n "$N" $LLAMA_ARGS
    fi
  done
done

PYTHON=${PYTHON:-python3}
if ! command -v "$PYTHON" > /dev/null; then
  echo "no $PYTHON: raw results are in $RAW, no table written" >&2
  exit 1
fi
"$PYTHON" - "$RAW" "$OUT/cpu_compare.md" "$P" "$N" "$R" "$ROUNDS" "$T" "${names[@]}" << 'EOF'
import json, os, sys

raw, out_path = sys.argv[1], sys.argv[2]
P, N, R, ROUNDS, T = (int(x) for x in sys.argv[3:8])
names = sys.argv[8:]


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def timing(tag):
    t = read(os.path.join(raw, tag + ".time"))
    if t is None:
        return None
    rc, wall, user, sys_, load = t.split()
    return {"rc": int(rc), "wall": float(wall), "cpu": float(user) + float(sys_), "load": float(load)}


def ferry(name, r):
    tag = f"{name}.r{r}.ferry"
    tm = timing(tag)
    text = read(os.path.join(raw, tag + ".out"))
    if tm is None or tm["rc"] != 0 or not text:
        return None
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                j = json.loads(line)
            except ValueError:
                return None
            j["load"] = tm["load"]
            return j
    return None


def llama_rows(tag):
    tm = timing(tag)
    text = read(os.path.join(raw, tag + ".out"))
    if tm is None or tm["rc"] != 0 or not text:
        return None, tm
    try:
        return json.loads(text), tm
    except ValueError:
        return None, tm


def llama(name, r):
    res = {"pp": None, "tg": None, "pp_cpu": None, "tg_cpu": None, "size": None, "load": None, "info": ""}
    split = os.path.exists(os.path.join(raw, f"{name}.r{r}.llama_pp.time"))
    tags = [f"{name}.r{r}.llama_pp", f"{name}.r{r}.llama_tg"] if split else [f"{name}.r{r}.llama"]
    base_rows, base_tm = llama_rows(f"{name}.r{r}.llama_base") if split else (None, None)
    for tag in tags:
        rows, tm = llama_rows(tag)
        if tm is not None and res["load"] is None:
            res["load"] = tm["load"]
        for row in rows or []:
            res["size"] = row.get("model_size")
            res["info"] = "%s, fa %s" % (row.get("backends", "?"), row.get("flash_attn", "?"))
            if row.get("n_prompt", 0) > 0 and row.get("n_gen", 0) == 0:
                res["pp"] = row.get("avg_ts")
                if split and base_rows is not None and base_tm is not None:
                    res["pp_cpu"] = max(0.0, (tm["cpu"] - base_tm["cpu"]) * 1e3 / ((R + 1) * P))
            elif row.get("n_gen", 0) > 0 and row.get("n_prompt", 0) == 0:
                res["tg"] = row.get("avg_ts")
                if split and base_rows is not None and base_tm is not None:
                    res["tg_cpu"] = max(0.0, (tm["cpu"] - base_tm["cpu"]) * 1e3 / (R * N))
    return res


def f(x, fmt="%.2f"):
    return "fail" if x is None else fmt % x


def ratio(a, b):
    return "—" if a is None or b is None or b == 0 else "%.2fx" % (a / b)


def best(vals):
    vals = [v for v in vals if v is not None]
    return max(vals) if vals else None


lines = []
lines.append(f"# ferry vs llama.cpp, CPU, {T} threads, prefill {P} tokens, decode {N} tokens, {R} reps")
lines.append("")
lines.append(read(os.path.join(raw, "machine.txt")).strip().replace("\n", "  \n"))
lines.append("")
lines.append("tok/s: mean of the reps (best round when several; CPU ms/tok from that round). GB/s: ferry's weight bytes read per decoded token x "
             "decode tok/s; host: ferry's streaming-read measurement at the same thread count. CPU ms/tok: "
             "process CPU time (all threads) per token. load: 1-minute load average when the run started.")
lines.append("")
lines.append("| model | GiB/token | ferry pp | llama.cpp pp | pp ratio | ferry tg | llama.cpp tg | tg ratio | "
             "ferry GB/s | % of host | llama.cpp GB/s | CPU ms/tok pp ferry / llama | CPU ms/tok tg ferry / llama | load |")
lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
detail = []
for name in names:
    if os.path.exists(os.path.join(raw, name + ".missing")):
        lines.append(f"| {name} | missing | | | | | | | | | | | | |")
        continue
    fr = [ferry(name, r) for r in range(1, ROUNDS + 1)]
    lr = [llama(name, r) for r in range(1, ROUNDS + 1)]
    fpp = best([x["prefill_tok_s"] for x in fr if x])
    ftg = best([x["decode_tok_s"] for x in fr if x])
    lpp = best([x["pp"] for x in lr])
    ltg = best([x["tg"] for x in lr])
    fbest = max((x for x in fr if x), key=lambda x: x["decode_tok_s"], default=None)
    wb = fbest["weight_bytes_per_token"] if fbest else None
    gbs = fbest["decode_gb_s"] if fbest else None
    host = fbest["host_gb_s"] if fbest else None
    frac = "%.0f%% of %.1f" % (100 * gbs / host, host) if fbest and host else "—"
    lgbs = wb * ltg / 1e9 if wb and ltg else None
    # CPU ms/tok: from the round whose tok/s is reported (llama.cpp's is a difference of two runs, so a
    # minimum over rounds would pick the noise).
    def of_best(rows, rate, cpu):
        rows = [x for x in rows if x and x.get(rate) is not None]
        return max(rows, key=lambda x: x[rate])[cpu] if rows else None
    fpc = of_best(fr, "prefill_tok_s", "prefill_cpu_ms_per_tok")
    ftc = of_best(fr, "decode_tok_s", "decode_cpu_ms_per_tok")
    lpc = of_best(lr, "pp", "pp_cpu")
    ltc = of_best(lr, "tg", "tg_cpu")
    neg = lambda v: v
    loads = [x["load"] for x in fr if x] + [x["load"] for x in lr if x["load"] is not None]
    lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s / %s | %s |" % (
        name, f(wb / 2**30 if wb else None), f(fpp), f(lpp), ratio(fpp, lpp), f(ftg), f(ltg), ratio(ftg, ltg),
        f(gbs), frac, f(lgbs), f(neg(fpc), "%.1f"), f(neg(lpc), "%.1f"), f(neg(ftc), "%.1f"), f(neg(ltc), "%.1f"),
        "–".join("%.1f" % v for v in sorted(set(loads))) if loads else "—"))
    for r in range(ROUNDS):
        x, y = fr[r], lr[r]
        detail.append("| %s | %d | %s | %s | %s | %s | %s / %s | %s / %s | %s |" % (
            name, r + 1, f(x["prefill_tok_s"] if x else None), f(y["pp"]), f(x["decode_tok_s"] if x else None),
            f(y["tg"]), f(x["prefill_cpu_ms_per_tok"] if x else None, "%.1f"), f(y["pp_cpu"], "%.1f"),
            f(x["decode_cpu_ms_per_tok"] if x else None, "%.1f"), f(y["tg_cpu"], "%.1f"), y["info"]))
if ROUNDS > 1:
    lines += ["", "Rounds:", "",
              "| model | round | ferry pp | llama.cpp pp | ferry tg | llama.cpp tg | CPU ms/tok pp ferry / llama | "
              "CPU ms/tok tg ferry / llama | llama.cpp |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"] + detail
with open(out_path, "w") as fo:
    fo.write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
