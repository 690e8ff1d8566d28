// Profiler: measures through an Ops factory (here a tiny counting Ops: the profiler's bookkeeping
// is what is tested, not the kernels) and a fake GpuProber with known speeds, within its budget.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "plan/profile.h"
#include "plan/profiler.h"
#include "sleepy_ops.h"

namespace ferry::plan {
namespace {

// A GPU with a 40 GB/s link, 30 GB/s while the CPU runs, 1000 GB/s device copies.
class FakeGpu : public GpuProber {
 public:
  std::string name() const override { return "Fake GPU"; }
  std::string driver() const override { return "1.0"; }
  uint64_t memory_bytes() const override { return 24ull << 30; }
  Expected<double> time_h2d(uint64_t b, int r) override {
    largest_copy = std::max(largest_copy, b);
    return b * r / 40e9;
  }
  uint64_t copy_bytes_limit() override { return copy_limit; }
  uint64_t copy_limit = UINT64_MAX;
  uint64_t largest_copy = 0;
  Expected<double> time_d2h(uint64_t b, int r) override { return b * r / 40e9; }
  Expected<double> time_h2d_pageable(uint64_t b, int r) override { return b * r / 10e9; }
  Expected<double> time_d2d(uint64_t b, int r) override { return b * r / 500e9; }
  Expected<double> time_matmul(DType dt, int64_t rows, int64_t cols, int64_t n, int r) override {
    ++matmul_calls;
    const double t = 2.0 * rows * cols * n * r / 100e12 + r * 5e-6;
    // stall_first: the first sample of every decode-sized point (n <= 8) is 1000x too slow (a stalled
    // device); the next one is right.
    const bool first = seen.insert({static_cast<int>(dt), n}).second;
    return stall_first && first && n <= 8 ? 1000 * t : t;
  }
  bool stall_first = false;
  int matmul_calls = 0;
  std::set<std::pair<int, int64_t>> seen;
  Expected<double> launch_overhead_us() override { return 5.0; }
  // copy_slowdown: while background copies run, *cpu_slowdown is set to it (the CPU's share of host
  // memory it leaves), and back to 1 after.
  Status start_background_copies(bool, uint64_t) override {
    t0_ = std::chrono::steady_clock::now();
    if (cpu_slowdown != nullptr) *cpu_slowdown = copy_slowdown;
    return Status::ok();
  }
  Expected<CopyStats> stop_background_copies() override {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    if (cpu_slowdown != nullptr) *cpu_slowdown = 1.0;
    return CopyStats{30e9 * s, s};
  }
  double* cpu_slowdown = nullptr;
  double copy_slowdown = 1.0;

 private:
  std::chrono::steady_clock::time_point t0_;
};

TEST(Profiler, QuickCpuOnlyWithinBudget) {
  ProfileOptions o;
  o.quick = true;
  fast_sampling(&o);
  o.time_budget_s = 3;
  o.buffer_bytes = 32ull << 20;
  int calls = 0;
  double last = -1;
  bool monotone = true;
  o.progress = [&](double f, const std::string&) {
    ++calls;
    monotone &= f >= last;
    last = f;
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto p = measure_profile(sleepy(), nullptr, o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(p.has_value()) << p.status().message();
  // Only catches a profiler that ignores its budget (a runaway loop): no speed is asserted, CI
  // machines may be loaded.
  EXPECT_LT(s, 120.0);
  EXPECT_GT(calls, 5);
  EXPECT_TRUE(monotone);
  EXPECT_DOUBLE_EQ(last, 1.0);
  EXPECT_EQ(p->cpu.kernels, "sleepy");
  EXPECT_EQ(p->cpu.threads, 1);
  EXPECT_FALSE(p->has_gpu());
  EXPECT_EQ(p->mode, "quick");
  ASSERT_FALSE(p->cpu.matmul.empty());
  for (const auto& c : p->cpu.matmul) {
    EXPECT_EQ(c.threads, 1);
    ASSERT_FALSE(c.gflops.empty());
    // At n = 1 the "kernel" moves 20 GB/s of weights: 2 flops per weight.
    const double bytes_per_weight = static_cast<double>(traits(c.dtype).block_bytes) / traits(c.dtype).block_elems;
    EXPECT_NEAR(c.gflops[0], 20.0 * 2 / bytes_per_weight, 20.0 * 2 / bytes_per_weight * 0.5) << dtype_name(c.dtype);
  }
  EXPECT_FALSE(p->cpu.mem_bw.empty());
  EXPECT_TRUE(parse_profile(profile_to_json(*p)).has_value());
}

// One-token points run calls over a real matrix's worth of weights (32 MiB, at least 4096 rows), not 4096
// rows: a 9 MiB Q4_K call took ~20 us on 16 threads on the GPU host and measured the thread pool's
// dispatch as much as the kernel.
TEST(Profiler, OneTokenPointsUseMatrixSizedCalls) {
  std::map<int, uint64_t> one_token;
  ProfileOptions o;
  o.quick = true;
  fast_sampling(&o);
  o.time_budget_s = 3;
  o.buffer_bytes = 96ull << 20;
  CpuKernels k = sleepy();
  k.make_ops = [&](int32_t) -> std::unique_ptr<kernels::Ops> {
    return std::make_unique<SleepyOps>(nullptr, &one_token);
  };
  auto p = measure_profile(k, nullptr, o);
  ASSERT_TRUE(p.has_value()) << p.status().message();
  ASSERT_FALSE(p->cpu.matmul.empty());
  for (const auto& c : p->cpu.matmul) {
    const uint64_t rows_4096 = row_bytes(c.dtype, 4096) * 4096;
    const uint64_t want = std::max<uint64_t>(rows_4096, (32ull << 20) - row_bytes(c.dtype, 4096) * 64);
    EXPECT_GE(one_token[static_cast<int>(c.dtype)], want) << dtype_name(c.dtype);
    EXPECT_LE(one_token[static_cast<int>(c.dtype)], std::max<uint64_t>(rows_4096, 32ull << 20)) << dtype_name(c.dtype);
  }
}

// A machine busy with something else while the CPU part is first measured (bandwidth and kernels 2.5x
// slower), quiet by the end-of-profile re-check: the CPU is measured again and the faster figures kept.
// A quiet machine is measured once. The kernels' figures are compared with the quiet run's (sanitizer
// builds and loaded CI machines are slower than the sleeps alone).
TEST(Profiler, CpuMeasuredAgainWhenTheMachineWasBusy) {
  std::map<int, double> quiet_gflops;  // dtype -> the quiet run's figure at n = 1
  for (const bool busy_first : {false, true}) {
    SCOPED_TRACE(busy_first);
    double slowdown = busy_first ? 2.5 : 1.0;
    int bw_calls = 0;
    bool matmuls_seen = false;
    ProfileOptions o;
    o.quick = true;
    fast_sampling(&o);
    o.time_budget_s = 3;
    o.buffer_bytes = 32ull << 20;
    // The machine turns quiet once the first pass is over: at the first bandwidth probe after a matmul.
    double last = -1;
    bool monotone = true, again = false;
    o.progress = [&](double f, const std::string& what) {
      matmuls_seen |= what.find("CPU matmul") != std::string::npos;
      again |= what.rfind("again (the machine was busy): ", 0) == 0;
      monotone &= f >= last;
      last = f;
    };
    o.read_bw = [&](int32_t threads, double) {
      ++bw_calls;
      if (matmuls_seen) slowdown = 1.0;
      return 10.0 * threads / slowdown;
    };
    CpuKernels k = sleepy();
    k.make_ops = [&](int32_t) -> std::unique_ptr<kernels::Ops> { return std::make_unique<SleepyOps>(&slowdown); };
    auto p = measure_profile(k, nullptr, o);
    ASSERT_TRUE(p.has_value()) << p.status().message();
    ASSERT_FALSE(p->cpu.mem_bw.empty());
    // Every point once a round, 3 samples for the re-check, and with a busy first pass every point again.
    const int per_pass = o.rounds * static_cast<int>(p->cpu.mem_bw.size());
    EXPECT_EQ(bw_calls, busy_first ? 2 * per_pass + 3 : per_pass + 3);
    EXPECT_TRUE(monotone);
    EXPECT_EQ(again, busy_first);  // the progress says why the CPU is measured a second time
    for (const BandwidthPoint& b : p->cpu.mem_bw) EXPECT_DOUBLE_EQ(b.gbs, 10.0 * b.threads) << b.threads;
    for (const auto& c : p->cpu.matmul) {
      ASSERT_FALSE(c.gflops.empty());
      const int dt = static_cast<int>(c.dtype);
      if (!busy_first) {
        quiet_gflops[dt] = c.gflops[0];
      } else {
        ASSERT_TRUE(quiet_gflops.count(dt)) << dtype_name(c.dtype);
        // Kept from the busy pass, it would be 1 / 2.5 of the quiet figure.
        EXPECT_GT(c.gflops[0], 0.7 * quiet_gflops[dt]) << dtype_name(c.dtype);
      }
    }
  }
}

TEST(Profiler, GpuPartThroughTheProber) {
  ProfileOptions o;
  o.quick = true;
  fast_sampling(&o);
  o.time_budget_s = 4;
  o.buffer_bytes = 32ull << 20;
  FakeGpu gpu;
  auto p = measure_profile(sleepy(), &gpu, o);
  ASSERT_TRUE(p.has_value()) << p.status().message();
  ASSERT_TRUE(p->has_gpu());
  EXPECT_EQ(p->machine.gpu_name, "Fake GPU");
  EXPECT_NEAR(p->link->h2d_gbs, 40, 1e-6);
  EXPECT_NEAR(p->link->h2d_pageable_gbs, 10, 1e-6);
  EXPECT_NEAR(p->gpu->mem_bw_gbs, 1000, 1e-6);  // a device copy reads and writes
  EXPECT_GT(p->link->host_combined_gbs, 30);
  EXPECT_FALSE(p->gpu->matmul.empty());
  EXPECT_EQ(p->gpu->matmul[0].tokens.back(), 1024);
  EXPECT_TRUE(parse_profile(profile_to_json(*p)).has_value());
}

// A prober inside a memory cap (a VRAM budget's first run) asks for smaller copies: the profiler keeps
// to them and the figures stay rates.
TEST(Profiler, GpuCopiesKeepToTheProbersLimit) {
  ProfileOptions o;
  o.quick = true;
  fast_sampling(&o);
  o.time_budget_s = 4;
  o.buffer_bytes = 32ull << 20;
  FakeGpu gpu;
  gpu.copy_limit = 48ull << 20;
  auto p = measure_profile(sleepy(), &gpu, o);
  ASSERT_TRUE(p.has_value()) << p.status().message();
  EXPECT_EQ(gpu.largest_copy, 48ull << 20);
  EXPECT_NEAR(p->link->h2d_gbs, 40, 1e-6);
}

// The CPU's share of its speed while copies run: copies slow the fake CPU 1.25x (share 0.8). When the
// machine is busy during the first lone window (2x slower), the second lone window keeps the share right;
// from the first alone it would read 1.6, clamped to 1: copies would look free.
TEST(Profiler, CpuShareWhileCopyingSurvivesASlowLoneWindow) {
  for (const bool busy_first : {false, true}) {
    SCOPED_TRACE(busy_first);
    double slowdown = 1.0;
    ProfileOptions o;
    o.quick = true;
    fast_sampling(&o);
    o.time_budget_s = 4;
    o.buffer_bytes = 32ull << 20;
    o.progress = [&](double, const std::string& what) {
      if (busy_first && what.find("CPU kernels while copies run") != std::string::npos) slowdown = 2.0;
    };
    FakeGpu gpu;
    gpu.cpu_slowdown = &slowdown;
    gpu.copy_slowdown = 1.25;
    CpuKernels k = sleepy();
    k.make_ops = [&](int32_t) -> std::unique_ptr<kernels::Ops> { return std::make_unique<SleepyOps>(&slowdown); };
    auto p = measure_profile(k, &gpu, o);
    ASSERT_TRUE(p.has_value()) << p.status().message();
    ASSERT_TRUE(p->has_gpu());
    EXPECT_NEAR(p->link->cpu_share_while_copying, 0.8, 0.12);
  }
}

// A stalled sample (the first of every decode-sized point 1000x too slow) is an outlier of its figure's
// samples: the curves are the same as with a GPU that never stalls, for the same number of samples.
TEST(Profiler, GpuStalledSamplesAreOutliers) {
  ProfileOptions o;
  o.quick = true;
  fast_sampling(&o);
  o.time_budget_s = 4;
  o.buffer_bytes = 32ull << 20;
  FakeGpu steady, stalling;
  stalling.stall_first = true;
  auto a = measure_profile(sleepy(), &steady, o);
  auto b = measure_profile(sleepy(), &stalling, o);
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_EQ(stalling.matmul_calls, steady.matmul_calls);
  ASSERT_EQ(a->gpu->matmul.size(), b->gpu->matmul.size());
  for (size_t i = 0; i < a->gpu->matmul.size(); ++i)
    for (size_t j = 0; j < a->gpu->matmul[i].gflops.size(); ++j)
      EXPECT_NEAR(b->gpu->matmul[i].gflops[j], a->gpu->matmul[i].gflops[j], 1e-6 * a->gpu->matmul[i].gflops[j]);
}

// FakeGpu whose attention takes 10 us + 1 ns per cell per token (attention optional: off = the default
// kUnsupported of GpuProber).
class AttnGpu final : public FakeGpu {
 public:
  explicit AttnGpu(bool attention) : attention_(attention) {}
  Expected<double> time_attention(int n_head, int n_kv_head, int head_dim, int64_t cells, int64_t tokens,
                                  int reps) override {
    if (!attention_) return GpuProber::time_attention(n_head, n_kv_head, head_dim, cells, tokens, reps);
    ++attention_calls;
    EXPECT_EQ(n_head, 32);
    EXPECT_EQ(n_kv_head, 8);
    EXPECT_EQ(head_dim, 128);
    EXPECT_LE(tokens, cells);
    return reps * (10e-6 + 1e-9 * static_cast<double>(cells * tokens));
  }
  int attention_calls = 0;

 private:
  bool attention_;
};

TEST(AttentionProfiler, MeasuresTheReferencePoints) {
  ProfileOptions o;
  o.quick = true;
  fast_sampling(&o);
  o.time_budget_s = 2;
  o.buffer_bytes = 16ull << 20;
  AttnGpu gpu(true);
  auto p = measure_profile(sleepy(), &gpu, o);
  ASSERT_TRUE(p.has_value()) << p.status().message();
  ASSERT_TRUE(p->gpu->attention.has_value());
  const GpuAttentionProfile& a = *p->gpu->attention;
  EXPECT_EQ(a.n_head, 32);
  EXPECT_EQ(a.n_kv_head, 8);
  EXPECT_EQ(a.head_dim, 128);
  ASSERT_EQ(a.decode.size(), 3u);
  const int64_t cells[] = {512, 4096, 32768};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(a.decode[i].cells, cells[i]);
    EXPECT_EQ(a.decode[i].tokens, 1);
    EXPECT_NEAR(a.decode[i].us, 10 + 1e-3 * cells[i], 1e-6);  // per call, not per `reps` calls
  }
  ASSERT_EQ(a.prefill.size(), 1u);
  EXPECT_EQ(a.prefill[0].tokens, 512);
  EXPECT_EQ(a.prefill[0].cells, 4096);
  EXPECT_NEAR(a.prefill[0].us, 10 + 1e-3 * 512 * 4096, 1e-6);
  EXPECT_EQ(gpu.attention_calls, 4 * 3);  // 3 samples per point
  auto q = parse_profile(profile_to_json(*p));
  ASSERT_TRUE(q.has_value()) << q.status().message();
  EXPECT_TRUE(q->gpu->attention.has_value());
  // A prober that cannot time attention: no section, no error.
  AttnGpu plain(false);
  auto r = measure_profile(sleepy(), &plain, o);
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_FALSE(r->gpu->attention.has_value());
}

}  // namespace
}  // namespace ferry::plan
