// AVX512_BF16 kernels (Cooper Lake, Sapphire Rapids, Zen 4 and later): BF16 weights against BF16
// activations with vdpbf16ps (pairs of bf16 products accumulated in f32), as ggml does on these CPUs.
// The act is x rounded to bf16 (ferry::fp32_to_bf16 rounding), zero-padded to a multiple of 32.
//   direct: 1 row x C columns, 32 elements per instruction;
//   panel:  u32 bf16 pairs [ceil(K/2)][16 rows]; one vdpbf16ps per column per pair of elements.
// Compiled with the AVX-512 flags plus -mavx512bf16; installed only when cpuid reports AVX512_BF16.
#include <immintrin.h>

#include "kernels/cpu/generic_impl.h"

namespace ferry::kernels::cpu {
namespace {

constexpr int R = kPanelRows;

inline int64_t padded(int64_t K) { return (K + 31) / 32 * 32; }
size_t act_bytes_bf16(int64_t K) { return align64(static_cast<size_t>(padded(K)) * 2); }
void act_bf16(const float* x, int64_t K, void* act) {
  auto* y = static_cast<uint16_t*>(act);
  for (int64_t i = 0; i < K; ++i) y[i] = f2bf(x[i]);
  for (int64_t i = K; i < padded(K); ++i) y[i] = 0;
}

inline __mmask32 tail_mask32(int64_t n) { return n >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << n) - 1); }

template <int C>
void direct_bf16(const MatArgs& a) {
  const uint16_t* x[C];
  for (int c = 0; c < C; ++c) x[c] = reinterpret_cast<const uint16_t*>(a.act + c * a.act_stride);
  for (int64_t r = 0; r < a.n_rows; ++r) {
    const auto* w = reinterpret_cast<const uint16_t*>(a.w + r * a.w_stride);
    __m512 acc0[C], acc1[C];
    for (int c = 0; c < C; ++c) acc0[c] = acc1[c] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 64 <= a.K; k += 64) {
      const __m512i w0 = _mm512_loadu_si512(w + k), w1 = _mm512_loadu_si512(w + k + 32);
      for (int c = 0; c < C; ++c) {
        acc0[c] = _mm512_dpbf16_ps(acc0[c], (__m512bh)w0, (__m512bh)_mm512_loadu_si512(x[c] + k));
        acc1[c] = _mm512_dpbf16_ps(acc1[c], (__m512bh)w1, (__m512bh)_mm512_loadu_si512(x[c] + k + 32));
      }
    }
    for (; k < a.K; k += 32) {
      const __m512i w0 = _mm512_maskz_loadu_epi16(tail_mask32(a.K - k), w + k);
      for (int c = 0; c < C; ++c)
        acc0[c] = _mm512_dpbf16_ps(acc0[c], (__m512bh)w0, (__m512bh)_mm512_loadu_si512(x[c] + k));
    }
    for (int c = 0; c < C; ++c) a.out[c * a.out_stride + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[c], acc1[c]));
  }
}

size_t panel_bytes_bf16(int64_t K) { return static_cast<size_t>((K + 1) / 2) * R * 4; }
size_t panel_tmp_bytes_bf16(int64_t) { return 64; }

void pack_bf16(int64_t K, const uint8_t* w, size_t w_stride, int n_rows, uint8_t* panel, uint8_t*) {
  const __mmask16 m = static_cast<__mmask16>((1u << n_rows) - 1);
  const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                         _mm512_set1_epi32(static_cast<int>(w_stride)));
  auto* p = reinterpret_cast<__m512i*>(panel);
  const int64_t full = K / 2;
  for (int64_t kp = 0; kp < full; ++kp)
    _mm512_storeu_si512(p + kp, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx, w + 4 * kp, 1));
  if (K % 2 != 0) {  // last element alone (a pair read would pass the end of the row)
    alignas(64) uint32_t last[R] = {};
    for (int r = 0; r < n_rows; ++r) {
      uint16_t h;
      memcpy(&h, w + r * w_stride + 2 * (K - 1), 2);
      last[r] = h;
    }
    _mm512_storeu_si512(p + full, _mm512_load_si512(last));
  }
}

template <int C>
void panel_bf16(const MatArgs& a) {
  const auto* p = reinterpret_cast<const __m512i*>(a.w);
  const uint32_t* x[C];
  for (int c = 0; c < C; ++c) x[c] = reinterpret_cast<const uint32_t*>(a.act + c * a.act_stride);
  __m512 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  const int64_t n_pairs = (a.K + 1) / 2;
  for (int64_t kp = 0; kp < n_pairs; ++kp) {
    const __m512i wv = _mm512_loadu_si512(p + kp);
    for (int c = 0; c < C; ++c)
      acc[c] = _mm512_dpbf16_ps(acc[c], (__m512bh)wv, (__m512bh)_mm512_set1_epi32(static_cast<int>(x[c][kp])));
  }
  const __mmask16 m = static_cast<__mmask16>((1u << a.n_rows) - 1);
  for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(a.out + c * a.out_stride, m, acc[c]);
}

void direct_cols(const MatArgs& a) {
  switch (a.n_cols) {
    case 1: return direct_bf16<1>(a);
    case 2: return direct_bf16<2>(a);
    case 3: return direct_bf16<3>(a);
    default: return direct_bf16<4>(a);
  }
}
void panel_cols(const MatArgs& a) {
  switch (a.n_cols) {
    case 1: return panel_bf16<1>(a);
    case 2: return panel_bf16<2>(a);
    case 3: return panel_bf16<3>(a);
    case 4: return panel_bf16<4>(a);
    case 5: return panel_bf16<5>(a);
    case 6: return panel_bf16<6>(a);
    case 7: return panel_bf16<7>(a);
    default: return panel_bf16<8>(a);
  }
}

}  // namespace

void fill_avx512_bf16(KernelTable* t) {
  MatKernel& m = t->mat[static_cast<uint32_t>(DType::BF16)];
  m.group = 0;
  m.act_bytes = act_bytes_bf16;
  m.quantize = act_bf16;
  m.direct = direct_cols;
  m.direct_cols = kMaxDirectCols;
  m.panel_bytes = panel_bytes_bf16;
  m.pack_tmp_bytes = panel_tmp_bytes_bf16;
  m.pack = pack_bf16;
  m.panel_mul = panel_cols;
  m.panel_min_tokens = 8;
}

}  // namespace ferry::kernels::cpu
