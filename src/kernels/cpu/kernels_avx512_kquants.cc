// AVX-512 direct (decode) kernels for Q4_K, Q5_K and Q6_K on 512-bit vectors. A super-block is four
// zmm of 64 unsigned levels in natural order; per zmm and act column, vpmaddubsw (levels x int8
// activations -> int16 pairs) and vpdpwssd with the groups' integer scales accumulate the whole
// super-block exactly in int32, as ggml's k-quant dots do; one convert and one FMA per super-block
// apply d * dx, and the mins go through the act's group sums as floats. Against the shared 256-bit
// kernel (a convert and an FMA per 32 levels) this is ~40% fewer instructions, which matters because
// Q4_K decode is compute-bound on few cores.
// Levels are <= 63, so vpmaddubsw cannot saturate (63 * 127 * 2 < 32767). Q4_K rows up to 32768 use
// their own cheaper kernel (direct_q4k512, below).
#include <immintrin.h>

#include "kernels/cpu/generic_impl.h"
#include "kernels/cpu/prefetch_stream.h"

namespace ferry::kernels::cpu {
namespace {

// 32 bytes broadcast to both 256-bit halves, the upper half shifted right by `hi` bits per 64-bit word
// (the lower by `lo`): no cross-lane shuffle.
inline __m512i bcast_shift(const uint8_t* p, int lo, int hi) {
  const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_srlv_epi64(v, _mm512_set_epi64(hi, hi, hi, hi, lo, lo, lo, lo));
}

// Per super-block: 4 zmm of levels and, per zmm, the int16 scale of each of its 32 int16 lanes.
struct SuperBlock {
  __m512i u[4];
  __m512i sc16[4];
  float d;                      // super-block scale of the integer sum
  alignas(32) float mn[16];     // per-group min terms (G = 32: 8 used), times the act's sy
};

// Q4_K / Q5_K: 8 groups of 32. zmm j holds groups 2j (lanes 0..15 after maddubs) and 2j + 1.
inline void scales_k4(const uint8_t* packed, uint16_t dminh, SuperBlock* s) {
  uint32_t u[4];
  memcpy(u, packed, 12);
  const uint32_t km1 = 0x3f3f3f3f, km2 = 0x0f0f0f0f, km3 = 0x03030303;
  u[3] = ((u[2] >> 4) & km2) | (((u[1] >> 6) & km3) << 4);
  const uint32_t aux = u[1] & km1;
  u[1] = (u[2] & km2) | (((u[0] >> 6) & km3) << 4);
  u[2] = aux;
  u[0] &= km1;
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(u));
  const __m512i sc = _mm512_castsi128_si512(_mm_cvtepu8_epi16(v));  // 8 scales as int16
  for (int j = 0; j < 4; ++j) {
    const __m512i idx = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(2 * j)),
                                           _mm256_set1_epi16(static_cast<short>(2 * j + 1)), 1);
    s->sc16[j] = _mm512_permutexvar_epi16(idx, sc);
  }
  const __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)));
  _mm256_store_ps(s->mn, _mm256_mul_ps(m, _mm256_set1_ps(-h2f(dminh))));
}

inline void decode_q4_k(const BlockQ4_K& b, SuperBlock* s) {
  const __m512i mf = _mm512_set1_epi8(0x0F);
  for (int j = 0; j < 4; ++j) s->u[j] = _mm512_and_si512(bcast_shift(b.qs + 32 * j, 0, 4), mf);
  scales_k4(b.scales, b.dmin, s);
  s->d = h2f(b.d);
}

inline void decode_q5_k(const BlockQ5_K& b, SuperBlock* s) {
  const __m512i mf = _mm512_set1_epi8(0x0F), m1 = _mm512_set1_epi8(1);
  for (int j = 0; j < 4; ++j) {
    const __m512i lo = _mm512_and_si512(bcast_shift(b.qs + 32 * j, 0, 4), mf);
    const __m512i hb = _mm512_and_si512(bcast_shift(b.qh, 2 * j, 2 * j + 1), m1);
    s->u[j] = _mm512_or_si512(lo, _mm512_slli_epi16(hb, 4));
  }
  scales_k4(b.scales, b.dmin, s);
  s->d = h2f(b.d);
}

// Q6_K: 16 groups of 16; zmm j holds groups 4j..4j+3 (8 int16 lanes each). Level 0..63, offset -32
// (folded into the mins: -32 * d * sc).
inline void decode_q6_k(const BlockQ6_K& b, SuperBlock* s) {
  const __m512i mf = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(3);
  for (int h = 0; h < 2; ++h) {
    const __m512i ql = _mm512_loadu_si512(b.ql + 64 * h);
    const uint8_t* qh = b.qh + 32 * h;
    const __m512i ha = _mm512_slli_epi16(_mm512_and_si512(bcast_shift(qh, 0, 2), m3), 4);
    const __m512i hb = _mm512_slli_epi16(_mm512_and_si512(bcast_shift(qh, 4, 6), m3), 4);
    s->u[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, mf), ha);
    s->u[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), mf), hb);
  }
  const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
  const __m512i sc = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(sc8));  // 16 scales as int16
  for (int j = 0; j < 4; ++j) {
    const long long g0 = 0x0001000100010001LL * (4 * j);  // 4 int16 lanes of group 4j per 64-bit element
    const long long g1 = g0 + 0x0001000100010001LL, g2 = g1 + 0x0001000100010001LL, g3 = g2 + 0x0001000100010001LL;
    const __m512i idx = _mm512_set_epi64(g3, g3, g2, g2, g1, g1, g0, g0);
    s->sc16[j] = _mm512_permutexvar_epi16(idx, sc);
  }
  s->d = h2f(b.d);
  const __m256 d32 = _mm256_set1_ps(-32.f * s->d);
  _mm256_store_ps(s->mn, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc8)), d32));
  _mm256_store_ps(s->mn + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc8, 8))), d32));
}

template <typename Block, int G, void (*Decode)(const Block&, SuperBlock*), int C>
void direct_k512(const MatArgs& a) {
  constexpr int NG = 256 / G;
  const int64_t nsb = a.K / 256;
  ActView act[C];
  for (int c = 0; c < C; ++c) act[c] = act_view(a.act + c * a.act_stride, a.K, G);
  PrefetchStream pf(a.w, a.w + a.n_rows * a.w_stride);
  for (int64_t r = 0; r < a.n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const Block*>(a.w + r * a.w_stride);
    __m512 acc[C];
    __m256 macc[C];
    for (int c = 0; c < C; ++c) {
      acc[c] = _mm512_setzero_ps();
      macc[c] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < nsb; ++i) {
      pf.advance(blocks + i + 1);
      SuperBlock sb;
      Decode(blocks[i], &sb);
      const __m256 mn0 = _mm256_load_ps(sb.mn);
      for (int c = 0; c < C; ++c) {
        const int8_t* y = act[c].q + 256 * i;
        __m512i isum = _mm512_setzero_si512();
        for (int j = 0; j < 4; ++j) {
          const __m512i p = _mm512_maddubs_epi16(sb.u[j], _mm512_loadu_si512(y + 64 * j));
          isum = _mm512_dpwssd_epi32(isum, p, sb.sc16[j]);
        }
        acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(sb.d * act[c].dx[i * NG]), acc[c]);
        const float* sy = act[c].sy + i * NG;
        macc[c] = _mm256_fmadd_ps(mn0, _mm256_loadu_ps(sy), macc[c]);
        if constexpr (G == 16) macc[c] = _mm256_fmadd_ps(_mm256_load_ps(sb.mn + 8), _mm256_loadu_ps(sy + 8), macc[c]);
      }
    }
    for (int c = 0; c < C; ++c) {
      const __m256 m = macc[c];
      __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
      s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
      s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
      a.out[c * a.out_stride + r] = _mm512_reduce_add_ps(acc[c]) + _mm_cvtss_f32(s4);
    }
  }
}

// Q4_K's 6-bit scales and mins, per 128-bit lane: a super-block's first 16 bytes (d, dmin, s0..s11)
// -> bytes 0..7 the scales, 8..15 the mins. j < 4: sc = s[j] & 63, m = s[j+4] & 63; j >= 4:
// sc = (s[j+4] & 15) | (s[j-4] >> 6) << 4, m = (s[j+4] >> 4) | (s[j] >> 6) << 4. Replaces a scalar
// unpack whose four 32-bit stores were reloaded as one vector (a failed store forward per super-block).
inline __m512i unpack_scales_k4_x4(__m512i hdr) {
  const __m512i p = _mm512_shuffle_epi8(hdr, _mm512_broadcast_i32x4(_mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15)));
  const __m512i q = _mm512_shuffle_epi8(hdr, _mm512_broadcast_i32x4(_mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11)));
  const __m512i m1 = _mm512_broadcast_i32x4(_mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0));
  const __m512i m2 = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15));
  const __m512i lo = _mm512_or_si512(_mm512_and_si512(p, m1), _mm512_and_si512(_mm512_srli_epi16(p, 4), m2));
  return _mm512_or_si512(lo, _mm512_and_si512(_mm512_srli_epi16(q, 2), _mm512_set1_epi8(0x30)));  // q: 0 where unused
}

// vpshufb index for unpack_scales_k4_x4's output: int16 lanes 0..15 <- scale byte a, 16..31 <- byte b.
inline __m512i scale_shuffle(int a, int b) {
  const __m512i lo = _mm512_set1_epi16(static_cast<short>(0xFF00 | a)), hi = _mm512_set1_epi16(static_cast<short>(0xFF00 | b));
  return _mm512_mask_blend_epi16(0xFFFF0000u, lo, hi);  // odd bytes 0xFF: zero
}

// Q4_K (the decode workhorse) in its own kernel for rows up to kMaxK (longer ones: direct_k512): the
// shared one is compute-bound well below Q4_0's rate per core. Not
// bit-equal to direct_k512 (the integer sums land in other lanes, the mins are summed in integers),
// equal to float rounding. Per super-block:
//   - levels: the 128 level bytes as two 64-byte loads; low nibbles of qs[0..64) are groups 0 and 2,
//     high nibbles groups 1 and 3 (likewise 4-7 from qs[64..128)): one shift for two zmm, and the act
//     columns are copied once per call into that group order;
//   - d and dmin of 16 super-blocks come from one gather; d * dx and dmin * dx per super-block go to a
//     small stack table and reach the FMAs as embedded broadcasts (no shuffle port);
//   - the 6-bit scales and mins of 4 super-blocks are unpacked per zmm, once per chunk, into a stack
//     table; a super-block's 4 int16 scale vectors are then a broadcast load and 4 in-lane vpshufb;
//   - the mins: one vpmaddwd of the unpacked (scale, min) int16 vector with the act's group sums as
//     int16 (exact), then one convert and one FMA with dmin * dx.
// In L2 it reads about as fast as the Q4_0 kernel (bench_cpu_kernels matvec_hot). Prefetch:
// PrefetchStream (an L2 stream 8 KB and an L1 stream 2 KB ahead; a single T0 stream leaves part of the
// bandwidth unused while the kernel computes).
constexpr int64_t kMaxK = 32768;

template <int C>
void direct_q4k512(const MatArgs& a) {
  const int64_t nsb = a.K / 256, nch = (nsb + 15) / 16;
  alignas(64) int8_t qbuf[C][kMaxK];
  alignas(64) int16_t qs16[C][kMaxK / 256][8];  // per super-block: the 8 group sums
  alignas(64) float dxs[C][kMaxK / 256 + 16];    // dx per super-block, zero-padded to whole chunks
  for (int c = 0; c < C; ++c) {
    const ActView v = act_view(a.act + c * a.act_stride, a.K, 32);
    for (int64_t i = 0; i < nsb; ++i) {
      for (int h = 0; h < 2; ++h) {
        const __m512i a0 = _mm512_loadu_si512(v.q + 256 * i + 128 * h), a1 = _mm512_loadu_si512(v.q + 256 * i + 128 * h + 64);
        _mm512_store_si512(qbuf[c] + 256 * i + 128 * h, _mm512_shuffle_i64x2(a0, a1, 0x44));
        _mm512_store_si512(qbuf[c] + 256 * i + 128 * h + 64, _mm512_shuffle_i64x2(a0, a1, 0xEE));
      }
      const __m128i g = _mm256_cvtepi32_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v.qs + 8 * i)));
      _mm_store_si128(reinterpret_cast<__m128i*>(qs16[c][i]), g);
      dxs[c][i] = v.dx[8 * i];
    }
    for (int64_t i = nsb; i < 16 * nch; ++i) dxs[c][i] = 0.f;
  }
  const __m512i mf = _mm512_set1_epi8(0x0F);
  // Scale vectors: zmm 0 = groups (0, 2), 1 = (1, 3), 2 = (4, 6), 3 = (5, 7).
  const __m512i ix0 = scale_shuffle(0, 2), ix1 = scale_shuffle(1, 3), ix2 = scale_shuffle(4, 6), ix3 = scale_shuffle(5, 7);
  const __m128i ixm = _mm_setr_epi8(8, -1, 9, -1, 10, -1, 11, -1, 12, -1, 13, -1, 14, -1, 15, -1);  // mins as int16
  const __m512i goff = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32(static_cast<int>(sizeof(BlockQ4_K))));
  PrefetchStream pf(a.w, a.w + a.n_rows * a.w_stride);
  for (int64_t r = 0; r < a.n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const BlockQ4_K*>(a.w + r * a.w_stride);
    __m512 acc[C];
    __m128 macc[C];
    for (int c = 0; c < C; ++c) {
      acc[c] = _mm512_setzero_ps();
      macc[c] = _mm_setzero_ps();
    }
    for (int64_t ch = 0; ch < nch; ++ch) {
      const int64_t i0 = 16 * ch, n = nsb - i0 < 16 ? nsb - i0 : 16;
      const __mmask16 lanes = n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
      const __m512i hdr = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), lanes, goff, blocks + i0, 1);
      const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hdr));
      const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(hdr, 16)));
      // The chunk's scales and mins, unpacked 4 super-blocks per zmm (one 128-bit lane each).
      alignas(64) uint8_t smt[16][16];
      for (int64_t g = 0; 4 * g < n; ++g) {
        const BlockQ4_K* b4 = blocks + i0 + 4 * g;
        __m512i h = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b4)));
        if (4 * g + 1 < n) h = _mm512_inserti32x4(h, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b4 + 1)), 1);
        if (4 * g + 2 < n) h = _mm512_inserti32x4(h, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b4 + 2)), 2);
        if (4 * g + 3 < n) h = _mm512_inserti32x4(h, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b4 + 3)), 3);
        _mm512_store_si512(smt[4 * g], unpack_scales_k4_x4(h));
      }
      alignas(64) float ddx[C][16], mdx[C][16];
      for (int c = 0; c < C; ++c) {
        const __m512 dx = _mm512_load_ps(dxs[c] + i0);
        _mm512_store_ps(ddx[c], _mm512_mul_ps(d, dx));
        _mm512_store_ps(mdx[c], _mm512_mul_ps(dmin, dx));
      }
#pragma GCC unroll 2
      for (int64_t k = 0; k < n; ++k) {
        const int64_t i = i0 + k;
        const BlockQ4_K& b = blocks[i];
        pf.advance(&b + 1);
        const __m512i sm = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(smt[k])));
        // In-lane vpshufb, not a cross-lane vpermw: 4 cross-lane permutes per super-block would take a
        // large share of the kernel's time on Sapphire Rapids.
        const __m512i sc0 = _mm512_shuffle_epi8(sm, ix0);
        const __m512i sc1 = _mm512_shuffle_epi8(sm, ix1);
        const __m512i sc2 = _mm512_shuffle_epi8(sm, ix2);
        const __m512i sc3 = _mm512_shuffle_epi8(sm, ix3);
        const __m128i m16 = _mm_shuffle_epi8(_mm512_castsi512_si128(sm), ixm);
        const __m512i qa = _mm512_loadu_si512(b.qs), qb = _mm512_loadu_si512(b.qs + 64);
        const __m512i u0 = _mm512_and_si512(qa, mf);
        const __m512i u1 = _mm512_and_si512(_mm512_srli_epi16(qa, 4), mf);
        const __m512i u2 = _mm512_and_si512(qb, mf);
        const __m512i u3 = _mm512_and_si512(_mm512_srli_epi16(qb, 4), mf);
        for (int c = 0; c < C; ++c) {
          const int8_t* y = qbuf[c] + 256 * i;
          __m512i isum = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(u0, _mm512_load_si512(y)), sc0);
          isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(u1, _mm512_load_si512(y + 64)), sc1);
          isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(u2, _mm512_load_si512(y + 128)), sc2);
          isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(u3, _mm512_load_si512(y + 192)), sc3);
          acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(ddx[c][k]), acc[c]);
          const __m128i mq = _mm_madd_epi16(m16, _mm_load_si128(reinterpret_cast<const __m128i*>(qs16[c][i])));
          macc[c] = _mm_fmadd_ps(_mm_cvtepi32_ps(mq), _mm_set1_ps(mdx[c][k]), macc[c]);
        }
      }
    }
    for (int c = 0; c < C; ++c) {
      __m128 s4 = _mm_add_ps(macc[c], _mm_movehl_ps(macc[c], macc[c]));
      s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
      a.out[c * a.out_stride + r] = _mm512_reduce_add_ps(acc[c]) - _mm_cvtss_f32(s4);
    }
  }
}

template <typename Block, int G, void (*Decode)(const Block&, SuperBlock*)>
void direct_k512_cols(const MatArgs& a) {
  switch (a.n_cols) {
    case 1: return direct_k512<Block, G, Decode, 1>(a);
    case 2: return direct_k512<Block, G, Decode, 2>(a);
    case 3: return direct_k512<Block, G, Decode, 3>(a);
    default: return direct_k512<Block, G, Decode, 4>(a);
  }
}

void direct_q4k512_cols(const MatArgs& a) {
  if (a.K > kMaxK) return direct_k512_cols<BlockQ4_K, 32, decode_q4_k>(a);
  switch (a.n_cols) {
    case 1: return direct_q4k512<1>(a);
    case 2: return direct_q4k512<2>(a);
    case 3: return direct_q4k512<3>(a);
    default: return direct_q4k512<4>(a);
  }
}

}  // namespace

void fill_avx512_kquants(KernelTable* t) {
  t->mat[static_cast<uint32_t>(DType::Q4_K)].direct = direct_q4k512_cols;
  t->mat[static_cast<uint32_t>(DType::Q5_K)].direct = direct_k512_cols<BlockQ5_K, 32, decode_q5_k>;
  t->mat[static_cast<uint32_t>(DType::Q6_K)].direct = direct_k512_cols<BlockQ6_K, 16, decode_q6_k>;
}

}  // namespace ferry::kernels::cpu
