// CpuInfo: what this x86-64 CPU and OS let us use, detected at run time (cpuid + xgetbv, the
// affinity mask and /sys topology). The binary is built for baseline x86-64 and picks its kernels from
// this (kernels/cpu/dispatch), so the same build runs on any x86-64 machine. On non-x86 builds every
// feature reads false.
#pragma once

#include <cstdint>
#include <string>

namespace ferry {

struct CpuInfo {
  std::string vendor;      // "GenuineIntel", "AuthenticAMD", ...
  std::string model_name;  // brand string, e.g. "Intel(R) Xeon(R) Platinum 8480+"
  // Instruction sets usable here: the CPU has them AND the OS saves their register state.
  bool sse42 = false;
  bool avx = false;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool bmi2 = false;
  bool avx_vnni = false;     // VEX-encoded VPDPBUSD (Alder Lake+, Zen 5)
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  bool avx512fp16 = false;
  bool amx_tile = false;     // CPU supports AMX and the OS enabled its state (XCR0 bits 17/18)
  bool amx_int8 = false;
  bool amx_bf16 = false;
  int logical_cpus = 1;      // CPUs in this process's affinity mask
  int physical_cores = 1;    // distinct (package, core) pairs in the affinity mask

  // "avx512_vnni avx512_bf16 ..." — the features above that are present, for logs and profiles.
  std::string feature_string() const;
};

// Detected once per process (cheap after the first call; the result never changes).
const CpuInfo& cpu_info();

// Whether this process may execute AMX tile instructions: cpu_info() reports AMX-TILE and AMX-INT8
// (CPU and XCR0), and on Linux the kernel granted the tile data state (arch_prctl
// ARCH_REQ_XCOMP_PERM for XTILEDATA; without it the first tile instruction kills the process with
// SIGILL). The request is made once, on the first call (thread-safe); the grant holds for the whole
// process, its threads included. Elsewhere (non-Linux, non-x86) false.
bool amx_usable();

}  // namespace ferry
