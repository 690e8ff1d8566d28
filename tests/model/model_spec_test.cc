// ModelSpec::from_gguf and bind_weights on tiny models of every architecture: hyperparameters and
// flags as llama.cpp derives them, and one clear error for each kind of bad file (unknown arch,
// missing key, nonsense values, missing tensor, shape mismatch, unsupported type).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "format/gguf.h"
#include "model/model_spec.h"
#include "model/tiny_model.h"
#include "model/weights.h"

namespace ferry::model {
namespace {

using ferry::testing::TempDir;
using ferry::testing::TinyModel;

struct Loaded {
  std::unique_ptr<gguf::ModelFile> file;
  Expected<ModelSpec> spec = Status(ErrorCode::kInternal, "not loaded");
};

Loaded load(const TinyModel& m, const TempDir& dir) {
  const std::string path = dir.file(m.arch + ".gguf");
  Status st = write_tiny_model(m, path);
  EXPECT_TRUE(st.is_ok()) << st.message();
  Loaded l;
  auto f = gguf::ModelFile::open(path);
  EXPECT_TRUE(f.has_value()) << f.status().message();
  if (!f) return l;
  l.file = std::move(f).value();
  l.spec = ModelSpec::from_gguf(*l.file);
  return l;
}

Status bind(const TinyModel& m) {
  TempDir dir;
  Loaded l = load(m, dir);
  if (!l.spec) return l.spec.status();
  return bind_weights(*l.spec, *l.file).status();
}

TEST(ModelSpec, Llama) {
  TempDir dir;
  TinyModel m;
  m.rope_base = 100000.f;
  Loaded l = load(m, dir);
  ASSERT_TRUE(l.spec.has_value()) << l.spec.status().message();
  const ModelSpec& s = *l.spec;
  EXPECT_EQ(s.arch, Arch::kLlama);
  EXPECT_EQ(s.n_layer, 2);
  EXPECT_EQ(s.n_embd, 64);
  EXPECT_EQ(s.n_head, 4);
  EXPECT_EQ(s.n_kv_head, 2);
  EXPECT_EQ(s.head_dim, 16);
  EXPECT_EQ(s.n_rot, 16);
  EXPECT_EQ(s.n_ff, 96);
  EXPECT_EQ(s.n_vocab, 300);
  EXPECT_EQ(s.n_ctx_train, 512);
  EXPECT_FLOAT_EQ(s.rope_base, 100000.f);
  EXPECT_FLOAT_EQ(s.rope_freq_scale, 1.f);
  EXPECT_FALSE(s.rope_neox);
  EXPECT_FALSE(s.qkv_bias || s.qk_norm || s.post_norms || s.gelu || s.tied_output);
  EXPECT_FLOAT_EQ(s.embed_scale, 1.f);
  EXPECT_FLOAT_EQ(s.kq_scale(), 0.25f);
  EXPECT_FALSE(s.is_swa_layer(0));
  auto w = bind_weights(s, *l.file);
  ASSERT_TRUE(w.has_value()) << w.status().message();
  EXPECT_EQ(w->layers.size(), 2u);
  EXPECT_FALSE(present(w->layers[0].attn_q_bias));
  EXPECT_TRUE(present(w->output));
  EXPECT_NE(w->output.data, w->token_embd.data);
}

TEST(ModelSpec, HeadDimDefaultsToEmbdOverHeads) {
  TempDir dir;
  TinyModel m;
  m.write_key_length = false;  // 64 / 4 = 16 = head_dim
  Loaded l = load(m, dir);
  ASSERT_TRUE(l.spec.has_value()) << l.spec.status().message();
  EXPECT_EQ(l.spec->head_dim, 16);
}

TEST(ModelSpec, Qwen2TiedWithBiases) {
  TempDir dir;
  TinyModel m;
  m.arch = "qwen2";
  m.tied = true;
  Loaded l = load(m, dir);
  ASSERT_TRUE(l.spec.has_value()) << l.spec.status().message();
  EXPECT_EQ(l.spec->arch, Arch::kQwen2);
  EXPECT_TRUE(l.spec->rope_neox);
  EXPECT_TRUE(l.spec->qkv_bias);
  EXPECT_TRUE(l.spec->tied_output);
  auto w = bind_weights(*l.spec, *l.file);
  ASSERT_TRUE(w.has_value()) << w.status().message();
  EXPECT_TRUE(present(w->layers[1].attn_v_bias));
  EXPECT_EQ(w->output.data, w->token_embd.data);
}

TEST(ModelSpec, Qwen2VlNeedsRopeSections) {
  TempDir dir;
  TinyModel m;
  m.arch = "qwen2vl";
  Loaded l = load(m, dir);
  ASSERT_FALSE(l.spec.has_value());
  EXPECT_NE(l.spec.status().message().find("qwen2vl.rope.dimension_sections"), std::string::npos)
      << l.spec.status().message();
}

TEST(ModelSpec, Qwen3QkNorm) {
  TempDir dir;
  TinyModel m;
  m.arch = "qwen3";
  m.head_dim = 32;  // key_length differs from n_embd / n_head, as in real qwen3
  Loaded l = load(m, dir);
  ASSERT_TRUE(l.spec.has_value()) << l.spec.status().message();
  EXPECT_TRUE(l.spec->rope_neox);
  EXPECT_TRUE(l.spec->qk_norm);
  EXPECT_FALSE(l.spec->qkv_bias);
  EXPECT_EQ(l.spec->head_dim, 32);
  EXPECT_EQ(l.spec->q_dim(), 128);
  auto w = bind_weights(*l.spec, *l.file);
  ASSERT_TRUE(w.has_value()) << w.status().message();
  EXPECT_EQ(w->layers[0].attn_q_norm.ne[0], 32);
}

TEST(ModelSpec, Gemma3) {
  TempDir dir;
  TinyModel m;
  m.arch = "gemma3";
  m.n_layer = 7;
  m.n_kv_head = 1;
  m.head_dim = 32;
  m.sliding_window = 8;
  m.rope_base = 1e6f;
  m.rms_eps = 1e-6f;
  Loaded l = load(m, dir);
  ASSERT_TRUE(l.spec.has_value()) << l.spec.status().message();
  const ModelSpec& s = *l.spec;
  EXPECT_TRUE(s.rope_neox && s.qk_norm && s.post_norms && s.gelu);
  EXPECT_FLOAT_EQ(s.embed_scale, std::sqrt(64.f));
  EXPECT_FLOAT_EQ(s.kq_scale(), 1.f / std::sqrt(32.f));
  EXPECT_EQ(s.sliding_window, 8);
  // llama.cpp: layer il is local iff il % 6 < 5; every 6th layer (il = 5) is global.
  for (int il = 0; il < 7; ++il) EXPECT_EQ(s.is_swa_layer(il), il != 5) << il;
  EXPECT_FLOAT_EQ(s.layer_rope_base(0), 10000.f);
  EXPECT_FLOAT_EQ(s.layer_rope_base(5), 1e6f);
  auto w = bind_weights(s, *l.file);
  ASSERT_TRUE(w.has_value()) << w.status().message();
  EXPECT_TRUE(present(w->layers[6].post_ffw_norm));
}

TEST(ModelSpec, Gemma3WithoutWindowHasNoLocalLayers) {
  TempDir dir;
  TinyModel m;
  m.arch = "gemma3";
  Loaded l = load(m, dir);
  ASSERT_TRUE(l.spec.has_value()) << l.spec.status().message();
  EXPECT_FALSE(l.spec->is_swa_layer(0));
  EXPECT_FLOAT_EQ(l.spec->layer_rope_base(0), 10000.f);
}

TinyModel qwen3moe() {
  TinyModel m;
  m.arch = "qwen3moe";
  m.head_dim = 32;
  m.n_expert = 8;
  m.n_expert_used = 2;
  m.n_ff_expert = 32;
  return m;
}

TEST(ModelSpec, Qwen3Moe) {
  TempDir dir;
  Loaded l = load(qwen3moe(), dir);
  ASSERT_TRUE(l.spec.has_value()) << l.spec.status().message();
  const ModelSpec& s = *l.spec;
  EXPECT_EQ(s.arch, Arch::kQwen3Moe);
  EXPECT_TRUE(s.qk_norm && s.rope_neox && s.expert_weights_norm);
  EXPECT_EQ(s.n_expert, 8);
  EXPECT_EQ(s.n_expert_used, 2);
  EXPECT_EQ(s.n_ff_expert, 32);
  auto w = bind_weights(s, *l.file);
  ASSERT_TRUE(w.has_value()) << w.status().message();
  const LayerWeights& L = w->layers[1];
  EXPECT_FALSE(present(L.ffn_gate));
  EXPECT_EQ(L.ffn_gate_inp.ne[1], 8);
  EXPECT_EQ(L.ffn_down_exps.ne[0], 32);
  EXPECT_EQ(L.ffn_down_exps.ne[1], 64);
  EXPECT_EQ(L.ffn_down_exps.ne[2], 8);
  EXPECT_EQ(L.ffn_up_exps.nb[2], L.ffn_up_exps.nb[1] * 32);
}

TEST(ModelSpec, Qwen3MoeExpertWidthDefaultsToFfnOverUsed) {
  TempDir dir;
  TinyModel m = qwen3moe();
  m.n_ff_expert = 48;  // = n_ff 96 / 2 used
  m.drop_keys = {"qwen3moe.expert_feed_forward_length"};
  Loaded l = load(m, dir);
  ASSERT_TRUE(l.spec.has_value()) << l.spec.status().message();
  EXPECT_EQ(l.spec->n_ff_expert, 48);
}

TEST(ModelSpec, MixtralIsLlamaWithExperts) {
  TempDir dir;
  TinyModel m;
  m.n_expert = 4;
  m.n_expert_used = 2;
  m.n_ff_expert = m.n_ff;
  Loaded l = load(m, dir);
  ASSERT_TRUE(l.spec.has_value()) << l.spec.status().message();
  EXPECT_EQ(l.spec->arch, Arch::kLlama);
  EXPECT_EQ(l.spec->n_expert, 4);
  EXPECT_EQ(l.spec->n_ff_expert, 96);
  EXPECT_TRUE(l.spec->expert_weights_norm);
  EXPECT_FALSE(l.spec->qk_norm);
  EXPECT_TRUE(bind_weights(*l.spec, *l.file).has_value());
}

TEST(ModelSpecErrors, ExpertKeys) {
  struct Case {
    TinyModel m;
    const char* needle;
  };
  std::vector<Case> cases;
  {
    TinyModel m = qwen3moe();
    m.drop_keys = {"qwen3moe.expert_count"};
    cases.push_back({m, "without experts"});
  }
  {
    TinyModel m = qwen3moe();
    m.override_u32["qwen3moe.expert_used_count"] = 9;
    cases.push_back({m, "expert_used_count = 9"});
  }
  {
    TinyModel m = qwen3moe();
    m.drop_keys = {"qwen3moe.expert_used_count"};
    cases.push_back({m, "qwen3moe.expert_used_count"});
  }
  {
    TinyModel m;
    m.arch = "qwen2";
    m.tied = true;
    m.n_expert = 4;
    m.n_expert_used = 2;
    m.n_ff_expert = 96;
    cases.push_back({m, "mixture-of-experts qwen2"});
  }
  for (const Case& c : cases) {
    TempDir dir;
    Loaded l = load(c.m, dir);
    ASSERT_FALSE(l.spec.has_value()) << c.needle;
    EXPECT_NE(l.spec.status().message().find(c.needle), std::string::npos) << l.spec.status().message();
  }
}

TEST(ModelSpecErrors, ExpertTensors) {
  {
    TinyModel m = qwen3moe();
    m.drop_tensors = {"blk.1.ffn_up_exps.weight"};
    Status st = bind(m);
    EXPECT_EQ(st.code(), ErrorCode::kNotFound);
    EXPECT_EQ(st.message(), "missing tensor 'blk.1.ffn_up_exps.weight' (expected shape [64, 32, 8])");
  }
  {
    TinyModel m = qwen3moe();
    m.reshape["blk.0.ffn_down_exps.weight"] = {32, 64, 7};
    Status st = bind(m);
    EXPECT_EQ(st.code(), ErrorCode::kCorrupt);
    EXPECT_EQ(st.message(), "tensor 'blk.0.ffn_down_exps.weight': expected shape [32, 64, 8], found [32, 64, 7]");
  }
  {
    TinyModel m = qwen3moe();
    m.reshape["blk.0.ffn_gate_inp.weight"] = {64, 9};
    Status st = bind(m);
    EXPECT_EQ(st.message(), "tensor 'blk.0.ffn_gate_inp.weight': expected shape [64, 8], found [64, 9]");
  }
}

TEST(ModelSpecErrors, UnknownArchitecture) {
  TempDir dir;
  TinyModel m;
  m.arch = "xyz";
  Loaded l = load(m, dir);
  ASSERT_FALSE(l.spec.has_value());
  EXPECT_EQ(l.spec.status().code(), ErrorCode::kUnsupported);
  EXPECT_EQ(l.spec.status().message(), "unsupported architecture 'xyz'");
}

TEST(ModelSpecErrors, MissingArchitectureKey) {
  TempDir dir;
  TinyModel m;
  m.drop_keys = {"general.architecture"};
  Loaded l = load(m, dir);
  ASSERT_FALSE(l.spec.has_value());
  EXPECT_EQ(l.spec.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(l.spec.status().message().find("general.architecture"), std::string::npos);
}

TEST(ModelSpecErrors, MissingRequiredKeys) {
  for (const char* key : {"llama.block_count", "llama.embedding_length", "llama.attention.head_count",
                          "llama.feed_forward_length", "llama.attention.layer_norm_rms_epsilon",
                          "llama.context_length", "tokenizer.ggml.tokens"}) {
    TempDir dir;
    TinyModel m;
    m.drop_keys = {key};
    Loaded l = load(m, dir);
    ASSERT_FALSE(l.spec.has_value()) << key;
    EXPECT_EQ(l.spec.status().code(), ErrorCode::kNotFound) << key;
    EXPECT_NE(l.spec.status().message().find(key), std::string::npos) << l.spec.status().message();
  }
}

TEST(ModelSpecErrors, NonsenseValues) {
  struct Case {
    const char* key;
    uint32_t value;
    const char* needle;
  };
  for (const Case& c : {Case{"llama.attention.head_count", 0, "head_count"},
                        Case{"llama.attention.head_count_kv", 0, "head_count_kv"},
                        Case{"llama.attention.head_count_kv", 3, "not a multiple"},
                        Case{"llama.block_count", 0, "block_count"},
                        Case{"llama.embedding_length", 0, "embedding_length"},
                        Case{"llama.feed_forward_length", 0, "feed_forward_length"},
                        Case{"llama.attention.key_length", 0, "key_length"}}) {
    TempDir dir;
    TinyModel m;
    m.override_u32[c.key] = c.value;
    Loaded l = load(m, dir);
    ASSERT_FALSE(l.spec.has_value()) << c.key;
    EXPECT_NE(l.spec.status().message().find(c.needle), std::string::npos) << l.spec.status().message();
  }
}

TEST(ModelSpecErrors, MissingTensor) {
  TinyModel m;
  m.drop_tensors = {"blk.1.ffn_up.weight"};
  Status st = bind(m);
  EXPECT_EQ(st.code(), ErrorCode::kNotFound);
  EXPECT_EQ(st.message(), "missing tensor 'blk.1.ffn_up.weight' (expected shape [64, 96])");
}

TEST(ModelSpecErrors, MissingQwen2Bias) {
  TinyModel m;
  m.arch = "qwen2";
  m.drop_tensors = {"blk.0.attn_k.bias"};
  Status st = bind(m);
  EXPECT_EQ(st.code(), ErrorCode::kNotFound);
  EXPECT_NE(st.message().find("blk.0.attn_k.bias"), std::string::npos);
}

TEST(ModelSpecErrors, ShapeMismatch) {
  TinyModel m;
  m.reshape["blk.0.attn_k.weight"] = {64, 64};
  Status st = bind(m);
  EXPECT_EQ(st.code(), ErrorCode::kCorrupt);
  EXPECT_EQ(st.message(), "tensor 'blk.0.attn_k.weight': expected shape [64, 32], found [64, 64]");
}

TEST(ModelSpecErrors, VocabMismatch) {
  TinyModel m;
  m.reshape["token_embd.weight"] = {64, 299};
  Status st = bind(m);
  EXPECT_EQ(st.message(), "tensor 'token_embd.weight': expected shape [64, 300], found [64, 299]");
}

TEST(ModelSpecErrors, NormMustBeF32) {
  TinyModel m;
  m.retype["blk.0.ffn_norm.weight"] = DType::F16;
  Status st = bind(m);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_NE(st.message().find("blk.0.ffn_norm.weight"), std::string::npos);
}

TEST(ModelSpecErrors, MatrixTypeMustBeWeightType) {
  TinyModel m;
  m.retype["blk.0.attn_q.weight"] = DType::Q8_1;  // an activation type, not a weight type
  Status st = bind(m);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_NE(st.message().find("Q8_1"), std::string::npos) << st.message();
}

TEST(ModelWeights, QuantizedTypesBind) {
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::F16, DType::BF16}) {
    TinyModel m;
    m.wtype = t;
    Status st = bind(m);
    EXPECT_TRUE(st.is_ok()) << dtype_name(t) << ": " << st.message();
  }
}

}  // namespace
}  // namespace ferry::model
