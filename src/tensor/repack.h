// Split layout (Layout::kSplit): a lossless, device-friendly reordering of a quantized weight row. Each row
// keeps ggml's row size, but holds the fields of its blocks as planes: first the quant bytes of all its
// blocks (block order), then each per-block scale / extra field of all blocks. So a row's quants start at
// the row start and are 16-byte aligned when the row size is a multiple of 16 (the rule enforced by
// split_layout_supported), and row slicing (TensorView::rows) stays valid. Planes, in row order (d, m, dmin
// are f16, one per block):
//   Q4_0 [qs K/2][d]          Q4_1 [qs K/2][d m]          Q8_0 [qs K][d]
//   Q5_0 [qs K/2][qh K/8][d]  Q5_1 [qs K/2][qh K/8][d m]
//   Q2_K [qs K/4][scales K/16][d dmin]      Q3_K [qs K/4][hmask K/8][scales 12 per block][d]
//   Q6_K [ql K/2][qh K/4][scales K/16 x i8][d]
// Q4_K / Q5_K have none: their 144 / 176-byte blocks are 16-byte multiples already.
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
// tensor starts so): Q5_1 needs K % 64 == 0, Q4_1 K % 128, Q4_0 / Q5_0 / Q8_0 K % 256, Q2_K K % 1024,
// Q3_K / Q6_K K % 2048. (Every llama-style width, 2048..16384 in steps of 2048, qualifies for all.)
bool split_layout_supported(DType t, int64_t K);

// `rows` rows of K elements, contiguous (row stride row_bytes(t, K)), ggml -> split and back.
// Requires split_layout_supported(t, K); src and dst must not overlap.
void repack_to_split(DType t, int64_t K, int64_t rows, const void* ggml_src, void* split_dst);
void repack_from_split(DType t, int64_t K, int64_t rows, const void* split_src, void* ggml_dst);

}  // namespace ferry
