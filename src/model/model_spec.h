// ModelSpec: the architecture-independent description of a model, built from GGUF metadata
// (hyperparameters only; weights are bound separately). Shapes written next to every field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace ferry::gguf {
class ModelFile;
}

namespace ferry::model {

// Mixtral is kLlama with experts (its GGUF architecture is "llama" with expert_count > 0).
enum class Arch : uint8_t { kLlama, kQwen2, kQwen3, kGemma3, kQwen3Moe, kQwen2VL, kGptOss };
const char* arch_name(Arch a);  // GGUF general.architecture spelling

struct ModelSpec {
  Arch arch = Arch::kLlama;
  std::string name;          // general.name
  int32_t n_layer = 0;
  int32_t n_embd = 0;        // d
  int32_t n_head = 0;
  int32_t n_kv_head = 0;
  int32_t head_dim = 0;      // per head (q and k/v), d_head
  int32_t n_rot = 0;         // dimensions RoPE rotates per head (<= head_dim; == head_dim in practice)
  int32_t n_ff = 0;          // FFN hidden width (dense layers; Mixtral: each expert's)
  int32_t n_vocab = 0;
  int32_t n_ctx_train = 0;
  float rms_eps = 1e-5f;

  // RoPE
  float rope_base = 10000.f;
  float rope_base_local = 10000.f;  // gemma3 sliding-window layers
  float rope_freq_scale = 1.f;      // 1 / scaling factor (global layers; linear or YaRN)
  float rope_freq_scale_local = 1.f;  // sliding-window layers (gemma3: never scaled; gpt-oss: as global)
  // YaRN (rope.scaling.type "yarn"; gpt-oss): as llama.cpp's context sets them, ext_factor 1 and
  // attn_factor = mscale(factor) / (1 + 0.1 ln factor) * rope.scaling.attn_factor; beta_fast / slow its
  // defaults; the ramp spans n_ctx_orig_yarn (rope.scaling.original_context_length) positions.
  float rope_ext_factor = 0.f;
  float rope_attn_factor = 1.f;
  float yarn_beta_fast = 32.f;
  float yarn_beta_slow = 1.f;
  int32_t n_ctx_orig_yarn = 0;
  bool rope_neox = false;           // NeoX pairing (qwen2, qwen3, gemma3) vs normal (llama)
  bool has_rope_freqs = false;      // llama3-style rope_freqs.weight present
  // qwen2vl's M-RoPE: pairs per position stream (time, height, width, unused), rope.dimension_sections;
  // all zero for the other architectures. Text tokens have every stream at their position (plain RoPE).
  int32_t rope_sections[4] = {0, 0, 0, 0};

  // Attention
  float attn_scale = 0.f;           // multiplier of q.k (0 => 1/sqrt(head_dim))
  int32_t sliding_window = 0;       // 0 = none
  int32_t swa_period = 0;           // gemma3: every swa_period-th layer (1-based) is global; 0 = none
  std::vector<uint8_t> swa_layers;  // [n_layer] 1 = sliding-window layer, when the file gives the
                                    // pattern as a per-layer array; empty => swa_period decides
  bool qkv_bias = false;            // qwen2
  bool qk_norm = false;             // qwen3, gemma3
  bool post_norms = false;          // gemma3 post-attention / post-ffn norms
  float embed_scale = 1.f;          // gemma3: sqrt(n_embd)
  bool tied_output = false;         // output.weight absent: head uses token_embd.weight
  bool gelu = false;                // GeGLU (gemma3) instead of SwiGLU
  float final_logit_softcap = 0.f;  // logits = cap * tanh(logits / cap) when > 0 (gemma3 key, rare)
  bool attn_sinks = false;          // gpt-oss: a learned logit per head joins each softmax (attn_sinks)

  // Mixture of experts (0 for dense models): every layer's FFN is n_expert experts of width n_ff_expert,
  // of which a router (softmax over its logits) picks n_expert_used per token.
  int32_t n_expert = 0;
  int32_t n_expert_used = 0;
  int32_t n_ff_expert = 0;
  bool expert_weights_norm = false;  // the picked experts' weights are rescaled to sum 1 (qwen3moe, mixtral)
  // gpt-oss: the router has a bias and its weights are the softmax over the picked experts' logits;
  // each expert's gate / up / down carries a bias; the activation is the clamped SwiGLU (swiglu_oai).
  bool expert_biases = false;
  bool expert_softmax_selected = false;
  bool swiglu_oai = false;

  bool is_swa_layer(int32_t layer) const {
    if (sliding_window <= 0) return false;
    if (!swa_layers.empty()) return layer >= 0 && layer < static_cast<int32_t>(swa_layers.size()) && swa_layers[layer];
    return swa_period > 0 && ((layer + 1) % swa_period) != 0;
  }
  // RoPE base of a layer: sliding-window layers of gemma3 use rope_base_local.
  float layer_rope_base(int32_t layer) const { return is_swa_layer(layer) ? rope_base_local : rope_base; }
  float layer_rope_freq_scale(int32_t layer) const {
    return is_swa_layer(layer) ? rope_freq_scale_local : rope_freq_scale;
  }
  int32_t q_dim() const { return n_head * head_dim; }
  int32_t kv_dim() const { return n_kv_head * head_dim; }
  float kq_scale() const;

  // Reads and validates hyperparameters; unknown architecture => kUnsupported.
  static Expected<ModelSpec> from_gguf(const gguf::ModelFile& file);
};

}  // namespace ferry::model
