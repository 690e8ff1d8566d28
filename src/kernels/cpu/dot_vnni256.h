// The int8 dot primitives the 256-bit kernel templates (simd_direct_impl.h, simd_math_impl.h) expect,
// on AVX-512 VNNI (vpdpbusd on ymm): included by the AVX-512 translation units before those templates.
// Each includer is compiled with the AVX-512 flags (see the ODR rule in kernels.h): internal linkage.
#pragma once

#include <immintrin.h>

namespace ferry::kernels::cpu {
namespace {

inline __m256i dot_u8s8(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
inline __m256i dot_u8s8_acc(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
constexpr bool kDotU8Full = true;
inline __m256i dot_i16_acc(__m256i acc, __m256i a, __m256i b) { return _mm256_dpwssd_epi32(acc, a, b); }
inline __m256i dot_s8s8(__m256i a, __m256i b) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

}  // namespace
}  // namespace ferry::kernels::cpu
