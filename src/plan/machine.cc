// Machine identity for profiles: CPU model, physical cores usable by this process, SIMD level, host
// memory and last-level cache. Linux sources (/proc/cpuinfo, sched_getaffinity, sysconf, sysfs);
// anything unreadable degrades to a fallback rather than failing.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "plan/profiler.h"

namespace ferry::plan {

namespace {

std::string trim(std::string s) {
  const size_t a = s.find_first_not_of(" \t");
  const size_t b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

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
  MachineInfo m;
  cpu_set_t set;
  CPU_ZERO(&set);
  int allowed = 0;
  if (sched_getaffinity(0, sizeof set, &set) == 0) allowed = CPU_COUNT(&set);
  if (allowed <= 0) allowed = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  m.logical_cpus = allowed;

  // Physical cores: distinct (physical id, core id) among the CPUs this process may use.
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  int processor = -1, phys = 0;
  std::set<std::pair<int, int>> cores;
  while (std::getline(f, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trim(line.substr(0, colon));
    const std::string val = trim(line.substr(colon + 1));
    if (key == "processor") processor = std::atoi(val.c_str());
    else if (key == "model name" && m.cpu_model.empty()) m.cpu_model = val;
    else if (key == "physical id") phys = std::atoi(val.c_str());
    else if (key == "core id" && processor >= 0 && processor < CPU_SETSIZE && CPU_ISSET(processor, &set))
      cores.insert({phys, std::atoi(val.c_str())});
  }
  m.cores = cores.empty() ? allowed : std::min<int>(allowed, static_cast<int>(cores.size()));
  if (m.cpu_model.empty()) m.cpu_model = "unknown CPU";
  m.simd = simd_level();
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) m.host_memory_bytes = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  m.llc_bytes = llc_bytes();
  return m;
}

}  // namespace ferry::plan
