// Ring depth K on the GPU host (H200 + 16-core Xeon, build 37736e3, tests/plan/data/h200-full-profile.json):
// `ferry bench -m M --device cuda --vram B -p 1024 -n 48 --ring K` (context 1073, batch 512) measured
// the tier-1 step of the plan each K got; the placements are stored here (R resident, S streamed,
// C cpu, sub-layer order). Pinned: the model's error on those placements (uniform over K for
// minitron-8b since the CPU memory floor follows the curves; qwen3-8b's two configurations with hidden
// copies are a known miss) and the planner's robust choice on this profile (zero copies per decode
// step at qwen3 4 GiB, K = 2 or 3 for minitron).
#include <gtest/gtest.h>

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

const Model& qwen3() {
  static const Model m = synth_model(fixtures::qwen3_8b(), "qwen3-8b", DType::Q4_K);
  return m;
}
const Model& minitron() {
  static const Model m = synth_model(fixtures::minitron_8b(), "minitron-8b", DType::F16);
  return m;
}

const HardwareProfile& host() {
  static const HardwareProfile p = fixtures::stored_profile("tests/plan/data/h200-full-profile.json");
  return p;
}

PlannerOptions bench_options(uint64_t budget, int32_t ring) {
  PlannerOptions o;
  o.vram_budget = budget;
  o.context = 1024 + 48 + 1;
  o.batch = 512;
  o.ring_slots = ring;
  return o;
}

std::vector<Placement> parse(const std::string& s) {
  std::vector<Placement> p;
  for (char c : s) p.push_back(c == 'R' ? Placement::kResident : c == 'S' ? Placement::kStreamed : Placement::kCpu);
  return p;
}

struct Row {
  const char* what;
  bool qwen;
  uint64_t budget;
  int32_t K;
  const char* placement;
  double measured_ms;   // tier-1 step
  double before_ms;     // predicted by the planner that chose the placement (37736e3)
  double lo, hi;        // allowed (predicted - measured) / measured
};

// clang-format off
const Row kRows[] = {
  {"qwen3 Q4_K 4G K=2 (2 copies/step)", true, 4 * GiB, 2,
   "CRRRRRRRRRRRRRRRCRRRRRRRCRRRRRRRSRRRRRRRCRRRRRRRSRRRRRRRCRRRRRRRSRRRRRRRRR", 8.71, 6.88, -0.30, 0.0},
  {"qwen3 Q4_K 4G K=3 (no copies)", true, 4 * GiB, 3,
   "CRRRRRRRRRRRRRRRSRRRRRRRCRRRRRRRSRRRRRRRCRRRRRRRSRRRRRRRCRRRRRRRCRRRRRRRCR", 7.14, 7.28, -0.08, 0.08},
  {"qwen3 Q4_K 4G K=4 (2 copies/step)", true, 4 * GiB, 4,
   "CRRRRRRRCRRRRRRRSRRRRRRRSRRRRRRRCRRRRRRRSRRRRRRRCRRRRRRRSRRRRRRRCRRRRRRRSR", 8.47, 6.90, -0.30, 0.0},
  {"qwen3 Q4_K 4G K=6 (no copies)", true, 4 * GiB, 6,
   "CRRRRRRRSRRRRRRRCRRRRRRRSRRRCRRRSRRRRRRRCRRRRRRRSRRRRRRRCRRRSRRRCRRRRRRRSR", 7.28, 7.33, -0.08, 0.08},
  {"minitron F16 2G K=2", false, 2 * GiB, 2,
   "CRCSCRCSCRSSCSCSCRSSCRCSCRSSCSCSCRSSCRCSCRSSCSCSCRSSCRCSCRSSCSCSCRSSCRCSCRSSCSCSSC", 122.85, 133.50, -0.13, 0.05},
  {"minitron F16 2G K=3", false, 2 * GiB, 3,
   "CRCSCRCSCRSSCSCSCRSSCSCSCRSSCSCSCRSSCSCSCRSSCSCSCRSSCSCSCRSSCSCSCRSSCSCSCRSSCSCSSC", 122.29, 133.32, -0.13, 0.05},
  {"minitron F16 2G K=4", false, 2 * GiB, 4,
   "CRCSCSCSCRSSCSCSCRSSCSCSCSSSCSCSCRSSCSCSCRSSCSCSCRSSCSCSCSSSCSCSCRSSCSCSCRSSSSCSCC", 127.96, 134.57, -0.13, 0.05},
  {"minitron F16 2G K=6", false, 2 * GiB, 6,
   "CRCSCSCSCSSSCSCSCSSSCSCSCSSSCSCSCSSSCSCSCSSSCSCSCSSSCSCSCSSSCSCSCSSSCSCSCSSSCSCSSC", 138.63, 137.74, -0.13, 0.05},
  {"minitron F16 8G K=2", false, 8 * GiB, 2,
   "CRRRCRRRCRRRSRCRSRRRCRSRCRRRSRCRSRRRCRCRSRRRCRCRSRRRCRSRCRRRSRCRSRRRCRSRCRRRSRCRSR", 73.94, 74.14, -0.13, 0.05},
  {"minitron F16 8G K=3", false, 8 * GiB, 3,
   "CRRRCRCRCRRRCRSRCRRRCRCRSRRRCRSRCRRRSRSRCRRRCRSRCRRRSRCRSRRRCRSRCRRRSRCRSRRRCRSRCR", 71.93, 77.10, -0.13, 0.05},
  {"minitron F16 8G K=4", false, 8 * GiB, 4,
   "CRRRCRCRSRRRCRSRCRRRCRCRSRRRCRSRCRRRSRSRCRRRCRSRCRRRSRCRSRCRCRCRSRRRCRSRCRRRSRSRCR", 78.72, 77.81, -0.13, 0.05},
  {"minitron F16 8G K=6", false, 8 * GiB, 6,
   "CRRRCRCRSRRRCRSRCRRRCRCRSRCRSRCRSRRRSRCRCRSRCRSRCRRRSRCRCRCRSRSRCRRRCRSRSRRRCRCRSR", 83.73, 82.48, -0.13, 0.05},
};
// clang-format on

TEST(RingChoice, PredictionsOfTheMeasuredPlacements) {
  std::map<std::string, std::map<int32_t, double>> predicted;  // config -> K -> ms
  for (const Row& r : kRows) {
    const Model& m = r.qwen ? qwen3() : minitron();
    const std::vector<Placement> pl = parse(r.placement);
    ASSERT_EQ(pl.size(), m.subs.size()) << r.what;
    auto ms = predict_step_ms(host(), bench_options(r.budget, r.K), m.spec, m.subs, pl, 1, r.K);
    ASSERT_TRUE(ms.has_value()) << ms.status().message();
    const double err = *ms / r.measured_ms - 1;
    std::printf("  %-36s measured %7.2f  before %7.2f (%+5.1f%%)  now %7.2f (%+5.1f%%)\n", r.what, r.measured_ms,
                r.before_ms, (r.before_ms / r.measured_ms - 1) * 100, *ms, err * 100);
    EXPECT_GE(err, r.lo) << r.what << ": predicted " << *ms;
    EXPECT_LE(err, r.hi) << r.what << ": predicted " << *ms;
    predicted[std::string(r.what).substr(0, 15)][r.K] = *ms;
  }
  // minitron: the order of the depths is the measured one (8 GiB: K=3 fastest, then K=2; 2 GiB: K=2
  // and K=3 within 1 %, then K=4, K=6), and the spread K=2 -> K=6 at 2 GiB is most of the measured
  // 15.8 ms (the old model's CPU floor squeezed it to 4.2 ms).
  const auto& m8 = predicted["minitron F16 8G"];
  EXPECT_LT(m8.at(3), m8.at(2));
  EXPECT_LT(m8.at(2), m8.at(4));
  EXPECT_LT(m8.at(4), m8.at(6));
  const auto& m2 = predicted["minitron F16 2G"];
  EXPECT_LT(m2.at(3), m2.at(4));
  EXPECT_LT(m2.at(4), m2.at(6));
  EXPECT_GT(m2.at(6) - m2.at(2), 10.0);
}

// The planner's own choice on this profile: qwen3 4 GiB runs a decode step without weight copies
// (the measured K=3 configuration: 7.14 ms against 8.71 at K=2), minitron takes K = 2 or 3.
TEST(RingChoice, PlannerPrefersConfigurationsWithoutHiddenCopies) {
  struct Case {
    bool qwen;
    uint64_t budget;
  };
  for (const Case c : {Case{true, 4 * GiB}, Case{false, 2 * GiB}, Case{false, 8 * GiB}}) {
    const Model& m = c.qwen ? qwen3() : minitron();
    auto ps = Planner(host(), bench_options(c.budget, 0)).plan(m.spec, m.subs);
    ASSERT_TRUE(ps.has_value()) << ps.status().message();
    const Plan& t1 = ps->tiers.front();
    double copy_ms = -1;
    for (const StrategyEstimate& e : t1.candidates)
      if (e.feasible && e.strategy == t1.strategy) copy_ms = e.copy_ms;
    if (c.qwen) {
      EXPECT_EQ(copy_ms, 0.0) << "qwen3 4 GiB: K=" << ps->ring_slots;
      EXPECT_LE(ps->tiers.front().predicted_ms, 7.3);
    } else {
      EXPECT_TRUE(ps->ring_slots == 2 || ps->ring_slots == 3) << "minitron: K=" << ps->ring_slots;
    }
    // The scenario of the choice stays within the window of the fastest candidate.
    double fastest = 1e300;
    for (const RingChoice& rc : ps->ring_choices) fastest = std::min(fastest, rc.scenario_ms);
    EXPECT_LE(ps->scenario_ms, fastest * (1 + bench_options(0, 0).copy_window) + 1e-6);
  }
  // Off: the fastest predicted scenario wins (qwen3 4 GiB: a configuration that copies each step).
  PlannerOptions off = bench_options(4 * GiB, 0);
  off.copy_window = 0;
  auto ps = Planner(host(), off).plan(qwen3().spec, qwen3().subs);
  ASSERT_TRUE(ps.has_value());
  double fastest = 1e300;
  for (const RingChoice& rc : ps->ring_choices) fastest = std::min(fastest, rc.scenario_ms);
  EXPECT_DOUBLE_EQ(ps->scenario_ms, fastest);
}

// Each tier also carries its step time at context 0, so a measured tier is compared with the plan at
// the context its steps ran at (plan::predicted_at): a prefill tier's chunks run at 0 .. prompt, not
// all at the eval context. Attention reads more cells at a deeper context, so the low end is cheaper.
TEST(RingChoice, TiersPredictAtAnyContext) {
  PlannerOptions o = bench_options(4 * GiB, 0);
  o.prompt_tokens = 4096;
  o.context = 4096 + 128;
  auto ps = Planner(host(), o).plan(qwen3().spec, qwen3().subs);
  ASSERT_TRUE(ps.has_value()) << ps.status().message();
  ASSERT_EQ(ps->eval_context, 4096);
  for (const Plan& t : ps->tiers) {
    EXPECT_GT(t.predicted_ms_low, 0) << t.tokens;
    EXPECT_LT(t.predicted_ms_low, t.predicted_ms) << t.tokens;
    EXPECT_DOUBLE_EQ(predicted_at(t, ps->eval_context, ps->eval_context), t.predicted_ms);
    EXPECT_DOUBLE_EQ(predicted_at(t, ps->eval_context, 0), t.predicted_ms_low);
    const double mid = predicted_at(t, ps->eval_context, 2048);
    EXPECT_NEAR(mid, (t.predicted_ms + t.predicted_ms_low) / 2, 1e-9) << t.tokens;
  }
  Plan flat;
  flat.predicted_ms = 3;
  EXPECT_DOUBLE_EQ(predicted_at(flat, 0, 100), 3.0);  // no eval context: the plan's figure
}

}  // namespace
}  // namespace ferry::plan
