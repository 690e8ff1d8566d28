// Per-type decoding of quantized weight rows for the CUDA kernels, written once for host and device
// (FERRY_HD) so the exact code the GPU runs is unit-tested on the host in CI (tests/kernels/cuda).
//   dequant32<T>(row, g, out)      elements [32g, 32g + 32) of a row -> float
//   dot_unit<T>(row, u, xq, xds)   dot of "unit" u of a row (kUnit elements, see UnitTraits) with the
//                                  row's activations quantized to int8 blocks of 32 (Q8 format below)
// Q8 activations (one token): xq int8 [K] (element k at xq[k]), xds float2 [K/32]: {d, d * sum(q)} per
// block of 32, so that x[k] ~= d * xq[k]. Integer dot products use dp4a (4 int8 products per
// instruction): no int->float conversion per weight, which is what keeps decode memory-bound.
// Alignment: 4-byte loads of block fields at 2-byte aligned offsets are done as two 16-bit loads.
#pragma once

#include <cstdint>
#include <cstring>

#include "tensor/dtype.h"
#include "tensor/quant_blocks.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define FERRY_UNROLL _Pragma("unroll")
#else
#define FERRY_UNROLL
#endif

namespace ferry::kernels::cuda {

struct Float2 {
  float x, y;
};
#if defined(__CUDACC__)
using XDs = float2;
#else
using XDs = Float2;
#endif

// ---- primitives ------------------------------------------------------------------------------------

FERRY_HD float half_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  return fp16_to_fp32(h);
#endif
}

// Sum of the four int8 products of a and b, plus c.
FERRY_HD int dp4a(int a, int b, int c) {
#if defined(__CUDA_ARCH__)
  return __dp4a(a, b, c);
#else
  for (int i = 0; i < 4; ++i) {
    c += static_cast<int>(static_cast<int8_t>(static_cast<uint32_t>(a) >> (8 * i))) *
         static_cast<int>(static_cast<int8_t>(static_cast<uint32_t>(b) >> (8 * i)));
  }
  return c;
#endif
}

// 32-bit little-endian load at an address aligned to 2 (two 16-bit loads) or 4 bytes.
FERRY_HD int ld_a2(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  const uint16_t* q = reinterpret_cast<const uint16_t*>(p);
  return static_cast<int>(static_cast<uint32_t>(q[0]) | (static_cast<uint32_t>(q[1]) << 16));
#else
  int v;
  memcpy(&v, p, 4);
  return v;
#endif
}
FERRY_HD int ld_a4(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const int*>(p);
#else
  int v;
  memcpy(&v, p, 4);
  return v;
#endif
}
FERRY_HD uint16_t ld_u16(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint16_t*>(p);
#else
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
#endif
}

// The 8 words (32 int8 activations) at p, 16-byte aligned on the device (two 16-byte loads).
FERRY_HD void load_x8(const int* p, int* v) {
#if defined(__CUDA_ARCH__)
  const int4 a = reinterpret_cast<const int4*>(p)[0];
  const int4 b = reinterpret_cast<const int4*>(p)[1];
  v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
  v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
#else
  memcpy(v, p, 32);
#endif
}

// 8 weight words at a 4-byte aligned p: two 16-byte loads when p happens to be 16-byte aligned (Q4_K and
// Q5_K quants are, in rows that start 16-byte aligned), else eight 4-byte loads.
FERRY_HD void load_w8(const uint8_t* p, int* v) {
#if defined(__CUDA_ARCH__)
  if ((reinterpret_cast<uintptr_t>(p) & 15u) == 0) {
    const int4 a = reinterpret_cast<const int4*>(p)[0];
    const int4 b = reinterpret_cast<const int4*>(p)[1];
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  } else {
    for (int i = 0; i < 8; ++i) v[i] = reinterpret_cast<const int*>(p)[i];
  }
#else
  memcpy(v, p, 32);
#endif
}

// Low 4 bits of b spread to bit 4 of each byte (the 5th bit of Q5 quants).
FERRY_HD int spread_bit4(uint32_t b) {
  return static_cast<int>(((b & 1u) << 4) | ((b & 2u) << 11) | ((b & 4u) << 18) | ((b & 8u) << 25));
}
// Bytes holding 6-bit values q in [0, 64) -> signed bytes q - 32.
FERRY_HD int sub32_bytes(int q) {
  const uint32_t x = static_cast<uint32_t>(q) ^ 0x20202020u;
  const uint32_t s = x & 0x20202020u;
  return static_cast<int>(x | (s << 1) | (s << 2));
}
// Bytes holding 3-bit values v in [0, 8) -> signed bytes v - 4.
FERRY_HD int sub4_bytes(int v) {
  const uint32_t x = static_cast<uint32_t>(v) ^ 0x04040404u;
  return static_cast<int>(x | ((x & 0x04040404u) * 0x3Eu));
}
// 6-bit scale j (0..15) of a Q3_K block, before the -32 offset (ggml's packing).
FERRY_HD int q3k_scale6(const uint8_t* s, int j) {
  const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
  const int hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
  return lo | (hi << 4);
}

// ---- unit traits -----------------------------------------------------------------------------------
// kUnit: elements a thread handles per dot_unit call (chosen so the unit reads whole 32-bit words of
// quants exactly once: 32 for the legacy types, 64 for Q4_K/Q5_K/Q6_K, 128 for Q2_K/Q3_K).

template <DType T>
struct UnitTraits;
template <> struct UnitTraits<DType::Q4_0> { static constexpr int kUnit = 32; using Block = BlockQ4_0; };
template <> struct UnitTraits<DType::Q4_1> { static constexpr int kUnit = 32; using Block = BlockQ4_1; };
template <> struct UnitTraits<DType::Q5_0> { static constexpr int kUnit = 32; using Block = BlockQ5_0; };
template <> struct UnitTraits<DType::Q5_1> { static constexpr int kUnit = 32; using Block = BlockQ5_1; };
template <> struct UnitTraits<DType::Q8_0> { static constexpr int kUnit = 32; using Block = BlockQ8_0; };
template <> struct UnitTraits<DType::Q2_K> { static constexpr int kUnit = 128; using Block = BlockQ2_K; };
template <> struct UnitTraits<DType::Q3_K> { static constexpr int kUnit = 128; using Block = BlockQ3_K; };
template <> struct UnitTraits<DType::Q4_K> { static constexpr int kUnit = 64; using Block = BlockQ4_K; };
template <> struct UnitTraits<DType::Q5_K> { static constexpr int kUnit = 64; using Block = BlockQ5_K; };
template <> struct UnitTraits<DType::Q6_K> { static constexpr int kUnit = 64; using Block = BlockQ6_K; };

template <DType T>
FERRY_HD const uint8_t* block_ptr(const uint8_t* row, int i) {
  return row + static_cast<int64_t>(i) * static_cast<int64_t>(sizeof(typename UnitTraits<T>::Block));
}

// ---- dot products with Q8 activations --------------------------------------------------------------
// xq: the row's int8 activations as 32-bit words (xq[i] = elements 4i..4i+3); xds: per-32 {d, d*sum}.

template <DType T>
FERRY_HD float dot_unit(const uint8_t* row, int u, const int* xq, const XDs* xds);

template <>
FERRY_HD float dot_unit<DType::Q4_0>(const uint8_t* row, int u, const int* xq, const XDs* xds) {
  const uint8_t* b = block_ptr<DType::Q4_0>(row, u);
  int x[8];
  load_x8(xq + 8 * u, x);
  int sumi = 0;
  FERRY_UNROLL
  for (int i = 0; i < 4; ++i) {
    const int v = ld_a2(b + 2 + 4 * i);
    sumi = dp4a(v & 0x0F0F0F0F, x[i], sumi);
    sumi = dp4a((v >> 4) & 0x0F0F0F0F, x[i + 4], sumi);
  }
  const XDs ds = xds[u];
  return half_to_float(ld_u16(b)) * (ds.x * static_cast<float>(sumi) - 8.f * ds.y);
}

template <>
FERRY_HD float dot_unit<DType::Q4_1>(const uint8_t* row, int u, const int* xq, const XDs* xds) {
  const uint8_t* b = block_ptr<DType::Q4_1>(row, u);
  int x[8];
  load_x8(xq + 8 * u, x);
  int sumi = 0;
  FERRY_UNROLL
  for (int i = 0; i < 4; ++i) {
    const int v = ld_a4(b + 4 + 4 * i);
    sumi = dp4a(v & 0x0F0F0F0F, x[i], sumi);
    sumi = dp4a((v >> 4) & 0x0F0F0F0F, x[i + 4], sumi);
  }
  const XDs ds = xds[u];
  return half_to_float(ld_u16(b)) * ds.x * static_cast<float>(sumi) + half_to_float(ld_u16(b + 2)) * ds.y;
}

template <>
FERRY_HD float dot_unit<DType::Q5_0>(const uint8_t* row, int u, const int* xq, const XDs* xds) {
  const uint8_t* b = block_ptr<DType::Q5_0>(row, u);
  int x[8];
  load_x8(xq + 8 * u, x);
  const uint32_t qh = static_cast<uint32_t>(ld_a2(b + 2));
  int sumi = 0;
  FERRY_UNROLL
  for (int i = 0; i < 4; ++i) {
    const int v = ld_a2(b + 6 + 4 * i);
    const int lo = (v & 0x0F0F0F0F) | spread_bit4(qh >> (4 * i));
    const int hi = ((v >> 4) & 0x0F0F0F0F) | spread_bit4(qh >> (4 * i + 16));
    sumi = dp4a(lo, x[i], sumi);
    sumi = dp4a(hi, x[i + 4], sumi);
  }
  const XDs ds = xds[u];
  return half_to_float(ld_u16(b)) * (ds.x * static_cast<float>(sumi) - 16.f * ds.y);
}

template <>
FERRY_HD float dot_unit<DType::Q5_1>(const uint8_t* row, int u, const int* xq, const XDs* xds) {
  const uint8_t* b = block_ptr<DType::Q5_1>(row, u);
  int x[8];
  load_x8(xq + 8 * u, x);
  const uint32_t qh = static_cast<uint32_t>(ld_a4(b + 4));
  int sumi = 0;
  FERRY_UNROLL
  for (int i = 0; i < 4; ++i) {
    const int v = ld_a4(b + 8 + 4 * i);
    const int lo = (v & 0x0F0F0F0F) | spread_bit4(qh >> (4 * i));
    const int hi = ((v >> 4) & 0x0F0F0F0F) | spread_bit4(qh >> (4 * i + 16));
    sumi = dp4a(lo, x[i], sumi);
    sumi = dp4a(hi, x[i + 4], sumi);
  }
  const XDs ds = xds[u];
  return half_to_float(ld_u16(b)) * ds.x * static_cast<float>(sumi) + half_to_float(ld_u16(b + 2)) * ds.y;
}

template <>
FERRY_HD float dot_unit<DType::Q8_0>(const uint8_t* row, int u, const int* xq, const XDs* xds) {
  const uint8_t* b = block_ptr<DType::Q8_0>(row, u);
  int x[8];
  load_x8(xq + 8 * u, x);
  int sumi = 0;
  FERRY_UNROLL
  for (int i = 0; i < 8; ++i) sumi = dp4a(ld_a2(b + 2 + 4 * i), x[i], sumi);
  return half_to_float(ld_u16(b)) * xds[u].x * static_cast<float>(sumi);
}

// Q4_K unit = 64-element chunk c of super-block sb: low nibbles of qs[32c..32c+32) are elements
// 64c + l (sub-block 2c), high nibbles 64c + 32 + l (sub-block 2c + 1).
template <>
FERRY_HD float dot_unit<DType::Q4_K>(const uint8_t* row, int u, const int* xq, const XDs* xds) {
  const int sb = u >> 2, c = u & 3;
  const uint8_t* b = block_ptr<DType::Q4_K>(row, sb);
  const uint8_t* qs = b + 16 + 32 * c;
  int x0[8], x1[8];  // elements 64u .. 64u + 31, 64u + 32 .. 64u + 63
  load_x8(xq + 16 * u, x0);
  load_x8(xq + 16 * u + 8, x1);
  int q[8];
  load_w8(qs, q);
  int s0 = 0, s1 = 0;
  FERRY_UNROLL
  for (int i = 0; i < 8; ++i) {
    const int v = q[i];
    s0 = dp4a(v & 0x0F0F0F0F, x0[i], s0);
    s1 = dp4a((v >> 4) & 0x0F0F0F0F, x1[i], s1);
  }
  uint8_t sc0, m0, sc1, m1;
  get_scale_min_k4(2 * c, b + 4, &sc0, &m0);
  get_scale_min_k4(2 * c + 1, b + 4, &sc1, &m1);
  const XDs d0 = xds[2 * u], d1 = xds[2 * u + 1];
  const float d = half_to_float(ld_u16(b)), dmin = half_to_float(ld_u16(b + 2));
  return d * (static_cast<float>(sc0) * d0.x * static_cast<float>(s0) +
              static_cast<float>(sc1) * d1.x * static_cast<float>(s1)) -
         dmin * (static_cast<float>(m0) * d0.y + static_cast<float>(m1) * d1.y);
}

// Q5_K: as Q4_K plus the 5th bit: element 64c + l takes bit 2c of qh[l], element 64c + 32 + l bit 2c + 1.
template <>
FERRY_HD float dot_unit<DType::Q5_K>(const uint8_t* row, int u, const int* xq, const XDs* xds) {
  const int sb = u >> 2, c = u & 3;
  const uint8_t* b = block_ptr<DType::Q5_K>(row, sb);
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48 + 32 * c;
  int x0[8], x1[8];
  load_x8(xq + 16 * u, x0);
  load_x8(xq + 16 * u + 8, x1);
  int q[8], hv[8];
  load_w8(qs, q);
  load_w8(qh, hv);
  int s0 = 0, s1 = 0;
  FERRY_UNROLL
  for (int i = 0; i < 8; ++i) {
    const int v = q[i];
    const int h = hv[i];
    const int lo = (v & 0x0F0F0F0F) | (((h >> (2 * c)) & 0x01010101) << 4);
    const int hi = ((v >> 4) & 0x0F0F0F0F) | (((h >> (2 * c + 1)) & 0x01010101) << 4);
    s0 = dp4a(lo, x0[i], s0);
    s1 = dp4a(hi, x1[i], s1);
  }
  uint8_t sc0, m0, sc1, m1;
  get_scale_min_k4(2 * c, b + 4, &sc0, &m0);
  get_scale_min_k4(2 * c + 1, b + 4, &sc1, &m1);
  const XDs d0 = xds[2 * u], d1 = xds[2 * u + 1];
  const float d = half_to_float(ld_u16(b)), dmin = half_to_float(ld_u16(b + 2));
  return d * (static_cast<float>(sc0) * d0.x * static_cast<float>(s0) +
              static_cast<float>(sc1) * d1.x * static_cast<float>(s1)) -
         dmin * (static_cast<float>(m0) * d0.y + static_cast<float>(m1) * d1.y);
}

// Q6_K unit r = (half h, k) of super-block sb: ql[64h + 32k + l] low nibble + qh[32h + l] bits 2k..2k+1
// is element 128h + 32k + l (scale sc[8h + 2k + l/16]); its high nibble + bits 2k+4.. is element
// 128h + 32k + 64 + l (scale sc[8h + 2k + 4 + l/16]). Values are 6-bit minus 32.
template <>
FERRY_HD float dot_unit<DType::Q6_K>(const uint8_t* row, int u, const int* xq, const XDs* xds) {
  const int sb = u >> 2, h = (u >> 1) & 1, k = u & 1;
  const uint8_t* b = block_ptr<DType::Q6_K>(row, sb);
  const uint8_t* ql = b + 64 * h + 32 * k;
  const uint8_t* qh = b + 128 + 32 * h;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * h);
  const int xa = sb * 8 + 4 * h + k;  // 32-block index of part A; part B is xa + 2
  int x0[8], x1[8];
  load_x8(xq + 8 * xa, x0);
  load_x8(xq + 8 * (xa + 2), x1);
  int sa[2] = {0, 0}, sbb[2] = {0, 0};
  FERRY_UNROLL
  for (int i = 0; i < 8; ++i) {
    const int v = ld_a2(ql + 4 * i);
    const int hb = ld_a2(qh + 4 * i);
    const int qa = (v & 0x0F0F0F0F) | (((hb >> (2 * k)) & 0x03030303) << 4);
    const int qb = ((v >> 4) & 0x0F0F0F0F) | (((hb >> (2 * k + 4)) & 0x03030303) << 4);
    sa[i >> 2] = dp4a(sub32_bytes(qa), x0[i], sa[i >> 2]);
    sbb[i >> 2] = dp4a(sub32_bytes(qb), x1[i], sbb[i >> 2]);
  }
  const float d = half_to_float(ld_u16(b + 208));
  const float ra = static_cast<float>(sc[2 * k]) * static_cast<float>(sa[0]) +
                   static_cast<float>(sc[2 * k + 1]) * static_cast<float>(sa[1]);
  const float rb = static_cast<float>(sc[2 * k + 4]) * static_cast<float>(sbb[0]) +
                   static_cast<float>(sc[2 * k + 5]) * static_cast<float>(sbb[1]);
  return d * (xds[xa].x * ra + xds[xa + 2].x * rb);
}

// Q2_K unit = half h of super-block sb: qs[32h + l] bits 2j..2j+1 is element 128h + 32j + l with
// scale byte scales[8h + 2j + l/16] (low nibble: scale, high nibble: min).
template <>
FERRY_HD float dot_unit<DType::Q2_K>(const uint8_t* row, int u, const int* xq, const XDs* xds) {
  const int sb = u >> 1, h = u & 1;
  const uint8_t* b = block_ptr<DType::Q2_K>(row, sb);
  const uint8_t* qs = b + 16 + 32 * h;
  const uint8_t* scales = b + 8 * h;
  int q[8];
  FERRY_UNROLL
  for (int i = 0; i < 8; ++i) q[i] = ld_a4(qs + 4 * i);
  float acc_d = 0.f, acc_m = 0.f;
  FERRY_UNROLL
  for (int j = 0; j < 4; ++j) {
    const int xb = sb * 8 + 4 * h + j;
    int x[8];
    load_x8(xq + 8 * xb, x);
    const float dx = xds[xb].x;
    FERRY_UNROLL
    for (int g = 0; g < 2; ++g) {
      int sq = 0, sx = 0;
      FERRY_UNROLL
      for (int i = 4 * g; i < 4 * g + 4; ++i) {
        sq = dp4a((q[i] >> (2 * j)) & 0x03030303, x[i], sq);
        sx = dp4a(0x01010101, x[i], sx);
      }
      const int s = scales[2 * j + g];
      acc_d += dx * static_cast<float>((s & 0xF) * sq);
      acc_m += dx * static_cast<float>((s >> 4) * sx);
    }
  }
  return half_to_float(ld_u16(b + 80)) * acc_d - half_to_float(ld_u16(b + 82)) * acc_m;
}

// Q3_K unit = half h: low 2 bits as Q2_K, high bit (4h + j) of hmask[l]; value (low | high << 2) - 4,
// scale q3k_scale6(8h + 2j + l/16) - 32.
template <>
FERRY_HD float dot_unit<DType::Q3_K>(const uint8_t* row, int u, const int* xq, const XDs* xds) {
  const int sb = u >> 1, h = u & 1;
  const uint8_t* b = block_ptr<DType::Q3_K>(row, sb);
  const uint8_t* hm = b;
  const uint8_t* qs = b + 32 + 32 * h;
  const uint8_t* scales = b + 96;
  int q[8], m[8];
  FERRY_UNROLL
  for (int i = 0; i < 8; ++i) {
    q[i] = ld_a2(qs + 4 * i);
    m[i] = ld_a2(hm + 4 * i);
  }
  float acc = 0.f;
  FERRY_UNROLL
  for (int j = 0; j < 4; ++j) {
    const int xb = sb * 8 + 4 * h + j;
    int x[8];
    load_x8(xq + 8 * xb, x);
    const int hbit = 4 * h + j;
    int s[2] = {0, 0};
    FERRY_UNROLL
    for (int i = 0; i < 8; ++i) {
      const int v = ((q[i] >> (2 * j)) & 0x03030303) | (((m[i] >> hbit) & 0x01010101) << 2);
      s[i >> 2] = dp4a(sub4_bytes(v), x[i], s[i >> 2]);
    }
    const int sc0 = q3k_scale6(scales, 8 * h + 2 * j) - 32;
    const int sc1 = q3k_scale6(scales, 8 * h + 2 * j + 1) - 32;
    acc += xds[xb].x * static_cast<float>(sc0 * s[0] + sc1 * s[1]);
  }
  return half_to_float(ld_u16(b + 108)) * acc;
}

// ---- dequantization of 32 elements ----------------------------------------------------------------
// For the F16 conversion before a GEMM and for embedding rows. Group g covers elements [32g, 32g + 32).

template <DType T>
FERRY_HD void dequant32(const uint8_t* row, int g, float* out);

template <>
FERRY_HD void dequant32<DType::Q4_0>(const uint8_t* row, int g, float* out) {
  const uint8_t* b = block_ptr<DType::Q4_0>(row, g);
  const float d = half_to_float(ld_u16(b));
  FERRY_UNROLL
  for (int j = 0; j < 16; ++j) {
    const int q = b[2 + j];
    out[j] = static_cast<float>((q & 0xF) - 8) * d;
    out[j + 16] = static_cast<float>((q >> 4) - 8) * d;
  }
}
template <>
FERRY_HD void dequant32<DType::Q4_1>(const uint8_t* row, int g, float* out) {
  const uint8_t* b = block_ptr<DType::Q4_1>(row, g);
  const float d = half_to_float(ld_u16(b)), m = half_to_float(ld_u16(b + 2));
  FERRY_UNROLL
  for (int j = 0; j < 16; ++j) {
    const int q = b[4 + j];
    out[j] = static_cast<float>(q & 0xF) * d + m;
    out[j + 16] = static_cast<float>(q >> 4) * d + m;
  }
}
template <>
FERRY_HD void dequant32<DType::Q5_0>(const uint8_t* row, int g, float* out) {
  const uint8_t* b = block_ptr<DType::Q5_0>(row, g);
  const float d = half_to_float(ld_u16(b));
  const uint32_t qh = static_cast<uint32_t>(ld_a2(b + 2));
  FERRY_UNROLL
  for (int j = 0; j < 16; ++j) {
    const int q = b[6 + j];
    const int lo = (q & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (q >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    out[j] = static_cast<float>(lo - 16) * d;
    out[j + 16] = static_cast<float>(hi - 16) * d;
  }
}
template <>
FERRY_HD void dequant32<DType::Q5_1>(const uint8_t* row, int g, float* out) {
  const uint8_t* b = block_ptr<DType::Q5_1>(row, g);
  const float d = half_to_float(ld_u16(b)), m = half_to_float(ld_u16(b + 2));
  const uint32_t qh = static_cast<uint32_t>(ld_a4(b + 4));
  FERRY_UNROLL
  for (int j = 0; j < 16; ++j) {
    const int q = b[8 + j];
    const int lo = (q & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (q >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    out[j] = static_cast<float>(lo) * d + m;
    out[j + 16] = static_cast<float>(hi) * d + m;
  }
}
template <>
FERRY_HD void dequant32<DType::Q8_0>(const uint8_t* row, int g, float* out) {
  const uint8_t* b = block_ptr<DType::Q8_0>(row, g);
  const float d = half_to_float(ld_u16(b));
  FERRY_UNROLL
  for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}
template <>
FERRY_HD void dequant32<DType::Q2_K>(const uint8_t* row, int g, float* out) {
  const int sb = g >> 3, r = g & 7, h = r >> 2, j = r & 3;
  const uint8_t* b = block_ptr<DType::Q2_K>(row, sb);
  const float d = half_to_float(ld_u16(b + 80)), dmin = half_to_float(ld_u16(b + 82));
  FERRY_UNROLL
  for (int hf = 0; hf < 2; ++hf) {
    const int s = b[8 * h + 2 * j + hf];
    const float dl = d * static_cast<float>(s & 0xF), ml = dmin * static_cast<float>(s >> 4);
    FERRY_UNROLL
    for (int l = 0; l < 16; ++l) {
      const int q = (b[16 + 32 * h + 16 * hf + l] >> (2 * j)) & 3;
      out[16 * hf + l] = dl * static_cast<float>(q) - ml;
    }
  }
}
template <>
FERRY_HD void dequant32<DType::Q3_K>(const uint8_t* row, int g, float* out) {
  const int sb = g >> 3, r = g & 7, h = r >> 2, j = r & 3;
  const uint8_t* b = block_ptr<DType::Q3_K>(row, sb);
  const float d = half_to_float(ld_u16(b + 108));
  const int hbit = 4 * h + j;
  FERRY_UNROLL
  for (int hf = 0; hf < 2; ++hf) {
    const float dl = d * static_cast<float>(q3k_scale6(b + 96, 8 * h + 2 * j + hf) - 32);
    FERRY_UNROLL
    for (int l = 16 * hf; l < 16 * hf + 16; ++l) {
      const int q = ((b[32 + 32 * h + l] >> (2 * j)) & 3) - (((b[l] >> hbit) & 1) ? 0 : 4);
      out[l] = dl * static_cast<float>(q);
    }
  }
}
template <>
FERRY_HD void dequant32<DType::Q4_K>(const uint8_t* row, int g, float* out) {
  const int sb = g >> 3, r = g & 7, c = r >> 1, hi = r & 1;
  const uint8_t* b = block_ptr<DType::Q4_K>(row, sb);
  uint8_t sc, m;
  get_scale_min_k4(r, b + 4, &sc, &m);
  const float d = half_to_float(ld_u16(b)) * static_cast<float>(sc);
  const float mn = half_to_float(ld_u16(b + 2)) * static_cast<float>(m);
  const uint8_t* qs = b + 16 + 32 * c;
  FERRY_UNROLL
  for (int l = 0; l < 32; ++l) out[l] = d * static_cast<float>(hi ? (qs[l] >> 4) : (qs[l] & 0xF)) - mn;
}
template <>
FERRY_HD void dequant32<DType::Q5_K>(const uint8_t* row, int g, float* out) {
  const int sb = g >> 3, r = g & 7, c = r >> 1, hi = r & 1;
  const uint8_t* b = block_ptr<DType::Q5_K>(row, sb);
  uint8_t sc, m;
  get_scale_min_k4(r, b + 4, &sc, &m);
  const float d = half_to_float(ld_u16(b)) * static_cast<float>(sc);
  const float mn = half_to_float(ld_u16(b + 2)) * static_cast<float>(m);
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48 + 32 * c;
  FERRY_UNROLL
  for (int l = 0; l < 32; ++l) {
    const int q = (hi ? (qs[l] >> 4) : (qs[l] & 0xF)) + (((qh[l] >> r) & 1) << 4);
    out[l] = d * static_cast<float>(q) - mn;
  }
}
template <>
FERRY_HD void dequant32<DType::Q6_K>(const uint8_t* row, int g, float* out) {
  // Group r of the super-block = elements 32r..32r+31: half h = r/4, k4 = r%4 (ggml's q1..q4).
  const int sb = g >> 3, r = g & 7, h = r >> 2, k4 = r & 3;
  const uint8_t* b = block_ptr<DType::Q6_K>(row, sb);
  const float d = half_to_float(ld_u16(b + 208));
  const uint8_t* ql = b + 64 * h + 32 * (k4 & 1);
  const uint8_t* qh = b + 128 + 32 * h;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * h);
  FERRY_UNROLL
  for (int l = 0; l < 32; ++l) {
    const int lo4 = (k4 >> 1) ? (ql[l] >> 4) : (ql[l] & 0xF);
    const int q = (lo4 | (((qh[l] >> (2 * k4)) & 3) << 4)) - 32;
    out[l] = d * static_cast<float>(sc[l / 16 + 2 * k4]) * static_cast<float>(q);
  }
}

}  // namespace ferry::kernels::cuda
