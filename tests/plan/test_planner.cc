// Planner behaviour pinned with synthetic profiles (issue 5): slow link + fast CPU -> static at
// tier 1; fast link + large tier -> gpu-stream; balanced -> dynamic with both pipelines loaded; more
// budget never predicts slower; accounting never exceeds the budget; one resident set for all
// tiers; deterministic output; budget below the minimum -> error naming it. Shapes: minitron-8b
// F16 and qwen3-8b Q4_K, planned from their specs (no file).
#include <gtest/gtest.h>

#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "plan/planner.h"
#include "plan_fixtures.h"

namespace ferry::plan {
namespace {

using model::SubLayerKind;
constexpr uint64_t GiB = 1ull << 30;

struct Case {
  model::ModelSpec spec;
  std::vector<model::SubLayer> subs;
};

Case minitron_f16() {
  Case c{fixtures::minitron_8b(), {}};
  c.subs = *model::build_sublayers(c.spec, model::uniform_tensor_types(DType::F16));
  return c;
}
Case qwen3_q4k() {
  Case c{fixtures::qwen3_8b(), {}};
  c.subs = *model::build_sublayers(c.spec, model::uniform_tensor_types(DType::Q4_K));
  return c;
}

// Whole FFNs unless `slices` says (the tests of the FFN slices ask for them; planning both lists costs
// ~3x the time).
PlanSet must_plan(const HardwareProfile& hw, const Case& c, uint64_t budget, int32_t ctx = 4096, int32_t slices = 1) {
  PlannerOptions o;
  o.vram_budget = budget;
  o.context = ctx;
  o.ffn_slices = slices;
  auto r = Planner(hw, o).plan(c.spec, c.subs);
  EXPECT_TRUE(r.has_value()) << r.status().message();
  return r.has_value() ? *r : PlanSet{};
}

const StrategyEstimate& est(const Plan& p, Strategy s) {
  for (const auto& c : p.candidates)
    if (c.strategy == s) return c;
  ADD_FAILURE() << "no estimate";
  return p.candidates.front();
}

HardwareProfile gpu_host() {
  auto p = load_profile(fixtures::source_dir() + "/tests/data/profiles/h200-host.json");
  EXPECT_TRUE(p.has_value()) << p.status().message();
  return *p;
}

TEST(Planner, TiersArePowersOfTwoUpToTheBatch) {
  EXPECT_EQ(token_tiers(1024), (std::vector<int32_t>{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}));
  EXPECT_EQ(token_tiers(1), (std::vector<int32_t>{1}));
  EXPECT_EQ(token_tiers(48), (std::vector<int32_t>{1, 2, 4, 8, 16, 32, 48}));
  const PlanSet ps = must_plan(gpu_host(), qwen3_q4k(), 2 * GiB);
  EXPECT_EQ(ps.plan_for(1).tokens, 1);
  EXPECT_EQ(ps.plan_for(3).tokens, 4);
  EXPECT_EQ(ps.plan_for(5000).tokens, 1024);
}

TEST(Planner, SlowLinkFastCpuIsStaticAtTierOne) {
  fixtures::SynthHw hw;
  hw.cpu_bw = 200;
  hw.link = 2;
  for (const Case& c : {minitron_f16(), qwen3_q4k()}) {
    const PlanSet ps = must_plan(fixtures::synth_profile(hw), c, 4 * GiB);
    // Static, or streamed sub-layers that stay in their ring slots from step to step (no more
    // streamed sub-layers than slots): either way a steady decode step copies nothing over the link.
    const Plan& t1 = ps.tiers.front();
    if (t1.strategy != Strategy::kStatic) {
      EXPECT_LE(est(t1, t1.strategy).n_streamed, ps.ring_slots) << c.spec.name << "\n" << plan_to_text(ps);
      EXPECT_EQ(est(t1, t1.strategy).copy_ms, 0.0) << c.spec.name << "\n" << plan_to_text(ps);
    }
  }
}

TEST(Planner, FastLinkLargeTierIsGpuStream) {
  fixtures::SynthHw hw;
  hw.cpu_bw = 40;
  hw.link = 200;
  for (const Case& c : {minitron_f16(), qwen3_q4k()}) {
    const PlanSet ps = must_plan(fixtures::synth_profile(hw), c, 2 * GiB);
    EXPECT_EQ(ps.tiers.back().strategy, Strategy::kGpuStream) << c.spec.name << "\n" << plan_to_text(ps);
    EXPECT_GT(est(ps.tiers.back(), Strategy::kGpuStream).n_streamed, 0);
  }
  // On the GPU host too: prefill chunks stream.
  const PlanSet ps = must_plan(gpu_host(), minitron_f16(), 2 * GiB);
  EXPECT_EQ(ps.tiers.back().strategy, Strategy::kGpuStream);
}

TEST(Planner, BalancedIsDynamicWithBothPipelinesLoaded) {
  fixtures::SynthHw hw;
  hw.cpu_bw = 60;  // CPU kernels at 48 GB/s
  hw.link = 50;
  for (const Case& c : {minitron_f16(), qwen3_q4k()}) {
    const PlanSet ps = must_plan(fixtures::synth_profile(hw), c, 2 * GiB);
    const Plan& t1 = ps.tiers.front();
    ASSERT_EQ(t1.strategy, Strategy::kDynamic) << c.spec.name << "\n" << plan_to_text(ps);
    const StrategyEstimate& d = est(t1, Strategy::kDynamic);
    int cpu_ffn = 0, streamed_ffn = 0;
    for (size_t i = 0; i < ps.sublayers.size(); ++i) {
      if (ps.sublayers[i].kind != SubLayerKind::kFfn) continue;
      cpu_ffn += t1.placement[i] == Placement::kCpu;
      streamed_ffn += t1.placement[i] == Placement::kStreamed;
    }
    EXPECT_GT(cpu_ffn, 0);
    EXPECT_GT(streamed_ffn, 0);
    // Both pipelines carry a real share of the step, and the step beats their sum (they overlap).
    EXPECT_GT(d.cpu_ms, 0.3 * d.step_ms);
    EXPECT_GT(d.copy_ms, 0.3 * d.step_ms);
    EXPECT_LT(d.step_ms, 0.9 * (d.cpu_ms + d.copy_ms));
    EXPECT_LT(d.step_ms, est(t1, Strategy::kStatic).step_ms);
    EXPECT_LT(d.step_ms, est(t1, Strategy::kGpuStream).step_ms);
  }
}

// The budget sweep, one test per (profile, model) so CTest runs the four in parallel; each plans every
// budget once and checks both properties on it:
//  - more budget never predicts slower. Guaranteed: the scenario the resident set is chosen for (TTFT +
//    gen_tokens decode steps). Pinned on these shapes and profiles: the decode step (tier 1) too;
//  - the accounting never exceeds the budget and adds up.
struct SweepCase {
  const char* name;
  bool gpu_host_profile;  // else the synthetic profile
  bool minitron;          // else qwen3-8b Q4_K
};

class PlannerBudgetSweep : public ::testing::TestWithParam<SweepCase> {};

TEST_P(PlannerBudgetSweep, MoreBudgetNeverPredictsSlowerAndAccountingAddsUp) {
  const HardwareProfile hw = GetParam().gpu_host_profile ? gpu_host() : fixtures::synth_profile({});
  const Case c = GetParam().minitron ? minitron_f16() : qwen3_q4k();
  // Monotony is checked along kMonotone, the accounting at every budget.
  constexpr uint64_t kMonotone[] = {1536, 2048, 2560, 3072, 4096, 5120, 5632, 6144, 8192, 12288, 16384};
  std::vector<uint64_t> budgets(std::begin(kMonotone), std::end(kMonotone));
  budgets.push_back(3000);
  budgets.push_back(40000);
  std::vector<PlanSet> sets;
  for (uint64_t mib : budgets) sets.push_back(must_plan(hw, c, mib << 20));

  for (size_t k = 1; k < std::size(kMonotone); ++k) {
    const std::string at = c.spec.name + " at " + std::to_string(sets[k].options.vram_budget >> 20) + " MiB";
    EXPECT_LE(sets[k].scenario_ms, sets[k - 1].scenario_ms * (1 + 1e-9)) << at;
    EXPECT_LE(sets[k].tiers.front().predicted_ms, sets[k - 1].tiers.front().predicted_ms * (1 + 1e-9)) << at;
    EXPECT_NEAR(sets[k].scenario_ms,
                sets[k].ttft_ms + sets[k].first_decode_extra_ms + 128 * sets[k].tiers.front().predicted_ms, 1e-6);
    EXPECT_GE(sets[k].first_decode_extra_ms, 0);
  }

  for (const PlanSet& ps : sets) {
    const std::string at = c.spec.name + " at " + std::to_string(ps.options.vram_budget >> 20) + " MiB";
    const VramBreakdown& a = ps.arena;
    EXPECT_LE(a.total, ps.options.vram_budget) << at;
    EXPECT_EQ(a.total, a.weights + a.kv + a.ring + a.scratch + a.workspace) << at;
    EXPECT_GT(a.kv, 0u);
    EXPECT_GT(a.scratch, 0u);
    EXPECT_EQ(a.workspace, ps.options.workspace_bytes);
    EXPECT_EQ(a.ring, static_cast<uint64_t>(ps.ring_slots) * ps.ring_slot_bytes);
    EXPECT_GT(ps.cuda_context_bytes, 0u);
    // Resident weights = the resident matrices + every vector.
    uint64_t w = 0;
    for (size_t i = 0; i < ps.sublayers.size(); ++i)
      w += ps.sublayers[i].vector_bytes + (ps.resident[i] ? ps.sublayers[i].bytes : 0);
    EXPECT_EQ(a.weights, w) << at;
    for (const Plan& p : ps.tiers) {
      EXPECT_EQ(p.vram.total, a.total);
      // A streamed sub-layer fits a ring slot.
      for (size_t i = 0; i < ps.sublayers.size(); ++i)
        if (p.placement[i] == Placement::kStreamed) EXPECT_LE(ps.sublayers[i].bytes, ps.ring_slot_bytes) << at;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Planner, PlannerBudgetSweep,
                         ::testing::Values(SweepCase{"GpuHostMinitronF16", true, true},
                                           SweepCase{"GpuHostQwen3Q4K", true, false},
                                           SweepCase{"SynthMinitronF16", false, true},
                                           SweepCase{"SynthQwen3Q4K", false, false}),
                         [](const ::testing::TestParamInfo<SweepCase>& info) { return std::string(info.param.name); });

TEST(Planner, EveryTierSharesOneResidentSet) {
  for (uint64_t gb : {2, 4, 8}) {
    for (const Case& c : {minitron_f16(), qwen3_q4k()}) {
      const PlanSet ps = must_plan(gpu_host(), c, gb * GiB);
      for (const Plan& p : ps.tiers)
        for (size_t i = 0; i < ps.sublayers.size(); ++i)
          EXPECT_EQ(p.placement[i] == Placement::kResident, ps.resident[i] || ps.sublayers[i].bytes == 0 &&
                                                                                   ps.sublayers[i].kind != SubLayerKind::kEmbed)
              << ps.sublayers[i].label << " tier " << p.tokens;
    }
  }
}

TEST(Planner, AttentionFirstThenSpreadNotLayerZeroFirst) {
  const Case c = minitron_f16();
  const PlanSet ps = must_plan(gpu_host(), c, 2 * GiB);
  // Some attention resident, not all, and not a prefix of the layers.
  std::vector<int32_t> res_attn;
  bool any_ffn = false;
  for (size_t i = 0; i < ps.sublayers.size(); ++i) {
    if (ps.sublayers[i].kind == SubLayerKind::kAttention && ps.resident[i]) res_attn.push_back(ps.sublayers[i].layer);
    if (ps.sublayers[i].kind == SubLayerKind::kFfn && ps.resident[i]) any_ffn = true;
  }
  ASSERT_GT(res_attn.size(), 1u);
  ASSERT_LT(res_attn.size(), 40u);
  EXPECT_FALSE(any_ffn);  // attention comes first
  EXPECT_GT(res_attn.back(), static_cast<int32_t>(res_attn.size()) - 1);  // spread, not 0..k-1
  // With more budget: all attention, then FFNs.
  const PlanSet big = must_plan(gpu_host(), c, 8 * GiB);
  for (size_t i = 0; i < big.sublayers.size(); ++i)
    if (big.sublayers[i].kind == SubLayerKind::kAttention) EXPECT_TRUE(big.resident[i]);
}

TEST(Planner, Deterministic) {
  for (const Case& c : {minitron_f16(), qwen3_q4k()}) {
    const PlanSet a = must_plan(gpu_host(), c, 3 * GiB);
    const PlanSet b = must_plan(gpu_host(), c, 3 * GiB);
    EXPECT_EQ(plan_to_json(a), plan_to_json(b));
    EXPECT_EQ(plan_to_text(a), plan_to_text(b));
  }
}

TEST(Planner, BudgetBelowMinimumNamesTheMinimum) {
  const Case c = qwen3_q4k();
  const PlanSet ok = must_plan(gpu_host(), c, 4 * GiB);
  ASSERT_GT(ok.min_budget, 0u);
  // Exactly the minimum plans; one byte less does not.
  const PlanSet at_min = must_plan(gpu_host(), c, ok.min_budget);
  EXPECT_LE(at_min.arena.total, ok.min_budget);
  PlannerOptions o;
  o.vram_budget = ok.min_budget - 1;
  auto r = Planner(gpu_host(), o).plan(c.spec, c.subs);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), ErrorCode::kOutOfMemory);
  EXPECT_NE(r.status().message().find("below the minimum " + format_bytes(ok.min_budget)), std::string::npos)
      << r.status().message();
  // A smaller context lowers the minimum (KV is part of it).
  const PlanSet small_ctx = must_plan(gpu_host(), c, 4 * GiB, 512);
  EXPECT_LT(small_ctx.min_budget, ok.min_budget);
}

TEST(Planner, JsonHasTheContractKeys) {
  const PlanSet ps = must_plan(gpu_host(), minitron_f16(), 2 * GiB);
  const auto j = nlohmann::json::parse(plan_to_json(ps));
  ASSERT_TRUE(j["tiers"].is_array());
  ASSERT_EQ(j["tiers"].size(), 11u);
  const std::set<std::string> strategies = {"gpu-stream", "static", "dynamic"};
  const std::set<std::string> wheres = {"resident", "streamed", "cpu"};
  for (const auto& t : j["tiers"]) {
    EXPECT_TRUE(t["tokens"].is_number_integer());
    EXPECT_TRUE(strategies.count(t["strategy"].get<std::string>()));
    EXPECT_GT(t["predicted_ms"].get<double>(), 0);
    for (const char* k : {"weights", "kv", "ring", "scratch", "total"}) EXPECT_TRUE(t["vram"][k].is_number_unsigned()) << k;
    ASSERT_EQ(t["placement"].size(), ps.sublayers.size());
    for (const auto& p : t["placement"]) EXPECT_TRUE(wheres.count(p["where"].get<std::string>()));
  }
  EXPECT_EQ(j["tiers"][0]["placement"][0]["sublayer"], "embed");
  EXPECT_EQ(j["tiers"][0]["placement"][0]["where"], "cpu");
}

TEST(Planner, TextFitsOneScreen) {
  for (const Case& c : {minitron_f16(), qwen3_q4k()}) {
    const std::string text = plan_to_text(must_plan(gpu_host(), c, 2 * GiB));
    std::istringstream in(text);
    std::string line;
    int lines = 0;
    while (std::getline(in, line)) {
      ++lines;
      EXPECT_LE(line.size(), 160u) << line;
    }
    EXPECT_LE(lines, 45) << text;
    EXPECT_NE(text.find("runner-up"), std::string::npos);
    EXPECT_NE(text.find("TTFT"), std::string::npos);
  }
}

TEST(Planner, NoGpuRunsEverythingOnTheCpu) {
  fixtures::SynthHw hw;
  hw.gpu = false;
  const PlanSet ps = must_plan(fixtures::synth_profile(hw), qwen3_q4k(), 0);
  EXPECT_FALSE(ps.gpu);
  EXPECT_EQ(ps.arena.total, 0u);
  for (const Plan& p : ps.tiers) {
    EXPECT_EQ(p.strategy, Strategy::kStatic);
    for (Placement pl : p.placement) EXPECT_EQ(pl, Placement::kCpu);
  }
  EXPECT_NE(plan_to_text(ps).find("no GPU"), std::string::npos);
  EXPECT_TRUE(nlohmann::json::parse(plan_to_json(ps))["gpu"].is_null());
}

// Plan::sub_ms (what --explain prints next to each measured sub-layer): one entry per sub-layer; with no
// GPU the step is their sum; under a budget a CPU FFN costs its CPU time and a resident one its GPU time,
// which is far less on the GPU host.
TEST(Planner, PerSubLayerTimesAddUpAndFollowThePlacement) {
  fixtures::SynthHw hw;
  hw.gpu = false;
  const PlanSet cpu_only = must_plan(fixtures::synth_profile(hw), qwen3_q4k(), 0);
  for (const Plan& p : cpu_only.tiers) {
    ASSERT_EQ(p.sub_ms.size(), cpu_only.sublayers.size());
    double sum = 0;
    for (double v : p.sub_ms) sum += v;
    EXPECT_NEAR(sum, p.predicted_ms, 1e-9 * p.predicted_ms) << p.tokens;
  }
  const PlanSet ps = must_plan(gpu_host(), qwen3_q4k(), 4 * GiB);
  const Plan& t1 = ps.tiers.front();
  ASSERT_EQ(t1.sub_ms.size(), ps.sublayers.size());
  double cpu_ffn = 0, res_ffn = 0;
  for (size_t i = 0; i < ps.sublayers.size(); ++i) {
    EXPECT_GE(t1.sub_ms[i], 0) << ps.sublayers[i].label;
    if (ps.sublayers[i].kind != SubLayerKind::kFfn) continue;
    if (t1.placement[i] == Placement::kCpu) cpu_ffn = t1.sub_ms[i];
    if (t1.placement[i] == Placement::kResident) res_ffn = t1.sub_ms[i];
  }
  ASSERT_GT(cpu_ffn, 0) << plan_to_text(ps);
  ASSERT_GT(res_ffn, 0) << plan_to_text(ps);
  EXPECT_GT(cpu_ffn, 5 * res_ffn);
}

// Options of a 4K-token scenario (context 4224: a 4096-token prompt and 128 generated) at `budget`.
PlannerOptions options_4k(uint64_t budget) {
  PlannerOptions o;
  o.vram_budget = budget;
  o.context = 4224;
  o.batch = 512;
  return o;
}

// A smaller prefill GEMM staging (PlannerOptions::gemm_staging_bytes) leaves the budget's difference to
// weights: qwen3-8b Q4_K at 4 GiB, staging 16 MiB instead of the whole 4096 x 12288 down projection (96
// MiB) frees 80 MiB, and with the arena's slack one more 81 MiB FFN stays on the GPU (resident, or in a
// ring slot it never leaves in decode), so the decode step is predicted faster.
TEST(Planner, SmallerGemmStagingLeavesMoreToWeights) {
  const Case c = qwen3_q4k();
  PlannerOptions o = options_4k(4 * GiB);
  o.gemm_staging_bytes = 0;
  auto whole = Planner(gpu_host(), o).plan(c.spec, c.subs);
  o.gemm_staging_bytes = 16ull << 20;
  auto small = Planner(gpu_host(), o).plan(c.spec, c.subs);
  ASSERT_TRUE(whole.has_value() && small.has_value());
  EXPECT_NEAR(static_cast<double>(whole->arena.scratch - small->arena.scratch), 80.0 * (1 << 20), 1 << 20);
  EXPECT_GT(small->arena.weights + small->arena.ring, whole->arena.weights + whole->arena.ring)
      << plan_to_text(*whole) << "\n" << plan_to_text(*small);
  EXPECT_LE(small->arena.total, o.vram_budget);
  EXPECT_LT(small->tiers.front().predicted_ms, 0.95 * whole->tiers.front().predicted_ms);
  // ... and its prefill GEMMs run as more dequantize + GEMM pairs (kGemmExtraChunkS each): 15 more a
  // layer at 512 tokens, ~5.7 ms a chunk of GPU time.
  EXPECT_GT(small->tiers.back().predicted_ms, whole->tiers.back().predicted_ms + 2.0)
      << plan_to_text(*whole) << "\n" << plan_to_text(*small);
}

// By default (kGemmStagingAuto) the planner takes the small staging exactly where it keeps more weights on
// the GPU and a faster decode step (the case above), and the whole matrix where the model fits anyway.
TEST(Planner, AutoGemmStagingIsSmallOnlyWhereItHoldsMoreWeights) {
  const Case c = qwen3_q4k();
  PlannerOptions o = options_4k(4 * GiB);
  ASSERT_EQ(o.gemm_staging_bytes, PlannerOptions::kGemmStagingAuto);
  auto tight = Planner(gpu_host(), o).plan(c.spec, c.subs);
  o.vram_budget = 16 * GiB;
  auto fits = Planner(gpu_host(), o).plan(c.spec, c.subs);
  ASSERT_TRUE(tight.has_value() && fits.has_value());
  EXPECT_EQ(tight->options.gemm_staging_bytes, PlannerOptions::kGemmStagingSmall) << plan_to_text(*tight);
  EXPECT_EQ(fits->options.gemm_staging_bytes, 0u) << plan_to_text(*fits);
  EXPECT_NE(plan_to_text(*tight).find("GEMM staging 16"), std::string::npos) << plan_to_text(*tight);
  // The minimum budget is the small staging's (80 MiB less scratch), whichever plan is returned.
  o.gemm_staging_bytes = 0;
  auto whole = Planner(gpu_host(), o).plan(c.spec, c.subs);
  ASSERT_TRUE(whole.has_value());
  EXPECT_LT(fits->min_budget, whole->min_budget);
}

// The chosen resident set grows into what it leaves of the budget. minitron-8b F16 at 2 GiB and a 4K
// context: the larger greedy sets change the decode plan (more FFNs stream), the robust choice prefers a
// smaller set with fewer decode copies, and before growing the plan left ~600 MiB of the budget empty
// (on session 9's call-3 host profile and on this session-6 one).
TEST(Planner, ChosenSetGrowsIntoTheRestOfTheBudget) {
  auto hw = load_profile(fixtures::source_dir() + "/tests/data/profiles/h200-host-s6.json");
  ASSERT_TRUE(hw.has_value()) << hw.status().message();
  const Case c = minitron_f16();
  PlannerOptions o = options_4k(2 * GiB);
  o.prompt_tokens = 4096;
  auto ps = Planner(*hw, o).plan(c.spec, c.subs);
  ASSERT_TRUE(ps.has_value()) << ps.status().message();
  EXPECT_GT(ps->arena.total, 2 * GiB - 128 * (1ull << 20)) << plan_to_text(*ps);
  EXPECT_LE(ps->arena.total, 2 * GiB);
  bool noted = false;
  for (const std::string& n : ps->notes) noted |= n.find("grown into the budget") != std::string::npos;
  EXPECT_TRUE(noted) << plan_to_text(*ps);
}

TEST(Planner, WholeModelFitsIsAllResident) {
  const PlanSet ps = must_plan(gpu_host(), qwen3_q4k(), 16 * GiB);
  EXPECT_EQ(ps.ring_slots, 0);
  for (const Plan& p : ps.tiers)
    for (size_t i = 1; i < p.placement.size(); ++i) EXPECT_EQ(p.placement[i], Placement::kResident);
  EXPECT_GT(ps.decode_tok_s, 100);
}

TEST(Planner, GpuHostPredictionsAreInTheExpectedRange) {
  // Sanity against the figures: streaming minitron-8b F16 once over 55 GB/s is ~0.3 s, so a
  // 1K-token prefill at 2 GB is around that; decode cannot beat (W - R) / H.
  const PlanSet ps = must_plan(gpu_host(), minitron_f16(), 2 * GiB);
  EXPECT_GT(ps.ttft_ms, 150);
  EXPECT_LT(ps.ttft_ms, 600);
  EXPECT_GE(ps.tiers.front().predicted_ms, ps.limit_h_ms * 0.95);
  EXPECT_GT(ps.limit_h_ms, ps.limit_cp_ms);
  EXPECT_GE(ps.limit_serial_ms, ps.limit_h_ms);
  EXPECT_GE(ps.tiers.front().predicted_ms, ps.limit_serial_ms * 0.95);
}

TEST(Planner, SerialLimitCountsTheGpuWhenItHoldsMostOfTheModel) {
  // qwen3-8b Q4_K at 4 GiB and a 4K context on the quick profile of a session-6 host run: most sub-layers
  // resident, 11 FFNs on the CPU. One sequence's CPU and GPU sub-layers run one after the other, so the
  // serial ceiling adds the GPU's compute to the CPU bytes' time.
  auto hw = load_profile(fixtures::source_dir() + "/tests/data/profiles/h200-host-s6.json");
  ASSERT_TRUE(hw.has_value()) << hw.status().message();
  const PlanSet ps = must_plan(*hw, qwen3_q4k(), 4 * GiB, 4224);
  const Plan& d = ps.tiers.front();
  double gpu_ms = 0;
  for (const StrategyEstimate& e : d.candidates)
    if (e.feasible && e.strategy == d.strategy) gpu_ms = e.gpu_ms;
  ASSERT_GT(gpu_ms, 0);
  EXPECT_GT(ps.limit_serial_ms, ps.limit_h_ms);
  EXPECT_LE(ps.limit_serial_ms, ps.limit_h_ms + gpu_ms + 1e-9);
  EXPECT_GE(d.predicted_ms, ps.limit_serial_ms * 0.95);
}

// FFN slices: the planner plans whole FFNs and slices and keeps the faster scenario; the sliced list's
// plan accounts for its slices like any sub-layer; more budget never predicts slower with the choice.
TEST(Planner, FfnSlicesAreKeptOnlyWhereTheyAreFaster) {
  auto hw = load_profile(fixtures::source_dir() + "/tests/data/profiles/h200-host-s6.json");
  ASSERT_TRUE(hw.has_value()) << hw.status().message();
  const Case c = qwen3_q4k();
  double prev = 1e300;
  for (uint64_t mib : {2048, 4096}) {
    const PlanSet whole = must_plan(*hw, c, mib << 20, 4224, 1);
    const PlanSet cut = must_plan(*hw, c, mib << 20, 4224, 2);
    const PlanSet any = must_plan(*hw, c, mib << 20, 4224, PlannerOptions::kFfnSlicesAuto);
    const std::string at = std::to_string(mib) + " MiB";
    EXPECT_EQ(whole.ffn_slices, 1);
    EXPECT_EQ(cut.ffn_slices, 2);
    EXPECT_EQ(cut.sublayers.size(), whole.sublayers.size() + 36u) << at;
    EXPECT_LE(cut.arena.total, mib << 20) << at;
    for (const Plan& p : cut.tiers)
      for (size_t i = 0; i < p.placement.size(); ++i)
        if (p.placement[i] == Placement::kStreamed) EXPECT_LE(cut.sublayers[i].bytes, cut.ring_slot_bytes) << at;
    // Slices place half an FFN at a time: the ring's slots halve with them.
    if (cut.ring_slots > 0 && whole.ring_slots > 0) EXPECT_LT(cut.ring_slot_bytes, whole.ring_slot_bytes) << at;
    EXPECT_DOUBLE_EQ(any.scenario_ms, std::min(whole.scenario_ms, cut.scenario_ms)) << at;
    EXPECT_EQ(any.ffn_slices, cut.scenario_ms < whole.scenario_ms ? 2 : 1) << at;
    EXPECT_LE(any.scenario_ms, prev * (1 + 1e-9)) << at;
    prev = any.scenario_ms;
    EXPECT_GE(any.tiers.front().predicted_ms, any.limit_serial_ms * 0.95) << at;
  }
  // A model that fits is planned whole.
  EXPECT_EQ(must_plan(*hw, c, 16 * GiB, 4224, PlannerOptions::kFfnSlicesAuto).ffn_slices, 1);
}

TEST(Planner, MoeModelPlans) {
  model::ModelSpec s = fixtures::qwen3_8b();
  s.arch = model::Arch::kQwen3Moe;
  s.name = "moe";
  s.n_layer = 8;
  s.n_ff = 0;
  s.n_expert = 32;
  s.n_expert_used = 4;
  s.n_ff_expert = 1024;
  auto subs = model::build_sublayers(s, model::uniform_tensor_types(DType::Q4_K));
  ASSERT_TRUE(subs.has_value()) << subs.status().message();
  const PlanSet ps = must_plan(gpu_host(), Case{s, *subs}, 1536ull << 20);
  EXPECT_LE(ps.arena.total, 1536ull << 20);
  EXPECT_NE(plan_to_text(ps).find("moe"), std::string::npos);
}

TEST(Planner, RejectsBadOptions) {
  const Case c = qwen3_q4k();
  PlannerOptions o;
  o.vram_budget = 4 * GiB;
  o.ring_slots = 1;
  auto r = Planner(gpu_host(), o).plan(c.spec, c.subs);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  o.ring_slots = 2;
  o.context = 0;
  EXPECT_FALSE(Planner(gpu_host(), o).plan(c.spec, c.subs).has_value());
  o.context = 4096;
  o.vram_budget = 200 * GiB;  // more than an H200 has
  auto big = Planner(gpu_host(), o).plan(c.spec, c.subs);
  ASSERT_FALSE(big.has_value());
  EXPECT_NE(big.status().message().find("NVIDIA H200"), std::string::npos) << big.status().message();
}

}  // namespace
}  // namespace ferry::plan
