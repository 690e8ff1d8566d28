// The one header of quantized block layouts, shared by host code and nvcc (FERRY_HD). Layouts are
// GGUF's on-disk layouts byte for byte; every block size is pinned by a static_assert so CPU and GPU
// can never disagree. Also the exact fp16/bf16 <-> fp32 conversions used everywhere.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FERRY_HD __host__ __device__ __forceinline__
#else
#define FERRY_HD inline
#endif

namespace ferry {

// ---- legacy 32-element blocks ------------------------------------------------------------------
inline constexpr int kQK4_0 = 32;
struct BlockQ4_0 {
  uint16_t d;               // fp16 scale
  uint8_t qs[kQK4_0 / 2];   // nibbles: element j in low nibble of qs[j], element j+16 in high nibble
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block");

inline constexpr int kQK4_1 = 32;
struct BlockQ4_1 {
  uint16_t d;               // fp16 scale
  uint16_t m;               // fp16 min
  uint8_t qs[kQK4_1 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20, "Q4_1 block");

inline constexpr int kQK5_0 = 32;
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];            // 5th bit of each of the 32 elements
  uint8_t qs[kQK5_0 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22, "Q5_0 block");

inline constexpr int kQK5_1 = 32;
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK5_1 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24, "Q5_1 block");

inline constexpr int kQK8_0 = 32;
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block");

inline constexpr int kQK8_1 = 32;
struct BlockQ8_1 {
  uint16_t d;               // fp16 scale
  uint16_t s;               // fp16 d * sum(qs)
  int8_t qs[kQK8_1];
};
static_assert(sizeof(BlockQ8_1) == 36, "Q8_1 block");

// ---- MXFP4 (OCP microscaling FP4): 32 E2M1 codes sharing one power-of-two scale ----------------
// value[j] = kMxfp4Values[code] * e8m0_to_fp32_half(e): the table holds twice the E2M1 values (so
// they are integers) and the scale is half of 2^(e - 127), as ggml keeps them. Element j < 16 is the
// low nibble of qs[j], element j + 16 its high nibble (Q4_0's order).
inline constexpr int kQKMXFP4 = 32;
struct BlockMXFP4 {
  uint8_t e;                    // E8M0 shared exponent
  uint8_t qs[kQKMXFP4 / 2];     // 4-bit E2M1 codes
};
static_assert(sizeof(BlockMXFP4) == 17, "MXFP4 block");

// ---- k-quants: 256-element super-blocks ---------------------------------------------------------
inline constexpr int kQK_K = 256;
inline constexpr int kKScaleSize = 12;

struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // 4-bit scale (low) and 4-bit min (high) per 16 elements
  uint8_t qs[kQK_K / 4];       // 2-bit quants
  uint16_t d;                  // fp16 super-block scale for scales
  uint16_t dmin;               // fp16 super-block scale for mins
};
static_assert(sizeof(BlockQ2_K) == 84, "Q2_K block");

struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];    // high bit of the 3-bit quants
  uint8_t qs[kQK_K / 4];       // low 2 bits
  uint8_t scales[12];          // 16 6-bit scales, packed
  uint16_t d;                  // fp16 super-block scale
};
static_assert(sizeof(BlockQ3_K) == 110, "Q3_K block");

struct BlockQ4_K {
  uint16_t d;                  // fp16 super-block scale for scales
  uint16_t dmin;               // fp16 super-block scale for mins
  uint8_t scales[kKScaleSize]; // 8 6-bit scales and 8 6-bit mins, packed
  uint8_t qs[kQK_K / 2];       // 4-bit quants
};
static_assert(sizeof(BlockQ4_K) == 144, "Q4_K block");

struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQK_K / 8];       // high bit
  uint8_t qs[kQK_K / 2];       // low 4 bits
};
static_assert(sizeof(BlockQ5_K) == 176, "Q5_K block");

struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];       // low 4 bits
  uint8_t qh[kQK_K / 4];       // high 2 bits
  int8_t scales[kQK_K / 16];   // 8-bit scales
  uint16_t d;                  // fp16 super-block scale
};
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block");

// Activation-side type for k-quant dot products (never stored in files).
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];   // sum of each group of 16 quants
};
static_assert(sizeof(BlockQ8_K) == 292, "Q8_K block");

// ---- scalar conversions (exact, bit-level; no hardware dependence) -------------------------------
FERRY_HD float fp32_from_bits(uint32_t w) {
  float f;
  memcpy(&f, &w, 4);
  return f;
}
FERRY_HD uint32_t fp32_to_bits(float f) {
  uint32_t w;
  memcpy(&w, &f, 4);
  return w;
}

// IEEE half -> float, exact for every input including subnormals, inf and NaN.
FERRY_HD float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return fp32_from_bits(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return fp32_from_bits(sign);
    // subnormal: normalize
    int e = -1;
    do {
      mant <<= 1;
      ++e;
    } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    return fp32_from_bits(sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | (mant << 13));
  }
  return fp32_from_bits(sign | ((exp + (127 - 15)) << 23) | (mant << 13));
}

// float -> IEEE half, round to nearest even (as ggml's GGML_FP32_TO_FP16 and F16C do).
FERRY_HD uint16_t fp32_to_fp16(float f) {
  const uint32_t x = fp32_to_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (absx < 0x38800000u) {                                                 // subnormal or zero half
    if (absx < 0x33000000u) return static_cast<uint16_t>(sign);            // < 2^-25 rounds to 0
    const uint32_t e = absx >> 23;
    const uint32_t m = (absx & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14 + (113 - e)
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = absx - 0x38000000u;  // rebias exponent 127 -> 15
  const uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<uint16_t>(sign | r);
}

FERRY_HD float bf16_to_fp32(uint16_t h) { return fp32_from_bits(static_cast<uint32_t>(h) << 16); }

// float -> bf16, round to nearest even, NaN kept quiet (as ggml's ggml_compute_fp32_to_bf16).
FERRY_HD uint16_t fp32_to_bf16(float f) {
  uint32_t x = fp32_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 64);
  return static_cast<uint16_t>((x + (0x7fffu + ((x >> 16) & 1u))) >> 16);
}

// Twice the E2M1 values of the 16 MXFP4 codes (sign bit 3): 0, 0.5, 1, 1.5, 2, 3, 4, 6 doubled.
#if !defined(__CUDACC__)
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
#endif

// Half of the E8M0 scale 2^(e - 127), exactly as a float: 2^(e - 128), subnormal for e < 2 (ggml's
// ggml_e8m0_to_fp32_half; e == 255, NaN in the format, reads as 2^127 there too).
FERRY_HD float e8m0_to_fp32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  return fp32_from_bits(bits);
}

// Unpack the j-th (0..7) 6-bit scale and min of a Q4_K / Q5_K super-block.
FERRY_HD void get_scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

}  // namespace ferry
