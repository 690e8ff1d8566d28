// Direct (decode-path) matmul kernels on 256-bit vectors, shared by the AVX2 and AVX-512 files: each
// weight block is decoded in registers to unsigned levels (natural element order, 32 per ymm) and
// dotted with up to C act columns. The including file defines the two integer dot primitives:
//   dot_u8s8(u, s): 8 x int32, lane k = sum of u[4k..4k+3] * s[4k..4k+3] (u <= 63 unsigned)
//   dot_s8s8(a, b): the same with both operands signed (Q8_0 weights)
// (AVX2: pmaddubsw + pmaddwd; AVX-512 VNNI: vpdpbusd). Same ODR rules as generic_impl.h.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/generic_impl.h"

namespace ferry::kernels::cpu {
namespace {

inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256i srl16(__m256i v, int n) { return _mm256_srl_epi16(v, _mm_cvtsi32_si128(n)); }

// 16 bytes of nibbles -> 32 bytes: [low nibbles (elements 0..15), high nibbles (16..31)].
inline __m256i nibbles32(const uint8_t* qs) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i v = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

// 32 bits -> 32 bytes, 0x10 where the bit is set.
inline __m256i bits_to_0x10(uint32_t bits) {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  return _mm256_maskz_set1_epi8(bits, 0x10);
#else
  const __m256i x = _mm256_set1_epi32(static_cast<int>(bits));
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  __m256i bytes = _mm256_shuffle_epi8(x, shuf);
  bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_and_si256(_mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(0x10));
#endif
}

// ---- legacy decoders: block b -> 32 levels, scale, min ---------------------------------------------
struct DecQ4_0 {
  using BlockT = BlockQ4_0;
  static constexpr bool kSigned = false;
  static __m256i decode(const BlockT& b, float* sc, float* mn) {
    *sc = h2f(b.d);
    *mn = -8.f * *sc;
    return nibbles32(b.qs);
  }
};
struct DecQ4_1 {
  using BlockT = BlockQ4_1;
  static constexpr bool kSigned = false;
  static __m256i decode(const BlockT& b, float* sc, float* mn) {
    *sc = h2f(b.d);
    *mn = h2f(b.m);
    return nibbles32(b.qs);
  }
};
struct DecQ5_0 {
  using BlockT = BlockQ5_0;
  static constexpr bool kSigned = false;
  static __m256i decode(const BlockT& b, float* sc, float* mn) {
    *sc = h2f(b.d);
    *mn = -16.f * *sc;
    uint32_t qh;
    memcpy(&qh, b.qh, 4);
    return _mm256_or_si256(nibbles32(b.qs), bits_to_0x10(qh));
  }
};
struct DecQ5_1 {
  using BlockT = BlockQ5_1;
  static constexpr bool kSigned = false;
  static __m256i decode(const BlockT& b, float* sc, float* mn) {
    *sc = h2f(b.d);
    *mn = h2f(b.m);
    uint32_t qh;
    memcpy(&qh, b.qh, 4);
    return _mm256_or_si256(nibbles32(b.qs), bits_to_0x10(qh));
  }
};
// Q8_0: signed levels, no min (the act's sy is unused).
struct DecQ8_0 {
  using BlockT = BlockQ8_0;
  static constexpr bool kSigned = true;
  static __m256i decode(const BlockT& b, float* sc, float* mn) {
    *sc = h2f(b.d);
    *mn = 0.f;
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
  }
};

// out[c * os + r] = sum over blocks of sc * dx * dot + mn * sy.
template <typename Dec, int C>
void direct_legacy(const MatArgs& a) {
  const int64_t nb = a.K / 32;
  ActView act[C];
  for (int c = 0; c < C; ++c) act[c] = act_view(a.act + c * a.act_stride, a.K, 32);
  for (int64_t r = 0; r < a.n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const typename Dec::BlockT*>(a.w + r * a.w_stride);
    __m256 acc[C];
    float macc[C];
    for (int c = 0; c < C; ++c) {
      acc[c] = _mm256_setzero_ps();
      macc[c] = 0.f;
    }
    for (int64_t b = 0; b < nb; ++b) {
      float sc, mn;
      const __m256i u = Dec::decode(blocks[b], &sc, &mn);
      for (int c = 0; c < C; ++c) {
        const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act[c].q + 32 * b));
        const __m256i d = Dec::kSigned ? dot_s8s8(u, y) : dot_u8s8(u, y);
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(sc * act[c].dx[b]), acc[c]);
        if constexpr (!Dec::kSigned) macc[c] += mn * act[c].sy[b];
      }
    }
    for (int c = 0; c < C; ++c) a.out[c * a.out_stride + r] = hsum256(acc[c]) + macc[c];
  }
}

// ---- k-quant decoders: super-block -> 8 x 32 levels, scales/mins per group (G = 16 or 32) --------
struct DecQ2_K {
  using BlockT = BlockQ2_K;
  static constexpr int G = 16;
  static void decode(const BlockT& b, __m256i* u, float* sc, float* mn) {
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; ++h) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * h));
      for (int s = 0; s < 4; ++s) u[4 * h + s] = _mm256_and_si256(srl16(q, 2 * s), m3);
    }
    const float d = h2f(b.d), dmin = h2f(b.dmin);
    for (int g = 0; g < 16; ++g) {
      sc[g] = d * static_cast<float>(b.scales[g] & 0xF);
      mn[g] = -(dmin * static_cast<float>(b.scales[g] >> 4));
    }
  }
};
struct DecQ3_K {
  using BlockT = BlockQ3_K;
  static constexpr int G = 16;
  static void decode(const BlockT& b, __m256i* u, float* sc, float* mn) {
    const __m256i m3 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
    const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.hmask));
    for (int h = 0; h < 2; ++h) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * h));
      for (int s = 0; s < 4; ++s) {
        const __m256i lo = _mm256_and_si256(srl16(q, 2 * s), m3);
        const __m256i hb = _mm256_and_si256(srl16(hm, 4 * h + s), m1);
        u[4 * h + s] = _mm256_add_epi8(lo, _mm256_slli_epi16(hb, 2));
      }
    }
    const float d = h2f(b.d);
    for (int g = 0; g < 16; ++g) {
      sc[g] = d * static_cast<float>(q3k_scale6(b.scales, g) - 32);
      mn[g] = -4.f * sc[g];
    }
  }
};
struct DecQ4_K {
  using BlockT = BlockQ4_K;
  static constexpr int G = 32;
  static void decode(const BlockT& b, __m256i* u, float* sc, float* mn) {
    const __m256i mf = _mm256_set1_epi8(0x0F);
    for (int j = 0; j < 4; ++j) {
      const __m256i t = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * j));
      u[2 * j] = _mm256_and_si256(t, mf);
      u[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(t, 4), mf);
    }
    kquant_scales_32(b.d, b.dmin, b.scales, sc, mn);
  }
};
struct DecQ5_K {
  using BlockT = BlockQ5_K;
  static constexpr int G = 32;
  static void decode(const BlockT& b, __m256i* u, float* sc, float* mn) {
    const __m256i mf = _mm256_set1_epi8(0x0F), m1 = _mm256_set1_epi8(1);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh));
    for (int j = 0; j < 4; ++j) {
      const __m256i t = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * j));
      const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(srl16(qh, 2 * j), m1), 4);
      const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(srl16(qh, 2 * j + 1), m1), 4);
      u[2 * j] = _mm256_or_si256(_mm256_and_si256(t, mf), h0);
      u[2 * j + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(t, 4), mf), h1);
    }
    kquant_scales_32(b.d, b.dmin, b.scales, sc, mn);
  }
};
struct DecQ6_K {
  using BlockT = BlockQ6_K;
  static constexpr int G = 16;
  static void decode(const BlockT& b, __m256i* u, float* sc, float* mn) {
    const __m256i mf = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h));
      const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4);
      const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4);
      const __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4);
      const __m256i h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4);
      u[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(l0, mf), h0);
      u[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, mf), h1);
      u[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), mf), h2);
      u[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), mf), h3);
    }
    const float d = h2f(b.d);
    for (int g = 0; g < 16; ++g) {
      sc[g] = d * static_cast<float>(b.scales[g]);
      mn[g] = -32.f * sc[g];
    }
  }
};

// K-quant rows: per super-block, sum_j cvt(dot_j) * scale_j (scales folded per 32-lane vector), times
// the act's dx; mins: sum_g mn[g] * sy[g] as vectors.
template <typename Dec, int C>
void direct_kquant(const MatArgs& a) {
  constexpr int G = Dec::G, NG = 256 / G;
  const int64_t nsb = a.K / 256;
  ActView act[C];
  for (int c = 0; c < C; ++c) act[c] = act_view(a.act + c * a.act_stride, a.K, G);
  for (int64_t r = 0; r < a.n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const typename Dec::BlockT*>(a.w + r * a.w_stride);
    __m256 acc[C], macc[C];
    for (int c = 0; c < C; ++c) acc[c] = macc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nsb; ++i) {
      __m256i u[8];
      alignas(32) float sc[16], mn[16];
      Dec::decode(blocks[i], u, sc, mn);
      __m256 scv[8];
      for (int j = 0; j < 8; ++j) {
        scv[j] = G == 32 ? _mm256_set1_ps(sc[j])
                         : _mm256_set_m128(_mm_set1_ps(sc[2 * j + 1]), _mm_set1_ps(sc[2 * j]));
      }
      const __m256 mn0 = _mm256_load_ps(mn);
      const __m256 mn1 = G == 16 ? _mm256_load_ps(mn + 8) : _mm256_setzero_ps();
      for (int c = 0; c < C; ++c) {
        const int8_t* y = act[c].q + 256 * i;
        __m256 s = _mm256_setzero_ps();
        for (int j = 0; j < 8; ++j) {
          const __m256i yv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + 32 * j));
          s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8(u[j], yv)), scv[j], s);
        }
        acc[c] = _mm256_fmadd_ps(s, _mm256_set1_ps(act[c].dx[i * NG]), acc[c]);
        const float* sy = act[c].sy + i * NG;
        macc[c] = _mm256_fmadd_ps(mn0, _mm256_loadu_ps(sy), macc[c]);
        if constexpr (G == 16) macc[c] = _mm256_fmadd_ps(mn1, _mm256_loadu_ps(sy + 8), macc[c]);
      }
    }
    for (int c = 0; c < C; ++c) a.out[c * a.out_stride + r] = hsum256(acc[c]) + hsum256(macc[c]);
  }
}

// Dispatch on the column count (1..kMaxDirectCols). KT::run<C> is the kernel for C columns.
template <typename KT>
void direct_by_cols(const MatArgs& a) {
  switch (a.n_cols) {
    case 1: return KT::template run<1>(a);
    case 2: return KT::template run<2>(a);
    case 3: return KT::template run<3>(a);
    default: return KT::template run<4>(a);
  }
}
template <typename Dec>
struct LegacyK {
  template <int C>
  static void run(const MatArgs& a) { direct_legacy<Dec, C>(a); }
};
template <typename Dec>
struct KquantK {
  template <int C>
  static void run(const MatArgs& a) { direct_kquant<Dec, C>(a); }
};

inline void set_direct_quant(KernelTable* t) {
  struct Entry {
    DType type;
    void (*fn)(const MatArgs&);
  };
  const Entry entries[] = {
      {DType::Q4_0, direct_by_cols<LegacyK<DecQ4_0>>}, {DType::Q4_1, direct_by_cols<LegacyK<DecQ4_1>>},
      {DType::Q5_0, direct_by_cols<LegacyK<DecQ5_0>>}, {DType::Q5_1, direct_by_cols<LegacyK<DecQ5_1>>},
      {DType::Q8_0, direct_by_cols<LegacyK<DecQ8_0>>}, {DType::Q2_K, direct_by_cols<KquantK<DecQ2_K>>},
      {DType::Q3_K, direct_by_cols<KquantK<DecQ3_K>>}, {DType::Q4_K, direct_by_cols<KquantK<DecQ4_K>>},
      {DType::Q5_K, direct_by_cols<KquantK<DecQ5_K>>}, {DType::Q6_K, direct_by_cols<KquantK<DecQ6_K>>},
  };
  for (const Entry& e : entries) {
    MatKernel& m = t->mat[static_cast<uint32_t>(e.type)];
    m.direct = e.fn;
    m.direct_cols = kMaxDirectCols;
  }
}

}  // namespace
}  // namespace ferry::kernels::cpu
