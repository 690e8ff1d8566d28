// AVX-512 (F/BW/VL/DQ + VNNI) kernels, Ice Lake / Zen 4 and later: the direct quantized matmul with
// vpdpbusd on 256-bit vectors (decode is memory-bound; ymm keeps the decoders shared with AVX2), float
// matmul rows on 512-bit vectors with masked tails, and 512-bit exp / GLU / softmax / conversions.
// Compiled with the AVX-512 flags of sources.cmake; see the ODR rule in kernels.h.
#include <immintrin.h>

#include "kernels/cpu/dot_vnni256.h"

#include "kernels/cpu/attn_cells_impl.h"
#include "kernels/cpu/simd_math_impl.h"

namespace ferry::kernels::cpu {
namespace {

inline __mmask16 tail_mask(int64_t n) { return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1); }

// exp on 16 lanes; scalef handles the 2^n scaling (no overflow games).
inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.f));
  x = _mm512_min_ps(x, _mm512_set1_ps(88.7f));
  const __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  return _mm512_scalef_ps(p, fx);
}

inline __m512 round_h16(__m512 x) { return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT)); }

void glu512(const float* g, const float* u, float* y, int64_t n, Activation act) {
  if (act == Activation::kSwigluOai) return g_swiglu_oai(g, u, y, n);
  const __m512 one = _mm512_set1_ps(1.f);
  const __m512 k2 = _mm512_set1_ps(-2.f * 0.79788456080286535587989211986876f), c = _mm512_set1_ps(0.044715f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 x = _mm512_maskz_loadu_ps(m, g + i);
    __m512 r;
    if (act == Activation::kSilu) {
      r = _mm512_div_ps(x, _mm512_add_ps(one, exp512(_mm512_sub_ps(_mm512_setzero_ps(), x))));
    } else {  // ggml's F16 GELU, see KernelTable::glu
      const __m512 h = round_h16(x);
      const __m512 inner = _mm512_mul_ps(h, _mm512_fmadd_ps(_mm512_mul_ps(c, h), h, one));
      r = round_h16(_mm512_div_ps(h, _mm512_add_ps(one, exp512(_mm512_mul_ps(k2, inner)))));
      r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, _mm512_set1_ps(10.f), _CMP_GE_OQ), x);
      r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, _mm512_set1_ps(-10.f), _CMP_LE_OQ), _mm512_setzero_ps());
    }
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(r, _mm512_maskz_loadu_ps(m, u + i)));
  }
}

void softmax512(float* s, int n, float sink) {
  __m512 mv = _mm512_set1_ps(-__builtin_inff());
  for (int j = 0; j < n; j += 16) {
    const __mmask16 m = tail_mask(n - j);
    mv = _mm512_mask_max_ps(mv, m, mv, _mm512_maskz_loadu_ps(m, s + j));
  }
  float mx = _mm512_reduce_max_ps(mv);
  mx = sink > mx ? sink : mx;
  const __m512 mb = _mm512_set1_ps(mx);
  __m512 sv = _mm512_setzero_ps();
  for (int j = 0; j < n; j += 16) {
    const __mmask16 m = tail_mask(n - j);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), mb));
    _mm512_mask_storeu_ps(s + j, m, e);
    sv = _mm512_mask_add_ps(sv, m, sv, e);
  }
  // 1 / sum in double as ggml (the 16 float partial sums agree with its double sum to ~1e-7), then the
  // probabilities rounded to F16.
  const double sum = static_cast<double>(_mm512_reduce_add_ps(sv)) + static_cast<double>(__builtin_expf(sink - mx));
  const __m512 inv = _mm512_set1_ps(static_cast<float>(1.0 / sum));
  for (int j = 0; j < n; j += 16) {
    const __mmask16 m = tail_mask(n - j);
    _mm512_mask_storeu_ps(s + j, m, round_h16(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + j), inv)));
  }
}

void f32_to_f16_512(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_mask_storeu_epi16(y + i, m, h);
  }
}

// Lane i of the result = the sum of v[i]'s 16 int32 lanes: a transposing add tree (15 adds, 28
// shuffles for 16 vectors, against 16 horizontal reductions of ~8 dependent ops each).
inline __m512i chunk_sums16(const __m512i* v) {
  // a[k], per 128-bit lane: partial sums [v[2k], v[2k+1], v[2k], v[2k+1]].
  __m512i a[8], b[4], c[2];
  for (int k = 0; k < 8; ++k)
    a[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * k], v[2 * k + 1]), _mm512_unpackhi_epi32(v[2 * k], v[2 * k + 1]));
  // b[j], per 128-bit lane: that lane's sums of v[4j], v[4j+1], v[4j+2], v[4j+3].
  for (int j = 0; j < 4; ++j)
    b[j] = _mm512_add_epi32(_mm512_unpacklo_epi64(a[2 * j], a[2 * j + 1]), _mm512_unpackhi_epi64(a[2 * j], a[2 * j + 1]));
  // c[h]: 128-bit lanes (b[2h] l0+l1, b[2h] l2+l3, b[2h+1] l0+l1, b[2h+1] l2+l3).
  for (int h = 0; h < 2; ++h)
    c[h] = _mm512_add_epi32(_mm512_shuffle_i32x4(b[2 * h], b[2 * h + 1], 0x88), _mm512_shuffle_i32x4(b[2 * h], b[2 * h + 1], 0xDD));
  // 128-bit lane m: the whole sums of v[4m .. 4m+3].
  return _mm512_add_epi32(_mm512_shuffle_i32x4(c[0], c[1], 0x88), _mm512_shuffle_i32x4(c[0], c[1], 0xDD));
}

// Lane i of the result = the max of v[i]'s 16 lanes (the same tree as chunk_sums16, with max).
inline __m512 block_max16(const __m512* v) {
  __m512 a[8], b[4], c[2];
  for (int k = 0; k < 8; ++k)
    a[k] = _mm512_max_ps(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]), _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
  for (int j = 0; j < 4; ++j) {
    const __m512d lo = _mm512_unpacklo_pd(_mm512_castps_pd(a[2 * j]), _mm512_castps_pd(a[2 * j + 1]));
    const __m512d hi = _mm512_unpackhi_pd(_mm512_castps_pd(a[2 * j]), _mm512_castps_pd(a[2 * j + 1]));
    b[j] = _mm512_max_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));
  }
  for (int h = 0; h < 2; ++h)
    c[h] = _mm512_max_ps(_mm512_shuffle_f32x4(b[2 * h], b[2 * h + 1], 0x88), _mm512_shuffle_f32x4(b[2 * h], b[2 * h + 1], 0xDD));
  return _mm512_max_ps(_mm512_shuffle_f32x4(c[0], c[1], 0x88), _mm512_shuffle_f32x4(c[0], c[1], 0xDD));
}

// ---- activation quantizers on 16 lanes, bit-exact with generic_impl.h's ---------------------------
// llama.cpp's x86 Q8_0 / Q8_1 (see quantize_act_q8_legacy); vcvtps2dq rounds half to even like rintf.
template <bool kQ81>
void quantize_q8_legacy512(const float* x, int64_t K, void* act) {
  const ActView v = act_view(act, K, 32);
  auto* q = const_cast<int8_t*>(v.q);
  auto* dx = const_cast<float*>(v.dx);
  auto* sy = const_cast<float*>(v.sy);
  auto* qs = const_cast<int32_t*>(v.qs);
  int64_t b = 0;
  // 16 blocks at a time: the blocks' |max| and level sums by transposing trees (one vector of 16 per-block
  // values), the scales as vectors; the same operations per value as the per-block loop below.
  for (; b + 16 <= K / 32; b += 16) {
    const float* xb = x + 32 * b;
    __m512 m[16];
    for (int i = 0; i < 16; ++i)
      m[i] = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xb + 32 * i)), _mm512_abs_ps(_mm512_loadu_ps(xb + 32 * i + 16)));
    const __m512 amax = block_max16(m);
    const __m512 d = _mm512_div_ps(amax, _mm512_set1_ps(127.f));
    const __mmask16 nz = _mm512_cmp_ps_mask(amax, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    alignas(64) float id[16];
    _mm512_store_ps(id, _mm512_maskz_div_ps(nz, _mm512_set1_ps(127.f), amax));
    __m512i sums[16];
    for (int i = 0; i < 16; ++i) {
      const __m512 idv = _mm512_set1_ps(id[i]);
      const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 32 * i), idv));
      const __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 32 * i + 16), idv));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * (b + i)), _mm512_cvtepi32_epi8(i0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * (b + i) + 16), _mm512_cvtepi32_epi8(i1));
      sums[i] = _mm512_add_epi32(i0, i1);
    }
    const __m512i sum = chunk_sums16(sums);
    const __m512 dh = _mm512_cvtph_ps(_mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT));
    const __m512 fs = _mm512_cvtepi32_ps(sum);
    _mm512_storeu_ps(dx + b, dh);
    _mm512_storeu_ps(sy + b, kQ81 ? _mm512_cvtph_ps(_mm512_cvtps_ph(_mm512_mul_ps(d, fs), _MM_FROUND_TO_NEAREST_INT))
                                  : _mm512_mul_ps(dh, fs));
    _mm512_storeu_si512(qs + b, sum);
  }
  for (; b < K / 32; ++b) {
    const __m512 x0 = _mm512_loadu_ps(x + 32 * b), x1 = _mm512_loadu_ps(x + 32 * b + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    const float d = amax / 127.f;
    const __m512 id = _mm512_set1_ps(amax != 0.f ? 127.f / amax : 0.0f);
    const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, id)), i1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, id));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b), _mm512_cvtepi32_epi8(i0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 32 * b + 16), _mm512_cvtepi32_epi8(i1));
    const int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
    dx[b] = h2f(f2h(d));
    sy[b] = kQ81 ? h2f(f2h(d * static_cast<float>(sum))) : dx[b] * static_cast<float>(sum);
    qs[b] = sum;
  }
  act_zero_pad(v, K, 32);
}

// Q8_K super-blocks (see quantize_act_q8_k): the scale comes from the first element of largest |x|.
template <int G>
void quantize_q8_k512(const float* x, int64_t K, void* act) {
  const ActView v = act_view(act, K, G);
  auto* q = const_cast<int8_t*>(v.q);
  auto* dx = const_cast<float*>(v.dx);
  auto* sy = const_cast<float*>(v.sy);
  auto* qs = const_cast<int32_t*>(v.qs);
  constexpr int gpb = 256 / G, cpg = G / 16;  // groups per block, 16-chunks per group
  for (int64_t b = 0; b < K / 256; ++b) {
    const float* xb = x + 256 * b;
    // Four independent max chains (one chain of 16 was latency-bound).
    __m512 am[4];
    for (int j = 0; j < 4; ++j) am[j] = _mm512_abs_ps(_mm512_loadu_ps(xb + 16 * j));
    for (int i = 4; i < 16; ++i) am[i & 3] = _mm512_max_ps(am[i & 3], _mm512_abs_ps(_mm512_loadu_ps(xb + 16 * i)));
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(am[0], am[1]), _mm512_max_ps(am[2], am[3])));
    float d = 0.f;
    int32_t gsum[16] = {};
    if (amax == 0.f) {
      memset(q + 256 * b, 0, 256);
    } else {
      // The first element of largest |x|, without a data-dependent loop exit: the 16 compare masks
      // as four 64-bit words, the first set bit.
      const __m512 av = _mm512_set1_ps(amax);
      uint64_t bits[4];
      for (int j = 0; j < 4; ++j) {
        uint64_t w = 0;
        for (int k = 0; k < 4; ++k)
          w |= static_cast<uint64_t>(_mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(xb + 64 * j + 16 * k)), av, _CMP_EQ_OQ)) << (16 * k);
        bits[j] = w;
      }
      const int at = first_set_bit256(bits);
      const float max = xb[at];
      const float iscale = -127.f / max;
      const __m512 is = _mm512_set1_ps(iscale);
      // The 16 chunks' integer sums by one add tree (exact, as the per-chunk horizontal reductions it
      // replaces; this runs on the calling thread before every decode matmul while the others wait).
      __m512i vs[16];
      for (int i = 0; i < 16; ++i) {
        __m512i vi = _mm512_cvtps_epi32(_mm512_mul_ps(is, _mm512_loadu_ps(xb + 16 * i)));
        vi = _mm512_min_epi32(vi, _mm512_set1_epi32(127));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 256 * b + 16 * i), _mm512_cvtepi32_epi8(vi));
        vs[i] = vi;
      }
      alignas(64) int32_t csum[16];
      _mm512_store_si512(csum, chunk_sums16(vs));
      for (int i = 0; i < 16; ++i) gsum[i / cpg] += csum[i];
      d = 1 / iscale;
    }
    for (int g = 0; g < gpb; ++g) {
      dx[b * gpb + g] = d;
      sy[b * gpb + g] = d * static_cast<float>(gsum[g]);
      qs[b * gpb + g] = gsum[g];
    }
  }
  act_zero_pad(v, K, G);
}

// ---- float weights: 1 row x C columns, 32 elements per step, masked tail ---------------------------
struct Z32 {
  static constexpr size_t kBytes = 4;
  static __m512 load(const uint8_t* w, int64_t k, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(w) + k);
  }
};
struct Z16 {
  static constexpr size_t kBytes = 2;
  static __m512 load(const uint8_t* w, int64_t k, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(w) + k));
  }
};
struct ZB16 {
  static constexpr size_t kBytes = 2;
  static __m512 load(const uint8_t* w, int64_t k, __mmask16 m) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(w) + k);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};

template <typename Load, int C>
void direct_float512(const MatArgs& a) {
  const float* x[C];
  for (int c = 0; c < C; ++c) x[c] = reinterpret_cast<const float*>(a.act + c * a.act_stride);
  const __mmask16 full = 0xFFFF;
  PrefetchStream pf(a.w, a.w + a.n_rows * a.w_stride);
  for (int64_t r = 0; r < a.n_rows; ++r) {
    const uint8_t* w = a.w + r * a.w_stride;
    __m512 acc0[C], acc1[C];
    for (int c = 0; c < C; ++c) acc0[c] = acc1[c] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 32 <= a.K; k += 32) {
      pf.advance(w + (k + 32) * Load::kBytes);
      const __m512 w0 = Load::load(w, k, full), w1 = Load::load(w, k + 16, full);
      for (int c = 0; c < C; ++c) {
        acc0[c] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x[c] + k), acc0[c]);
        acc1[c] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x[c] + k + 16), acc1[c]);
      }
    }
    for (; k < a.K; k += 16) {
      const __mmask16 m = tail_mask(a.K - k);
      const __m512 w0 = Load::load(w, k, m);
      for (int c = 0; c < C; ++c) acc0[c] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m, x[c] + k), acc0[c]);
    }
    for (int c = 0; c < C; ++c) a.out[c * a.out_stride + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[c], acc1[c]));
  }
}
template <typename Load>
struct Float512K {
  template <int C>
  static void run(const MatArgs& a) { direct_float512<Load, C>(a); }
};

void act_f16_512(const float* x, int64_t K, void* act) {
  float* y = static_cast<float*>(act);
  for (int64_t i = 0; i < K; i += 16) {
    const __mmask16 m = tail_mask(K - i);
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm512_mask_storeu_ps(y + i, m, _mm512_cvtph_ps(h));
  }
}

}  // namespace

void fill_avx512(KernelTable* t) {
  t->isa = CpuIsa::kAvx512;
  set_direct_quant(t);  // the shared 256-bit decoders, now with vpdpbusd
  set_quant_acts(t, {quantize_q8_legacy512<false>, quantize_q8_legacy512<true>, quantize_q8_k512<16>, quantize_q8_k512<32>});
  t->mat[static_cast<uint32_t>(DType::F32)].direct = direct_by_cols<Float512K<Z32>>;
  t->mat[static_cast<uint32_t>(DType::F16)].direct = direct_by_cols<Float512K<Z16>>;
  t->mat[static_cast<uint32_t>(DType::F16)].quantize = act_f16_512;
  t->mat[static_cast<uint32_t>(DType::BF16)].direct = direct_by_cols<Float512K<ZB16>>;
  set_simd_math(t);
  t->glu = glu512;
  t->softmax = softmax512;
  t->f32_to_f16 = f32_to_f16_512;
  set_attn_cells<V512>(t);
}

}  // namespace ferry::kernels::cpu
