// The vision tower's forward, written once against Ops like the language model's (model/forward.h):
// patch embedding (both temporal halves of the 3-D convolution applied to the still image, as two
// matmuls over the patch rows), the ViT blocks (RMSNorm, q/k/v with biases, 2-D RoPE, attention within
// windows or over the whole image, output projection, RMSNorm, SwiGLU FFN), the merger's RMSNorm and MLP
// (4 patches -> 4d -> GELU -> the language model's width), then the output tokens put back in raster
// order. The graph and its order of operations are llama.cpp's clip graph for Qwen2.5-VL
// (tools/mtmd/models/qwen2vl.cpp), so the result tracks its embeddings within rounding.
//
// It comes in steps (patch embedding, one block, the merger) over VisionBuffers, so an executor can put
// each step's weights where the Ops computes just before it runs (the hybrid executor streams them through
// a ring, exec/hybrid_vision.cc); encode_image runs every step on host memory. Attention is
// Ops::attention_segments and the FFN runs over tokens in chunks, so no buffer grows with the square of
// the image size.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "kernels/ops.h"
#include "model/forward.h"
#include "model/vision/vision_input.h"
#include "model/vision/vision_model.h"

namespace ferry::model {

// The encoder's working memory for one image, as views into one block where the Ops computes (F32
// [features, tokens] unless said otherwise). Buffers are reused across a block: attention writes into
// xn, the output projection and the FFN's down projection into q; the merger's hidden layer goes into k
// and the embeddings into v.
struct VisionBuffers {
  int64_t n = 0;        // patches
  int64_t chunk = 0;    // FFN tokens per chunk
  TensorView x, xn, q, v;  // [d, n]
  TensorView k;         // [d, n]; its memory holds max(d, 3 p p) x n floats: the patches come in there
  TensorView gate, up;  // [ff, chunk]
  TensorView ones;      // [4d, ones_cols] 1.0 (the merger's GELU is glu(h, ones))
  // Inputs the caller writes before the first step (vision_input_host_arrays has the host values):
  TensorView patches;   // [3 p p, n] in k's memory
  TensorView pos;       // [4 n] I32
  TensorView windows;   // [n_windows + 1] I32
  TensorView whole;     // [2] I32 {0, n}
};

// Bytes of the block vision_buffers carves for an image of n patches in n_windows windows.
uint64_t vision_buffer_bytes(const VisionSpec& spec, int64_t n, int64_t n_windows);
// The views into `base` (vision_buffer_bytes long, 256-aligned), living at `where`.
VisionBuffers vision_buffers(const VisionSpec& spec, int64_t n, int64_t n_windows, void* base,
                             Where where = Where::kHost);
// The constant inputs besides the image's own arrays (patches, pos, windows): `whole` and `ones`.
struct VisionConstants {
  std::vector<int32_t> whole;  // {0, n}
  std::vector<float> ones;     // [4d * ones_cols] 1.0
};
VisionConstants vision_constants(const VisionSpec& spec, const VisionBuffers& b);

// The steps, in order: patch embedding (patches -> x), blocks 0 .. n_layer - 1, the merger. The hook (may
// be null) sees "inp_patch", "layer_out-<il>", "post_ln" and "embeddings" (encoder order) as they are
// made; it needs host memory.
void vision_patch_embed(kernels::Ops& ops, const VisionSpec& spec, const VisionWeights& w, const VisionBuffers& b,
                        const DebugHook* hook = nullptr);
void vision_block(kernels::Ops& ops, const VisionSpec& spec, const VisionLayerWeights& L, int32_t il,
                  const VisionBuffers& b, const DebugHook* hook = nullptr);
// Returns the embeddings, [proj_dim, n / 4] in encoder order (a view of b.v's memory).
TensorView vision_merger(kernels::Ops& ops, const VisionSpec& spec, const VisionWeights& w, const VisionBuffers& b,
                         const DebugHook* hook = nullptr);
// Encoder order -> raster order: [proj_dim, grid_w * grid_h] F32.
std::vector<float> vision_raster(const VisionSpec& spec, const VisionInput& in, const float* encoder_order);

// Embeddings of one image on host memory: [proj_dim, grid_w * grid_h] F32, output tokens in raster order.
Expected<std::vector<float>> encode_image(kernels::Ops& ops, const VisionSpec& spec, const VisionWeights& w,
                                          const VisionInput& in, const DebugHook* hook = nullptr);

}  // namespace ferry::model
