// K-quant panel (prefill) kernels for the levels without VNNI (plain AVX2): the groups' 4- to 8-bit
// scales are applied in the integer domain, as ggml's k-quant dots do, so a whole super-block of 256
// levels is summed in int32 before one convert and FMA per row vector and column. Two forms:
//   mins (Q2_K, Q4_K, Q5_K: value = d sc u - dmin m, u unsigned): per super-block b
//     dot += d dx * sum_g sc_g * dot_g(u, q)  -  dmin dx * sum_g m_g * qs_g
//     with q the act's signed levels and qs_g their exact group sums (the act as every level has it);
//   offset (Q3_K, Q6_K: value = d sc (u - Off)): the panel holds the signed levels w = u - Off and the
//     act comes as unsigned bytes a = q + 128 (MatKernel::panel_act_u8), so vpmaddubsw takes the act
//     as its unsigned operand; sum(a w) = sum(q w) + 128 sum(w), and the second term depends on the
//     weights only: per super-block and row the panel keeps corr = -128 sum_g sc_g * sum(w of g), the
//     start of the int32 sum. No per-column offset work:
//     dot += d dx * (corr + sum_g sc_g * dot_g(w, a)).
// dot_g: vpmaddubsw products summed in int16 over S quads (exact, see KqType::S), then one vpmaddwd with
// the row's (sc, sc) pair; the mins through vpmaddwd of (m_2j, m_2j+1) pairs and the act's group sums
// as int16 pairs. Every integer sum is exact (below 2^31: at most 16 groups of 16 x 255 x 32 times
// |sc| <= 128, plus corr), so this is the exact dot up to the float rounding of the per-super-block
// terms; it replaces the per-group float epilogue of qpanel_mul (a convert, a multiply and two FMAs per
// group, row vector and column).
// Panel layout (R = 16 rows, one 32-bit lane each; ng = K/G groups, nb = K/256 super-blocks):
//   quads [K/4][R] u32 (as panel_impl.h) | scale pairs [ng][R] (sc, sc) int16 |
//   mins only: min pairs [ng/2][R] (m_2j, m_2j+1) int16 | d [nb][R] f32 | -dmin [nb][R] f32 or corr [nb][R] i32.
// Include after panel_impl.h (its packing and helpers). Same ODR rules as generic_impl.h.
#pragma once

#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/panel_impl.h"

namespace ferry::kernels::cpu {
namespace {

// A k-quant as this kernel sees it: group size, largest unsigned level, level offset (0: a type with
// mins). S: quads whose vpmaddubsw pairs are summed in int16, each pair at most 2 * UMax * 127 (mins:
// unsigned levels, signed act) or 2 * Off * 255 (offset: |w| <= Off, unsigned act).
template <int kG, int kUMax, int kOff>
struct KqType {
  static constexpr int G = kG, UMax = kUMax, Off = kOff;
  static constexpr bool kMins = kOff == 0;
  static constexpr int kPair = kMins ? 2 * kUMax * 127 : 2 * kOff * 255;
  static constexpr int S = 32767 / kPair < kG / 4 ? 32767 / kPair : kG / 4;
  static_assert(S >= 1, "a pair of products must fit int16");
};

template <typename KT>
size_t kqpanel_bytes(int64_t K) {
  const size_t ng = static_cast<size_t>(K / KT::G), nb = static_cast<size_t>(K / 256);
  return static_cast<size_t>(K) * R + ng * R * 4 + (KT::kMins ? ng / 2 * R * 4 : 0) + 2 * nb * R * 4;
}
// Unpacked rows: levels [R][K].
template <typename KT>
size_t kqpanel_tmp_bytes(int64_t K) {
  return static_cast<size_t>(K) * R + 64;
}

// Integer scales (and mins) of a super-block, its d and (types with mins) -dmin.
inline void kq_scales_k4(const uint8_t* packed, int16_t* sc, int16_t* m) {
  alignas(16) uint8_t s[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(s), unpack_scales_k4(packed));
  for (int g = 0; g < 8; ++g) {
    sc[g] = s[g];
    m[g] = s[8 + g];
  }
}
inline void kq_scales(const BlockQ4_K& b, int16_t* sc, int16_t* m, float* d, float* nmin) {
  kq_scales_k4(b.scales, sc, m);
  *d = h2f(b.d);
  *nmin = -h2f(b.dmin);
}
inline void kq_scales(const BlockQ5_K& b, int16_t* sc, int16_t* m, float* d, float* nmin) {
  kq_scales_k4(b.scales, sc, m);
  *d = h2f(b.d);
  *nmin = -h2f(b.dmin);
}
inline void kq_scales(const BlockQ2_K& b, int16_t* sc, int16_t* m, float* d, float* nmin) {
  for (int g = 0; g < 16; ++g) {
    sc[g] = b.scales[g] & 15;
    m[g] = b.scales[g] >> 4;
  }
  *d = h2f(b.d);
  *nmin = -h2f(b.dmin);
}
inline void kq_scales(const BlockQ6_K& b, int16_t* sc, int16_t*, float* d, float*) {
  for (int g = 0; g < 16; ++g) sc[g] = b.scales[g];
  *d = h2f(b.d);
}
inline void kq_scales(const BlockQ3_K& b, int16_t* sc, int16_t*, float* d, float*) {
  alignas(16) int8_t s[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(s), unpack_scales_q3k(b.scales));
  for (int g = 0; g < 16; ++g) sc[g] = s[g];
  *d = h2f(b.d);
}

// The per-group and per-super-block arrays of a panel (layout above).
struct KqArrays {
  uint32_t* sc;  // [ng][R] scale pairs
  uint32_t* m;   // [ng / 2][R] min pairs (mins only)
  float* d;      // [nb][R]
  uint32_t* e;   // [nb][R] -dmin (float bits) or corr
};
template <typename KT>
KqArrays kq_arrays(const uint8_t* panel, int64_t K) {
  const int64_t ng = K / KT::G, nb = K / 256;
  auto* sc = reinterpret_cast<uint32_t*>(const_cast<uint8_t*>(panel) + static_cast<size_t>(K) * R);
  uint32_t* m = sc + ng * R;
  auto* d = reinterpret_cast<float*>(m + (KT::kMins ? ng / 2 * R : 0));
  return {sc, m, d, reinterpret_cast<uint32_t*>(d + nb * R)};
}

inline uint32_t i16_pair(int16_t lo, int16_t hi) {
  return static_cast<uint32_t>(static_cast<uint16_t>(lo)) | static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16;
}

// Row r of a panel: its levels to u [K] (mins: u; offset: u - Off as int8), its scales, mins, d and the
// second per-super-block term (mins: -dmin as float bits; offset: corr) straight into lane r of the
// panel's arrays.
template <typename Dec, typename KT>
void kq_unpack_row(const uint8_t* row, int64_t K, uint8_t* u, int r, const KqArrays& pa) {
  constexpr int G = KT::G, NG = 256 / G;
  const auto* blocks = reinterpret_cast<const typename Dec::BlockT*>(row);
  for (int64_t i = 0; i < K / 256; ++i) {
    __m256i v[8];
    Dec::levels(blocks[i], v);
    uint8_t* ub = u + 256 * i;
    for (int j = 0; j < 8; ++j) {
      if constexpr (!KT::kMins) v[j] = _mm256_sub_epi8(v[j], _mm256_set1_epi8(static_cast<char>(KT::Off)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(ub + 32 * j), v[j]);
    }
    int16_t sc[NG], m[NG];
    float d = 0.f, nmin = 0.f;
    kq_scales(blocks[i], sc, m, &d, &nmin);
    for (int g = 0; g < NG; ++g) pa.sc[(i * NG + g) * R + r] = i16_pair(sc[g], sc[g]);
    pa.d[i * R + r] = d;
    if constexpr (KT::kMins) {
      for (int j = 0; j < NG / 2; ++j) pa.m[(i * NG / 2 + j) * R + r] = i16_pair(m[2 * j], m[2 * j + 1]);
      memcpy(&pa.e[i * R + r], &nmin, 4);
    } else {
      // corr = -128 sum_g sc_g * sum(w of g): per level vector (groups 2j, 2j + 1 in its two halves)
      // the pair sums of w by vpmaddubsw with ones, then vpmaddwd with each half's scale.
      static_assert(G == 16, "offset types have groups of 16");
      __m256i acc = _mm256_setzero_si256();
      for (int j = 0; j < 8; ++j) {
        const __m256i pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(1), v[j]);
        const __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[2 * j + 1]), _mm_set1_epi16(sc[2 * j]));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, scv));
      }
      alignas(32) int32_t part[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(part), acc);
      int32_t corr = 0;
      for (int l = 0; l < 8; ++l) corr += part[l];
      pa.e[i * R + r] = static_cast<uint32_t>(-128 * corr);
    }
  }
}

// Packs n_rows (<= R) rows into the layout above; rows past n_rows are zero. tmp: kqpanel_tmp_bytes.
template <typename V, typename KT, typename Dec>
void kqpack(int64_t K, const uint8_t* w, size_t w_stride, int n_rows, uint8_t* panel, uint8_t* tmp) {
  const KqArrays pa = kq_arrays<KT>(panel, K);
  if (n_rows < R) {
    const size_t arrays = kqpanel_bytes<KT>(K) - static_cast<size_t>(K) * R;
    memset(pa.sc, 0, arrays);
  }
  for (int r = 0; r < n_rows; ++r) kq_unpack_row<Dec, KT>(w + r * w_stride, K, tmp + r * K, r, pa);
  pack_quads(V{}, tmp, K, n_rows, panel);
}

// The panel's arrays of one super-block.
struct KqBlock {
  const uint8_t* wq;   // quads of the super-block: 64 rows of R x 4 bytes
  const uint32_t* sc;  // NG scale pairs x R
  const uint32_t* m;   // mins: NG / 2 min pairs x R
  const float* d;      // R
  const uint32_t* e;   // R: -dmin (float bits) or corr (int32)
};

// Columns [C0, C0 + N) of super-block b: the int32 sums of the scaled group dots (and of the mins),
// then the float terms into acc. Recurses over the column blocks.
template <typename V, typename KT, int C, int C0>
inline void kqpanel_block(const KqBlock& p, const uint8_t* const* col, int64_t b, const ActOffsets& ao,
                          typename V::F (*acc)[C]) {
  using I = typename V::I;
  using F = typename V::F;
  constexpr int L = V::kLanes, NV = R / L, G = KT::G, NG = 256 / G, NQ = G / 4, S = KT::S;
  // 4 columns: 8 int16 sums, 2 weight vectors and a broadcast in registers; the compiler keeps about
  // half of the 8 int32 sums in L1 (a load and store per group), still ahead of blocks of 3.
  constexpr int CB = 4;
  constexpr int N = C - C0 < CB ? C - C0 : CB;
  I is[NV][N];
  for (int c = 0; c < N; ++c)
    for (int v = 0; v < NV; ++v) is[v][c] = KT::kMins ? V::zero_i() : V::load_i(p.e + v * L);
  for (int g = 0; g < NG; ++g) {
    const uint8_t* wg = p.wq + g * NQ * R * 4;
#pragma GCC unroll 16
    for (int k0 = 0; k0 < NQ; k0 += S) {
      I t[NV][N];
#pragma GCC unroll 16
      for (int j = 0; j < S; ++j) {
        const int k = k0 + j;
        I w[NV];
        for (int v = 0; v < NV; ++v) w[v] = V::load_i(wg + (k * R + v * L) * 4);
#pragma GCC unroll 8
        for (int c = 0; c < N; ++c) {
          const I y = V::bcast_i32(col[C0 + c] + b * 256 + g * G + 4 * k);
          for (int v = 0; v < NV; ++v) {
            const I prod = KT::kMins ? _mm256_maddubs_epi16(w[v], y) : _mm256_maddubs_epi16(y, w[v]);
            t[v][c] = j == 0 ? prod : _mm256_add_epi16(t[v][c], prod);
            keep_chain(t[v][c]);
          }
        }
      }
      for (int c = 0; c < N; ++c)
        for (int v = 0; v < NV; ++v) {
          is[v][c] = V::add_i32(is[v][c], _mm256_madd_epi16(t[v][c], V::load_i(p.sc + g * R + v * L)));
          keep_chain(is[v][c]);
        }
    }
  }
  if constexpr (KT::kMins) {
    // sum_g m_g * qs_g: the act's group sums as int16 pairs (exact: |qs| <= G * 127) against the rows'
    // min pairs, then -dmin dx.
    alignas(32) int16_t qs16[N][NG];
    for (int c = 0; c < N; ++c) {
      const auto* qs = reinterpret_cast<const int32_t*>(col[C0 + c] + ao.qs) + b * NG;
      for (int i = 0; i < NG; i += 8) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + i));
        _mm_store_si128(reinterpret_cast<__m128i*>(&qs16[c][i]),
                        _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)));
      }
    }
    I ms[NV][N];
    for (int j = 0; j < NG / 2; ++j)
      for (int c = 0; c < N; ++c) {
        const I q = V::bcast_i32(&qs16[c][2 * j]);
        for (int v = 0; v < NV; ++v) {
          const I m = _mm256_madd_epi16(V::load_i(p.m + j * R + v * L), q);
          ms[v][c] = j == 0 ? m : V::add_i32(ms[v][c], m);
          keep_chain(ms[v][c]);
        }
      }
    for (int c = 0; c < N; ++c) {
      const F dx = V::bcast(reinterpret_cast<const float*>(col[C0 + c] + ao.dx) + b * NG);
      for (int v = 0; v < NV; ++v) {
        const F nmin = _mm256_castsi256_ps(V::load_i(p.e + v * L));
        acc[v][C0 + c] = V::fmadd(V::cvt(is[v][c]), V::mul(V::load(p.d + v * L), dx), acc[v][C0 + c]);
        acc[v][C0 + c] = V::fmadd(V::cvt(ms[v][c]), V::mul(nmin, dx), acc[v][C0 + c]);
      }
    }
  } else {
    for (int c = 0; c < N; ++c) {
      const F dx = V::bcast(reinterpret_cast<const float*>(col[C0 + c] + ao.dx) + b * NG);
      for (int v = 0; v < NV; ++v)
        acc[v][C0 + c] = V::fmadd(V::cvt(is[v][c]), V::mul(V::load(p.d + v * L), dx), acc[v][C0 + c]);
    }
  }
  if constexpr (C0 + N < C) kqpanel_block<V, KT, C, C0 + N>(p, col, b, ao, acc);
}

template <typename V, typename KT, int C>
void kqpanel_mul(const MatArgs& a) {
  using F = typename V::F;
  constexpr int L = V::kLanes, NV = R / L, G = KT::G, NG = 256 / G;
  const int64_t K = a.K, nb = K / 256;
  const KqArrays pa = kq_arrays<KT>(a.w, K);
  const ActOffsets ao = act_offsets(a.act, K, G);
  const uint8_t* col[C];
  column_bases<C>(a, col);
  F acc[NV][C];
  for (int v = 0; v < NV; ++v)
    for (int c = 0; c < C; ++c) acc[v][c] = V::zero();
  for (int64_t b = 0; b < nb; ++b) {
    const KqBlock p{a.w + b * 256 * R, pa.sc + b * NG * R, pa.m + b * (NG / 2) * R, pa.d + b * R, pa.e + b * R};
    kqpanel_block<V, KT, C, 0>(p, col, b, ao, acc);
  }
  const int n_rows = static_cast<int>(a.n_rows);
  for (int c = 0; c < C; ++c)
    for (int v = 0; v < NV; ++v) store_rows<V>(a.out + c * a.out_stride + v * L, acc[v][c], n_rows - v * L);
}

template <typename V, typename KT>
struct KqPanelK {
  template <int C>
  static void run(const MatArgs& a) { kqpanel_mul<V, KT, C>(a); }
};

template <typename V, typename KT, typename Dec>
void set_kqpanel(KernelTable* t, DType type, int min_tokens) {
  MatKernel& m = t->mat[static_cast<uint32_t>(type)];
  m.panel_bytes = kqpanel_bytes<KT>;
  m.pack_tmp_bytes = kqpanel_tmp_bytes<KT>;
  m.pack = kqpack<V, KT, Dec>;
  m.panel_mul = by_cols<KqPanelK<V, KT>, kPanelCols>;
  m.panel_min_tokens = min_tokens;
  m.panel_act_u8 = !KT::kMins;
}

// The k-quant panels of a level without VNNI (over set_qpanels' ones for these types).
template <typename V>
void set_kqpanels(KernelTable* t, int min_tokens) {
  static_assert(!V::kVnni, "VNNI levels keep the per-group panels (one vpdpbusd per quad)");
  set_kqpanel<V, KqType<16, 3, 0>, DecQ2_K>(t, DType::Q2_K, min_tokens);
  set_kqpanel<V, KqType<16, 7, 4>, DecQ3_K>(t, DType::Q3_K, min_tokens);
  set_kqpanel<V, KqType<32, 15, 0>, DecQ4_K>(t, DType::Q4_K, min_tokens);
  set_kqpanel<V, KqType<32, 31, 0>, DecQ5_K>(t, DType::Q5_K, min_tokens);
  set_kqpanel<V, KqType<16, 63, 32>, DecQ6_K>(t, DType::Q6_K, min_tokens);
}

}  // namespace
}  // namespace ferry::kernels::cpu
