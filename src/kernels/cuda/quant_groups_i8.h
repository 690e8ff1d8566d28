// A weight row's group of 32 elements as 32 int8 values with one scale and one min coefficient, for the
// int8 tensor-core kernels (moe_mma.cu), written once for host and device (FERRY_HD) so the host tests
// check it against dot_slice (tests/kernels/cuda/quant_units_test.cc):
//   decode_group_i8<T>(row, g, q, &scale, &min_coef)
//     q[w] holds elements 32g + 4w .. 32g + 4w + 3 as bytes (little-endian), and for Q8 activations of the
//     group {xq, (dx, dx * sum(xq))}: dot(row group, x) = scale * dx * sum(q * xq) + min_coef * dx * sum(xq).
// The types whose scales are per 32 elements or coarser: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, MXFP4.
// Unsigned values stay unsigned (0..15, 0..31): their offset (-8 of Q4_0, -16 of Q5_0, a block's min) is
// the min term. Q6_K scales every 16 elements and has no min: group_i8_halves, and decode_group_i8 gives
// the first half's scale in *scale and the second half's in *min_coef:
//     dot = scale * dx * sum(q * xq over elements 0..15) + min_coef * dx * sum(q * xq over 16..31).
// (Q2_K's per-16 mins would need per-16 activation sums, Q3_K's packing is not done: neither is supported.)
#pragma once

#include <cstdint>

#include "kernels/cuda/quant_units.h"

namespace ferry::kernels::cuda {

constexpr bool group_i8_halves(DType t) { return t == DType::Q6_K; }
constexpr bool group_i8_supported(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1 || t == DType::Q8_0 ||
         t == DType::Q4_K || t == DType::Q5_K || t == DType::MXFP4 || group_i8_halves(t);
}

template <DType T>
FERRY_HD void decode_group_i8(const uint8_t* row, int g, uint32_t* q, float* scale, float* min_coef);

// Legacy 4-bit blocks: qs word w holds elements 4w.. (low nibbles) and 16 + 4w.. (high nibbles).
FERRY_HD void nibble_words(uint32_t v, int w, uint32_t* q) {
  q[w] = v & 0x0F0F0F0Fu;
  q[w + 4] = (v >> 4) & 0x0F0F0F0Fu;
}

template <>
FERRY_HD void decode_group_i8<DType::Q4_0>(const uint8_t* row, int g, uint32_t* q, float* scale, float* min_coef) {
  const uint8_t* b = block_ptr<DType::Q4_0>(row, g);
  FERRY_UNROLL
  for (int w = 0; w < 4; ++w) nibble_words(static_cast<uint32_t>(ld_a2(b + 2 + 4 * w)), w, q);
  const float d = half_to_float(ld_u16(b));
  *scale = d;
  *min_coef = -8.f * d;
}

template <>
FERRY_HD void decode_group_i8<DType::Q4_1>(const uint8_t* row, int g, uint32_t* q, float* scale, float* min_coef) {
  const uint8_t* b = block_ptr<DType::Q4_1>(row, g);
  FERRY_UNROLL
  for (int w = 0; w < 4; ++w) nibble_words(static_cast<uint32_t>(ld_a4(b + 4 + 4 * w)), w, q);
  *scale = half_to_float(ld_u16(b));
  *min_coef = half_to_float(ld_u16(b + 2));
}

template <>
FERRY_HD void decode_group_i8<DType::Q5_0>(const uint8_t* row, int g, uint32_t* q, float* scale, float* min_coef) {
  const uint8_t* b = block_ptr<DType::Q5_0>(row, g);
  const uint32_t qh = static_cast<uint32_t>(ld_a2(b + 2));
  FERRY_UNROLL
  for (int w = 0; w < 4; ++w) {
    nibble_words(static_cast<uint32_t>(ld_a2(b + 6 + 4 * w)), w, q);
    q[w] |= static_cast<uint32_t>(spread_bit4(qh >> (4 * w)));
    q[w + 4] |= static_cast<uint32_t>(spread_bit4(qh >> (4 * w + 16)));
  }
  const float d = half_to_float(ld_u16(b));
  *scale = d;
  *min_coef = -16.f * d;
}

template <>
FERRY_HD void decode_group_i8<DType::Q5_1>(const uint8_t* row, int g, uint32_t* q, float* scale, float* min_coef) {
  const uint8_t* b = block_ptr<DType::Q5_1>(row, g);
  const uint32_t qh = static_cast<uint32_t>(ld_a4(b + 4));
  FERRY_UNROLL
  for (int w = 0; w < 4; ++w) {
    nibble_words(static_cast<uint32_t>(ld_a4(b + 8 + 4 * w)), w, q);
    q[w] |= static_cast<uint32_t>(spread_bit4(qh >> (4 * w)));
    q[w + 4] |= static_cast<uint32_t>(spread_bit4(qh >> (4 * w + 16)));
  }
  *scale = half_to_float(ld_u16(b));
  *min_coef = half_to_float(ld_u16(b + 2));
}

template <>
FERRY_HD void decode_group_i8<DType::Q8_0>(const uint8_t* row, int g, uint32_t* q, float* scale, float* min_coef) {
  const uint8_t* b = block_ptr<DType::Q8_0>(row, g);
  FERRY_UNROLL
  for (int w = 0; w < 8; ++w) q[w] = static_cast<uint32_t>(ld_a2(b + 2 + 4 * w));
  *scale = half_to_float(ld_u16(b));
  *min_coef = 0.f;
}

// MXFP4: the doubled E2M1 values (mxfp4_bytes) times half the block's scale, as dot_slice.
template <>
FERRY_HD void decode_group_i8<DType::MXFP4>(const uint8_t* row, int g, uint32_t* q, float* scale, float* min_coef) {
  const uint8_t* b = block_ptr<DType::MXFP4>(row, g);
  FERRY_UNROLL
  for (int w = 0; w < 4; ++w) {
    const uint32_t v = ld_a1(b + 1 + 4 * w);
    q[w] = static_cast<uint32_t>(mxfp4_bytes(v & 0x0F0F0F0Fu));
    q[w + 4] = static_cast<uint32_t>(mxfp4_bytes((v >> 4) & 0x0F0F0F0Fu));
  }
  *scale = e8m0_to_fp32_half(b[0]);
  *min_coef = 0.f;
}

// Q4_K / Q5_K: group g is sub-block j = g % 8 of super-block g / 8; its values are the low (j even) or high
// (j odd) nibbles of qs[32 (j / 2) ..] (Q5_K: plus bit j of qh[0..32) as bit 4), scale d * sc_j, min
// coefficient -dmin * m_j.
template <>
FERRY_HD void decode_group_i8<DType::Q4_K>(const uint8_t* row, int g, uint32_t* q, float* scale, float* min_coef) {
  const uint8_t* b = block_ptr<DType::Q4_K>(row, g >> 3);
  const int j = g & 7, shift = 4 * (j & 1);
  const uint8_t* qs = b + 16 + 32 * (j >> 1);
  FERRY_UNROLL
  for (int w = 0; w < 8; ++w) q[w] = (static_cast<uint32_t>(ld_a4(qs + 4 * w)) >> shift) & 0x0F0F0F0Fu;
  uint8_t sc, m;
  get_scale_min_k4(j, b + 4, &sc, &m);
  *scale = half_to_float(ld_u16(b)) * static_cast<float>(sc);
  *min_coef = -half_to_float(ld_u16(b + 2)) * static_cast<float>(m);
}

template <>
FERRY_HD void decode_group_i8<DType::Q5_K>(const uint8_t* row, int g, uint32_t* q, float* scale, float* min_coef) {
  const uint8_t* b = block_ptr<DType::Q5_K>(row, g >> 3);
  const int j = g & 7, shift = 4 * (j & 1);
  const uint8_t* qs = b + 48 + 32 * (j >> 1);
  const uint8_t* qh = b + 16;
  FERRY_UNROLL
  for (int w = 0; w < 8; ++w) {
    const uint32_t lo = (static_cast<uint32_t>(ld_a4(qs + 4 * w)) >> shift) & 0x0F0F0F0Fu;
    const uint32_t hi = ((static_cast<uint32_t>(ld_a4(qh + 4 * w)) >> j) & 0x01010101u) << 4;
    q[w] = lo | hi;
  }
  uint8_t sc, m;
  get_scale_min_k4(j, b + 4, &sc, &m);
  *scale = half_to_float(ld_u16(b)) * static_cast<float>(sc);
  *min_coef = -half_to_float(ld_u16(b + 2)) * static_cast<float>(m);
}

// Q6_K: group r = g % 8 of super-block g / 8 is half h = r / 4, quarter k = r % 4 (ggml's q1..q4): element
// l's low 4 bits are ql[64h + 32 (k % 2) + l] (low nibble for k < 2, high for k >= 2), its top 2 bits are
// qh[32h + l] >> 2k; value minus 32, signed. Scales sc[8h + 2k] (elements 0..15) and sc[8h + 2k + 1] (16..31).
template <>
FERRY_HD void decode_group_i8<DType::Q6_K>(const uint8_t* row, int g, uint32_t* q, float* scale, float* min_coef) {
  const int r = g & 7, h = r >> 2, k = r & 3;
  const uint8_t* b = block_ptr<DType::Q6_K>(row, g >> 3);
  const uint8_t* ql = b + 64 * h + 32 * (k & 1);
  const uint8_t* qh = b + 128 + 32 * h;
  const int shift = 4 * (k >> 1);
  FERRY_UNROLL
  for (int w = 0; w < 8; ++w) {
    const uint32_t lo = (static_cast<uint32_t>(ld_a2(ql + 4 * w)) >> shift) & 0x0F0F0F0Fu;
    const uint32_t hi = ((static_cast<uint32_t>(ld_a2(qh + 4 * w)) >> (2 * k)) & 0x03030303u) << 4;
    q[w] = static_cast<uint32_t>(sub32_bytes(static_cast<int>(lo | hi)));
  }
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * h + 2 * k);
  const float d = half_to_float(ld_u16(b + 208));
  *scale = d * static_cast<float>(sc[0]);
  *min_coef = d * static_cast<float>(sc[1]);
}

}  // namespace ferry::kernels::cuda
