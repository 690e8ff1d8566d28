// AVX2 + FMA + F16C kernels (Haswell / Zen 1 and later): direct (decode) matmul for every weight type
// on 256-bit vectors, the shared panel (prefill) kernels on ymm (panel_impl.h, V256, int8 dots by
// vpmaddubsw + vpmaddwd), the shared decode attention cells kernels (attn_cells_impl.h), vector exp /
// GLU / softmax / F16 attention rows, the quantized act converters (Q8_0 / Q8_1 / Q8_K). The AVX-VNNI
// level (kernels_avx2_vnni.cc) replaces the quantized kernels of this table with vpdpbusd ones.
// Compiled with -mavx2 -mfma -mf16c -mbmi2 (sources.cmake); see the ODR rule in kernels.h.
#include <immintrin.h>

namespace ferry::kernels::cpu {
namespace {

// u (unsigned, <= 127) x s (signed): pmaddubsw cannot saturate for the levels used here (<= 63).
inline __m256i dot_u8s8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
inline __m256i dot_u8s8_acc(__m256i acc, __m256i u, __m256i s) { return _mm256_add_epi32(acc, dot_u8s8(u, s)); }
constexpr bool kDotU8Full = false;  // pmaddubsw saturates past 127 * 127 * 2
inline __m256i dot_i16_acc(__m256i acc, __m256i a, __m256i b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }
// signed x signed: |a| x (b with a's sign); |a| <= 128 and |b| <= 127 keep pmaddubsw exact.
inline __m256i dot_s8s8(__m256i a, __m256i b) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a)),
                           _mm256_set1_epi16(1));
}

}  // namespace
}  // namespace ferry::kernels::cpu

#include "kernels/cpu/attn_cells_impl.h"
#include "kernels/cpu/panel_float_impl.h"
#include "kernels/cpu/panel_kquant_impl.h"
#include "kernels/cpu/simd_math_impl.h"

namespace ferry::kernels::cpu {
namespace {

// Float weights, 1 row x C columns; Load converts 8 weights to floats. act: floats.
template <typename Load, int C>
void direct_float(const MatArgs& a) {
  PrefetchStream pf(a.w, a.w + a.n_rows * a.w_stride);
  for (int64_t r = 0; r < a.n_rows; ++r) {
    const uint8_t* w = a.w + r * a.w_stride;
    const float* x[C];
    for (int c = 0; c < C; ++c) x[c] = reinterpret_cast<const float*>(a.act + c * a.act_stride);
    __m256 acc0[C], acc1[C];
    for (int c = 0; c < C; ++c) acc0[c] = acc1[c] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= a.K; k += 16) {
      pf.advance(w + (k + 16) * Load::kBytes);
      const __m256 w0 = Load::load8(w, k), w1 = Load::load8(w, k + 8);
      for (int c = 0; c < C; ++c) {
        acc0[c] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[c] + k), acc0[c]);
        acc1[c] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[c] + k + 8), acc1[c]);
      }
    }
    for (int c = 0; c < C; ++c) {
      float s = hsum256(_mm256_add_ps(acc0[c], acc1[c]));
      for (int64_t kk = k; kk < a.K; ++kk) s += Load::get(w, kk) * x[c][kk];
      a.out[c * a.out_stride + r] = s;
    }
  }
}
struct LoadF32 {
  static constexpr size_t kBytes = 4;
  static __m256 load8(const uint8_t* w, int64_t k) { return _mm256_loadu_ps(reinterpret_cast<const float*>(w) + k); }
  static float get(const uint8_t* w, int64_t k) { return reinterpret_cast<const float*>(w)[k]; }
};
struct LoadF16 {
  static constexpr size_t kBytes = 2;
  static __m256 load8(const uint8_t* w, int64_t k) { return load_h8(reinterpret_cast<const uint16_t*>(w) + k); }
  static float get(const uint8_t* w, int64_t k) { return h2f(reinterpret_cast<const uint16_t*>(w)[k]); }
};
struct LoadBF16 {
  static constexpr size_t kBytes = 2;
  static __m256 load8(const uint8_t* w, int64_t k) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(w) + k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float get(const uint8_t* w, int64_t k) { return bf2f(reinterpret_cast<const uint16_t*>(w)[k]); }
};
template <typename Load>
struct FloatK {
  template <int C>
  static void run(const MatArgs& a) { direct_float<Load, C>(a); }
};

// F16 weights: the act is x rounded to fp16, held as floats (F16C conversion both ways).
void act_f16_avx2(const float* x, int64_t K, void* act) {
  float* y = static_cast<float*>(act);
  int64_t i = 0;
  for (; i + 8 <= K; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
  for (; i < K; ++i) y[i] = h2f(f2h(x[i]));
}

// llama.cpp's x86 Q8_0 / Q8_1 acts (see quantize_act_q8_legacy), bit-exact with the portable quantizer:
// per block of 32, amax by a max tree, d and 127 / amax as there, levels round-half-to-even(x * id)
// (vcvtps2dq). The bytes by saturating packs with vcvtps2dq's INT_MIN (an inf / NaN product) set to 0
// first, the low byte the portable int8 cast keeps; the level sum is of the int32 levels, as there.
template <bool kQ81>
void quantize_q8_legacy256(const float* x, int64_t K, void* act) {
  const ActView v = act_view(act, K, 32);
  auto* q = const_cast<int8_t*>(v.q);
  auto* dx = const_cast<float*>(v.dx);
  auto* sy = const_cast<float*>(v.sy);
  auto* qs = const_cast<int32_t*>(v.qs);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i int_min = _mm256_set1_epi32(INT32_MIN);
  const __m256i unzip = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);  // as in quantize_q8_k256
  for (int64_t b = 0; b < K / 32; ++b) {
    const float* xb = x + 32 * b;
    __m256 xv[4];
    for (int k = 0; k < 4; ++k) xv[k] = _mm256_loadu_ps(xb + 8 * k);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(xv[0], abs_mask), _mm256_and_ps(xv[1], abs_mask)),
                             _mm256_max_ps(_mm256_and_ps(xv[2], abs_mask), _mm256_and_ps(xv[3], abs_mask)));
    m = _mm256_max_ps(m, _mm256_permute2f128_ps(m, m, 1));
    m = _mm256_max_ps(m, _mm256_shuffle_ps(m, m, 0x4E));
    m = _mm256_max_ps(m, _mm256_shuffle_ps(m, m, 0xB1));
    const float amax = _mm256_cvtss_f32(m);
    const float d = amax / 127.f;
    const __m256 id = _mm256_set1_ps(amax != 0.f ? 127.f / amax : 0.0f);
    __m256i l[4], bl[4];
    for (int k = 0; k < 4; ++k) {
      l[k] = _mm256_cvtps_epi32(_mm256_mul_ps(xv[k], id));
      bl[k] = _mm256_andnot_si256(_mm256_cmpeq_epi32(l[k], int_min), l[k]);
    }
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(bl[0], bl[1]), _mm256_packs_epi32(bl[2], bl[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b), _mm256_permutevar8x32_epi32(p, unzip));
    const __m256i s8 = _mm256_add_epi32(_mm256_add_epi32(l[0], l[1]), _mm256_add_epi32(l[2], l[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    const int sum = _mm_cvtsi128_si32(s4);
    dx[b] = h2f(f2h(d));
    sy[b] = kQ81 ? h2f(f2h(d * static_cast<float>(sum))) : dx[b] * static_cast<float>(sum);
    qs[b] = sum;
  }
  act_zero_pad(v, K, 32);
}

// Q8_K super-blocks of 256 (see quantize_act_q8_k), bit-exact with the portable quantizer: the scale
// from the first element of largest |x|, levels round-half-to-even(iscale * x) (vcvtps2dq in the
// default rounding mode, as rintf) capped at 127. The int32 levels are narrowed by saturating packs,
// which keep every level in [-127, 127] as the int8 cast does; vcvtps2dq's out-of-range answer
// INT_MIN (an inf / NaN product, from a block of |max| below 127 / FLT_MAX) is first set to 0, the
// low byte the cast keeps of it.
template <int G>
void quantize_q8_k256(const float* x, int64_t K, void* act) {
  const ActView v = act_view(act, K, G);
  auto* q = const_cast<int8_t*>(v.q);
  auto* dx = const_cast<float*>(v.dx);
  auto* sy = const_cast<float*>(v.sy);
  auto* qs = const_cast<int32_t*>(v.qs);
  constexpr int gpb = 256 / G, cpg = G / 16;  // groups per block, 16-chunks per group
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i cap = _mm256_set1_epi32(127), int_min = _mm256_set1_epi32(INT32_MIN);
  // The packs leave 4-byte groups in the order (v0 lo, v1 lo, v2 lo, v3 lo | v0 hi, ..., v3 hi).
  const __m256i unzip = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < K / 256; ++b) {
    const float* xb = x + 256 * b;
    int8_t* qb = q + 256 * b;
    // |max| by four independent max chains, then broadcast to every lane (max is exact: any order).
    __m256 am[4];
    for (int j = 0; j < 4; ++j) am[j] = _mm256_and_ps(_mm256_loadu_ps(xb + 8 * j), abs_mask);
    for (int i = 4; i < 32; ++i)
      am[i & 3] = _mm256_max_ps(am[i & 3], _mm256_and_ps(_mm256_loadu_ps(xb + 8 * i), abs_mask));
    __m256 m = _mm256_max_ps(_mm256_max_ps(am[0], am[1]), _mm256_max_ps(am[2], am[3]));
    m = _mm256_max_ps(m, _mm256_permute2f128_ps(m, m, 1));
    m = _mm256_max_ps(m, _mm256_shuffle_ps(m, m, 0x4E));
    m = _mm256_max_ps(m, _mm256_shuffle_ps(m, m, 0xB1));
    float d = 0.f;
    int32_t csum[16] = {};
    if (_mm256_cvtss_f32(m) == 0.f) {
      memset(qb, 0, 256);
    } else {
      // The first element of largest |x|, without a data-dependent loop exit: the 32 compare masks as
      // four 64-bit words, the first set bit.
      uint64_t bits[4];
      for (int j = 0; j < 4; ++j) {
        uint64_t w = 0;
        for (int k = 0; k < 8; ++k) {
          const __m256 eq = _mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(xb + 64 * j + 8 * k), abs_mask), m, _CMP_EQ_OQ);
          w |= static_cast<uint64_t>(static_cast<uint32_t>(_mm256_movemask_ps(eq))) << (8 * k);
        }
        bits[j] = w;
      }
      const int at = first_set_bit256(bits);
      const float iscale = -127.f / xb[at];
      const __m256 is = _mm256_set1_ps(iscale);
      // 32 levels a step; the lanes of each 16-chunk's two vectors added, summed across by sum8x8.
      __m256i part[16];
      for (int c = 0; c < 8; ++c) {
        __m256i l[4];
        for (int k = 0; k < 4; ++k) {
          __m256i li = _mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(xb + 32 * c + 8 * k)));
          li = _mm256_min_epi32(li, cap);
          l[k] = _mm256_andnot_si256(_mm256_cmpeq_epi32(li, int_min), li);
        }
        const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(l[0], l[1]), _mm256_packs_epi32(l[2], l[3]));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb + 32 * c), _mm256_permutevar8x32_epi32(p, unzip));
        part[2 * c] = _mm256_add_epi32(l[0], l[1]);
        part[2 * c + 1] = _mm256_add_epi32(l[2], l[3]);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(csum), sum8x8(part));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(csum + 8), sum8x8(part + 8));
      d = 1 / iscale;
    }
    for (int g = 0; g < gpb; ++g) {
      int32_t sum = 0;
      for (int j = 0; j < cpg; ++j) sum += csum[g * cpg + j];
      dx[b * gpb + g] = d;
      sy[b * gpb + g] = d * static_cast<float>(sum);
      qs[b * gpb + g] = sum;
    }
  }
  act_zero_pad(v, K, G);
}

// Panels: from this many tokens the panel path beats the direct one; float panels take 6 interleaved
// act columns (12 accumulators + 2 panel rows + a broadcast of the 16 ymm) in K blocks of 256 (a
// panel's block is 16 KB, the act's 6 KB: both stay in L1).
constexpr int kMinQ = 8, kMinF = 8;
constexpr int kFIlCols = 6;
constexpr int64_t kFKBlock = 256;

}  // namespace

void fill_avx2(KernelTable* t) {
  t->isa = CpuIsa::kAvx2;
  set_direct_quant(t);
  t->mat[static_cast<uint32_t>(DType::F32)].direct = direct_by_cols<FloatK<LoadF32>>;
  t->mat[static_cast<uint32_t>(DType::F16)].direct = direct_by_cols<FloatK<LoadF16>>;
  t->mat[static_cast<uint32_t>(DType::F16)].quantize = act_f16_avx2;
  set_quant_acts(t, {quantize_q8_legacy256<false>, quantize_q8_legacy256<true>, quantize_q8_k256<16>, quantize_q8_k256<32>});
  t->mat[static_cast<uint32_t>(DType::BF16)].direct = direct_by_cols<FloatK<LoadBF16>>;
  set_simd_math(t);
  set_attn_cells<V256>(t);
  set_qpanels<V256>(t, kMinQ);
  set_kqpanels<V256>(t, kMinQ);
  set_fpanels<V256, kFIlCols>(t, kMinF, kFKBlock);
}

}  // namespace ferry::kernels::cpu
