// AVX-512 VBMI direct (decode) kernels for Q4_0, Q4_1, Q8_0 and MXFP4 on 512-bit vectors, for CPUs with
// AVX512_VBMI (Ice Lake, Sapphire Rapids, Zen 4 and later; others keep the 256-bit kernels).
// The 256-bit kernel spends ~7 vector ops per 32-level block (decode, a dot, a convert, an FMA, the
// scale broadcasts), which makes its matvec compute-bound at about one core's DRAM rate. Here, per
// chunk of 16 blocks:
//   - levels: one vpermt2b pulls the level bytes of 4 blocks (Q4_0 / Q4_1: 4 x 16 nibble bytes) or 2
//     blocks (Q8_0: 2 x 32 bytes) out of two loads of the raw blocks (the block headers skipped);
//     nibbles split into a low zmm (elements 0..15 of the 4 blocks) and a high one (16..31). The act
//     columns are copied once per call into that order (so the kernel never shuffles them per row);
//   - one vpdpbusd per zmm and act column leaves each block's integer dot spread over 4 (Q4) or 8
//     (Q8_0) int32 lanes; a transposing add tree (6 or 14 shuffles per 16 blocks) turns the chunk's
//     4 or 8 dot vectors into one vector of 16 per-block dots, in a fixed lane order;
//   - per chunk and column, in that lane order: + the integer offset correction (-8 or -128 times the
//     act's exact group sums: exact, as the 256-bit kernel), one convert, and one FMA with
//     d_w * d_x; Q4_1's mins one more FMA with the act's sy. The weight scales come from one gather.
// MXFP4 is Q4_0's layout with a one-byte header: its nibble codes go through one vpshufb to the doubled
// E2M1 value + 16 (kOff 16), and its scale is the header's E8M0 byte as half its power of two.
// Compiled with the AVX-512 flags plus -mavx512vbmi; see the ODR rule in kernels.h.
#include <immintrin.h>

#include <type_traits>

#include "kernels/cpu/dot_vnni256.h"
#include "kernels/cpu/prefetch_stream.h"
// The 256-bit kernels, kept for rows longer than kMaxK.
#include "kernels/cpu/simd_direct_impl.h"

namespace ferry::kernels::cpu {
namespace {

constexpr int64_t kMaxK = 32768;  // the act copies live on the stack; longer rows use the 256-bit kernel

// A legacy 32-level block type: nibble levels (Q4_0, Q4_1) or int8 levels (Q8_0); kOff: value =
// d * (level - kOff) (folded into the integer dot); kMin: value = d * level + m.
template <typename B, bool Nib, int Off, bool Min, int QsOff, typename Dec>
struct Spec {
  using Block = B;
  using Dec256 = Dec;  // the 256-bit decoder (fallback)
  static constexpr bool kE8M0 = Dec::kE8M0;  // MXFP4: codes through kMxfp4Levels, the scale an E8M0 byte
  static constexpr int kBytes = sizeof(B);
  static constexpr bool kNib = Nib;
  static constexpr int kOff = Off;
  static constexpr bool kMin = Min;
  static constexpr int kQsOff = QsOff;   // where the levels start in a block
  static constexpr int kPerVec = Nib ? 4 : 2;     // blocks per vpermt2b
  static constexpr int kVecs = 16 / kPerVec;      // dot vectors per 16-block chunk
};
using SpecQ4_0 = Spec<BlockQ4_0, true, 8, false, 2, DecQ4_0>;
using SpecQ4_1 = Spec<BlockQ4_1, true, 0, true, 4, DecQ4_1>;
using SpecQ8_0 = Spec<BlockQ8_0, false, 128, false, 2, DecQ8_0>;
using SpecMXFP4 = Spec<BlockMXFP4, true, 16, false, 1, DecMXFP4>;

// The blocks' scales from their headers' first 4 bytes (in hdr's lanes): fp16 d, or MXFP4's E8M0 byte e
// as e8m0_half(e): 2^(e - 128) as float bits, (e - 1) << 23, or the subnormal 0x00200000 << e for e < 2.
template <typename S>
inline __m512 block_scales(__m512i hdr) {
  if constexpr (S::kE8M0) {
    const __m512i e = _mm512_and_si512(hdr, _mm512_set1_epi32(0xFF));
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    const __mmask16 small = _mm512_cmplt_epi32_mask(e, _mm512_set1_epi32(2));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, tiny));
  } else {
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hdr));
  }
}

// Lane k of the reduced 16-lane dot vector holds block perm(k) of the chunk (see reduce16).
template <bool Nib>
constexpr int lane_block(int k) {
  if constexpr (Nib) return 4 * (k % 4) + k / 4;
  const int m = k / 4, j = k % 4;
  return (m >> 1) * 8 + 2 * j + (m & 1);
}
template <bool Nib>
inline __m512i lane_blocks() {
  alignas(64) int32_t v[16];
  for (int k = 0; k < 16; ++k) v[k] = lane_block<Nib>(k);
  return _mm512_load_si512(v);
}

// vpermt2b index: output byte j <- the level byte it needs from the 128-byte window of two loads.
template <typename S>
inline __m512i level_index() {
  alignas(64) uint8_t v[64];
  for (int j = 0; j < 64; ++j) {
    const int per = S::kNib ? 16 : 32;  // level bytes per block
    v[j] = static_cast<uint8_t>(S::kBytes * (j / per) + S::kQsOff + j % per);
  }
  return _mm512_load_si512(v);
}

// Four vectors whose 128-bit lane L holds 4 int32 partial sums of one unit -> one vector whose lane
// 4L + i is the sum of lane L of d[i].
inline __m512i reduce4(__m512i d0, __m512i d1, __m512i d2, __m512i d3) {
  const __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(d0, d1), _mm512_unpackhi_epi32(d0, d1));
  const __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(d2, d3), _mm512_unpackhi_epi32(d2, d3));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
}

// Per act column: the chunk-ordered copies the kernel reads. q: for Q4, per 4-block group 64 bytes
// of elements 0..15 of the 4 blocks, then 64 bytes of elements 16..31 (Q8_0 reads the act in place);
// per 16-block chunk, in lane order: dx, the offset correction -kOff * qs (int32), and sy (kMin).
struct ColPrep {
  const int8_t* q;
  const float* dx;
  const int32_t* corr;
  const float* sy;
};

template <typename S>
void prep_column(const uint8_t* act, int64_t K, int8_t* qbuf, float* dx, int32_t* corr, float* sy, ColPrep* out) {
  const ActView v = act_view(act, K, 32);
  const int64_t nb = K / 32, nch = (nb + 15) / 16;
  if constexpr (S::kNib) {
    for (int64_t g = 0; g < 4 * nch; ++g) {  // groups past the last block: zeros
      const int64_t left = nb - 4 * g;
      const int64_t valid = left <= 0 ? 0 : 32 * (left < 4 ? left : 4);  // act bytes of this group
      const __mmask64 m0 = valid >= 64 ? ~0ULL : (1ULL << valid) - 1;
      const __mmask64 m1 = valid >= 128 ? ~0ULL : valid <= 64 ? 0ULL : (1ULL << (valid - 64)) - 1;
      const __m512i a0 = _mm512_maskz_loadu_epi8(m0, v.q + 128 * g);
      const __m512i a1 = _mm512_maskz_loadu_epi8(m1, v.q + 128 * g + 64);
      _mm512_storeu_si512(qbuf + 128 * g, _mm512_shuffle_i64x2(a0, a1, 0x88));
      _mm512_storeu_si512(qbuf + 128 * g + 64, _mm512_shuffle_i64x2(a0, a1, 0xDD));
    }
    out->q = qbuf;
  } else {
    out->q = v.q;
  }
  // The act's group arrays are zero-padded to whole vectors of 16 groups.
  const __m512i perm = lane_blocks<S::kNib>();
  for (int64_t ch = 0; ch < nch; ++ch) {
    _mm512_storeu_ps(dx + 16 * ch, _mm512_permutexvar_ps(perm, _mm512_loadu_ps(v.dx + 16 * ch)));
    if constexpr (S::kOff > 0) {
      const __m512i qs = _mm512_permutexvar_epi32(perm, _mm512_loadu_si512(v.qs + 16 * ch));
      _mm512_storeu_si512(corr + 16 * ch, _mm512_mullo_epi32(qs, _mm512_set1_epi32(-S::kOff)));
    }
    if constexpr (S::kMin) _mm512_storeu_ps(sy + 16 * ch, _mm512_permutexvar_ps(perm, _mm512_loadu_ps(v.sy + 16 * ch)));
  }
  out->dx = dx;
  out->corr = corr;
  out->sy = sy;
}

template <typename S, int C>
void direct_legacy512(const MatArgs& a) {
  const int64_t nb = a.K / 32, nch = (nb + 15) / 16;
  constexpr int kChunks = static_cast<int>(kMaxK / 512);
  alignas(64) int8_t qbuf[S::kNib ? C : 1][S::kNib ? kMaxK : 64];
  alignas(64) float dxbuf[C][16 * kChunks], sybuf[S::kMin ? C : 1][16 * kChunks];
  alignas(64) int32_t corrbuf[S::kOff > 0 ? C : 1][16 * kChunks];
  ColPrep col[C];
  for (int c = 0; c < C; ++c)
    prep_column<S>(a.act + c * a.act_stride, a.K, qbuf[S::kNib ? c : 0], dxbuf[c], corrbuf[S::kOff > 0 ? c : 0],
                   sybuf[S::kMin ? c : 0], &col[c]);

  const __m512i lidx = level_index<S>();
  // Gather offsets of the blocks' first 4 bytes (d, and m for Q4_1), in lane order.
  const __m512i goff = _mm512_mullo_epi32(lane_blocks<S::kNib>(), _mm512_set1_epi32(S::kBytes));
  const __m512i mf = _mm512_set1_epi8(0x0F), flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i code_levels =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Levels)));
  (void)code_levels;  // MXFP4 only
  constexpr int kGroupBytes = S::kPerVec * S::kBytes;  // bytes of one vpermt2b's blocks (<= 80)

  PrefetchStream pf(a.w, a.w + a.n_rows * a.w_stride);
  for (int64_t r = 0; r < a.n_rows; ++r) {
    const uint8_t* row = a.w + r * a.w_stride;
    __m512 acc[C];
    for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
    // One 16-block chunk; kFull: all 16 blocks exist (no masks).
    auto chunk = [&](int64_t ch, auto full) {
      constexpr bool kFull = decltype(full)::value;
      const uint8_t* p = row + ch * 16 * S::kBytes;
      const int n = static_cast<int>(nb - 16 * ch < 16 ? nb - 16 * ch : 16);
      pf.advance(p + 16 * S::kBytes);

      // Level vectors of group g (kPerVec blocks), zero past the row's last block.
      auto levels = [&](int g, __m512i* lo, __m512i* hi) {
        const uint8_t* q = p + g * kGroupBytes;
        __m512i z0, z1;
        if (kFull || 16 * ch + S::kPerVec * (g + 1) <= nb) {
          z0 = _mm512_loadu_si512(q);
          if constexpr (kGroupBytes - 64 <= 4) {
            int32_t t;
            memcpy(&t, q + 64, 4);
            z1 = _mm512_zextsi128_si512(_mm_cvtsi32_si128(t));
          } else if constexpr (kGroupBytes - 64 <= 8) {
            z1 = _mm512_zextsi128_si512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 64)));
          } else {
            z1 = _mm512_zextsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 64)));
          }
        } else {
          const int64_t blocks = nb - 16 * ch - S::kPerVec * g;
          const int64_t valid = blocks > 0 ? blocks * S::kBytes : 0;
          const __mmask64 m0 = valid >= 64 ? ~0ULL : (1ULL << valid) - 1;
          const __mmask64 m1 = valid <= 64 ? 0ULL : (1ULL << (valid - 64)) - 1;
          z0 = _mm512_maskz_loadu_epi8(m0, q);
          z1 = _mm512_maskz_loadu_epi8(m1, q + 64);
        }
        const __m512i v = _mm512_permutex2var_epi8(z0, lidx, z1);
        if constexpr (S::kNib) {
          *lo = _mm512_and_si512(v, mf);
          *hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), mf);
          if constexpr (S::kE8M0) {
            *lo = _mm512_shuffle_epi8(code_levels, *lo);
            *hi = _mm512_shuffle_epi8(code_levels, *hi);
          }
        } else {
          *lo = _mm512_xor_si512(v, flip);  // u = q + 128
        }
      };

      __m512i hdr;
      __m512i dots[C];
      // A last chunk of one level group (at most 4 blocks of Q4_0 / Q4_1, 2 of Q8_0; e.g. 576-wide rows:
      // 16 + 2 blocks): the headers by scalar loads instead of the 16-lane gather, and group 0's dots
      // summed in place instead of through the reductions of all groups. Lane for lane the same integers
      // and headers as below (the blocks' lanes per lane_block, every other lane 0), so the same float
      // epilogue and the same result.
      bool short_tail = false;
      if constexpr (!kFull) short_tail = n <= S::kPerVec;
      if (short_tail) {
        int32_t h[4] = {0, 0, 0, 0};
        for (int L = 0; L < n; ++L) memcpy(&h[L], p + L * S::kBytes, 4);
        // Block L's lane: 4L for both layouts (lane_block: Q4 4 (k % 4) + k / 4, Q8_0 k = 4 -> block 1).
        hdr = _mm512_set_epi32(0, 0, 0, h[3], 0, 0, 0, h[2], 0, 0, 0, h[1], 0, 0, 0, h[0]);
        __m512i lo, hi;
        levels(0, &lo, &hi);
        for (int c = 0; c < C; ++c) {
          const int8_t* y = col[c].q + 16 * ch * 32;
          __m512i d;
          if constexpr (S::kNib) {  // 128-bit lane L: block L
            d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(y));
            d = _mm512_dpbusd_epi32(d, hi, _mm512_loadu_si512(y + 64));
          } else {  // 128-bit lanes 0-1: block 0, 2-3: block 1; the act is zero past the row's last block
            const __m512i yv = n == 2 ? _mm512_loadu_si512(y) : _mm512_maskz_loadu_epi8(0xFFFFFFFFULL, y);
            d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, yv);
          }
          d = _mm512_add_epi32(d, _mm512_shuffle_epi32(d, _MM_PERM_BADC));  // each 128-bit lane's sum
          d = _mm512_add_epi32(d, _mm512_shuffle_epi32(d, _MM_PERM_CDAB));
          if constexpr (!S::kNib) {
            d = _mm512_add_epi32(d, _mm512_shuffle_i32x4(d, d, _MM_SHUFFLE(2, 3, 0, 1)));  // lanes 0+1, 2+3
            d = _mm512_shuffle_i32x4(d, d, _MM_SHUFFLE(3, 2, 2, 0));  // block 1 to 128-bit lane 1
          }
          dots[c] = _mm512_maskz_mov_epi32(S::kNib ? 0x1111 : 0x0011, d);
        }
      } else if constexpr (kFull) {
        hdr = _mm512_i32gather_epi32(goff, p, 1);
      } else {
        const __mmask16 lanes = _mm512_cmplt_epi32_mask(lane_blocks<S::kNib>(), _mm512_set1_epi32(n));
        hdr = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), lanes, goff, p, 1);
      }
      const __m512 dw = block_scales<S>(hdr);
      if (short_tail) {
        // dots are done
      } else if constexpr (S::kNib) {
        __m512i d[C][4];
        for (int g = 0; g < 4; ++g) {
          if (!kFull && 4 * g >= n) {  // past the row's last block
            for (int c = 0; c < C; ++c) d[c][g] = _mm512_setzero_si512();
            continue;
          }
          __m512i lo, hi;
          levels(g, &lo, &hi);
          for (int c = 0; c < C; ++c) {
            const int8_t* y = col[c].q + (16 * ch + 4 * g) * 32;
            const __m512i t = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(y));
            d[c][g] = _mm512_dpbusd_epi32(t, hi, _mm512_loadu_si512(y + 64));
          }
        }
        for (int c = 0; c < C; ++c) dots[c] = reduce4(d[c][0], d[c][1], d[c][2], d[c][3]);
      } else {
        // Two halves of 4 vectors (8 blocks each); a vector's 128-bit lanes 0-1 are its first block.
        __m512i half[C][2];
        for (int h = 0; h < 2; ++h) {
          __m512i d[C][4];
          for (int g = 0; g < 4; ++g) {
            if (!kFull && 2 * (4 * h + g) >= n) {  // past the row's last block
              for (int c = 0; c < C; ++c) d[c][g] = _mm512_setzero_si512();
              continue;
            }
            __m512i u, unused;
            levels(4 * h + g, &u, &unused);
            const int64_t b = 16 * ch + 2 * (4 * h + g);
            for (int c = 0; c < C; ++c) {
              const int8_t* y = col[c].q + b * 32;
              __m512i yv;
              if (kFull || b + 2 <= nb) {
                yv = _mm512_loadu_si512(y);
              } else {  // zero past the last block (u there is 128, not 0)
                const int64_t valid = b < nb ? 32 * (nb - b) : 0;
                yv = _mm512_maskz_loadu_epi8(valid >= 64 ? ~0ULL : (1ULL << valid) - 1, y);
              }
              d[c][g] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, yv);
            }
          }
          for (int c = 0; c < C; ++c) half[c][h] = reduce4(d[c][0], d[c][1], d[c][2], d[c][3]);
        }
        // half[h] lane 4L + i: 128-bit lane L of group 4h + i. Lanes 0-1 of a group are its first
        // block, 2-3 its second: add L = 0 + 1 and 2 + 3.
        for (int c = 0; c < C; ++c) {
          const __m512i x = _mm512_shuffle_i64x2(half[c][0], half[c][1], 0x88);  // L0, L2 of each
          const __m512i y = _mm512_shuffle_i64x2(half[c][0], half[c][1], 0xDD);  // L1, L3 of each
          dots[c] = _mm512_add_epi32(x, y);
        }
      }

      for (int c = 0; c < C; ++c) {
        __m512i s = dots[c];
        if constexpr (S::kOff > 0) s = _mm512_add_epi32(s, _mm512_loadu_si512(col[c].corr + 16 * ch));
        const __m512 sc = _mm512_mul_ps(dw, _mm512_loadu_ps(col[c].dx + 16 * ch));
        acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), sc, acc[c]);
        if constexpr (S::kMin) {
          const __m512 mw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(hdr, 16)));
          acc[c] = _mm512_fmadd_ps(mw, _mm512_loadu_ps(col[c].sy + 16 * ch), acc[c]);
        }
      }
    };
    int64_t ch = 0;
    for (; ch < nb / 16; ++ch) chunk(ch, std::true_type{});
    if (ch < nch) chunk(ch, std::false_type{});
    for (int c = 0; c < C; ++c) a.out[c * a.out_stride + r] = _mm512_reduce_add_ps(acc[c]);
  }
}

template <typename S>
void direct_legacy512_cols(const MatArgs& a) {
  if (a.K > kMaxK) return direct_by_cols<LegacyK<typename S::Dec256>>(a);
  switch (a.n_cols) {
    case 1: return direct_legacy512<S, 1>(a);
    case 2: return direct_legacy512<S, 2>(a);
    case 3: return direct_legacy512<S, 3>(a);
    default: return direct_legacy512<S, 4>(a);
  }
}

template <typename S>
void install(KernelTable* t, DType type) {
  MatKernel& m = t->mat[static_cast<uint32_t>(type)];
  m.direct = direct_legacy512_cols<S>;
  m.direct_cols = kMaxDirectCols;
}

}  // namespace

void fill_avx512_legacy(KernelTable* t) {
  if (!__builtin_cpu_supports("avx512vbmi")) return;
  install<SpecQ4_0>(t, DType::Q4_0);
  install<SpecQ4_1>(t, DType::Q4_1);
  install<SpecQ8_0>(t, DType::Q8_0);
  install<SpecMXFP4>(t, DType::MXFP4);
}

}  // namespace ferry::kernels::cpu
