// The k-quant (Q2_K .. Q6_K) direct (decode) kernels on 256-bit vectors, part of simd_direct_impl.h
// (which includes this after its helpers; see its header for the dot primitives the includer defines).
// Per super-block of 256 weights: the levels as 8 ymm of 32 unsigned levels in natural order, the
// groups' scales as int16 vectors, and per act column the whole super-block's dot in int32: vpmaddubsw
// of levels and act (int16 pairs, exact: levels <= 63), then vpmaddwd / vpdpwssd with the scales, as
// ggml's k-quant dots do; one convert and one FMA with d * dx apply it. The mins likewise: one vpmaddwd
// of the groups' int16 mins with the act's exact group sums, a convert and an FMA with dmin * dx. The
// kernels work by halves of a super-block (4 level vectors), the chunked Q4_K / Q5_K / Q6_K ones by
// pairs of level vectors, so levels and scales stay in registers.
// Same ODR rules as generic_impl.h.
#pragma once

#include <immintrin.h>

#include <cstddef>

#include "kernels/cpu/simd_direct_impl.h"

namespace ferry::kernels::cpu {
namespace {

// ---- k-quant decoders: super-block -> 8 x 32 levels, scales/mins per group (G = 16 or 32) --------
// Scale unpacking is vectorized: 8 or 16 small integers -> floats times the super-block scale.
inline void store_scaled_u8x8(__m128i bytes8, float d, float* out) {  // out[0..8) = d * bytes[0..8)
  _mm256_store_ps(out, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes8)), _mm256_set1_ps(d)));
}
inline void store_scaled_i8x16(__m128i bytes16, float d, float* out) {  // out[0..16) = d * int8[0..16)
  _mm256_store_ps(out, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes16)), _mm256_set1_ps(d)));
  _mm256_store_ps(out + 8,
                  _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(bytes16, 8))), _mm256_set1_ps(d)));
}
inline void store_neg_scaled16(const float* sc, float k, float* mn) {  // mn = -k * sc, 16 values
  const __m256 nk = _mm256_set1_ps(-k);
  _mm256_store_ps(mn, _mm256_mul_ps(_mm256_load_ps(sc), nk));
  _mm256_store_ps(mn + 8, _mm256_mul_ps(_mm256_load_ps(sc + 8), nk));
}
// Q4_K / Q5_K: the 12 packed bytes -> 8 6-bit scales and 8 6-bit mins (bytes 0..7 and 8..15).
inline __m128i unpack_scales_k4(const uint8_t* scales) {
  uint32_t u[4];
  memcpy(u, scales, 12);
  const uint32_t km1 = 0x3f3f3f3f, km2 = 0x0f0f0f0f, km3 = 0x03030303;
  u[3] = ((u[2] >> 4) & km2) | (((u[1] >> 6) & km3) << 4);
  const uint32_t aux = u[1] & km1;
  u[1] = (u[2] & km2) | (((u[0] >> 6) & km3) << 4);
  u[2] = aux;
  u[0] &= km1;
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(u));
}
inline void kquant_scales_32_v(uint16_t dh, uint16_t dminh, const uint8_t* scales, float* sc, float* mn) {
  const __m128i v = unpack_scales_k4(scales);
  store_scaled_u8x8(v, h2f(dh), sc);
  store_scaled_u8x8(_mm_srli_si128(v, 8), -h2f(dminh), mn);
}
// Q3_K: the 12 packed bytes -> 16 6-bit scales, minus 32.
inline __m128i unpack_scales_q3k(const uint8_t* scales) {
  uint32_t a[4];
  memcpy(a, scales, 12);
  const uint32_t km1 = 0x03030303, km2 = 0x0f0f0f0f, tmp = a[2];
  a[2] = ((a[0] >> 4) & km2) | (((tmp >> 4) & km1) << 4);
  a[3] = ((a[1] >> 4) & km2) | (((tmp >> 6) & km1) << 4);
  a[0] = (a[0] & km2) | (((tmp >> 0) & km1) << 4);
  a[1] = (a[1] & km2) | (((tmp >> 2) & km1) << 4);
  return _mm_sub_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)), _mm_set1_epi8(32));
}
// Integer scales for the direct kernels: per ymm of levels j, the int16 scale of each of its 16 int16
// lanes after vpmaddubsw (lane l holds elements 2l, 2l + 1), made where the kernel uses it (get<j>():
// holding all 8 vectors next to the 8 level vectors would spill registers).
// G = 32: ymm j is group j, every lane scale[j] (8 unsigned scales in the low bytes of s8): one
// broadcast load of a stored (scale, scale) int16 pair.
struct ScalesG32 {
  alignas(32) int32_t pair[8];
  explicit ScalesG32(__m128i s8) {
    const __m256i s32 = _mm256_cvtepu8_epi32(s8);
    _mm256_store_si256(reinterpret_cast<__m256i*>(pair), _mm256_or_si256(s32, _mm256_slli_epi32(s32, 16)));
  }
  template <int J>
  __m256i get() const { return bcast_d(&pair[J]); }
};
// G = 16: ymm j holds groups 2j (lanes 0..7) and 2j + 1 (lanes 8..15); 16 signed scales in s8, as int16
// in both 128-bit lanes (groups 0..7 in lo, 8..15 in hi): one vpshufb per vector.
struct ScalesG16 {
  __m256i lo, hi;
  explicit ScalesG16(__m128i s8)
      : lo(_mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(s8))),
        hi(_mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_srli_si128(s8, 8)))) {}
  ScalesG16(__m256i lo16, __m256i hi16) : lo(lo16), hi(hi16) {}  // groups 0..7 / 8..15 as int16, both lanes
  template <int J>
  __m256i get() const {
    constexpr char a = static_cast<char>(4 * (J % 4)), b = static_cast<char>(4 * (J % 4) + 2);
    const __m256i idx = _mm256_setr_epi8(a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1,
                                         b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1, b, b + 1);
    return _mm256_shuffle_epi8(J < 4 ? lo : hi, idx);
  }
};

// Q4_K / Q5_K (the same header: d, dmin, 12 packed bytes of 6-bit scales and mins).
template <typename Block>
inline ScalesG32 scales_int_k4(const Block& b, float* d, __m256i* mins16, float* dmin) {
  const __m128i v = unpack_scales_k4(b.scales);
  *mins16 = _mm256_zextsi128_si256(_mm_cvtepu8_epi16(_mm_srli_si128(v, 8)));
  *d = h2f(b.d);
  *dmin = -h2f(b.dmin);
  return ScalesG32(v);
}

// Each decoder: levels_half<H>() the level vectors 4H..4H+3 of a super-block (32 unsigned levels each,
// natural order), levels() all 8; decode() those plus float scales and mins per group (the panel
// packer); scales_int() the int16 scales of the 8 level vectors (ScalesG16 / ScalesG32), the
// super-block scale d, and the groups' integer mins (int16, group order; G = 32: 8 in the low half)
// with their factor dmin (the direct kernel: value = d * sc * u + dmin * min per group).
template <typename Dec>
struct KQuantLevels {
  template <typename Block>
  static void levels(const Block& b, __m256i* u) {
    Dec::template levels_half<0>(b, u);
    Dec::template levels_half<1>(b, u + 4);
  }
};
struct DecQ2_K : KQuantLevels<DecQ2_K> {
  using BlockT = BlockQ2_K;
  using Scales = ScalesG16;
  static constexpr int G = 16;
  template <int H>
  static void levels_half(const BlockT& b, __m256i* u) {
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * H));
    u[0] = _mm256_and_si256(q, m3);
    u[1] = _mm256_and_si256(_mm256_srli_epi16(q, 2), m3);
    u[2] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m3);
    u[3] = _mm256_and_si256(_mm256_srli_epi16(q, 6), m3);
  }
  static void decode(const BlockT& b, __m256i* u, float* sc, float* mn) {
    levels(b, u);
    const __m128i sb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
    const __m128i lo = _mm_and_si128(sb, _mm_set1_epi8(0x0F));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(sb, 4), _mm_set1_epi8(0x0F));
    store_scaled_i8x16(lo, h2f(b.d), sc);  // levels <= 15: signed and unsigned widening agree
    store_scaled_i8x16(hi, -h2f(b.dmin), mn);
  }
  static Scales scales_int(const BlockT& b, float* d, __m256i* mins16, float* dmin) {
    const __m128i sb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
    *mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), _mm_set1_epi8(0x0F)));
    *d = h2f(b.d);
    *dmin = -h2f(b.dmin);
    return Scales(_mm_and_si128(sb, _mm_set1_epi8(0x0F)));
  }
};
struct DecQ3_K : KQuantLevels<DecQ3_K> {
  using BlockT = BlockQ3_K;
  using Scales = ScalesG16;
  static constexpr int G = 16;
  template <int H>
  static void levels_half(const BlockT& b, __m256i* u) {
    const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(4);
    const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.hmask));
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * H));
    // Level s: bits 2s..2s+1 of q plus 4 * bit 4H + s of hmask (moved to bit 2 by one shift).
    auto hbit = [&](auto k) {
      constexpr int kk = decltype(k)::value;
      return _mm256_and_si256(kk <= 2 ? _mm256_slli_epi16(hm, 2 - kk) : _mm256_srli_epi16(hm, kk - 2), m4);
    };
    u[0] = _mm256_or_si256(_mm256_and_si256(q, m3), hbit(std::integral_constant<int, 4 * H>{}));
    u[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2), m3), hbit(std::integral_constant<int, 4 * H + 1>{}));
    u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m3), hbit(std::integral_constant<int, 4 * H + 2>{}));
    u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 6), m3), hbit(std::integral_constant<int, 4 * H + 3>{}));
  }
  static void decode(const BlockT& b, __m256i* u, float* sc, float* mn) {
    levels(b, u);
    store_scaled_i8x16(unpack_scales_q3k(b.scales), h2f(b.d), sc);
    store_neg_scaled16(sc, 4.f, mn);
  }
  static Scales scales_int(const BlockT& b, float* d, __m256i* mins16, float* dmin) {
    const __m128i s = unpack_scales_q3k(b.scales);
    *mins16 = _mm256_cvtepi8_epi16(s);  // value = d * sc * (u - 4)
    *d = h2f(b.d);
    *dmin = -4.f * *d;
    return Scales(s);
  }
};
// Q4_K and Q5_K: groups of 32 with the 6-bit packed scales and mins; each decoder brings its levels_half().
template <typename Dec, typename Block>
struct KQuant32Dec : KQuantLevels<Dec> {
  using BlockT = Block;
  using Scales = ScalesG32;
  static constexpr int G = 32;
  static void decode(const BlockT& b, __m256i* u, float* sc, float* mn) {
    Dec::levels(b, u);
    kquant_scales_32_v(b.d, b.dmin, b.scales, sc, mn);
  }
  static Scales scales_int(const BlockT& b, float* d, __m256i* mins16, float* dmin) {
    return scales_int_k4(b, d, mins16, dmin);
  }
};
struct DecQ4_K : KQuant32Dec<DecQ4_K, BlockQ4_K> {
  // The direct kernel's level vectors 2J and 2J + 1 (kOddTwice: see DecQ5_K).
  static constexpr bool kOddTwice = false;
  // The prefetch stream of direct_k4 (PrefetchStreamT::step): Q4_K decodes faster with a step's fixed
  // lines, Q5_K with each line once (bench/RESULTS.md, AVX2 section, session 28).
  static constexpr bool kPrefetchEachLineOnce = false;
  template <int J>
  static void levels_pair(const BlockT& b, __m256i* u) {
    const __m256i mf = _mm256_set1_epi8(0x0F);
    const __m256i t = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * J));
    u[0] = _mm256_and_si256(t, mf);
    u[1] = _mm256_and_si256(_mm256_srli_epi16(t, 4), mf);
  }
  template <int H>
  static void levels_half(const BlockT& b, __m256i* u) {
    const __m256i mf = _mm256_set1_epi8(0x0F);
    for (int j = 0; j < 2; ++j) {
      const __m256i t = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 64 * H + 32 * j));
      u[2 * j] = _mm256_and_si256(t, mf);
      u[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(t, 4), mf);
    }
  }
};
// Bit k of every byte of v moved to bit 4 (0x10 where set), k a constant: one shift, one mask (bits that
// a 16-bit lane shift carries across the byte boundary are masked off).
template <int k>
inline __m256i bit_to_0x10(__m256i v) {
  const __m256i s = k <= 4 ? _mm256_slli_epi16(v, 4 - k) : _mm256_srli_epi16(v, k - 4);
  return _mm256_and_si256(s, _mm256_set1_epi8(0x10));
}
struct DecQ5_K : KQuant32Dec<DecQ5_K, BlockQ5_K> {
  template <int H>
  static void levels_half(const BlockT& b, __m256i* u) {
    const __m256i mf = _mm256_set1_epi8(0x0F);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh));
    const __m256i t0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 64 * H));
    const __m256i t1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 64 * H + 32));
    u[0] = _mm256_or_si256(_mm256_and_si256(t0, mf), bit_to_0x10<4 * H>(qh));
    u[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(t0, 4), mf), bit_to_0x10<4 * H + 1>(qh));
    u[2] = _mm256_or_si256(_mm256_and_si256(t1, mf), bit_to_0x10<4 * H + 2>(qh));
    u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(t1, 4), mf), bit_to_0x10<4 * H + 3>(qh));
  }
  // The direct kernel's level vectors 2J and 2J + 1 (kOddTwice): the odd one (high nibbles) as 2u, the
  // even one as u. One shift of qh puts high bit 2J at bit 4 and 2J + 1 at bit 5; the high nibble needs
  // a shift anyway, to bits 1..4 it meets its high bit there: 7 operations per pair where u for both
  // takes 8 or 9. direct_k4 doubles the even groups' scales and halves d.
  static constexpr bool kOddTwice = true;
  static constexpr bool kPrefetchEachLineOnce = true;  // see DecQ4_K
  template <int J>
  static void levels_pair(const BlockT& b, __m256i* u) {
    const __m256i mf = _mm256_set1_epi8(0x0F), m1e = _mm256_set1_epi8(0x1E);
    const __m256i b4 = _mm256_set1_epi8(0x10), b5 = _mm256_set1_epi8(0x20);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh));
    constexpr int j = 2 * J;  // high bits j, j + 1 -> bits 4, 5
    __m256i q = qh;
    if constexpr (j < 4) q = _mm256_slli_epi16(qh, 4 - j);
    if constexpr (j > 4) q = _mm256_srli_epi16(qh, j - 4);
    const __m256i t = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * J));
    u[0] = _mm256_or_si256(_mm256_and_si256(t, mf), _mm256_and_si256(q, b4));
    u[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(t, 3), m1e), _mm256_and_si256(q, b5));
  }
};
struct DecQ6_K : KQuantLevels<DecQ6_K> {
  using BlockT = BlockQ6_K;
  using Scales = ScalesG16;
  static constexpr int G = 16;
  template <int H>
  static void levels_half(const BlockT& b, __m256i* u) {
    const __m256i mf = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * H));
    const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * H + 32));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * H));
    // Bit pairs 0-1, 2-3, 4-5, 6-7 of qh to bits 4-5 (shifts across the byte boundary masked off).
    u[0] = _mm256_or_si256(_mm256_and_si256(l0, mf), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
    u[1] = _mm256_or_si256(_mm256_and_si256(l1, mf), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
    u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), mf), _mm256_and_si256(qh, m30));
    u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), mf),
                           _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
  }
  // The direct kernel's level vectors 4H + P and 4H + P + 2 (the low and high nibbles of the same 32
  // ql bytes), as levels_half makes them.
  template <int H, int P>
  static void levels_pair(const BlockT& b, __m256i* u) {
    const __m256i mf = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m256i l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * H + 32 * P));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * H));
    u[0] = _mm256_or_si256(_mm256_and_si256(l, mf), _mm256_and_si256(_mm256_slli_epi16(qh, 4 - 2 * P), m30));
    u[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l, 4), mf),
                           _mm256_and_si256(P == 0 ? qh : _mm256_srli_epi16(qh, 2), m30));
  }
  static void decode(const BlockT& b, __m256i* u, float* sc, float* mn) {
    levels(b, u);
    store_scaled_i8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)), h2f(b.d), sc);
    store_neg_scaled16(sc, 32.f, mn);
  }
  static Scales scales_int(const BlockT& b, float* d, __m256i* mins16, float* dmin) {
    const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
    *mins16 = _mm256_cvtepi8_epi16(s);  // value = d * sc * (u - 32)
    *d = h2f(b.d);
    *dmin = -32.f * *d;
    return Scales(s);
  }
};

// The act's group sums of one super-block as int16 (|sum| <= 32 * 127), in group order: G = 16: 16
// lanes; G = 32: 8 in the low half, the high half 0 (matching scales_int's mins).
template <int G>
inline __m256i group_sums16(const int32_t* qs) {
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
  if constexpr (G == 16) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 8));
    return _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8);
  } else {
    return _mm256_zextsi128_si256(_mm_packs_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1)));
  }
}

// K-quant rows, any type: per super-block its scales decoded (scales_int), then per column the int32
// dot (two chains, even / odd vectors) and the mins' integer dot with the act's group sums (vpmaddwd),
// each converted once and applied with d * dx and dmin * dx.
template <typename Dec, int C>
void direct_kquant(const MatArgs& a) {
  constexpr int G = Dec::G, NG = 256 / G;
  const int64_t nsb = a.K / 256;
  ActView act[C];
  for (int c = 0; c < C; ++c) act[c] = act_view(a.act + c * a.act_stride, a.K, G);
  StepPrefetchStream pf(a.w, a.w + a.n_rows * a.w_stride);
  for (int64_t r = 0; r < a.n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const typename Dec::BlockT*>(a.w + r * a.w_stride);
    __m256 acc[C], macc[C];
    for (int c = 0; c < C; ++c) acc[c] = macc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nsb; ++i) {
      pf.step<sizeof(typename Dec::BlockT)>(blocks + i);
      __m256i mins16;
      float d, dmin;
      const typename Dec::Scales sc = Dec::scales_int(blocks[i], &d, &mins16, &dmin);
      alignas(16) float ddx[C], mdx[C];
      for (int c = 0; c < C; ++c) {
        ddx[c] = d * act[c].dx[i * NG];
        mdx[c] = dmin * act[c].dx[i * NG];
      }
      __m256i s0[C], s1[C];
      for (int c = 0; c < C; ++c) s0[c] = s1[c] = _mm256_setzero_si256();
      // One half of the super-block (level vectors 4H..4H+3) against every column.
      auto half = [&](auto h) {
        constexpr int H = decltype(h)::value;
        __m256i u[4];
        Dec::template levels_half<H>(blocks[i], u);
        const __m256i sc0 = sc.template get<4 * H>(), sc1 = sc.template get<4 * H + 1>();
        const __m256i sc2 = sc.template get<4 * H + 2>(), sc3 = sc.template get<4 * H + 3>();
        for (int c = 0; c < C; ++c) {
          const __m256i* y = reinterpret_cast<const __m256i*>(act[c].q + 256 * i + 128 * H);
          s0[c] = dot_i16_acc(s0[c], _mm256_maddubs_epi16(u[0], _mm256_loadu_si256(y)), sc0);
          s1[c] = dot_i16_acc(s1[c], _mm256_maddubs_epi16(u[1], _mm256_loadu_si256(y + 1)), sc1);
          s0[c] = dot_i16_acc(s0[c], _mm256_maddubs_epi16(u[2], _mm256_loadu_si256(y + 2)), sc2);
          s1[c] = dot_i16_acc(s1[c], _mm256_maddubs_epi16(u[3], _mm256_loadu_si256(y + 3)), sc3);
        }
      };
      half(std::integral_constant<int, 0>{});
      half(std::integral_constant<int, 1>{});
      for (int c = 0; c < C; ++c) {
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(s0[c], s1[c])), bcast_ss(&ddx[c]), acc[c]);
        const __m256i m = _mm256_madd_epi16(mins16, group_sums16<G>(act[c].qs + i * NG));
        macc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), bcast_ss(&mdx[c]), macc[c]);
      }
    }
    for (int c = 0; c < C; ++c) a.out[c * a.out_stride + r] = hsum256(_mm256_add_ps(acc[c], macc[c]));
  }
}


// Q4_K / Q5_K rows up to kK4MaxK, the decode workhorses: the per-super-block scale work of
// direct_kquant (scalar unpacking of the 12 packed bytes, fp16 conversions) took as many instructions
// as the dots. Here it is done 8 super-blocks at a time, and the kernel is bound by its vector
// instructions per super-block, this per-chunk work included:
//   - d and dmin of the chunk by one gather; d * dx per column into a small table;
//   - the 6-bit scales and mins of 2 super-blocks per ymm (one 128-bit lane each, vpshufb), the scales
//     as (s, s) int16 pairs (one broadcast load per level vector), the mins as int16;
//   - the mins of the chunk before its super-blocks: per two super-blocks one vpmaddwd of their int16
//     mins with the act's group sums as int16 (exact), a convert and an FMA with dmin * dx. The act's
//     group sums and dx per super-block are copied once per call.
// Equal to direct_kquant up to float rounding (the min terms are summed in integers first).
constexpr int64_t kK4MaxK = 32768;

// Per 128-bit lane: a super-block's first 16 bytes (d, dmin, s0..s11) -> bytes 0..7 the scales, 8..15
// the mins. j < 4: sc = s[j] & 63, m = s[j+4] & 63; j >= 4: sc = (s[j+4] & 15) | (s[j-4] >> 6) << 4,
// m = (s[j+4] >> 4) | (s[j] >> 6) << 4.
inline __m256i unpack_scales_k4_x2(__m256i hdr) {
  const __m256i p = _mm256_shuffle_epi8(hdr, _mm256_broadcastsi128_si256(_mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15)));
  const __m256i q = _mm256_shuffle_epi8(hdr, _mm256_broadcastsi128_si256(_mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11)));
  const __m256i m1 = _mm256_broadcastsi128_si256(_mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0));
  const __m256i m2 = _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15));
  const __m256i lo = _mm256_or_si256(_mm256_and_si256(p, m1), _mm256_and_si256(_mm256_srli_epi16(p, 4), m2));
  return _mm256_or_si256(lo, _mm256_and_si256(_mm256_srli_epi16(q, 2), _mm256_set1_epi8(0x30)));  // q: 0 where unused
}

template <typename Dec, int C>
void direct_k4(const MatArgs& a) {
  using Block = typename Dec::BlockT;
  static_assert(Dec::G == 32, "Q4_K / Q5_K layout");
  constexpr int kChunk = 8;  // super-blocks per scale chunk
  const int64_t nsb = a.K / 256, nch = (nsb + kChunk - 1) / kChunk;
  alignas(32) int16_t qs16[C][kK4MaxK / 256 + 1][8];  // per super-block: the act's 8 group sums (+ a zero row)
  alignas(32) float dxs[C][kK4MaxK / 256 + kChunk];  // dx per super-block, zero-padded to whole chunks
  for (int c = 0; c < C; ++c) {
    const ActView v = act_view(a.act + c * a.act_stride, a.K, 32);
    for (int64_t i = 0; i < nsb; ++i) {
      const __m256i g = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v.qs + 8 * i));  // |sum| <= 32 * 127
      _mm_store_si128(reinterpret_cast<__m128i*>(qs16[c][i]),
                      _mm_packs_epi32(_mm256_castsi256_si128(g), _mm256_extracti128_si256(g, 1)));
      dxs[c][i] = Dec::kOddTwice ? 0.5f * v.dx[8 * i] : v.dx[8 * i];  // kOddTwice: see below
    }
    _mm_store_si128(reinterpret_cast<__m128i*>(qs16[c][nsb]), _mm_setzero_si128());  // an odd chunk's pair
    for (int64_t i = nsb; i < kChunk * nch; ++i) dxs[c][i] = 0.f;
  }
  const __m256i goff = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(static_cast<int>(sizeof(Block))));
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  StepPrefetchStream pf(a.w, a.w + a.n_rows * a.w_stride);
  for (int64_t r = 0; r < a.n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const Block*>(a.w + r * a.w_stride);
    __m256 acc[C], macc[C];
    for (int c = 0; c < C; ++c) acc[c] = macc[c] = _mm256_setzero_ps();
    for (int64_t ch = 0; ch < nch; ++ch) {
      const int64_t i0 = kChunk * ch;
      const int n = static_cast<int>(nsb - i0 < kChunk ? nsb - i0 : kChunk);
      const __m256i lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), iota);
      const __m256i hdr = _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), reinterpret_cast<const int*>(blocks + i0), goff, lanes, 1);
      // d and dmin of the chunk (0 past the row): the 16-bit halves split by one vpshufb and vpermq.
      // kOddTwice: the integer dot is twice the super-block's (even scales doubled, odd levels doubled)
      // and dxs holds dx / 2; the mins are doubled too (exact).
      const __m256i dm = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(hdr, _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15))), 0xD8);
      const __m256 d = _mm256_cvtph_ps(_mm256_castsi256_si128(dm)), dmin = _mm256_cvtph_ps(_mm256_extracti128_si256(dm, 1));
      alignas(32) float ddx[C][kChunk];
      for (int c = 0; c < C; ++c) _mm256_store_ps(ddx[c], _mm256_mul_ps(d, _mm256_load_ps(dxs[c] + i0)));
      // Scales as (s, s) int16 pairs and mins as int16, per super-block of the chunk (an odd chunk's
      // last pair repeats its last super-block, whose dmin lane past the row is 0): per two
      // super-blocks one unpack (one 128-bit lane each), then per super-block its lane broadcast and
      // one vpshufb to the 8 pairs, and one vpshufb for both mins.
      alignas(32) int32_t pairs[kChunk][8];
      alignas(32) int16_t mins[kChunk][8];
      const __m256i pair_idx = _mm256_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1,
                                                4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
      const __m256i min_idx = _mm256_broadcastsi128_si256(_mm_setr_epi8(8, -1, 9, -1, 10, -1, 11, -1, 12, -1, 13, -1, 14, -1, 15, -1));
      const __m256i doubled = _mm256_broadcastsi128_si256(_mm_setr_epi8(-1, 0, -1, 0, -1, 0, -1, 0, -1, -1, -1, -1, -1, -1, -1, -1));
      for (int k = 0; k < n; k += 2) {
        const __m128i h0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks + i0 + k));
        const __m128i h1 = k + 1 < n ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks + i0 + k + 1)) : h0;
        __m256i sm = unpack_scales_k4_x2(_mm256_set_m128i(h1, h0));
        if constexpr (Dec::kOddTwice) sm = _mm256_add_epi8(sm, _mm256_and_si256(sm, doubled));  // even scales and mins doubled
        _mm256_store_si256(reinterpret_cast<__m256i*>(pairs[k]), _mm256_shuffle_epi8(_mm256_permute4x64_epi64(sm, 0x44), pair_idx));
        _mm256_store_si256(reinterpret_cast<__m256i*>(pairs[k + 1]), _mm256_shuffle_epi8(_mm256_permute4x64_epi64(sm, 0xEE), pair_idx));
        _mm256_store_si256(reinterpret_cast<__m256i*>(mins[k]), _mm256_shuffle_epi8(sm, min_idx));
      }
      // The chunk's mins, outside the super-block loop: per pair of super-blocks one vpmaddwd of their
      // int16 mins with the act's group sums (4 partial sums each, exact), a convert and an FMA with
      // each half's dmin * dx.
      alignas(32) static constexpr int32_t kPairLanes[kChunk / 2][8] = {
          {0, 0, 0, 0, 1, 1, 1, 1}, {2, 2, 2, 2, 3, 3, 3, 3}, {4, 4, 4, 4, 5, 5, 5, 5}, {6, 6, 6, 6, 7, 7, 7, 7}};
      for (int c = 0; c < C; ++c) {
        const __m256 mdx = _mm256_mul_ps(dmin, _mm256_load_ps(dxs[c] + i0));
        for (int k = 0; k < n; k += 2) {
          const __m256i mq = _mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(mins[k])),
                                               _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs16[c][i0 + k])));
          const __m256i sel = _mm256_load_si256(reinterpret_cast<const __m256i*>(kPairLanes[k / 2]));
          macc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mq), _mm256_permutevar8x32_ps(mdx, sel), macc[c]);
        }
      }
      for (int k = 0; k < n; ++k) {
        const int64_t i = i0 + k;
        pf.step<sizeof(Block), Dec::kPrefetchEachLineOnce>(blocks + i);
        __m256i s0[C], s1[C];
        for (int c = 0; c < C; ++c) s0[c] = s1[c] = _mm256_setzero_si256();
        // Level vectors by pairs (2J, 2J + 1), each dotted against every column as soon as it is made
        // (fewer live vectors than a half's four: no spills).
        auto pair = [&](auto j) {
          constexpr int J = decltype(j)::value;
          __m256i u[2];
          Dec::template levels_pair<J>(blocks[i], u);
          for (int c = 0; c < C; ++c) {
            const auto* y = reinterpret_cast<const __m256i*>(act_view(a.act + c * a.act_stride, a.K, 32).q + 256 * i + 64 * J);
            s0[c] = dot_i16_acc(s0[c], _mm256_maddubs_epi16(u[0], _mm256_loadu_si256(y)), bcast_d(&pairs[k][2 * J]));
            s1[c] = dot_i16_acc(s1[c], _mm256_maddubs_epi16(u[1], _mm256_loadu_si256(y + 1)), bcast_d(&pairs[k][2 * J + 1]));
          }
        };
        pair(std::integral_constant<int, 0>{});
        pair(std::integral_constant<int, 1>{});
        pair(std::integral_constant<int, 2>{});
        pair(std::integral_constant<int, 3>{});
        for (int c = 0; c < C; ++c)
          acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(s0[c], s1[c])), bcast_ss(&ddx[c][k]), acc[c]);
      }
    }
    for (int c = 0; c < C; ++c) a.out[c * a.out_stride + r] = hsum256(_mm256_sub_ps(acc[c], macc[c]));
  }
}

// Q6_K rows up to kQ6MaxK, chunked as direct_k4: the per-super-block scale work of direct_kquant (an
// fp16 conversion, the int8 scales widened and broadcast, the act's group sums packed, a second
// convert and FMA for the offset) took about a sixth of its instructions. Here, per 8 super-blocks:
//   - d of the chunk by one gather (the u32 at byte 206: the last two scales and d), d * dx per column
//     into a small table;
//   - the 16 scales widened to int16 once into a stack table; a super-block's two 128-bit halves of
//     it are then broadcast loads (ScalesG16's lo / hi);
//   - the offset -32 folded into the integer dot: sum sc * (dot - 32 * group sum) with one vpmaddwd of
//     the int16 scales and the act's int16 group sums (copied once per call), exact in int32
//     (|sum| < 2^29), so one convert and one FMA per super-block.
// Equal to direct_kquant up to float rounding.
constexpr int64_t kQ6MaxK = 32768;

template <int C>
void direct_q6k(const MatArgs& a) {
  using Dec = DecQ6_K;
  using Block = BlockQ6_K;
  constexpr int kChunk = 8;
  const int64_t nsb = a.K / 256, nch = (nsb + kChunk - 1) / kChunk;
  alignas(32) int16_t qs16[C][kQ6MaxK / 256][16];    // per super-block: the act's 16 group sums
  alignas(32) float dxs[C][kQ6MaxK / 256 + kChunk];  // dx per super-block, zero-padded to whole chunks
  const int8_t* yq[C];
  for (int c = 0; c < C; ++c) {
    const ActView v = act_view(a.act + c * a.act_stride, a.K, 16);
    yq[c] = v.q;
    for (int64_t i = 0; i < nsb; ++i) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(qs16[c][i]), group_sums16<16>(v.qs + 16 * i));
      dxs[c][i] = v.dx[16 * i];
    }
    for (int64_t i = nsb; i < kChunk * nch; ++i) dxs[c][i] = 0.f;
  }
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i goff = _mm256_add_epi32(_mm256_mullo_epi32(iota, _mm256_set1_epi32(static_cast<int>(sizeof(Block)))),
                                        _mm256_set1_epi32(static_cast<int>(offsetof(Block, d)) - 2));
  StepPrefetchStream pf(a.w, a.w + a.n_rows * a.w_stride);
  for (int64_t r = 0; r < a.n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const Block*>(a.w + r * a.w_stride);
    __m256 acc[C];
    for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t ch = 0; ch < nch; ++ch) {
      const int64_t i0 = kChunk * ch;
      const int n = static_cast<int>(nsb - i0 < kChunk ? nsb - i0 : kChunk);
      const __m256i lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), iota);
      const __m256i hdr = _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), reinterpret_cast<const int*>(blocks + i0), goff, lanes, 1);
      const __m256 d = halves_to_f32(hdr, true);
      alignas(32) float ddx[C][kChunk];
      for (int c = 0; c < C; ++c) _mm256_store_ps(ddx[c], _mm256_mul_ps(d, _mm256_load_ps(dxs[c] + i0)));
      alignas(32) int16_t sc16[kChunk][16];  // the 16 scales as int16, per super-block of the chunk
      for (int k = 0; k < n; ++k)
        _mm256_store_si256(reinterpret_cast<__m256i*>(sc16[k]),
                           _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[i0 + k].scales))));
      for (int k = 0; k < n; ++k) {
        const int64_t i = i0 + k;
        pf.step<sizeof(Block)>(blocks + i);
        const ScalesG16 sc(_mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(sc16[k]))),
                           _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(sc16[k] + 8))));
        __m256i s0[C], s1[C];
        for (int c = 0; c < C; ++c) s0[c] = s1[c] = _mm256_setzero_si256();
        // Level vectors by pairs (4H + P, 4H + P + 2), each dotted against every column as soon as it is
        // made (fewer live vectors than a half's four: no spills).
        auto pair = [&](auto h, auto p) {
          constexpr int H = decltype(h)::value, P = decltype(p)::value;
          __m256i u[2];
          Dec::levels_pair<H, P>(blocks[i], u);
          const __m256i sca = sc.template get<4 * H + P>(), scb = sc.template get<4 * H + P + 2>();
          for (int c = 0; c < C; ++c) {
            const __m256i* y = reinterpret_cast<const __m256i*>(yq[c] + 256 * i + 128 * H);
            s0[c] = dot_i16_acc(s0[c], _mm256_maddubs_epi16(u[0], _mm256_loadu_si256(y + P)), sca);
            s1[c] = dot_i16_acc(s1[c], _mm256_maddubs_epi16(u[1], _mm256_loadu_si256(y + P + 2)), scb);
          }
        };
        using I0 = std::integral_constant<int, 0>;
        using I1 = std::integral_constant<int, 1>;
        pair(I0{}, I0{});
        pair(I0{}, I1{});
        pair(I1{}, I0{});
        pair(I1{}, I1{});
        const __m256i sc_all = _mm256_load_si256(reinterpret_cast<const __m256i*>(sc16[k]));
        for (int c = 0; c < C; ++c) {
          const __m256i off = _mm256_madd_epi16(sc_all, _mm256_load_si256(reinterpret_cast<const __m256i*>(qs16[c][i])));
          const __m256i s = _mm256_sub_epi32(_mm256_add_epi32(s0[c], s1[c]), _mm256_slli_epi32(off, 5));
          acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), bcast_ss(&ddx[c][k]), acc[c]);
        }
      }
    }
    for (int c = 0; c < C; ++c) a.out[c * a.out_stride + r] = hsum256(acc[c]);
  }
}

}  // namespace
}  // namespace ferry::kernels::cpu
