// Host memory bandwidth, measured: n_threads threads stream-read a buffer larger than any last-level
// cache (default 1 GiB) with two loops (with and without software prefetch), `reps` passes each, and
// the best pass is reported in GB/s (1e9 bytes/s). This is the
// "host_gb_s" that decode speed is compared against (ferry bench, bench/RESULTS_cpu.md).
#pragma once

#include <cstddef>

namespace ferry::kernels {

// n_threads <= 0: physical cores. Returns 0 if the buffer cannot be allocated.
double measure_read_gbs(int n_threads, size_t bytes = size_t{1} << 30, int reps = 3);

}  // namespace ferry::kernels
