// The vision tower of a vision-language model, from a multimodal projector GGUF ("mmproj") as llama.cpp's
// converter writes it (clip.* metadata, v.* and mm.* tensors): VisionSpec (hyperparameters and the
// preprocessing constants) and VisionWeights (every tensor bound and shape-checked once). Supported:
// Qwen2.5-VL's projector (clip.projector_type "qwen2.5vl_merger"): a ViT of RMSNorm blocks with SwiGLU
// FFNs and 2-D RoPE, window attention with a full-attention block every n_wa_pattern blocks, and the
// 2x2 patch merger (RMSNorm, then an MLP with GELU) into the language model's embedding width.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/model_spec.h"
#include "tensor/tensor_view.h"

namespace ferry::gguf {
class ModelFile;
}

namespace ferry::model {

struct VisionSpec {
  std::string projector;       // clip.projector_type
  int32_t n_layer = 0;         // clip.vision.block_count
  int32_t n_embd = 0;          // d (clip.vision.embedding_length)
  int32_t n_head = 0;
  int32_t head_dim = 0;        // d / n_head
  int32_t n_ff = 0;            // clip.vision.feed_forward_length
  int32_t proj_dim = 0;        // output width = the language model's n_embd (clip.vision.projection_dim)
  int32_t patch_size = 0;      // pixels per patch side (14)
  int32_t n_merge = 2;         // patches merged per side into one output token
  int32_t n_wa_pattern = 0;    // block il attends fully when (il + 1) % n_wa_pattern == 0; 0: every block
  int32_t window_px = 112;     // attention windows of window_px / patch_size / n_merge merged tokens a side
  float eps = 1e-6f;           // RMSNorm epsilon
  float rope_base = 10000.f;   // 2-D RoPE (llama.cpp's constant for this projector)
  float image_mean[3] = {0, 0, 0};
  float image_std[3] = {1, 1, 1};
  // Image size limits in output tokens (llama.cpp's defaults for Qwen2-VL, --image-min/max-tokens).
  int32_t min_tokens = 8;
  int32_t max_tokens = 4096;

  bool full_attention(int32_t layer) const { return n_wa_pattern <= 0 || (layer + 1) % n_wa_pattern == 0; }
  int32_t merge_px() const { return patch_size * n_merge; }  // pixels per output token side
  int64_t patch_elems() const { return 3 * int64_t{patch_size} * patch_size; }
  // Windows per side, in merged tokens.
  int32_t window_tokens() const { return window_px / patch_size / n_merge; }

  // Reads and validates the clip.* keys; an unsupported projector is kUnsupported.
  static Expected<VisionSpec> from_gguf(const gguf::ModelFile& file);
};

// The language model this projector feeds must be qwen2vl with n_embd == proj_dim.
Status check_vision_pairing(const VisionSpec& vision, const ModelSpec& lm);

struct VisionLayerWeights {
  TensorView ln1, ln1_b;       // [d] F32 (bias optional)
  TensorView q, k, v, out;     // [d, d] weight type
  TensorView q_b, k_b, v_b, out_b;  // [d] F32
  TensorView ln2, ln2_b;       // [d] F32 (bias optional)
  TensorView gate, up;         // [d, ff]
  TensorView down;             // [ff, d]
  TensorView gate_b, up_b;     // [ff] F32
  TensorView down_b;           // [d] F32
};

struct VisionWeights {
  // The two temporal halves of Qwen2-VL's 3-D patch convolution, each viewed as a matmul weight
  // [3 * p * p, d] (F16 or F32; file shape [p, p, 3, d]); a still image goes through both.
  TensorView patch0, patch1;
  TensorView post_ln, post_ln_b;  // [d] F32: the merger's RMSNorm (bias optional)
  TensorView mm0, mm0_b;          // [4d, 4d], [4d]
  TensorView mm2, mm2_b;          // [4d, proj_dim], [proj_dim]
  std::vector<VisionLayerWeights> layers;
};

Expected<VisionWeights> bind_vision_weights(const VisionSpec& spec, const gguf::ModelFile& file);

}  // namespace ferry::model
