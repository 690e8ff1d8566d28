// HybridRunner on the emulated device: for tiny models of every dense architecture, every strategy
// (forced through the plan's candidates) x several budgets x tiers 1 and > 1, the logits equal the
// all-CPU runner's within tolerance, the arena never passes the budget, and a budget below the
// minimum is one clear error naming it. The emulated device requires pinned host memory for copies,
// poisons fresh blocks with NaN and throttles copies, so a missing wait or upload shows as bad logits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "exec/device_emulated.h"
#include "exec/executor_test_util.h"
#include "exec/hybrid_runner.h"
#include "format/gguf.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/model_spec.h"
#include "model/sublayer.h"
#include "model/weights.h"
#include "plan/profile.h"

namespace ferry {
namespace {

using namespace exec_test;  // NOLINT: the shared executor test helpers

struct Coverage {
  int streamed = 0, cpu = 0, resident = 0, prefetch_hits = 0, copies = 0;
};

class ExecutorArch : public ::testing::TestWithParam<std::string> {};

TEST_P(ExecutorArch, EveryStrategyAndBudgetMatchesCpu) {
  TempDir dir;
  auto l = load(dir, tiny(GetParam()));
  ASSERT_TRUE(l);
  const Script sc = script(13, 4);  // tier 16, then tier 1
  const std::vector<float> ref = cpu_logits(*l, sc);

  auto min = exec::hybrid_min_budget(l->spec, l->subs, setup_for(0, std::nullopt));
  ASSERT_TRUE(min.has_value()) << min.status().message();
  uint64_t all_weights = 0;
  for (const auto& s : l->subs) all_weights += s.weight_bytes;
  const std::vector<uint64_t> budgets = {*min, *min + all_weights / 3, *min + all_weights * 2};

  Coverage cov;
  for (uint64_t budget : budgets) {
    for (const auto& force : all_strategies()) {
      const std::string what = GetParam() + " budget " + std::to_string(budget) + " strategy " +
                               (force ? plan::strategy_name(*force) : "planner");
      const std::unique_ptr<exec::HybridRunner> runner = checked_runner(*l, sc, ref, budget, force, what);
      ASSERT_TRUE(runner) << what;
      exec::HybridRunner& r = *runner;
      for (const auto& pl : r.placements())
        for (plan::Placement p : pl) {
          cov.streamed += p == plan::Placement::kStreamed;
          cov.cpu += p == plan::Placement::kCpu;
          cov.resident += p == plan::Placement::kResident;
        }
      for (const exec::TierStats& t : r.stats()) {
        cov.prefetch_hits += static_cast<int>(t.prefetch_hits);
        cov.copies += static_cast<int>(t.copies);
      }
    }
  }
  // The matrix must have exercised every path: streaming through the ring, CPU sub-layers, residency.
  EXPECT_GT(cov.streamed, 0);
  EXPECT_GT(cov.cpu, 0);
  EXPECT_GT(cov.resident, 0);
  EXPECT_GT(cov.copies, 0);
}

TEST_P(ExecutorArch, BudgetBelowMinimumIsOneClearError) {
  TempDir dir;
  auto l = load(dir, tiny(GetParam()));
  ASSERT_TRUE(l);
  auto min = exec::hybrid_min_budget(l->spec, l->subs, setup_for(0, std::nullopt));
  ASSERT_TRUE(min.has_value()) << min.status().message();
  auto r = exec::make_hybrid_runner(l->spec, l->weights, l->subs, setup_for(*min - 1, std::nullopt));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), ErrorCode::kOutOfMemory);
  EXPECT_NE(r.status().message().find("minimum"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(std::to_string(*min) + " bytes"), std::string::npos) << r.status().message();
  // And the minimum itself works.
  auto ok = exec::make_hybrid_runner(l->spec, l->weights, l->subs, setup_for(*min, std::nullopt));
  EXPECT_TRUE(ok.has_value()) << ok.status().message();
}

// FFN slices (PlanSet::ffn_slices): every strategy x budgets cutting through the FFNs x 2 and 3 slices.
// Slices of one layer on the CPU and on the device run at once (run_slices): the normed rows go down,
// the CPU's partial sum comes back up. Logits must equal the all-CPU runner's as with whole FFNs.
TEST_P(ExecutorArch, FfnSlicesMatchCpu) {
  TempDir dir;
  auto l = load(dir, tiny(GetParam()));
  ASSERT_TRUE(l);
  const Script sc = script(13, 4);
  const std::vector<float> ref = cpu_logits(*l, sc);
  uint64_t all_weights = 0;
  for (const auto& s : l->subs) all_weights += s.weight_bytes;
  int mixed = 0, streamed_slices = 0, resident_slices = 0;
  for (int32_t slices : {2, 3}) {
    exec::HybridSetup base = setup_for(0, std::nullopt);
    base.options.ffn_slices = slices;
    base.split_layer_s = 0;  // tiny layers: without this price the planner splits them
    auto min = exec::hybrid_min_budget(l->spec, l->subs, base);
    ASSERT_TRUE(min.has_value()) << min.status().message();
    for (uint64_t budget : {*min, *min + all_weights / 5, *min + all_weights / 2, *min + all_weights * 2}) {
      for (const auto& force : std::vector<std::optional<plan::Strategy>>{
               std::nullopt, plan::Strategy::kGpuStream, plan::Strategy::kStatic, plan::Strategy::kDynamic}) {
        const std::string what = GetParam() + " slices " + std::to_string(slices) + " budget " +
                                 std::to_string(budget) + " strategy " + (force ? plan::strategy_name(*force) : "planner");
        exec::HybridSetup s = setup_for(budget, force);
        s.options.ffn_slices = slices;
        s.split_layer_s = 0;
        auto runner = exec::make_hybrid_runner(l->spec, l->weights, l->subs, s);
        ASSERT_TRUE(runner.has_value()) << what << ": " << runner.status().message();
        exec::HybridRunner& r = **runner;
        ASSERT_EQ(r.plan().ffn_slices, slices) << what;
        const std::vector<float> got =
            replay(sc, l->spec.n_vocab, [&](const exec::StepIo& io, float* out) { return r.run(io, out); });
        expect_close(ref, got, what);
        auto mi = r.device().memory_info();
        ASSERT_TRUE(mi.has_value());
        EXPECT_LE(mi->arena_peak, budget) << what;
        const std::vector<plan::SubLayerSummary>& subs = r.plan().sublayers;
        for (const auto& pl : r.placements()) {
          ASSERT_EQ(pl.size(), subs.size()) << what;
          for (size_t i = 0; i < subs.size(); ++i) {
            if (subs[i].slice < 0) continue;
            streamed_slices += pl[i] == plan::Placement::kStreamed;
            resident_slices += pl[i] == plan::Placement::kResident;
            if (subs[i].slice != 0) continue;
            bool cpu = false, dev = false;
            for (size_t k = i; k < subs.size() && subs[k].layer == subs[i].layer && subs[k].slice >= 0; ++k)
              (pl[k] == plan::Placement::kCpu ? cpu : dev) = true;
            mixed += cpu && dev;
          }
        }
      }
    }
  }
  // The matrix must have run layers split between the CPU and the device, and slices through the ring.
  EXPECT_GT(mixed, 0);
  EXPECT_GT(streamed_slices, 0);
  EXPECT_GT(resident_slices, 0);
}

INSTANTIATE_TEST_SUITE_P(Archs, ExecutorArch, ::testing::Values("llama", "qwen2", "qwen3", "gemma3"),
                         [](const auto& info) { return info.param; });

// Quantized slices: boundaries at whole blocks, a strided ffn_down slice gathered for the device, the
// measured per-sub-layer times of slices run at once.
TEST(Executor, QuantizedFfnSlicesWithMeasure) {
  TempDir dir;
  TinyModel m = tiny("llama", DType::Q8_0);
  m.n_ff = 96;  // three Q8_0 blocks: slices [0, 32) and [32, 96)
  auto l = load(dir, m);
  ASSERT_TRUE(l);
  const Script sc = script(9, 3);
  const std::vector<float> ref = cpu_logits(*l, sc);
  uint64_t all_weights = 0;
  for (const auto& s : l->subs) all_weights += s.weight_bytes;
  exec::HybridSetup base = setup_for(0, std::nullopt);
  base.options.ffn_slices = 2;
  auto min = exec::hybrid_min_budget(l->spec, l->subs, base);
  ASSERT_TRUE(min.has_value()) << min.status().message();
  for (const auto& force : {plan::Strategy::kStatic, plan::Strategy::kDynamic, plan::Strategy::kGpuStream}) {
    exec::HybridSetup s = setup_for(*min + all_weights / 3, force);
    s.options.ffn_slices = 2;
    s.split_layer_s = 0;
    s.options.measure = true;
    auto runner = exec::make_hybrid_runner(l->spec, l->weights, l->subs, s);
    ASSERT_TRUE(runner.has_value()) << runner.status().message();
    const std::vector<float> got =
        replay(sc, l->spec.n_vocab, [&](const exec::StepIo& io, float* out) { return (*runner)->run(io, out); });
    expect_close(ref, got, std::string("llama Q8_0 slices ") + plan::strategy_name(force));
    const std::string text = exec::explain_text(**runner);
    EXPECT_NE(text.find(".ffn[0:32)"), std::string::npos) << text;
  }
}

TEST(Executor, QuantizedWeightsAndMeasuredStats) {
  TempDir dir;
  auto l = load(dir, tiny("llama", DType::Q8_0));
  ASSERT_TRUE(l);
  const Script sc = script(9, 3);
  const std::vector<float> ref = cpu_logits(*l, sc);
  auto min = exec::hybrid_min_budget(l->spec, l->subs, setup_for(0, std::nullopt));
  ASSERT_TRUE(min.has_value());
  exec::HybridSetup s = setup_for(*min, plan::Strategy::kGpuStream);
  s.options.measure = true;
  auto runner = exec::make_hybrid_runner(l->spec, l->weights, l->subs, s);
  ASSERT_TRUE(runner.has_value()) << runner.status().message();
  const std::vector<float> got =
      replay(sc, l->spec.n_vocab, [&](const exec::StepIo& io, float* out) { return (*runner)->run(io, out); });
  expect_close(ref, got, "llama Q8_0");
  const std::string text = exec::explain_text(**runner);
  EXPECT_NE(text.find("predicted ms"), std::string::npos) << text;
  EXPECT_NE(text.find("blk.0.ffn"), std::string::npos) << text;
  EXPECT_NE(text.find("the plan's time for it"), std::string::npos) << text;
}

// The profile check's ratio: the CPU sub-layers' measured time over the plan's, over every tier, once
// enough calls ran (tiny models' CPU sub-layers are priced below the 20 us floor, so synthetic stats).
TEST(Executor, CpuVsProfileNeedsEnoughCallsAndSumsTiers) {
  std::vector<exec::TierStats> st(2);
  EXPECT_FALSE(exec::cpu_vs_profile(st).has_value());
  st[0].cpu_ms = 30;
  st[0].cpu_plan_ms = 100;
  st[0].cpu_calls = 5;
  EXPECT_FALSE(exec::cpu_vs_profile(st).has_value());  // 5 calls < 8
  st[1].cpu_ms = 30;
  st[1].cpu_plan_ms = 20;
  st[1].cpu_calls = 5;
  ASSERT_TRUE(exec::cpu_vs_profile(st).has_value());
  EXPECT_DOUBLE_EQ(*exec::cpu_vs_profile(st), 0.5);  // 60 ms measured for 120 planned
  EXPECT_FALSE(exec::cpu_vs_profile(st, 11).has_value());  // 10 calls in all
}

// A second step on another tier reuses the resident upload; a step back on tier 1 reuses the prefetch
// the previous tier-1 step started (weights do not depend on data).
TEST(Executor, DecodeReusesPrefetchedSlots) {
  TempDir dir;
  auto l = load(dir, tiny("llama"));
  ASSERT_TRUE(l);
  auto min = exec::hybrid_min_budget(l->spec, l->subs, setup_for(0, std::nullopt));
  ASSERT_TRUE(min.has_value());
  auto runner = exec::make_hybrid_runner(l->spec, l->weights, l->subs, setup_for(*min, plan::Strategy::kGpuStream));
  ASSERT_TRUE(runner.has_value()) << runner.status().message();
  const Script sc = script(5, 6);
  (void)replay(sc, l->spec.n_vocab, [&](const exec::StepIo& io, float* out) { return (*runner)->run(io, out); });
  const exec::TierStats& t1 = (*runner)->stats().front();
  ASSERT_EQ(t1.tokens, 1);
  EXPECT_EQ(t1.steps, 6);
  EXPECT_DOUBLE_EQ(t1.context_sum / t1.steps, 7.5);  // decode steps at positions 5..10: cells before each
  if (!(*runner)->placements().front().empty() && t1.copies > 0) EXPECT_GT(t1.prefetch_hits, 0);
}

// Streamed weights copied from the registered mmap (PinMode::kRegister) give the same logits as the
// pinned copies (kCopy, several copy threads) at the minimum budget, where FFNs stream; the emulated
// device (require_pinned) saw every streamed matrix inside a registered range. A device that refuses
// registration falls back to copying, with a note.
TEST(Executor, RegisteredMmapMatchesPinnedCopy) {
  TempDir dir;
  auto l = load(dir, tiny("llama", DType::Q8_0));
  ASSERT_TRUE(l);
  const Script sc = script(11, 4);
  const std::vector<float> ref = cpu_logits(*l, sc);
  auto min = exec::hybrid_min_budget(l->spec, l->subs, setup_for(0, std::nullopt));
  ASSERT_TRUE(min.has_value()) << min.status().message();

  auto run_mode = [&](exec::PinMode mode, bool refuse, std::unique_ptr<exec::HybridRunner>* keep) {
    exec::HybridSetup s = setup_for(*min, plan::Strategy::kGpuStream);
    s.options.pin_mode = mode;
    s.options.pin_threads = 3;
    s.emulated.refuse_register = refuse;
    auto runner = exec::make_hybrid_runner(l->spec, l->weights, l->subs, s);
    EXPECT_TRUE(runner.has_value()) << runner.status().message();
    if (!runner) return std::vector<float>{};
    std::vector<float> got =
        replay(sc, l->spec.n_vocab, [&](const exec::StepIo& io, float* out) { return (*runner)->run(io, out); });
    *keep = std::move(*runner);
    return got;
  };
  std::unique_ptr<exec::HybridRunner> copy_r, reg_r, fallback_r;
  const std::vector<float> copied = run_mode(exec::PinMode::kCopy, false, &copy_r);
  const std::vector<float> registered = run_mode(exec::PinMode::kRegister, false, &reg_r);
  const std::vector<float> fallback = run_mode(exec::PinMode::kRegister, true, &fallback_r);
  ASSERT_TRUE(copy_r && reg_r && fallback_r);
  expect_close(ref, copied, "copy");
  expect_close(ref, registered, "register");
  EXPECT_EQ(copied, registered);  // the same bytes reach the same kernels
  EXPECT_EQ(copied, fallback);

  // Copy mode: pinned buffers, several threads, nothing registered.
  const exec::PinStats& pc = copy_r->pin_stats();
  EXPECT_EQ(pc.mode, exec::PinMode::kCopy);
  EXPECT_GT(pc.bytes, 0u);
  EXPECT_GT(pc.ranges, 1);
  EXPECT_GT(pc.threads, 1);
  EXPECT_EQ(copy_r->pin_seconds(), pc.seconds);
  EXPECT_LE(copy_r->pin_seconds(), copy_r->load_seconds());
  EXPECT_EQ(std::move(copy_r->device().memory_info()).value().registered_bytes, 0u);

  // Register mode: streaming happened, every streamed matrix lies in a registered range.
  const exec::PinStats& pr = reg_r->pin_stats();
  EXPECT_EQ(pr.mode, exec::PinMode::kRegister) << pr.note;
  EXPECT_TRUE(pr.note.empty());
  EXPECT_GT(pr.ranges, 0);
  EXPECT_EQ(reg_r->pinned_weight_bytes(), pr.bytes);
  EXPECT_EQ(std::move(reg_r->device().memory_info()).value().registered_bytes, pr.bytes);
  auto* emu = dynamic_cast<exec::EmulatedDevice*>(&reg_r->device());
  ASSERT_NE(emu, nullptr);
  EXPECT_EQ(emu->register_calls(), pr.ranges);
  int64_t copies = 0;
  uint64_t copy_bytes = 0;
  for (const exec::TierStats& t : reg_r->stats()) {
    copies += t.copies;
    copy_bytes += t.copy_bytes;
  }
  EXPECT_GT(copies, 0);
  EXPECT_GT(copy_bytes, 0u);
  int streamed_matrices = 0;
  for (const auto& pl : reg_r->placements())
    for (size_t i = 0; i < pl.size(); ++i) {
      if (pl[i] != plan::Placement::kStreamed) continue;
      for (const model::WeightRef& w : l->subs[i].weights) {
        if (w.rows <= 1) continue;  // norms and biases are resident vectors
        const gguf::TensorInfo* t = l->file->find_tensor(w.name);
        ASSERT_NE(t, nullptr) << w.name;
        EXPECT_TRUE(emu->is_registered(t->data, t->nbytes)) << w.name;
        ++streamed_matrices;
      }
    }
  EXPECT_GT(streamed_matrices, 0);

  // Refused registration: copied instead, and said so.
  const exec::PinStats& pf = fallback_r->pin_stats();
  EXPECT_EQ(pf.registered_bytes, 0u);
  EXPECT_EQ(pf.registered_ranges, 0);
  EXPECT_NE(pf.note.find("refuse_register"), std::string::npos) << pf.note;
  EXPECT_GT(pf.bytes, 0u);
  EXPECT_EQ(std::move(fallback_r->device().memory_info()).value().registered_bytes, 0u);
}

// PinMode::kAuto (the default) keeps one host copy of the weights: a streamed sub-layer the CPU also
// computes in some tier is registered in place (the CPU reads the mapping anyway), every other streamed
// one is copied into pinned memory, and the mapping's pages of copied and resident weights are handed
// back after load. Logits equal the CPU's whatever the mix.
TEST(Executor, AutoPinRegistersWhatTheCpuSharesAndCopiesTheRest) {
  TempDir dir;
  auto l = load(dir, tiny("llama", DType::Q8_0));
  ASSERT_TRUE(l);
  const Script sc = script(11, 4);
  const std::vector<float> ref = cpu_logits(*l, sc);
  auto min = exec::hybrid_min_budget(l->spec, l->subs, setup_for(0, std::nullopt));
  ASSERT_TRUE(min.has_value()) << min.status().message();
  uint64_t all_weights = 0;
  for (const auto& s : l->subs) all_weights += s.weight_bytes;
  int shared = 0, copied_only = 0;
  for (uint64_t budget : {*min, *min + all_weights / 4, *min + all_weights / 2}) {
    exec::HybridSetup s = setup_for(budget, std::nullopt);
    ASSERT_EQ(s.options.pin_mode, exec::PinMode::kAuto);
    auto runner = exec::make_hybrid_runner(l->spec, l->weights, l->subs, s);
    ASSERT_TRUE(runner.has_value()) << runner.status().message();
    exec::HybridRunner& r = **runner;
    expect_close(ref, replay(sc, l->spec.n_vocab, [&](const exec::StepIo& io, float* out) { return r.run(io, out); }),
                 "auto, budget " + std::to_string(budget));
    auto* emu = dynamic_cast<exec::EmulatedDevice*>(&r.device());
    ASSERT_NE(emu, nullptr);
    const size_t m = l->subs.size();
    std::vector<uint8_t> streamed(m, 0), cpu(m, 0);
    for (const auto& pl : r.placements())
      for (size_t i = 0; i < m; ++i) {
        streamed[i] |= pl[i] == plan::Placement::kStreamed;
        cpu[i] |= pl[i] == plan::Placement::kCpu;
      }
    for (size_t i = 0; i < m; ++i) {
      if (!streamed[i]) continue;
      (cpu[i] ? shared : copied_only) += 1;
      for (const model::WeightRef& w : l->subs[i].weights) {
        if (w.rows <= 1) continue;
        const gguf::TensorInfo* t = l->file->find_tensor(w.name);
        ASSERT_NE(t, nullptr) << w.name;
        EXPECT_EQ(emu->is_registered(t->data, t->nbytes), cpu[i] != 0) << w.name << " budget " << budget;
      }
    }
    const exec::PinStats& p = r.pin_stats();
    EXPECT_TRUE(p.note.empty()) << p.note;
    EXPECT_EQ(std::move(r.device().memory_info()).value().registered_bytes, p.registered_bytes);
    if (r.plan().weights_resident > 0) EXPECT_GT(p.released_bytes, 0u) << "budget " << budget;
  }
  // The planner's plans for this model stream nothing the CPU computes in another tier (the MoE
  // placement test, ExecutorMoe.EveryPlacementCombinationMatchesCpu, covers such plans under kAuto).
  EXPECT_GE(shared, 0);
  EXPECT_GT(copied_only, 0);
}

// A timeline records copies, device sub-layers and CPU sub-layers of the first steps, in order, within
// each step's wall-clock span, and the logits stay the same while it records.
TEST(Executor, TimelineRecordsLanesOfTheFirstSteps) {
  TempDir dir;
  auto l = load(dir, tiny("llama"));
  ASSERT_TRUE(l);
  const Script sc = script(7, 5);
  const std::vector<float> ref = cpu_logits(*l, sc);
  auto min = exec::hybrid_min_budget(l->spec, l->subs, setup_for(0, std::nullopt));
  ASSERT_TRUE(min.has_value());
  auto runner = exec::make_hybrid_runner(l->spec, l->weights, l->subs, setup_for(*min, plan::Strategy::kGpuStream));
  ASSERT_TRUE(runner.has_value()) << runner.status().message();
  exec::Timeline tl;
  tl.max_steps = 4;
  (*runner)->set_timeline(&tl);
  const std::vector<float> got =
      replay(sc, l->spec.n_vocab, [&](const exec::StepIo& io, float* out) { return (*runner)->run(io, out); });
  expect_close(ref, got, "llama with a timeline");
  ASSERT_EQ(tl.steps.size(), 4u);
  EXPECT_EQ(tl.steps[0].n_tokens, 7);
  EXPECT_EQ(tl.steps[1].n_tokens, 1);
  int gpu = 0, copy = 0, cpu = 0;
  for (const exec::Span& sp : tl.spans) {
    EXPECT_LE(sp.t0_ms, sp.t1_ms) << sp.label;
    EXPECT_GE(sp.step, 0);
    EXPECT_LT(sp.step, 4);
    gpu += sp.lane == exec::Lane::kGpu;
    copy += sp.lane == exec::Lane::kCopy;
    cpu += sp.lane == exec::Lane::kCpu;
  }
  EXPECT_GT(gpu, 0);
  EXPECT_GT(cpu, 0);  // the embedding runs on the CPU
  EXPECT_GT(copy, 0);  // minimum budget: FFNs stream
  for (size_t i = 1; i < tl.steps.size(); ++i) EXPECT_GE(tl.steps[i].t0_ms, tl.steps[i - 1].t1_ms);
  EXPECT_NE(exec::render_svg(tl).find("</svg>"), std::string::npos);
}

}  // namespace
}  // namespace ferry

namespace ferry {
namespace {

// FERRY_EXEC_MODEL=path.gguf: the same equality on a real model (minimum budget and everything resident).
TEST(Executor, RealModelFromEnvironment) {
  const char* path = std::getenv("FERRY_EXEC_MODEL");
  if (!path) GTEST_SKIP() << "set FERRY_EXEC_MODEL to a GGUF file";
  auto l = std::make_unique<Loaded>();
  auto f = gguf::ModelFile::open(path);
  ASSERT_TRUE(f.has_value()) << f.status().message();
  l->file = std::move(*f);
  l->spec = *model::ModelSpec::from_gguf(*l->file);
  l->weights = *model::bind_weights(l->spec, *l->file);
  l->subs = *model::build_sublayers(l->spec, *l->file);
  const Script sc = script(13, 3);
  const std::vector<float> ref = cpu_logits(*l, sc);
  auto min = exec::hybrid_min_budget(l->spec, l->subs, setup_for(0, std::nullopt));
  ASSERT_TRUE(min.has_value()) << min.status().message();
  uint64_t all = 0;
  for (const auto& s : l->subs) all += s.weight_bytes;
  for (uint64_t budget : {*min, *min + all / 2, *min + 2 * all}) {
    auto runner = exec::make_hybrid_runner(l->spec, l->weights, l->subs, setup_for(budget, std::nullopt));
    ASSERT_TRUE(runner.has_value()) << runner.status().message();
    const std::vector<float> got =
        replay(sc, l->spec.n_vocab, [&](const exec::StepIo& io, float* out) { return (*runner)->run(io, out); });
    expect_close(ref, got, std::string(path) + " budget " + std::to_string(budget));
  }
}

}  // namespace
}  // namespace ferry
