// The decode attention cells kernels (KernelTable::attn_cells_*), written once over a vector-width
// policy V (simd_vec.h): V512 for AVX-512, V256 for the AVX2 levels; head_dim a multiple of V::kLanes.
// Each cell's whole K / V row (all KV heads) is prefetched a few cells / one block ahead: rows of
// consecutive cells are contiguous, but a cell's index comes from the visible list. Same ODR rules as
// generic_impl.h; include after the dot primitives (see simd_vec.h).
#pragma once

#include <immintrin.h>

#include "kernels/cpu/generic_ops_impl.h"
#include "kernels/cpu/simd_vec.h"

namespace ferry::kernels::cpu {
namespace {

constexpr int kScorePfCells = 3;
constexpr int kValueBlock = 8;  // cells whose V rows are applied per pass over the accumulators

// Horizontal sums of 4 vectors: lane i of the result = the sum of a_i's lanes.
inline __m128 hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}
#if defined(__AVX512F__)
inline __m128 hsum4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  const __m512 s01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
  const __m512 s23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
  // Per 128-bit lane: [a0, a1, a2, a3] partial sums.
  const __m512d p01 = _mm512_castps_pd(s01), p23 = _mm512_castps_pd(s23);
  __m512 t = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(p01, p23)), _mm512_castpd_ps(_mm512_unpackhi_pd(p01, p23)));
  t = _mm512_add_ps(t, _mm512_shuffle_f32x4(t, t, 0x4E));
  t = _mm512_add_ps(t, _mm512_shuffle_f32x4(t, t, 0xB1));
  return _mm512_castps512_ps128(t);
}
#endif

inline void prefetch_bytes(const uint8_t* p, size_t bytes) {
  for (size_t off = 0; off < bytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(p) + off, _MM_HINT_T0);
}

// Dots of NG query heads (hd floats each, consecutive) with one K slice; d[g] = the dot of head g.
template <typename V, int NG>
inline void dots_ng(const float* qh, int hd, const uint16_t* kh, float* d) {
  typename V::F acc[4] = {V::zero(), V::zero(), V::zero(), V::zero()};
  for (int i = 0; i < hd; i += V::kLanes) {
    const typename V::F kv = V::load_h(kh + i);
    for (int g = 0; g < NG; ++g) acc[g] = V::fmadd(V::load(qh + g * hd + i), kv, acc[g]);
  }
  _mm_store_ps(d, hsum4(acc[0], acc[1], acc[2], acc[3]));
}

template <typename V>
void attn_cells_scores(const float* q, int n_kv, int group, int hd, const uint8_t* k, size_t k_stride,
                       const int32_t* cells, int n, float scale, float softcap, float* s, int64_t s_stride) {
  const size_t row_bytes = static_cast<size_t>(n_kv) * hd * 2, slice_bytes = static_cast<size_t>(hd) * 2;
  for (int j = 0; j < n && j < kScorePfCells; ++j) prefetch_bytes(k + static_cast<size_t>(cells[j]) * k_stride, row_bytes);
  for (int j = 0; j < n; ++j) {
    // The row kScorePfCells ahead, one head's slice per head computed here (a whole row of prefetches
    // at once stalled on the fill buffers).
    const uint8_t* pf = j + kScorePfCells < n ? k + static_cast<size_t>(cells[j + kScorePfCells]) * k_stride : nullptr;
    const auto* kr = reinterpret_cast<const uint16_t*>(k + static_cast<size_t>(cells[j]) * k_stride);
    for (int h = 0; h < n_kv; ++h) {
      if (pf != nullptr) prefetch_bytes(pf + h * slice_bytes, slice_bytes);
      const uint16_t* kh = kr + static_cast<size_t>(h) * hd;
      for (int g0 = 0; g0 < group; g0 += 4) {
        const int ng = group - g0 < 4 ? group - g0 : 4;
        const float* qh = q + static_cast<size_t>(h * group + g0) * hd;
        alignas(16) float d[4];
        switch (ng) {
          case 4: dots_ng<V, 4>(qh, hd, kh, d); break;
          case 3: dots_ng<V, 3>(qh, hd, kh, d); break;
          case 2: dots_ng<V, 2>(qh, hd, kh, d); break;
          default: dots_ng<V, 1>(qh, hd, kh, d); break;
        }
        for (int g = 0; g < ng; ++g) s[(h * group + g0 + g) * s_stride + j] = softcap_score(d[g] * scale, softcap);
      }
    }
  }
}

// One block of up to kValueBlock cells for query heads [g0, g0 + NG) of KV head h, W vectors of output
// dims at a time.
template <typename V, int W, int NG>
inline void values_dims(const float* p, int64_t p_stride, const uint16_t* const* vr, int nb, int i, float* out,
                        int hd) {
  constexpr int L = V::kLanes;
  typename V::F acc[NG][W];
  for (int g = 0; g < NG; ++g)
    for (int w = 0; w < W; ++w) acc[g][w] = V::load(out + g * hd + i + L * w);
  for (int jj = 0; jj < nb; ++jj) {
    typename V::F v[W];
    for (int w = 0; w < W; ++w) v[w] = V::load_h(vr[jj] + i + L * w);
    for (int g = 0; g < NG; ++g) {
      const typename V::F pw = V::bcast(p + g * p_stride + jj);
      for (int w = 0; w < W; ++w) acc[g][w] = V::fmadd(pw, v[w], acc[g][w]);
    }
  }
  for (int g = 0; g < NG; ++g)
    for (int w = 0; w < W; ++w) V::store(out + g * hd + i + L * w, acc[g][w]);
}

template <typename V, int NG>
inline void values_heads(const float* p, int64_t p_stride, const uint16_t* const* vr, int nb, float* out, int hd) {
  constexpr int L = V::kLanes;
  int i = 0;
  for (; i + 2 * L <= hd; i += 2 * L) values_dims<V, 2, NG>(p, p_stride, vr, nb, i, out, hd);
  if (i < hd) values_dims<V, 1, NG>(p, p_stride, vr, nb, i, out, hd);
}

template <typename V>
void attn_cells_values(const float* p, int64_t p_stride, int n_kv, int group, int hd, const uint8_t* v,
                       size_t v_stride, const int32_t* cells, int n, float* out) {
  const size_t row_bytes = static_cast<size_t>(n_kv) * hd * 2, slice_bytes = static_cast<size_t>(hd) * 2;
  for (int j = 0; j < n && j < kValueBlock; ++j) prefetch_bytes(v + static_cast<size_t>(cells[j]) * v_stride, row_bytes);
  for (int j0 = 0; j0 < n; j0 += kValueBlock) {
    const int nb = n - j0 < kValueBlock ? n - j0 : kValueBlock;
    // The next block's rows, one head's slices per head computed here.
    const int npf = n - (j0 + kValueBlock) < kValueBlock ? n - (j0 + kValueBlock) : kValueBlock;
    const uint16_t* rows[kValueBlock];
    for (int jj = 0; jj < nb; ++jj)
      rows[jj] = reinterpret_cast<const uint16_t*>(v + static_cast<size_t>(cells[j0 + jj]) * v_stride);
    for (int h = 0; h < n_kv; ++h) {
      for (int jj = 0; jj < npf; ++jj)
        prefetch_bytes(v + static_cast<size_t>(cells[j0 + kValueBlock + jj]) * v_stride + h * slice_bytes, slice_bytes);
      const uint16_t* vr[kValueBlock];
      for (int jj = 0; jj < nb; ++jj) vr[jj] = rows[jj] + static_cast<size_t>(h) * hd;
      for (int g0 = 0; g0 < group; g0 += 4) {
        const int ng = group - g0 < 4 ? group - g0 : 4;
        const int head = h * group + g0;
        const float* ph = p + head * p_stride + j0;
        float* oh = out + static_cast<size_t>(head) * hd;
        switch (ng) {
          case 4: values_heads<V, 4>(ph, p_stride, vr, nb, oh, hd); break;
          case 3: values_heads<V, 3>(ph, p_stride, vr, nb, oh, hd); break;
          case 2: values_heads<V, 2>(ph, p_stride, vr, nb, oh, hd); break;
          default: values_heads<V, 1>(ph, p_stride, vr, nb, oh, hd); break;
        }
      }
    }
  }
}

template <typename V>
void set_attn_cells(KernelTable* t) {
  t->attn_cells_scores = attn_cells_scores<V>;
  t->attn_cells_values = attn_cells_values<V>;
  t->attn_cells_hd_multiple = V::kLanes;
}

}  // namespace
}  // namespace ferry::kernels::cpu
