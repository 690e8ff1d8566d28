// The vision tower's forward, written once against Ops like the language model's (model/forward.h):
// patch embedding (both temporal halves of the 3-D convolution applied to the still image, as two
// matmuls over the patch rows), the ViT blocks (RMSNorm, q/k/v with biases, 2-D RoPE, attention within
// windows or over the whole image, output projection, RMSNorm, SwiGLU FFN), the merger's RMSNorm and MLP
// (4 patches -> 4d -> GELU -> the language model's width), then the output tokens put back in raster
// order. The graph and its order of operations are llama.cpp's clip graph for Qwen2.5-VL
// (tools/mtmd/models/qwen2vl.cpp), so the result tracks its embeddings within rounding.
//
// The Ops must compute on host memory (the views are host vectors); the FFN runs over tokens in chunks,
// and attention is Ops::attention_segments, so no buffer grows with the square of the image size.
#pragma once

#include <vector>

#include "base/status.h"
#include "kernels/ops.h"
#include "model/forward.h"
#include "model/vision/vision_input.h"
#include "model/vision/vision_model.h"

namespace ferry::model {

// Embeddings of one image: [proj_dim, grid_w * grid_h] F32, output tokens in raster order. The hook (may
// be null) sees "inp_patch", "layer_out-<il>", "post_ln" and "embeddings" (encoder order) as they are made.
Expected<std::vector<float>> encode_image(kernels::Ops& ops, const VisionSpec& spec, const VisionWeights& w,
                                          const VisionInput& in, const DebugHook* hook = nullptr);

}  // namespace ferry::model
