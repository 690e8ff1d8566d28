// ThreadPool: see thread_pool.h. Protocol per job (generation g):
//   caller: store job; slots_ = 1; open_ = g; gen_ = g (seq_cst) + notify; run its own call (slot 0),
//           which claims work until none is left; open_ = 0; wait until active_ == 0.
//   worker: on seeing gen_ == g: active_++; if open_ == g, take a slot and run the call; active_--.
// active_ is raised before open_ is read and open_ is cleared before active_ is read (both seq_cst), so
// either the caller waits for the worker or the worker sees the job closed and never touches it.
// Waiting = spin_ polls with pause, then polls with sched_yield for up to yield_us_, then a futex sleep
// (std::atomic::wait); notify is cheap when nobody sleeps.
// Reseating: a worker that a wake-up placed on the caller's CPU can poll with sched_yield there for as
// long as jobs keep coming, handing the CPU back to the caller each time and joining nothing, while
// another CPU idles (the scheduler moves a yielding thread rarely). When two long jobs in a row ran on
// the caller alone, the caller bumps reseat_; yielding workers then sleep at once, and the next job's
// futex wake-up lets the scheduler place each one on an idle CPU.
#include "base/thread_pool.h"

#include <chrono>
#include <mutex>
#include <system_error>

#include "base/cpu_info.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FERRY_PAUSE() _mm_pause()
#else
#define FERRY_PAUSE() std::this_thread::yield()
#endif

namespace ferry {

namespace {

// Waits until pred(a.load()) holds: spins `spin` times with `pause`, then yields the CPU between
// polls until `yield_us` microseconds have passed or `leave` moves away from `leave_seen`, then sleeps.
// Returns the value seen.
// Why the yield phase: a decode step's matmuls leave a worker idle for the rest of the job's tail and
// the caller's serial ops between jobs, often 30-300 us; a 2000-`pause` spin lasts only ~27 us on a
// Sapphire Rapids class core (pause ~13 ns), so after the spin alone workers would be asleep before
// almost every job, and each job would pay a futex wake-up per worker. Yielding keeps them ready
// without taking the CPU from other threads of a busy machine (sched_yield gives it away).
template <typename T, typename Pred>
T wait_until(const std::atomic<T>& a, Pred pred, int spin, int yield_us,
             const std::atomic<uint32_t>* leave = nullptr, uint32_t leave_seen = 0) {
  for (int i = 0; i < spin; ++i) {
    const T v = a.load(std::memory_order_acquire);
    if (pred(v)) return v;
    FERRY_PAUSE();
  }
  if (yield_us > 0) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 1;; ++i) {
      const T v = a.load(std::memory_order_acquire);
      if (pred(v)) return v;
      if (leave != nullptr && leave->load(std::memory_order_relaxed) != leave_seen) break;
      std::this_thread::yield();
      if ((i & 7) == 0 && std::chrono::steady_clock::now() - t0 > std::chrono::microseconds(yield_us)) break;
    }
  }
  for (;;) {
    const T v = a.load(std::memory_order_acquire);
    if (pred(v)) return v;
    a.wait(v, std::memory_order_acquire);
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

void ThreadPool::worker(int) {
  uint32_t seen = 0;
  for (;;) {
    seen = wait_until(gen_, [seen](uint32_t v) { return v != seen; }, spin_, yield_us_, &reseat_,
                      reseat_.load(std::memory_order_relaxed));
    if (stop_) return;
    active_.fetch_add(1, std::memory_order_seq_cst);
    if (open_.load(std::memory_order_seq_cst) == seen) {
      const int slot = slots_.fetch_add(1, std::memory_order_relaxed);
      if (slot < n_threads_) call_(ctx_, slot, n_threads_);
    }
    if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) active_.notify_all();
  }
}

void ThreadPool::dispatch(Call call, void* ctx) {
  if (n_threads_ == 1 || busy_.exchange(true, std::memory_order_acquire)) {
    call(ctx, 0, 1);  // single thread, or a nested / concurrent call: everything here
    return;
  }
  call_ = call;
  ctx_ = ctx;
  slots_.store(1, std::memory_order_relaxed);
  uint32_t g = gen_.load(std::memory_order_relaxed) + 1;
  if (g == 0) g = 1;  // 0 means "closed" in open_
  open_.store(g, std::memory_order_seq_cst);
  // seq_cst, not release: notify_all skips the futex wake when libstdc++'s waiter count reads 0, and a
  // release store may still sit in the store buffer when that count is read (StoreLoad reordering),
  // so a worker that was just going to sleep on the old value would miss this job.
  gen_.store(g, std::memory_order_seq_cst);
  gen_.notify_all();
  const auto t0 = std::chrono::steady_clock::now();
  call(ctx, 0, n_threads_);
  open_.store(0, std::memory_order_seq_cst);
  note_joiners(slots_.load(std::memory_order_relaxed) > 1, std::chrono::steady_clock::now() - t0);
  wait_until(active_, [](int32_t v) { return v == 0; }, spin_, yield_us_);
  busy_.store(false, std::memory_order_release);
}

void ThreadPool::note_joiners(bool joined, std::chrono::steady_clock::duration caller_time) {
  // A job this long gives every awake worker time to join; two in a row that none joined mean the
  // workers are not running (descheduled, or yielding a CPU to the caller on the same CPU).
  constexpr auto kLongJob = std::chrono::microseconds(50);
  if (joined || caller_time < kLongJob) {
    unjoined_ = 0;
    return;
  }
  if (++unjoined_ < 2) return;
  unjoined_ = 0;
  reseat_.fetch_add(1, std::memory_order_relaxed);
}

Status parallel_items(size_t n, int32_t threads, const std::function<Status(size_t)>& fn) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  Status first = Status::ok();
  auto work = [&] {
    for (;;) {
      if (failed.load()) return;
      const size_t j = next.fetch_add(1);
      if (j >= n) return;
      Status st = fn(j);
      if (!st.is_ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first.is_ok()) first = std::move(st);
        failed = true;
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int32_t t = 1; t < threads && static_cast<size_t>(t) < n; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // no more threads: the ones running (and this one) take the rest
    }
  }
  work();
  for (std::thread& t : pool) t.join();
  return first;
}

}  // namespace ferry
