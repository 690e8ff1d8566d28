// Machine identity for profiles: CPU model, physical cores usable by this process, SIMD level (from
// base/cpu_info), host memory and last-level cache (sysconf, sysfs); anything unreadable degrades to
// a fallback rather than failing.
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "base/cpu_info.h"
#include "plan/profiler.h"

namespace ferry::plan {

namespace {

std::string simd_level() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) return "avx512";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
  if (__builtin_cpu_supports("sse4.2")) return "sse4.2";
  return "scalar";
#elif defined(__aarch64__)
  return "neon";
#else
  return "scalar";
#endif
}

uint64_t llc_bytes() {
  for (int idx = 4; idx >= 2; --idx) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(idx) + "/size");
    std::string s;
    if (f >> s && !s.empty()) {
      uint64_t v = 0;
      size_t i = 0;
      while (i < s.size() && s[i] >= '0' && s[i] <= '9') v = v * 10 + static_cast<uint64_t>(s[i++] - '0');
      if (i < s.size() && (s[i] == 'K' || s[i] == 'k')) v <<= 10;
      if (i < s.size() && (s[i] == 'M' || s[i] == 'm')) v <<= 20;
      if (v > 0) return v;
    }
  }
#ifdef _SC_LEVEL3_CACHE_SIZE
  const long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (v > 0) return static_cast<uint64_t>(v);
#endif
  return 0;
}

}  // namespace

MachineInfo detect_machine() {
  // Cores and SIMD from base's CpuInfo (cpuid + xgetbv + affinity), so the profile counts the same
  // cores the thread pool uses by default.
  const CpuInfo& ci = cpu_info();
  MachineInfo m;
  m.cpu_model = ci.model_name.empty() ? "unknown CPU" : ci.model_name;
  m.logical_cpus = std::max(1, ci.logical_cpus);
  m.cores = std::max(1, ci.physical_cores);
  if (ci.avx512f && ci.avx512bw) m.simd = "avx512";
  else if (ci.avx2 && ci.fma) m.simd = "avx2";
  else if (ci.sse42) m.simd = "sse4.2";
  else m.simd = simd_level();
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) m.host_memory_bytes = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  m.llc_bytes = llc_bytes();
  return m;
}

}  // namespace ferry::plan
