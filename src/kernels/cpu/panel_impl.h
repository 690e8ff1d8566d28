// The panel (prefill) kernels, written once over a vector-width policy V (simd_vec.h: V256 for the AVX2
// levels, V512 for AVX-512; AMX reuses the pack). kPanelRows = R = 16 weight rows are unpacked once into
// a panel in which each row owns one 32-bit lane of every R-lane row of the panel (one zmm, or two ymm),
// then multiplied with up to kPanelCols act columns per call:
//   quantized: u32 quads [K/4][R] (4 consecutive levels of a row per lane), scale[K/G][R], min[K/G][R]
//              as floats. Per group: G/4 int8 dots per column with the act quad broadcast give R rows'
//              exact integer sums at once; then one FMA applies scale * dx (and one more min * sy). No
//              horizontal sums, and the per-group float work is shared by R rows (the direct kernel
//              pays it per row).
//   float:     [K][R] f32 (F32, F16 and BF16 weights): one FMA per row vector and column per element,
//              the act broadcast; the act comes interleaved by column groups (MatKernel::panel_il).
//              Those are in panel_float_impl.h, which includes this file.
// Integer dots: with VNNI (V::kVnni: vpdpbusd on zmm, or on ymm with AVX-VNNI / AVX512-VL) one
// instruction per quad and column into int32, exact for levels up to 255. Without it (plain AVX2),
// vpmaddubsw gives int16 pairs that saturate past 32767: the products of up to int16_quads() quads
// are summed in int16 (exact while |sum| <= 32767, from the type's largest level), then widened once by
// vpmaddwd; Q8_0 levels (up to 255 as u = q + 128) do not fit, so that panel holds the signed levels and
// multiplies |w| by the act with w's sign, as ggml's AVX2 dot does.
// Register blocking: V512 keeps all columns' accumulators in its 32 registers; on V256's 16 registers a
// call walks the columns in blocks of qpanel_reg_cols() per group, with the float accumulators in L1
// (one load and store per group and column, against G/4 dots).
// Same ODR rules as generic_impl.h; include after the dot primitives (see simd_vec.h).
#pragma once

#include <immintrin.h>

#include <type_traits>

#include "kernels/cpu/simd_vec.h"

namespace ferry::kernels::cpu {
namespace {

constexpr int R = kPanelRows;

// ---- quantized panels: unpack and pack ----------------------------------------------------------------
template <int G>
size_t qpanel_bytes(int64_t K) {
  return static_cast<size_t>(K) * R + 2 * static_cast<size_t>(K / G) * R * sizeof(float);
}
template <int G>
size_t qpanel_tmp_bytes(int64_t K) {
  return static_cast<size_t>(K) * R + 2 * static_cast<size_t>(K / G) * R * sizeof(float) + 64;
}

// k-quants: one row -> u (K levels <= 63, value = scale * u + min), sc and mn (K/G each).
template <typename Dec>
void unpack_row_kquant(const uint8_t* row, int64_t K, uint8_t* u, float* sc, float* mn) {
  constexpr int NG = 256 / Dec::G;
  const auto* blocks = reinterpret_cast<const typename Dec::BlockT*>(row);
  for (int64_t i = 0; i < K / 256; ++i) {
    __m256i v[8];
    alignas(32) float s[16], m[16];
    Dec::decode(blocks[i], v, s, m);
    for (int j = 0; j < 8; ++j) _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + 256 * i + 32 * j), v[j]);
    for (int g = 0; g < NG; ++g) {
      sc[i * NG + g] = s[g];
      mn[i * NG + g] = m[g];
    }
  }
}

// Legacy types: one row -> levels, sc and mn (K/32 each), the scales 16 blocks at a time (one gather
// of the block headers). Unsigned: u (Q8_0: q + 128); kSigned: u - Dec::kOff (Q8_0: the raw q; the
// signed panels of AMX and of the AVX2 Q8_0 kernel). mn = -kOff * d where the type has no min.
template <typename Dec, bool kSigned = false>
void unpack_row_legacy(const uint8_t* row, int64_t K, uint8_t* u, float* sc, float* mn) {
  const auto* blocks = reinterpret_cast<const typename Dec::BlockT*>(row);
  const __m256i off = _mm256_set1_epi8(static_cast<char>(kSigned ? Dec::kOff : 0));  // 128 wraps to -128
  const int64_t nb = K / 32;
  for (int64_t b0 = 0; b0 < nb; b0 += 16) {
    const int n = static_cast<int>(nb - b0 < 16 ? nb - b0 : 16);
    alignas(32) float d[16], m[16];
    block_scales16<Dec>(blocks + b0, n, d, m);
    for (int i = 0; i < n; ++i) {
      sc[b0 + i] = d[i];
      mn[b0 + i] = Dec::kMin ? m[i] : -static_cast<float>(Dec::kOff) * d[i];
      const __m256i lv = _mm256_sub_epi8(Dec::levels(blocks[b0 + i]), off);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + 32 * (b0 + i)), lv);
    }
  }
}

// In-place transpose of an 8 x 8 matrix of 32-bit elements (v[i] = row i).
inline void transpose8x8_epi32(__m256i* v) {
  __m256i a[8], b[8];
  for (int k = 0; k < 4; ++k) {
    a[2 * k] = _mm256_unpacklo_epi32(v[2 * k], v[2 * k + 1]);
    a[2 * k + 1] = _mm256_unpackhi_epi32(v[2 * k], v[2 * k + 1]);
  }
  // b[4h + c]: column 4L + c of rows 4h..4h+3 in 128-bit lane L.
  for (int h = 0; h < 2; ++h) {
    b[4 * h + 0] = _mm256_unpacklo_epi64(a[4 * h], a[4 * h + 2]);
    b[4 * h + 1] = _mm256_unpackhi_epi64(a[4 * h], a[4 * h + 2]);
    b[4 * h + 2] = _mm256_unpacklo_epi64(a[4 * h + 1], a[4 * h + 3]);
    b[4 * h + 3] = _mm256_unpackhi_epi64(a[4 * h + 1], a[4 * h + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    v[c] = _mm256_permute2x128_si256(b[c], b[4 + c], 0x20);
    v[4 + c] = _mm256_permute2x128_si256(b[c], b[4 + c], 0x31);
  }
}

// Unpacked rows tu[r * K ..] (n_rows of them) -> the panel's quads. Each 32-byte chunk (8 quads) of the
// 16 rows is transposed in registers (rows past n_rows are zero): 48 shuffles, far fewer than gathers.
inline void pack_quads(V256, const uint8_t* tu, int64_t K, int n_rows, uint8_t* panel) {
  for (int64_t k0 = 0; k0 < K; k0 += 32) {
    __m256i v[R];
    for (int r = 0; r < R; ++r)
      v[r] = r < n_rows ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tu + r * K + k0)) : _mm256_setzero_si256();
    transpose8x8_epi32(v);
    transpose8x8_epi32(v + 8);
    uint8_t* dst = panel + k0 * R;  // quad k0 / 4 starts at byte (k0 / 4) * 4 * R
    for (int i = 0; i < 8; ++i) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 64 * i), v[i]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 64 * i + 32), v[8 + i]);
    }
  }
}

#if defined(__AVX512F__)
// In-place transpose of a 16 x 16 matrix of 32-bit elements (v[i] = row i): 64 shuffles.
inline void transpose16x16_epi32(__m512i* v) {
  __m512i a[16], b[16];
  for (int k = 0; k < 8; ++k) {
    a[2 * k] = _mm512_unpacklo_epi32(v[2 * k], v[2 * k + 1]);
    a[2 * k + 1] = _mm512_unpackhi_epi32(v[2 * k], v[2 * k + 1]);
  }
  // b[4g + c]: column 4L + c of rows 4g..4g+3 in 128-bit lane L.
  for (int g = 0; g < 4; ++g) {
    b[4 * g + 0] = _mm512_unpacklo_epi64(a[4 * g], a[4 * g + 2]);
    b[4 * g + 1] = _mm512_unpackhi_epi64(a[4 * g], a[4 * g + 2]);
    b[4 * g + 2] = _mm512_unpacklo_epi64(a[4 * g + 1], a[4 * g + 3]);
    b[4 * g + 3] = _mm512_unpackhi_epi64(a[4 * g + 1], a[4 * g + 3]);
  }
  // 4 x 4 transpose of 128-bit lanes across b[c], b[4 + c], b[8 + c], b[12 + c].
  for (int c = 0; c < 4; ++c) {
    const __m512i y0 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0x44), y1 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0xEE);
    const __m512i y2 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0x44);
    const __m512i y3 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0xEE);
    v[c] = _mm512_shuffle_i32x4(y0, y2, 0x88);
    v[4 + c] = _mm512_shuffle_i32x4(y0, y2, 0xDD);
    v[8 + c] = _mm512_shuffle_i32x4(y1, y3, 0x88);
    v[12 + c] = _mm512_shuffle_i32x4(y1, y3, 0xDD);
  }
}

// 64-byte chunks (16 quads) of the 16 rows per transpose; a 32-byte tail (odd block count) goes
// through the low halves.
inline void pack_quads(V512, const uint8_t* tu, int64_t K, int n_rows, uint8_t* panel) {
  auto* pq = reinterpret_cast<__m512i*>(panel);
  for (int64_t k0 = 0; k0 < K; k0 += 64) {
    const bool half = K - k0 < 64;
    __m512i v[R];
    for (int r = 0; r < R; ++r) {
      if (r >= n_rows) {
        v[r] = _mm512_setzero_si512();
      } else if (half) {
        v[r] = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tu + r * K + k0)));
      } else {
        v[r] = _mm512_loadu_si512(tu + r * K + k0);
      }
    }
    transpose16x16_epi32(v);
    const int nq = half ? 8 : 16;
    for (int i = 0; i < nq; ++i) _mm512_storeu_si512(pq + k0 / 4 + i, v[i]);
  }
}
#endif

// Packs n_rows (<= R) weight rows, unpacked by Unpack into levels, scales and mins, into a panel (layout
// above); rows past n_rows are zero (their outputs are never stored). tmp: qpanel_tmp_bytes(K).
template <typename V, int G, void (*Unpack)(const uint8_t*, int64_t, uint8_t*, float*, float*)>
void qpack(int64_t K, const uint8_t* w, size_t w_stride, int n_rows, uint8_t* panel, uint8_t* tmp) {
  const int64_t ng = K / G;
  uint8_t* tu = tmp;
  auto* tsc = reinterpret_cast<float*>(tmp + static_cast<size_t>(K) * R);
  float* tmn = tsc + ng * R;
  for (int r = 0; r < n_rows; ++r) Unpack(w + r * w_stride, K, tu + r * K, tsc + r * ng, tmn + r * ng);
  pack_quads(V{}, tu, K, n_rows, panel);
  auto* psc = reinterpret_cast<float*>(panel + static_cast<size_t>(K) * R);
  float* pmn = psc + ng * R;
  for (int64_t g = 0; g < ng; ++g)
    for (int r = 0; r < R; ++r) {
      psc[g * R + r] = r < n_rows ? tsc[r * ng + g] : 0.f;
      pmn[g * R + r] = r < n_rows ? tmn[r * ng + g] : 0.f;
    }
}

// The first `rows` lanes of p (all past L: none; none for rows <= 0), others 0; and the store of them.
template <typename V>
inline typename V::F load_rows(const float* p, int rows) {
  return rows >= V::kLanes ? V::load(p) : rows > 0 ? V::load_n(p, rows) : V::zero();
}
template <typename V>
inline void store_rows(float* p, typename V::F v, int rows) {
  if (rows >= V::kLanes) {
    V::store(p, v);
  } else if (rows > 0) {
    V::store_n(p, v, rows);
  }
}

// An empty asm that claims to change v: the integer adds of a dot chain stay a chain. Without it GCC's
// reassociation rebalances the chain of int16 sums into a tree, computing every product of a group first
// and spilling them to the stack (16 registers cannot hold them).
template <typename I>
inline void keep_chain(I& v) {
  asm("" : "+x"(v));
}

// ---- quantized panels: multiply ----------------------------------------------------------------------
// A weight type as the panel kernel sees it: group size, the offset folded into the integer dot
// (value = scale * (u - Off): Q4_0 8, Q5_0 16, Q8_0 as u = q + 128: 128), the largest level, and
// whether the panel holds signed levels (value = scale * q; vpmaddubsw path for Q8_0).
template <int kG, int kOff, int kUMax, bool kSignedLevels = false>
struct QPanel {
  static constexpr int G = kG, Off = kOff, UMax = kUMax;
  static constexpr bool kSigned = kSignedLevels;
  static constexpr bool kMin = Off == 0 && !kSigned;  // value = scale * u + min: one more FMA with sy
};

// Quads of one group whose vpmaddubsw pair sums (each at most 2 * UMax * 127) can be added in int16.
template <typename QT>
constexpr int int16_quads() {
  constexpr int pair = 2 * (QT::kSigned ? 128 : QT::UMax) * 127;
  constexpr int s = 32767 / pair;
  return s < 1 ? 1 : (s > QT::G / 4 ? QT::G / 4 : s);
}

// Columns per register block of a group step (see the header).
template <typename V, typename QT>
constexpr int qpanel_reg_cols() {
  if constexpr (V::kLanes == 16) {
    return kPanelCols;
  } else if constexpr (V::kVnni) {
    return 3;  // 12 int32 chains (two per row vector) + 2 weight vectors + a broadcast
  } else {
    return int16_quads<QT>() * 4 >= QT::G ? 3 : 3;  // int16 sums (+ int32 sums when a group needs two)
  }
}

// Where a column's act arrays lie (the same offsets for every column).
struct ActOffsets {
  size_t dx, sy, qs;
};
// A column's arrays as offsets from its base (every column has the same layout), and the C columns' bases:
// the panel kernels address every array from one base pointer per column (with 8 columns x 4 arrays of
// pointers the compiler spilled them to vector registers).
inline ActOffsets act_offsets(const uint8_t* act, int64_t K, int G) {
  const ActView v = act_view(act, K, G);
  return {static_cast<size_t>(reinterpret_cast<const uint8_t*>(v.dx) - act),
          static_cast<size_t>(reinterpret_cast<const uint8_t*>(v.sy) - act),
          static_cast<size_t>(reinterpret_cast<const uint8_t*>(v.qs) - act)};
}
template <int C>
inline void column_bases(const MatArgs& a, const uint8_t** col) {
  for (int c = 0; c < C; ++c) col[c] = a.act + c * a.act_stride;
}

// Columns [C0, C0 + N) of one group g: integer dots of the group's quads wq, then the float epilogue
// into acc. Recurses over the column blocks.
template <typename V, typename QT, int C, int C0>
inline void qpanel_group(const uint8_t* wq, const uint8_t* const* col, int64_t g, const ActOffsets& o,
                         const typename V::F* sc, const float* mn, typename V::F (*acc)[C]) {
  using I = typename V::I;
  using F = typename V::F;
  constexpr int L = V::kLanes, NV = R / L, G = QT::G, NQ = G / 4;
  constexpr int CB = qpanel_reg_cols<V, QT>();
  constexpr int N = C - C0 < CB ? C - C0 : CB;
  I ia[NV][N];
  if constexpr (V::kVnni) {
    // Seeded with -Off * qs (exact offset fold); a second chain per accumulator over the odd quads
    // (vpdpbusd's latency would otherwise bound the kernel).
    I ib[NV][N];
    for (int c = 0; c < N; ++c) {
      I seed = V::zero_i();
      if constexpr (QT::Off > 0) seed = V::mullo_i32(V::bcast_i32(col[C0 + c] + o.qs + 4 * g), V::set1_i32(-QT::Off));
      for (int v = 0; v < NV; ++v) {
        ia[v][c] = seed;
        ib[v][c] = V::zero_i();
      }
    }
#pragma GCC unroll 16
    for (int k = 0; k < NQ; k += 2) {
      I w0[NV], w1[NV];
      for (int v = 0; v < NV; ++v) {
        w0[v] = V::load_i(wq + (k * R + v * L) * 4);
        w1[v] = V::load_i(wq + ((k + 1) * R + v * L) * 4);
      }
#pragma GCC unroll 16
      for (int c = 0; c < N; ++c) {
        const uint8_t* y = col[C0 + c] + g * G + 4 * k;
        const I y0 = V::bcast_i32(y), y1 = V::bcast_i32(y + 4);
        for (int v = 0; v < NV; ++v) {
          ia[v][c] = V::dpbusd(ia[v][c], w0[v], y0);
          ib[v][c] = V::dpbusd(ib[v][c], w1[v], y1);
        }
      }
    }
    for (int c = 0; c < N; ++c)
      for (int v = 0; v < NV; ++v) ia[v][c] = V::add_i32(ia[v][c], ib[v][c]);
  } else {
    // vpmaddubsw products summed in int16 over S quads, widened by vpmaddwd; the offset fold after.
    constexpr int S = int16_quads<QT>();
    const I ones = _mm256_set1_epi16(1);
#pragma GCC unroll 16
    for (int k0 = 0; k0 < NQ; k0 += S) {
      I t[NV][N];
#pragma GCC unroll 16
      for (int j = 0; j < S; ++j) {
        const int k = k0 + j;
        I w[NV], wa[NV];
        for (int v = 0; v < NV; ++v) {
          w[v] = V::load_i(wq + (k * R + v * L) * 4);
          if constexpr (QT::kSigned) wa[v] = _mm256_sign_epi8(w[v], w[v]);
        }
#pragma GCC unroll 16
        for (int c = 0; c < N; ++c) {
          const I y = V::bcast_i32(col[C0 + c] + g * G + 4 * k);
          for (int v = 0; v < NV; ++v) {
            I p;
            if constexpr (QT::kSigned) {
              p = _mm256_maddubs_epi16(wa[v], _mm256_sign_epi8(y, w[v]));
            } else {
              p = _mm256_maddubs_epi16(w[v], y);
            }
            t[v][c] = j == 0 ? p : _mm256_add_epi16(t[v][c], p);
            keep_chain(t[v][c]);
          }
        }
      }
      for (int c = 0; c < N; ++c)
        for (int v = 0; v < NV; ++v) {
          const I wide = _mm256_madd_epi16(t[v][c], ones);
          ia[v][c] = k0 == 0 ? wide : V::add_i32(ia[v][c], wide);
        }
    }
    if constexpr (QT::Off > 0) {
      for (int c = 0; c < N; ++c) {
        const I corr = V::mullo_i32(V::bcast_i32(col[C0 + c] + o.qs + 4 * g), V::set1_i32(-QT::Off));
        for (int v = 0; v < NV; ++v) ia[v][c] = V::add_i32(ia[v][c], corr);
      }
    }
  }
  for (int c = 0; c < N; ++c) {
    const F dx = V::bcast(reinterpret_cast<const float*>(col[C0 + c] + o.dx + 4 * g));
    for (int v = 0; v < NV; ++v) acc[v][C0 + c] = V::fmadd(V::cvt(ia[v][c]), V::mul(sc[v], dx), acc[v][C0 + c]);
    if constexpr (QT::kMin) {
      const F sy = V::bcast(reinterpret_cast<const float*>(col[C0 + c] + o.sy + 4 * g));
      for (int v = 0; v < NV; ++v) acc[v][C0 + c] = V::fmadd(V::load(mn + v * L), sy, acc[v][C0 + c]);
    }
  }
  if constexpr (C0 + N < C) qpanel_group<V, QT, C, C0 + N>(wq, col, g, o, sc, mn, acc);
}

template <typename V, typename QT, int C>
void qpanel_mul(const MatArgs& a) {
  using F = typename V::F;
  constexpr int L = V::kLanes, NV = R / L, G = QT::G;
  const int64_t K = a.K, ng = K / G;
  const uint8_t* pq = a.w;  // group g's quads: G / 4 rows of R x 4 bytes at pq + g * G * R
  const auto* psc = reinterpret_cast<const float*>(a.w + static_cast<size_t>(K) * R);
  const float* pmn = psc + ng * R;
  const ActOffsets o = act_offsets(a.act, K, G);
  const uint8_t* col[C];
  column_bases<C>(a, col);
  F acc[NV][C];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v)
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) acc[v][c] = V::zero();
  for (int64_t g = 0; g < ng; ++g) {
    F sc[NV];
    for (int v = 0; v < NV; ++v) sc[v] = V::load(psc + g * R + v * L);
    qpanel_group<V, QT, C, 0>(pq + g * G * R, col, g, o, sc, pmn + g * R, acc);
  }
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) store_rows<V>(a.out + c * a.out_stride + v * L, acc[v][c], static_cast<int>(a.n_rows) - v * L);
}

// Column-count dispatch: KT::run<C> for C = 1 .. kMax (n_cols past kMax: kMax).
template <typename KT, int kMax, int C = 1>
void by_cols(const MatArgs& a) {
  if constexpr (C < kMax) {
    if (a.n_cols <= C) return KT::template run<C>(a);
    return by_cols<KT, kMax, C + 1>(a);
  } else {
    KT::template run<C>(a);
  }
}

template <typename V, typename QT>
struct QPanelK {
  template <int C>
  static void run(const MatArgs& a) { qpanel_mul<V, QT, C>(a); }
};
// ---- registration ----------------------------------------------------------------------------------------
using PackFn = void (*)(int64_t, const uint8_t*, size_t, int, uint8_t*, uint8_t*);

template <typename V, typename QT>
void set_qpanel(KernelTable* t, DType type, PackFn pack, int min_tokens) {
  MatKernel& m = t->mat[static_cast<uint32_t>(type)];
  m.panel_bytes = qpanel_bytes<QT::G>;
  m.pack_tmp_bytes = qpanel_tmp_bytes<QT::G>;
  m.pack = pack;
  m.panel_mul = by_cols<QPanelK<V, QT>, kPanelCols>;
  m.panel_min_tokens = min_tokens;
  m.panel_act_u8 = false;  // over a lower level's kernel that may have taken unsigned act bytes
}

// The quantized panels of every type, levels and integer dots as V does them. Q8_0 without VNNI: the
// signed panel (see the header).
template <typename V>
void set_qpanels(KernelTable* t, int min_tokens) {
  using Q8 = std::conditional_t<V::kVnni, QPanel<32, 128, 255>, QPanel<32, 0, 128, true>>;
  set_qpanel<V, QPanel<32, 8, 15>>(t, DType::Q4_0, qpack<V, 32, unpack_row_legacy<DecQ4_0>>, min_tokens);
  set_qpanel<V, QPanel<32, 0, 15>>(t, DType::Q4_1, qpack<V, 32, unpack_row_legacy<DecQ4_1>>, min_tokens);
  set_qpanel<V, QPanel<32, 16, 31>>(t, DType::Q5_0, qpack<V, 32, unpack_row_legacy<DecQ5_0>>, min_tokens);
  set_qpanel<V, QPanel<32, 0, 31>>(t, DType::Q5_1, qpack<V, 32, unpack_row_legacy<DecQ5_1>>, min_tokens);
  set_qpanel<V, Q8>(t, DType::Q8_0, qpack<V, 32, unpack_row_legacy<DecQ8_0, Q8::kSigned>>, min_tokens);
  set_qpanel<V, QPanel<32, 16, 28>>(t, DType::MXFP4, qpack<V, 32, unpack_row_legacy<DecMXFP4>>, min_tokens);
  set_qpanel<V, QPanel<16, 0, 3>>(t, DType::Q2_K, qpack<V, 16, unpack_row_kquant<DecQ2_K>>, min_tokens);
  set_qpanel<V, QPanel<16, 0, 7>>(t, DType::Q3_K, qpack<V, 16, unpack_row_kquant<DecQ3_K>>, min_tokens);
  set_qpanel<V, QPanel<32, 0, 15>>(t, DType::Q4_K, qpack<V, 32, unpack_row_kquant<DecQ4_K>>, min_tokens);
  set_qpanel<V, QPanel<32, 0, 31>>(t, DType::Q5_K, qpack<V, 32, unpack_row_kquant<DecQ5_K>>, min_tokens);
  set_qpanel<V, QPanel<16, 0, 63>>(t, DType::Q6_K, qpack<V, 16, unpack_row_kquant<DecQ6_K>>, min_tokens);
}

}  // namespace
}  // namespace ferry::kernels::cpu
