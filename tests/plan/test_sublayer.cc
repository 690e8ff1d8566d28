// Sub-layer lists and their cost functions: shapes and bytes of the real-size presets, FLOPs / KV
// formulas, MoE expert groups, and the file-based builder agreeing with the spec-based one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "model/sublayer.h"
#include "plan_fixtures.h"

namespace ferry::plan {
namespace {

using model::SubLayer;
using model::SubLayerKind;

std::vector<SubLayer> build(const model::ModelSpec& s, DType t) {
  auto r = model::build_sublayers(s, model::uniform_tensor_types(t));
  EXPECT_TRUE(r.has_value()) << r.status().message();
  return r.has_value() ? *r : std::vector<SubLayer>{};
}

TEST(SubLayer, MinitronF16ShapesAndBytes) {
  const model::ModelSpec s = fixtures::minitron_8b();
  const auto subs = build(s, DType::F16);
  ASSERT_EQ(subs.size(), 1u + 2u * 40u + 1u);
  EXPECT_EQ(subs.front().kind, SubLayerKind::kEmbed);
  EXPECT_EQ(subs.back().kind, SubLayerKind::kHead);
  EXPECT_EQ(subs[1].label(), "blk.0.attn");
  EXPECT_EQ(subs[2].label(), "blk.0.ffn");
  EXPECT_EQ(subs.back().label(), "head");
  EXPECT_EQ(subs.front().weight_bytes, 131072ull * 4096 * 2);
  // attn: q, o [4096 x 4096], k, v [4096 x 1024], F16; + attn_norm [4096] F32.
  EXPECT_EQ(subs[1].weight_bytes, (2ull * 4096 * 4096 + 2ull * 4096 * 1024) * 2 + 4096 * 4);
  EXPECT_EQ(subs[2].weight_bytes, 3ull * 4096 * 11520 * 2 + 4096 * 4);
  EXPECT_EQ(subs.back().weight_bytes, 131072ull * 4096 * 2 + 4096 * 4);
  uint64_t total = 0;
  for (const auto& sl : subs) total += sl.weight_bytes;
  // ~8.4 B parameters in F16.
  EXPECT_NEAR(static_cast<double>(total) / 2, 8.4e9, 0.1e9);
}

TEST(SubLayer, Qwen3Q4KHasQkNormsAndBlockSizes) {
  const auto subs = build(fixtures::qwen3_8b(), DType::Q4_K);
  ASSERT_EQ(subs.size(), 1u + 2u * 36u + 1u);
  const SubLayer& a = subs[1];
  int norms = 0;
  for (const auto& w : a.weights)
    if (w.name.find("_norm") != std::string::npos) ++norms;
  EXPECT_EQ(norms, 3);  // attn_norm, attn_q_norm, attn_k_norm
  for (const auto& w : a.weights)
    if (w.rows > 1) EXPECT_EQ(w.bytes, static_cast<uint64_t>(w.rows) * (w.cols / 256) * 144);
}

// FFN slices: whole blocks of n_ff per slice, bytes and FLOPs summing to the whole FFN's, the FFN norm
// with the first slice only, labels naming the range; fewer slices than asked where n_ff has few blocks.
TEST(SubLayer, FfnSlicesCutAtBlocksAndSumToTheWhole) {
  const model::ModelSpec s = fixtures::qwen3_8b();  // n_ff 12288 = 48 Q4_K blocks
  const auto whole = build(s, DType::Q4_K);
  auto cut = model::slice_ffn_sublayers(s, whole, 5);
  ASSERT_TRUE(cut.has_value()) << cut.status().message();
  ASSERT_EQ(cut->size(), whole.size() + 4u * 36u);
  const SubLayer& f = whole[2];
  uint64_t bytes = 0;
  double flops = 0;
  int norms = 0;
  for (int k = 0; k < 5; ++k) {
    const SubLayer& p = (*cut)[2 + k];
    EXPECT_EQ(p.kind, SubLayerKind::kFfn);
    EXPECT_EQ(p.layer, 0);
    EXPECT_EQ(p.slice, k);
    EXPECT_EQ(p.n_slices, 5);
    EXPECT_TRUE(model::is_ffn_slice(p));
    EXPECT_EQ(p.ff_begin % 256, 0);
    EXPECT_EQ(p.ff_end % 256, 0);
    EXPECT_EQ(p.ff_begin, k == 0 ? 0 : (*cut)[1 + k].ff_end);
    bytes += p.weight_bytes;
    flops += p.flops(s, 1, 0);
    for (const auto& w : p.weights) norms += w.rows == 1;
  }
  EXPECT_EQ((*cut)[6].ff_end, s.n_ff);
  EXPECT_EQ(bytes, f.weight_bytes);
  EXPECT_DOUBLE_EQ(flops, f.flops(s, 1, 0));
  EXPECT_EQ(norms, 1);
  EXPECT_EQ((*cut)[2].label(), "blk.0.ffn[0:2304)");
  EXPECT_EQ((*cut)[7].kind, SubLayerKind::kAttention);
  // 1 slice: the list as it was.
  auto same = model::slice_ffn_sublayers(s, whole, 1);
  ASSERT_TRUE(same.has_value());
  EXPECT_EQ(same->size(), whole.size());
  // More slices than blocks: one per block.
  model::ModelSpec small = s;
  small.n_ff = 512;
  auto few = model::slice_ffn_sublayers(small, build(small, DType::Q4_K), 4);
  ASSERT_TRUE(few.has_value());
  EXPECT_EQ((*few)[2].n_slices, 2);
}

TEST(SubLayer, CostFormulas) {
  const model::ModelSpec s = fixtures::minitron_8b();
  const auto subs = build(s, DType::F16);
  const SubLayer& attn = subs[1];
  const SubLayer& ffn = subs[2];
  // FFN: 2 * rows * cols per matrix per token.
  EXPECT_DOUBLE_EQ(ffn.flops(s, 1, 100), 2.0 * 3 * 4096 * 11520);
  EXPECT_DOUBLE_EQ(ffn.flops(s, 8, 0), 8 * 2.0 * 3 * 4096 * 11520);
  // Attention at one token over c cached: matrices + 4 * (c + 1) * d_head * n_head.
  const double mm = 2.0 * (2.0 * 4096 * 4096 + 2.0 * 4096 * 1024);
  EXPECT_DOUBLE_EQ(attn.flops(s, 1, 1000), mm + 4.0 * 1001 * 128 * 32);
  // A chunk of n from empty: token i attends to i + 1 cells.
  EXPECT_DOUBLE_EQ(attn.flops(s, 4, 0), 4 * mm + 4.0 * (1 + 2 + 3 + 4) * 128 * 32);
  EXPECT_EQ(attn.kv_bytes(s, 4096), 4096ull * 1024 * 2 * 2);
  EXPECT_EQ(ffn.kv_bytes(s, 4096), 0u);
  EXPECT_DOUBLE_EQ(attn.kv_bytes_read(s, 1, 99), 100.0 * 1024 * 4);
  EXPECT_DOUBLE_EQ(ffn.weight_bytes_read(s, 7), static_cast<double>(ffn.weight_bytes));
  // Embed reads only the gathered rows.
  EXPECT_DOUBLE_EQ(subs[0].weight_bytes_read(s, 3), 3.0 * 4096 * 2);
  EXPECT_DOUBLE_EQ(ffn.activation_bytes(s, 2), 2 * 2.0 * 4096 * 4);
  EXPECT_DOUBLE_EQ(subs.back().activation_bytes(s, 1), 4096.0 * 4 + 131072.0 * 4);
}

TEST(SubLayer, SlidingWindowCapsAttention) {
  model::ModelSpec s = fixtures::qwen3_8b();
  s.sliding_window = 512;
  s.swa_period = 2;  // layer 0 sliding, layer 1 global
  const auto subs = build(s, DType::F16);
  const SubLayer& local = subs[1];
  const SubLayer& global = subs[3];
  ASSERT_EQ(global.layer, 1);
  EXPECT_LT(local.flops(s, 1, 4000), global.flops(s, 1, 4000));
  EXPECT_DOUBLE_EQ(local.kv_bytes_read(s, 1, 4000), (512.0 + 1) * 1024 * 4);
}

TEST(SubLayer, MoeExpertGroups) {
  model::ModelSpec s = fixtures::qwen3_8b();
  s.arch = model::Arch::kQwen3Moe;
  s.n_layer = 2;
  s.n_ff = 0;
  s.n_expert = 16;
  s.n_expert_used = 2;
  s.n_ff_expert = 768;
  model::SubLayerOptions opt;
  opt.experts_per_group = 6;
  auto r = model::build_sublayers(s, model::uniform_tensor_types(DType::Q8_0), opt);
  ASSERT_TRUE(r.has_value()) << r.status().message();
  // embed, then per layer: attn, router, 3 expert groups (6 + 6 + 4), then head.
  ASSERT_EQ(r->size(), 1u + 2u * 5u + 1u);
  const SubLayer& router = (*r)[2];
  EXPECT_EQ(router.kind, SubLayerKind::kMoeRouter);
  const SubLayer& g0 = (*r)[3];
  const SubLayer& g2 = (*r)[5];
  EXPECT_EQ(g0.kind, SubLayerKind::kExperts);
  EXPECT_EQ(g0.expert_begin, 0);
  EXPECT_EQ(g0.expert_end, 6);
  EXPECT_EQ(g2.expert_begin, 12);
  EXPECT_EQ(g2.expert_end, 16);
  EXPECT_EQ(g0.label(), "blk.0.experts[0:6)");
  const uint64_t per_expert = 3ull * 4096 * 768 / 32 * 34;
  EXPECT_EQ(g0.weight_bytes, 6 * per_expert);
  EXPECT_EQ(g2.weight_bytes, 4 * per_expert);
  // One token touches 2 of 16 experts: a group of 6 is read with probability 1 - (14/16)^1 per expert.
  EXPECT_NEAR(g0.weight_bytes_read(s, 1), 6.0 * per_expert * (2.0 / 16), 1.0);
  EXPECT_DOUBLE_EQ(g0.flops(s, 1, 0), 2.0 * 3 * 4096 * 768 * 6 * 2 / 16);
  // Many tokens touch every expert.
  EXPECT_NEAR(g0.weight_bytes_read(s, 1000), static_cast<double>(g0.weight_bytes), 1.0);
}

// gpt-oss's bias tables [N, n_expert] F32 are listed with the router as vectors (rows 1): the planner keeps
// them on the device with the norms, so every expert group reads its columns wherever it runs.
TEST(SubLayer, GptOssBiasTablesAreVectors) {
  model::ModelSpec s = fixtures::qwen3_8b();
  s.arch = model::Arch::kGptOss;
  s.n_layer = 1;
  s.n_ff = 0;
  s.n_expert = 8;
  s.n_expert_used = 2;
  s.n_ff_expert = 512;
  s.expert_biases = true;
  auto r = model::build_sublayers(s, model::uniform_tensor_types(DType::Q8_0));
  ASSERT_TRUE(r.has_value()) << r.status().message();
  const SubLayer& router = (*r)[2];
  ASSERT_EQ(router.kind, SubLayerKind::kMoeRouter);
  int tables = 0;
  for (const model::WeightRef& w : router.weights) {
    if (w.name.find("_exps.bias") == std::string::npos) continue;
    ++tables;
    EXPECT_EQ(w.rows, 1) << w.name;
    EXPECT_EQ(w.dtype, DType::F32) << w.name;
    const int64_t n = w.name.find("down") != std::string::npos ? s.n_embd : s.n_ff_expert;
    EXPECT_EQ(w.cols, n * s.n_expert) << w.name;
    EXPECT_EQ(w.bytes, static_cast<uint64_t>(n * s.n_expert * 4)) << w.name;
  }
  EXPECT_EQ(tables, 3);
}

TEST(SubLayer, SyntheticRejectsRowsNotMultipleOfBlock) {
  model::ModelSpec s = fixtures::qwen3_8b();
  s.n_ff = 1000;  // ffn_down rows of 1000 are not a multiple of 256
  auto r = model::build_sublayers(s, model::uniform_tensor_types(DType::Q4_K));
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("ffn_down"), std::string::npos) << r.status().message();
}

// A tiny GGUF holding exactly the tensors of `s` (F32, zero data), optionally without one tensor or
// with one shape wrong.
std::string write_tiny(const model::ModelSpec& s, const std::string& drop, const std::string& bad_shape) {
  char tmpl[] = "/tmp/ferry_plan_test_XXXXXX";
  const int fd = mkstemp(tmpl);
  EXPECT_GE(fd, 0);
  close(fd);
  const std::string path = tmpl;
  auto w = gguf::Writer::create(path);
  EXPECT_TRUE(w.has_value());
  auto subs = model::build_sublayers(s, model::uniform_tensor_types(DType::F32));
  EXPECT_TRUE(subs.has_value());
  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors;
  for (const auto& sl : *subs)
    for (const auto& wr : sl.weights) {
      bool seen = false;
      for (auto& t : tensors) seen |= t.first == wr.name;
      if (seen || wr.name == drop) continue;
      std::vector<int64_t> ne = wr.rows > 1 ? std::vector<int64_t>{wr.cols, wr.rows} : std::vector<int64_t>{wr.cols};
      if (wr.name == bad_shape) ne[0] += 32;
      tensors.push_back({wr.name, ne});
    }
  (*w)->add_string("general.architecture", "llama");
  for (auto& t : tensors) EXPECT_TRUE((*w)->add_tensor_info(t.first, DType::F32, t.second).is_ok());
  EXPECT_TRUE((*w)->begin_data().is_ok());
  for (auto& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.second) n *= d;
    std::vector<float> zeros(static_cast<size_t>(n), 0.f);
    EXPECT_TRUE((*w)->write_tensor_data(zeros.data(), zeros.size() * 4).is_ok());
  }
  EXPECT_TRUE((*w)->finish().is_ok());
  return path;
}

model::ModelSpec tiny_spec() {
  model::ModelSpec s;
  s.arch = model::Arch::kLlama;
  s.n_layer = 2;
  s.n_embd = 64;
  s.n_head = 4;
  s.n_kv_head = 2;
  s.head_dim = 16;
  s.n_rot = 16;
  s.n_ff = 96;
  s.n_vocab = 128;
  return s;
}

TEST(SubLayer, FileBuilderMatchesSpecBuilder) {
  const model::ModelSpec s = tiny_spec();
  const std::string path = write_tiny(s, "", "");
  auto file = gguf::ModelFile::open(path);
  ASSERT_TRUE(file.has_value()) << file.status().message();
  auto from_file = model::build_sublayers(s, **file);
  ASSERT_TRUE(from_file.has_value()) << from_file.status().message();
  auto from_spec = model::build_sublayers(s, model::uniform_tensor_types(DType::F32));
  ASSERT_TRUE(from_spec.has_value());
  ASSERT_EQ(from_file->size(), from_spec->size());
  for (size_t i = 0; i < from_file->size(); ++i) {
    EXPECT_EQ((*from_file)[i].label(), (*from_spec)[i].label());
    EXPECT_EQ((*from_file)[i].weight_bytes, (*from_spec)[i].weight_bytes) << (*from_file)[i].label();
  }
  std::remove(path.c_str());
}

TEST(SubLayer, FileBuilderNamesMissingAndMisshapenTensors) {
  const model::ModelSpec s = tiny_spec();
  {
    const std::string path = write_tiny(s, "blk.1.ffn_up.weight", "");
    auto file = gguf::ModelFile::open(path);
    ASSERT_TRUE(file.has_value());
    auto r = model::build_sublayers(s, **file);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
    EXPECT_NE(r.status().message().find("blk.1.ffn_up.weight"), std::string::npos);
    std::remove(path.c_str());
  }
  {
    const std::string path = write_tiny(s, "", "blk.0.attn_k.weight");
    auto file = gguf::ModelFile::open(path);
    ASSERT_TRUE(file.has_value());
    auto r = model::build_sublayers(s, **file);
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt);
    EXPECT_NE(r.status().message().find("blk.0.attn_k.weight"), std::string::npos) << r.status().message();
    std::remove(path.c_str());
  }
}

}  // namespace
}  // namespace ferry::plan
