// Images in a prompt, for vision-language models (Qwen2.5-VL): the vision encoder (an mmproj GGUF, run on
// the CPU through Ops) and prompts that mix text and images the way llama.cpp's mtmd builds them, as
// PromptRows for generate_rows() (engine/generate.h).
//
// Positions, as mtmd's for M-RoPE models: a text token at RoPE position t has every stream at t; an
// image of nx x ny output tokens starting at t0 puts token i at (t0, t0 + i / nx, t0 + i % nx, 0) and
// moves t to t0 + max(nx, ny). The KV cache keeps every row in prompt order (its sequence position is
// its row index), so within an image a token sees the tokens before it in raster order, which is
// llama.cpp's 2-D causal mask.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "image/image.h"
#include "model/vision/vision_model.h"

namespace ferry::kernels {
class Ops;
}

namespace ferry::engine {

// Where an image goes in prompt text (llama.cpp's mtmd_default_marker()).
inline constexpr std::string_view kImageMarker = "<__media__>";

struct EncodedImage {
  int32_t grid_w = 0, grid_h = 0;  // output tokens per row / column
  int32_t width = 0, height = 0;   // pixels the encoder saw, after resizing
  std::vector<float> embd;         // [n_embd of the language model, grid_w * grid_h], raster order
  double encode_ms = 0;            // preprocessing + encoder

  int32_t n_tokens() const { return grid_w * grid_h; }
};

class VisionEncoder {
 public:
  // Opens an mmproj for a language model (kInvalidArgument if they are not a pair). n_threads <= 0: the
  // physical cores.
  static Expected<std::unique_ptr<VisionEncoder>> open(const std::string& mmproj_path, const model::ModelSpec& lm,
                                                       int32_t n_threads);
  ~VisionEncoder();
  const model::VisionSpec& spec() const { return spec_; }
  // The smallest / largest image in output tokens (llama.cpp's --image-min-tokens / --image-max-tokens;
  // 0 keeps the default 8 / 4096).
  Status set_token_limits(int32_t min_tokens, int32_t max_tokens);
  Expected<EncodedImage> encode(const image::RgbImage& img);

 private:
  VisionEncoder() = default;
  std::unique_ptr<gguf::ModelFile> file_;
  model::VisionSpec spec_;
  model::VisionWeights weights_;
  std::unique_ptr<kernels::Ops> ops_;
};

// Prompt rows from text with image markers: each kImageMarker takes the next image, in order (the
// counts must match); text without markers gets one per image in front, as llama-mtmd-cli does. Each
// text piece is tokenized alone with special tokens parsed (mtmd's tokenizer), an image becomes
// <|vision_start|>, its tokens, <|vision_end|>, and BOS / EOS are added as the vocabulary says.
// The images must outlive the rows (spans point at their embeddings).
Expected<PromptRows> multimodal_prompt(const Engine& engine, std::string_view text,
                                       const std::vector<EncodedImage>& images);

}  // namespace ferry::engine
