# Sourced by a device call script (run from the repo root on the GPU host; bench/README.md has an example):
#   BINS="ferry test_cuda_ops" . bench/device/carry_setup.sh
# unpacks the carried binaries named in $BINS (.devcarry/bin/NAME.xz) to /root/bin, puts the toolkit's cuBLAS
# on the path, and defines the steps calls share (synth_bg / synth_wait, cuda_tests / cuda_checks, ab,
# alt_ab, ncu_tma, full_table). Functions that write results take a folder; a call sets R=$OUT/r first.
# .devcarry is git-ignored: the run call must carry it (carry: [".devcarry/bin", ".devcarry/llama.cpp-src.tar.xz"]);
# without the binaries the call stops here rather than "measure" nothing.
mkdir -p /root/bin /root/m
for b in $BINS; do
  xz -dc .devcarry/bin/$b.xz > /root/bin/$b || { echo "error: .devcarry/bin/$b.xz not carried (run's carry argument)"; exit 1; }
done
chmod +x /root/bin/*
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -e "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" && break
done
export XDG_CACHE_HOME=/root/cache
T0=$(date +%s)
el() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
# synth_bg DIR TYPE...: llama3-8b synthetic models of those types into /root/m in the background;
# DIR/synth.done marks the end (synth_wait DIR waits for it, at most 300 s).
synth_bg() {
  local dir=$1; shift
  (for t in "$@"; do timeout 200 /root/bin/ferry synth --preset llama3-8b --type $t --fast -o /root/m/llama3-8b-$t.gguf \
     > $dir/synth_$t.log 2>&1; done; echo done > $dir/synth.done) &
}
synth_wait() { for i in $(seq 1 60); do [ -f $1/synth.done ] && break; sleep 5; done; el synth; }
# cuda_tests DIR: test_cuda_ops of the carried build into DIR/test_cuda_ops.txt; prints the verdict and any
# failure's lines.
cuda_tests() {
  timeout 150 /root/bin/test_cuda_ops > $1/test_cuda_ops.txt 2>&1; echo "test_cuda_ops rc $?" >> $1/test_cuda_ops.txt
  el tests; grep -E "^\[  PASSED|^\[  FAILED|Failure|Expected|Which is|nrmse|Value of" $1/test_cuda_ops.txt | head -20
  tail -1 $1/test_cuda_ops.txt
}
# cuda_checks DIR: cuda_tests and the whole-model GPU-vs-CPU check (check_cuda.sh) of the carried build.
cuda_checks() {
  cuda_tests $1
  BUILD=/root/bin SKIP_TESTS=1 SKIP_BENCH=1 REAL_MODELS=0 OUT=$1/check timeout 150 bash bench/device/check_cuda.sh \
    > $1/check.log 2>&1
  el check; cat $1/check/models.log 2>/dev/null || tail -20 $1/check.log
}
# ab NAME P N TYPES CONFIGS: decode_ab.sh of those configurations (after P tokens, N decoded) on the models in
# /root/m with the binaries in /root/bin, into $R/NAME; prints its summary.
ab() {
  TYPES="$4" CONFIGS="$5" P=$2 N=$3 LAYER=0 BIN=/root/bin MODELS=/root/m OUT=$R/$1 timeout 150 bash bench/device/decode_ab.sh > $R/ab_$1.log 2>&1
  cat $R/$1/ab/summary.txt
}
# A carried ferry_old (in $BINS) goes to /root/old/ferry, the build alt_ab compares against.
[ -f /root/bin/ferry_old ] && mkdir -p /root/old && mv /root/bin/ferry_old /root/old/ferry
# alt_ab TAG TYPES P N ROUNDS [ENV]: decode_ab.sh of the carried ferry (/root/bin, "bin") and of ferry_old
# (/root/old, "old") in turn, ROUNDS times (after P tokens, N decoded, with ENV), into $R/<bin|old>TAG<round>;
# prints each summary line as it comes.
alt_ab() {
  local tag=$1 types=$2 p=$3 n=$4 rounds=$5 env=${6:-} round b k
  for round in $(seq 1 $rounds); do
    for b in /root/bin /root/old; do
      k=$(basename $b)$tag$round
      TYPES="$types" CONFIGS="${k}:$env" P=$p N=$n LAYER=0 BIN=$b MODELS=/root/m OUT=$R/$k \
        timeout 90 bash bench/device/decode_ab.sh > /dev/null 2>&1
      cat $R/$k/ab/summary.txt
    done
  done
}
# ncu_tma DIR: Nsight Compute on mv_probe's bulk-copy kernel (`mv_probe tma1`, one launch after 20) into
# DIR/ncu.txt; prints occupancy, issue and memory lines.
ncu_tma() {
  local ncu
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  [ -n "$ncu" ] || { echo "no ncu"; return; }
  timeout 120 $ncu --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy -k regex:tma_q40 --launch-skip 20 \
    --launch-count 1 /root/bin/mv_probe tma1 > $1/ncu.txt 2>&1
  grep -v "^==PROF==" $1/ncu.txt | grep -E "tma_q40|Stall|stall|Issue|Eligible|Active Warps|Pipe|Throughput|Hit|Busy|Ipc|cycles|Registers|Shared|Theoretical|Achieved|Block Limit" | cut -c1-160 | head -60
}
# full_table DIR TYPES PROMPTS DEPTHS: the full-VRAM table (compare.sh FULL) with the llama.cpp that
# llama_cpp_build.sh is building on this machine (waits up to 240 s for it), the models in /root/m and the
# binaries in /root/bin, into DIR/full; runs until 585 s into the call and prints the summary's rows.
full_table() {
  local lb=
  for i in $(seq 1 80); do [ -f /root/lcb/done ] && break; sleep 3; done
  el "llama.cpp done: $([ -f /root/lcb/done ] && echo yes || echo no)"; tail -2 /root/lcb/build.log
  [ -f /root/lcb/done ] && lb=/root/lcb/build/bin/llama-bench
  FULL=1 FULL_TYPES="$2" FULL_PROMPTS="$3" FULL_LB_DEPTH=$4 KEEP=1 BIN=/root/bin LLAMA_BENCH=$lb MODELS=/root/m \
    OUT=$1/full timeout $(( 585 - $(date +%s) + T0 )) bash bench/device/compare.sh > $1/full.log 2>&1; el full
  cat $1/full/compare/summary.md 2>/dev/null | grep -E "^\||##|at " | head -30
}
