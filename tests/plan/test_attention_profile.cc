// Measured GPU attention in the profile (gpu.attention) and its use by the cost model: the section
// round-trips and is checked strictly, profiles without it still load and keep the bandwidth / flops
// formula exactly, and with it the attention core follows the measured points (interpolated in KV bytes,
// scaled by KV bytes per cell and, for prefill chunks, by flops), never below the formula.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "model/sublayer.h"
#include "plan/cost_model.h"
#include "plan/planner.h"
#include "plan/profile.h"
#include "plan_fixtures.h"

namespace ferry::plan {
namespace {

using json = nlohmann::ordered_json;
constexpr uint64_t GiB = 1ull << 30;

// bench_cuda_ops attention on the H200 (bench/RESULTS.md, llama3-8b heads): decode 12.7 / 24.6 / 65.6 us at
// 512 / 4096 / 32768 cells; the last 512-token chunk of a 4096-token prompt 0.318 ms.
GpuAttentionProfile h200_attention() {
  GpuAttentionProfile a;
  a.n_head = 32;
  a.n_kv_head = 8;
  a.head_dim = 128;
  a.decode = {{1, 512, 12.7}, {1, 4096, 24.6}, {1, 32768, 65.6}};
  a.prefill = {{512, 4096, 318.0}};
  return a;
}

HardwareProfile with_attention(HardwareProfile p, const GpuAttentionProfile& a = h200_attention()) {
  p.gpu->attention = a;
  return p;
}

// The first attention sub-layer of `spec` (Q4_K matrices).
model::SubLayer attention_of(const model::ModelSpec& spec) {
  auto subs = model::build_sublayers(spec, model::uniform_tensor_types(DType::Q4_K));
  EXPECT_TRUE(subs.has_value()) << subs.status().message();
  for (const auto& s : *subs)
    if (s.kind == model::SubLayerKind::kAttention) return s;
  ADD_FAILURE() << "no attention sub-layer";
  return {};
}

// What the cost model charged before the measurement existed (and still does without it).
double formula_s(const CostModel& cm, const model::SubLayer& s, const model::ModelSpec& spec, int64_t n, int64_t c) {
  const double bw = cm.profile().gpu->mem_bw_gbs * 1e9;
  double mm = 0;
  for (const auto& w : s.weights)
    if (w.rows > 1) mm += 2.0 * static_cast<double>(w.rows) * static_cast<double>(w.cols) * static_cast<double>(n);
  const double core_flops = s.flops(spec, n, c) - mm;
  const double gqa = static_cast<double>(spec.n_head) / spec.n_kv_head;
  return std::max(s.kv_bytes_read(spec, n, c) / bw, core_flops / (cm.gpu_gflops(DType::F16, n * gqa) * 1e9));
}

double causal_cells(double n, double c) { return n * c + n * (n + 1) / 2; }

// ---- profile JSON ----------------------------------------------------------------------------------

TEST(AttentionProfile, RoundTrips) {
  const HardwareProfile p = with_attention(fixtures::synth_profile({}));
  const std::string text = profile_to_json(p);
  const json j = json::parse(text);
  ASSERT_TRUE(j["gpu"].contains("attention"));
  EXPECT_EQ(j["gpu"]["attention"]["decode"].size(), 3u);
  EXPECT_EQ(j["gpu"]["attention"]["prefill"][0]["tokens"], 512);
  auto q = parse_profile(text, "round trip");
  ASSERT_TRUE(q.has_value()) << q.status().message();
  ASSERT_TRUE(q->gpu->attention.has_value());
  const GpuAttentionProfile& a = *q->gpu->attention;
  EXPECT_EQ(a.n_head, 32);
  EXPECT_EQ(a.n_kv_head, 8);
  EXPECT_EQ(a.head_dim, 128);
  ASSERT_EQ(a.decode.size(), 3u);
  EXPECT_EQ(a.decode[1].cells, 4096);
  EXPECT_EQ(a.decode[1].tokens, 1);
  EXPECT_DOUBLE_EQ(a.decode[2].us, 65.6);
  ASSERT_EQ(a.prefill.size(), 1u);
  EXPECT_EQ(a.prefill[0].tokens, 512);
  EXPECT_EQ(a.prefill[0].cells, 4096);
  EXPECT_DOUBLE_EQ(a.prefill[0].us, 318.0);
  EXPECT_EQ(profile_to_json(*q), text);
  // Only decode points (or only prefill points) is a valid section too.
  GpuAttentionProfile d = h200_attention();
  d.prefill.clear();
  auto r = parse_profile(profile_to_json(with_attention(fixtures::synth_profile({}), d)));
  ASSERT_TRUE(r.has_value()) << r.status().message();
  EXPECT_TRUE(r->gpu->attention->prefill.empty());
}

TEST(AttentionProfile, ProfilesWithoutItStillLoad) {
  // The GPU host's stored full profile predates the section.
  const HardwareProfile host = fixtures::stored_profile("tests/plan/data/h200-full-profile.json");
  ASSERT_TRUE(host.has_gpu());
  EXPECT_FALSE(host.gpu->attention.has_value());
  const HardwareProfile est = fixtures::stored_profile("tests/data/profiles/h200-host.json");
  ASSERT_TRUE(est.has_gpu());
  EXPECT_FALSE(est.gpu->attention.has_value());
  // Written without it: no key.
  const json j = json::parse(profile_to_json(fixtures::synth_profile({})));
  EXPECT_FALSE(j["gpu"].contains("attention"));
}

void expect_error(const std::function<void(json&)>& edit, const std::string& want) {
  json j = json::parse(profile_to_json(with_attention(fixtures::synth_profile({}))));
  edit(j);
  auto r = parse_profile(j.dump(), "edited.json");
  ASSERT_FALSE(r.has_value()) << "accepted: " << want;
  EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
}

TEST(AttentionProfile, StrictErrorsNameTheKey) {
  expect_error([](json& j) { j["gpu"]["attention"]["decode"][1]["cells"] = 512; }, "gpu.attention.decode[1].cells");
  expect_error([](json& j) { j["gpu"]["attention"]["decode"][0]["us"] = 0; }, "gpu.attention.decode[0].us");
  expect_error([](json& j) { j["gpu"]["attention"]["decode"][0]["tokens"] = 1; },
               "gpu.attention.decode[0].tokens: unknown key");
  expect_error([](json& j) { j["gpu"]["attention"]["prefill"][0]["cells"] = 100; }, "gpu.attention.prefill[0].cells");
  expect_error([](json& j) { j["gpu"]["attention"]["prefill"][0]["tokens"] = 1; }, "gpu.attention.prefill[0].tokens");
  expect_error([](json& j) { j["gpu"]["attention"]["n_kv_head"] = 5; }, "gpu.attention.n_kv_head");
  expect_error([](json& j) { j["gpu"]["attention"].erase("head_dim"); }, "gpu.attention.head_dim: missing");
  expect_error([](json& j) { j["gpu"]["attention"]["colour"] = 1; }, "gpu.attention.colour: unknown key");
  expect_error([](json& j) { j["gpu"]["attention"] = 3; }, "gpu.attention");
  expect_error(
      [](json& j) {
        j["gpu"]["attention"]["decode"] = json::array();
        j["gpu"]["attention"]["prefill"] = json::array();
      },
      "no decode or prefill point");
}

// ---- cost model --------------------------------------------------------------------------------------

TEST(AttentionCost, WithoutTheSectionTheFormulaIsKept) {
  const HardwareProfile host = fixtures::stored_profile("tests/plan/data/h200-full-profile.json");
  const CostModel cm(host);
  const model::ModelSpec spec = fixtures::qwen3_8b();
  const model::SubLayer s = attention_of(spec);
  for (int64_t n : {1, 4, 8, 64, 512, 1024})
    for (int64_t c : {0, 511, 4095, 32767})
      EXPECT_DOUBLE_EQ(cm.gpu_attention_core_s(s, spec, n, c), formula_s(cm, s, spec, n, c)) << n << " @ " << c;
}

TEST(AttentionCost, DecodeOnTheReferenceHeadsIsTheMeasuredTime) {
  const HardwareProfile base = fixtures::stored_profile("tests/plan/data/h200-full-profile.json");
  const CostModel without(base), with(with_attention(base));
  const model::ModelSpec spec = fixtures::qwen3_8b();  // 32 q heads, 8 KV heads, head_dim 128
  const model::SubLayer s = attention_of(spec);
  // One token after 4095 cached: 4096 cells, the measured point.
  EXPECT_NEAR(with.gpu_attention_core_s(s, spec, 1, 4095), 24.6e-6, 1e-12);
  EXPECT_NEAR(with.gpu_attention_core_s(s, spec, 1, 511), 12.7e-6, 1e-12);
  EXPECT_NEAR(with.gpu_attention_core_s(s, spec, 1, 32767), 65.6e-6, 1e-12);
  // The whole sub-layer moves by the core's difference only (matmuls, kernels, activations unchanged).
  for (bool graph : {false, true}) {
    const double d = with.gpu_sublayer_s(s, spec, 1, 4095, graph) - without.gpu_sublayer_s(s, spec, 1, 4095, graph);
    EXPECT_NEAR(d, 24.6e-6 - formula_s(without, s, spec, 1, 4095), 1e-12);
    EXPECT_GT(d, 10e-6);  // the formula says ~5 us at 4K cells: the H200 kernel is far slower
  }
  // Piecewise linear in KV bytes between the points, linear past the last one (its segment's slope).
  EXPECT_NEAR(with.gpu_attention_core_s(s, spec, 1, 2303), (12.7e-6 + 24.6e-6) / 2, 1e-12);
  const double slope = (65.6 - 24.6) / (32768 - 4096);  // us per cell
  EXPECT_NEAR(with.gpu_attention_core_s(s, spec, 1, 65535), (65.6 + slope * 32768) * 1e-6, 1e-12);
  // Below the first point: the first segment extended (the split + combine latency stays).
  const double slope0 = (24.6 - 12.7) / (4096 - 512);
  EXPECT_NEAR(with.gpu_attention_core_s(s, spec, 1, 127), (12.7 - slope0 * 384) * 1e-6, 1e-12);
  // Decode tiers up to 8 tokens read the KV once: the one-token time at the same cells (c + n).
  EXPECT_NEAR(with.gpu_attention_core_s(s, spec, 4, 4092), 24.6e-6, 1e-12);
  EXPECT_NEAR(with.gpu_attention_core_s(s, spec, 8, 4088), 24.6e-6, 1e-12);
  // The formula's flop term (the F16 matvec's rate) said more than the kernel takes at 32K cells; the
  // measurement replaces it for decode steps.
  EXPECT_GT(formula_s(without, s, spec, 1, 32767), 65.6e-6);
  // More context never costs less.
  double prev = 0;
  for (int64_t c = 0; c <= 70000; c += 997) {
    const double t = with.gpu_attention_core_s(s, spec, 1, c);
    EXPECT_GE(t, prev) << c;
    prev = t;
  }
}

TEST(AttentionCost, ScalesWithKvBytesPerCell) {
  const HardwareProfile base = fixtures::stored_profile("tests/plan/data/h200-full-profile.json");
  const CostModel with(with_attention(base));
  model::ModelSpec ref = fixtures::minitron_8b();  // 32 / 8 / 128
  const model::SubLayer s_ref = attention_of(ref);
  // Half the KV bytes per cell (4 KV heads): 8192 cells read what 4096 reference cells do.
  model::ModelSpec half = ref;
  half.n_kv_head = 4;
  const model::SubLayer s_half = attention_of(half);
  EXPECT_NEAR(with.gpu_attention_core_s(s_half, half, 1, 8191), 24.6e-6, 1e-12);
  EXPECT_NEAR(with.gpu_attention_core_s(s_half, half, 1, 8191), with.gpu_attention_core_s(s_ref, ref, 1, 4095), 1e-12);
  // head_dim 256 with 4 KV heads: the reference's bytes per cell again.
  model::ModelSpec wide = ref;
  wide.n_kv_head = 4;
  wide.head_dim = 256;
  wide.n_rot = 256;
  const model::SubLayer s_wide = attention_of(wide);
  EXPECT_NEAR(with.gpu_attention_core_s(s_wide, wide, 1, 32767), 65.6e-6, 1e-12);
  // Twice the bytes per cell (16 KV heads): 2048 cells read what 4096 reference cells do.
  model::ModelSpec dbl = ref;
  dbl.n_kv_head = 16;
  const model::SubLayer s_dbl = attention_of(dbl);
  EXPECT_NEAR(with.gpu_attention_core_s(s_dbl, dbl, 1, 2047), 24.6e-6, 1e-12);
}

TEST(AttentionCost, NeverBelowTheBandwidthBoundOrForPrefillTheFormula) {
  const HardwareProfile base = fixtures::stored_profile("tests/plan/data/h200-full-profile.json");
  GpuAttentionProfile fast = h200_attention();
  for (auto& pt : fast.decode) pt.us = 0.001;
  fast.prefill[0].us = 0.001;
  const CostModel without(base), with(with_attention(base, fast));
  const model::ModelSpec spec = fixtures::qwen3_8b();
  const model::SubLayer s = attention_of(spec);
  const double bw = base.gpu->mem_bw_gbs * 1e9;
  for (int64_t c : {511, 4095, 65535}) {
    for (int64_t n : {1, 8})
      EXPECT_DOUBLE_EQ(with.gpu_attention_core_s(s, spec, n, c), s.kv_bytes_read(spec, n, c) / bw) << n << " @ " << c;
    for (int64_t n : {16, 512})
      EXPECT_DOUBLE_EQ(with.gpu_attention_core_s(s, spec, n, c), without.gpu_attention_core_s(s, spec, n, c));
  }
}

TEST(AttentionCost, PrefillScalesTheChunkByFlops) {
  const HardwareProfile base = fixtures::stored_profile("tests/plan/data/h200-full-profile.json");
  const CostModel without(base), with(with_attention(base));
  const model::ModelSpec spec = fixtures::qwen3_8b();
  const model::SubLayer s = attention_of(spec);
  // The measured chunk itself: 512 tokens after 3584 cached.
  EXPECT_NEAR(with.gpu_attention_core_s(s, spec, 512, 3584), 318e-6, 1e-12);
  // A 1024-token chunk over a 4K prompt (cached 3072): by causal cells.
  const double ratio = causal_cells(1024, 3072) / causal_cells(512, 3584);
  EXPECT_NEAR(with.gpu_attention_core_s(s, spec, 1024, 3072), 318e-6 * ratio, 1e-12);
  // Fewer heads or a smaller head_dim: fewer flops, proportionally.
  model::ModelSpec small = spec;
  small.n_head = 16;
  small.n_kv_head = 4;
  const model::SubLayer s_small = attention_of(small);
  EXPECT_NEAR(with.gpu_attention_core_s(s_small, small, 1024, 3072), 318e-6 * ratio / 2, 1e-12);
  // Every prefill tier at least the formula, and at least a one-token step over the same cells.
  for (int64_t n : {16, 64, 256, 1024})
    for (int64_t c : {0, 1024, 4096, 30000}) {
      const double t = with.gpu_attention_core_s(s, spec, n, c);
      EXPECT_GE(t, formula_s(without, s, spec, n, c)) << n << " @ " << c;
      EXPECT_GE(t, with.gpu_attention_core_s(s, spec, 1, c + n - 1) - 1e-15) << n << " @ " << c;
    }
}

// A whole plan: qwen3-8b Q4_K all resident, decode after a 4K prompt and its 1024-token chunks.
TEST(AttentionCost, PlansAtDepthGetSlower) {
  const HardwareProfile base = fixtures::stored_profile("tests/plan/data/h200-full-profile.json");
  const fixtures::SynthModel m = fixtures::synth_model(fixtures::qwen3_8b(), "qwen3-8b", DType::Q4_K);
  PlannerOptions o;
  o.vram_budget = 8 * GiB;
  o.context = 4096 + 64 + 1;
  o.prompt_tokens = 4096;
  o.batch = 1024;
  auto a = Planner(base, o).plan(m.spec, m.subs);
  auto b = Planner(with_attention(base), o).plan(m.spec, m.subs);
  ASSERT_TRUE(a.has_value() && b.has_value());
  const double d1 = b->plan_for(1).predicted_ms - a->plan_for(1).predicted_ms;
  const double d1024 = b->plan_for(1024).predicted_ms - a->plan_for(1024).predicted_ms;
  std::printf("  qwen3-8b Q4_K 8 GiB at 4096: decode %.3f -> %.3f ms, chunk 1024 %.2f -> %.2f ms\n",
              a->plan_for(1).predicted_ms, b->plan_for(1).predicted_ms, a->plan_for(1024).predicted_ms,
              b->plan_for(1024).predicted_ms);
  // 36 layers x (24.6 us - the formula's ~5 us) on the decode step.
  EXPECT_GT(d1, 36 * 15e-3);
  EXPECT_LT(d1, 36 * 25e-3);
  EXPECT_GT(d1024, 36 * 0.2);  // ~0.59 ms a layer measured-scaled against ~0.1 by the formula
}

}  // namespace
}  // namespace ferry::plan
