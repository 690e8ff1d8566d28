// ThreadPool: see thread_pool.h. Protocol: the caller stores the job, sets pending_ = nth - 1 and bumps
// gen_ (release); a worker that sees a new gen_ (acquire) runs the job and decrements pending_; the
// caller runs its own share, then waits for pending_ == 0. Waiting = spin_ polls, then a futex sleep
// (std::atomic::wait); notify is a cheap no-op in libstdc++ when nobody sleeps.
#include "base/thread_pool.h"

#include "base/cpu_info.h"
#include "base/status.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FERRY_PAUSE() _mm_pause()
#else
#define FERRY_PAUSE() std::this_thread::yield()
#endif

namespace ferry {

namespace {

// Waits until a.load() != old: spins `spin` times, then sleeps. Returns the new value.
template <typename T>
T wait_change(const std::atomic<T>& a, T old, int spin) {
  for (int i = 0; i < spin; ++i) {
    const T v = a.load(std::memory_order_acquire);
    if (v != old) return v;
    FERRY_PAUSE();
  }
  for (;;) {
    const T v = a.load(std::memory_order_acquire);
    if (v != old) return v;
    a.wait(old, std::memory_order_acquire);
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  n_threads_ = n_threads > 0 ? n_threads : cpu_info().physical_cores;
  if (n_threads_ < 1) n_threads_ = 1;
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_ = true;
  gen_.fetch_add(1, std::memory_order_release);
  gen_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::worker(int ith) {
  uint32_t seen = 0;
  for (;;) {
    seen = wait_change(gen_, seen, spin_);
    if (stop_) return;
    call_(ctx_, ith, n_threads_);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::dispatch(Call call, void* ctx) {
  if (n_threads_ == 1 || busy_.exchange(true, std::memory_order_acquire)) {
    // Single thread, or a nested / concurrent call: run every share here, in order.
    for (int i = 0; i < n_threads_; ++i) call(ctx, i, n_threads_);
    return;
  }
  call_ = call;
  ctx_ = ctx;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  gen_.fetch_add(1, std::memory_order_release);
  gen_.notify_all();
  call(ctx, 0, n_threads_);
  for (int32_t left = pending_.load(std::memory_order_acquire); left != 0;)
    left = wait_change(pending_, left, spin_);
  busy_.store(false, std::memory_order_release);
}

}  // namespace ferry
