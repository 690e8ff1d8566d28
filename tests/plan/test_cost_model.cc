// CostModel (interpolation of measured curves, roofline, copies) and the step simulation (chain,
// ring pipelining, host-memory contention).
#include <gtest/gtest.h>

#include <cmath>

#include "plan/cost_model.h"
#include "plan/simulate.h"
#include "plan_fixtures.h"

namespace ferry::plan {
namespace {

TEST(CostModel, InterpolatesMeasuredCurves) {
  HardwareProfile p = fixtures::synth_profile({});
  ThroughputCurve c;
  c.dtype = DType::Q4_K;
  c.threads = 16;
  c.tokens = {1, 16, 256};
  c.gflops = {100, 800, 1600};
  p.cpu.matmul = {c};
  const CostModel cm(p);
  EXPECT_DOUBLE_EQ(cm.cpu_gflops(DType::Q4_K, 1), 100);
  EXPECT_DOUBLE_EQ(cm.cpu_gflops(DType::Q4_K, 16), 800);
  // Log-log between points: 4 tokens is halfway between 1 and 16 in log space.
  EXPECT_NEAR(cm.cpu_gflops(DType::Q4_K, 4), std::sqrt(100.0 * 800.0), 1e-9);
  // Plateau past the last point; bandwidth-bound (linear) below the first.
  EXPECT_DOUBLE_EQ(cm.cpu_gflops(DType::Q4_K, 1024), 1600);
  EXPECT_DOUBLE_EQ(cm.cpu_gflops(DType::Q4_K, 0.5), 50);
}

TEST(CostModel, ThreadsInterpolateAndMissingDtypeScales) {
  HardwareProfile p = fixtures::synth_profile({});
  p.cpu.matmul.clear();
  for (int32_t th : {4, 16}) {
    ThroughputCurve c;
    c.dtype = DType::F16;
    c.threads = th;
    c.tokens = {1};
    c.gflops = {th * 10.0};
    p.cpu.matmul.push_back(c);
  }
  EXPECT_DOUBLE_EQ(CostModel(p, 16).cpu_gflops(DType::F16, 1), 160);
  EXPECT_DOUBLE_EQ(CostModel(p, 10).cpu_gflops(DType::F16, 1), 100);  // linear between 4 and 16
  EXPECT_DOUBLE_EQ(CostModel(p, 2).cpu_gflops(DType::F16, 1), 20);    // scaled below the first
  EXPECT_DOUBLE_EQ(CostModel(p, 32).cpu_gflops(DType::F16, 1), 160);  // clamped above the last
  // Q8_0 (8.5 bits) from F16 (16 bits): bandwidth-bound rate scales by bits per weight.
  EXPECT_NEAR(CostModel(p, 16).cpu_gflops(DType::Q8_0, 1), 160 * 16 / 8.5, 1e-9);
  const auto notes = CostModel(p, 16).notes_for({});
  EXPECT_TRUE(notes.empty());
}

TEST(CostModel, RooflineAndCopies) {
  fixtures::SynthHw hw;
  hw.cpu_bw = 100;
  hw.link = 50;
  const CostModel cm(fixtures::synth_profile(hw));
  // n = 1 F16 4096 x 4096: 32 MiB at ~80 GB/s (the curve) => ~0.42 ms (+ call overhead).
  const double t1 = cm.cpu_matmul_s(DType::F16, 4096, 4096, 1);
  EXPECT_NEAR(t1, 2.0 * 4096 * 4096 / (cm.cpu_gflops(DType::F16, 1) * 1e9) + 3e-6, 2e-5);
  // More tokens never take less time; more rows never take less time.
  double prev = 0;
  for (double n : {1.0, 2.0, 4.0, 64.0, 1024.0}) {
    const double t = cm.cpu_matmul_s(DType::F16, 4096, 4096, n);
    EXPECT_GE(t, prev);
    prev = t;
  }
  EXPECT_GT(cm.gpu_matmul_s(DType::Q4_K, 8192, 4096, 1), cm.gpu_matmul_s(DType::Q4_K, 4096, 4096, 1));
  EXPECT_DOUBLE_EQ(cm.h2d_s(50e9), 1.0);
  EXPECT_NEAR(cm.activation_h2d_s(0), 10e-6, 1e-12);
  EXPECT_DOUBLE_EQ(cm.link_gbs(), 50);
}

TEST(Simulate, ChainWithoutStreamingIsASum) {
  std::vector<SimItem> step = {{false, false, 0, 1.0, 0}, {true, false, 0.5, 2.0, 0}, {false, false, 0.25, 3.0, 0}};
  const SimResult r = simulate({step, step}, {});
  EXPECT_DOUBLE_EQ(r.step_end[0], 6.75);
  EXPECT_DOUBLE_EQ(r.step_end[1], 13.5);
}

TEST(Simulate, RingOverlapsCopiesWithCompute) {
  // Four streamed items, copy 1.0 each, compute 1.0 each: pipelined, ~copy-bound.
  std::vector<SimItem> step(4, SimItem{true, true, 0, 1.0, 1.0});
  SimParams p;
  p.ring_slots = 2;
  p.prefetch_after_step_end = false;  // copies run on into the next step as slots free up
  const SimResult r = simulate({step, step, step}, p);
  EXPECT_NEAR(r.step_end[2] - r.step_end[1], 4.0, 1e-9);  // steady state: max(copy, compute)
  EXPECT_NEAR(r.step_end[0], 5.0, 1e-9);                  // cold: the first copy is exposed
  EXPECT_EQ(r.copies, 12);
  // The executor issues a step's first K copies after the previous step's end: every step exposes
  // its first copy.
  p.prefetch_after_step_end = true;
  const SimResult re = simulate({step, step, step}, p);
  EXPECT_NEAR(re.step_end[2] - re.step_end[1], 5.0, 1e-9);
  // One slot: copy and compute of the same slot cannot overlap.
  p.ring_slots = 1;
  p.prefetch_after_step_end = false;
  const SimResult r1 = simulate({step, step, step}, p);
  EXPECT_NEAR(r1.step_end[2] - r1.step_end[1], 8.0, 1e-9);
}

TEST(Simulate, SubLayersStayInTheirSlotsWhenTheRingHoldsThemAll) {
  // Three streamed sub-layers (ids 0..2), copy 1.0, compute 0.5 each.
  std::vector<SimItem> step;
  for (int32_t i = 0; i < 3; ++i) step.push_back(SimItem{true, true, 0, 0.5, 1.0, i});
  SimParams p;
  p.ring_slots = 4;
  const SimResult r = simulate({step, step, step}, p);
  EXPECT_EQ(r.copies, 3);  // the first step only
  EXPECT_NEAR(r.step_end[2] - r.step_end[1], 1.5, 1e-9);
  EXPECT_DOUBLE_EQ(r.step_copy_s[2], 0.0);
  // Two slots: slot 0 takes ids 0 and 2 in turn (copied every step), slot 1 keeps id 1.
  p.ring_slots = 2;
  const SimResult r2 = simulate({step, step, step}, p);
  EXPECT_EQ(r2.copies, 3 + 2 + 2);
  EXPECT_DOUBLE_EQ(r2.step_copy_s[2], 2.0);
  // Items without an id are never reused.
  for (SimItem& it : step) it.id = -1;
  p.ring_slots = 4;
  EXPECT_EQ(simulate({step, step, step}, p).copies, 9);
}

TEST(Simulate, DeeperRingRunsAheadAcrossCpuStretches) {
  // S S C C C C S S: two streamed, a long CPU stretch (4 x 1.0), two streamed. Copies 1.0, GPU compute
  // 0.1. With K = 2 the copies of the last two wait for the first two's compute, then start only
  // when the stretch has begun; with K = 4 all four copies run back to back from the step's start.
  std::vector<SimItem> step;
  int32_t id = 0;
  for (int i = 0; i < 2; ++i) step.push_back(SimItem{true, true, 0, 0.1, 1.0, id++});
  for (int i = 0; i < 4; ++i) step.push_back(SimItem{false, false, 0, 1.0, 0, id++});
  for (int i = 0; i < 2; ++i) step.push_back(SimItem{true, true, 0, 0.1, 1.0, id++});
  for (int i = 0; i < 2; ++i) step.push_back(SimItem{false, false, 0, 0.2, 0, id++});  // tail on the CPU
  SimParams p;
  double prev = 1e30;
  for (int32_t k : {2, 3, 4}) {
    p.ring_slots = k;
    const SimResult r = simulate({step, step, step}, p);
    const double t = r.step_end[2] - r.step_end[1];
    EXPECT_LE(t, prev + 1e-12) << "K=" << k;
    prev = t;
  }
  p.ring_slots = 2;
  const SimResult r2 = simulate({step, step, step}, p);
  p.ring_slots = 4;
  const SimResult r4 = simulate({step, step, step}, p);
  EXPECT_LT(r4.step_end[2] - r4.step_end[1], r2.step_end[2] - r2.step_end[1] - 0.5);
}

TEST(Simulate, HostMemoryContentionSlowsBoth) {
  // CPU item of 2 s while a 1 s copy runs for a later GPU item.
  std::vector<SimItem> step = {{false, false, 0, 2.0, 0}, {true, true, 0, 0.0, 1.0}};
  SimParams p;
  p.ring_slots = 2;
  const SimResult free_run = simulate({step}, p);
  EXPECT_NEAR(free_run.step_end[0], 2.0, 1e-9);  // the copy hides under the CPU work
  p.cpu_share_while_copying = 0.5;
  p.copy_share_while_cpu = 0.5;
  // Both at half speed for 2 s (copy done, CPU has 1 s of work left), then CPU alone 1 s.
  const SimResult contended = simulate({step}, p);
  EXPECT_NEAR(contended.step_end[0], 3.0, 1e-9);
}

}  // namespace
}  // namespace ferry::plan
