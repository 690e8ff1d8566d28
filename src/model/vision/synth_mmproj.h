// ferry synth for vision-language presets: the multimodal projector (mmproj) GGUF that goes with a qwen2vl
// text model, with random weights, in the layout llama.cpp's converter writes for Qwen2.5-VL (general.architecture
// "clip", clip.* keys, v.* / mm.* tensors) so llama.cpp's mtmd loads it as ferry does. Real presets get
// Qwen2.5-VL's vision tower (32 blocks of width 1280, 16 heads, FFN 3420, full attention every 8th block,
// 14-pixel patches); tiny ones a 4-block tower of width 64 with windowed and full blocks. Values as
// synth_write draws them (norms 1 + N(0, 0.1), biases N(0, 0.05), matrices N(0, 1/sqrt(fan_in))).
#pragma once

#include <cstdint>

#include "base/status.h"
#include "model/synth.h"

namespace ferry::model {

struct MmprojShape {
  int32_t n_layer, n_embd, n_head, n_ff, patch_size, n_wa_pattern, image_size;
};
// The tower written for a preset; kInvalidArgument when the preset is not a qwen2vl one.
Expected<MmprojShape> mmproj_shape(const SynthPreset& preset);

// Writes the mmproj of options.preset to `path`: matrices in `type` (rows that are not a multiple of its
// block, like the FFN's 3420-wide down projection, in F16), the patch convolution in F16 (F32 when `type`
// is F32), norms and biases in F32. seed, n_threads and on_progress as in synth_write.
Expected<SynthResult> synth_write_mmproj(const SynthOptions& options, DType type, const std::string& path);

}  // namespace ferry::model
