// Reference conversions between weight types and float32 (see quant.h): the plain types, the legacy
// 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1) and the dispatch to the k-quants in
// quant_kquants.cc. As there, float expressions keep ggml's evaluation order so that results are
// identical bit for bit (this file must not be built with -ffast-math or FMA contraction).
#include "tensor/quant.h"

#include <cfloat>
#include <cmath>
#include <cstring>

#include "base/status.h"
#include "tensor/quant_blocks.h"

namespace ferry {

// Implemented in quant_kquants.cc (nb = number of 256-element super-blocks).
namespace kquant {
void quantize_q2_k(const float* x, BlockQ2_K* y, int64_t nb);
void quantize_q3_k(const float* x, BlockQ3_K* y, int64_t nb);
void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t nb);
void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t nb);
void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t nb);
void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t nb);
void dequantize_q2_k(const BlockQ2_K* x, float* y, int64_t nb);
void dequantize_q3_k(const BlockQ3_K* x, float* y, int64_t nb);
void dequantize_q4_k(const BlockQ4_K* x, float* y, int64_t nb);
void dequantize_q5_k(const BlockQ5_K* x, float* y, int64_t nb);
void dequantize_q6_k(const BlockQ6_K* x, float* y, int64_t nb);
void dequantize_q8_k(const BlockQ8_K* x, float* y, int64_t nb);
}  // namespace kquant

namespace {

constexpr int kQK = 32;  // elements per legacy block

// Largest |x| of a block and the signed value that has it (the first one on ties), as the symmetric
// legacy quantizers pick their scale from it.
inline void signed_absmax(const float* x, float* amax_out, float* max_out) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  *amax_out = amax;
  *max_out = max;
}

inline void minmax(const float* x, float* min_out, float* max_out) {
  float min = FLT_MAX;
  float max = -FLT_MAX;
  for (int j = 0; j < kQK; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
  *min_out = min;
  *max_out = max;
}

// ggml's MIN(hi, (int8_t)v) for v in [0, 33): truncation toward zero, then a clamp from above.
inline uint8_t trunc_min_u8(int hi, float v) {
  const int q = static_cast<int8_t>(v);
  return static_cast<uint8_t>(q < hi ? q : hi);
}
// ggml's MAX(a, b) macro (not std::max, whose argument order differs for NaN).
inline float max_f(float a, float b) { return a > b ? a : b; }

// ---- quantizers (ggml's quantize_row_*_ref) --------------------------------------------------------

void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax, max;
    signed_absmax(x, &amax, &max);
    const float d = max / -8;
    const float id = d != 0.f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t xi0 = trunc_min_u8(15, x[j] * id + 8.5f);
      const uint8_t xi1 = trunc_min_u8(15, x[kQK / 2 + j] * id + 8.5f);
      y[i].qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
    }
  }
}

void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float min, max;
    minmax(x, &min, &max);
    const float d = (max - min) / 15;
    const float id = d != 0.f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(min);
    for (int j = 0; j < kQK / 2; ++j) {
      const uint8_t xi0 = trunc_min_u8(15, (x[j] - min) * id + 0.5f);
      const uint8_t xi1 = trunc_min_u8(15, (x[kQK / 2 + j] - min) * id + 0.5f);
      y[i].qs[j] = static_cast<uint8_t>(xi0 | (xi1 << 4));
    }
  }
}

// Low nibbles to qs (element j low, j+16 high), 5th bits to a little-endian 32-bit qh.
inline void pack_q5(const uint8_t* q, uint8_t* qs, uint8_t* qh_out) {
  uint32_t qh = 0;
  for (int j = 0; j < kQK / 2; ++j) {
    const uint8_t a = q[j], b = q[j + kQK / 2];
    qs[j] = static_cast<uint8_t>((a & 0x0F) | ((b & 0x0F) << 4));
    qh |= ((a & 0x10u) >> 4) << (j + 0);
    qh |= ((b & 0x10u) >> 4) << (j + kQK / 2);
  }
  memcpy(qh_out, &qh, sizeof(qh));
}

void quantize_q5_0(const float* x, BlockQ5_0* y, int64_t nb) {
  uint8_t q[kQK];
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax, max;
    signed_absmax(x, &amax, &max);
    const float d = max / -16;
    const float id = d != 0.f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) q[j] = trunc_min_u8(31, x[j] * id + 16.5f);
    pack_q5(q, y[i].qs, y[i].qh);
  }
}

void quantize_q5_1(const float* x, BlockQ5_1* y, int64_t nb) {
  uint8_t q[kQK];
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float min, max;
    minmax(x, &min, &max);
    const float d = (max - min) / 31;
    const float id = d != 0.f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(min);
    // No clamp here in ggml either: (x - min) * id + 0.5 stays below 32.
    for (int j = 0; j < kQK; ++j) q[j] = static_cast<uint8_t>((x[j] - min) * id + 0.5f);
    pack_q5(q, y[i].qs, y[i].qh);
  }
}

// Q8_0 / Q8_1 round half away from zero (roundf), unlike the k-quants' nearest_int (half to even).
void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = max_f(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

void quantize_q8_1(const float* x, BlockQ8_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = max_f(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
      sum += y[i].qs[j];
    }
    y[i].s = fp32_to_fp16(static_cast<float>(sum) * d);
  }
}

// MXFP4 (ggml's quantize_row_mxfp4_ref): the shared exponent e = floor(log2(amax)) - 2 + 127 puts amax
// in [4, 8) times the half scale 2^(e - 128), so the largest E2M1 value 6 (12 doubled) covers it up to
// rounding; each element takes the table entry nearest x / scale (the first one on ties, so +0 over -0).
// amax below 2^-125 would make e negative, which ggml converts float -> uint8 through an int on x86;
// the same wrap here keeps such blocks byte-identical (they dequantize to zeros either way).
int mxfp4_best_index(float x, float d) {
  int best = 0;
  float best_err = std::fabs(static_cast<float>(kMxfp4Values[0]) * d - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(static_cast<float>(kMxfp4Values[i]) * d - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return best;
}

void quantize_mxfp4(const float* x, BlockMXFP4* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j)
      if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
    const uint8_t e =
        amax > 0.0f ? static_cast<uint8_t>(static_cast<int>(std::floor(std::log2(amax)) - 2 + 127)) : 0;
    const float d = e8m0_to_fp32_half(e);
    y[i].e = e;
    for (int j = 0; j < kQK / 2; ++j) {
      const int x0 = mxfp4_best_index(x[j], d);
      const int x1 = mxfp4_best_index(x[kQK / 2 + j], d);
      y[i].qs[j] = static_cast<uint8_t>(x0 | (x1 << 4));
    }
  }
}

// ---- dequantizers (ggml's dequantize_row_*) ---------------------------------------------------------

void dequantize_q4_0(const BlockQ4_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>((x[i].qs[j] & 0x0F) - 8) * d;
      y[j + kQK / 2] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_mxfp4(const BlockMXFP4* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = e8m0_to_fp32_half(x[i].e);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>(kMxfp4Values[x[i].qs[j] & 0x0F]) * d;
      y[j + kQK / 2] = static_cast<float>(kMxfp4Values[x[i].qs[j] >> 4]) * d;
    }
  }
}

void dequantize_q4_1(const BlockQ4_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_fp32(x[i].d);
    const float m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>(x[i].qs[j] & 0x0F) * d + m;
      y[j + kQK / 2] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

// The 5-bit level of element j (0..31) of a Q5 block.
inline int q5_level(const uint8_t* qs, uint32_t qh, int j) {
  const int lo = j < kQK / 2 ? (qs[j] & 0x0F) : (qs[j - kQK / 2] >> 4);
  return lo | static_cast<int>(((qh >> j) & 1u) << 4);
}

void dequantize_q5_0(const BlockQ5_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_fp32(x[i].d);
    uint32_t qh;
    memcpy(&qh, x[i].qh, sizeof(qh));
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(q5_level(x[i].qs, qh, j) - 16) * d;
  }
}

void dequantize_q5_1(const BlockQ5_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_fp32(x[i].d);
    const float m = fp16_to_fp32(x[i].m);
    uint32_t qh;
    memcpy(&qh, x[i].qh, sizeof(qh));
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(q5_level(x[i].qs, qh, j)) * d + m;
  }
}

void dequantize_q8_0(const BlockQ8_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void dequantize_q8_1(const BlockQ8_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

// Number of blocks in n elements of type t, asserting that n is a whole number of blocks.
int64_t block_count(DType t, int64_t n) {
  const DTypeTraits& tr = traits(t);
  FERRY_ASSERT_MSG(n >= 0 && n % tr.block_elems == 0, "row length not a multiple of the block size");
  return n / tr.block_elems;
}

template <typename Block>
const Block* as_blocks(const void* p) {
  return static_cast<const Block*>(p);
}
template <typename Block>
Block* as_blocks(void* p) {
  return static_cast<Block*>(p);
}

}  // namespace

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  const int64_t nb = block_count(t, n);
  switch (t) {
    case DType::F32:
      memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::F16: {
      const uint16_t* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
      return;
    }
    case DType::BF16: {
      const uint16_t* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
      return;
    }
    case DType::Q4_0: return dequantize_q4_0(as_blocks<BlockQ4_0>(src), dst, nb);
    case DType::Q4_1: return dequantize_q4_1(as_blocks<BlockQ4_1>(src), dst, nb);
    case DType::Q5_0: return dequantize_q5_0(as_blocks<BlockQ5_0>(src), dst, nb);
    case DType::Q5_1: return dequantize_q5_1(as_blocks<BlockQ5_1>(src), dst, nb);
    case DType::Q8_0: return dequantize_q8_0(as_blocks<BlockQ8_0>(src), dst, nb);
    case DType::Q8_1: return dequantize_q8_1(as_blocks<BlockQ8_1>(src), dst, nb);
    case DType::Q2_K: return kquant::dequantize_q2_k(as_blocks<BlockQ2_K>(src), dst, nb);
    case DType::Q3_K: return kquant::dequantize_q3_k(as_blocks<BlockQ3_K>(src), dst, nb);
    case DType::Q4_K: return kquant::dequantize_q4_k(as_blocks<BlockQ4_K>(src), dst, nb);
    case DType::Q5_K: return kquant::dequantize_q5_k(as_blocks<BlockQ5_K>(src), dst, nb);
    case DType::Q6_K: return kquant::dequantize_q6_k(as_blocks<BlockQ6_K>(src), dst, nb);
    case DType::Q8_K: return kquant::dequantize_q8_k(as_blocks<BlockQ8_K>(src), dst, nb);
    case DType::MXFP4: return dequantize_mxfp4(as_blocks<BlockMXFP4>(src), dst, nb);
    default: break;
  }
  FERRY_ASSERT_MSG(false, "dequantize_row: unsupported type");
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  const int64_t nb = block_count(t, n);
  switch (t) {
    case DType::F32:
      memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::F16: {
      uint16_t* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
      return;
    }
    case DType::BF16: {
      uint16_t* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(src[i]);
      return;
    }
    case DType::Q4_0: return quantize_q4_0(src, as_blocks<BlockQ4_0>(dst), nb);
    case DType::Q4_1: return quantize_q4_1(src, as_blocks<BlockQ4_1>(dst), nb);
    case DType::Q5_0: return quantize_q5_0(src, as_blocks<BlockQ5_0>(dst), nb);
    case DType::Q5_1: return quantize_q5_1(src, as_blocks<BlockQ5_1>(dst), nb);
    case DType::Q8_0: return quantize_q8_0(src, as_blocks<BlockQ8_0>(dst), nb);
    case DType::Q8_1: return quantize_q8_1(src, as_blocks<BlockQ8_1>(dst), nb);
    case DType::Q2_K: return kquant::quantize_q2_k(src, as_blocks<BlockQ2_K>(dst), nb);
    case DType::Q3_K: return kquant::quantize_q3_k(src, as_blocks<BlockQ3_K>(dst), nb);
    case DType::Q4_K: return kquant::quantize_q4_k(src, as_blocks<BlockQ4_K>(dst), nb);
    case DType::Q5_K: return kquant::quantize_q5_k(src, as_blocks<BlockQ5_K>(dst), nb);
    case DType::Q6_K: return kquant::quantize_q6_k(src, as_blocks<BlockQ6_K>(dst), nb);
    case DType::Q8_K: return kquant::quantize_q8_k(src, as_blocks<BlockQ8_K>(dst), nb);
    case DType::MXFP4: return quantize_mxfp4(src, as_blocks<BlockMXFP4>(dst), nb);
    default: break;
  }
  FERRY_ASSERT_MSG(false, "quantize_row: unsupported type");
}

double dot_row_ref(DType t, const void* row, const float* x, int64_t n) {
  block_count(t, n);  // asserts whole blocks
  // Dequantize a chunk of whole blocks at a time into a stack buffer, then accumulate in double.
  constexpr int64_t kChunk = 1024;  // a multiple of every block size (1, 32, 256)
  float buf[kChunk];
  const char* src = static_cast<const char*>(row);
  double sum = 0.0;
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t m = n - i0 < kChunk ? n - i0 : kChunk;
    dequantize_row(t, src + row_bytes(t, i0), buf, m);
    for (int64_t i = 0; i < m; ++i) sum += static_cast<double>(buf[i]) * static_cast<double>(x[i0 + i]);
  }
  return sum;
}

}  // namespace ferry
