// Vector-width policies for the kernels written once for 256- and 512-bit vectors (the panel kernels
// of panel_impl.h, the decode attention cells kernels of attn_cells_impl.h): V256 (ymm, 8 f32 lanes; AVX2
// + FMA + F16C) and V512 (zmm, 16 lanes; AVX-512 F/BW/VL/DQ + VNNI, defined only in files compiled
// with AVX-512). A kernel template takes one as V and uses only what is declared here; the register
// blocking (how many rows and columns a call keeps in registers) is the kernel's, from V::kRegs.
// V256's int8 dot is the including file's dot_u8s8_acc (vpdpbusd with AVX-VNNI or AVX512-VNNI, else
// vpmaddubsw + vpmaddwd), so include this after the dot primitives. Same ODR rules as generic_impl.h.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/simd_direct_impl.h"

namespace ferry::kernels::cpu {
namespace {

struct V256 {
  static constexpr int kLanes = 8;
  static constexpr int kRegs = 16;
  static constexpr bool kVnni = kDotU8Full;  // vpdpbusd: exact for any unsigned level, no int16 stage
  using F = __m256;
  using I = __m256i;
  static F zero() { return _mm256_setzero_ps(); }
  static I zero_i() { return _mm256_setzero_si256(); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static I load_i(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static void store_i(void* p, I v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }
  static F bcast(const float* p) { return bcast_ss(p); }
  static I bcast_i32(const void* p) { return bcast_d(static_cast<const int32_t*>(p)); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static I set1_i32(int32_t x) { return _mm256_set1_epi32(x); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F cvt(I v) { return _mm256_cvtepi32_ps(v); }
  static I add_i32(I a, I b) { return _mm256_add_epi32(a, b); }
  static I mullo_i32(I a, I b) { return _mm256_mullo_epi32(a, b); }
  // acc + sum over 4-byte groups of u (unsigned) x s (signed) per int32 lane.
  static I dpbusd(I acc, I u, I s) { return dot_u8s8_acc(acc, u, s); }
  // Lanes < n (0 <= n <= 8) of p; the others 0 / untouched.
  static I lane_mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static F load_n(const float* p, int n) { return _mm256_maskload_ps(p, lane_mask(n)); }
  static void store_n(float* p, F v, int n) { _mm256_maskstore_ps(p, lane_mask(n), v); }
  static F load_h(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static float hsum(F v) { return hsum256(v); }
};

#if defined(__AVX512F__)
struct V512 {
  static constexpr int kLanes = 16;
  static constexpr int kRegs = 32;
  static constexpr bool kVnni = true;
  using F = __m512;
  using I = __m512i;
  static F zero() { return _mm512_setzero_ps(); }
  static I zero_i() { return _mm512_setzero_si512(); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static I load_i(const void* p) { return _mm512_loadu_si512(p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static void store_i(void* p, I v) { _mm512_storeu_si512(p, v); }
  static F bcast(const float* p) { return _mm512_set1_ps(*p); }
  static I bcast_i32(const void* p) { return _mm512_set1_epi32(*static_cast<const int32_t*>(p)); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static I set1_i32(int32_t x) { return _mm512_set1_epi32(x); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F cvt(I v) { return _mm512_cvtepi32_ps(v); }
  static I add_i32(I a, I b) { return _mm512_add_epi32(a, b); }
  static I mullo_i32(I a, I b) { return _mm512_mullo_epi32(a, b); }
  static I dpbusd(I acc, I u, I s) { return _mm512_dpbusd_epi32(acc, u, s); }
  static __mmask16 lane_mask(int n) { return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1); }
  static F load_n(const float* p, int n) { return _mm512_maskz_loadu_ps(lane_mask(n), p); }
  static void store_n(float* p, F v, int n) { _mm512_mask_storeu_ps(p, lane_mask(n), v); }
  static F load_h(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static float hsum(F v) { return _mm512_reduce_add_ps(v); }
};
#endif

}  // namespace
}  // namespace ferry::kernels::cpu
