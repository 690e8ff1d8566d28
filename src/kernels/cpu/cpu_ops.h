// CpuOps: the SIMD + thread-pool implementation of Ops (kernels/ops.h) on host memory. Kernels are
// chosen at run time from cpuid (scalar generic, AVX2+FMA+F16C, AVX-512 F/BW/VL/DQ/VNNI); the binary
// itself is built for baseline x86-64. (BF16 weights run on F32 FMAs of bf16-rounded activations:
// vdpbf16ps is no faster for decode and slower for prefill, bench/RESULTS_cpu.md.) Matmuls quantize the
// activations once per call as llama.cpp's CPU backend does (Q8_0 / Q8_1 / Q8_K / F16 / BF16 by weight
// type) and use integer or low-precision dot products, so results track llama.cpp's closely.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "kernels/ops.h"

namespace ferry::kernels {

// Dispatch levels, lowest first. A level is usable when the CPU and OS support it. kAvx2Vnni is kAvx2 with
// the 256-bit AVX-VNNI dot (vpdpbusd, VEX: Alder Lake and later client chips, Zen 5) in the quantized
// kernels; AVX-512 CPUs need not have it, so no level above it includes it. kAmx is kAvx512 plus AMX-INT8
// tile kernels for quantized prefill (the panel path); everything else is kAvx512's.
enum class CpuIsa : uint8_t { kScalar = 0, kAvx2 = 1, kAvx2Vnni = 2, kAvx512 = 3, kAmx = 4 };
inline constexpr CpuIsa kAllCpuIsas[] = {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx2Vnni, CpuIsa::kAvx512,
                                         CpuIsa::kAmx};

const char* cpu_isa_name(CpuIsa isa);  // "scalar", "avx2", "avx2-vnni", "avx512", "amx"
std::optional<CpuIsa> cpu_isa_from_name(std::string_view s);
bool cpu_isa_supported(CpuIsa isa);
CpuIsa best_cpu_isa();
// The level CpuOps uses unless told otherwise: best_cpu_isa() short of AMX (opt-in: slower than AVX-512
// where measured, docs/ARCHITECTURE.md §8), or the level the FERRY_CPU_ISA environment variable names
// when this CPU supports it (otherwise the best it has).
CpuIsa default_cpu_isa();
// The level a caller's choice names: "" or "auto" -> default_cpu_isa(); a level name -> that level, or
// an error (kInvalidArgument) naming the levels this CPU has when it lacks it or the name is unknown.
// (`--cpu-isa` of ferry run / bench / profile.)
Expected<CpuIsa> resolve_cpu_isa(std::string_view name);
// "scalar avx2 avx2-vnni avx512" — the levels this CPU supports.
std::string supported_cpu_isas();

// n_threads <= 0: the physical cores (ThreadPool's default).
std::unique_ptr<Ops> make_cpu_ops(int n_threads);
// A forced dispatch level (tests, benchmarks); must be supported (asserted).
std::unique_ptr<Ops> make_cpu_ops(int n_threads, CpuIsa isa);

}  // namespace ferry::kernels
