// This process's resident host memory, read from /proc/self/status (Linux; 0 elsewhere or when it
// cannot be read). Resident counts mapped file pages the process has touched (the model's mmap) as well
// as anonymous and pinned memory, so it is the figure to hold against "one host copy of the weights".
#pragma once

#include <cstdint>

namespace ferry {

uint64_t host_resident_bytes();       // VmRSS: now
uint64_t host_peak_resident_bytes();  // VmHWM: the most this process has held resident so far

}  // namespace ferry
