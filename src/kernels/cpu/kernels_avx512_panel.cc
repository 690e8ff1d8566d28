// AVX-512 panel kernels (prefill). kPanelRows = 16 weight rows are unpacked once into a panel with one
// zmm lane per row, then multiplied with kPanelCols act columns at a time:
//   quantized: u32 quads [K/4][16] (4 consecutive unsigned levels of a row per lane), scale[K/G][16],
//              min[K/G][16]. Per group: G/4 vpdpbusd per column with the act quad broadcast give 16
//              rows' exact integer dots at once; then two FMAs apply scale*dx and min*sy. No horizontal
//              sums, and the per-group float work is shared by 16 rows (the direct kernel pays it per row).
//   float:     [K][16] f32 (F32, F16 and BF16 weights): one FMA per column per element, act broadcast.
// Unpacking reuses the 256-bit decoders of simd_direct_impl.h; the transpose is a gather per 16 quads.
#include <immintrin.h>

#include "kernels/cpu/dot_vnni256.h"

#include "kernels/cpu/simd_direct_impl.h"

namespace ferry::kernels::cpu {
namespace {

constexpr int R = kPanelRows;

#include "kernels/cpu/panel_impl.h"  // NOLINT(build/include): shared per-ISA code, see its header

inline __mmask16 row_mask(int n_rows) { return static_cast<__mmask16>((1u << n_rows) - 1); }

// ---- quantized panels --------------------------------------------------------------------------------
// Unpacks one row into u (K levels), sc and mn (K/G each). Q8_0 levels become q + 128 (unsigned).
// Scales 16 blocks at a time (one gather of the block headers).
template <typename Dec>
void unpack_row_legacy(const uint8_t* row, int64_t K, uint8_t* u, float* sc, float* mn) {
  const auto* blocks = reinterpret_cast<const typename Dec::BlockT*>(row);
  const int64_t nb = K / 32;
  for (int64_t b0 = 0; b0 < nb; b0 += 16) {
    const int n = static_cast<int>(nb - b0 < 16 ? nb - b0 : 16);
    alignas(32) float d[16], m[16];
    block_scales16<Dec>(blocks + b0, n, d, m);
    for (int i = 0; i < n; ++i) {
      sc[b0 + i] = d[i];
      mn[b0 + i] = Dec::kMin ? m[i] : -static_cast<float>(Dec::kOff) * d[i];
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + 32 * (b0 + i)), Dec::levels(blocks[b0 + i]));
    }
  }
}
// Off > 0 (Q4_0, Q5_0, Q8_0: value = d * (u - Off)): the offset is folded into the integer dot (the
// accumulator starts at -Off * qs, exact) instead of a second FMA with the packed min and the act's sy:
// per group and column 3 vector ops beside the G/4 vpdpbusd instead of 4 (the float work was ~1/3 of
// the kernel's vector ops).
template <int G, int Off, int C>
void qpanel_mul(const MatArgs& a) {
  const int64_t K = a.K, ng = K / G;
  const auto* pq = reinterpret_cast<const __m512i*>(a.w);
  const auto* psc = reinterpret_cast<const float*>(a.w + static_cast<size_t>(K) * R);
  const float* pmn = psc + ng * R;
  // Columns share one layout: address every array from the column's base with one offset (fewer
  // live pointers: with 8 columns x 4 arrays the compiler spilled them to vector registers).
  const ActView v0 = act_view(a.act, K, G);
  const size_t off_dx = reinterpret_cast<const uint8_t*>(v0.dx) - a.act;
  const size_t off_sy = reinterpret_cast<const uint8_t*>(v0.sy) - a.act;
  const size_t off_qs = reinterpret_cast<const uint8_t*>(v0.qs) - a.act;
  const uint8_t* col[C];
  for (int c = 0; c < C; ++c) col[c] = a.act + c * a.act_stride;
  __m512 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t g = 0; g < ng; ++g) {
    __m512i ia[C];
    for (int c = 0; c < C; ++c) {
      if constexpr (Off > 0) {
        const __m512i qs = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(col[c] + off_qs + 4 * g));
        ia[c] = _mm512_mullo_epi32(qs, _mm512_set1_epi32(-Off));
      } else {
        ia[c] = _mm512_setzero_si512();
      }
    }
    // Two accumulators per column: vpdpbusd has a 5-cycle latency and two issue ports, so 8 chains
    // alone could not keep both busy.
    __m512i ib[C];
    for (int c = 0; c < C; ++c) ib[c] = _mm512_setzero_si512();
    for (int k = 0; k < G / 4; k += 2) {
      const __m512i w0 = _mm512_loadu_si512(pq + g * (G / 4) + k), w1 = _mm512_loadu_si512(pq + g * (G / 4) + k + 1);
      for (int c = 0; c < C; ++c) {
        const int32_t* y = reinterpret_cast<const int32_t*>(col[c] + g * G + 4 * k);
        ia[c] = _mm512_dpbusd_epi32(ia[c], w0, _mm512_set1_epi32(y[0]));
        ib[c] = _mm512_dpbusd_epi32(ib[c], w1, _mm512_set1_epi32(y[1]));
      }
    }
    for (int c = 0; c < C; ++c) ia[c] = _mm512_add_epi32(ia[c], ib[c]);
    const __m512 sc = _mm512_loadu_ps(psc + g * R);
    for (int c = 0; c < C; ++c) {
      const __m512 dx = _mm512_set1_ps(*reinterpret_cast<const float*>(col[c] + off_dx + 4 * g));
      acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[c]), _mm512_mul_ps(sc, dx), acc[c]);
      if constexpr (Off == 0) {
        const __m512 sy = _mm512_set1_ps(*reinterpret_cast<const float*>(col[c] + off_sy + 4 * g));
        acc[c] = _mm512_fmadd_ps(_mm512_loadu_ps(pmn + g * R), sy, acc[c]);
      }
    }
  }
  const __mmask16 m = row_mask(static_cast<int>(a.n_rows));
  for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(a.out + c * a.out_stride, m, acc[c]);
}

// ---- float panels ---------------------------------------------------------------------------------------
size_t fpanel_bytes(int64_t K) { return static_cast<size_t>(K) * R * sizeof(float); }
size_t fpanel_tmp_bytes(int64_t) { return 64; }

// Element k of each row -> one zmm: 16 elements of each of the 16 rows are loaded and widened to floats
// (masked at the end of the row), then transposed in registers (gathers would take a large share of an
// F16 prefill matmul).
enum class FKind { kF32, kF16, kBF16 };
template <FKind kKind>
__m512 load16_f32(const uint8_t* row, int64_t k0, __mmask16 m) {
  if constexpr (kKind == FKind::kF32) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + k0);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(row) + k0);
    if constexpr (kKind == FKind::kF16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}
template <FKind kKind>
void fpack(int64_t K, const uint8_t* w, size_t w_stride, int n_rows, uint8_t* panel, uint8_t*) {
  auto* p = reinterpret_cast<__m512i*>(panel);
  for (int64_t k0 = 0; k0 < K; k0 += 16) {
    const int64_t left = K - k0;
    const __mmask16 m = left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
    __m512i v[R];
    for (int r = 0; r < R; ++r)
      v[r] = r < n_rows ? _mm512_castps_si512(load16_f32<kKind>(w + r * w_stride, k0, m)) : _mm512_setzero_si512();
    transpose16x16_epi32(v);
    const int nk = left >= 16 ? 16 : static_cast<int>(left);
    for (int i = 0; i < nk; ++i) _mm512_storeu_si512(p + k0 + i, v[i]);
  }
}

template <int C>
void fpanel_mul(const MatArgs& a) {
  const auto* p = reinterpret_cast<const float*>(a.w);
  const float* x[C];
  for (int c = 0; c < C; ++c) x[c] = reinterpret_cast<const float*>(a.act + c * a.act_stride);
  // Two accumulators per column (even and odd k): an FMA has a 4-cycle latency and two ports, so 8
  // chains would leave no slack.
  const __mmask16 m = row_mask(static_cast<int>(a.n_rows));
  __m512 acc[C], acc1[C];
  for (int c = 0; c < C; ++c) {
    acc[c] = a.accumulate ? _mm512_maskz_loadu_ps(m, a.out + c * a.out_stride) : _mm512_setzero_ps();
    acc1[c] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 2 <= a.K; k += 2) {
    const __m512 w0 = _mm512_loadu_ps(p + k * R), w1 = _mm512_loadu_ps(p + (k + 1) * R);
    for (int c = 0; c < C; ++c) {
      acc[c] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[c][k]), acc[c]);
      acc1[c] = _mm512_fmadd_ps(w1, _mm512_set1_ps(x[c][k + 1]), acc1[c]);
    }
  }
  if (k < a.K) {
    const __m512 wv = _mm512_loadu_ps(p + k * R);
    for (int c = 0; c < C; ++c) acc[c] = _mm512_fmadd_ps(wv, _mm512_set1_ps(x[c][k]), acc[c]);
  }
  for (int c = 0; c < C; ++c) acc[c] = _mm512_add_ps(acc[c], acc1[c]);
  for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(a.out + c * a.out_stride, m, acc[c]);
}

// NB panels (16 or 32 rows) x C interleaved act columns: NB * C accumulators, one chain per (row block,
// column), k in order. Per k: NB panel loads and C broadcasts from one act line for NB * C FMAs, all
// addressed from three pointers (with C column pointers the compiler spilled them to vector registers
// and paid two moves per k on the FMA ports).
template <int NB, int C, int S>
void fpanel_il_mul(const MatArgs& a) {
  const auto* p0 = reinterpret_cast<const float*>(a.w);
  const auto* p1 = reinterpret_cast<const float*>(a.w + a.w_stride);
  const auto* x = reinterpret_cast<const float*>(a.act);
  const __mmask16 m0 = NB == 1 ? row_mask(static_cast<int>(a.n_rows)) : static_cast<__mmask16>(0xFFFF);
  const __mmask16 m1 = NB == 2 ? row_mask(static_cast<int>(a.n_rows) - R) : static_cast<__mmask16>(0);
  __m512 acc[NB][C];
  for (int c = 0; c < C; ++c) {
    acc[0][c] = a.accumulate ? _mm512_maskz_loadu_ps(m0, a.out + c * a.out_stride) : _mm512_setzero_ps();
    if constexpr (NB == 2)
      acc[1][c] = a.accumulate ? _mm512_maskz_loadu_ps(m1, a.out + c * a.out_stride + R) : _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < a.K; ++k) {
    __m512 w[NB];
    w[0] = _mm512_loadu_ps(p0 + k * R);
    if constexpr (NB == 2) w[1] = _mm512_loadu_ps(p1 + k * R);
    for (int c = 0; c < C; ++c) {
      const __m512 xv = _mm512_set1_ps(x[k * S + c]);
      for (int b = 0; b < NB; ++b) acc[b][c] = _mm512_fmadd_ps(w[b], xv, acc[b][c]);
    }
  }
  for (int c = 0; c < C; ++c) {
    _mm512_mask_storeu_ps(a.out + c * a.out_stride, m0, acc[0][c]);
    if constexpr (NB == 2) _mm512_mask_storeu_ps(a.out + c * a.out_stride + R, m1, acc[1][c]);
  }
}

// ---- column dispatch and registration ------------------------------------------------------------------
template <typename KT>
void panel_by_cols(const MatArgs& a) {
  switch (a.n_cols) {
    case 1: return KT::template run<1>(a);
    case 2: return KT::template run<2>(a);
    case 3: return KT::template run<3>(a);
    case 4: return KT::template run<4>(a);
    case 5: return KT::template run<5>(a);
    case 6: return KT::template run<6>(a);
    case 7: return KT::template run<7>(a);
    default: return KT::template run<8>(a);
  }
}
// 12 columns: 24 accumulators + 2 panel rows + a broadcast fill the 32 zmm (14 spilled). K blocks of
// 512: a pair's block is 64 KB (L2; the act's block 24 KB), so the panels of a group (4 x 16 rows; up
// to 3.7 MB at K = 14336) are not streamed from the LLC once per column group. Larger K blocks run
// slightly faster on one thread (bench_cpu_kernels matmul/F16/avx512/512); 512 keeps a pair's block in L2.
constexpr int kFIlCols = 12;        // interleaved act columns per fpanel_il_mul call
constexpr int64_t kFKBlock = 512;  // K block of the float panels
template <int NB>
void fpanel_il_cols(const MatArgs& a) {
  constexpr int S = kFIlCols;
  switch (a.n_cols) {
    case 1: return fpanel_il_mul<NB, 1, S>(a);
    case 2: return fpanel_il_mul<NB, 2, S>(a);
    case 3: return fpanel_il_mul<NB, 3, S>(a);
    case 4: return fpanel_il_mul<NB, 4, S>(a);
    case 5: return fpanel_il_mul<NB, 5, S>(a);
    case 6: return fpanel_il_mul<NB, 6, S>(a);
    case 7: return fpanel_il_mul<NB, 7, S>(a);
    case 8: return fpanel_il_mul<NB, 8, S>(a);
    case 9: if constexpr (S >= 9) return fpanel_il_mul<NB, 9, S>(a); [[fallthrough]];
    case 10: if constexpr (S >= 10) return fpanel_il_mul<NB, 10, S>(a); [[fallthrough]];
    case 11: if constexpr (S >= 11) return fpanel_il_mul<NB, 11, S>(a); [[fallthrough]];
    default: return fpanel_il_mul<NB, S, S>(a);
  }
}
void fpanel_il(const MatArgs& a) {
  if (a.n_rows > R) return fpanel_il_cols<2>(a);
  fpanel_il_cols<1>(a);
}

template <int G, int Off>
struct QPanelK {
  template <int C>
  static void run(const MatArgs& a) { qpanel_mul<G, Off, C>(a); }
};
struct FPanelK {
  template <int C>
  static void run(const MatArgs& a) { fpanel_mul<C>(a); }
};

template <int G, int Off = 0>
void set_qpanel(KernelTable* t, DType type, void (*pack)(int64_t, const uint8_t*, size_t, int, uint8_t*, uint8_t*),
                int min_tokens) {
  MatKernel& m = t->mat[static_cast<uint32_t>(type)];
  m.panel_bytes = qpanel_bytes<G>;
  m.pack_tmp_bytes = qpanel_tmp_bytes<G>;
  m.pack = pack;
  m.panel_mul = panel_by_cols<QPanelK<G, Off>>;
  m.panel_min_tokens = min_tokens;
}

void set_fpanel(KernelTable* t, DType type, void (*pack)(int64_t, const uint8_t*, size_t, int, uint8_t*, uint8_t*),
                int min_tokens) {
  MatKernel& m = t->mat[static_cast<uint32_t>(type)];
  m.panel_bytes = fpanel_bytes;
  m.pack_tmp_bytes = fpanel_tmp_bytes;
  m.pack = pack;
  m.panel_mul = panel_by_cols<FPanelK>;
  m.panel_min_tokens = min_tokens;
  m.panel_il = fpanel_il;
  m.panel_il_cols = kFIlCols;
  m.panel_k_block = kFKBlock;
}

}  // namespace

void fill_avx512_panel(KernelTable* t) {
  // From this many tokens the panel path beats the direct one (bench/micro: matmul by tokens).
  constexpr int kMinQ = 8, kMinF = 8;
  set_qpanel<32, 8>(t, DType::Q4_0, qpack<32, unpack_row_legacy<DecQ4_0>>, kMinQ);
  set_qpanel<32>(t, DType::Q4_1, qpack<32, unpack_row_legacy<DecQ4_1>>, kMinQ);
  set_qpanel<32, 16>(t, DType::Q5_0, qpack<32, unpack_row_legacy<DecQ5_0>>, kMinQ);
  set_qpanel<32>(t, DType::Q5_1, qpack<32, unpack_row_legacy<DecQ5_1>>, kMinQ);
  set_qpanel<32, 128>(t, DType::Q8_0, qpack<32, unpack_row_legacy<DecQ8_0>>, kMinQ);
  set_qpanel<16>(t, DType::Q2_K, qpack<16, unpack_row_kquant<DecQ2_K>>, kMinQ);
  set_qpanel<16>(t, DType::Q3_K, qpack<16, unpack_row_kquant<DecQ3_K>>, kMinQ);
  set_qpanel<32>(t, DType::Q4_K, qpack<32, unpack_row_kquant<DecQ4_K>>, kMinQ);
  set_qpanel<32>(t, DType::Q5_K, qpack<32, unpack_row_kquant<DecQ5_K>>, kMinQ);
  set_qpanel<16>(t, DType::Q6_K, qpack<16, unpack_row_kquant<DecQ6_K>>, kMinQ);
  set_fpanel(t, DType::F32, fpack<FKind::kF32>, kMinF);
  set_fpanel(t, DType::F16, fpack<FKind::kF16>, kMinF);
  set_fpanel(t, DType::BF16, fpack<FKind::kBF16>, kMinF);
}

}  // namespace ferry::kernels::cpu
