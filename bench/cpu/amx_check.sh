#!/bin/sh
# AMX vs AVX-512 on a host with AMX, in one command (issue 3):
#   bench/cpu/amx_check.sh BUILD_DIR [MODEL.gguf ...]          env: T=16 P=512 N=4 (threads, prompt, decode)
# BUILD_DIR holds test_kernels, ferry and (optional) bench_amx_prefill:
#   ninja -C BUILD_DIR test_kernels ferry bench_amx_prefill
# 1. what the CPU and OS allow (cpuid flags, the level ferry picks);
# 2. the AMX and matmul tests (AMX panel kernels == AVX-512 bit for bit; CpuOps at every level);
# 3. prefill matmuls on llama3-8b shapes, avx512 vs amx (bench_amx_prefill);
# 4. per model: ferry bench prefill / decode tok/s with FERRY_CPU_ISA=avx512 and amx.
T=${T:-16}; P=${P:-512}; N=${N:-4}
b=$1
[ -n "$b" ] && [ -x "$b/ferry" ] && [ -x "$b/test_kernels" ] || { echo "usage: $0 BUILD_DIR [MODEL.gguf ...]" >&2; exit 2; }
shift

echo "== cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
echo "   amx flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep amx | tr '\n' ' ')"

echo "== tests (test_kernels CpuAmx* and CpuMatmul*)"
"$b/test_kernels" --gtest_filter='CpuAmx*:*CpuMatmul*' --gtest_brief=1 2>&1 | tail -15

if [ -x "$b/bench_amx_prefill" ]; then
  echo "== prefill matmuls, $T threads, 512 tokens"
  "$b/bench_amx_prefill" "$T" 512
fi

for m in "$@"; do
  echo "== $(basename "$m"): ferry bench -t $T -p $P -n $N"
  for isa in avx512 amx; do
    FERRY_CPU_ISA=$isa "$b/ferry" bench -m "$m" --device cpu -t "$T" -p "$P" -n "$N" --no-membw 2>&1 | awk -v want="$isa" '
      /^device/ { isa = $NF }
      /^prefill/ { pp = $4 }
      /^decode/ { tg = $4 }
      /^error/ { print "   " want ": " $0 }
      END { if (pp != "") printf "   FERRY_CPU_ISA=%-6s kernels %-6s prefill %9s tok/s   decode %8s tok/s\n", want, isa, pp, tg }'
  done
done
