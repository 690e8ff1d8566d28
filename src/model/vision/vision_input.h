// An image made ready for the vision tower, as llama.cpp's mtmd prepares it for Qwen2.5-VL: resized to a
// grid of whole output tokens (image::fit_to_grid within the spec's token limits, then bicubic with
// aspect-preserving black padding), each pixel u8 / 255 normalised by the spec's mean and std, and cut
// into patches.
//
// The encoder's token order (what llama.cpp reaches with its inv_window_idx / window_idx permutations):
// the attention windows in raster order, inside a window its merged units (2x2 patches) in raster order,
// inside a unit its four patches in raster order. So a window is a contiguous range of patches (the
// segments of Ops::attention_segments), and four consecutive patches are one output token of the merger.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "image/image.h"
#include "model/vision/vision_model.h"

namespace ferry::model {

struct VisionInput {
  int32_t width = 0, height = 0;    // pixels after resizing (multiples of merge_px)
  int32_t grid_w = 0, grid_h = 0;   // output tokens per row / column
  int64_t n_patches = 0;            // 4 * grid_w * grid_h
  std::vector<float> patches;       // [3 * p * p, n_patches]: element c*p*p + ky*p + kx, encoder order
  std::vector<int32_t> pos;         // [4 * n_patches] RoPE positions, section-major: (row, column, row, column)
  std::vector<int32_t> windows;     // attention windows in patches: bounds, windows.size() - 1 windows
  std::vector<int32_t> token_unit;  // [grid_w * grid_h] output token (raster order) -> its unit in encoder order

  int32_t n_tokens() const { return grid_w * grid_h; }
};

// The resized size an image of w x h gets (no pixels touched): for reporting and token counts.
image::Size vision_input_size(const VisionSpec& spec, int32_t w, int32_t h);

// Resizes, normalises and orders the patches of `img`.
Expected<VisionInput> prepare_vision_input(const VisionSpec& spec, const image::RgbImage& img);

}  // namespace ferry::model
