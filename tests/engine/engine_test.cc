// Engine on tiny models of every architecture (RefOps): batching, KV-cache and step invariants that
// must hold exactly whatever the weights are:
//   - two sequences in one step give the logits each gives alone;
//   - a prompt prefilled in one step gives the logits of token-by-token decoding at every position;
//   - seq_rm then decoding again reproduces the logits;
// plus the step's error paths (bad ids, duplicate positions, full cache) and the debug hook.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "engine/engine.h"
#include "model/model_spec.h"
#include "model/tiny_model.h"

namespace ferry::engine {
namespace {

using ferry::testing::TempDir;
using ferry::testing::TinyModel;

// "mixtral" is llama with experts (Mixtral's GGUF architecture is "llama").
TinyModel tiny(const std::string& arch) {
  TinyModel m;
  m.arch = arch == "mixtral" ? "llama" : arch;
  if (arch == "mixtral") {
    m.n_expert = 4;
    m.n_expert_used = 2;
    m.n_ff_expert = m.n_ff;
  }
  if (arch == "qwen3moe") {
    m.head_dim = 32;
    m.n_expert = 8;
    m.n_expert_used = 3;
    m.n_ff_expert = 64;
  }
  if (arch == "qwen2") m.tied = true;
  if (arch == "qwen3") m.head_dim = 32;
  if (arch == "gemma3") {
    m.n_layer = 6;  // layers 0-4 local, layer 5 global
    m.n_kv_head = 1;
    m.head_dim = 32;
    m.sliding_window = 4;  // small, so the prompts below slide past it
    m.tied = true;
  }
  return m;
}

std::unique_ptr<Engine> open(const TempDir& dir, const TinyModel& m, int32_t n_ctx = 64, int32_t n_seq = 2,
                             int32_t n_batch = 32, const std::string& device = "ref") {
  const std::string path = dir.file(m.arch + (m.n_expert > 0 ? "-moe" : "") + ".gguf");
  Status st = write_tiny_model(m, path);
  EXPECT_TRUE(st.is_ok()) << st.message();
  EngineOptions o;
  o.model_path = path;
  o.n_ctx = n_ctx;
  o.n_seq_max = n_seq;
  o.n_batch = n_batch;
  o.device = device;
  o.n_threads = 2;
  auto e = Engine::load(o);
  EXPECT_TRUE(e.has_value()) << e.status().message();
  return e ? std::move(e).value() : nullptr;
}

std::vector<int32_t> prompt(int n, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((37 * i + 11 * salt + 5) % 290);
  return p;
}

// Logits of every position of `toks` fed to `seq` in one step from position p0.
std::vector<float> prefill(Engine& e, const std::vector<int32_t>& toks, int32_t seq, int32_t p0 = 0) {
  Batch b;
  for (size_t i = 0; i < toks.size(); ++i) b.add(toks[i], p0 + static_cast<int32_t>(i), seq, true);
  std::vector<float> out;
  Status st = e.step(b, &out);
  EXPECT_TRUE(st.is_ok()) << st.message();
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

bool all_finite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

// (architecture, device). RefOps is deterministic per token, so the invariants hold to float noise;
// CpuOps picks kernels by batch size (and splits work over threads), so only to rounding.
class EngineArch : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  std::string arch() const { return std::get<0>(GetParam()); }
  std::string device() const { return std::get<1>(GetParam()); }
  double tol() const { return device() == "ref" ? 1e-5 : 2e-3; }
  std::unique_ptr<Engine> open_model(const TempDir& dir) { return open(dir, tiny(arch()), 64, 2, 32, device()); }
};

TEST_P(EngineArch, TwoSequencesInOneStepMatchEachAlone) {
  TempDir dir;
  auto e = open_model(dir);
  ASSERT_TRUE(e);
  const int32_t nv = e->spec().n_vocab;
  const auto pa = prompt(9, 1), pb = prompt(6, 2);

  const std::vector<float> alone_a = prefill(*e, pa, 0);
  e->seq_rm(0);
  const std::vector<float> alone_b = prefill(*e, pb, 1);
  e->seq_rm(1);
  ASSERT_TRUE(all_finite(alone_a) && all_finite(alone_b));

  // Interleave the two sequences' tokens in one batch.
  Batch b;
  std::vector<std::pair<int, int>> order;  // (seq, index)
  for (int i = 0; i < 9; ++i) {
    order.push_back({0, i});
    if (i < 6) order.push_back({1, i});
  }
  for (auto [s, i] : order) b.add(s == 0 ? pa[i] : pb[i], i, s, true);
  std::vector<float> both;
  ASSERT_TRUE(e->step(b, &both).is_ok());
  ASSERT_EQ(both.size(), size_t(15) * nv);
  std::vector<float> got_a, got_b;
  for (size_t r = 0; r < order.size(); ++r) {
    auto& dst = order[r].first == 0 ? got_a : got_b;
    dst.insert(dst.end(), both.begin() + r * nv, both.begin() + (r + 1) * nv);
  }
  EXPECT_LT(max_abs_diff(got_a, alone_a), tol());
  EXPECT_LT(max_abs_diff(got_b, alone_b), tol());
  EXPECT_EQ(e->seq_next_pos(0), 9);
  EXPECT_EQ(e->seq_next_pos(1), 6);
}

TEST_P(EngineArch, PrefillEqualsTokenByTokenDecode) {
  TempDir dir;
  auto e = open_model(dir);
  ASSERT_TRUE(e);
  const auto p = prompt(12, 3);
  const std::vector<float> one_step = prefill(*e, p, 0);
  e->seq_rm(0);
  EXPECT_EQ(e->seq_next_pos(0), 0);
  std::vector<float> decoded;
  for (size_t i = 0; i < p.size(); ++i) {
    Batch b;
    b.add(p[i], static_cast<int32_t>(i), 0, true);
    ASSERT_TRUE(e->step(b, &decoded).is_ok());
  }
  EXPECT_LT(max_abs_diff(one_step, decoded), tol());

  // Prefill in two chunks with logits only for the last token of each.
  e->seq_rm(0);
  Batch b1, b2;
  for (int i = 0; i < 5; ++i) b1.add(p[i], i, 0, i == 4);
  for (int i = 5; i < 12; ++i) b2.add(p[i], i, 0, i == 11);
  std::vector<float> chunks;
  ASSERT_TRUE(e->step(b1, &chunks).is_ok());
  ASSERT_TRUE(e->step(b2, &chunks).is_ok());
  const int32_t nv = e->spec().n_vocab;
  ASSERT_EQ(chunks.size(), size_t(2) * nv);
  std::vector<float> want(one_step.begin() + 4 * nv, one_step.begin() + 5 * nv);
  want.insert(want.end(), one_step.begin() + 11 * nv, one_step.begin() + 12 * nv);
  EXPECT_LT(max_abs_diff(chunks, want), tol());
}

TEST_P(EngineArch, SeqRmThenRedecode) {
  TempDir dir;
  auto e = open_model(dir);
  ASSERT_TRUE(e);
  const int32_t nv = e->spec().n_vocab;
  const auto p = prompt(10, 4), other = prompt(7, 5);
  prefill(*e, other, 1);  // another sequence in the cache must not matter
  const std::vector<float> first = prefill(*e, p, 0);
  // Drop positions 6.. and decode them again: same logits.
  e->seq_rm(0, 6, -1);
  EXPECT_EQ(e->seq_next_pos(0), 6);
  const std::vector<int32_t> tail(p.begin() + 6, p.end());
  const std::vector<float> again = prefill(*e, tail, 0, 6);
  const std::vector<float> want(first.begin() + 6 * nv, first.end());
  EXPECT_LT(max_abs_diff(again, want), tol());
  // Replace the tail with other tokens, then restore it: logits follow the cache contents.
  e->seq_rm(0, 6, -1);
  const std::vector<int32_t> alt = {1, 2, 3, 4};
  const std::vector<float> diverged = prefill(*e, alt, 0, 6);
  EXPECT_GT(max_abs_diff(std::vector<float>(diverged.begin() + nv, diverged.end()),
                         std::vector<float>(want.begin() + nv, want.end())),
            1e-4);
  e->seq_rm(0, 6, -1);
  EXPECT_LT(max_abs_diff(prefill(*e, tail, 0, 6), want), tol());
}

INSTANTIATE_TEST_SUITE_P(Archs, EngineArch,
                         ::testing::Combine(::testing::Values("llama", "qwen2", "qwen3", "gemma3", "qwen3moe", "mixtral"),
                                            ::testing::Values("ref", "cpu")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

// The Ops implementations agree on every architecture (Q8_0 weights, so 8-bit activations): CpuOps and
// RefOps' two numerics differ in rounding (quantizer tie rule, summation order, none at all), which
// moves logits of spread ~1 by up to ~0.1 through flipped activation levels; a real math error
// (pairing, norm, mask, scale) moves them by about the spread.
TEST(Engine, DevicesAgree) {
  for (const char* arch : {"llama", "qwen2", "qwen3", "gemma3", "qwen3moe", "mixtral"}) {
    TempDir dir;
    TinyModel m = tiny(arch);
    m.wtype = DType::Q8_0;
    const auto p = prompt(10, 11);
    auto ref = open(dir, m, 64, 2, 32, "ref");
    ASSERT_TRUE(ref);
    const auto want = prefill(*ref, p, 0);
    for (const char* dev : {"cpu", "ref-exact"}) {
      TempDir d2;
      auto e = open(d2, m, 64, 2, 32, dev);
      ASSERT_TRUE(e);
      const auto got = prefill(*e, p, 0);
      EXPECT_LT(max_abs_diff(got, want), 0.2) << arch << " on " << dev;
    }
  }
}

TEST(Engine, QuantizedWeightsRun) {
  for (DType t : {DType::Q8_0, DType::Q4_1, DType::F16}) {
    TempDir dir;
    TinyModel m = tiny("llama");
    m.wtype = t;
    auto e = open(dir, m);
    ASSERT_TRUE(e);
    auto logits = prefill(*e, prompt(5, 6), 0);
    EXPECT_TRUE(all_finite(logits)) << dtype_name(t);
  }
}

TEST(Engine, SlidingWindowChangesLogits) {
  // Same weights, window 4 vs none: positions < 4 agree, later ones differ.
  TempDir dir;
  TinyModel with = tiny("gemma3"), without = tiny("gemma3");
  without.sliding_window = 0;
  without.arch = "gemma3";
  auto a = open(dir, with);
  TempDir dir2;
  auto b = open(dir2, without);
  ASSERT_TRUE(a && b);
  const int32_t nv = a->spec().n_vocab;
  const auto p = prompt(8, 7);
  const auto la = prefill(*a, p, 0), lb = prefill(*b, p, 0);
  for (int i = 0; i < 8; ++i) {
    const double d = max_abs_diff(std::vector<float>(la.begin() + i * nv, la.begin() + (i + 1) * nv),
                                  std::vector<float>(lb.begin() + i * nv, lb.begin() + (i + 1) * nv));
    if (i < 4)
      EXPECT_LT(d, 1e-5) << "position " << i;
    else
      EXPECT_GT(d, 1e-4) << "position " << i;
  }
}

TEST(Engine, StepErrors) {
  TempDir dir;
  auto e = open(dir, tiny("llama"), /*n_ctx=*/8, /*n_seq=*/2, /*n_batch=*/6);
  ASSERT_TRUE(e);
  std::vector<float> out;
  Batch b;
  EXPECT_EQ(e->step(b, &out).code(), ErrorCode::kInvalidArgument);  // empty
  b.add(300, 0, 0, true);
  EXPECT_EQ(e->step(b, &out).code(), ErrorCode::kInvalidArgument);  // token outside vocab
  b.clear();
  b.add(1, 0, 2, true);
  EXPECT_EQ(e->step(b, &out).code(), ErrorCode::kInvalidArgument);  // seq id >= n_seq_max
  b.clear();
  b.add(1, -1, 0, true);
  EXPECT_EQ(e->step(b, &out).code(), ErrorCode::kInvalidArgument);  // negative position
  b.clear();
  b.add(1, 0, 0, true);
  b.add(2, 0, 0, true);
  EXPECT_EQ(e->step(b, &out).code(), ErrorCode::kInvalidArgument);  // duplicate (seq, pos)
  b.clear();
  for (int i = 0; i < 7; ++i) b.add(1, i, 0, false);
  EXPECT_EQ(e->step(b, &out).code(), ErrorCode::kInvalidArgument);  // more than n_batch
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(e->seq_next_pos(0), 0);  // nothing was placed by the failed steps

  b.clear();
  for (int i = 0; i < 6; ++i) b.add(1 + i, i, 0, false);
  ASSERT_TRUE(e->step(b, &out).is_ok());
  EXPECT_TRUE(out.empty());  // no row asked for logits
  b.clear();
  b.add(1, 5, 0, true);
  Status dup = e->step(b, &out);
  EXPECT_EQ(dup.code(), ErrorCode::kInvalidArgument);  // position already cached
  EXPECT_NE(dup.message().find("already"), std::string::npos);
  b.clear();
  for (int i = 0; i < 3; ++i) b.add(1, i, 1, true);
  Status full = e->step(b, &out);  // 6 + 3 > 8 cells
  EXPECT_EQ(full.code(), ErrorCode::kOutOfMemory);
  EXPECT_NE(full.message().find("KV cache full"), std::string::npos) << full.message();
  EXPECT_EQ(e->seq_next_pos(1), 0);
  b.clear();
  for (int i = 0; i < 2; ++i) b.add(1, i, 1, true);
  EXPECT_TRUE(e->step(b, &out).is_ok());  // exactly fills the cache
  EXPECT_EQ(out.size(), size_t(2) * e->spec().n_vocab);
  e->seq_rm(-1);  // every sequence
  EXPECT_EQ(e->seq_next_pos(0), 0);
  EXPECT_EQ(e->seq_next_pos(1), 0);
}

TEST(Engine, LoadErrors) {
  EngineOptions o;
  o.model_path = "/nonexistent/model.gguf";
  EXPECT_FALSE(Engine::load(o).has_value());
  TempDir dir;
  TinyModel m = tiny("llama");
  m.drop_tensors = {"blk.0.attn_q.weight"};
  ASSERT_TRUE(write_tiny_model(m, dir.file("bad.gguf")).is_ok());
  o.model_path = dir.file("bad.gguf");
  auto e = Engine::load(o);
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.status().message().find("blk.0.attn_q.weight"), std::string::npos);
  m.drop_tensors.clear();
  ASSERT_TRUE(write_tiny_model(m, dir.file("ok.gguf")).is_ok());
  o.model_path = dir.file("ok.gguf");
  o.device = "tpu";
  EXPECT_EQ(Engine::load(o).status().code(), ErrorCode::kInvalidArgument);
  o.device = "ref";
  o.n_ctx = 0;  // the model's training context
  auto ok = Engine::load(o);
  ASSERT_TRUE(ok.has_value()) << ok.status().message();
  EXPECT_EQ((*ok)->n_ctx(), 512);
}

TEST(Engine, DebugHookSeesNamedIntermediates) {
  TempDir dir;
  auto e = open(dir, tiny("gemma3"));
  ASSERT_TRUE(e);
  std::vector<std::string> names;
  e->set_debug_hook([&](const std::string& name, const TensorView& t) {
    names.push_back(name);
    EXPECT_EQ(t.ne[t.ne[2] > 1 ? 2 : 1], 3) << name;  // views cover the step's 3 tokens
  });
  prefill(*e, prompt(3, 8), 0);
  auto has = [&](const char* n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  EXPECT_TRUE(has("inp_embd"));
  EXPECT_TRUE(has("blk.0.attn_norm"));
  EXPECT_TRUE(has("blk.0.Qcur_normed"));
  EXPECT_TRUE(has("blk.5.attn_post_norm"));
  EXPECT_TRUE(has("blk.5.l_out"));
  EXPECT_TRUE(has("result_output"));
  e->set_debug_hook({});
  names.clear();
  prefill(*e, prompt(3, 9), 1);
  EXPECT_TRUE(names.empty());
}

// device cpu copies the weights into huge pages and drops the file pages it copied from the process
// (engine/huge_weights.cc): the logits equal those read from the file mapping, for a tied and an untied
// head, and an engine opened afterwards on the same file (its pages re-read) gives them again.
TEST(Engine, HugePageWeightsGiveTheFileMappingsLogits) {
  for (const std::string arch : {"llama", "qwen2"}) {
    TempDir dir;
    const TinyModel m = tiny(arch);
    const std::string path = dir.file(arch + ".gguf");
    ASSERT_TRUE(write_tiny_model(m, path).is_ok());
    auto logits = [&](bool huge) {
      EngineOptions o;
      o.model_path = path;
      o.n_ctx = 32;
      o.device = "cpu";
      o.n_threads = 2;
      o.cpu_huge_pages = huge;
      auto e = Engine::load(o);
      EXPECT_TRUE(e.has_value()) << e.status().message();
      return e ? prefill(**e, prompt(7, 3), 0) : std::vector<float>{};
    };
    const std::vector<float> file = logits(false), huge = logits(true), again = logits(true);
    ASSERT_FALSE(file.empty()) << arch;
    EXPECT_EQ(file, huge) << arch;
    EXPECT_EQ(file, again) << arch;
  }
}

}  // namespace
}  // namespace ferry::engine
