// ferry synth: preset shapes, the llama-quantize fallback, vocabularies (sizes, uniqueness, merges
// that only use known pieces), and written files (read back by ModelFile and ModelSpec, finite values,
// bytes that depend on the seed but not on the thread count). llama.cpp loading every tiny preset in
// every type is tests/python/test_synth.py.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <unordered_set>

#include "format/gguf.h"
#include "model/model_spec.h"
#include "model/synth.h"
#include "model/synth_route_skew.h"
#include "tensor/quant.h"

namespace ferry::model {
namespace {

class Scratch {
 public:
  Scratch() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ferry_synth_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data()) ? tmpl : std::string();
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

uint64_t data_bytes(const std::vector<SynthTensor>& ts) {
  uint64_t n = 0;
  for (const auto& t : ts) {
    int64_t e = 1;
    for (int64_t x : t.ne) e *= x;
    n += row_bytes(t.type, e);
  }
  return n;
}

const SynthPreset& preset(const char* name) {
  const SynthPreset* p = find_synth_preset(name);
  EXPECT_NE(p, nullptr) << name;
  return *p;
}

TEST(SynthPresets, NamesAndRequiredPresets) {
  std::set<std::string> names;
  for (const auto& p : synth_presets()) EXPECT_TRUE(names.insert(p.name).second) << p.name;
  for (const char* n : {"tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-gemma3", "llama3-8b", "minitron-8b",
                        "qwen3-4b", "qwen3-8b", "gemma3-4b", "tiny-qwen3moe", "tiny-mixtral", "qwen3-30b-a3b",
                        "qwen3-235b-a22b", "mixtral-8x7b"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_EQ(find_synth_preset("nope"), nullptr);
}

TEST(SynthPresets, PublishedShapes) {
  const SynthPreset& m = preset("minitron-8b");
  EXPECT_EQ(m.n_embd, 4096);
  EXPECT_EQ(m.n_layer, 40);
  EXPECT_EQ(m.n_head, 32);
  EXPECT_EQ(m.n_kv_head, 8);
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.n_ff, 11520);
  EXPECT_EQ(m.n_vocab, 131072);
  const SynthPreset& l = preset("llama3-8b");
  EXPECT_EQ(l.n_ff, 14336);
  EXPECT_EQ(l.n_vocab, 128256);
  EXPECT_TRUE(preset("qwen3-4b").tied_output);
  EXPECT_FALSE(preset("qwen3-8b").tied_output);
  EXPECT_EQ(preset("gemma3-4b").sliding_window, 1024);
  const SynthPreset& a3b = preset("qwen3-30b-a3b");
  EXPECT_EQ(a3b.n_layer, 48);
  EXPECT_EQ(a3b.n_embd, 2048);
  EXPECT_EQ(a3b.n_kv_head, 4);
  EXPECT_EQ(a3b.n_expert, 128);
  EXPECT_EQ(a3b.n_expert_used, 8);
  EXPECT_EQ(a3b.n_ff_expert, 768);
  const SynthPreset& a22b = preset("qwen3-235b-a22b");
  EXPECT_EQ(a22b.n_layer, 94);
  EXPECT_EQ(a22b.n_embd, 4096);
  EXPECT_EQ(a22b.n_head, 64);
  EXPECT_EQ(a22b.n_ff_expert, 1536);
  const SynthPreset& mx = preset("mixtral-8x7b");
  EXPECT_EQ(mx.arch, Arch::kLlama);
  EXPECT_EQ(mx.n_expert, 8);
  EXPECT_EQ(mx.n_expert_used, 2);
  EXPECT_EQ(mx.n_ff_expert, 14336);
  EXPECT_EQ(mx.n_vocab, 32000);
}

// Every preset in every weight type: no tensor needs the fallback (all rows are multiples of 256; gpt-oss's
// real widths, 2880 = 90 x 32, take llama-quantize's fallback for the k-quants), 1-D tensors, biases and MoE
// routers are F32, gpt-oss's experts MXFP4, and tiny presets stay under 10 MB even in F32 (32 MB with
// experts: 256-wide experts, for the k-quants, and more than a couple of them per layer).
TEST(SynthPresets, EveryTypeFitsEveryPreset) {
  for (const auto& p : synth_presets()) {
    for (DType t : kWeightTypes) {
      auto ts = synth_tensors(p, t);
      ASSERT_TRUE(ts.has_value()) << ts.status().message();
      for (const auto& x : *ts) {
        const bool router = x.name.find("ffn_gate_inp") != std::string::npos;
        const bool bias = x.name.find(".bias") != std::string::npos;
        const bool gpt_oss = p.arch == Arch::kGptOss;
        if (x.ne.size() == 1 || router || bias) EXPECT_EQ(x.type, DType::F32) << x.name;
        else if (gpt_oss && x.name.find("_exps.weight") != std::string::npos) EXPECT_EQ(x.type, DType::MXFP4) << x.name;
        else if (gpt_oss && !p.tiny) EXPECT_EQ(x.requested, t) << p.name << " " << x.name;
        else EXPECT_EQ(x.type, t) << p.name << " " << x.name;
      }
      if (p.tiny) EXPECT_LT(data_bytes(*ts), (p.n_expert > 0 ? 32u : 10u) << 20) << p.name << " " << dtype_name(t);
    }
  }
}

TEST(SynthPresets, TensorNamesFollowTheConverter) {
  auto names = [](const char* preset_name) {
    std::set<std::string> s;
    const auto ts = synth_tensors(preset(preset_name), DType::F16);
    for (const auto& t : *ts) s.insert(t.name);
    return s;
  };
  auto llama = names("tiny-llama");
  EXPECT_TRUE(llama.count("rope_freqs.weight"));
  EXPECT_TRUE(llama.count("output.weight"));
  EXPECT_TRUE(llama.count("blk.1.ffn_down.weight"));
  auto qwen2 = names("tiny-qwen2");
  EXPECT_TRUE(qwen2.count("blk.0.attn_k.bias"));
  EXPECT_FALSE(qwen2.count("output.weight"));  // tied
  auto gemma = names("tiny-gemma3");
  for (const char* n : {"blk.5.post_attention_norm.weight", "blk.5.post_ffw_norm.weight", "blk.5.attn_q_norm.weight",
                        "blk.5.attn_k_norm.weight"})
    EXPECT_TRUE(gemma.count(n)) << n;
  auto moe = names("tiny-qwen3moe");
  for (const char* n : {"blk.1.ffn_gate_inp.weight", "blk.1.ffn_gate_exps.weight", "blk.1.ffn_up_exps.weight",
                        "blk.1.ffn_down_exps.weight", "blk.1.attn_q_norm.weight"})
    EXPECT_TRUE(moe.count(n)) << n;
  EXPECT_FALSE(moe.count("blk.1.ffn_gate.weight"));
  auto mixtral = names("tiny-mixtral");
  EXPECT_TRUE(mixtral.count("blk.0.ffn_down_exps.weight"));
  EXPECT_FALSE(mixtral.count("blk.0.attn_q_norm.weight"));
  const auto moe_big = synth_tensors(preset("qwen3-30b-a3b"), DType::Q4_K, 1);  // held: the loop reads into it
  for (const auto& t : *moe_big) {
    if (t.name == "blk.0.ffn_gate_inp.weight") EXPECT_EQ(t.ne, (std::vector<int64_t>{2048, 128}));
    if (t.name == "blk.0.ffn_up_exps.weight") EXPECT_EQ(t.ne, (std::vector<int64_t>{2048, 768, 128}));
    if (t.name == "blk.0.ffn_down_exps.weight") EXPECT_EQ(t.ne, (std::vector<int64_t>{768, 2048, 128}));
    if (t.name == "blk.0.attn_q.weight") EXPECT_EQ(t.ne, (std::vector<int64_t>{2048, 4096}));
  }
  const auto big = synth_tensors(preset("qwen3-8b"), DType::Q4_K, 2);
  for (const auto& t : *big) {
    if (t.name == "blk.1.attn_q.weight") EXPECT_EQ(t.ne, (std::vector<int64_t>{4096, 4096}));
    if (t.name == "blk.1.attn_k.weight") EXPECT_EQ(t.ne, (std::vector<int64_t>{4096, 1024}));
    if (t.name == "blk.1.ffn_down.weight") EXPECT_EQ(t.ne, (std::vector<int64_t>{12288, 4096}));
    if (t.name == "token_embd.weight") EXPECT_EQ(t.ne, (std::vector<int64_t>{4096, 151936}));
    EXPECT_EQ(t.name.find("blk.2."), std::string::npos);
  }
}

// llama-quantize's tensor_type_fallback: rows that are multiples of 32 but not 256.
TEST(SynthPresets, FallbackLikeLlamaQuantize) {
  SynthPreset p = preset("tiny-llama");
  p.n_ff = 800;  // 25 * 32
  const std::pair<DType, DType> cases[] = {{DType::Q2_K, DType::Q4_0}, {DType::Q3_K, DType::Q4_0},
                                           {DType::Q4_K, DType::Q5_0}, {DType::Q5_K, DType::Q5_1},
                                           {DType::Q6_K, DType::Q8_0}, {DType::Q4_0, DType::Q4_0},
                                           {DType::F16, DType::F16}};
  for (auto [asked, got] : cases) {
    const auto ts = synth_tensors(p, asked);
    for (const auto& t : *ts) {
      if (t.name.find("ffn_down") != std::string::npos) {
        EXPECT_EQ(t.type, got) << dtype_name(asked);
        EXPECT_EQ(t.requested, asked);
      } else if (t.ne.size() == 2) {
        EXPECT_EQ(t.type, asked) << t.name;
      }
    }
  }
  p.n_ff = 784;  // not a multiple of 32: F16, as llama-quantize
  const auto ts = synth_tensors(p, DType::Q4_K);
  for (const auto& t : *ts)
    if (t.name.find("ffn_down") != std::string::npos) EXPECT_EQ(t.type, DType::F16);
}

TEST(SynthPresets, RejectsNonWeightTypes) {
  for (DType t : {DType::Q8_K, DType::Q8_1, DType::I32}) {
    auto ts = synth_tensors(preset("tiny-llama"), t);
    ASSERT_FALSE(ts.has_value());
    EXPECT_EQ(ts.status().code(), ErrorCode::kInvalidArgument);
  }
}

TEST(SynthVocab, CompleteAndConsistent) {
  for (const auto& p : synth_presets()) {
    const SynthVocab v = synth_vocab(p);
    ASSERT_EQ(v.tokens.size(), static_cast<size_t>(p.n_vocab)) << p.name;
    ASSERT_EQ(v.token_types.size(), v.tokens.size());
    std::unordered_set<std::string> seen(v.tokens.begin(), v.tokens.end());
    EXPECT_EQ(seen.size(), v.tokens.size()) << p.name << ": duplicate tokens";
    ASSERT_GE(v.bos, 0);
    ASSERT_LT(v.bos, p.n_vocab);
    ASSERT_GE(v.eos, 0);
    ASSERT_LT(v.eos, p.n_vocab);
    EXPECT_EQ(v.token_types[static_cast<size_t>(v.bos)], 3);
    EXPECT_EQ(v.token_types[static_cast<size_t>(v.eos)], 3);
    if (v.model == "gpt2") {
      EXPECT_TRUE(v.scores.empty());
      for (size_t i = 0; i < 256; ++i) EXPECT_EQ(v.token_types[i], 1);
      EXPECT_TRUE(seen.count("\xC4\xA0"));  // "Ġ", the space byte
      for (const auto& m : v.merges) {
        const size_t sp = m.find(' ', 1);
        ASSERT_NE(sp, std::string::npos) << m;
        const std::string a = m.substr(0, sp), b = m.substr(sp + 1);
        ASSERT_TRUE(seen.count(a) && seen.count(b) && seen.count(a + b)) << p.name << ": merge '" << m << "'";
      }
    } else {
      EXPECT_EQ(v.model, "llama");
      ASSERT_EQ(v.scores.size(), v.tokens.size());
      for (int b = 0; b < 256; ++b) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
        EXPECT_TRUE(seen.count(buf)) << buf;
      }
      EXPECT_TRUE(seen.count("<start_of_turn>") && seen.count("<end_of_turn>"));
    }
  }
}

TEST(SynthVocab, Deterministic) {
  const SynthVocab a = synth_vocab(preset("tiny-qwen3")), b = synth_vocab(preset("tiny-qwen3"));
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.merges, b.merges);
}

Expected<SynthResult> write(const std::string& path, const char* name, DType t, uint64_t seed, int threads) {
  SynthOptions o;
  o.preset = name;
  o.type = t;
  o.path = path;
  o.seed = seed;
  o.n_threads = threads;
  return synth_write(o);
}

TEST(SynthWrite, ReadsBackWithFiniteValues) {
  Scratch dir;
  for (const auto& p : synth_presets()) {
    if (!p.tiny) continue;
    for (DType t : {DType::F32, DType::Q4_K, DType::Q2_K, DType::BF16}) {
      const std::string path = dir.file(std::string(p.name) + ".gguf");
      auto res = write(path, p.name, t, 7, 2);
      ASSERT_TRUE(res.has_value()) << res.status().message();
      auto f = gguf::ModelFile::open(path);
      ASSERT_TRUE(f.has_value()) << f.status().message();
      const auto expected = *synth_tensors(p, t);
      ASSERT_EQ((*f)->tensors().size(), expected.size());
      for (size_t i = 0; i < expected.size(); ++i) {
        const gguf::TensorInfo& ti = (*f)->tensors()[i];
        EXPECT_EQ(ti.name, expected[i].name);
        EXPECT_EQ(ti.dtype, expected[i].type);
        int64_t n = 1;
        for (size_t d = 0; d < expected[i].ne.size(); ++d) {
          EXPECT_EQ(ti.ne[d], expected[i].ne[d]);
          n *= expected[i].ne[d];
        }
        std::vector<float> x(static_cast<size_t>(n));
        dequantize_row(ti.dtype, ti.data, x.data(), n);
        double sum2 = 0;
        for (float v : x) {
          ASSERT_TRUE(std::isfinite(v)) << ti.name;
          sum2 += double{v} * v;
        }
        const double rms = std::sqrt(sum2 / static_cast<double>(n));
        // gpt-oss's router bias is all zeros: the route skew's bias channel owns expert popularity.
        if (ti.name.find("ffn_gate_inp.bias") != std::string::npos) continue;
        EXPECT_GT(rms, 0.01) << ti.name;
        EXPECT_LT(rms, 40.0) << ti.name;  // rope_freqs reach the llama3 factor (32)
      }
      EXPECT_EQ((*f)->get_string_or("general.architecture", ""), arch_name(p.arch));
      EXPECT_EQ((*f)->get_int_or(std::string(arch_name(p.arch)) + ".block_count", 0), p.n_layer);
      const gguf::Value* toks = (*f)->find("tokenizer.ggml.tokens");
      ASSERT_NE(toks, nullptr);
      ASSERT_NE(toks->as_array(), nullptr);
      EXPECT_EQ(toks->as_array()->items.size(), static_cast<size_t>(p.n_vocab));
    }
  }
}

TEST(SynthWrite, ModelSpecReadsEveryTinyPreset) {
  Scratch dir;
  for (const auto& p : synth_presets()) {
    if (!p.tiny) continue;
    const std::string path = dir.file(std::string(p.name) + ".gguf");
    ASSERT_TRUE(write(path, p.name, DType::Q8_0, 0, 2).has_value());
    auto f = gguf::ModelFile::open(path);
    ASSERT_TRUE(f.has_value());
    auto spec = ModelSpec::from_gguf(**f);
    ASSERT_TRUE(spec.has_value()) << p.name << ": " << spec.status().message();
    EXPECT_EQ(spec->arch, p.arch);
    EXPECT_EQ(spec->n_layer, p.n_layer);
    EXPECT_EQ(spec->n_embd, p.n_embd);
    EXPECT_EQ(spec->n_head, p.n_head);
    EXPECT_EQ(spec->n_kv_head, p.n_kv_head);
    EXPECT_EQ(spec->head_dim, p.head_dim);
    EXPECT_EQ(spec->n_ff, p.n_ff);
    EXPECT_EQ(spec->n_vocab, p.n_vocab);
    EXPECT_EQ(spec->tied_output, p.tied_output);
    EXPECT_EQ(spec->qkv_bias, p.qkv_bias);
    EXPECT_EQ(spec->sliding_window, p.sliding_window);
    EXPECT_FLOAT_EQ(spec->rope_base, p.rope_base);
    EXPECT_EQ(spec->has_rope_freqs, p.llama3_rope_factor > 0);
    EXPECT_EQ(spec->n_expert, p.n_expert);
    EXPECT_EQ(spec->n_expert_used, p.n_expert_used);
    EXPECT_EQ(spec->n_ff_expert, p.n_ff_expert);
    const std::vector<int32_t> sections = synth_rope_sections(p);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(spec->rope_sections[i], sections[i]) << p.name;
  }
}

// The MoE presets' routers (model/synth_route_skew.h): reserved residual dimensions 0..n_p that only the
// router reads and no block writes, the constant in the embeddings, the biases; the same in --fast files.
TEST(SynthWrite, MoeRoutersReadReservedDimensions) {
  Scratch dir;
  for (bool fast : {false, true}) {
    const std::string path = dir.file(fast ? "fast.gguf" : "full.gguf");
    SynthOptions o;
    o.preset = "tiny-qwen3moe";
    o.type = DType::Q8_0;
    o.path = path;
    o.route_skew = 1.0;
    o.fast = fast;
    o.n_threads = 2;
    ASSERT_TRUE(synth_write(o).has_value());
    auto f = gguf::ModelFile::open(path);
    ASSERT_TRUE(f.has_value());
    const SynthPreset& p = preset("tiny-qwen3moe");
    const int64_t d = p.n_embd, np = route_feature_dims(d), E = p.n_expert, ffe = p.n_ff_expert;
    auto values = [&](const std::string& name) {
      const gguf::TensorInfo* t = (*f)->find_tensor(name);
      EXPECT_NE(t, nullptr) << name;
      int64_t n = 1;
      for (int i = 0; i < 4; ++i) n *= t->ne[i];
      std::vector<float> x(static_cast<size_t>(n));
      dequantize_row(t->dtype, t->data, x.data(), n);
      return x;
    };
    const std::vector<float> emb = values("token_embd.weight");
    for (int64_t t = 0; t < p.n_vocab; t += 37) EXPECT_NEAR(emb[t * d], 6.0 / 16.0, 0.01) << t;  // 3 sd = 6/sqrt(d)
    for (int il = 0; il < p.n_layer; ++il) {
      const std::string b = "blk." + std::to_string(il) + ".";
      const std::vector<float> wo = values(b + "attn_output.weight");  // [qd, d]: row r = output r
      const int64_t qd = int64_t{p.n_head} * p.head_dim;
      for (int64_t r = 0; r <= np; ++r)
        for (int64_t c = 0; c < qd; ++c) ASSERT_EQ(wo[r * qd + c], 0.f) << b << " attn_output row " << r;
      const std::vector<float> down = values(b + "ffn_down_exps.weight");  // [ffe, d, E]
      for (int64_t e = 0; e < E; ++e)
        for (int64_t r = 0; r <= np; ++r)
          for (int64_t c = 0; c < ffe; c += 17) ASSERT_EQ(down[(e * d + r) * ffe + c], 0.f) << b << " down " << e;
      const std::vector<float> up = values(b + "ffn_up_exps.weight");  // [d, ffe, E]
      for (int64_t row = 0; row < ffe * E; row += 13)
        for (int64_t c = 0; c <= np; ++c) ASSERT_EQ(up[row * d + c], 0.f) << b << " up column " << c;
      const std::vector<float> router = values(b + "ffn_gate_inp.weight");  // [d, E], F32
      double bias_sum = 0;
      std::set<float> biases;
      for (int64_t e = 0; e < E; ++e) {
        bias_sum += router[e * d];
        biases.insert(router[e * d]);
        for (int64_t c = np + 1; c < d; ++c) ASSERT_EQ(router[e * d + c], 0.f) << b << " router " << e;
      }
      EXPECT_NEAR(bias_sum, 0.0, 1e-4);                        // centered
      EXPECT_EQ(biases.size(), static_cast<size_t>(E));        // one rank each
      EXPECT_NEAR(*biases.rbegin() - *biases.begin(), std::log(16.0), 1e-4);  // S * ln(E): ranks 1..16
    }
  }
  // No experts, no skew.
  SynthOptions o;
  o.preset = "tiny-llama";
  o.path = dir.file("dense.gguf");
  o.route_skew = 1.0;
  auto bad = synth_write(o);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("mixture-of-experts"), std::string::npos);
}

TEST(SynthWrite, BytesDependOnSeedNotThreads) {
  Scratch dir;
  ASSERT_TRUE(write(dir.file("a.gguf"), "tiny-llama", DType::Q4_K, 1, 1).has_value());
  ASSERT_TRUE(write(dir.file("b.gguf"), "tiny-llama", DType::Q4_K, 1, 3).has_value());
  ASSERT_TRUE(write(dir.file("c.gguf"), "tiny-llama", DType::Q4_K, 2, 3).has_value());
  const std::string a = read_all(dir.file("a.gguf"));
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, read_all(dir.file("b.gguf")));
  EXPECT_NE(a, read_all(dir.file("c.gguf")));
}

TEST(SynthWrite, Errors) {
  Scratch dir;
  auto bad = write(dir.file("x.gguf"), "no-such-preset", DType::F16, 0, 1);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  auto badtype = write(dir.file("x.gguf"), "tiny-llama", DType::Q8_K, 0, 1);
  ASSERT_FALSE(badtype.has_value());
  EXPECT_EQ(badtype.status().code(), ErrorCode::kInvalidArgument);
  auto io = write("/nonexistent-dir/x.gguf", "tiny-llama", DType::F16, 0, 1);
  ASSERT_FALSE(io.has_value());
  EXPECT_EQ(io.status().code(), ErrorCode::kIo);
}

}  // namespace
}  // namespace ferry::model
