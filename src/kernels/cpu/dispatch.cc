// Dispatch: which levels this CPU supports (base/cpu_info), the FERRY_CPU_ISA override (parsed with the
// other environment options, base/env_options.h) and the --cpu-isa choice (resolve_cpu_isa), and the
// kernel tables. A table is built once per level by layering the fillers from the lowest level up
// (scalar, then AVX2, then AVX-VNNI or AVX-512, then AMX), so a level only overrides what it does better.
// AMX additionally needs the OS's permission for tile state (base/cpu_info: amx_usable), asked once
// the first time the level is considered: only with FERRY_CPU_ISA=amx (or when tests ask for the level).
#include <cstdlib>
#include <cstring>

#include "base/cpu_info.h"
#include "base/env_options.h"
#include "base/status.h"
#include "kernels/cpu/kernels.h"

namespace ferry::kernels {

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx2Vnni: return "avx2-vnni";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAmx: return "amx";
  }
  return "?";
}

std::optional<CpuIsa> cpu_isa_from_name(std::string_view s) {
  if (s == "scalar") return CpuIsa::kScalar;
  if (s == "avx2") return CpuIsa::kAvx2;
  if (s == "avx2-vnni") return CpuIsa::kAvx2Vnni;
  if (s == "avx512") return CpuIsa::kAvx512;
  if (s == "amx") return CpuIsa::kAmx;
  return std::nullopt;
}

bool cpu_isa_supported(CpuIsa isa) {
#if defined(__x86_64__)
  const CpuInfo& ci = cpu_info();
  const bool avx2 = ci.avx2 && ci.fma && ci.f16c;
  const bool avx512 = avx2 && ci.avx512f && ci.avx512bw && ci.avx512vl && ci.avx512dq && ci.avx512vnni;
  switch (isa) {
    case CpuIsa::kScalar: return true;
    case CpuIsa::kAvx2: return avx2;
    case CpuIsa::kAvx2Vnni: return avx2 && ci.avx_vnni;
    case CpuIsa::kAvx512: return avx512;
    case CpuIsa::kAmx: return avx512 && amx_usable();  // amx_usable: cpuid, XCR0 and the OS's permission
  }
  return false;
#else
  return isa == CpuIsa::kScalar;
#endif
}

namespace {

// The best vector level short of AMX (no tile-permission request).
CpuIsa best_vector_isa() {
  if (cpu_isa_supported(CpuIsa::kAvx512)) return CpuIsa::kAvx512;
  if (cpu_isa_supported(CpuIsa::kAvx2Vnni)) return CpuIsa::kAvx2Vnni;
  if (cpu_isa_supported(CpuIsa::kAvx2)) return CpuIsa::kAvx2;
  return CpuIsa::kScalar;
}

}  // namespace

CpuIsa best_cpu_isa() { return cpu_isa_supported(CpuIsa::kAmx) ? CpuIsa::kAmx : best_vector_isa(); }

// The AMX level is opt-in (FERRY_CPU_ISA=amx): its prefill matmuls are slower than the AVX-512 panel
// kernels (bench/RESULTS.md) - the per-group float epilogue, not the tile multiply, bounds both, and AMX
// adds a tile store and reload per group. Without the opt-in the tile permission is never requested. A
// level the CPU lacks falls back to the best one it has (`ferry bench` reports the kernels used).
CpuIsa default_cpu_isa() {
  const CpuIsa top = best_vector_isa();
  if (const std::string& name = env_options().cpu_isa; !name.empty()) {
    const std::optional<CpuIsa> want = cpu_isa_from_name(name);
    if (want && cpu_isa_supported(*want)) return *want;
  }
  return top;
}

std::string supported_cpu_isas() {
  std::string s;
  for (CpuIsa isa : kAllCpuIsas) {
    // AMX is listed from cpuid alone: asking the OS for the tile state is left to a run that uses it.
    const bool has = isa == CpuIsa::kAmx ? cpu_isa_supported(CpuIsa::kAvx512) && cpu_info().amx_tile && cpu_info().amx_int8
                                         : cpu_isa_supported(isa);
    if (has) s += (s.empty() ? "" : " ") + std::string(cpu_isa_name(isa));
  }
  return s;
}

Expected<CpuIsa> resolve_cpu_isa(std::string_view name) {
  if (name.empty() || name == "auto") return default_cpu_isa();
  const std::optional<CpuIsa> isa = cpu_isa_from_name(name);
  if (!isa)
    return make_error(ErrorCode::kInvalidArgument, "unknown CPU kernel level '%.*s' (expected auto, %s)",
                      static_cast<int>(name.size()), name.data(), "scalar, avx2, avx2-vnni, avx512 or amx");
  if (!cpu_isa_supported(*isa))
    return make_error(ErrorCode::kInvalidArgument, "this CPU cannot run the %s kernels (it has: %s)",
                      cpu_isa_name(*isa), supported_cpu_isas().c_str());
  return *isa;
}

namespace cpu {

namespace {

KernelTable build(CpuIsa isa) {
  KernelTable t;
  fill_scalar(&t);
#if defined(__x86_64__)
  if (isa >= CpuIsa::kAvx2) fill_avx2(&t);
  if (isa == CpuIsa::kAvx2Vnni) fill_avx2_vnni(&t);
  if (isa >= CpuIsa::kAvx512) {
    fill_avx512(&t);
    fill_avx512_panel(&t);
    fill_avx512_kquants(&t);
    fill_avx512_legacy(&t);
  }
  if (isa >= CpuIsa::kAmx) fill_amx(&t);
#endif
  t.isa = isa;
  return t;
}

}  // namespace

const KernelTable& kernel_table(CpuIsa isa) {
  FERRY_ASSERT_MSG(cpu_isa_supported(isa), "kernel_table: dispatch level not supported by this CPU");
  static const KernelTable scalar = build(CpuIsa::kScalar);
  switch (isa) {
    case CpuIsa::kScalar: return scalar;
    case CpuIsa::kAvx2: {
      static const KernelTable avx2 = build(CpuIsa::kAvx2);
      return avx2;
    }
    case CpuIsa::kAvx2Vnni: {
      static const KernelTable avx2_vnni = build(CpuIsa::kAvx2Vnni);
      return avx2_vnni;
    }
    case CpuIsa::kAvx512: {
      static const KernelTable avx512 = build(CpuIsa::kAvx512);
      return avx512;
    }
    case CpuIsa::kAmx: {
      static const KernelTable amx = build(CpuIsa::kAmx);
      return amx;
    }
  }
  return scalar;
}

}  // namespace cpu
}  // namespace ferry::kernels
