// Reference (scalar, portable) conversion between weight types and float32. These are the golden
// versions every optimized CPU/GPU kernel is tested against; they reproduce ggml's reference
// dequantization bit for bit and its reference quantizers (quantize_row_*_ref) value for value.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace ferry {

// Dequantize n elements (n a multiple of the type's block size) of type t from src into dst.
// Supports every weight type (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, MXFP4) and Q8_K.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

// Quantize n elements (multiple of the block size) of float32 into type t (all weight types, plus
// Q8_0 / Q8_1 / Q8_K activation types), with ggml's reference rounding.
void quantize_row(DType t, const float* src, void* dst, int64_t n);

// Dot product of a row of type t with a float32 vector, accumulated in double: the reference matmul.
double dot_row_ref(DType t, const void* row, const float* x, int64_t n);

}  // namespace ferry
