#!/usr/bin/env bash
# Issue 29's MoE table against llama.cpp, as a queue that survives the 10-minute call limit: each call runs the
# jobs not done yet (markers in /root/state) until its deadline, and every call's tarball holds all results so
# far (/root/res). Run it in back-to-back calls on one warm machine until its log says "queue empty".
#   bash bench/device/moe_queue.sh                       # the default queue (below)
#   QUEUE="skew q235" BUDGET=575 bash bench/device/moe_queue.sh
# Jobs (each runs once; a job that does not fit the time left waits for the next call):
#   setup      llama.cpp (PEER_TARGETS: llama-bench, llama-server, llama-batched-bench; none: no build) in the background;
#              the synthetic models of SETUP_MODELS: q30 = qwen3-30b-a3b Q4_K (/root/moe/q30.gguf), goss20 =
#              gpt-oss-20b (goss20.gguf), qwen3-8b = qwen3-8b Q4_K (/root/m), minitron = minitron-8b F16 (/root/m), l8q4 / l8q8 = llama3-8b
#              Q4_K / Q8_0 (/root/m/llama3-8b-L32-*.gguf); PEER_AVX2=1 also builds an AVX2 CPU llama-bench (/root/lca)
#   mmatests   test_cuda_ops' expert tests alone (CudaMoeMma*, CudaMoe*, CudaGptOss*: the tensor-core prefill kernel)
#   cudatests  test_cuda_ops (before the peer's build is done: it shares the CPU, not the GPU)
#   mma        bench_cuda_ops moe: the expert kernels of a qwen3-30b-a3b and a gpt-oss-20b layer at 1..1024
#              tokens, tensor-core prefill kernel on and off, in one process
#   waitbuild  waits for the peer's build (nothing below is measured while it compiles)
#   prof       ferry profile --quick (the cached profile every row plans from)
#   2G         q30 and goss20 at 2 GB: ferry, llama-bench -fitt, llama-bench -ngl 99 -ot exps=CPU
#   avx2       issue 33: --cpu-isa avx2 against an AVX2 llama-bench, 16 threads (PEER_AVX2=1; l8q4 l8q8)
#   q30r       q30 alone at 2 and 8 GB: ferry and llama-bench -fitt
#   8G 4G      q30 (and goss20 at 4 GB): ferry and llama-bench -fitt
#   par        ferry bench --parallel 16 / 64 on q30 at 8 GB, and llama-batched-bench near the same VRAM
#              (--n-cpu-moe NCM, default 31: its peak is in the log)
#   skew       q30 with --route-skew 1 at 2 GB, without and with --expert-cache 512M
#   q235       qwen3-235b-a22b-shaped Q2_K with 8 and 16 layers at 2 GB (decode per layer, for extrapolation)
#   b512 copy  goss20 at 2 GB with -b 512; q30 at 2 GB with --pin copy (load time and host memory)
#   repeat     bench/profile_repeat.sh -n 5 (issue 28)
#   cpuprobe   bench/cpu/moe_stream.cc: one token's routed experts on the CPU at 16 threads (memory kinds, variants)
#   ab         two ferry builds on q30 at AB_BUDGETS (default 2 8) GB, alternating (AB_OLD: the other binary)
#   dq8 dm1 dm4  issue 27's dense hybrid table: qwen3-8b Q4_K at 1K + 4K prompts, minitron-8b F16 at 1K, at 4K
#   tl         q30 at 2 and 8 GB with --timeline and --explain, and on the CPU alone (the MoE step against its plan)
# Rows: ferry `bench -m M --vram BG -p 1024 -n 64 --json --explain`; llama.cpp `llama-bench -m M -fitt <free MiB -
# B> -fa 1 -p 1024 -n 64 -r 1 -o json` (its TTFT: 1024 / prefill tok/s); each under an nvidia-smi sampler
# (peak above the idle card, MiB). Needs .devcarry/bin/{ferry,test_cuda_ops}.xz (and bench_cuda_ops.xz for mma,
# with EXTRA_BINS=bench_cuda_ops) and
# .devcarry/llama.cpp-src.tar.xz (bench/README.md, "On the GPU host").
set -u
BINS="ferry test_cuda_ops ${EXTRA_BINS:-}" . bench/device/carry_setup.sh
F=/root/bin/ferry; R=/root/res; ST=/root/state; mkdir -p "$R" "$ST" /root/moe /root/m
END=$(( T0 + ${BUDGET:-575} ))
QUEUE=${QUEUE:-setup mmatests cudatests waitbuild prof mma 2G 8G 4G par skew q235 b512 copy repeat}
LOG=$R/log.txt
left() { echo $(( END - $(date +%s) )); }
say() { el "$*" | tee -a "$LOG"; }
say "call: build $(cat .devcarry/bin/VERSION 2>/dev/null), $(nvidia-smi -L | head -1), $(left) s"
# A peer build still running: llama.cpp with CUDA (/root/lcb) or the AVX2 CPU build (/root/lca).
building() { local d pid state
  for d in /root/lcb /root/lca; do pid=$(cat $d/pid 2>/dev/null)
    state=$([ -n "$pid" ] && awk '{print $3}' /proc/$pid/stat 2>/dev/null); [ -n "$state" ] && [ "$state" != Z ] && return 0
  done; return 1; }
# job TAG EST CMD...: CMD once across calls, when EST seconds are left.
job() { local tag=$1 est=$2; shift 2
  [ -f "$ST/$tag.done" ] && return 0
  [ "$(left)" -lt "$est" ] && { say "later: $tag ($(left) s left, needs $est)"; return 1; }
  "$@" && touch "$ST/$tag.done"; }
BASE=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
free_mib() { nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1; }
peak_run() { local pf=$1; shift
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 50 > "$pf.s" 2>/dev/null & local mon=$!
  "$@"; local rc=$?; kill $mon; wait $mon 2>/dev/null; echo $(( $(sort -n "$pf.s" | tail -1) - BASE )) > "$pf"
  rm -f "$pf.s"; return $rc; }
fr() { python3 -c "
import json,sys; j=json.load(open(sys.argv[1])); p=j['plan'].get('pin',{}); c=j['plan'].get('expert_cache',{})
print('pp %.1f tg %.2f TTFT %.0f ms nb %d proc_peak %.3f GB host_peak %.2f GiB / file %.2f GiB load %.1f s reg %.2f GiB%s' % (
  j['prefill_tok_s'], j['decode_tok_s'], j['ttft_ms'], j['n_batch'], j['vram_peak_process_bytes']/1e9,
  j['host_peak_rss_bytes']/2**30, j['model_file_bytes']/2**30, j['load_ms']/1e3, p.get('registered_bytes',0)/2**30,
  ' cache hit %.3f promotions %d' % (c['hit_rate'], c['promotions']) if c else ''))" "$1" 2>&1 | tail -1; }
lb() { python3 -c "
import json,sys
r=json.load(open(sys.argv[1])); pp=[x['avg_ts'] for x in r if x['n_prompt']>0]; tg=[x['avg_ts'] for x in r if x['n_gen']>0]
print('pp %.1f tg %.2f TTFT %.0f ms' % (pp[0], tg[0], 1024e3/pp[0]))" "$1" 2>&1 | tail -1; }
LB=/root/lcb/build/bin/llama-bench
# A prebuilt llama-bench's libraries, only when the host lacks some (.devcarry/lblib: libgomp, a stub libnccl
# that one GPU never calls), after the host's own paths.
lb_libs() {
  [ -x $LB ] && [ -d .devcarry/lblib ] && ldd $LB | grep -q "not found" &&
    export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$PWD/.devcarry/lblib"
  return 0; }
lb_libs
# ferry M GB TAG [ARGS]; fitt M GB TAG; ot M TAG
ferry_row() { local m=$1 gb=$2 tag=$3; shift 3
  peak_run "$R/f_$tag.peak" timeout 150 $F bench -m /root/moe/$m.gguf --vram ${gb}G -p 1024 -n 64 --json --explain "$@" \
    > "$R/f_$tag.json" 2> "$R/f_$tag.err"
  say "ferry $tag: $(fr "$R/f_$tag.json") smi $(cat "$R/f_$tag.peak") MiB"; }
fitt_row() { local m=$1 gb=$2 tag=$3 margin; margin=$(( $(free_mib) - gb * 1024 ))
  peak_run "$R/l_$tag.peak" timeout 170 $LB -m /root/moe/$m.gguf -fitt $margin -fa 1 -p 1024 -n 64 -r 1 -o json \
    > "$R/l_$tag.json" 2> "$R/l_$tag.err"
  say "llama.cpp -fitt $margin $tag: $(lb "$R/l_$tag.json") smi $(cat "$R/l_$tag.peak") MiB"; }
ot_row() { local m=$1 tag=$2
  peak_run "$R/o_$tag.peak" timeout 170 $LB -m /root/moe/$m.gguf -ngl 99 -ot exps=CPU -fa 1 -p 1024 -n 64 -r 1 -o json \
    > "$R/o_$tag.json" 2> "$R/o_$tag.err"
  say "llama.cpp -ot exps=CPU $tag: $(lb "$R/o_$tag.json") smi $(cat "$R/o_$tag.peak") MiB"; }
synth() { local out=$1; shift
  [ -f "$out" ] || { timeout 300 $F synth "$@" --fast -o "$out.part" > "$R/synth_$(basename "$out").log" 2>&1 && mv "$out.part" "$out"; }; }

setup() {
  if [ -f .devcarry/bin/lb.xz ]; then
    # llama-bench prebuilt on the development machine (bench/README.md): no build here. The libraries it
    # loads that the host lacks (libgomp, libnccl: a stub) come in .devcarry/lblib.
    mkdir -p /root/lcb/build/bin && xz -dc .devcarry/bin/lb.xz > $LB && chmod +x $LB && touch /root/lcb/done
    say "prebuilt llama-bench: $(ldd $LB | grep 'not found' | tr -s ' \t' ' ' | tr '\n' ';')"
    lb_libs
    say "prebuilt llama-bench: $(ldd $LB | grep -c 'not found') libraries missing; $($LB --help 2>&1 | head -1)"
  elif [ "${PEER_TARGETS:-}" != none ]; then
    TARGETS="${PEER_TARGETS:-llama-bench llama-server llama-batched-bench}" JOBS=12 bash bench/device/llama_cpp_build.sh
  fi
  # PEER_AVX2=1: llama-bench for the CPU alone at the AVX2 level (the avx2 job), /root/lca, ~2 min on 4 jobs.
  if [ "${PEER_AVX2:-0}" = 1 ] && [ ! -f /root/lca/done ]; then
    mkdir -p /root/lca; [ -d /root/lca/llama.cpp ] || tar -C /root/lca -xJf .devcarry/llama.cpp-src.tar.xz
    (setsid nohup bash -c "echo \$\$ > /root/lca/pid; cmake -S /root/lca/llama.cpp -B /root/lca/build -G Ninja \
      -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
      -DGGML_F16C=ON -DGGML_BMI2=ON && nice -n 5 ninja -C /root/lca/build -j4 llama-bench && touch /root/lca/done" \
      > /root/lca/build.log 2>&1 < /dev/null &)  # not a child: setup's `wait` is for the models
  fi
  for m in ${SETUP_MODELS:-q30 goss20 qwen3-8b}; do
    case $m in
      q30) synth /root/moe/q30.gguf --preset qwen3-30b-a3b --type Q4_K & ;;
      goss20) synth /root/moe/goss20.gguf --preset gpt-oss-20b --type Q8_0 & ;;
      qwen3-8b) synth /root/m/qwen3-8b-Q4_K.gguf --preset qwen3-8b --type Q4_K & ;;
      minitron) synth /root/m/minitron-8b-F16.gguf --preset minitron-8b --type F16 & ;;
      l8q4) synth /root/m/llama3-8b-L32-Q4_K.gguf --preset llama3-8b --type Q4_K & ;;
      l8q8) synth /root/m/llama3-8b-L32-Q8_0.gguf --preset llama3-8b --type Q8_0 & ;;
      *) say "setup: unknown model $m" ;;
    esac
  done
  wait; [ -f /root/moe/q30.gguf ] && ln -sf /root/moe/q30.gguf /root/m/qwen3-30b-a3b-Q4_K.gguf; sync
  say "models: $(ls -la /root/moe /root/m | grep gguf | awk '{print $9, $5}' | tr '\n' ' ')"; }
cudatests() {
  timeout 300 /root/bin/test_cuda_ops > "$R/test_cuda_ops.txt" 2>&1; local rc=$?
  say "test_cuda_ops rc $rc: $(grep -cE '^\[       OK' "$R/test_cuda_ops.txt") ok, $(grep -cE '^\[  FAILED' "$R/test_cuda_ops.txt") failed lines"
  [ $rc = 0 ]; }
mmatests() {
  timeout 200 /root/bin/test_cuda_ops --gtest_filter='CudaMoeMma*:CudaMoe*:CudaGptOss*' > "$R/test_moe.txt" 2>&1
  local rc=$?
  say "expert tests rc $rc: $(grep -cE '^\[       OK' "$R/test_moe.txt") ok, $(grep -cE '^\[  FAILED' "$R/test_moe.txt") failed lines"
  grep -E "Failure|nrmse|FAILED" "$R/test_moe.txt" | head -8 | tee -a "$LOG"
  [ $rc = 0 ]; }
mma() { [ -x /root/bin/bench_cuda_ops ] || { say "mma: no bench_cuda_ops (EXTRA_BINS=bench_cuda_ops)"; return 1; }
  timeout 200 /root/bin/bench_cuda_ops moe > "$R/bench_moe.txt" 2>&1; say "bench_cuda_ops moe rc $?"
  grep -vE '^RESULT' "$R/bench_moe.txt" | tail -16 | tee -a "$LOG"; }
waitbuild() { while building && [ "$(left)" -gt 30 ]; do sleep 5; done
  say "llama.cpp build: $([ -f /root/lcb/done ] && echo done || echo NOT done)"; ! building; }
prof() { timeout 120 $F profile --quick > "$R/profile.txt" 2>&1; say "profile rc $?"; }
two() { ferry_row q30 2 q30_2G; fitt_row q30 2 q30_2G; ot_row q30 q30_2G
  ferry_row goss20 2 goss20_2G; fitt_row goss20 2 goss20_2G; ot_row goss20 goss20_2G; }
eight() { ferry_row q30 8 q30_8G; fitt_row q30 8 q30_8G; }
q30r() { ferry_row q30 2 q30_2G; fitt_row q30 2 q30_2G; ferry_row q30 8 q30_8G; fitt_row q30 8 q30_8G; }
four() { ferry_row q30 4 q30_4G; fitt_row q30 4 q30_4G; ferry_row goss20 4 goss20_4G; fitt_row goss20 4 goss20_4G; }
par() {
  for np in 16 64; do
    timeout 150 $F bench -m /root/moe/q30.gguf --vram 8G -p 256 -n 32 --parallel $np --json > "$R/f_q30_8G_np$np.json" \
      2> "$R/f_q30_8G_np$np.err"
    say "ferry q30 8G --parallel $np: $(fr "$R/f_q30_8G_np$np.json")"
  done
  # llama-batched-bench ignores -fitt (it loaded the whole 16 GiB model, 18077 MiB peak, on the H100): the
  # experts of the first NCM layers stay on the CPU instead; 31 of 48 peaked at 8051 MiB at 16 sequences.
  peak_run "$R/l_q30_8G_batched.peak" timeout 200 /root/lcb/build/bin/llama-batched-bench -m /root/moe/q30.gguf \
    -ngl 99 --n-cpu-moe "${NCM:-31}" -fa on -c $(( 64 * 288 )) -b 2048 -ub 512 -npp 256 -ntg 32 -npl 16,64 \
    > "$R/l_q30_8G_batched.txt" 2>&1
  say "llama-batched-bench --n-cpu-moe ${NCM:-31} rc $?, smi $(cat "$R/l_q30_8G_batched.peak") MiB: $(grep -E '^\|' "$R/l_q30_8G_batched.txt" | tail -2 | tr '\n' ' ')"; }
skew() {
  synth /root/moe/q30s1.gguf --preset qwen3-30b-a3b --type Q4_K --route-skew 1
  for c in 0 512M; do
    timeout 150 $F bench -m /root/moe/q30s1.gguf --vram 2G -p 512 -n 256 --expert-cache $c --json \
      > "$R/f_q30s1_2G_c$c.json" 2> "$R/f_q30s1_2G_c$c.err"
    say "q30 skew 1, 2G, --expert-cache $c: $(fr "$R/f_q30s1_2G_c$c.json")"
  done
  rm -f /root/moe/q30s1.gguf; }
q235() {
  for L in 8 16; do
    synth /root/moe/q235_L$L.gguf --preset qwen3-235b-a22b --type Q2_K --layers $L
    timeout 150 $F bench -m /root/moe/q235_L$L.gguf --vram 2G -p 256 -n 32 --json > "$R/f_q235_L${L}_2G.json" \
      2> "$R/f_q235_L${L}_2G.err"
    say "qwen3-235b-a22b shape, $L layers, 2G: $(fr "$R/f_q235_L${L}_2G.json")"
  done; }
b512() { ferry_row goss20 2 goss20_2G_b512 -b 512; }
copy() { ferry_row q30 2 q30_2G_copy --pin copy; }
# One decode step's lanes on the GPU host (issue 29: the MoE step measured over its plan): q30 at 2 and 8 GB with
# --timeline (an SVG whose span tooltips carry each span's times) and --explain, then the CPU alone (the CPU
# expert kernels' decode rate against the host's bandwidth).
tl() {
  for gb in 2 8; do
    timeout 170 $F bench -m /root/moe/q30.gguf --vram ${gb}G -p 256 -n 32 --json --explain \
      --timeline "$R/tl_q30_${gb}G.svg" > "$R/tl_q30_${gb}G.json" 2> "$R/tl_q30_${gb}G.err"
    say "ferry q30 ${gb}G timeline: $(fr "$R/tl_q30_${gb}G.json")"
  done
  timeout 150 $F bench -m /root/moe/q30.gguf --device cpu -p 32 -n 32 --json > "$R/cpu_q30.json" 2> "$R/cpu_q30.err"
  say "ferry q30 --device cpu: $(python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print('pp %.1f tg %.2f' % (j['prefill_tok_s'], j['decode_tok_s']))" "$R/cpu_q30.json" 2>&1 | tail -1)"
  # The CPU kernels alone at 16 threads (EXTRA_BINS=bck: bench_cpu_kernels): routed experts' and a dense
  # layer's decode GB/s, the pool's wake-up latency, the host's read bandwidth.
  if [ -x /root/bin/bck ]; then
    FERRY_BENCH_THREADS=16 timeout 120 /root/bin/bck --benchmark_min_time=0.5s \
      --benchmark_filter='moe_decode/qwen3-30b-a3b/avx512|decode_layers/Q4_K/avx512|pool_dispatch|membw' > "$R/bck.txt" 2>&1
    grep -E "moe_decode|decode_layers|pool_dispatch/16|membw" "$R/bck.txt" | tee -a "$LOG"
  fi; }
# bench/cpu/moe_stream.cc at 16 (and 8, 12) threads: the routed experts of one token per call, the memory
# in 4 KiB pages, in the page cache (as the hybrid executor's mmap) and in huge pages, 80 us between calls
# (EXTRA_BINS=moe_stream; VARIANTS when the binary was linked with a kernel file that defines them).
cpuprobe() {
  # PROBE_BINS: moe_stream builds to compare (e.g. "moe_stream_old moe_stream"), each at 16 threads; the
  # last one also at 8 and 12.
  local bins=${PROBE_BINS:-moe_stream} b
  for b in $bins; do [ -x /root/bin/$b ] || { say "cpuprobe: no /root/bin/$b (EXTRA_BINS)"; return 1; }; done
  { for b in $bins; do
      for mem in 4k file; do echo "== $b"; MEM=$mem GAP_US=80 VARIANTS=${PROBE_VARIANTS:-0} timeout 120 /root/bin/$b 16 6 5; done
    done
    for t in 8 12; do MEM=4k GAP_US=80 timeout 120 /root/bin/$b $t 6 5; done
    [ -x /root/bin/bck ] && FERRY_BENCH_THREADS=16 timeout 60 /root/bin/bck --benchmark_filter='pool_after_idle|pool_dispatch'
  } > "$R/moe_stream.txt" 2>&1
  grep -E "==|variant|threads=|real_time" "$R/moe_stream.txt" | tee -a "$LOG"; }
# A/B of two ferry builds (AB_OLD, default /root/bin/ferry_old, against $F) on q30 at AB_BUDGETS (GB), alternating.
ab() { local old=${AB_OLD:-/root/bin/ferry_old}
  for gb in ${AB_BUDGETS:-2 8}; do
    for side in old new; do
      local bin=$F; [ $side = old ] && bin=$old
      timeout 150 $bin bench -m /root/moe/q30.gguf --vram ${gb}G -p 512 -n 64 --json --explain > "$R/ab_${side}_${gb}G.json" 2> "$R/ab_${side}_${gb}G.err"
      say "ab $side q30 ${gb}G: $(fr "$R/ab_${side}_${gb}G.json")"
    done
  done; }
# Issue 27's dense hybrid table (bench/device/compare.sh HYB) at 2 / 4 / 8 GB, one job per model and prompt
# length so it resumes across calls: dq8 = qwen3-8b Q4_K (1K and 4K prompts), dm1 / dm4 = minitron-8b F16 at
# 1K / 4K; DENSE_GEN generated tokens (default 32). Needs SETUP_MODELS to include qwen3-8b / minitron.
dense() { local spec=$1 prompts=$2 tag=$3
  BIN=/root/bin LLAMA_BENCH=$LB PROFILE_CACHE=/root/cache OUT=$R/$tag HYB=$spec BUDGETS_GB="2 4 8" PROMPTS="$prompts" \
    GEN=${DENSE_GEN:-32} TIME_LIMIT=$(( $(left) - 40 )) timeout $(( $(left) - 10 )) bash bench/device/compare.sh > "$R/$tag.log" 2>&1
  grep -E "^\| (ferry|llama)|time limit" "$R/$tag/compare/summary.md" | tee -a "$LOG"
  ! grep -q "time limit" "$R/$tag/compare/summary.md"; }
# Issue 33 on the GPU host: ferry --cpu-isa avx2 against llama-bench built for AVX2 (PEER_AVX2=1), 16 threads,
# llama3-8b Q4_K and Q8_0 (SETUP_MODELS l8q4 l8q8), prefill 128 / 512 and decode 32, 2 alternating runs each.
avx2() { [ -x /root/lca/build/bin/llama-bench ] || { say "avx2: no AVX2 llama-bench (PEER_AVX2=1 in setup)"; return 1; }
  FERRY=$F LLAMA_BENCH=/root/lca/build/bin/llama-bench T=16 R=2 SHAPES=llama3-8b TYPES="Q4_K Q8_0" MODELS_DIR=/root/m \
    LAYERS=32 timeout $(( $(left) - 10 )) bash bench/cpu_avx2_table.sh "$R/avx2" > "$R/avx2.md" 2> "$R/avx2.err"
  local rc=$?; say "avx2 table rc $rc"; tee -a "$LOG" < "$R/avx2.md"; [ $rc = 0 ]; }
dq8() { dense qwen3-8b:Q4_K "${DQ8_PROMPTS:-1024 4096}" dq8; }
dm1() { dense minitron-8b:F16 1024 dm1; }
dm4() { dense minitron-8b:F16 4096 dm4; }
repeat() { timeout 250 bash bench/profile_repeat.sh -n 5 -f $F -o "$R/prof5" > "$R/prof5.txt" 2>&1; say "profile_repeat rc $?"
  grep -iE "outside|same plan|widest" "$R/prof5.txt" | head -12 | tee -a "$LOG"; }

declare -A EST=([setup]=320 [mmatests]=200 [mma]=200 [cudatests]=300 [waitbuild]=60 [prof]=100 [2G]=420 [8G]=160 [4G]=320 [par]=330 [skew]=330
                [q235]=420 [b512]=80 [copy]=90 [repeat]=250 [tl]=300 [cpuprobe]=120 [ab]=240
                [dq8]=${DQ8_EST:-300} [dm1]=300 [dm4]=300 [q30r]=240 [avx2]=240)
declare -A FN=([setup]=setup [mmatests]=mmatests [mma]=mma [cudatests]=cudatests [waitbuild]=waitbuild [prof]=prof [2G]=two [8G]=eight [4G]=four
               [par]=par [skew]=skew [q235]=q235 [b512]=b512 [copy]=copy [repeat]=repeat [tl]=tl [cpuprobe]=cpuprobe [ab]=ab
               [dq8]=dq8 [dm1]=dm1 [dm4]=dm4 [q30r]=q30r [avx2]=avx2)
for j in $QUEUE; do
  [ -n "${FN[$j]:-}" ] || { say "unknown job $j"; continue; }
  # Nothing is measured while the peer compiles.
  # mma times GPU kernels alone (the build only slows its launches' host side).
  case $j in setup|mmatests|cudatests|waitbuild|mma) ;; *) building && { say "later: $j (llama.cpp still building)"; continue; } ;; esac
  job "$j" "${EST[$j]}" "${FN[$j]}"
done
pending=""; for j in $QUEUE; do [ -f "$ST/$j.done" ] || pending="$pending $j"; done
say "${pending:+pending:$pending}${pending:-queue empty}"
cd "$R" && tar czf "$OUT/res.tgz" . && cp "$LOG" "$OUT/log.txt"
