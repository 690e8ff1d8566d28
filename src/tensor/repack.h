// Split layout (Layout::kSplit): a lossless, device-friendly reordering of a quantized weight row. Each row
// keeps ggml's row size, but holds the fields of its blocks as planes: first the quant bytes of all its
// blocks (block order), then each per-block scale / extra field of all blocks. So a row's quants start at
// the row start and are 16-byte aligned when the row size is a multiple of 16 (the rule enforced by
// split_layout_supported), and row slicing (TensorView::rows) stays valid. Planes, in row order:
//   Q4_0 [qs K/2][d K/32 x f16]                 Q8_0 [qs K][d K/32 x f16]
//   Q6_K [ql K/2][qh K/4][scales K/16 x i8][d K/256 x f16]
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace ferry {

// One field of a ggml block: `bytes` bytes at `offset` in the block. In the split row, plane p holds that
// field of block i at  split_plane_offset(t, K, p) + i * bytes.
struct SplitPlane {
  int32_t offset;
  int32_t bytes;
};
inline constexpr int kMaxSplitPlanes = 4;

// Planes of type t in split-row order; returns their count (0 = no split layout for t).
int split_planes(DType t, SplitPlane* planes);
// Byte offset of plane p in a split row of K elements.
size_t split_plane_offset(DType t, int64_t K, int p);

// True when t has a split layout that the kernels read, K is a positive multiple of the block size and the
// row size row_bytes(t, K) is a multiple of 16 (so every row's quant plane starts 16-byte aligned when the
// tensor starts so): Q4_0 and Q8_0 need K % 256 == 0, Q6_K needs K % 2048 == 0.
bool split_layout_supported(DType t, int64_t K);

// `rows` rows of K elements, contiguous (row stride row_bytes(t, K)), ggml -> split and back.
// Requires split_layout_supported(t, K); src and dst must not overlap.
void repack_to_split(DType t, int64_t K, int64_t rows, const void* ggml_src, void* split_dst);
void repack_from_split(DType t, int64_t K, int64_t rows, const void* split_src, void* ggml_dst);

}  // namespace ferry
