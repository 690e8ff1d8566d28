// measure_read_gbs: a pool of threads sums 64-bit words of a 1 GiB buffer (pages touched first, so the
// first pass does not time page faults). Each thread takes contiguous 1 MiB chunks, like the matmul
// row split. The loop (16-byte loads at baseline flags, software prefetch) runs several times faster
// than one core's share of DRAM bandwidth, so memory is what it measures.
#include "kernels/cpu/membw.h"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "base/thread_pool.h"

namespace ferry::kernels {

namespace {

// Sums words, prefetching 4 KiB ahead as the decode kernels do (without it one core reads ~30% slower
// here, and the "host bandwidth" would be understated).
uint64_t sum_words(const uint64_t* p, size_t n) {
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __builtin_prefetch(p + i + 512, 0, 3);
    a0 += p[i] + p[i + 4];
    a1 += p[i + 1] + p[i + 5];
    a2 += p[i + 2] + p[i + 6];
    a3 += p[i + 3] + p[i + 7];
  }
  for (; i < n; ++i) a0 += p[i];
  return a0 + a1 + a2 + a3;
}

}  // namespace

double measure_read_gbs(int n_threads, size_t bytes, int reps) {
  constexpr size_t kChunk = size_t{1} << 20;
  bytes = (bytes + kChunk - 1) / kChunk * kChunk;
  std::unique_ptr<uint64_t[]> buf(new (std::nothrow) uint64_t[bytes / 8]);
  if (!buf) return 0.0;
  ThreadPool pool(n_threads);
  const int64_t n_chunks = static_cast<int64_t>(bytes / kChunk);
  // Touch every page from the pool (first-touch places pages near the threads that read them).
  pool.parallel_for(n_chunks, [&](int64_t b, int64_t e) {
    std::memset(buf.get() + b * (kChunk / 8), 1, static_cast<size_t>(e - b) * kChunk);
  });
  std::vector<uint64_t> sink(static_cast<size_t>(pool.size()), 0);
  double best = 0.0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(n_chunks, 1, [&](int64_t b, int64_t e, int ith) {
      sink[static_cast<size_t>(ith)] += sum_words(buf.get() + b * (kChunk / 8), static_cast<size_t>(e - b) * kChunk / 8);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0 && bytes / s / 1e9 > best) best = static_cast<double>(bytes) / s / 1e9;
  }
  volatile uint64_t keep = 0;
  for (uint64_t v : sink) keep = keep + v;
  (void)keep;
  return best;
}

}  // namespace ferry::kernels
