// Software prefetch for the decode (direct) kernels, which stream each weight byte once: two streams
// ahead of the kernel's read position over one call's weight range, lines kFar bytes ahead into L2
// (prefetcht2) and kNear bytes ahead into L1 (prefetcht0), neither past the range's end. Per core the
// read rate is bounded by the misses in flight; T0 prefetches each hold one of the few L1 fill buffers
// until their line arrives, L2 prefetches do not, so the far stream keeps more lines in flight while
// the kernel computes: with them the decode matmuls read about as fast as a loop that only loads the
// same bytes, where a single T0 stream leaves part of the bandwidth unused (figures: bench/RESULTS_cpu.md,
// "Decode round 3"). The distances are the stream's template arguments: PrefetchStream (8 KB / 2 KB)
// for the kernels that call advance(), StepPrefetchStream (4 KB / 2 KB) for the 256-bit quantized
// decode kernels that call step(): with those kernels a 4 KB L2 distance read 5-7 % faster than 8 KB at
// 2 threads on the 2-core development machine (6 KB slower again, 3 KB the same), while the AVX-512
// Q4_K kernel and the float kernels read slower with it. Internal linkage (ODR rule in kernels.h); only
// SSE prefetch instructions, so any x86-64 kernel file may include it.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace ferry::kernels::cpu {
namespace {

template <size_t Far, size_t Near>
class PrefetchStreamT {
 public:
  static constexpr size_t kFar = Far, kNear = Near;
  // The first 4 KB of the range were already prefetched into L1 by the caller (matmul.cc's chunk ramp);
  // the ramp here pulls the rest of the far window into L2. (Addresses as integers: the streams run
  // past the end of the weights, where pointer arithmetic would be undefined.)
  PrefetchStreamT(const void* begin, const void* end)
      : far_(line(begin, kFar)), near_(line(begin, kNear)), end_(reinterpret_cast<uintptr_t>(end)) {
    for (uintptr_t p = reinterpret_cast<uintptr_t>(begin) + 4096; p < far_ && p < end_; p += 64) fetch_l2(p);
  }
  // The kernel reads up to `pos` next: issue the lines that came within the two distances.
  void advance(const void* pos) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(pos);
    for (const uintptr_t e = p + kFar; far_ < e && far_ < end_; far_ += 64) fetch_l2(far_);
    for (const uintptr_t e = p + kNear; near_ < e && near_ < end_; near_ += 64)
      _mm_prefetch(reinterpret_cast<const char*>(near_), _MM_HINT_T0);
  }
  // For a kernel that reads the range in consecutive steps of kStep bytes and calls this at the start
  // of each (pos): one prefetch per 64 bytes of the step at each distance, which covers every line of
  // the steps' union, without the per-line loop of advance() (whose compares and branches take the
  // vector ports' cycles at a rate of one line per few dozen weight bytes). Near the range's end (the
  // last kFar bytes) the bounded per-line stream takes over.
  // kEachLineOnce: instead, each line once, the lines that came within the distances of the step's end
  // (at most kLines a stream, a compare each). Which of the two reads faster depends on the kernel
  // (the direct kernels' choices, simd_kquant_impl.h).
  template <size_t kStep, bool kEachLineOnce = false>
  void step(const void* pos) {
    constexpr size_t kLines = (kStep + 63) / 64;
    const uintptr_t p = reinterpret_cast<uintptr_t>(pos);
    if (p + kFar + 64 * kLines <= end_) [[likely]] {
      if constexpr (kEachLineOnce) {
        // Both streams move together: one branch (predicted not taken) catches them up after a jump.
        // A branch, not two max()es: as conditional moves those put the stream positions on a dependency
        // chain, and the kernel read slower than with the fixed lines.
        const uintptr_t far_end = p + kStep + kFar, near_end = p + kStep + kNear;
        if (far_ < line(pos, kFar)) far_ = line(pos, kFar), near_ = line(pos, kNear);
        for (size_t i = 0; i < kLines && far_ < far_end; ++i, far_ += 64) fetch_l2(far_);
        for (size_t i = 0; i < kLines && near_ < near_end; ++i, near_ += 64)
          _mm_prefetch(reinterpret_cast<const char*>(near_), _MM_HINT_T0);
      } else {
        for (size_t i = 0; i < kLines; ++i) {
          fetch_l2(p + kFar + 64 * i);
          _mm_prefetch(reinterpret_cast<const char*>(p + kNear + 64 * i), _MM_HINT_T0);
        }
      }
      return;
    }
    // The lines before p + kFar (p + kNear) were issued by the steps before.
    far_ = far_ > line(pos, kFar) ? far_ : line(pos, kFar);
    near_ = near_ > line(pos, kNear) ? near_ : line(pos, kNear);
    advance(reinterpret_cast<const void*>(p + kStep));
  }

 private:
  static uintptr_t line(const void* p, size_t off) { return (reinterpret_cast<uintptr_t>(p) + off) & ~uintptr_t{63}; }
  static void fetch_l2(uintptr_t p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T2); }
  uintptr_t far_, near_, end_;
};
using PrefetchStream = PrefetchStreamT<8192, 2048>;
using StepPrefetchStream = PrefetchStreamT<4096, 2048>;

}  // namespace
}  // namespace ferry::kernels::cpu
