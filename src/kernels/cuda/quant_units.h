// Per-type decoding of quantized weight rows for the CUDA kernels, written once for host and device
// (FERRY_HD) so the exact code the GPU runs is unit-tested on the host in CI (tests/kernels/cuda).
//   dequant32<T>(row, g, out)      elements [32g, 32g + 32) of a row -> float
//   dot_slice<T>(block, s, x, xds) dot of slice s of a block (SliceTraits) with the block's activations
//                                  quantized to int8 blocks of 32 (Q8 format below)
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

// dp4a with a's bytes unsigned (0..255) and b's signed: the high nibbles of a Q4 word masked in place
// (w & 0xF0F0F0F0, i.e. 16 x the nibble) need no shift; the sum is then exactly 16 x the nibble sum.
FERRY_HD int dp4a_us(uint32_t a, int b, int c) {
#if defined(__CUDA_ARCH__)
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  for (int i = 0; i < 4; ++i)
    c += static_cast<int>((a >> (8 * i)) & 0xFFu) * static_cast<int>(static_cast<int8_t>(static_cast<uint32_t>(b) >> (8 * i)));
  return c;
#endif
}

// Byte i of the result is byte (s >> 4i) & 7 of the 8-byte value {b, a} (a = bytes 0..3): __byte_perm.
FERRY_HD uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(a, b, s);
#else
  const uint64_t v = (static_cast<uint64_t>(b) << 32) | a;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFFu) << (8 * i);
  return r;
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

// ---- slice traits ----------------------------------------------------------------------------------
// A block's quants are split into kSlices slices of consecutive 32-bit words; consecutive lanes of a warp
// take consecutive slices, so every load instruction of the warp reads one contiguous span of the row
// (few L1 wavefronts per byte even for the 18/22/34/110/210-byte blocks that only allow 16-bit loads),
// and the matching activations are contiguous too.

template <DType T>
struct SliceTraits;
template <> struct SliceTraits<DType::Q4_0> { static constexpr int kSlices = 4, kElems = 32; using Block = BlockQ4_0; };
template <> struct SliceTraits<DType::Q4_1> { static constexpr int kSlices = 4, kElems = 32; using Block = BlockQ4_1; };
template <> struct SliceTraits<DType::Q5_0> { static constexpr int kSlices = 4, kElems = 32; using Block = BlockQ5_0; };
template <> struct SliceTraits<DType::Q5_1> { static constexpr int kSlices = 4, kElems = 32; using Block = BlockQ5_1; };
template <> struct SliceTraits<DType::Q8_0> { static constexpr int kSlices = 4, kElems = 32; using Block = BlockQ8_0; };
template <> struct SliceTraits<DType::Q2_K> { static constexpr int kSlices = 16, kElems = 256; using Block = BlockQ2_K; };
template <> struct SliceTraits<DType::Q3_K> { static constexpr int kSlices = 16, kElems = 256; using Block = BlockQ3_K; };
template <> struct SliceTraits<DType::Q4_K> { static constexpr int kSlices = 16, kElems = 256; using Block = BlockQ4_K; };
template <> struct SliceTraits<DType::Q5_K> { static constexpr int kSlices = 16, kElems = 256; using Block = BlockQ5_K; };
template <> struct SliceTraits<DType::Q6_K> { static constexpr int kSlices = 32, kElems = 256; using Block = BlockQ6_K; };
template <> struct SliceTraits<DType::MXFP4> { static constexpr int kSlices = 4, kElems = 32; using Block = BlockMXFP4; };

template <DType T>
FERRY_HD const uint8_t* block_ptr(const uint8_t* row, int i) {
  return row + static_cast<int64_t>(i) * static_cast<int64_t>(sizeof(typename SliceTraits<T>::Block));
}

// ---- dot products with Q8 activations --------------------------------------------------------------
// dot_slice<T>(b, s, x, xds): slice s of block b dotted with the block's activations: x = the block's int8
// activations as words (x[i] = elements 4i..4i+3 of the block), xds = the block's {d, d*sum} per 32.
// Terms that need a whole 32-group's activation sum (the -8 of Q4_0, the mins of Q4_1/Q5_1/Q4_K/Q5_K)
// are added by one slice of the group only. Summing dot_slice over all blocks and slices = the row dot.

template <DType T>
FERRY_HD float dot_slice(const uint8_t* b, int s, const int* x, const XDs* xds);

// Q4_0 slice s: qs bytes 4s..4s+3; low nibbles are elements 4s.., high nibbles 16 + 4s...
template <>
FERRY_HD float dot_slice<DType::Q4_0>(const uint8_t* b, int s, const int* x, const XDs* xds) {
  const int v = ld_a2(b + 2 + 4 * s);
  int sumi = dp4a(v & 0x0F0F0F0F, x[s], 0);
  sumi = dp4a((v >> 4) & 0x0F0F0F0F, x[s + 4], sumi);
  const float d = half_to_float(ld_u16(b));
  const XDs ds = xds[0];
  float r = d * ds.x * static_cast<float>(sumi);
  if (s == 0) r -= 8.f * d * ds.y;
  return r;
}

template <>
FERRY_HD float dot_slice<DType::Q4_1>(const uint8_t* b, int s, const int* x, const XDs* xds) {
  const int v = ld_a4(b + 4 + 4 * s);
  int sumi = dp4a(v & 0x0F0F0F0F, x[s], 0);
  sumi = dp4a((v >> 4) & 0x0F0F0F0F, x[s + 4], sumi);
  const XDs ds = xds[0];
  float r = half_to_float(ld_u16(b)) * ds.x * static_cast<float>(sumi);
  if (s == 0) r += half_to_float(ld_u16(b + 2)) * ds.y;
  return r;
}

template <>
FERRY_HD float dot_slice<DType::Q5_0>(const uint8_t* b, int s, const int* x, const XDs* xds) {
  const uint32_t qh = static_cast<uint32_t>(ld_a2(b + 2));
  const int v = ld_a2(b + 6 + 4 * s);
  const int lo = (v & 0x0F0F0F0F) | spread_bit4(qh >> (4 * s));
  const int hi = ((v >> 4) & 0x0F0F0F0F) | spread_bit4(qh >> (4 * s + 16));
  int sumi = dp4a(lo, x[s], 0);
  sumi = dp4a(hi, x[s + 4], sumi);
  const float d = half_to_float(ld_u16(b));
  const XDs ds = xds[0];
  float r = d * ds.x * static_cast<float>(sumi);
  if (s == 0) r -= 16.f * d * ds.y;
  return r;
}

template <>
FERRY_HD float dot_slice<DType::Q5_1>(const uint8_t* b, int s, const int* x, const XDs* xds) {
  const uint32_t qh = static_cast<uint32_t>(ld_a4(b + 4));
  const int v = ld_a4(b + 8 + 4 * s);
  const int lo = (v & 0x0F0F0F0F) | spread_bit4(qh >> (4 * s));
  const int hi = ((v >> 4) & 0x0F0F0F0F) | spread_bit4(qh >> (4 * s + 16));
  int sumi = dp4a(lo, x[s], 0);
  sumi = dp4a(hi, x[s + 4], sumi);
  const XDs ds = xds[0];
  float r = half_to_float(ld_u16(b)) * ds.x * static_cast<float>(sumi);
  if (s == 0) r += half_to_float(ld_u16(b + 2)) * ds.y;
  return r;
}

// Q8_0 slice s: quants 8s..8s+7.
template <>
FERRY_HD float dot_slice<DType::Q8_0>(const uint8_t* b, int s, const int* x, const XDs* xds) {
  int sumi = dp4a(ld_a2(b + 2 + 8 * s), x[2 * s], 0);
  sumi = dp4a(ld_a2(b + 6 + 8 * s), x[2 * s + 1], sumi);
  return half_to_float(ld_u16(b)) * xds[0].x * static_cast<float>(sumi);
}

// MXFP4: four E2M1 codes (the low nibble of each byte of q) -> their doubled values (kMxfp4Values) as
// signed bytes: magnitudes {0, 1, 2, 3, 4, 6, 8, 12} picked by byte_perm, negated where bit 3 is set.
FERRY_HD int mxfp4_bytes(uint32_t q) {
  const uint32_t sel = (q & 7u) | ((q >> 4) & 0x70u) | ((q >> 8) & 0x700u) | ((q >> 12) & 0x7000u);
  const uint32_t pos = byte_perm(0x03020100u, 0x0C080604u, sel);
  const uint32_t neg = byte_perm(0xFDFEFF00u, 0xF4F8FAFCu, sel);
  const uint32_t m = ((q >> 3) & 0x01010101u) * 0xFFu;
  return static_cast<int>((pos & ~m) | (neg & m));
}
// 32-bit little-endian load at any address (MXFP4's 17-byte blocks): four byte loads.
FERRY_HD uint32_t ld_a1(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

// MXFP4 slice s: qs bytes 4s..4s+3 (after the E8M0 byte); low nibbles are elements 4s.., high nibbles
// 16 + 4s.. (as Q4_0). The doubled table's integer sum times half the block's scale (ggml's convention).
template <>
FERRY_HD float dot_slice<DType::MXFP4>(const uint8_t* b, int s, const int* x, const XDs* xds) {
  const uint32_t v = ld_a1(b + 1 + 4 * s);
  int sumi = dp4a(mxfp4_bytes(v & 0x0F0F0F0Fu), x[s], 0);
  sumi = dp4a(mxfp4_bytes((v >> 4) & 0x0F0F0F0Fu), x[s + 4], sumi);
  return e8m0_to_fp32_half(b[0]) * xds[0].x * static_cast<float>(sumi);
}

// Q4_K slice s: chunk c = s / 4 (64 elements, qs[32c..32c+32)), piece o = s % 4 of 8 bytes: low nibbles are
// elements 64c + 8o + 0..7 (sub-block 2c), high nibbles 64c + 32 + 8o + 0..7 (sub-block 2c + 1).
template <>
FERRY_HD float dot_slice<DType::Q4_K>(const uint8_t* b, int s, const int* x, const XDs* xds) {
  const int c = s >> 2, o = s & 3;
  const uint8_t* qs = b + 16 + 32 * c + 8 * o;
  const int v0 = ld_a4(qs), v1 = ld_a4(qs + 4);
  const int xl = 16 * c + 2 * o, xh = xl + 8;
  int s0 = dp4a(v0 & 0x0F0F0F0F, x[xl], 0);
  s0 = dp4a(v1 & 0x0F0F0F0F, x[xl + 1], s0);
  int s1 = dp4a((v0 >> 4) & 0x0F0F0F0F, x[xh], 0);
  s1 = dp4a((v1 >> 4) & 0x0F0F0F0F, x[xh + 1], s1);
  uint8_t sc0, m0, sc1, m1;
  get_scale_min_k4(2 * c, b + 4, &sc0, &m0);
  get_scale_min_k4(2 * c + 1, b + 4, &sc1, &m1);
  const XDs d0 = xds[2 * c], d1 = xds[2 * c + 1];
  const float d = half_to_float(ld_u16(b));
  float r = d * (static_cast<float>(sc0) * d0.x * static_cast<float>(s0) +
                 static_cast<float>(sc1) * d1.x * static_cast<float>(s1));
  if (o == 0) {
    r -= half_to_float(ld_u16(b + 2)) * (static_cast<float>(m0) * d0.y + static_cast<float>(m1) * d1.y);
  }
  return r;
}

// Q5_K: as Q4_K; the 5th bits of the slice's bytes are qh[8o..8o+8) bits 2c (low) and 2c + 1 (high).
template <>
FERRY_HD float dot_slice<DType::Q5_K>(const uint8_t* b, int s, const int* x, const XDs* xds) {
  const int c = s >> 2, o = s & 3;
  const uint8_t* qs = b + 48 + 32 * c + 8 * o;
  const uint8_t* qh = b + 16 + 8 * o;
  const int v[2] = {ld_a4(qs), ld_a4(qs + 4)};
  const int h[2] = {ld_a4(qh), ld_a4(qh + 4)};
  const int xl = 16 * c + 2 * o, xh = xl + 8;
  int s0 = 0, s1 = 0;
  FERRY_UNROLL
  for (int i = 0; i < 2; ++i) {
    const int lo = (v[i] & 0x0F0F0F0F) | (((h[i] >> (2 * c)) & 0x01010101) << 4);
    const int hi = ((v[i] >> 4) & 0x0F0F0F0F) | (((h[i] >> (2 * c + 1)) & 0x01010101) << 4);
    s0 = dp4a(lo, x[xl + i], s0);
    s1 = dp4a(hi, x[xh + i], s1);
  }
  uint8_t sc0, m0, sc1, m1;
  get_scale_min_k4(2 * c, b + 4, &sc0, &m0);
  get_scale_min_k4(2 * c + 1, b + 4, &sc1, &m1);
  const XDs d0 = xds[2 * c], d1 = xds[2 * c + 1];
  const float d = half_to_float(ld_u16(b));
  float r = d * (static_cast<float>(sc0) * d0.x * static_cast<float>(s0) +
                 static_cast<float>(sc1) * d1.x * static_cast<float>(s1));
  if (o == 0) {
    r -= half_to_float(ld_u16(b + 2)) * (static_cast<float>(m0) * d0.y + static_cast<float>(m1) * d1.y);
  }
  return r;
}

// Q6_K slice w (0..31) = ql word w: half h = w / 16, k = (w / 8) % 2, l0 = 4 (w % 8). Its low nibbles plus
// qh[32h + l0..] bits 2k.. are elements 128h + 32k + l0..+3 (scale sc[8h + l0/16 + 2k]); its high nibbles
// plus bits 2k+4.. are elements 64 further (scale 4 further). Values are 6-bit minus 32.
template <>
FERRY_HD float dot_slice<DType::Q6_K>(const uint8_t* b, int s, const int* x, const XDs* xds) {
  const int h = s >> 4, k = (s >> 3) & 1, w8 = s & 7;
  const int v = ld_a2(b + 64 * h + 32 * k + 4 * w8);
  const int hb = ld_a2(b + 128 + 32 * h + 4 * w8);
  const int qa = (v & 0x0F0F0F0F) | (((hb >> (2 * k)) & 0x03030303) << 4);
  const int qb = ((v >> 4) & 0x0F0F0F0F) | (((hb >> (2 * k + 4)) & 0x03030303) << 4);
  const int xa = 32 * h + 8 * k + w8;
  const int sa = dp4a(sub32_bytes(qa), x[xa], 0);
  const int sb = dp4a(sub32_bytes(qb), x[xa + 16], 0);
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * h + (w8 >> 2) + 2 * k);
  const int ga = 4 * h + k;  // 32-group of part A; part B is ga + 2
  return half_to_float(ld_u16(b + 208)) * (xds[ga].x * static_cast<float>(sc[0] * sa) +
                                           xds[ga + 2].x * static_cast<float>(sc[4] * sb));
}

// Q2_K slice s (0..15) = qs word s: half h = s / 8, l0 = 4 (s % 8); bits 2j..2j+1 are elements
// 128h + 32j + l0..+3 with scale byte scales[8h + 2j + l0/16] (low nibble scale, high nibble min).
template <>
FERRY_HD float dot_slice<DType::Q2_K>(const uint8_t* b, int s, const int* x, const XDs* xds) {
  const int h = s >> 3, w8 = s & 7;
  const int q = ld_a4(b + 16 + 32 * h + 4 * w8);
  const uint8_t* scales = b + 8 * h + (w8 >> 2);
  float acc_d = 0.f, acc_m = 0.f;
  FERRY_UNROLL
  for (int j = 0; j < 4; ++j) {
    const int xi = x[32 * h + 8 * j + w8];
    const int sq = dp4a((q >> (2 * j)) & 0x03030303, xi, 0);
    const int sx = dp4a(0x01010101, xi, 0);
    const int sc = scales[2 * j];
    const float dx = xds[4 * h + j].x;
    acc_d += dx * static_cast<float>((sc & 0xF) * sq);
    acc_m += dx * static_cast<float>((sc >> 4) * sx);
  }
  return half_to_float(ld_u16(b + 80)) * acc_d - half_to_float(ld_u16(b + 82)) * acc_m;
}

// Q3_K slice s (0..15): as Q2_K for the low bits (qs at 32), high bit 4h + j of hmask[l0..l0+3];
// value (low | high << 2) - 4, scale q3k_scale6(8h + 2j + l0/16) - 32.
template <>
FERRY_HD float dot_slice<DType::Q3_K>(const uint8_t* b, int s, const int* x, const XDs* xds) {
  const int h = s >> 3, w8 = s & 7;
  const int q = ld_a2(b + 32 + 32 * h + 4 * w8);
  const int m = ld_a2(b + 4 * w8);
  float acc = 0.f;
  FERRY_UNROLL
  for (int j = 0; j < 4; ++j) {
    const int v = ((q >> (2 * j)) & 0x03030303) | (((m >> (4 * h + j)) & 0x01010101) << 2);
    const int sum = dp4a(sub4_bytes(v), x[32 * h + 8 * j + w8], 0);
    const int sc = q3k_scale6(b + 96, 8 * h + 2 * j + (w8 >> 2)) - 32;
    acc += xds[4 * h + j].x * static_cast<float>(sc * sum);
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
FERRY_HD void dequant32<DType::MXFP4>(const uint8_t* row, int g, float* out) {
  const uint8_t* b = block_ptr<DType::MXFP4>(row, g);
  const float d = e8m0_to_fp32_half(b[0]);
  FERRY_UNROLL
  for (int j = 0; j < 16; j += 4) {
    const uint32_t v = ld_a1(b + 1 + j);
    const uint32_t lo = static_cast<uint32_t>(mxfp4_bytes(v & 0x0F0F0F0Fu));
    const uint32_t hi = static_cast<uint32_t>(mxfp4_bytes((v >> 4) & 0x0F0F0F0Fu));
    FERRY_UNROLL
    for (int i = 0; i < 4; ++i) {
      out[j + i] = static_cast<float>(static_cast<int8_t>(lo >> (8 * i))) * d;
      out[j + i + 16] = static_cast<float>(static_cast<int8_t>(hi >> (8 * i))) * d;
    }
  }
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
