// CpuOps: the SIMD + thread-pool implementation of Ops (kernels/ops.h) on host memory. Kernels are
// chosen at run time from cpuid (scalar generic, AVX2+FMA+F16C, AVX-512 F/BW/VL/DQ/VNNI); the binary
// itself is built for baseline x86-64. (BF16 weights run on F32 FMAs of bf16-rounded activations:
// vdpbf16ps is no faster for decode and slower for prefill, bench/RESULTS_cpu.md.) Matmuls quantize the
// activations once per call as llama.cpp's CPU backend does (Q8_0 / Q8_1 / Q8_K / F16 / BF16 by weight
// type) and use integer or low-precision dot products, so results track llama.cpp's closely.
#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include "kernels/ops.h"

namespace ferry::kernels {

// Dispatch levels, lowest first. A level is usable when the CPU and OS support it. kAmx is kAvx512
// plus AMX-INT8 tile kernels for quantized prefill (the panel path); everything else is kAvx512's.
enum class CpuIsa : uint8_t { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAmx = 3 };

const char* cpu_isa_name(CpuIsa isa);                       // "scalar", "avx2", "avx512", "amx"
std::optional<CpuIsa> cpu_isa_from_name(std::string_view s);
bool cpu_isa_supported(CpuIsa isa);
CpuIsa best_cpu_isa();
// best_cpu_isa() short of AMX (opt-in: slower than AVX-512 where measured, docs/ARCHITECTURE.md §8), or
// the level the FERRY_CPU_ISA environment variable names (scalar|avx2|avx512|amx) when this CPU supports it.
CpuIsa default_cpu_isa();

// n_threads <= 0: the physical cores (ThreadPool's default).
std::unique_ptr<Ops> make_cpu_ops(int n_threads);
// A forced dispatch level (tests, benchmarks); must be supported (asserted).
std::unique_ptr<Ops> make_cpu_ops(int n_threads, CpuIsa isa);

}  // namespace ferry::kernels
