// The float panel (prefill) kernels of F32, F16 and BF16 weights, over the vector-width policy V of
// panel_impl.h (which has the panel layout, the column dispatch and the quantized panels): 16 rows' elements
// widened to f32 and transposed into [K][R], multiplied with the act interleaved by column groups
// (MatKernel::panel_il). Same ODR rules as generic_impl.h; include where panel_impl.h would be.
#pragma once

#include "kernels/cpu/panel_impl.h"

namespace ferry::kernels::cpu {
namespace {

// ---- float panels ----------------------------------------------------------------------------------------
inline size_t fpanel_bytes(int64_t K) { return static_cast<size_t>(K) * R * sizeof(float); }
inline size_t fpanel_tmp_bytes(int64_t) { return 64; }

// Element k of each row -> one panel row of R floats: a chunk of elements of each of the 16 rows is
// loaded and widened to floats (zeros past the row's end), then transposed in registers (gathers would
// take a large share of an F16 prefill matmul).
enum class FKind { kF32, kF16, kBF16 };

// 8 elements of a row from k0 as floats; n < 8: the rest zero.
template <FKind kKind>
inline __m256 load8_as_f32(const uint8_t* row, int64_t k0, int n) {
  if constexpr (kKind == FKind::kF32) {
    return V256::load_n(reinterpret_cast<const float*>(row) + k0, n);
  } else {
    const auto* h = reinterpret_cast<const uint16_t*>(row) + k0;
    __m128i v;
    if (n >= 8) {
      v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h));
    } else {
      alignas(16) uint16_t t[8] = {};
      for (int i = 0; i < n; ++i) t[i] = h[i];
      v = _mm_load_si128(reinterpret_cast<const __m128i*>(t));
    }
    if constexpr (kKind == FKind::kF16) return _mm256_cvtph_ps(v);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
  }
}

// In-lane transpose of two 8 x 8 matrices of 16-bit elements: v[i] = row i (elements 0-7 in the low lane,
// 8-15 in the high lane) -> v[j] = element j of rows 0-7 in the low lane, element 8 + j in the high lane.
inline void transpose8x8x2_epi16(__m256i* v) {
  __m256i a[8], b[8];
  for (int i = 0; i < 4; ++i) {  // a[2i]: elements 0-3 of rows 2i, 2i+1 interleaved; a[2i+1]: 4-7
    a[2 * i] = _mm256_unpacklo_epi16(v[2 * i], v[2 * i + 1]);
    a[2 * i + 1] = _mm256_unpackhi_epi16(v[2 * i], v[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h)  // b[4h + e]: elements 2e, 2e+1 of rows 4h..4h+3
    for (int e = 0; e < 2; ++e) {
      b[4 * h + 2 * e] = _mm256_unpacklo_epi32(a[4 * h + e], a[4 * h + 2 + e]);
      b[4 * h + 2 * e + 1] = _mm256_unpackhi_epi32(a[4 * h + e], a[4 * h + 2 + e]);
    }
  for (int e = 0; e < 4; ++e) {
    v[2 * e] = _mm256_unpacklo_epi64(b[e], b[4 + e]);
    v[2 * e + 1] = _mm256_unpackhi_epi64(b[e], b[4 + e]);
  }
}

// 16-bit weights, 16 elements of each row per step: transposed as halves (half the shuffles of a
// transpose of floats), staged in t, then widened straight into the panel rows (the conversion reads
// memory, leaving the shuffle port to the transposes).
template <FKind kKind>
int64_t fpack_rows16(int64_t K, const uint8_t* w, size_t w_stride, int n_rows, float* p) {
  alignas(32) uint16_t t[2][16][8];  // [row block][element][row]
  int64_t k0 = 0;
  for (; k0 + 16 <= K; k0 += 16) {
    for (int blk = 0; blk < 2; ++blk) {
      __m256i v[8];
      for (int r = 0; r < 8; ++r) {
        const int row = 8 * blk + r;
        v[r] = row < n_rows ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + row * w_stride + 2 * k0))
                            : _mm256_setzero_si256();
      }
      transpose8x8x2_epi16(v);
      for (int j = 0; j < 8; ++j) {
        _mm_store_si128(reinterpret_cast<__m128i*>(t[blk][j]), _mm256_castsi256_si128(v[j]));
        _mm_store_si128(reinterpret_cast<__m128i*>(t[blk][8 + j]), _mm256_extracti128_si256(v[j], 1));
      }
    }
    for (int k = 0; k < 16; ++k)
      for (int blk = 0; blk < 2; ++blk) {
        const uint8_t* h = reinterpret_cast<const uint8_t*>(t[blk][k]);
        _mm256_storeu_ps(p + (k0 + k) * R + 8 * blk, load8_as_f32<kKind>(h, 0, 8));
      }
  }
  return k0;
}

template <FKind kKind>
void fpack_rows(V256, int64_t K, const uint8_t* w, size_t w_stride, int n_rows, uint8_t* panel) {
  auto* p = reinterpret_cast<float*>(panel);
  int64_t start = 0;
  if constexpr (kKind != FKind::kF32) start = fpack_rows16<kKind>(K, w, w_stride, n_rows, p);
  for (int64_t k0 = start; k0 < K; k0 += 8) {
    const int left = K - k0 >= 8 ? 8 : static_cast<int>(K - k0);
    __m256i v[R];
    for (int r = 0; r < R; ++r)
      v[r] = r < n_rows ? _mm256_castps_si256(load8_as_f32<kKind>(w + r * w_stride, k0, left)) : _mm256_setzero_si256();
    transpose8x8_epi32(v);
    transpose8x8_epi32(v + 8);
    for (int i = 0; i < left; ++i) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + (k0 + i) * R), v[i]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + (k0 + i) * R + 8), v[8 + i]);
    }
  }
}

#if defined(__AVX512F__)
template <FKind kKind>
__m512 load16_as_f32(const uint8_t* row, int64_t k0, __mmask16 m) {
  if constexpr (kKind == FKind::kF32) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + k0);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(row) + k0);
    if constexpr (kKind == FKind::kF16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}
template <FKind kKind>
void fpack_rows(V512, int64_t K, const uint8_t* w, size_t w_stride, int n_rows, uint8_t* panel) {
  auto* p = reinterpret_cast<__m512i*>(panel);
  for (int64_t k0 = 0; k0 < K; k0 += 16) {
    const int64_t left = K - k0;
    const __mmask16 m = V512::lane_mask(left >= 16 ? 16 : static_cast<int>(left));
    __m512i v[R];
    for (int r = 0; r < R; ++r)
      v[r] = r < n_rows ? _mm512_castps_si512(load16_as_f32<kKind>(w + r * w_stride, k0, m)) : _mm512_setzero_si512();
    transpose16x16_epi32(v);
    const int nk = left >= 16 ? 16 : static_cast<int>(left);
    for (int i = 0; i < nk; ++i) _mm512_storeu_si512(p + k0 + i, v[i]);
  }
}
#endif

template <typename V, FKind kKind>
void fpack(int64_t K, const uint8_t* w, size_t w_stride, int n_rows, uint8_t* panel, uint8_t*) {
  fpack_rows<kKind>(V{}, K, w, w_stride, n_rows, panel);
}

// NB panels (16 or 32 rows) x C interleaved act columns: NB * R / L row vectors x C accumulators, one
// chain per (row vector, column), k in order. Per k: the row vectors' loads and C broadcasts from one
// act line for their FMAs, all addressed from three pointers (with C column pointers the compiler
// spilled them to vector registers and paid two moves per k on the FMA ports).
template <typename V, int NB, int C, int S>
void fpanel_il_mul(const MatArgs& a) {
  using F = typename V::F;
  constexpr int L = V::kLanes, NVP = R / L, NV = NB * NVP;
  const auto* p0 = reinterpret_cast<const float*>(a.w);
  const auto* p1 = reinterpret_cast<const float*>(a.w + a.w_stride);
  const auto* x = reinterpret_cast<const float*>(a.act);
  const int n_rows = static_cast<int>(a.n_rows);
  F acc[NV][C];
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[v][c] = a.accumulate ? load_rows<V>(a.out + c * a.out_stride + v * L, n_rows - v * L) : V::zero();
  for (int64_t k = 0; k < a.K; ++k) {
    F w[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) w[v] = V::load((v < NVP ? p0 : p1) + k * R + (v % NVP) * L);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const F xv = V::bcast(x + k * S + c);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[v][c] = V::fmadd(w[v], xv, acc[v][c]);
    }
  }
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) store_rows<V>(a.out + c * a.out_stride + v * L, acc[v][c], n_rows - v * L);
}

template <typename V, int NB, int S>
struct FPanelIlK {
  template <int C>
  static void run(const MatArgs& a) { fpanel_il_mul<V, NB, C, S>(a); }
};

// Float panels: panel_il on one or two panels (V512 multiplies a pair in one call; V256's 16 registers
// hold one panel's 2 x S accumulators, so a pair is two calls over the same act block, from L1).
template <typename V, int S>
void fpanel_il(const MatArgs& a) {
  if constexpr (V::kLanes == 16) {
    if (a.n_rows > R) return by_cols<FPanelIlK<V, 2, S>, S>(a);
    by_cols<FPanelIlK<V, 1, S>, S>(a);
  } else {
    MatArgs b = a;
    b.n_rows = a.n_rows < R ? a.n_rows : R;
    by_cols<FPanelIlK<V, 1, S>, S>(b);
    if (a.n_rows > R) {
      b.w = a.w + a.w_stride;
      b.n_rows = a.n_rows - R;
      b.out = a.out + R;
      by_cols<FPanelIlK<V, 1, S>, S>(b);
    }
  }
}

// ---- registration ----------------------------------------------------------------------------------------
// S interleaved act columns per panel_il call; K walked in blocks of k_block elements (the panels'
// block stays in cache while every column group passes over it).
template <typename V, int S>
void set_fpanel(KernelTable* t, DType type, PackFn pack, int min_tokens, int64_t k_block) {
  MatKernel& m = t->mat[static_cast<uint32_t>(type)];
  m.panel_bytes = fpanel_bytes;
  m.pack_tmp_bytes = fpanel_tmp_bytes;
  m.pack = pack;
  m.panel_mul = nullptr;
  m.panel_min_tokens = min_tokens;
  m.panel_il = fpanel_il<V, S>;
  m.panel_il_cols = S;
  m.panel_k_block = k_block;
}

template <typename V, int S>
void set_fpanels(KernelTable* t, int min_tokens, int64_t k_block) {
  set_fpanel<V, S>(t, DType::F32, fpack<V, FKind::kF32>, min_tokens, k_block);
  set_fpanel<V, S>(t, DType::F16, fpack<V, FKind::kF16>, min_tokens, k_block);
  set_fpanel<V, S>(t, DType::BF16, fpack<V, FKind::kBF16>, min_tokens, k_block);
}

}  // namespace
}  // namespace ferry::kernels::cpu
