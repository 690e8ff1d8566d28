// ferry synth (see synth.h): preset table, tensor list, vocabulary, metadata and the streamed writer.
// Values: weights ~N(0, 1/sqrt(fan_in)) so every matmul keeps unit scale and pre-norm residual streams
// grow only ~sqrt(layers); token_embd / output ~N(0, 2/sqrt(d)) so logits have a spread like a real
// model's (clear argmax, no overflow); norms 1 + N(0, 0.1) (gemma's stored +1 included); biases
// N(0, 0.05). Each row chunk draws from its own RNG stream seeded by (seed, tensor name, chunk), so
// the bytes do not depend on the thread count.
#include "model/synth.h"

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "format/gguf.h"
#include "model/synth_route_skew.h"
#include "model/synth_random.h"
#include "tensor/quant.h"

namespace ferry::model {
namespace {

using synth_detail::fnv1a;
using synth_detail::Rng;
using synth_detail::splitmix64;

// ---- presets ----------------------------------------------------------------------------------
// Real presets carry the published config.json values; tiny ones keep each architecture's features
// (GQA, q/k norms, biases, tied heads, sliding windows, rope scaling) at d=256 so every weight row is a
// multiple of 256 (k-quant super-block) and the F32 file stays under 10 MB.
using V = SynthVocabStyle;
const std::vector<SynthPreset> kPresets = {
    // name, description, arch, tiny, layers, d, heads, kv, head_dim, ff, vocab, ctx, eps, rope base,
    // rope base swa, linear factor, llama3 factor, swa window, tied, qkv bias, head_dim keys, vocab
    {"tiny-llama", "Llama 3.2 style (GQA, llama3 rope_freqs), untied head", Arch::kLlama, true, 2, 256, 4, 2, 64,
     512, 1024, 4096, 1e-5f, 500000.f, 0.f, 0.f, 32.f, 0, false, false, false, V::kLlama3},
    {"tiny-qwen2", "Qwen2.5 style (q/k/v biases), tied head", Arch::kQwen2, true, 2, 256, 4, 2, 64, 512, 1024,
     4096, 1e-6f, 1000000.f, 0.f, 0.f, 0.f, 0, true, true, false, V::kQwen2},
    {"tiny-qwen3", "Qwen3 style (q/k norms, q width 2*d), untied head", Arch::kQwen3, true, 2, 256, 4, 1, 128,
     512, 1024, 4096, 1e-6f, 1000000.f, 0.f, 0.f, 0.f, 0, false, false, true, V::kQwen3},
    {"tiny-gemma3", "Gemma 3 style (5 local + 1 global layer, window 32, linear rope x8), tied", Arch::kGemma3,
     true, 6, 256, 4, 1, 64, 256, 512, 32768, 1e-6f, 1000000.f, 10000.f, 8.f, 0.f, 32, true, false, true,
     V::kGemma},
    {"tiny-qwen2.5-vl", "Qwen2.5-VL style text model (M-RoPE sections, q/k/v biases), untied; its mmproj: "
     "`--mmproj-out`", Arch::kQwen2VL, true, 2, 256, 4, 2, 64, 512, 1024, 4096, 1e-6f, 1000000.f, 0.f, 0.f, 0.f, 0,
     false, true, false, V::kQwen2},
    {"llama3-8b", "Meta-Llama-3-8B", Arch::kLlama, false, 32, 4096, 32, 8, 128, 14336, 128256, 8192, 1e-5f,
     500000.f, 0.f, 0.f, 0.f, 0, false, false, false, V::kLlama3},
    {"minitron-8b", "Mistral-NeMo-Minitron-8B (FFN 11520 = 45 x 256)", Arch::kLlama, false, 40,
     4096, 32, 8, 128, 11520, 131072, 8192, 1e-5f, 1000000.f, 0.f, 0.f, 0.f, 0, false, false, true, V::kLlama3},
    {"qwen3-4b", "Qwen3-4B (tied head)", Arch::kQwen3, false, 36, 2560, 32, 8, 128, 9728, 151936, 40960, 1e-6f,
     1000000.f, 0.f, 0.f, 0.f, 0, true, false, true, V::kQwen3},
    {"qwen3-8b", "Qwen3-8B", Arch::kQwen3, false, 36, 4096, 32, 8, 128, 12288, 151936, 40960, 1e-6f, 1000000.f,
     0.f, 0.f, 0.f, 0, false, false, true, V::kQwen3},
    {"gemma3-4b", "gemma-3-4b (text part, tied head)", Arch::kGemma3, false, 34, 2560, 8, 4, 256, 10240, 262144,
     131072, 1e-6f, 1000000.f, 10000.f, 8.f, 0.f, 1024, true, false, true, V::kGemma},
    // Mixtures of experts: ..., vocab style, experts, used per token, expert FFN width.
    {"tiny-qwen3moe", "Qwen3-MoE style (16 experts, top 4, q/k norms), untied head", Arch::kQwen3Moe, true, 2, 256,
     4, 1, 128, 512, 1024, 4096, 1e-6f, 1000000.f, 0.f, 0.f, 0.f, 0, false, false, true, V::kQwen3, 16, 4, 256},
    {"tiny-mixtral", "Mixtral style (llama with 8 experts, top 2, GQA), untied head", Arch::kLlama, true, 2, 256, 4,
     2, 64, 256, 1024, 4096, 1e-5f, 1000000.f, 0.f, 0.f, 0.f, 0, false, false, false, V::kLlama3, 8, 2, 256},
    {"qwen3-30b-a3b", "Qwen3-30B-A3B (128 experts, 8 per token)", Arch::kQwen3Moe, false, 48, 2048, 32, 4, 128, 6144,
     151936, 40960, 1e-6f, 1000000.f, 0.f, 0.f, 0.f, 0, false, false, true, V::kQwen3, 128, 8, 768},
    {"qwen3-235b-a22b", "Qwen3-235B-A22B (128 experts, 8 per token)", Arch::kQwen3Moe, false, 94, 4096, 64, 4, 128,
     12288, 151936, 40960, 1e-6f, 1000000.f, 0.f, 0.f, 0.f, 0, false, false, true, V::kQwen3, 128, 8, 1536},
    {"mixtral-8x7b", "Mixtral-8x7B-v0.1 (8 experts, 2 per token; byte-level BPE vocab of its size)", Arch::kLlama,
     false, 32, 4096, 32, 8, 128, 14336, 32000, 32768, 1e-5f, 1000000.f, 0.f, 0.f, 0.f, 0, false, false, false,
     V::kLlama3, 8, 2, 14336},
    // gpt-oss (GGUF architecture gpt-oss): q/k/v/o biases, attention sinks, sliding window 128 on even
    // layers, YaRN x32 over 4096, router and expert biases, clamped SwiGLU, MXFP4 experts; o200k vocab.
    {"tiny-gpt-oss", "gpt-oss style (8 experts, top 2, sinks, window 16 on even layers, YaRN x32, MXFP4 experts)",
     Arch::kGptOss, true, 2, 256, 8, 2, 64, 256, 1024, 131072, 1e-5f, 150000.f, 0.f, 0.f, 0.f, 16, false, true, true,
     V::kGptOss, 8, 2, 256, 32.f, 4096},
    {"gpt-oss-20b", "gpt-oss-20b (24 layers, 32 experts, 4 per token, MXFP4 experts)", Arch::kGptOss, false, 24,
     2880, 64, 8, 64, 2880, 201088, 131072, 1e-5f, 150000.f, 0.f, 0.f, 0.f, 128, false, true, true, V::kGptOss, 32, 4,
     2880, 32.f, 4096},
    {"gpt-oss-120b", "gpt-oss-120b (36 layers, 128 experts, 4 per token, MXFP4 experts)", Arch::kGptOss, false, 36,
     2880, 64, 8, 64, 2880, 201088, 131072, 1e-5f, 150000.f, 0.f, 0.f, 0.f, 128, false, true, true, V::kGptOss, 128,
     4, 2880, 32.f, 4096},
    {"qwen2.5-vl-7b", "Qwen2.5-VL-7B-Instruct / Cosmos-Reason1-7B (text model; mmproj: `--mmproj-out`)",
     Arch::kQwen2VL, false, 28, 3584, 28, 4, 128, 18944, 152064, 128000, 1e-6f, 1000000.f, 0.f, 0.f, 0.f, 0, false,
     true, false, V::kQwen2},
    {"qwen2.5-vl-3b", "Qwen2.5-VL-3B-Instruct (text model, tied head; mmproj: `--mmproj-out`)", Arch::kQwen2VL, false,
     36, 2048, 16, 2, 128, 11008, 151936, 128000, 1e-6f, 1000000.f, 0.f, 0.f, 0.f, 0, true, true, false, V::kQwen2},
};

// llama-quantize's fallback for a row length that is not a multiple of the type's block
// (llama-quant.cpp, tensor_type_fallback): a 32-element type of similar size, else F16.
DType fallback_type(DType t, int64_t ncols) {
  DType r = t;
  switch (t) {
    case DType::Q2_K:
    case DType::Q3_K: r = DType::Q4_0; break;
    case DType::Q4_K: r = DType::Q5_0; break;
    case DType::Q5_K: r = DType::Q5_1; break;
    case DType::Q6_K: r = DType::Q8_0; break;
    default: break;
  }
  if (ncols % traits(r).block_elems != 0) r = DType::F16;
  return r;
}

// llama_ftype of a file whose 2-D weights are mostly `t` (general.file_type).
uint32_t file_type_of(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q4_0: return 2;
    case DType::Q4_1: return 3;
    case DType::Q8_0: return 7;
    case DType::Q5_0: return 8;
    case DType::Q5_1: return 9;
    case DType::Q2_K: return 10;
    case DType::Q3_K: return 11;  // Q3_K_S: all Q3_K
    case DType::Q4_K: return 14;  // Q4_K_S
    case DType::Q5_K: return 16;  // Q5_K_S
    case DType::Q6_K: return 18;
    case DType::BF16: return 32;
    case DType::MXFP4: return 38;  // LLAMA_FTYPE_MOSTLY_MXFP4_MOE
    default: return 0;
  }
}

// ---- metadata -----------------------------------------------------------------------------------
void write_metadata(gguf::Writer& w, const SynthPreset& p, int32_t n_layer, DType type, uint64_t seed,
                    double route_skew) {
  const std::string a = arch_name(p.arch);
  w.add_string("general.architecture", a);
  w.add_string("general.type", "model");
  w.add_string("general.name", std::string("ferry synth ") + p.name);
  char skew[64] = "";
  if (route_skew > 0) std::snprintf(skew, sizeof(skew), ", route skew %g", route_skew);
  w.add_string("general.description", std::string("random weights, shapes of ") + p.description +
                                          ", seed " + std::to_string(seed) + skew);
  w.add_u32(a + ".context_length", static_cast<uint32_t>(p.n_ctx_train));
  w.add_u32(a + ".embedding_length", static_cast<uint32_t>(p.n_embd));
  w.add_u32(a + ".block_count", static_cast<uint32_t>(n_layer));
  w.add_u32(a + ".feed_forward_length", static_cast<uint32_t>(p.n_ff));
  w.add_u32(a + ".attention.head_count", static_cast<uint32_t>(p.n_head));
  w.add_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(p.n_kv_head));
  w.add_f32(a + ".rope.freq_base", p.rope_base);
  if (p.rope_base_swa > 0) w.add_f32(a + ".rope.freq_base_swa", p.rope_base_swa);
  if (p.rope_linear_factor > 0) {
    w.add_string(a + ".rope.scaling.type", "linear");
    w.add_f32(a + ".rope.scaling.factor", p.rope_linear_factor);
  }
  if (p.yarn_factor > 0) {  // as the converter writes gpt-oss's rope_scaling
    w.add_string(a + ".rope.scaling.type", "yarn");
    w.add_f32(a + ".rope.scaling.factor", p.yarn_factor);
    w.add_u32(a + ".rope.scaling.original_context_length", static_cast<uint32_t>(p.yarn_orig_ctx));
    w.add_f32(a + ".rope.scaling.yarn_beta_fast", 32.f);
    w.add_f32(a + ".rope.scaling.yarn_beta_slow", 1.f);
  }
  w.add_f32(a + ".attention.layer_norm_rms_epsilon", p.rms_eps);
  if (p.head_dim_keys) {
    w.add_u32(a + ".attention.key_length", static_cast<uint32_t>(p.head_dim));
    w.add_u32(a + ".attention.value_length", static_cast<uint32_t>(p.head_dim));
  }
  if (p.sliding_window > 0) w.add_u32(a + ".attention.sliding_window", static_cast<uint32_t>(p.sliding_window));
  if (p.n_expert > 0) {
    w.add_u32(a + ".expert_count", static_cast<uint32_t>(p.n_expert));
    w.add_u32(a + ".expert_used_count", static_cast<uint32_t>(p.n_expert_used));
    if (p.arch == Arch::kQwen3Moe || p.arch == Arch::kGptOss)
      w.add_u32(a + ".expert_feed_forward_length", static_cast<uint32_t>(p.n_ff_expert));
  }
  if (p.arch == Arch::kQwen2VL) {  // mrope_section padded to 4, as the converter writes it
    const std::vector<int32_t> sections = synth_rope_sections(p);
    w.add_i32_array(a + ".rope.dimension_sections", sections);
  }
  if (p.arch == Arch::kLlama) {  // LlamaModel.set_gguf_parameters adds these two
    w.add_u32(a + ".vocab_size", static_cast<uint32_t>(p.n_vocab));
    w.add_u32(a + ".rope.dimension_count", static_cast<uint32_t>(p.head_dim));
  }
  w.add_u32("general.file_type", file_type_of(type));

  const SynthVocab v = synth_vocab(p);
  w.add_string("tokenizer.ggml.model", v.model);
  w.add_string("tokenizer.ggml.pre", v.pre);
  w.add_string_array("tokenizer.ggml.tokens", v.tokens);
  if (!v.scores.empty()) w.add_f32_array("tokenizer.ggml.scores", v.scores);
  w.add_i32_array("tokenizer.ggml.token_type", v.token_types);
  if (!v.merges.empty()) w.add_string_array("tokenizer.ggml.merges", v.merges);
  if (v.bos >= 0) w.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(v.bos));
  if (v.eos >= 0) w.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(v.eos));
  if (v.unk >= 0) w.add_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(v.unk));
  if (v.pad >= 0) w.add_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(v.pad));
  w.add_bool("tokenizer.ggml.add_bos_token", v.add_bos);
  if (v.model == "llama") {
    w.add_bool("tokenizer.ggml.add_sep_token", false);
    w.add_bool("tokenizer.ggml.add_eos_token", false);
    w.add_bool("tokenizer.ggml.add_space_prefix", false);
  }
  w.add_string("tokenizer.chat_template", v.chat_template);
  w.add_u32("general.quantization_version", 2);
}

// ---- values -------------------------------------------------------------------------------------
enum class Fill { kWeight, kEmbed, kNorm, kBias, kRopeFreqs, kRouter };

struct Job {
  SynthTensor t;
  Fill fill;
  float stddev;
};

// Llama 3 rope scaling factors per frequency pair (convert_hf_to_gguf's generate_extra_tensors):
// low_freq_factor 1, high_freq_factor 4, original context 8192.
std::vector<float> llama3_rope_factors(const SynthPreset& p) {
  const double base = p.rope_base, factor = p.llama3_rope_factor, low = 1.0, high = 4.0, old_ctx = 8192.0;
  std::vector<float> out;
  for (int i = 0; i < p.head_dim; i += 2) {
    const double freq = 1.0 / std::pow(base, static_cast<double>(i) / p.head_dim);
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < old_ctx / high) out.push_back(1.f);
    else if (wavelen > old_ctx / low) out.push_back(static_cast<float>(factor));
    else {
      const double smooth = (old_ctx / wavelen - low) / (high - low);
      out.push_back(static_cast<float>(1.0 / ((1 - smooth) / factor + smooth)));
    }
  }
  return out;
}

std::vector<Job> make_jobs(const SynthPreset& p, DType type, int32_t n_layer) {
  std::vector<Job> jobs;
  const int64_t d = p.n_embd, q = int64_t{p.n_head} * p.head_dim, kv = int64_t{p.n_kv_head} * p.head_dim;
  auto weight = [&](std::string name, int64_t in, int64_t out, Fill fill = Fill::kWeight, int64_t n_expert = 0) {
    const DType t = in % traits(type).block_elems == 0 ? type : fallback_type(type, in);
    const float sd = fill == Fill::kEmbed ? 2.0f / std::sqrt(static_cast<float>(in)) : 1.0f / std::sqrt(static_cast<float>(in));
    std::vector<int64_t> ne = {in, out};
    if (n_expert > 0) ne.push_back(n_expert);
    jobs.push_back({{std::move(name), t, ne, type}, fill, sd});
  };
  auto vec = [&](std::string name, int64_t n, Fill fill) {
    jobs.push_back({{std::move(name), DType::F32, {n}, DType::F32}, fill, fill == Fill::kBias ? 0.05f : 0.1f});
  };
  const bool gpt_oss = p.arch == Arch::kGptOss;
  // gpt-oss's experts: MXFP4 whatever --type says (its rows are whole 32-blocks at every preset width).
  auto experts = [&](std::string name, int64_t in, int64_t out) {
    if (!gpt_oss) return weight(std::move(name), in, out, Fill::kWeight, p.n_expert);
    jobs.push_back({{std::move(name), DType::MXFP4, {in, out, p.n_expert}, DType::MXFP4}, Fill::kWeight,
                    1.0f / std::sqrt(static_cast<float>(in))});
  };
  weight("token_embd.weight", d, p.n_vocab, Fill::kEmbed);
  if (p.llama3_rope_factor > 0) vec("rope_freqs.weight", p.head_dim / 2, Fill::kRopeFreqs);
  for (int32_t i = 0; i < n_layer; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    vec(b + "attn_norm.weight", d, Fill::kNorm);
    weight(b + "attn_q.weight", d, q);
    weight(b + "attn_k.weight", d, kv);
    weight(b + "attn_v.weight", d, kv);
    if (p.qkv_bias) {
      vec(b + "attn_q.bias", q, Fill::kBias);
      vec(b + "attn_k.bias", kv, Fill::kBias);
      vec(b + "attn_v.bias", kv, Fill::kBias);
    }
    if (p.arch == Arch::kQwen3 || p.arch == Arch::kQwen3Moe || p.arch == Arch::kGemma3) {
      vec(b + "attn_q_norm.weight", p.head_dim, Fill::kNorm);
      vec(b + "attn_k_norm.weight", p.head_dim, Fill::kNorm);
    }
    weight(b + "attn_output.weight", q, d);
    if (gpt_oss) {  // the output bias and the per-head sink logits
      vec(b + "attn_output.bias", d, Fill::kBias);
      jobs.push_back({{b + "attn_sinks.weight", DType::F32, {p.n_head}, DType::F32}, Fill::kBias, 0.5f});
    }
    if (p.arch == Arch::kGemma3) vec(b + "post_attention_norm.weight", d, Fill::kNorm);
    // gpt-oss's norm before the experts is named post_attention_norm (llama.cpp's openai-moe).
    vec(b + (gpt_oss ? "post_attention_norm.weight" : "ffn_norm.weight"), d, Fill::kNorm);
    if (p.n_expert > 0) {
      const float sd = 1.0f / std::sqrt(static_cast<float>(d));
      jobs.push_back({{b + "ffn_gate_inp.weight", DType::F32, {d, p.n_expert}, DType::F32}, Fill::kRouter, sd});
      experts(b + "ffn_gate_exps.weight", d, p.n_ff_expert);
      experts(b + "ffn_up_exps.weight", d, p.n_ff_expert);
      experts(b + "ffn_down_exps.weight", p.n_ff_expert, d);
      if (gpt_oss) {  // the router's and the experts' biases, F32 as the converter keeps them
        vec(b + "ffn_gate_inp.bias", p.n_expert, Fill::kBias);
        jobs.push_back({{b + "ffn_gate_exps.bias", DType::F32, {p.n_ff_expert, p.n_expert}, DType::F32}, Fill::kBias, 0.05f});
        jobs.push_back({{b + "ffn_up_exps.bias", DType::F32, {p.n_ff_expert, p.n_expert}, DType::F32}, Fill::kBias, 0.05f});
        jobs.push_back({{b + "ffn_down_exps.bias", DType::F32, {d, p.n_expert}, DType::F32}, Fill::kBias, 0.05f});
      }
      continue;
    }
    weight(b + "ffn_gate.weight", d, p.n_ff);
    weight(b + "ffn_up.weight", d, p.n_ff);
    weight(b + "ffn_down.weight", p.n_ff, d);
    if (p.arch == Arch::kGemma3) vec(b + "post_ffw_norm.weight", d, Fill::kNorm);
  }
  vec("output_norm.weight", d, Fill::kNorm);
  if (!p.tied_output) weight("output.weight", d, p.n_vocab, Fill::kEmbed);
  return jobs;
}

// Rows per chunk: ~1M values, so a chunk is a few MB whatever the row length.
int64_t rows_per_chunk(int64_t row_len) { return std::max<int64_t>(1, (int64_t{1} << 20) / row_len); }

int64_t rows_of(const SynthTensor& t) {
  int64_t rows = 1;  // rows of every expert, for stacked experts
  for (size_t i = 1; i < t.ne.size(); ++i) rows *= t.ne[i];
  return rows;
}

// Fills and converts rows [r0, r1) of a tensor into `out` (the chunk's bytes in the tensor's type).
void make_chunk(const Job& job, uint64_t seed, const RouteSkew& skew, int64_t chunk, int64_t r0, int64_t r1,
                std::vector<float>& scratch, std::vector<uint8_t>& out) {
  const int64_t ne0 = job.t.ne[0];
  const int64_t n = (r1 - r0) * ne0;
  scratch.resize(static_cast<size_t>(n));
  uint64_t s = seed ^ fnv1a(job.t.name);
  s = splitmix64(s) ^ (static_cast<uint64_t>(chunk) * 0xD1B54A32D192ED03ull);
  Rng rng(s);
  const float base = job.fill == Fill::kNorm ? 1.f : 0.f;
  for (int64_t i = 0; i < n; ++i) scratch[static_cast<size_t>(i)] = base + job.stddev * rng.normal();
  route_skew_shape_rows(skew, job.t.name, ne0, rows_of(job.t), r0, r1, scratch.data());
  out.resize(row_bytes(job.t.type, n));
  quantize_row(job.t.type, scratch.data(), out.data(), n);
}

// Writes rows [r0, r1) of a tensor from `bytes`, with the rows --route-skew zeroes set to zero (an all-zero
// row is a zero row in every type). `patch` is scratch for a copy when `bytes` must stay unchanged.
Status write_rows(gguf::Writer& w, const Job& job, const RouteSkew& skew, int64_t r0, int64_t r1, const uint8_t* bytes,
                  std::vector<uint8_t>& patch) {
  const size_t row = row_bytes(job.t.type, job.t.ne[0]);
  const size_t n = row * static_cast<size_t>(r1 - r0);
  bool copied = false;
  for (int64_t r = r0; r < r1; ++r) {
    if (!route_skew_zero_row(skew, job.t.name, r)) continue;
    if (!copied) {
      patch.assign(bytes, bytes + n);
      copied = true;
    }
    std::fill_n(patch.begin() + static_cast<std::ptrdiff_t>(row * static_cast<size_t>(r - r0)), row, uint8_t{0});
  }
  return w.write_tensor_data(copied ? patch.data() : bytes, n);
}

uint64_t tensor_bytes(const SynthTensor& t) {
  int64_t n = 1;
  for (int64_t x : t.ne) n *= x;
  return row_bytes(t.type, n);
}

// Generates and writes one tensor: windows of chunks are made in parallel, then written in order.
Status write_tensor(gguf::Writer& w, const Job& job, uint64_t seed, const RouteSkew& skew, int n_threads,
                    SynthProgress& prog, const SynthOptions& opt) {
  const int64_t ne0 = job.t.ne[0];
  const int64_t rows = rows_of(job.t);
  const int64_t rpc = rows_per_chunk(ne0);
  const int64_t n_chunks = (rows + rpc - 1) / rpc;
  constexpr int64_t kPool = 2;
  std::vector<uint8_t> patch;
  // Router rows each carry their expert's bias: never repeated from a pool.
  const bool poolable = job.fill != Fill::kRouter;
  if (opt.fast && n_chunks > kPool && poolable) {
    std::vector<std::vector<uint8_t>> pool(kPool);
    std::atomic<int64_t> next{0};
    auto worker = [&] {
      std::vector<float> scratch;
      for (int64_t c; (c = next.fetch_add(1)) < kPool;)
        make_chunk(job, seed, skew, c, c * rpc, (c + 1) * rpc, scratch, pool[c]);
    };
    std::vector<std::thread> threads;
    for (int64_t i = 1; i < std::min<int64_t>(n_threads, kPool); ++i) threads.emplace_back(worker);
    worker();
    for (auto& t : threads) t.join();
    const size_t row = row_bytes(job.t.type, ne0);
    for (int64_t c = 0; c < n_chunks; ++c) {
      const int64_t r1 = std::min(rows, (c + 1) * rpc);
      const size_t bytes = row * static_cast<size_t>(r1 - c * rpc);
      FERRY_RETURN_IF_ERROR(write_rows(w, job, skew, c * rpc, r1, pool[c % kPool].data(), patch));
      prog.bytes_done += bytes;
      if (opt.on_progress && c % 64 == 63) opt.on_progress(prog);
    }
    if (opt.on_progress) opt.on_progress(prog);
    return Status::ok();
  }
  const int64_t window = std::max<int64_t>(1, 2 * int64_t{n_threads});
  std::vector<std::vector<uint8_t>> outs(static_cast<size_t>(window));
  for (int64_t c0 = 0; c0 < n_chunks; c0 += window) {
    const int64_t c1 = std::min(n_chunks, c0 + window);
    std::atomic<int64_t> next{c0};
    auto worker = [&] {
      std::vector<float> scratch;
      for (int64_t c; (c = next.fetch_add(1)) < c1;)
        make_chunk(job, seed, skew, c, c * rpc, std::min(rows, (c + 1) * rpc), scratch, outs[static_cast<size_t>(c - c0)]);
    };
    const int64_t n_workers = std::min<int64_t>(n_threads, c1 - c0);
    std::vector<std::thread> threads;
    for (int64_t i = 1; i < n_workers; ++i) threads.emplace_back(worker);
    worker();
    for (auto& t : threads) t.join();
    for (int64_t c = c0; c < c1; ++c) {
      const auto& buf = outs[static_cast<size_t>(c - c0)];
      FERRY_RETURN_IF_ERROR(write_rows(w, job, skew, c * rpc, std::min(rows, (c + 1) * rpc), buf.data(), patch));
      prog.bytes_done += buf.size();
      if (opt.on_progress) opt.on_progress(prog);
    }
  }
  return Status::ok();
}

}  // namespace

const std::vector<SynthPreset>& synth_presets() { return kPresets; }

const SynthPreset* find_synth_preset(std::string_view name) {
  for (const auto& p : kPresets)
    if (name == p.name) return &p;
  return nullptr;
}

Expected<std::vector<SynthTensor>> synth_tensors(const SynthPreset& preset, DType type, int32_t n_layer) {
  const DTypeTraits* tr = dtype_traits(static_cast<uint32_t>(type));
  if (tr == nullptr || !tr->weight_type)
    return make_error(ErrorCode::kInvalidArgument, "type %s is not a weight type (use one of F32 F16 BF16 Q8_0 "
                      "Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K)", tr ? tr->name : "?");
  if (n_layer < 0) return make_error(ErrorCode::kInvalidArgument, "--layers must be positive, got %d", n_layer);
  std::vector<SynthTensor> out;
  for (Job& j : make_jobs(preset, type, n_layer == 0 ? preset.n_layer : n_layer)) out.push_back(std::move(j.t));
  return out;
}

std::vector<int32_t> synth_rope_sections(const SynthPreset& preset) {
  if (preset.arch != Arch::kQwen2VL) return {0, 0, 0, 0};
  // Qwen2.5-VL: mrope_section [16, 24, 24] for 128-wide heads; the same proportions for other widths.
  const int32_t hd = preset.head_dim;
  return {hd / 8, 3 * hd / 16, 3 * hd / 16, 0};
}

Status synth_write_random(gguf::Writer& w, const std::vector<SynthRandom>& tensors, uint64_t seed, int n_threads,
                          SynthProgress& prog, const SynthOptions& opt) {
  for (const SynthRandom& r : tensors) {
    prog.tensor = r.t.name.c_str();
    const Job job{r.t, r.mean == 1.f ? Fill::kNorm : Fill::kWeight, r.stddev};
    FERRY_RETURN_IF_ERROR(write_tensor(w, job, seed, RouteSkew{}, std::clamp(n_threads, 1, 256), prog, opt));
  }
  return Status::ok();
}

Expected<SynthResult> synth_write(const SynthOptions& opt) {
  const SynthPreset* p = find_synth_preset(opt.preset);
  if (p == nullptr)
    return make_error(ErrorCode::kInvalidArgument, "unknown preset '%s' (see `ferry synth --list`)", opt.preset.c_str());
  FERRY_ASSIGN_OR_RETURN(std::vector<SynthTensor> tensors, synth_tensors(*p, opt.type, opt.n_layer));
  const int32_t n_layer = opt.n_layer == 0 ? p->n_layer : opt.n_layer;
  std::vector<Job> jobs = make_jobs(*p, opt.type, n_layer);

  SynthResult res;
  res.n_tensors = jobs.size();
  // Fallback notes, one per tensor kind ("blk.*.ffn_down.weight").
  for (const Job& j : jobs) {
    if (j.t.type == j.t.requested || j.t.ne.size() < 2) continue;
    std::string kind = j.t.name;
    if (kind.rfind("blk.", 0) == 0) kind = "blk.*" + kind.substr(kind.find('.', 4));
    char line[256];
    std::snprintf(line, sizeof(line), "%s: row length %" PRId64 " is not a multiple of %d (%s); stored as %s, as "
                  "llama-quantize does", kind.c_str(), j.t.ne[0], traits(j.t.requested).block_elems,
                  dtype_name(j.t.requested), dtype_name(j.t.type));
    if (std::find(res.notes.begin(), res.notes.end(), line) == res.notes.end()) res.notes.emplace_back(line);
  }

  if (opt.route_skew != 0 && p->n_expert == 0)
    return make_error(ErrorCode::kInvalidArgument, "--route-skew needs a mixture-of-experts preset ('%s' has no experts)",
                      p->name);
  if (!(opt.route_skew >= 0 && opt.route_skew <= 8))
    return make_error(ErrorCode::kInvalidArgument, "--route-skew must be in [0, 8], got %g", opt.route_skew);
  RouteSkew skew;
  skew.on = p->n_expert > 0;
  skew.s = opt.route_skew;
  skew.n_embd = p->n_embd;
  skew.seed = opt.seed;

  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<gguf::Writer> w, gguf::Writer::create(opt.path));
  write_metadata(*w, *p, n_layer, opt.type, opt.seed, opt.route_skew);
  SynthProgress prog;
  for (const Job& j : jobs) {
    FERRY_RETURN_IF_ERROR(w->add_tensor_info(j.t.name, j.t.type, j.t.ne));
    prog.bytes_total += tensor_bytes(j.t);
    int64_t n = 1;
    for (int64_t x : j.t.ne) n *= x;
    res.n_params += n;
  }
  res.data_bytes = prog.bytes_total;
  FERRY_RETURN_IF_ERROR(w->begin_data());

  int n_threads = opt.n_threads > 0 ? opt.n_threads : static_cast<int>(std::thread::hardware_concurrency());
  n_threads = std::clamp(n_threads, 1, 256);
  for (const Job& j : jobs) {
    prog.tensor = j.t.name.c_str();
    if (j.fill == Fill::kRopeFreqs) {
      const std::vector<float> f = llama3_rope_factors(*p);
      FERRY_RETURN_IF_ERROR(w->write_tensor_data(f.data(), f.size() * sizeof(float)));
      prog.bytes_done += f.size() * sizeof(float);
      continue;
    }
    FERRY_RETURN_IF_ERROR(write_tensor(*w, j, opt.seed, skew, n_threads, prog, opt));
  }
  FERRY_RETURN_IF_ERROR(w->finish());
  return res;
}

}  // namespace ferry::model
