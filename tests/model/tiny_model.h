// Tiny GGUF models for model and engine tests, written with the gguf Writer: any supported
// architecture (tensor names, shapes and metadata keys as llama.cpp's converter writes them), random
// but well-scaled weights in a chosen type, and a small byte-level BPE vocabulary so the tokenizer
// loads. Knobs drop or reshape tensors and keys, for the error tests.
#pragma once

#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "tensor/quant.h"

namespace ferry::testing {

struct TinyModel {
  std::string arch = "llama";
  int32_t n_layer = 2;
  int32_t n_embd = 64;
  int32_t n_head = 4;
  int32_t n_kv_head = 2;
  int32_t head_dim = 16;
  int32_t n_ff = 96;
  int32_t n_vocab = 300;
  int32_t n_ctx_train = 512;
  float rms_eps = 1e-5f;
  float rope_base = 10000.f;
  int32_t sliding_window = 0;  // gemma3
  bool tied = false;
  bool write_key_length = true;
  DType wtype = DType::F32;    // 2-D weights (token_embd included)
  uint64_t seed = 1;
  // Mixture of experts (arch "qwen3moe", or "llama" for Mixtral): experts per layer, per token, width.
  // The router (ffn_gate_inp) is written in F32, as converters do.
  int32_t n_expert = 0;
  int32_t n_expert_used = 0;
  int32_t n_ff_expert = 0;

  std::vector<std::string> control_tokens;                  // special (control) tokens at ids 257, 258, ...
  std::set<std::string> drop_tensors;                       // tensor names not written
  std::map<std::string, std::vector<int64_t>> reshape;      // tensor name -> shape written instead
  std::map<std::string, DType> retype;                      // tensor name -> type written instead
  std::set<std::string> drop_keys;                          // metadata keys not written
  std::map<std::string, uint32_t> override_u32;             // metadata key -> value written instead
};

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ferry_model_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data()) ? tmpl : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// GPT-2's byte -> printable code point map, UTF-8 encoded: the 256 byte tokens of a byte-level vocab.
inline std::vector<std::string> gpt2_byte_tokens() {
  std::vector<std::string> out(256);
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const uint32_t cp = printable ? static_cast<uint32_t>(b) : 256u + static_cast<uint32_t>(extra++);
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    out[b] = s;
  }
  return out;
}

struct TinyTensor {
  std::string name;
  std::vector<int64_t> ne;
  bool matrix;  // 2-D weight or stacked experts (wtype; a router F32) vs norm/bias (F32)
  float norm_center;  // vectors: values around this (1 for norms, 0 for biases)
};

inline std::vector<TinyTensor> tiny_tensor_list(const TinyModel& m) {
  const int64_t d = m.n_embd, qd = int64_t{m.n_head} * m.head_dim, kvd = int64_t{m.n_kv_head} * m.head_dim;
  const int64_t ff = m.n_ff, nv = m.n_vocab, hd = m.head_dim;
  std::vector<TinyTensor> t;
  t.push_back({"token_embd.weight", {d, nv}, true, 0});
  t.push_back({"output_norm.weight", {d}, false, 1});
  if (!m.tied) t.push_back({"output.weight", {d, nv}, true, 0});
  const bool qwen2 = m.arch == "qwen2", gemma = m.arch == "gemma3";
  const bool qk_norm = m.arch == "qwen3" || m.arch == "gemma3" || m.arch == "qwen3moe";
  for (int il = 0; il < m.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    t.push_back({p + "attn_norm.weight", {d}, false, 1});
    t.push_back({p + "attn_q.weight", {d, qd}, true, 0});
    t.push_back({p + "attn_k.weight", {d, kvd}, true, 0});
    t.push_back({p + "attn_v.weight", {d, kvd}, true, 0});
    t.push_back({p + "attn_output.weight", {qd, d}, true, 0});
    if (qwen2) {
      t.push_back({p + "attn_q.bias", {qd}, false, 0});
      t.push_back({p + "attn_k.bias", {kvd}, false, 0});
      t.push_back({p + "attn_v.bias", {kvd}, false, 0});
    }
    if (qk_norm) {
      t.push_back({p + "attn_q_norm.weight", {hd}, false, 1});
      t.push_back({p + "attn_k_norm.weight", {hd}, false, 1});
    }
    if (gemma) t.push_back({p + "post_attention_norm.weight", {d}, false, 1});
    t.push_back({p + "ffn_norm.weight", {d}, false, 1});
    if (m.n_expert > 0) {
      const int64_t ne = m.n_expert, ffe = m.n_ff_expert;
      t.push_back({p + "ffn_gate_inp.weight", {d, ne}, true, 0});
      t.push_back({p + "ffn_gate_exps.weight", {d, ffe, ne}, true, 0});
      t.push_back({p + "ffn_up_exps.weight", {d, ffe, ne}, true, 0});
      t.push_back({p + "ffn_down_exps.weight", {ffe, d, ne}, true, 0});
      continue;
    }
    t.push_back({p + "ffn_gate.weight", {d, ff}, true, 0});
    t.push_back({p + "ffn_up.weight", {d, ff}, true, 0});
    t.push_back({p + "ffn_down.weight", {ff, d}, true, 0});
    if (gemma) t.push_back({p + "post_ffw_norm.weight", {d}, false, 1});
  }
  return t;
}

// Writes the model; returns the writer's status.
inline Status write_tiny_model(const TinyModel& m, const std::string& path) {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<gguf::Writer> w, gguf::Writer::create(path));
  const std::string a = m.arch;
  auto u32 = [&](const std::string& key, uint32_t v) {
    if (m.drop_keys.count(key)) return;
    auto it = m.override_u32.find(key);
    w->add_u32(key, it != m.override_u32.end() ? it->second : v);
  };
  auto f32 = [&](const std::string& key, float v) {
    if (!m.drop_keys.count(key)) w->add_f32(key, v);
  };
  if (!m.drop_keys.count("general.architecture")) w->add_string("general.architecture", a);
  w->add_string("general.name", "tiny-" + a);
  u32(a + ".block_count", m.n_layer);
  u32(a + ".context_length", m.n_ctx_train);
  u32(a + ".embedding_length", m.n_embd);
  u32(a + ".feed_forward_length", m.n_ff);
  u32(a + ".attention.head_count", m.n_head);
  u32(a + ".attention.head_count_kv", m.n_kv_head);
  if (m.write_key_length) {
    u32(a + ".attention.key_length", m.head_dim);
    u32(a + ".attention.value_length", m.head_dim);
  }
  f32(a + ".attention.layer_norm_rms_epsilon", m.rms_eps);
  f32(a + ".rope.freq_base", m.rope_base);
  if (m.sliding_window > 0) u32(a + ".attention.sliding_window", m.sliding_window);
  if (m.n_expert > 0) {
    u32(a + ".expert_count", m.n_expert);
    u32(a + ".expert_used_count", m.n_expert_used);
    if (a == "qwen3moe") u32(a + ".expert_feed_forward_length", m.n_ff_expert);
  }

  // Vocabulary: 256 byte tokens, "ab", then control_tokens and filler tokens, the last one an end-of-text
  // special.
  std::vector<std::string> tokens = gpt2_byte_tokens();
  std::vector<int32_t> types(256, 1);
  tokens.push_back("ab");  // one merge, so the BPE tokenizer has a merge table
  types.push_back(1);
  for (int32_t i = 257; i < m.n_vocab - 1; ++i) {
    const size_t c = static_cast<size_t>(i - 257);
    tokens.push_back(c < m.control_tokens.size() ? m.control_tokens[c] : "[PAD" + std::to_string(i) + "]");
    types.push_back(c < m.control_tokens.size() ? 3 : 4);
  }
  tokens.push_back("<|endoftext|>");
  types.push_back(3);
  tokens.resize(m.n_vocab);
  types.resize(m.n_vocab);
  w->add_string("tokenizer.ggml.model", "gpt2");
  w->add_string("tokenizer.ggml.pre", "gpt2");
  if (!m.drop_keys.count("tokenizer.ggml.tokens")) w->add_string_array("tokenizer.ggml.tokens", tokens);
  w->add_i32_array("tokenizer.ggml.token_type", types);
  w->add_string_array("tokenizer.ggml.merges", {"a b"});
  w->add_u32("tokenizer.ggml.bos_token_id", m.n_vocab - 1);
  w->add_u32("tokenizer.ggml.eos_token_id", m.n_vocab - 1);

  std::vector<TinyTensor> list = tiny_tensor_list(m);
  std::vector<DType> dtypes;
  for (const TinyTensor& t : list) {
    if (m.drop_tensors.count(t.name)) continue;
    DType dt = t.matrix && t.name.find("ffn_gate_inp") == std::string::npos ? m.wtype : DType::F32;
    if (auto it = m.retype.find(t.name); it != m.retype.end()) dt = it->second;
    std::vector<int64_t> ne = t.ne;
    if (auto it = m.reshape.find(t.name); it != m.reshape.end()) ne = it->second;
    FERRY_RETURN_IF_ERROR(w->add_tensor_info(t.name, dt, ne));
  }
  FERRY_RETURN_IF_ERROR(w->begin_data());
  std::mt19937_64 rng(m.seed);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  for (const TinyTensor& t : list) {
    if (m.drop_tensors.count(t.name)) continue;
    DType dt = t.matrix && t.name.find("ffn_gate_inp") == std::string::npos ? m.wtype : DType::F32;
    if (auto it = m.retype.find(t.name); it != m.retype.end()) dt = it->second;
    std::vector<int64_t> ne = t.ne;
    if (auto it = m.reshape.find(t.name); it != m.reshape.end()) ne = it->second;
    const int64_t ne0 = ne[0];
    int64_t rows = 1;
    for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
    // Uniform in +-sqrt(3/in) keeps activations O(1) through the layers (variance 1/in per weight).
    const float amp = t.matrix ? std::sqrt(3.f / static_cast<float>(ne0)) : 0.2f;
    std::vector<float> row(ne0);
    std::vector<uint8_t> buf(row_bytes(dt, ne0));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < ne0; ++i) row[i] = t.norm_center + amp * uni(rng);
      quantize_row(dt, row.data(), buf.data(), ne0);
      FERRY_RETURN_IF_ERROR(w->write_tensor_data(buf.data(), buf.size()));
    }
  }
  return w->finish();
}

}  // namespace ferry::testing
