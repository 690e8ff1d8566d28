// ThreadPool: a fixed set of workers for data-parallel kernels, built for low wake-up latency (a decode
// step is hundreds of ~10-100 us ops back to back). Workers spin briefly on a generation counter after
// each job, then poll it with sched_yield for up to ~1 ms (ready for the next job, without holding a
// CPU that another thread wants), then sleep on it (futex via std::atomic::wait); the calling thread
// always takes part. When long jobs keep running with no worker joining, yielding workers are sent to
// sleep so that the next wake-up places them on idle CPUs (thread_pool.cc, "Reseating").
// Work is claimed dynamically (chunks, or run()'s shares), and a worker that has not joined a job by
// the time its work is all claimed is not waited for: on a busy machine a descheduled worker delays
// nothing it has not started. Nothing allocates per job: the job is a function pointer plus a pointer
// to the caller's closure. One job at a time: a call made while a job runs (from a worker, or a second
// thread) runs inline.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <type_traits>
#include <vector>

#include "base/status.h"

namespace ferry {

class ThreadPool {
 public:
  // n_threads <= 0: the physical cores of this process's affinity mask (cpu_info()).
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(ith, nth) once for each ith in [0, nth = size()), spread over the threads that join (a
  // thread may run several shares one after the other, so fn must not wait for another share);
  // returns when every call has returned.
  template <typename F>
  void run(F&& fn) {
    using Fn = std::remove_reference_t<F>;
    struct Ctx {
      Fn* fn;
      alignas(64) std::atomic<int> next{0};
    } ctx{&fn};
    const int nth = n_threads_;
    run_slots([&ctx, nth](int, int) {
      for (int s; (s = ctx.next.fetch_add(1, std::memory_order_relaxed)) < nth;) (*ctx.fn)(s, nth);
    });
  }

  // Splits [0, n) into chunks of at least `grain` items handed out dynamically (a thread that was
  // descheduled does less), calling fn(begin, end) or fn(begin, end, ith) for each chunk; returns
  // when all are done. Chunks are contiguous and about n / (4 * size()) long (see the overload).
  template <typename F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) {
    parallel_for(n, grain, 4, static_cast<F&&>(fn));
  }
  // The same with about chunks_per_thread chunks per thread (more: better balance when threads are
  // disturbed, fewer: fewer chunk starts).
  template <typename F>
  void parallel_for(int64_t n, int64_t grain, int chunks_per_thread, F&& fn) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (chunks_per_thread < 1) chunks_per_thread = 1;
    int64_t chunk = n / (chunks_per_thread * static_cast<int64_t>(n_threads_));
    if (chunk < grain) chunk = grain;
    if (n_threads_ == 1 || chunk >= n) {
      invoke(fn, 0, n, 0);
      return;
    }
    using Fn = std::remove_reference_t<F>;
    struct Ctx {
      Fn* fn;
      int64_t n, chunk;
      alignas(64) std::atomic<int64_t> next{0};
    } ctx{&fn, n, chunk};
    run_slots([&ctx](int ith, int) {
      for (;;) {
        const int64_t b = ctx.next.fetch_add(ctx.chunk, std::memory_order_relaxed);
        if (b >= ctx.n) break;
        invoke(*ctx.fn, b, b + ctx.chunk < ctx.n ? b + ctx.chunk : ctx.n, ith);
      }
    });
  }
  template <typename F>
  void parallel_for(int64_t n, F&& fn) {
    parallel_for(n, 1, static_cast<F&&>(fn));
  }

  // Iterations a waiting thread spins before it sleeps (each ~ one `pause`, 10-150 cycles).
  void set_spin(int iterations) { spin_ = iterations; }
  // Then, microseconds it polls with sched_yield between polls before it sleeps (0: none).
  void set_yield_us(int us) { yield_us_ = us; }

 private:
  using Call = void (*)(void* ctx, int slot, int nth);

  // Calls fn(slot, nth) on the caller (slot 0) and on every worker that joins before the caller's own
  // call returns (distinct slots < nth). fn must claim its work from shared state.
  template <typename F>
  void run_slots(F&& fn) {
    auto call = [](void* ctx, int slot, int nth) { (*static_cast<std::remove_reference_t<F>*>(ctx))(slot, nth); };
    dispatch(call, &fn);
  }

  template <typename G>
  static void invoke(G& fn, int64_t b, int64_t e, int ith) {
    if constexpr (std::is_invocable_v<G&, int64_t, int64_t, int>)
      fn(b, e, ith);
    else
      fn(b, e);
  }

  void dispatch(Call call, void* ctx);
  void worker(int ith);
  // Caller-side bookkeeping after each job: whether a worker joined it and how long the caller's own
  // share ran; bumps reseat_ when long jobs keep running without workers (thread_pool.cc).
  void note_joiners(bool joined, std::chrono::steady_clock::duration caller_time);

  int n_threads_ = 1;
  int spin_ = 2000;
  int yield_us_ = 1000;
  std::vector<std::thread> workers_;
  Call call_ = nullptr;
  void* ctx_ = nullptr;
  bool stop_ = false;
  alignas(64) std::atomic<uint32_t> gen_{0};      // bumped once per job (and at shutdown)
  alignas(64) std::atomic<uint32_t> open_{0};     // generation of the job workers may still join; 0 = none
  alignas(64) std::atomic<int32_t> active_{0};    // workers between "join attempt" and "done"
  alignas(64) std::atomic<int32_t> slots_{0};     // next free slot of the current job
  alignas(64) std::atomic<bool> busy_{false};     // a job is being dispatched
  alignas(64) std::atomic<uint32_t> reseat_{0};   // bumped to send yielding workers to sleep (see .cc)
  int unjoined_ = 0;                              // consecutive long jobs no worker joined (caller only)
};

// Runs fn(0 .. n-1) on up to `threads` short-lived threads (the caller's included), items handed out in
// order as threads free up: for coarse, independent items (loading weights, evaluating plans), not
// kernels. The first error is returned; after it no new item starts. Threads the system refuses are
// not an error: the ones running take the rest.
Status parallel_items(size_t n, int32_t threads, const std::function<Status(size_t)>& fn);

}  // namespace ferry
