// HybridRunner on mixture-of-experts models (qwen3moe, Mixtral's llama with experts), on the emulated
// device: a layer's router and expert groups run wherever the plan puts them (hybrid_moe.cc), and the
// logits equal the all-CPU runner's within the executor's tolerance.
//   - the planner's placements: ferry synth's tiny-qwen3moe, tiny-mixtral and tiny-gpt-oss (expert-bias
//     tables on the device with the vectors, read by every group wherever it runs), every strategy, budgets from
//     the minimum to everything resident, prompt and decode tiers; the arena never passes the budget;
//   - every placement combination: plans edited so that each (router resident / streamed / CPU) x (groups
//     all resident, all streamed, all CPU, mixed) pair runs in some tier and layer, with a timeline, measured
//     statistics and streamed groups copied from the registered mmap along the way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "exec/device.h"
#include "exec/device_emulated.h"
#include "exec/executor_test_util.h"
#include "exec/hybrid_runner.h"
#include "exec/timeline.h"
#include "model/synth.h"

namespace ferry {
namespace {

using namespace exec_test;  // NOLINT: the shared executor test helpers
using plan::Placement;

// ferry synth's preset, written once per test into `dir`, its experts in groups of `per_group` (4 groups a
// layer for both presets).
std::unique_ptr<Loaded> synth(const TempDir& dir, const std::string& preset, DType type, int32_t per_group) {
  model::SynthOptions o;
  o.preset = preset;
  o.type = type;
  o.path = dir.file(preset + ".gguf");
  o.n_threads = 2;
  auto r = model::synth_write(o);
  EXPECT_TRUE(r.has_value()) << r.status().message();
  if (!r) return nullptr;
  model::SubLayerOptions so;
  so.experts_per_group = per_group;
  return load_file(o.path, so);
}

// Tiers 16, 8, 4, 2, 1, 1: a prompt chunk and steps of every tier of a 16-token batch.
Script every_tier() {
  Script s;
  int32_t t = 0;
  for (int n : {13, 7, 3, 2, 1, 1}) {
    std::vector<int32_t> step;
    for (int i = 0; i < n; ++i, ++t) step.push_back((37 * t + 11) % 290);
    s.steps.push_back(step);
  }
  return s;
}

// What a set of placements exercised, counted per (tier, MoE layer).
struct MoeCoverage {
  int router_cpu = 0, router_device = 0;
  int groups_resident = 0, groups_streamed = 0, groups_cpu = 0;  // layers with at least one such group
  int mixed = 0;            // layers whose groups have two placements or more
  int all_three = 0;        // layers with resident, streamed and CPU groups
  int router_cpu_groups_device = 0, router_device_groups_cpu = 0;

  void count(const std::vector<model::SubLayer>& subs, const std::vector<Placement>& pl) {
    for (size_t i = 0; i < subs.size(); ++i) {
      if (subs[i].kind != model::SubLayerKind::kMoeRouter) continue;
      std::set<Placement> kinds;
      for (size_t g = i + 1; g < subs.size() && subs[g].kind == model::SubLayerKind::kExperts; ++g) kinds.insert(pl[g]);
      const bool rcpu = pl[i] == Placement::kCpu;
      (rcpu ? router_cpu : router_device) += 1;
      groups_resident += kinds.count(Placement::kResident) > 0;
      groups_streamed += kinds.count(Placement::kStreamed) > 0;
      groups_cpu += kinds.count(Placement::kCpu) > 0;
      mixed += kinds.size() >= 2;
      all_three += kinds.size() == 3;
      router_cpu_groups_device += rcpu && (kinds.count(Placement::kResident) || kinds.count(Placement::kStreamed));
      router_device_groups_cpu += !rcpu && kinds.count(Placement::kCpu);
    }
  }
};

struct PresetCase {
  const char* preset;
  DType type;
  int32_t per_group;
};

class ExecutorMoe : public ::testing::TestWithParam<PresetCase> {};

// The planner's placements at budgets from the minimum to everything resident, every strategy.
TEST_P(ExecutorMoe, EveryStrategyAndBudgetMatchesCpu) {
  const PresetCase pc = GetParam();
  TempDir dir;
  auto l = synth(dir, pc.preset, pc.type, pc.per_group);
  ASSERT_TRUE(l);
  ASSERT_GT(l->spec.n_expert, 0);
  const Script sc = every_tier();
  const std::vector<float> ref = cpu_logits(*l, sc);
  auto min = exec::hybrid_min_budget(l->spec, l->subs, setup_for(0, std::nullopt));
  ASSERT_TRUE(min.has_value()) << min.status().message();
  uint64_t all_weights = 0;
  for (const auto& s : l->subs) all_weights += s.weight_bytes;
  MoeCoverage cov;
  int streamed = 0, copies = 0;
  for (uint64_t budget : {*min, *min + all_weights / 6, *min + all_weights / 3, *min + all_weights * 2 / 3,
                          *min + all_weights * 2}) {
    for (const auto& force : all_strategies()) {
      const std::string what = std::string(pc.preset) + " budget " + std::to_string(budget) + " strategy " +
                               (force ? plan::strategy_name(*force) : "planner");
      const std::unique_ptr<exec::HybridRunner> runner = checked_runner(*l, sc, ref, budget, force, what);
      ASSERT_TRUE(runner) << what;
      exec::HybridRunner& r = *runner;
      for (const auto& pl : r.placements()) {
        cov.count(l->subs, pl);
        for (Placement p : pl) streamed += p == Placement::kStreamed;
      }
      for (const exec::TierStats& t : r.stats()) copies += static_cast<int>(t.copies);
    }
  }
  // The planner's placements alone reach: routers on both sides, groups on the CPU, streamed and resident.
  EXPECT_GT(cov.router_cpu, 0);
  EXPECT_GT(cov.router_device, 0);
  EXPECT_GT(cov.groups_cpu, 0);
  EXPECT_GT(cov.groups_streamed, 0);
  EXPECT_GT(cov.groups_resident, 0);
  EXPECT_GT(streamed, 0);
  EXPECT_GT(copies, 0);
}

// The prefill chunk choice (HybridSetup::batch_max): with a 64-token prompt in the scenario, the planner
// also plans steps of 32 tokens and the runner takes them exactly where they predict a faster prefill and a
// decode step at most kBatchChoiceDecodeSlack slower, where the logits of a 29-token prompt in one step
// and its decode steps equal the CPU's.
TEST_P(ExecutorMoe, PrefillChunkChoiceKeepsLogits) {
  const PresetCase pc = GetParam();
  TempDir dir;
  auto l = synth(dir, pc.preset, pc.type, pc.per_group);
  ASSERT_TRUE(l);
  const Script sc = script(29, 3);
  auto cpu = engine::make_ops_runner(l->spec, l->weights, kernels::make_cpu_ops(1), kCells, 2 * kBatch);
  ASSERT_TRUE(cpu.has_value()) << cpu.status().message();
  const std::vector<float> ref =
      replay(sc, l->spec.n_vocab, [&](const exec::StepIo& io, float* out) { return (*cpu)->run(step_input(io), out); });
  auto min = exec::hybrid_min_budget(l->spec, l->subs, setup_for(0, std::nullopt));
  ASSERT_TRUE(min.has_value()) << min.status().message();
  uint64_t all_weights = 0;
  for (const auto& s : l->subs) all_weights += s.weight_bytes;
  int wider = 0;
  for (uint64_t budget : {*min, *min + all_weights / 3, *min + all_weights * 2}) {
    exec::HybridSetup base = setup_for(budget, std::nullopt);
    base.prompt_tokens = 64;
    exec::HybridSetup choose = base;
    choose.batch_max = 2 * kBatch;
    auto b = exec::make_hybrid_runner(l->spec, l->weights, l->subs, base);
    auto c = exec::make_hybrid_runner(l->spec, l->weights, l->subs, choose);
    ASSERT_TRUE(b.has_value() && c.has_value()) << "budget " << budget;
    const plan::PlanSet& pb = (*b)->plan();
    const plan::PlanSet& pw = (*c)->plan();
    ASSERT_EQ(pb.options.batch, kBatch);
    if (pw.options.batch == kBatch) continue;
    ++wider;
    EXPECT_EQ(pw.options.batch, 2 * kBatch);
    EXPECT_LT(pw.ttft_ms, pb.ttft_ms);
    EXPECT_LE(pw.tiers.front().predicted_ms, pb.tiers.front().predicted_ms * (1 + exec::kBatchChoiceDecodeSlack));
    const std::vector<float> got = replay(sc, l->spec.n_vocab, [&](const exec::StepIo& io, float* out) { return (*c)->run(io, out); });
    expect_close(ref, got, std::string(pc.preset) + " budget " + std::to_string(budget) + " batch 32");
  }
  EXPECT_GT(wider, 0);  // some budget took the longer chunk
}

// Plans edited into every combination of router and group placements (the planner's own choices need not
// reach them all): each runner's two layers take two of the 21 (router resident / streamed / CPU) x (group
// pattern) pairs in every tier, with the shared resident set the plan's invariant asks for (a sub-layer
// resident in one tier is resident in all) and a ring large enough for any sub-layer. Along the way: a
// timeline, measured statistics, and streamed groups copied from the registered mmap.
TEST_P(ExecutorMoe, EveryPlacementCombinationMatchesCpu) {
  const PresetCase pc = GetParam();
  TempDir dir;
  auto l = synth(dir, pc.preset, pc.type, pc.per_group);
  ASSERT_TRUE(l);
  ASSERT_EQ(l->spec.n_layer, 2);
  const Script sc = every_tier();
  const std::vector<float> ref = cpu_logits(*l, sc);
  const plan::PlanSet planned = plan_for_editing(*l);
  ASSERT_FALSE(planned.tiers.empty());

  const std::vector<model::SubLayer>& subs = l->subs;
  const size_t m = subs.size();
  const uint64_t largest = largest_sublayer_bytes(subs);
  const Placement R = Placement::kResident, S = Placement::kStreamed, C = Placement::kCpu;
  const std::vector<std::vector<Placement>> patterns = {{R, R, R, R}, {S, S, S, S}, {C, C, C, C}, {R, S, C, C},
                                                        {C, R, S, R}, {S, C, S, C}, {R, R, S, S}};
  const Placement routers[3] = {R, S, C};
  const int combos = 3 * static_cast<int>(patterns.size());
  MoeCoverage cov;
  int cpu_group_spans = 0, device_group_spans = 0, auto_shared = 0;
  bool explained = false;
  for (int runner = 0; 2 * runner < combos; ++runner) {
    // Sub-layer placements, the same in every tier but the head's (CPU, streamed or resident by runner).
    std::vector<Placement> pl(m, R);
    pl[0] = C;
    for (size_t i = 1; i + 1 < m; ++i) {
      if (subs[i].kind == model::SubLayerKind::kAttention) pl[i] = (runner + subs[i].layer) % 2 ? S : R;
      if (subs[i].kind != model::SubLayerKind::kMoeRouter) continue;
      const int combo = (2 * runner + subs[i].layer) % combos;
      pl[i] = routers[combo % 3];
      const std::vector<Placement>& groups = patterns[combo / 3];
      for (size_t g = 0; i + 1 + g < m && subs[i + 1 + g].kind == model::SubLayerKind::kExperts; ++g)
        pl[i + 1 + g] = groups[g % groups.size()];
    }
    plan::PlanSet ps = planned;
    ps.ring_slots = 3;
    ps.ring_slot_bytes = largest;
    const bool head_resident = runner % 3 == 0;
    for (size_t t = 0; t < ps.tiers.size(); ++t) {
      ps.tiers[t].placement = pl;
      ps.tiers[t].placement[m - 1] = head_resident ? R : t % 2 ? S : C;
      ps.tiers[t].candidates.clear();
      cov.count(subs, ps.tiers[t].placement);
    }
    ps.resident.assign(m, false);
    for (size_t i = 0; i < m; ++i) ps.resident[i] = ps.tiers[0].placement[i] == R;

    exec::HybridOptions o = setup_for(0, std::nullopt).options;
    o.measure = runner % 2 == 1;
    // kAuto where the head streams in some tiers and runs on the CPU in others (runner % 3 != 0).
    o.pin_mode = runner % 3 == 2 ? exec::PinMode::kRegister : runner % 3 == 1 ? exec::PinMode::kAuto : exec::PinMode::kCopy;
    exec::EmulatedOptions eo = setup_for(0, std::nullopt).emulated;
    eo.budget = 1ull << 30;
    auto dev = exec::make_emulated_device(eo);
    ASSERT_TRUE(dev.has_value()) << dev.status().message();
    auto made = exec::HybridRunner::create(l->spec, l->weights, subs, ps, std::move(*dev), o);
    ASSERT_TRUE(made.has_value()) << made.status().message();
    exec::HybridRunner& r = **made;
    exec::Timeline tl;
    tl.max_steps = 8;
    if (!o.measure) r.set_timeline(&tl);
    const std::string what = std::string(pc.preset) + " runner " + std::to_string(runner);
    const std::vector<float> got =
        replay(sc, l->spec.n_vocab, [&](const exec::StepIo& io, float* out) { return r.run(io, out); });
    expect_close(ref, got, what);
    for (const exec::Span& sp : tl.spans) {
      if (sp.label.find(".experts[") == std::string::npos) continue;
      cpu_group_spans += sp.lane == exec::Lane::kCpu;
      device_group_spans += sp.lane == exec::Lane::kGpu;
    }
    if (o.measure) {
      const std::string text = exec::explain_text(r);
      explained = text.find(".experts[") != std::string::npos && text.find(".router") != std::string::npos;
      EXPECT_TRUE(explained) << text;
      // Every group has a measured time, on the device or the CPU, in every tier.
      for (const exec::TierStats& t : r.stats())
        for (size_t i = 0; i < m && t.steps > 0; ++i)
          if (subs[i].kind == model::SubLayerKind::kExperts) EXPECT_GT(t.sub_ms[i], 0) << what << " " << subs[i].label();
    }
    EXPECT_TRUE(r.pin_stats().note.empty()) << r.pin_stats().note;
    if (o.pin_mode == exec::PinMode::kRegister) EXPECT_EQ(r.pin_stats().registered_bytes, r.pin_stats().bytes);
    if (o.pin_mode == exec::PinMode::kCopy) EXPECT_EQ(r.pin_stats().registered_bytes, 0u);
    if (o.pin_mode == exec::PinMode::kAuto) {  // registered: exactly the streamed groups the CPU also runs
      bool shared = false, streamed_only = false;
      for (size_t i = 0; i < m; ++i) {
        bool s_any = false, c_any = false;
        for (const auto& tier : ps.tiers) {
          s_any |= tier.placement[i] == S;
          c_any |= tier.placement[i] == C;
        }
        shared |= s_any && c_any;
        streamed_only |= s_any && !c_any;
      }
      auto_shared += shared;
      EXPECT_EQ(r.pin_stats().registered_bytes > 0, shared) << what;
      EXPECT_EQ(r.pin_stats().bytes > r.pin_stats().registered_bytes, streamed_only) << what;
    }
  }
  EXPECT_TRUE(explained);
  EXPECT_GT(auto_shared, 0);
  EXPECT_GT(cpu_group_spans, 0);
  EXPECT_GT(device_group_spans, 0);
  EXPECT_GT(cov.router_cpu, 0);
  EXPECT_GT(cov.router_device, 0);
  EXPECT_GT(cov.all_three, 0);
  EXPECT_GT(cov.router_cpu_groups_device, 0);
  EXPECT_GT(cov.router_device_groups_cpu, 0);
}

INSTANTIATE_TEST_SUITE_P(Presets, ExecutorMoe,
                         ::testing::Values(PresetCase{"tiny-qwen3moe", DType::Q8_0, 4},
                                           PresetCase{"tiny-mixtral", DType::Q4_K, 2},
                                           // gpt-oss: MXFP4 experts with bias tables, sinks, clamped SwiGLU
                                           PresetCase{"tiny-gpt-oss", DType::Q8_0, 2}),
                         [](const auto& info) {
                           std::string n = info.param.preset;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace ferry
