#include "base/host_memory.h"

#include <cstdio>
#include <cstring>

namespace ferry {

namespace {

// The value of a "Key:   N kB" line of /proc/self/status, in bytes.
uint64_t status_kb(const char* key) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  const size_t n = std::strlen(key);
  uint64_t kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, key, n) == 0 && line[n] == ':') {
      unsigned long long v = 0;
      if (std::sscanf(line + n + 1, "%llu", &v) == 1) kb = v;
      break;
    }
  }
  std::fclose(f);
  return kb * 1024;
}

}  // namespace

uint64_t host_resident_bytes() { return status_kb("VmRSS"); }
uint64_t host_peak_resident_bytes() { return status_kb("VmHWM"); }

}  // namespace ferry
