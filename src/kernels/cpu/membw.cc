// measure_read_gbs: a pool of threads sums 64-bit words of a 1 GiB buffer (pages touched first, so the
// first pass does not time page faults). Each thread takes contiguous 1 MiB chunks, like the matmul
// row split. The widest loads this CPU has (AVX-512, AVX2, else scalar words), with and without a
// software prefetch 4 KiB ahead; the best pass of either is reported. One core's read rate depends on
// the loads: on a Sapphire Rapids class core 64-byte loads read clearly faster than scalar words with
// prefetch, so a scalar loop would understate the host (and overstate the fraction of it that decode
// reaches). The buffer is in transparent huge pages where the kernel allows them, as the CPU engine's
// weights are (engine/huge_weights.h): the best read rate the host offers.
#include "kernels/cpu/membw.h"

#include <sys/mman.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "base/cpu_info.h"
#include "base/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ferry::kernels {

namespace {

// Sums n words (n a multiple of 16), optionally prefetching 4 KiB ahead as the decode kernels do.
template <bool kPrefetch>
uint64_t sum_words(const uint64_t* p, size_t n) {
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (size_t i = 0; i < n; i += 8) {
    if (kPrefetch) __builtin_prefetch(p + i + 512, 0, 3);
    a0 += p[i] + p[i + 4];
    a1 += p[i + 1] + p[i + 5];
    a2 += p[i + 2] + p[i + 6];
    a3 += p[i + 3] + p[i + 7];
  }
  return a0 + a1 + a2 + a3;
}

#if defined(__x86_64__)
template <bool kPrefetch>
__attribute__((target("avx2"))) uint64_t sum_words_avx2(const uint64_t* p, size_t n) {
  __m256i a = _mm256_setzero_si256(), b = a;
  for (size_t i = 0; i < n; i += 8) {
    if (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(p + i + 512), _MM_HINT_T0);
    a = _mm256_add_epi64(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_add_epi64(b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
  }
  alignas(32) uint64_t v[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(v), _mm256_add_epi64(a, b));
  return v[0] + v[1] + v[2] + v[3];
}
template <bool kPrefetch>
__attribute__((target("avx512f"))) uint64_t sum_words_avx512(const uint64_t* p, size_t n) {
  __m512i a = _mm512_setzero_si512(), b = a;
  for (size_t i = 0; i < n; i += 16) {
    if (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(p + i + 512), _MM_HINT_T0);
    a = _mm512_add_epi64(a, _mm512_loadu_si512(p + i));
    b = _mm512_add_epi64(b, _mm512_loadu_si512(p + i + 8));
  }
  alignas(64) uint64_t v[8];
  _mm512_store_si512(v, _mm512_add_epi64(a, b));
  uint64_t s = 0;
  for (uint64_t x : v) s += x;
  return s;
}
#endif

using SumFn = uint64_t (*)(const uint64_t*, size_t);

// The widest summing loop this CPU runs, with (kPrefetch) or without software prefetch.
template <bool kPrefetch>
SumFn pick_sum() {
#if defined(__x86_64__)
  const CpuInfo& ci = cpu_info();
  if (ci.avx512f) return sum_words_avx512<kPrefetch>;
  if (ci.avx2) return sum_words_avx2<kPrefetch>;
#endif
  return sum_words<kPrefetch>;
}

}  // namespace

double measure_read_gbs(int n_threads, size_t bytes, int reps) {
  constexpr size_t kChunk = size_t{1} << 20;
  bytes = (bytes + kChunk - 1) / kChunk * kChunk;
  constexpr size_t kHuge = size_t{2} << 20;
  void* map = ::mmap(nullptr, bytes + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return 0.0;
  struct Unmap {
    size_t n;
    void operator()(void* p) const { ::munmap(p, n); }
  };
  std::unique_ptr<void, Unmap> keep_map(map, Unmap{bytes + kHuge});
  auto* base = reinterpret_cast<uint64_t*>((reinterpret_cast<uintptr_t>(map) + kHuge - 1) & ~(kHuge - 1));
  ::madvise(base, bytes, MADV_HUGEPAGE);
  struct NoFree {
    uint64_t* p;
    uint64_t* get() const { return p; }
  } buf{base};
  ThreadPool pool(n_threads);
  const int64_t n_chunks = static_cast<int64_t>(bytes / kChunk);
  // Touch every page from the pool (first-touch places pages near the threads that read them).
  pool.parallel_for(n_chunks, [&](int64_t b, int64_t e) {
    std::memset(buf.get() + b * (kChunk / 8), 1, static_cast<size_t>(e - b) * kChunk);
  });
  std::vector<uint64_t> sink(static_cast<size_t>(pool.size()), 0);
  double best = 0.0;
  for (const SumFn sum : {pick_sum<false>(), pick_sum<true>()}) {
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      pool.parallel_for(n_chunks, 1, [&](int64_t b, int64_t e, int ith) {
        sink[static_cast<size_t>(ith)] += sum(buf.get() + b * (kChunk / 8), static_cast<size_t>(e - b) * kChunk / 8);
      });
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s > 0 && bytes / s / 1e9 > best) best = static_cast<double>(bytes) / s / 1e9;
    }
  }
  volatile uint64_t keep = 0;
  for (uint64_t v : sink) keep = keep + v;
  (void)keep;
  return best;
}

}  // namespace ferry::kernels
