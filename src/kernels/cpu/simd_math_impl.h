// Vector math on 256-bit vectors shared by the AVX2 and AVX-512 files: exp (Cephes-style polynomial,
// ~2 ulp on the range that matters), GLU activations, softmax and F16 attention rows. Same ODR rules
// as generic_impl.h.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/generic_ops_impl.h"
#include "kernels/cpu/simd_direct_impl.h"

namespace ferry::kernels::cpu {
namespace {

// exp(x) for x in [-87.3, 88.3] (clamped outside: a softmax or sigmoid tail of ~1e-38 instead of 0).
inline __m256 exp256(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

inline __m256 round_h8(__m256 x) { return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT)); }

// silu(g) * u, and ggml's F16 GELU times u (see KernelTable::glu). gelu(h) = h * sigmoid(2u) with
// u = sqrt(2/pi) * h * (1 + 0.044715 h^2), the same function as 0.5 h (1 + tanh(u)).
inline void v_glu(const float* g, const float* u, float* y, int64_t n, Activation act) {
  if (act == Activation::kSwigluOai) return g_swiglu_oai(g, u, y, n);
  int64_t i = 0;
  const __m256 one = _mm256_set1_ps(1.f);
  if (act == Activation::kSilu) {
    for (; i + 8 <= n; i += 8) {
      const __m256 x = _mm256_loadu_ps(g + i);
      const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), x));
      const __m256 s = _mm256_div_ps(x, _mm256_add_ps(one, e));
      _mm256_storeu_ps(y + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
  } else {
    const __m256 k2 = _mm256_set1_ps(-2.f * 0.79788456080286535587989211986876f), c = _mm256_set1_ps(0.044715f);
    const __m256 lo = _mm256_set1_ps(-10.f), hi = _mm256_set1_ps(10.f);
    for (; i + 8 <= n; i += 8) {
      const __m256 x = _mm256_loadu_ps(g + i);
      const __m256 h = round_h8(x);
      const __m256 inner = _mm256_mul_ps(h, _mm256_fmadd_ps(_mm256_mul_ps(c, h), h, one));
      const __m256 e = exp256(_mm256_mul_ps(k2, inner));
      __m256 r = round_h8(_mm256_div_ps(h, _mm256_add_ps(one, e)));
      r = _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
      r = _mm256_blendv_ps(r, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LE_OQ));
      _mm256_storeu_ps(y + i, _mm256_mul_ps(r, _mm256_loadu_ps(u + i)));
    }
  }
  if (i < n) g_glu(g + i, u + i, y + i, n - i, act);
}

inline void v_round_f16(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, round_h8(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] = h2f(f2h(x[i]));
}

inline void v_softmax(float* s, int n, float sink) {
  int j = 0;
  __m256 mv = _mm256_set1_ps(-__builtin_inff());
  for (; j + 8 <= n; j += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(s + j));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  float mx = _mm_cvtss_f32(m4);
  for (; j < n; ++j) mx = s[j] > mx ? s[j] : mx;
  mx = sink > mx ? sink : mx;
  const __m256 mb = _mm256_set1_ps(mx);
  __m256 sv = _mm256_setzero_ps();
  j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), mb));
    _mm256_storeu_ps(s + j, e);
    sv = _mm256_add_ps(sv, e);
  }
  // Sum in double like ggml (8 float lanes of partial sums first: the same to ~1e-7).
  double sum = hsum256(sv);
  for (; j < n; ++j) {
    s[j] = __builtin_expf(s[j] - mx);
    sum += s[j];
  }
  sum += static_cast<double>(__builtin_expf(sink - mx));  // the sink (0 for -inf: none)
  const float inv = static_cast<float>(1.0 / sum);
  g_scale(s, inv, s, n);
  v_round_f16(s, s, n);
}

inline float v_exp_sum(float* s, int64_t n, float m) {
  const __m256 mb = _mm256_set1_ps(m);
  __m256 sv = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), mb));
    _mm256_storeu_ps(s + j, e);
    sv = _mm256_add_ps(sv, e);
  }
  float sum = hsum256(sv);
  for (; j < n; ++j) sum += (s[j] = __builtin_expf(s[j] - m));
  return sum;
}

// R rows of c at once: per k, a broadcast of each row's a and FMAs with 16 (then 8) columns of b.
template <int R>
inline void v_gemm_rows(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t n,
                        int64_t k, bool accumulate) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m256 c0[R], c1[R];
    for (int r = 0; r < R; ++r) {
      c0[r] = accumulate ? _mm256_loadu_ps(c + r * ldc + j) : _mm256_setzero_ps();
      c1[r] = accumulate ? _mm256_loadu_ps(c + r * ldc + j + 8) : _mm256_setzero_ps();
    }
    for (int64_t kk = 0; kk < k; ++kk) {
      const __m256 b0 = _mm256_loadu_ps(b + kk * ldb + j), b1 = _mm256_loadu_ps(b + kk * ldb + j + 8);
      for (int r = 0; r < R; ++r) {
        const __m256 av = _mm256_broadcast_ss(a + r * lda + kk);
        c0[r] = _mm256_fmadd_ps(av, b0, c0[r]);
        c1[r] = _mm256_fmadd_ps(av, b1, c1[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_ps(c + r * ldc + j, c0[r]);
      _mm256_storeu_ps(c + r * ldc + j + 8, c1[r]);
    }
  }
  for (; j + 8 <= n; j += 8) {
    __m256 c0[R];
    for (int r = 0; r < R; ++r) c0[r] = accumulate ? _mm256_loadu_ps(c + r * ldc + j) : _mm256_setzero_ps();
    for (int64_t kk = 0; kk < k; ++kk) {
      const __m256 b0 = _mm256_loadu_ps(b + kk * ldb + j);
      for (int r = 0; r < R; ++r) c0[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(a + r * lda + kk), b0, c0[r]);
    }
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(c + r * ldc + j, c0[r]);
  }
  if (j < n) g_gemm_f32(a, lda, b + j, ldb, c + j, ldc, R, n - j, k, accumulate);
}
inline void v_gemm_f32(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t m,
                       int64_t n, int64_t k, bool accumulate) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) v_gemm_rows<4>(a + i * lda, lda, b, ldb, c + i * ldc, ldc, n, k, accumulate);
  switch (m - i) {
    case 3: v_gemm_rows<3>(a + i * lda, lda, b, ldb, c + i * ldc, ldc, n, k, accumulate); break;
    case 2: v_gemm_rows<2>(a + i * lda, lda, b, ldb, c + i * ldc, ldc, n, k, accumulate); break;
    case 1: v_gemm_rows<1>(a + i * lda, lda, b, ldb, c + i * ldc, ldc, n, k, accumulate); break;
    default: break;
  }
}

inline void v_f32_to_f16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) y[i] = f2h(x[i]);
}

inline __m256 load_h8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Scores of ng query heads against each visible K row (hd a multiple of 8 on the vector path).
inline void v_attn_scores(const float* q, int64_t q_stride, int ng, const uint8_t* k, size_t k_stride,
                          const int32_t* cells, int n, int hd, float scale, float softcap, float* s) {
  if (hd % 8 != 0 || ng > 16) {
    g_attn_scores(q, q_stride, ng, k, k_stride, cells, n, hd, scale, softcap, s);
    return;
  }
  for (int j = 0; j < n; ++j) {
    const auto* kr = reinterpret_cast<const uint16_t*>(k + static_cast<size_t>(cells[j]) * k_stride);
    __m256 acc[16];
    for (int g = 0; g < ng; ++g) acc[g] = _mm256_setzero_ps();
    for (int i = 0; i < hd; i += 8) {
      const __m256 kv = load_h8(kr + i);
      for (int g = 0; g < ng; ++g) acc[g] = _mm256_fmadd_ps(_mm256_loadu_ps(q + g * q_stride + i), kv, acc[g]);
    }
    for (int g = 0; g < ng; ++g) s[g * n + j] = softcap_score(hsum256(acc[g]) * scale, softcap);
  }
}

inline void v_attn_values(const float* p, int ng, const uint8_t* v, size_t v_stride, const int32_t* cells, int n,
                          int hd, float* out) {
  if (hd % 8 != 0) {
    g_attn_values(p, ng, v, v_stride, cells, n, hd, out);
    return;
  }
  for (int i = 0; i < ng * hd; ++i) out[i] = 0.f;
  // Blocks of 64 output dims stay in registers across all cells.
  for (int i0 = 0; i0 < hd; i0 += 64) {
    const int w = hd - i0 < 64 ? hd - i0 : 64;
    for (int g = 0; g < ng; ++g) {
      __m256 acc[8];
      for (int l = 0; l < 8; ++l) acc[l] = _mm256_setzero_ps();
      for (int j = 0; j < n; ++j) {
        const auto* vr = reinterpret_cast<const uint16_t*>(v + static_cast<size_t>(cells[j]) * v_stride) + i0;
        const __m256 pw = _mm256_set1_ps(p[g * n + j]);
        for (int l = 0; l < w / 8; ++l) acc[l] = _mm256_fmadd_ps(pw, load_h8(vr + 8 * l), acc[l]);
      }
      for (int l = 0; l < w / 8; ++l) _mm256_storeu_ps(out + g * hd + i0 + 8 * l, acc[l]);
    }
  }
}

inline void set_simd_math(KernelTable* t) {
  t->glu = v_glu;
  t->softmax = v_softmax;
  t->exp_sum = v_exp_sum;
  t->gemm_f32 = v_gemm_f32;
  t->f32_to_f16 = v_f32_to_f16;
  t->attn_scores = v_attn_scores;
  t->attn_values = v_attn_values;
  t->round_f16 = v_round_f16;
}

}  // namespace
}  // namespace ferry::kernels::cpu
