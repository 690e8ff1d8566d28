// ThreadPool: every index of parallel_for runs exactly once, for many sizes and grains and many
// back-to-back jobs (the spin/sleep hand-off); run() gives each thread its index; nested and
// single-thread pools run inline; long jobs that no worker joins (reseating) stay correct; cpu_info
// reports something sane.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "base/cpu_info.h"
#include "base/thread_pool.h"

namespace ferry {
namespace {

TEST(ThreadPool, ParallelForCoversEachIndexOnce) {
  for (int nt : {1, 2, 3, 5}) {
    ThreadPool pool(nt);
    EXPECT_EQ(pool.size(), nt);
    for (int64_t n : {0, 1, 2, 7, 64, 1000, 4097}) {
      for (int64_t grain : {1, 3, 100}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        for (auto& h : hits) h = 0;
        pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
          ASSERT_LE(b, e);
          for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i << " nt=" << nt;
      }
    }
  }
}

TEST(ThreadPool, ManyShortJobsAndSleepWake) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  for (int rep = 0; rep < 2000; ++rep)
    pool.parallel_for(6, [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
  EXPECT_EQ(total.load(), 2000 * 6);
  // Let the workers fall asleep, then wake them.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  total = 0;
  pool.parallel_for(100, [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
  EXPECT_EQ(total.load(), 100);
}

TEST(ThreadPool, RunGivesThreadIndices) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> seen(4);
  for (auto& s : seen) s = 0;
  pool.run([&](int ith, int nth) {
    ASSERT_EQ(nth, 4);
    seen[ith].fetch_add(1);
  });
  for (auto& s : seen) EXPECT_EQ(s.load(), 1);
}

TEST(ThreadPool, ThreadIndexInParallelFor) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> per_thread(3);
  for (auto& s : per_thread) s = 0;
  pool.parallel_for(300, 1, [&](int64_t b, int64_t e, int ith) {
    ASSERT_GE(ith, 0);
    ASSERT_LT(ith, 3);
    per_thread[ith].fetch_add(static_cast<int>(e - b));
  });
  EXPECT_EQ(per_thread[0] + per_thread[1] + per_thread[2], 300);
}

TEST(ThreadPool, NestedCallRunsInline) {
  ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.parallel_for(4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) pool.parallel_for(10, [&](int64_t b2, int64_t e2) { inner.fetch_add(e2 - b2); });
  });
  EXPECT_EQ(inner.load(), 40);
}

// Many more threads than CPUs (as `ferry bench -t 16` on a smaller or busy machine): workers that spin
// must not starve the ones doing the work, so many short jobs still finish promptly. (Measured with an
// 8B decode on 2 cores: -t 2 / 4 / 8 / 16 used 457 / 449 / 468 / 485 CPU ms per token.)
// Long jobs that no worker can join (the whole process on one CPU, the caller never yielding) send the
// yielding workers to sleep (thread_pool.cc, "Reseating"); every share still runs once, then and after
// the process gets its CPUs back and the workers are woken again.
TEST(ThreadPool, LongJobsWithoutWorkersThenWithThem) {
  cpu_set_t all, one;
  ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &all)) {
      CPU_SET(c, &one);
      break;
    }
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);  // the pool's workers inherit it
  ThreadPool pool(3);
  auto busy_us = [](int us) {
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < std::chrono::microseconds(us)) {
    }
  };
  std::atomic<int64_t> total{0};
  for (int rep = 0; rep < 40; ++rep)
    pool.run([&](int, int) {
      busy_us(40);
      total.fetch_add(1);
    });
  EXPECT_EQ(total.load(), 40 * 3);
  ASSERT_EQ(sched_setaffinity(0, sizeof(all), &all), 0);  // the caller only: enough to run on
  total = 0;
  for (int rep = 0; rep < 40; ++rep)
    pool.parallel_for(64, [&](int64_t b, int64_t e) {
      busy_us(5);
      total.fetch_add(e - b);
    });
  EXPECT_EQ(total.load(), 40 * 64);
}

TEST(ThreadPool, OversubscribedStaysFast) {
  const int nt = 8 * std::max(1u, std::thread::hardware_concurrency());
  ThreadPool pool(nt);
  std::atomic<int64_t> total{0};
  const auto t0 = std::chrono::steady_clock::now();
  for (int rep = 0; rep < 3000; ++rep)
    pool.parallel_for(4 * nt, [&](int64_t b, int64_t e) { total.fetch_add(e - b, std::memory_order_relaxed); });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(total.load(), int64_t{3000} * 4 * nt);
  EXPECT_LT(s, 20.0) << nt << " threads, 3000 jobs";
}

TEST(ThreadPool, DefaultIsPhysicalCores) {
  ThreadPool pool;
  EXPECT_EQ(pool.size(), cpu_info().physical_cores);
  EXPECT_GE(cpu_info().physical_cores, 1);
  EXPECT_LE(cpu_info().physical_cores, cpu_info().logical_cpus);
#if defined(__x86_64__)
  EXPECT_TRUE(cpu_info().sse42);
  EXPECT_FALSE(cpu_info().vendor.empty());
#endif
}

}  // namespace
}  // namespace ferry
