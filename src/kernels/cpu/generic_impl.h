// Portable pieces shared by every kernel translation unit, compiled once per ISA (so the compiler may
// vectorize them with that file's flags). Everything here has internal linkage (see the ODR rule in
// kernels.h) and uses only compiler builtins.
//   - act layouts and the activation quantizers, bit-exact with ferry::quantize_row (Q8_0, Q8_1, Q8_K);
//   - per-block unpackers: a weight block -> unsigned levels u[i] plus per-group (scale, min) so that
//     value[i] = scale * u[i] + min reproduces ferry::dequantize_row (up to float rounding).
// Include only from src/kernels/cpu/*.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/kernels.h"
#include "tensor/quant_blocks.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace ferry::kernels::cpu {
namespace {

inline constexpr size_t align64(size_t n) { return (n + 63) & ~static_cast<size_t>(63); }

// ---- fp16 scalar conversion (F16C when this file has it; otherwise bit-exact portable code) ----------
inline float h2f(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {
      int e = -1;
      do {
        mant <<= 1;
        ++e;
      } while ((mant & 0x400u) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else {
    bits = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
#endif
}

// float -> fp16, round to nearest even (= ferry::fp32_to_fp16 for every non-NaN input).
inline uint16_t f2h(float f) {
#if defined(__F16C__)
  return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
  uint32_t x;
  memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u, absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (absx < 0x38800000u) {
    if (absx < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t e = absx >> 23, m = (absx & 0x7fffffu) | 0x800000u, shift = 126 - e;
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = absx - 0x38000000u;
  const uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<uint16_t>(sign | r);
#endif
}

inline float bf2f(uint16_t h) {
  const uint32_t b = static_cast<uint32_t>(h) << 16;
  float f;
  memcpy(&f, &b, 4);
  return f;
}
// float -> bf16, round to nearest even, NaN kept quiet (= ferry::fp32_to_bf16).
inline uint16_t f2bf(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 64);
  return static_cast<uint16_t>((x + (0x7fffu + ((x >> 16) & 1u))) >> 16);
}

template <typename T>
inline T min_of(T a, T b) { return a < b ? a : b; }
template <typename T>
inline T max_of(T a, T b) { return a > b ? a : b; }

// ---- act layout ------------------------------------------------------------------------------------
struct ActView {
  const int8_t* q;     // [K] levels
  const float* dx;     // [K/G] scale per group
  const float* sy;     // [K/G] dx * sum(q) (Q8_1: as ggml's fp16 s)
  const int32_t* qs;   // [K/G] sum(q), exact (folds integer offsets of the weights into the dot)
};
inline size_t q_act_bytes(int64_t K, int G) {
  const size_t ng = static_cast<size_t>(K / G);
  return align64(static_cast<size_t>(K)) + 3 * align64(ng * sizeof(float));
}
// Zeroes the group arrays past K/G up to their padding (kernels read whole vectors of 16 groups).
inline void act_zero_pad(const ActView& v, int64_t K, int G) {
  const size_t ng = static_cast<size_t>(K / G), padded = align64(ng * sizeof(float)) / sizeof(float);
  for (size_t g = ng; g < padded; ++g) {
    const_cast<float*>(v.dx)[g] = 0.f;
    const_cast<float*>(v.sy)[g] = 0.f;
    const_cast<int32_t*>(v.qs)[g] = 0;
  }
}
inline ActView act_view(const void* act, int64_t K, int G) {
  const auto* p = static_cast<const uint8_t*>(act);
  const size_t ng = static_cast<size_t>(K / G), arr = align64(ng * sizeof(float));
  const size_t off_dx = align64(static_cast<size_t>(K)), off_sy = off_dx + arr, off_qs = off_sy + arr;
  return {reinterpret_cast<const int8_t*>(p), reinterpret_cast<const float*>(p + off_dx),
          reinterpret_cast<const float*>(p + off_sy), reinterpret_cast<const int32_t*>(p + off_qs)};
}

// Q8_0 / Q8_1 blocks of 32 exactly as llama.cpp quantizes activations on x86 (ggml-cpu's AVX/AVX2
// quantize_row_q8_0 / q8_1, used by every x86 build): d = amax / 127 stored as fp16, levels
// round-half-to-even(x * (127 / amax)), and Q8_1's s = fp16(d * sum(levels)). (The reference
// quantize_row rounds half away from zero with 1 / d; the two differ in a few levels per thousand,
// and matching llama.cpp's levels is what keeps ferry's logits next to its.)
inline void quantize_act_q8_legacy(const float* x, int64_t K, void* act, bool q8_1) {
  const ActView v = act_view(act, K, 32);
  auto* q = const_cast<int8_t*>(v.q);
  auto* dx = const_cast<float*>(v.dx);
  auto* sy = const_cast<float*>(v.sy);
  auto* qs = const_cast<int32_t*>(v.qs);
  for (int64_t b = 0; b < K / 32; ++b) {
    const float* xb = x + 32 * b;
    float amax = 0.f;
    for (int j = 0; j < 32; ++j) {
      const float a = __builtin_fabsf(xb[j]);
      amax = amax > a ? amax : a;
    }
    const float d = amax / 127.f;
    const float id = amax != 0.f ? 127.f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      const int v8 = static_cast<int>(__builtin_rintf(xb[j] * id));
      q[32 * b + j] = static_cast<int8_t>(v8);
      sum += v8;
    }
    dx[b] = h2f(f2h(d));
    sy[b] = q8_1 ? h2f(f2h(d * static_cast<float>(sum))) : dx[b] * static_cast<float>(sum);
    qs[b] = sum;
  }
  act_zero_pad(v, K, 32);
}

// Q8_K super-blocks of 256 (ggml's quantize_row_q8_K_ref: round half to even), groups of G.
inline void quantize_act_q8_k(const float* x, int64_t K, void* act, int G) {
  const ActView v = act_view(act, K, G);
  auto* q = const_cast<int8_t*>(v.q);
  auto* dx = const_cast<float*>(v.dx);
  auto* sy = const_cast<float*>(v.sy);
  auto* qs = const_cast<int32_t*>(v.qs);
  const int gpb = 256 / G;
  for (int64_t b = 0; b < K / 256; ++b) {
    const float* xb = x + 256 * b;
    int8_t* qb = q + 256 * b;
    float max = 0.f, amax = 0.f;
    for (int j = 0; j < 256; ++j) {
      const float ax = __builtin_fabsf(xb[j]);
      if (ax > amax) {
        amax = ax;
        max = xb[j];
      }
    }
    float d = 0.f;
    if (amax == 0.f) {
      memset(qb, 0, 256);
    } else {
      const float iscale = -127.f / max;
      for (int j = 0; j < 256; ++j) {
        const int v8 = static_cast<int>(__builtin_rintf(iscale * xb[j]));
        qb[j] = static_cast<int8_t>(v8 < 127 ? v8 : 127);
      }
      d = 1 / iscale;
    }
    for (int g = 0; g < gpb; ++g) {
      int sum = 0;
      for (int j = 0; j < G; ++j) sum += qb[g * G + j];
      dx[b * gpb + g] = d;
      sy[b * gpb + g] = d * static_cast<float>(sum);
      qs[b * gpb + g] = sum;
    }
  }
  act_zero_pad(v, K, G);
}

// ---- per-block unpackers: u[0..B) levels, sc/mn per group ---------------------------------------------
// Legacy blocks: B = G = 32.
inline void unpack_q4_0(const BlockQ4_0& b, uint8_t* u, float* sc, float* mn) {
  for (int j = 0; j < 16; ++j) {
    u[j] = b.qs[j] & 0x0F;
    u[j + 16] = b.qs[j] >> 4;
  }
  sc[0] = h2f(b.d);
  mn[0] = -8.f * sc[0];
}
inline void unpack_q4_1(const BlockQ4_1& b, uint8_t* u, float* sc, float* mn) {
  for (int j = 0; j < 16; ++j) {
    u[j] = b.qs[j] & 0x0F;
    u[j + 16] = b.qs[j] >> 4;
  }
  sc[0] = h2f(b.d);
  mn[0] = h2f(b.m);
}
inline void unpack_q5(const uint8_t* qs, const uint8_t* qh_bytes, uint8_t* u) {
  uint32_t qh;
  memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; ++j) {
    u[j] = static_cast<uint8_t>((qs[j] & 0x0F) | (((qh >> j) & 1u) << 4));
    u[j + 16] = static_cast<uint8_t>((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
  }
}
inline void unpack_q5_0(const BlockQ5_0& b, uint8_t* u, float* sc, float* mn) {
  unpack_q5(b.qs, b.qh, u);
  sc[0] = h2f(b.d);
  mn[0] = -16.f * sc[0];
}
inline void unpack_q5_1(const BlockQ5_1& b, uint8_t* u, float* sc, float* mn) {
  unpack_q5(b.qs, b.qh, u);
  sc[0] = h2f(b.d);
  mn[0] = h2f(b.m);
}
inline void unpack_q8_0(const BlockQ8_0& b, uint8_t* u, float* sc, float* mn) {
  for (int j = 0; j < 32; ++j) u[j] = static_cast<uint8_t>(b.qs[j] + 128);
  sc[0] = h2f(b.d);
  mn[0] = -128.f * sc[0];
}

// MXFP4: u = doubled E2M1 value + 16 (4..28), scale = half the E8M0 scale (a power of two, exact), so
// value = scale * (u - 16) is ggml's kvalues_mxfp4[code] * e8m0_half(e) bit for bit.
inline constexpr uint8_t kMxfp4Levels[16] = {16, 17, 18, 19, 20, 22, 24, 28, 16, 15, 14, 13, 12, 10, 8, 4};
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  float f;
  memcpy(&f, &bits, 4);
  return f;
}
inline void unpack_mxfp4(const BlockMXFP4& b, uint8_t* u, float* sc, float* mn) {
  for (int j = 0; j < 16; ++j) {
    u[j] = kMxfp4Levels[b.qs[j] & 0x0F];
    u[j + 16] = kMxfp4Levels[b.qs[j] >> 4];
  }
  sc[0] = e8m0_half(b.e);
  mn[0] = -16.f * sc[0];
}

// K-quants: B = 256; G = 16 (Q2_K, Q3_K, Q6_K) or 32 (Q4_K, Q5_K).
inline void unpack_q2_k(const BlockQ2_K& b, uint8_t* u, float* sc, float* mn) {
  const float d = h2f(b.d), dmin = h2f(b.dmin);
  for (int h = 0; h < 2; ++h)
    for (int s = 0; s < 4; ++s)
      for (int l = 0; l < 32; ++l) u[128 * h + 32 * s + l] = (b.qs[32 * h + l] >> (2 * s)) & 3;
  for (int g = 0; g < 16; ++g) {
    sc[g] = d * static_cast<float>(b.scales[g] & 0xF);
    mn[g] = -(dmin * static_cast<float>(b.scales[g] >> 4));
  }
}
inline int q3k_scale6(const uint8_t* s, int j) {
  const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
  const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return lo | (hi << 4);
}
inline void unpack_q3_k(const BlockQ3_K& b, uint8_t* u, float* sc, float* mn) {
  const float d = h2f(b.d);
  for (int h = 0; h < 2; ++h)
    for (int s = 0; s < 4; ++s)
      for (int l = 0; l < 32; ++l) {
        const int lo = (b.qs[32 * h + l] >> (2 * s)) & 3;
        const int hb = (b.hmask[l] >> (4 * h + s)) & 1;
        u[128 * h + 32 * s + l] = static_cast<uint8_t>(lo + 4 * hb);
      }
  for (int g = 0; g < 16; ++g) {
    sc[g] = d * static_cast<float>(q3k_scale6(b.scales, g) - 32);
    mn[g] = -4.f * sc[g];
  }
}
inline void scale_min_k4(int j, const uint8_t* q, int* d, int* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}
inline void kquant_scales_32(uint16_t dh, uint16_t dminh, const uint8_t* scales, float* sc, float* mn) {
  const float d = h2f(dh), dmin = h2f(dminh);
  for (int g = 0; g < 8; ++g) {
    int s, m;
    scale_min_k4(g, scales, &s, &m);
    sc[g] = d * static_cast<float>(s);
    mn[g] = -(dmin * static_cast<float>(m));
  }
}
inline void unpack_q4_k(const BlockQ4_K& b, uint8_t* u, float* sc, float* mn) {
  for (int j = 0; j < 4; ++j)
    for (int l = 0; l < 32; ++l) {
      u[64 * j + l] = b.qs[32 * j + l] & 0xF;
      u[64 * j + 32 + l] = b.qs[32 * j + l] >> 4;
    }
  kquant_scales_32(b.d, b.dmin, b.scales, sc, mn);
}
inline void unpack_q5_k(const BlockQ5_K& b, uint8_t* u, float* sc, float* mn) {
  for (int j = 0; j < 4; ++j)
    for (int l = 0; l < 32; ++l) {
      u[64 * j + l] = static_cast<uint8_t>((b.qs[32 * j + l] & 0xF) | (((b.qh[l] >> (2 * j)) & 1) << 4));
      u[64 * j + 32 + l] = static_cast<uint8_t>((b.qs[32 * j + l] >> 4) | (((b.qh[l] >> (2 * j + 1)) & 1) << 4));
    }
  kquant_scales_32(b.d, b.dmin, b.scales, sc, mn);
}
inline void unpack_q6_k(const BlockQ6_K& b, uint8_t* u, float* sc, float* mn) {
  const float d = h2f(b.d);
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    uint8_t* o = u + 128 * h;
    for (int l = 0; l < 32; ++l) {
      o[l] = static_cast<uint8_t>((ql[l] & 0xF) | ((qh[l] & 3) << 4));
      o[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
      o[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
      o[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
    }
  }
  for (int g = 0; g < 16; ++g) {
    sc[g] = d * static_cast<float>(b.scales[g]);
    mn[g] = -32.f * sc[g];
  }
}

// Static description of a quantized weight type for the generic loops.
template <typename Block, int kB, int kG, void (*kUnpack)(const Block&, uint8_t*, float*, float*)>
struct QType {
  using BlockT = Block;
  static constexpr int B = kB;  // elements per block
  static constexpr int G = kG;  // elements per scale group
  static void unpack(const Block& b, uint8_t* u, float* sc, float* mn) { kUnpack(b, u, sc, mn); }
};
using TQ4_0 = QType<BlockQ4_0, 32, 32, unpack_q4_0>;
using TQ4_1 = QType<BlockQ4_1, 32, 32, unpack_q4_1>;
using TQ5_0 = QType<BlockQ5_0, 32, 32, unpack_q5_0>;
using TQ5_1 = QType<BlockQ5_1, 32, 32, unpack_q5_1>;
using TQ8_0 = QType<BlockQ8_0, 32, 32, unpack_q8_0>;
using TMXFP4 = QType<BlockMXFP4, 32, 32, unpack_mxfp4>;
using TQ2_K = QType<BlockQ2_K, 256, 16, unpack_q2_k>;
using TQ3_K = QType<BlockQ3_K, 256, 16, unpack_q3_k>;
using TQ4_K = QType<BlockQ4_K, 256, 32, unpack_q4_k>;
using TQ5_K = QType<BlockQ5_K, 256, 32, unpack_q5_k>;
using TQ6_K = QType<BlockQ6_K, 256, 16, unpack_q6_k>;

// Act converters by kind (bound to MatKernel::quantize).
inline size_t act_bytes_g32(int64_t K) { return q_act_bytes(K, 32); }
inline size_t act_bytes_g16(int64_t K) { return q_act_bytes(K, 16); }
inline void quantize_q8_0_act(const float* x, int64_t K, void* act) { quantize_act_q8_legacy(x, K, act, false); }
inline void quantize_q8_1_act(const float* x, int64_t K, void* act) { quantize_act_q8_legacy(x, K, act, true); }
inline void quantize_q8_k32_act(const float* x, int64_t K, void* act) { quantize_act_q8_k(x, K, act, 32); }
inline void quantize_q8_k16_act(const float* x, int64_t K, void* act) { quantize_act_q8_k(x, K, act, 16); }

// Index of the first set bit of a 256-bit mask held as four words (one bit set at least): the SIMD Q8_K
// converters find the first element of largest |x| this way, without a data-dependent loop exit.
inline int first_set_bit256(const uint64_t (&bits)[4]) {
  return bits[0] != 0   ? __builtin_ctzll(bits[0])
         : bits[1] != 0 ? 64 + __builtin_ctzll(bits[1])
         : bits[2] != 0 ? 128 + __builtin_ctzll(bits[2])
                        : 192 + __builtin_ctzll(bits[3]);
}

// The act converters of one level: Q8_0 and Q8_1 blocks of 32 (legacy types, MXFP4), Q8_K super-blocks
// with sums per group of 16 or 32 (k-quants). A SIMD level passes its own, bit-exact with these.
struct ActQuantizers {
  void (*q8_0)(const float*, int64_t, void*) = quantize_q8_0_act;
  void (*q8_1)(const float*, int64_t, void*) = quantize_q8_1_act;
  void (*q8_k16)(const float*, int64_t, void*) = quantize_q8_k16_act;
  void (*q8_k32)(const float*, int64_t, void*) = quantize_q8_k32_act;
};

// Sets the act kind of every quantized type (the mapping shared by all levels) with the level's converters.
inline void set_quant_acts(KernelTable* t, const ActQuantizers& f = {}) {
  struct Entry {
    DType type;
    int group;
    size_t (*bytes)(int64_t);
    void (*quantize)(const float*, int64_t, void*);
  };
  const Entry entries[] = {
      {DType::Q4_0, 32, act_bytes_g32, f.q8_0},   {DType::Q5_0, 32, act_bytes_g32, f.q8_0},
      {DType::Q8_0, 32, act_bytes_g32, f.q8_0},   {DType::MXFP4, 32, act_bytes_g32, f.q8_0},
      {DType::Q4_1, 32, act_bytes_g32, f.q8_1},   {DType::Q5_1, 32, act_bytes_g32, f.q8_1},
      {DType::Q2_K, 16, act_bytes_g16, f.q8_k16}, {DType::Q3_K, 16, act_bytes_g16, f.q8_k16},
      {DType::Q6_K, 16, act_bytes_g16, f.q8_k16}, {DType::Q4_K, 32, act_bytes_g32, f.q8_k32},
      {DType::Q5_K, 32, act_bytes_g32, f.q8_k32},
  };
  for (const Entry& e : entries) {
    MatKernel& m = t->mat[static_cast<uint32_t>(e.type)];
    m.group = e.group;
    m.act_bytes = e.bytes;
    m.quantize = e.quantize;
  }
}

// ---- float acts --------------------------------------------------------------------------------------
inline size_t act_bytes_f32(int64_t K) { return align64(static_cast<size_t>(K) * 4); }
inline void act_f32(const float* x, int64_t K, void* act) { memcpy(act, x, static_cast<size_t>(K) * 4); }
// F16 weights: x rounded to fp16, stored as float (ggml converts activations to F16 for F16 weights).
inline void act_f16_as_f32(const float* x, int64_t K, void* act) {
  float* y = static_cast<float*>(act);
  for (int64_t i = 0; i < K; ++i) y[i] = h2f(f2h(x[i]));
}
// BF16 weights: x rounded to bf16, stored as float.
inline void act_bf16_as_f32(const float* x, int64_t K, void* act) {
  float* y = static_cast<float*>(act);
  for (int64_t i = 0; i < K; ++i) y[i] = bf2f(f2bf(x[i]));
}

}  // namespace
}  // namespace ferry::kernels::cpu
