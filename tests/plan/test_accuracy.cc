// The cost model against measurements: predicted step times of the planner on the GPU host's quick
// profile (tests/data/profiles/h200-host-measured.json) for the configurations measured on that host
// (bench/RESULTS.md, "GPU host, session 2", "Hybrid under a VRAM budget"; `ferry bench -p 1024
// -n 128`: context 1153, batch 512). Each row holds the figures as data; the test asserts the model
// stays within the row's tolerance. Also pinned: what a deeper ring buys (K = 4 beat K = 2 at
// qwen3-8b Q4_K 4 GiB on the host) and that the planner's own K is the best of those it tried.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "model/synth.h"
#include "plan/planner.h"
#include "plan_fixtures.h"

namespace ferry::plan {
namespace {

constexpr uint64_t GiB = 1ull << 30;

using Model = fixtures::SynthModel;
using fixtures::synth_model;

const Model& qwen3_q4k() {
  static const Model m = synth_model(fixtures::qwen3_8b(), "qwen3-8b", DType::Q4_K);
  return m;
}
const Model& minitron_f16() {
  static const Model m = synth_model(fixtures::minitron_8b(), "minitron-8b", DType::F16);
  return m;
}

const HardwareProfile& host() {
  static const HardwareProfile p = fixtures::stored_profile("tests/data/profiles/h200-host-measured.json");
  return p;
}

PlannerOptions bench_options(uint64_t budget, int32_t ring) {
  PlannerOptions o;
  o.vram_budget = budget;
  o.context = 1024 + 128 + 1;  // ferry bench -p 1024 -n 128
  o.batch = 512;               // ferry bench's default -b
  o.ring_slots = ring;
  o.gemm_staging_bytes = 0;    // the measurements were taken with a whole matrix of staging
  return o;
}

PlanSet must_plan(const Model& m, uint64_t budget, int32_t ring) {
  auto r = Planner(host(), bench_options(budget, ring)).plan(m.spec, m.subs);
  EXPECT_TRUE(r.has_value()) << r.status().message();
  return r.has_value() ? *r : PlanSet{};
}

struct Row {
  const char* what;
  bool qwen3;             // else minitron-8b F16
  uint64_t budget;
  int32_t ring;           // K the measured run used (2: the default then)
  int32_t tokens;         // tier
  double measured_ms;     // bench/RESULTS.md
  double before_ms;       // the prediction bench/RESULTS.md quotes (the planner before K search and the
                          // GPU model change, on the quick profile of the same call)
  double tolerance;       // |predicted / measured - 1| must stay below this
};

// Measured on the GPU host (session 2). Tier 1 = decode step, tier 512 = a prefill chunk.
// The all-resident qwen3 decode (5.7 ms) will fall as this session's kernels get faster (~4 ms
// expected); a new profile measures the faster kernels, this row keeps this profile's figure.
const Row kRows[] = {
    {"qwen3-8b Q4_K 2 GiB decode", true, 2 * GiB, 2, 1, 30.6, 30.1, 0.15},
    {"qwen3-8b Q4_K 2 GiB prefill", true, 2 * GiB, 2, 512, 55.2, 51.8, 0.15},
    {"qwen3-8b Q4_K 4 GiB decode, ring 2", true, 4 * GiB, 2, 1, 10.4, 9.4, 0.15},
    {"qwen3-8b Q4_K 4 GiB decode, ring 4", true, 4 * GiB, 4, 1, 9.6, 10.6, 0.15},
    {"qwen3-8b Q4_K 4 GiB prefill", true, 4 * GiB, 2, 512, 35.1, 27.7, 0.15},
    {"qwen3-8b Q4_K 8 GiB decode (all resident)", true, 8 * GiB, 2, 1, 5.7, 8.7, 0.15},
    {"qwen3-8b Q4_K 8 GiB prefill (all resident)", true, 8 * GiB, 2, 512, 32.3, 27.7, 0.15},
    {"minitron-8b F16 2 GiB decode", false, 2 * GiB, 2, 1, 127.7, 154.1, 0.15},
    {"minitron-8b F16 2 GiB prefill", false, 2 * GiB, 2, 512, 251.3, 268.8, 0.10},
    {"minitron-8b F16 4 GiB decode", false, 4 * GiB, 2, 1, 118.2, 123.9, 0.15},
    {"minitron-8b F16 4 GiB prefill", false, 4 * GiB, 2, 512, 215.7, 225.0, 0.10},
    {"minitron-8b F16 8 GiB decode", false, 8 * GiB, 2, 1, 74.1, 82.1, 0.15},
    {"minitron-8b F16 8 GiB prefill", false, 8 * GiB, 2, 512, 156.4, 156.6, 0.10},
};

TEST(Accuracy, PredictionsMatchTheHostMeasurements) {
  for (const Row& r : kRows) {
    const PlanSet ps = must_plan(r.qwen3 ? qwen3_q4k() : minitron_f16(), r.budget, r.ring);
    const double predicted = ps.plan_for(r.tokens).predicted_ms;
    const double err = predicted / r.measured_ms - 1;
    std::printf("  %-44s measured %7.1f  before %7.1f (%+5.0f%%)  now %7.2f (%+5.1f%%)\n", r.what, r.measured_ms,
                r.before_ms, (r.before_ms / r.measured_ms - 1) * 100, predicted, err * 100);
    EXPECT_LT(std::fabs(err), r.tolerance) << r.what << ": predicted " << predicted << " ms, measured "
                                           << r.measured_ms << " ms";
  }
}

TEST(Accuracy, DeeperRingIsFasterAtQwen3FourGiB) {
  // Measured: ring 4 9.6 ms, ring 2 10.4 ms per decode step. Each K with its own resident set (the
  // slots come off it).
  const PlanSet k2 = must_plan(qwen3_q4k(), 4 * GiB, 2);
  const PlanSet k4 = must_plan(qwen3_q4k(), 4 * GiB, 4);
  ASSERT_EQ(k2.ring_slots, 2);
  ASSERT_EQ(k4.ring_slots, 4);
  EXPECT_LT(k4.tiers.front().predicted_ms, k2.tiers.front().predicted_ms) << plan_to_text(k2) << plan_to_text(k4);
  // The same placement (the K = 2 plan's) with more slots: the copy engine runs further ahead across
  // the resident / CPU runs between streamed sub-layers, and never gets slower.
  const PlannerOptions o = bench_options(4 * GiB, 2);
  const auto& pl = k2.tiers.front().placement;
  double prev = 1e30;
  for (int32_t k : {2, 3, 4, 6}) {
    auto t = predict_step_ms(host(), o, qwen3_q4k().spec, qwen3_q4k().subs, pl, 1, k);
    ASSERT_TRUE(t.has_value()) << t.status().message();
    EXPECT_LE(*t, prev * (1 + 1e-9)) << "K=" << k;
    if (k == 2) EXPECT_NEAR(*t, k2.tiers.front().predicted_ms, 1e-9);
    if (k == 4) EXPECT_LT(*t, 0.95 * k2.tiers.front().predicted_ms);
    prev = *t;
  }
}

TEST(Accuracy, PlannerKeepsTheBestRingDepth) {
  for (uint64_t budget : {2 * GiB, 4 * GiB}) {
    const PlanSet ps = must_plan(qwen3_q4k(), budget, 0);
    EXPECT_TRUE(ps.ring_auto);
    ASSERT_FALSE(ps.ring_choices.empty());
    double best = 1e300;
    int32_t best_k = 0;
    for (const RingChoice& c : ps.ring_choices)
      if (c.scenario_ms < best * (1 - 1e-12)) {
        best = c.scenario_ms;
        best_k = c.slots;
      }
    EXPECT_EQ(ps.ring_slots, best_k);
    EXPECT_NEAR(ps.scenario_ms, best, 1e-6);
    // A given K overrides the search.
    const PlanSet fixed = must_plan(qwen3_q4k(), budget, 6);
    EXPECT_EQ(fixed.ring_slots, 6);
    EXPECT_FALSE(fixed.ring_auto);
    EXPECT_LE(ps.scenario_ms, fixed.scenario_ms * (1 + 1e-12));
  }
  // Everything fits: no ring at all.
  EXPECT_EQ(must_plan(qwen3_q4k(), 8 * GiB, 0).ring_slots, 0);
}

}  // namespace
}  // namespace ferry::plan
