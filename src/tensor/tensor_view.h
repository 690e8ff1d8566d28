// TensorView: a non-owning view of a tensor (dtype, up to 4 dims, byte strides, data, where it lives).
// Dimension order is ggml's: ne[0] is the innermost (contiguous) dimension. A weight matrix of a linear
// layer y = W x has ne[0] = in_features (K) and ne[1] = out_features (N); activations are
// [ne[0] = features, ne[1] = tokens]. Quantized tensors are contiguous along ne[0] in whole blocks.
// layout: kGgml = ggml's block order; kSplit = the per-row field planes of tensor/repack.h (device weights).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/dtype.h"

namespace ferry {

enum class Where : uint8_t { kHost, kDevice };
// Byte order inside each row of a quantized tensor: ggml's blocks, or split planes (tensor/repack.h; same
// row size, same values). Only weights of split_layout_supported() types/shapes are ever kSplit.
enum class Layout : uint8_t { kGgml, kSplit };

struct TensorView {
  DType dtype = DType::F32;
  int64_t ne[4] = {1, 1, 1, 1};  // elements per dimension, ne[0] innermost
  size_t nb[4] = {0, 0, 0, 0};   // bytes between consecutive indices of each dimension
  void* data = nullptr;
  Where where = Where::kHost;
  Layout layout = Layout::kGgml;

  int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t nrows() const { return ne[1] * ne[2] * ne[3]; }
  size_t row_size() const { return row_bytes(dtype, ne[0]); }
  // Bytes spanned when contiguous.
  size_t nbytes() const { return row_size() * static_cast<size_t>(nrows()); }
  bool is_contiguous() const;

  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }
  // Address of row (i1, i2, i3).
  void* row(int64_t i1, int64_t i2 = 0, int64_t i3 = 0) const {
    return static_cast<char*>(data) + i1 * nb[1] + i2 * nb[2] + i3 * nb[3];
  }

  // A contiguous view with the given shape (unused trailing dims = 1).
  static TensorView make(DType t, void* data, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, int64_t ne3 = 1,
                         Where where = Where::kHost);
  // Rows [r0, r0 + n) along dimension 1 (dims 2, 3 must be 1).
  TensorView rows(int64_t r0, int64_t n) const;
  std::string shape_str() const;  // "[4096, 32, 1, 1] Q4_K"
};

}  // namespace ferry
