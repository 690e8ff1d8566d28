#!/usr/bin/env bash
# Is the profile repeatable? Runs `ferry profile --quick -o` N times back to back, then prints, per
# figure the planner uses, the median of the N runs, the lowest and highest run against it, and how
# many runs fall outside ±10 % of it; then (optional) the plan each profile gives per model and budget.
#   bench/profile_repeat.sh [-n N] [-f FERRY] [-o DIR] [--full] [--keep] [--plan MODEL:BUDGETS]...
#     -n N        runs (default 5)
#     -f FERRY    the ferry binary (default build/ferry)
#     -o DIR      where the profiles go (default a temporary folder, printed)
#     --full      full profiles instead of quick ones
#     --report    no runs: only the tables, from the profiles already in DIR (run_*.json)
#     --reference FULL.json  also compare with this profile (e.g. a full one, `ferry profile -o FULL.json`):
#                 each figure's median against it, and the plans from it beside the runs' (issue 28 item 2:
#                 the quick profile's plan is the full profile's)
#     --plan SPEC plans from every profile: SPEC is MODEL:BUDGETS, MODEL a GGUF file or a synth preset with
#                 its type (minitron-8b/F16), BUDGETS comma-separated (2G,4G,8G); repeatable. Default on a
#                 profile with a GPU: minitron-8b/F16:2G,4G,8G and qwen3-8b/Q4_K:2G,4G,8G.
# Done when (issue 28): every figure within ±10 % of the median (the summary's "outside" count is 0) and
# one plan per model and budget ("same plan from every run: yes"; with --reference, "as the reference: yes").
# Env: PLAN_ARGS (extra `ferry plan` flags, e.g. "-c 4096").
set -uo pipefail

n=5
ferry=build/ferry
dir=""
mode=--quick
report_only=0
reference=""
plans=()
while (($#)); do
  case $1 in
    -n) n=$2; shift 2 ;;
    -f) ferry=$2; shift 2 ;;
    -o) dir=$2; shift 2 ;;
    --full) mode=""; shift ;;
    --report) report_only=1; shift ;;
    --plan) plans+=("$2"); shift 2 ;;
    --reference) reference=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done
[[ -x $ferry ]] || { echo "error: no ferry binary at '$ferry' (-f FERRY)" >&2; exit 2; }
[[ -z $reference || -f $reference ]] || { echo "error: no reference profile '$reference'" >&2; exit 2; }
[[ -n $dir ]] || dir=$(mktemp -d /tmp/profile_repeat.XXXXXX)
mkdir -p "$dir" || exit 2

if ((!report_only)); then
  for i in $(seq 1 "$n"); do
    start=$(date +%s%N)
    if ! "$ferry" profile $mode -o "$dir/run_$i.json" >"$dir/run_$i.log" 2>&1; then
      echo "error: run $i failed (see $dir/run_$i.log)" >&2
      tail -3 "$dir/run_$i.log" >&2
      exit 1
    fi
    ms=$((($(date +%s%N) - start) / 1000000))
    printf 'run %d: %d.%d s wall -> %s\n' "$i" $((ms / 1000)) $((ms % 1000 / 100)) "$dir/run_$i.json"
  done
fi

profiles=("$dir"/run_*.json)
[[ -e ${profiles[0]} ]] || { echo "error: no run_*.json in $dir" >&2; exit 2; }

REFERENCE=$reference python3 - "${profiles[@]}" <<'EOF'
import json, os, statistics, sys

runs = [json.load(open(p)) for p in sys.argv[1:]]
ref = json.load(open(os.environ["REFERENCE"])) if os.environ.get("REFERENCE") else None

def figures(p):
    """Every figure the planner reads, by a stable name."""
    f = {}
    c = p["cpu"]
    f["cpu.call_overhead_us"] = c.get("call_overhead_us", 0)
    for b in c["mem_bw"]:
        f[f"cpu.mem_bw {b['threads']} thr"] = b["gbs"]
    for m in c["matmul"]:
        for t, g in zip(m["tokens"], m["gflops"]):
            f[f"cpu.matmul {m['dtype']} {m['threads']} thr n={t}"] = g
    if "link" in p:
        for k in ("h2d_gbs", "d2h_gbs", "h2d_busy_gbs", "d2h_busy_gbs", "cpu_share_while_copying",
                  "host_combined_gbs", "latency_us"):
            f[f"link.{k}"] = p["link"][k]
    if "gpu" in p:
        g = p["gpu"]
        f["gpu.mem_bw_gbs"] = g["mem_bw_gbs"]
        f["gpu.launch_us"] = g["launch_us"]
        for m in g["matmul"]:
            for t, v in zip(m["tokens"], m["gflops"]):
                f[f"gpu.matmul {m['dtype']} n={t}"] = v
        a = g.get("attention")
        if a:
            for pt in a["decode"]:
                f[f"gpu.attention decode {pt['cells']} cells us"] = pt["us"]
            for pt in a["prefill"]:
                f[f"gpu.attention prefill {pt['tokens']}x{pt['cells']} us"] = pt["us"]
    return f

per_run = [figures(p) for p in runs]
ref_fig = figures(ref) if ref else {}
names = [k for k in per_run[0] if all(k in r for r in per_run)]
print(f"\n{len(runs)} profiles ({', '.join(sorted({r.get('mode', '?') for r in runs}))}),"
      f" {', '.join('%.1f s' % r.get('seconds', 0) for r in runs)}")
for i, r in enumerate(runs, 1):
    if r.get("notes"):
        print(f"  run {i}: {r['notes']}")
print(f"\n{'figure':44s} {'median':>10s} {'min/med':>8s} {'max/med':>8s} {'out':>4s}"
      + (f" {'med/ref':>8s}" if ref else ""))
outside_figures, worst, off_ref = 0, (1.0, ""), 0
for k in names:
    vals = [r[k] for r in per_run]
    med = statistics.median(vals)
    if med == 0:
        continue
    lo, hi = min(vals) / med, max(vals) / med
    out = sum(1 for v in vals if abs(v / med - 1) > 0.10)
    outside_figures += out > 0
    for x in (lo, hi):
        if max(x, 1 / x) > max(worst[0], 1 / worst[0]):
            worst = (x, k)
    flag = "  <--" if out else ""
    refcol = ""
    if ref:
        if ref_fig.get(k):
            r = med / ref_fig[k]
            off_ref += abs(r - 1) > 0.10
            refcol = f" {r:8.3f}" + (" *" if abs(r - 1) > 0.10 else "")
        else:
            refcol = f" {'-':>8s}"
    print(f"{k:44s} {med:10.3f} {lo:8.3f} {hi:8.3f} {out:4d}{refcol}{flag}")
print(f"\nsummary: {len(names)} figures, {outside_figures} with a run outside ±10 % of the median of "
      f"{len(runs)}; widest: {worst[1]} at {worst[0]:.3f}x the median")
if ref:
    print(f"against the reference ({ref.get('mode', '?')}, {ref.get('seconds', 0):.1f} s): {off_ref} figures' "
          f"median more than 10 % from it (*)")
EOF

# Plans: one per profile, model and budget; the signature is each tier's strategy and the placement of
# every sub-layer.
if ((${#plans[@]} == 0)) && python3 -c 'import json,sys; sys.exit(0 if "gpu" in json.load(open(sys.argv[1])) else 1)' "${profiles[0]}"; then
  plans=("minitron-8b/F16:2G,4G,8G" "qwen3-8b/Q4_K:2G,4G,8G")
fi
for spec in "${plans[@]}"; do
  model=${spec%%:*}
  budgets=${spec#*:}
  if [[ -f $model ]]; then
    margs=(-m "$model")
  else
    margs=(--preset "${model%%/*}" --type "${model#*/}")
  fi
  for b in ${budgets//,/ }; do
    echo
    echo "plan $model at $b:"
    sigs=()
    decodes=()
    ref_sig=""
    for p in ${reference:+"$reference"} "${profiles[@]}"; do
      js=$("$ferry" plan "${margs[@]}" --vram "$b" --profile "$p" --json ${PLAN_ARGS:-} 2>/dev/null)
      if [[ -z $js ]]; then
        echo "  $(basename "$p"): plan failed"
        if [[ -n $reference && $p == "$reference" ]]; then ref_sig=fail; else sigs+=("fail"); fi
        continue
      fi
      line=$(python3 -c '
import hashlib, json, sys
d = json.load(sys.stdin)
tiers = d["tiers"]
where = "|".join(",".join(s["where"][0] for s in t["placement"]) for t in tiers)
sig = " ".join(f"t{t['"'"'tokens'"'"']}:{t['"'"'strategy'"'"']}" for t in tiers if t["tokens"] in (1, tiers[-1]["tokens"]))
h = hashlib.sha1(where.encode()).hexdigest()[:8]
pr = d["predicted"]
c = {k: sum(s["where"] == k for s in tiers[0]["placement"]) for k in ("resident", "streamed", "cpu")}
print(f"{sig} placements {h} | tier 1: {c['"'"'resident'"'"']} resident {c['"'"'streamed'"'"']} streamed {c['"'"'cpu'"'"']} cpu"
      f" | decode {pr['"'"'decode_tok_s'"'"']:.2f} tok/s, TTFT {pr['"'"'ttft_ms'"'"']:.0f} ms")
' <<<"$js")
      if [[ -n $reference && $p == "$reference" ]]; then
        echo "  reference $(basename "$p"): $line"
        ref_sig=${line%% |*}
        continue
      fi
      echo "  $(basename "$p"): $line"
      sigs+=("${line%% |*}")
      decodes+=("$(sed -n 's/.*decode \([0-9.]*\) tok\/s.*/\1/p' <<<"$line")")
    done
    python3 -c '
import statistics, sys
v = [float(x) for x in sys.argv[1:] if x]
if v:
    m = statistics.median(v)
    print(f"  predicted decode tok/s: median {m:.2f}, runs {min(v) / m:.3f}-{max(v) / m:.3f}x of it")
' "${decodes[@]}"
    if (($(printf '%s\n' "${sigs[@]}" | sort -u | wc -l) == 1)); then
      echo "  same plan from every run: yes"
    else
      echo "  same plan from every run: NO"
    fi
    if [[ -n $reference ]]; then
      same_ref=yes
      for x in "${sigs[@]}"; do [[ $x == "$ref_sig" ]] || same_ref=NO; done
      echo "  as the reference: $same_ref"
    fi
  done
done
