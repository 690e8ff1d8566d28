// CostModel (interpolation of measured curves, roofline, copies) and the step simulation (chain,
// ring pipelining, host-memory contention).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

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

// FFN slices: items of one group run on two lanes (GPU, CPU) at the same time.
SimItem gpu_item(double compute, double xfer = 0, int32_t group = -1) {
  SimItem it;
  it.on_gpu = true;
  it.xfer_s = xfer;
  it.compute_s = compute;
  it.group = group;
  return it;
}
SimItem streamed_item(double compute, double copy, int32_t id, int32_t group = -1) {
  SimItem it = gpu_item(compute, 0, group);
  it.streamed = true;
  it.copy_s = copy;
  it.id = id;
  return it;
}
SimItem cpu_item(double compute, double xfer = 0, int32_t group = -1) {
  SimItem it;
  it.xfer_s = xfer;
  it.compute_s = compute;
  it.group = group;
  return it;
}

TEST(SimulateGroups, GpuAndCpuSlicesRunAtTheSameTime) {
  // GPU 1 ms, then one FFN as a GPU slice (1 ms) and a CPU slice (3 ms): 1 + max(1, 3).
  const std::vector<SimItem> step = {gpu_item(1e-3), gpu_item(1e-3, 0, 0), cpu_item(3e-3, 0, 0)};
  const SimResult r = simulate({step, step}, {});
  EXPECT_NEAR(r.step_end[0], 4e-3, 1e-15);
  EXPECT_NEAR(r.step_end[1], 8e-3, 1e-15);
  // Both slices start when the item before the group ends; each ends on its own.
  EXPECT_NEAR(r.start[0][1], 1e-3, 1e-15);
  EXPECT_NEAR(r.start[0][2], 1e-3, 1e-15);
  EXPECT_NEAR(r.end[0][1], 2e-3, 1e-15);
  EXPECT_NEAR(r.end[0][2], 4e-3, 1e-15);
  // The same items without a group are a chain: 5 ms.
  std::vector<SimItem> chain = step;
  for (SimItem& it : chain) it.group = -1;
  EXPECT_NEAR(simulate({chain}, {}).step_end[0], 5e-3, 1e-15);
  // The next item waits for the whole group; the same group number after another item is a new group.
  const std::vector<SimItem> more = {gpu_item(1.0, 0, 3), cpu_item(2.0, 0, 3), gpu_item(0.5),
                                     cpu_item(1.0, 0, 3), gpu_item(1.5, 0, 3)};
  const SimResult rm = simulate({more}, {});
  EXPECT_DOUBLE_EQ(rm.start[0][2], 2.0);
  EXPECT_DOUBLE_EQ(rm.step_end[0], 2.0 + 0.5 + 1.5);
}

void expect_same_simulation(const SimResult& a, const SimResult& b, const std::string& what) {
  ASSERT_EQ(a.step_end.size(), b.step_end.size()) << what;
  EXPECT_EQ(a.copies, b.copies) << what;
  for (size_t s = 0; s < a.step_end.size(); ++s) {
    EXPECT_NEAR(a.step_end[s], b.step_end[s], 1e-12) << what << " step " << s;
    EXPECT_EQ(a.counts[s].copies, b.counts[s].copies) << what;
    EXPECT_EQ(a.counts[s].hits, b.counts[s].hits) << what;
    EXPECT_EQ(a.counts[s].prefetch_copies, b.counts[s].prefetch_copies) << what;
    for (size_t i = 0; i < a.start[s].size(); ++i) {
      EXPECT_NEAR(a.start[s][i], b.start[s][i], 1e-12) << what << " step " << s << " item " << i;
      EXPECT_NEAR(a.end[s][i], b.end[s][i], 1e-12) << what << " step " << s << " item " << i;
      EXPECT_NEAR(a.ready[s][i], b.ready[s][i], 1e-12) << what << " step " << s << " item " << i;
    }
  }
}

TEST(SimulateGroups, GroupOnOneLaneIsTheChain) {
  // S S C C C S R S C: streamed (S), CPU (C) and resident GPU (R) items with hand-overs at device
  // changes. Grouped once on the CPU items, once on GPU items (streamed and resident), the times must
  // be the chain's whatever the ring, the prefetch, the contention and the hand-over queueing.
  std::vector<SimItem> base = {streamed_item(0.1, 1.0, 0),  streamed_item(0.2, 0.8, 1), cpu_item(0.7, 0.05),
                               cpu_item(0.4),               cpu_item(0.9),              streamed_item(0.3, 1.2, 2),
                               gpu_item(0.25, 0.0),         streamed_item(0.1, 0.6, 3), cpu_item(0.5, 0.05)};
  base[5].xfer_s = 0.1;  // CPU -> GPU
  const std::vector<std::vector<size_t>> groupings = {{2, 3, 4}, {3, 4}, {8}, {0, 1}, {5, 6, 7}, {6}};
  for (const std::vector<size_t>& grouped : groupings)
    for (int32_t k : {1, 2, 3, 5})
      for (bool prefetch : {true, false})
        for (bool behind : {false, true})
          for (double share : {1.0, 0.5}) {
            SimParams p;
            p.ring_slots = k;
            p.prefetch_after_step_end = prefetch;
            p.handover_behind_copy = behind;
            p.cpu_share_while_copying = share;
            p.copy_share_while_cpu = share * 0.6;
            std::vector<SimItem> g = base;
            for (size_t i : grouped) g[i].group = 7;
            std::string what = "K=" + std::to_string(k) + " prefetch=" + std::to_string(prefetch) +
                               " behind=" + std::to_string(behind) + " share=" + std::to_string(share) +
                               " group at " + std::to_string(grouped.front());
            expect_same_simulation(simulate({g, g, g}, p), simulate({base, base, base}, p), what);
          }
}

TEST(SimulateGroups, StreamedSliceWaitsForItsCopy) {
  // CPU 1.0, then a group: a streamed GPU slice (copy 3.0, compute 0.5) and a CPU slice (1.0), then
  // a GPU item (0.25). The copy runs from t = 0 (cold ring); the CPU slice ends at 2.0, the GPU slice
  // runs when its copy is in: 3.0 .. 3.5; the group ends then.
  const std::vector<SimItem> step = {cpu_item(1.0), streamed_item(0.5, 3.0, 0, 0), cpu_item(1.0, 0, 0), gpu_item(0.25)};
  const SimResult r = simulate({step}, {});
  EXPECT_DOUBLE_EQ(r.ready[0][1], 3.0);
  EXPECT_DOUBLE_EQ(r.start[0][1], 3.0);
  EXPECT_DOUBLE_EQ(r.end[0][1], 3.5);
  EXPECT_DOUBLE_EQ(r.start[0][2], 1.0);
  EXPECT_DOUBLE_EQ(r.end[0][2], 2.0);
  EXPECT_DOUBLE_EQ(r.start[0][3], 3.5);
  EXPECT_DOUBLE_EQ(r.step_end[0], 3.75);
}

TEST(SimulateGroups, SliceFreesItsSlotBeforeTheGroupEnds) {
  // One slot. A group: streamed slice A (copy 1.0, compute 0.5) and a CPU slice of 5.0; then
  // streamed B (copy 1.0, compute 0.5) in the same slot. B's copy waits for A's compute only (1.5),
  // not for the group's end (5.0): B is in at 2.5 and runs right after the group.
  const std::vector<SimItem> step = {streamed_item(0.5, 1.0, 0, 0), cpu_item(5.0, 0, 0), streamed_item(0.5, 1.0, 1)};
  SimParams p;
  p.ring_slots = 1;
  const SimResult r = simulate({step}, p);
  EXPECT_DOUBLE_EQ(r.end[0][0], 1.5);
  EXPECT_DOUBLE_EQ(r.ready[0][2], 2.5);
  EXPECT_DOUBLE_EQ(r.start[0][2], 5.0);
  EXPECT_DOUBLE_EQ(r.step_end[0], 5.5);
}

TEST(SimulateGroups, CpuSliceSharesHostMemoryWithCopies) {
  // A group: resident GPU slice 1.0 and CPU slice 2.0; then a streamed item (copy 2.0, compute 0.5)
  // whose copy runs from t = 0. CPU share 0.5, copy share 0.25 while both run; the GPU slice slows
  // nothing. The CPU slice ends at 4.0 (2.0 work at 0.5); the copy has done 1.0 by then, 1.0 alone
  // after: in at 5.0; the streamed item runs 5.0 .. 5.5.
  const std::vector<SimItem> step = {gpu_item(1.0, 0, 0), cpu_item(2.0, 0, 0), streamed_item(0.5, 2.0, 0)};
  SimParams p;
  p.cpu_share_while_copying = 0.5;
  p.copy_share_while_cpu = 0.25;
  const SimResult r = simulate({step}, p);
  EXPECT_DOUBLE_EQ(r.end[0][0], 1.0);
  EXPECT_DOUBLE_EQ(r.end[0][1], 4.0);
  EXPECT_DOUBLE_EQ(r.ready[0][2], 5.0);
  EXPECT_DOUBLE_EQ(r.start[0][2], 5.0);
  EXPECT_DOUBLE_EQ(r.step_end[0], 5.5);
  // GPU slices alone beside the copy: nothing is slowed, the copy is in at 2.0.
  std::vector<SimItem> gpu_only = step;
  gpu_only[1].on_gpu = true;
  const SimResult rg = simulate({gpu_only}, p);
  EXPECT_DOUBLE_EQ(rg.ready[0][2], 2.0);
  EXPECT_DOUBLE_EQ(rg.step_end[0], 3.5);  // the group: 1.0 + 2.0 on the GPU lane
}

TEST(SimulateGroups, HandOverDelaysOnlyItsLane) {
  // GPU 1.0, then a group: GPU slice 2.0 and CPU slice 1.0 with a hand-over to the CPU.
  std::vector<SimItem> step = {gpu_item(1.0), gpu_item(2.0, 0, 0), cpu_item(1.0, 0.5, 0)};
  SimResult r = simulate({step}, {});
  EXPECT_DOUBLE_EQ(r.start[0][1], 1.0);
  EXPECT_DOUBLE_EQ(r.start[0][2], 1.5);  // the start of its compute, after the hand-over
  EXPECT_DOUBLE_EQ(r.end[0][2], 2.5);
  EXPECT_DOUBLE_EQ(r.step_end[0], 3.0);  // the GPU lane is the longer
  step[2].xfer_s = 1.5;
  r = simulate({step}, {});
  EXPECT_DOUBLE_EQ(r.start[0][1], 1.0);
  EXPECT_DOUBLE_EQ(r.end[0][1], 3.0);
  EXPECT_DOUBLE_EQ(r.end[0][2], 3.5);
  EXPECT_DOUBLE_EQ(r.step_end[0], 3.5);
}

TEST(SimulateGroups, GpuSliceHandOverQueuesBehindCopy) {
  // CPU 0.1, then a group: GPU slice (hand-over 0.5, compute 1.0) and CPU slice 1.0, then a streamed
  // item whose copy (2.0) runs from t = 0. Queued behind the copy, the GPU slice's hand-over starts at
  // 2.0; the CPU slice is not held back.
  const std::vector<SimItem> step = {cpu_item(0.1), gpu_item(1.0, 0.5, 0), cpu_item(1.0, 0, 0), streamed_item(0.1, 2.0, 0)};
  SimParams p;
  p.handover_behind_copy = true;
  SimResult r = simulate({step}, p);
  EXPECT_DOUBLE_EQ(r.start[0][1], 2.5);
  EXPECT_DOUBLE_EQ(r.end[0][2], 1.1);
  EXPECT_DOUBLE_EQ(r.step_end[0], 3.6);
  p.handover_behind_copy = false;
  r = simulate({step}, p);
  EXPECT_DOUBLE_EQ(r.start[0][1], 0.6);
  EXPECT_DOUBLE_EQ(r.end[0][1], 1.6);
  EXPECT_DOUBLE_EQ(r.start[0][3], 2.0);
  EXPECT_DOUBLE_EQ(r.step_end[0], 2.1);
}

}  // namespace
}  // namespace ferry::plan
