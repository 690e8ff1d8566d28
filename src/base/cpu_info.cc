// CpuInfo detection: cpuid leaves 1, 7.0, 7.1 and the brand string; xgetbv for the OS-enabled register
// state (an AVX-512 CPU under an OS or hypervisor that does not save ZMM state must not use AVX-512);
// the affinity mask and /sys/devices/system/cpu/*/topology for cores; the Linux AMX permission request.
#include "base/cpu_info.h"

#include <sched.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif

#include <cstdio>
#include <cstring>
#include <set>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define FERRY_X86 1
#endif

namespace ferry {

namespace {

#if FERRY_X86
struct Regs {
  uint32_t a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(uint32_t leaf, uint32_t sub = 0) {
  Regs r;
  __cpuid_count(leaf, sub, r.a, r.b, r.c, r.d);
  return r;
}

uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool bit(uint32_t v, int i) { return (v >> i) & 1u; }

void detect_isa(CpuInfo* ci) {
  const Regs l0 = cpuid(0);
  char vendor[13] = {};
  std::memcpy(vendor + 0, &l0.b, 4);
  std::memcpy(vendor + 4, &l0.d, 4);
  std::memcpy(vendor + 8, &l0.c, 4);
  ci->vendor = vendor;
  const uint32_t max_leaf = l0.a;

  const Regs ext = cpuid(0x80000000u);
  if (ext.a >= 0x80000004u) {
    char brand[49] = {};
    for (uint32_t i = 0; i < 3; ++i) {
      const Regs r = cpuid(0x80000002u + i);
      std::memcpy(brand + 16 * i + 0, &r.a, 4);
      std::memcpy(brand + 16 * i + 4, &r.b, 4);
      std::memcpy(brand + 16 * i + 8, &r.c, 4);
      std::memcpy(brand + 16 * i + 12, &r.d, 4);
    }
    std::string s = brand;
    while (!s.empty() && s.front() == ' ') s.erase(s.begin());
    while (!s.empty() && s.back() == ' ') s.pop_back();
    ci->model_name = s;
  }
  if (max_leaf < 1) return;

  const Regs l1 = cpuid(1);
  const bool osxsave = bit(l1.c, 27);
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool os_ymm = (xcr0 & 0x6) == 0x6;      // XMM + YMM state
  const bool os_zmm = (xcr0 & 0xe6) == 0xe6;    // + opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;  // XTILECFG + XTILEDATA

  ci->sse42 = bit(l1.c, 20);
  ci->avx = bit(l1.c, 28) && os_ymm;
  ci->fma = bit(l1.c, 12) && os_ymm;
  ci->f16c = bit(l1.c, 29) && os_ymm;
  if (max_leaf < 7) return;

  const Regs l7 = cpuid(7, 0);
  ci->avx2 = bit(l7.b, 5) && os_ymm;
  ci->bmi2 = bit(l7.b, 8);
  ci->avx512f = bit(l7.b, 16) && os_zmm;
  ci->avx512dq = bit(l7.b, 17) && os_zmm;
  ci->avx512bw = bit(l7.b, 30) && os_zmm;
  ci->avx512vl = bit(l7.b, 31) && os_zmm;
  ci->avx512vnni = bit(l7.c, 11) && os_zmm;
  ci->avx512fp16 = bit(l7.d, 23) && os_zmm;
  ci->amx_bf16 = bit(l7.d, 22) && os_amx;
  ci->amx_tile = bit(l7.d, 24) && os_amx;
  ci->amx_int8 = bit(l7.d, 25) && os_amx;
  if (l7.a >= 1) {
    const Regs l71 = cpuid(7, 1);
    ci->avx_vnni = bit(l71.a, 4) && os_ymm;
    ci->avx512bf16 = bit(l71.a, 5) && os_zmm;
  }
}
#else
void detect_isa(CpuInfo*) {}
#endif

// Reads a small integer from a sysfs file; -1 when absent.
int read_int(const char* path) {
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return -1;
  int v = -1;
  if (std::fscanf(f, "%d", &v) != 1) v = -1;
  std::fclose(f);
  return v;
}

void detect_cores(CpuInfo* ci) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return;
  std::set<std::pair<int, int>> cores;
  int logical = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    ++logical;
    char path[128];
    std::snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
    const int pkg = read_int(path);
    std::snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
    const int core = read_int(path);
    // Without topology information count every logical CPU as a core.
    cores.insert(core < 0 ? std::make_pair(-1, cpu) : std::make_pair(pkg, core));
  }
  ci->logical_cpus = logical > 0 ? logical : 1;
  ci->physical_cores = cores.empty() ? ci->logical_cpus : static_cast<int>(cores.size());
}

CpuInfo detect() {
  CpuInfo ci;
  detect_isa(&ci);
  detect_cores(&ci);
  return ci;
}

}  // namespace

std::string CpuInfo::feature_string() const {
  const std::pair<bool, const char*> feats[] = {
      {sse42, "sse4_2"},         {avx, "avx"},           {avx2, "avx2"},
      {fma, "fma"},              {f16c, "f16c"},         {bmi2, "bmi2"},
      {avx_vnni, "avx_vnni"},    {avx512f, "avx512f"},   {avx512bw, "avx512bw"},
      {avx512vl, "avx512vl"},    {avx512dq, "avx512dq"}, {avx512vnni, "avx512_vnni"},
      {avx512bf16, "avx512_bf16"}, {avx512fp16, "avx512_fp16"}, {amx_tile, "amx_tile"},
      {amx_int8, "amx_int8"},    {amx_bf16, "amx_bf16"},
  };
  std::string s;
  for (const auto& [on, name] : feats) {
    if (!on) continue;
    if (!s.empty()) s += ' ';
    s += name;
  }
  return s;
}

const CpuInfo& cpu_info() {
  static const CpuInfo info = detect();
  return info;
}

bool amx_usable() {
#if FERRY_X86 && defined(__linux__) && defined(__x86_64__)
  static const bool usable = [] {
    const CpuInfo& ci = cpu_info();
    if (!ci.amx_tile || !ci.amx_int8) return false;
    // Linux >= 5.16 hands out the 8 KB tile data state only on request; older kernels (no such
    // arch_prctl: EINVAL) cannot context-switch it, so AMX stays off there.
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
#else
  return false;
#endif
}

}  // namespace ferry
