// K-quant panel (prefill) kernels for the levels without VNNI (plain AVX2): the groups' 6- or 8-bit
// scales are applied in the integer domain, as ggml's k-quant dots do, so a whole super-block of 256
// levels is summed in int32 before one convert and FMA per row vector and column:
//   dot(row, col) = sum over super-blocks b of  d_b * dx_b * (sum_g sc_g * dot_g + sum_g o_g * qs_g)
//                                            + od_b * dx_b * (sum_g m_g * qs_g)        (types with mins)
// with dot_g the integer dot of group g's unsigned levels u and the act's levels (vpmaddubsw products
// summed in int16 as in panel_impl.h, then one vpmaddwd with the (sc, sc) pair of each row), and qs_g
// the act's exact group sums. Types with a fixed level offset fold it into the first sum (Q3_K: o = -4 sc,
// Q6_K: o = -32 sc); types with mins (Q2_K, Q4_K, Q5_K) take the second (o = m, od = -dmin). The
// Q8_K act has one dx per super-block. Every integer sum is exact (see the bounds at KqType), so this
// is the exact dot up to the float rounding of the per-super-block terms; it replaces the per-group
// float epilogue of qpanel_mul (a convert, a multiply and two FMAs per group, row vector and column).
// Panel layout (R = 16 rows, one 32-bit lane each; K/G groups, K/256 super-blocks):
//   quads [K/4][R] u32 (as panel_impl.h) | scale pairs [K/G][R] (sc, sc) int16 |
//   offset pairs [K/(2G)][R] (o_2j, o_2j+1) int16 | d [K/256][R] f32 | od [K/256][R] f32.
// Include after panel_impl.h (its packing and helpers). Same ODR rules as generic_impl.h.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/panel_impl.h"

namespace ferry::kernels::cpu {
namespace {

// A k-quant as this kernel sees it: group size, largest level, and whether the offsets have their own
// float factor od (mins) or share d (fixed level offset folded into the scale sum).
// Bounds (|act level| <= 127): a group dot is at most G * 63 * 127, times |sc| <= 128 and summed over
// 16 groups, plus the offset sums (|o| <= 4096, |qs| <= G * 127): below 2^31 for every type.
template <int kG, int kUMax, bool kOwnFactor>
struct KqType {
  static constexpr int G = kG, UMax = kUMax;
  static constexpr bool kMins = kOwnFactor;
};

template <int G>
size_t kqpanel_bytes(int64_t K) {
  const size_t ng = static_cast<size_t>(K / G), nb = static_cast<size_t>(K / 256);
  return static_cast<size_t>(K) * R + ng * R * 4 + ng / 2 * R * 4 + 2 * nb * R * sizeof(float);
}
// Unpacked rows: levels [R][K], sc and o [R][K/G] int16, d and od [R][K/256].
template <int G>
size_t kqpanel_tmp_bytes(int64_t K) {
  const size_t ng = static_cast<size_t>(K / G), nb = static_cast<size_t>(K / 256);
  return static_cast<size_t>(K) * R + 2 * ng * R * sizeof(int16_t) + 2 * nb * R * sizeof(float) + 64;
}

// Integer scales per super-block, by type: sc and o (NG each, int16), d and od.
inline void kq_scales(const BlockQ4_K& b, int16_t* sc, int16_t* o, float* d, float* od) {
  alignas(16) uint8_t s[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(s), unpack_scales_k4(b.scales));
  for (int g = 0; g < 8; ++g) {
    sc[g] = s[g];
    o[g] = s[8 + g];
  }
  *d = h2f(b.d);
  *od = -h2f(b.dmin);
}
inline void kq_scales(const BlockQ5_K& b, int16_t* sc, int16_t* o, float* d, float* od) {
  alignas(16) uint8_t s[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(s), unpack_scales_k4(b.scales));
  for (int g = 0; g < 8; ++g) {
    sc[g] = s[g];
    o[g] = s[8 + g];
  }
  *d = h2f(b.d);
  *od = -h2f(b.dmin);
}
inline void kq_scales(const BlockQ6_K& b, int16_t* sc, int16_t* o, float* d, float* od) {
  for (int g = 0; g < 16; ++g) {
    sc[g] = b.scales[g];
    o[g] = static_cast<int16_t>(-32 * b.scales[g]);
  }
  *d = h2f(b.d);
  *od = 0.f;
}
inline void kq_scales(const BlockQ3_K& b, int16_t* sc, int16_t* o, float* d, float* od) {
  alignas(16) int8_t s[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(s), unpack_scales_q3k(b.scales));
  for (int g = 0; g < 16; ++g) {
    sc[g] = s[g];
    o[g] = static_cast<int16_t>(-4 * s[g]);
  }
  *d = h2f(b.d);
  *od = 0.f;
}
inline void kq_scales(const BlockQ2_K& b, int16_t* sc, int16_t* o, float* d, float* od) {
  for (int g = 0; g < 16; ++g) {
    sc[g] = b.scales[g] & 15;
    o[g] = b.scales[g] >> 4;
  }
  *d = h2f(b.d);
  *od = -h2f(b.dmin);
}

// One row -> levels u [K], sc and o [K/G], d and od [K/256].
template <typename Dec>
void kq_unpack_row(const uint8_t* row, int64_t K, uint8_t* u, int16_t* sc, int16_t* o, float* d, float* od) {
  constexpr int NG = 256 / Dec::G;
  const auto* blocks = reinterpret_cast<const typename Dec::BlockT*>(row);
  for (int64_t i = 0; i < K / 256; ++i) {
    __m256i v[8];
    Dec::levels(blocks[i], v);
    for (int j = 0; j < 8; ++j) _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + 256 * i + 32 * j), v[j]);
    kq_scales(blocks[i], sc + i * NG, o + i * NG, d + i, od + i);
  }
}

// Packs n_rows (<= R) rows into the layout above; rows past n_rows are zero. tmp: kqpanel_tmp_bytes.
template <typename V, typename Dec>
void kqpack(int64_t K, const uint8_t* w, size_t w_stride, int n_rows, uint8_t* panel, uint8_t* tmp) {
  constexpr int G = Dec::G;
  const int64_t ng = K / G, nb = K / 256;
  uint8_t* tu = tmp;
  auto* tsc = reinterpret_cast<int16_t*>(tmp + static_cast<size_t>(K) * R);
  int16_t* to = tsc + ng * R;
  auto* td = reinterpret_cast<float*>(to + ng * R);
  float* tod = td + nb * R;
  for (int r = 0; r < n_rows; ++r)
    kq_unpack_row<Dec>(w + r * w_stride, K, tu + r * K, tsc + r * ng, to + r * ng, td + r * nb, tod + r * nb);
  pack_quads(V{}, tu, K, n_rows, panel);
  auto* psc = reinterpret_cast<uint32_t*>(panel + static_cast<size_t>(K) * R);
  uint32_t* po = psc + ng * R;
  auto* pd = reinterpret_cast<float*>(po + ng / 2 * R);
  float* pod = pd + nb * R;
  auto pair = [](int16_t lo, int16_t hi) {
    return static_cast<uint32_t>(static_cast<uint16_t>(lo)) | static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16;
  };
  for (int64_t g = 0; g < ng; ++g)
    for (int r = 0; r < R; ++r) psc[g * R + r] = r < n_rows ? pair(tsc[r * ng + g], tsc[r * ng + g]) : 0;
  for (int64_t j = 0; j < ng / 2; ++j)
    for (int r = 0; r < R; ++r) po[j * R + r] = r < n_rows ? pair(to[r * ng + 2 * j], to[r * ng + 2 * j + 1]) : 0;
  for (int64_t b = 0; b < nb; ++b)
    for (int r = 0; r < R; ++r) {
      pd[b * R + r] = r < n_rows ? td[r * nb + b] : 0.f;
      pod[b * R + r] = r < n_rows ? tod[r * nb + b] : 0.f;
    }
}

// The panel's arrays of one super-block.
struct KqBlock {
  const uint8_t* wq;   // quads of the super-block: 64 rows of R x 4 bytes
  const uint32_t* sc;  // NG scale pairs x R
  const uint32_t* o;   // NG / 2 offset pairs x R
  const float* d;      // R
  const float* od;     // R
};

// Columns [C0, C0 + N) of super-block b: the int32 sums of the scaled group dots and of the offsets,
// then the float terms into acc. Recurses over the column blocks.
template <typename V, typename KT, int C, int C0>
inline void kqpanel_block(const KqBlock& p, const uint8_t* const* col, int64_t b, const ActOffsets& ao,
                          typename V::F (*acc)[C]) {
  using I = typename V::I;
  using F = typename V::F;
  constexpr int L = V::kLanes, NV = R / L, G = KT::G, NG = 256 / G, NQ = G / 4;
  constexpr int S = int16_quads<QPanel<G, 0, KT::UMax>>();  // quads per int16 sum
  constexpr int CB = 3;  // 6 int32 sums + 6 int16 sums + 2 weight vectors + a broadcast
  constexpr int N = C - C0 < CB ? C - C0 : CB;
  I is[NV][N];
  for (int c = 0; c < N; ++c)
    for (int v = 0; v < NV; ++v) is[v][c] = V::zero_i();
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
            const I prod = _mm256_maddubs_epi16(w[v], y);
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
  // Offsets: pairs of group sums of the act (exact in int16) against the rows' offset pairs.
  alignas(32) int16_t qs16[N][NG];
  for (int c = 0; c < N; ++c) {
    const auto* qs = reinterpret_cast<const int32_t*>(col[C0 + c] + ao.qs) + b * NG;
    for (int i = 0; i < NG; i += 8) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + i));
      _mm_store_si128(reinterpret_cast<__m128i*>(&qs16[c][i]),
                      _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)));
    }
  }
  I os[NV][N];
  for (int j = 0; j < NG / 2; ++j)
    for (int c = 0; c < N; ++c) {
      const I q = V::bcast_i32(&qs16[c][2 * j]);
      for (int v = 0; v < NV; ++v) {
        const I m = _mm256_madd_epi16(V::load_i(p.o + j * R + v * L), q);
        if constexpr (KT::kMins) {
          os[v][c] = j == 0 ? m : V::add_i32(os[v][c], m);
          keep_chain(os[v][c]);
        } else {
          is[v][c] = V::add_i32(is[v][c], m);
          keep_chain(is[v][c]);
        }
      }
    }
  for (int c = 0; c < N; ++c) {
    const F dx = V::bcast(reinterpret_cast<const float*>(col[C0 + c] + ao.dx) + b * NG);
    for (int v = 0; v < NV; ++v) {
      acc[v][C0 + c] = V::fmadd(V::cvt(is[v][c]), V::mul(V::load(p.d + v * L), dx), acc[v][C0 + c]);
      if constexpr (KT::kMins)
        acc[v][C0 + c] = V::fmadd(V::cvt(os[v][c]), V::mul(V::load(p.od + v * L), dx), acc[v][C0 + c]);
    }
  }
  if constexpr (C0 + N < C) kqpanel_block<V, KT, C, C0 + N>(p, col, b, ao, acc);
}

template <typename V, typename KT, int C>
void kqpanel_mul(const MatArgs& a) {
  using F = typename V::F;
  constexpr int L = V::kLanes, NV = R / L, G = KT::G;
  const int64_t K = a.K, ng = K / G, nb = K / 256;
  const auto* psc = reinterpret_cast<const uint32_t*>(a.w + static_cast<size_t>(K) * R);
  const uint32_t* po = psc + ng * R;
  const auto* pd = reinterpret_cast<const float*>(po + ng / 2 * R);
  const float* pod = pd + nb * R;
  const ActView v0 = act_view(a.act, K, G);
  const ActOffsets ao{static_cast<size_t>(reinterpret_cast<const uint8_t*>(v0.dx) - a.act),
                      static_cast<size_t>(reinterpret_cast<const uint8_t*>(v0.sy) - a.act),
                      static_cast<size_t>(reinterpret_cast<const uint8_t*>(v0.qs) - a.act)};
  const uint8_t* col[C];
  for (int c = 0; c < C; ++c) col[c] = a.act + c * a.act_stride;
  F acc[NV][C];
  for (int v = 0; v < NV; ++v)
    for (int c = 0; c < C; ++c) acc[v][c] = V::zero();
  for (int64_t b = 0; b < nb; ++b) {
    const KqBlock p{a.w + b * 256 * R, psc + b * (256 / G) * R, po + b * (128 / G) * R, pd + b * R, pod + b * R};
    kqpanel_block<V, KT, C, 0>(p, col, b, ao, acc);
  }
  for (int c = 0; c < C; ++c)
    for (int v = 0; v < NV; ++v) store_rows<V>(a.out + c * a.out_stride + v * L, acc[v][c], static_cast<int>(a.n_rows) - v * L);
}

template <typename V, typename KT>
struct KqPanelK {
  template <int C>
  static void run(const MatArgs& a) { kqpanel_mul<V, KT, C>(a); }
};

template <typename V, typename KT, typename Dec>
void set_kqpanel(KernelTable* t, DType type, int min_tokens) {
  MatKernel& m = t->mat[static_cast<uint32_t>(type)];
  m.panel_bytes = kqpanel_bytes<KT::G>;
  m.pack_tmp_bytes = kqpanel_tmp_bytes<KT::G>;
  m.pack = kqpack<V, Dec>;
  m.panel_mul = by_cols<KqPanelK<V, KT>, kPanelCols>;
  m.panel_min_tokens = min_tokens;
}

// The k-quant panels of a level without VNNI (over set_qpanels' ones for these types).
template <typename V>
void set_kqpanels(KernelTable* t, int min_tokens) {
  static_assert(!V::kVnni, "VNNI levels keep the per-group panels (one vpdpbusd per quad)");
  set_kqpanel<V, KqType<16, 3, true>, DecQ2_K>(t, DType::Q2_K, min_tokens);
  set_kqpanel<V, KqType<16, 7, false>, DecQ3_K>(t, DType::Q3_K, min_tokens);
  set_kqpanel<V, KqType<32, 15, true>, DecQ4_K>(t, DType::Q4_K, min_tokens);
  set_kqpanel<V, KqType<32, 31, true>, DecQ5_K>(t, DType::Q5_K, min_tokens);
  set_kqpanel<V, KqType<16, 63, false>, DecQ6_K>(t, DType::Q6_K, min_tokens);
}

}  // namespace
}  // namespace ferry::kernels::cpu
