// Direct (decode-path) matmul kernels on 256-bit vectors, shared by the AVX2 and AVX-512 files: each
// weight block is decoded in registers to unsigned levels (natural element order, 32 per ymm) and
// dotted with up to C act columns. The including file defines the two integer dot primitives:
//   dot_u8s8(u, s): 8 x int32, lane k = sum of u[4k..4k+3] * s[4k..4k+3] (u <= 63 unsigned)
//   dot_u8s8_acc(acc, u, s): acc + dot_u8s8(u, s)
//   dot_s8s8(a, b): the same with both operands signed (Q8_0 weights)
//   dot_i16_acc(acc, a, b): acc + vpmaddwd(a, b) (int16 pairs; vpdpwssd where VNNI has it)
//   kDotU8Full: whether dot_u8s8 is exact for u up to 255 (VNNI: yes; pmaddubsw saturates)
// (AVX2: pmaddubsw + pmaddwd; AVX-512 VNNI: vpdpbusd). Same ODR rules as generic_impl.h.
#pragma once

#include <immintrin.h>

#include <type_traits>

#include "kernels/cpu/generic_impl.h"
#include "kernels/cpu/prefetch_stream.h"


namespace ferry::kernels::cpu {
namespace {

inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}


// Broadcasts from memory, forced: GCC otherwise turns a broadcast of a value it just stored into
// register shuffles, which all compete for one port and would bound the kernel (several per Q4_0
// block); a broadcast load costs only a load slot.
inline __m256 bcast_ss(const float* p) {
  __m256 r;
  __asm__("vbroadcastss %1, %0" : "=v"(r) : "m"(*p));
  return r;
}
inline __m256i bcast_d(const int32_t* p) {
  __m256i r;
  __asm__("vpbroadcastd %1, %0" : "=v"(r) : "m"(*p));
  return r;
}

// Software prefetch: PrefetchStream (prefetch_stream.h). One core's hardware prefetchers alone keep too
// few misses in flight for a decode matvec to reach the core's share of DRAM bandwidth.

// 16 bytes of nibbles -> 32 bytes: [low nibbles (elements 0..15), high nibbles (16..31)]. The bytes are
// broadcast to both 128-bit lanes by the load and the upper lane shifted by 4 per 32-bit word: no
// cross-lane shuffle.
inline __m256i nibbles32(const uint8_t* qs) {
  const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  const __m256i sh = _mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
  return _mm256_and_si256(sh, _mm256_set1_epi8(0x0F));
}

// 32 bits -> 32 bytes, 0x10 where the bit is set.
inline __m256i bits_to_0x10(uint32_t bits) {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  return _mm256_maskz_set1_epi8(bits, 0x10);
#else
  const __m256i x = _mm256_set1_epi32(static_cast<int>(bits));
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  __m256i bytes = _mm256_shuffle_epi8(x, shuf);
  bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_and_si256(_mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(0x10));
#endif
}

// ---- legacy types: 32-element blocks ----------------------------------------------------------------
// levels(): the 32 unsigned levels u of a block, natural order. kOff > 0: value = d * (u - kOff) (the
// offset is folded into the integer dot through the act's exact sums); kMin: value = d * u + m.
// decode(): levels plus (scale, min) as floats, for the panel packer.
template <typename Block, int Off, bool Min>
struct LegacyDec {
  using BlockT = Block;
  static constexpr int kOff = Off;
  static constexpr bool kMin = Min;
  static constexpr bool kE8M0 = false;  // the scale is an E8M0 byte at the block start, not an fp16
};
struct DecQ4_0 : LegacyDec<BlockQ4_0, 8, false> {
  static __m256i levels(const BlockT& b) { return nibbles32(b.qs); }
};
struct DecQ4_1 : LegacyDec<BlockQ4_1, 0, true> {
  static __m256i levels(const BlockT& b) { return nibbles32(b.qs); }
};
struct DecQ5_0 : LegacyDec<BlockQ5_0, 16, false> {
  static __m256i levels(const BlockT& b) {
    uint32_t qh;
    memcpy(&qh, b.qh, 4);
    return _mm256_or_si256(nibbles32(b.qs), bits_to_0x10(qh));
  }
};
struct DecQ5_1 : LegacyDec<BlockQ5_1, 0, true> {
  static __m256i levels(const BlockT& b) {
    uint32_t qh;
    memcpy(&qh, b.qh, 4);
    return _mm256_or_si256(nibbles32(b.qs), bits_to_0x10(qh));
  }
};
// Q8_0: u = q + 128 (flip the sign bit); raw(): the signed levels for dot_s8s8.
struct DecQ8_0 : LegacyDec<BlockQ8_0, 128, false> {
  static __m256i raw(const BlockT& b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)); }
  static __m256i levels(const BlockT& b) { return _mm256_xor_si256(raw(b), _mm256_set1_epi8(static_cast<char>(0x80))); }
};

// MXFP4: each code looked up as its doubled E2M1 value + 16 (one vpshufb per block); the block's
// scale is half its E8M0 exponent byte's power of two.
struct DecMXFP4 : LegacyDec<BlockMXFP4, 16, false> {
  static constexpr bool kE8M0 = true;
  static __m256i levels(const BlockT& b) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Levels)));
    return _mm256_shuffle_epi8(table, nibbles32(b.qs));
  }
};

template <typename Dec>
__m256i legacy_decode(const typename Dec::BlockT& b, float* sc, float* mn) {
  if constexpr (Dec::kE8M0) {
    *sc = e8m0_half(b.e);
  } else {
    *sc = h2f(b.d);
  }
  if constexpr (Dec::kMin) {
    *mn = h2f(b.m);
  } else {
    *mn = -static_cast<float>(Dec::kOff) * *sc;
  }
  return Dec::levels(b);
}

// 8 x u32 (an fp16 in the low or high half) -> 8 floats.
inline __m256 halves_to_f32(__m256i v, bool high) {
  if (high) v = _mm256_srli_epi32(v, 16);
  v = _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF));
  return _mm256_cvtph_ps(_mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

// d (and m) of blocks [0, n) (n <= 16): one gather of the u32 at each block start (d in its low half,
// the min in its high half for Q4_1 / Q5_1). Lanes >= n are 0.
template <typename Dec>
inline void block_scales16(const typename Dec::BlockT* blk, int n, float* d, float* m) {
  if constexpr (Dec::kE8M0) {
    for (int i = 0; i < 16; ++i) d[i] = i < n ? e8m0_half(blk[i].e) : 0.f;
    return;
  }
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i idx = _mm256_mullo_epi32(iota, _mm256_set1_epi32(static_cast<int>(sizeof(typename Dec::BlockT))));
  for (int h = 0; h < 2; ++h) {
    const int cnt = n - 8 * h;
    __m256i g = _mm256_setzero_si256();
    if (cnt > 0) {
      const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(cnt), iota);
      g = _mm256_mask_i32gather_epi32(g, reinterpret_cast<const int*>(blk + 8 * h), idx, mask, 1);
    }
    _mm256_store_ps(d + 8 * h, halves_to_f32(g, false));
    if constexpr (Dec::kMin) _mm256_store_ps(m + 8 * h, halves_to_f32(g, true));
  }
}

// Lanes of x and z summed per 128-bit half, 4 x 8 int32 -> 8 int32: lane k of the result is the sum
// of the 8 lanes of vector k (v[0..3] -> lanes 0..3, v[4..7] -> lanes 4..7).
inline __m256i sum8x8(const __m256i* v) {
  const __m256i x = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i z = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(x, z, 0x20), _mm256_permute2x128_si256(x, z, 0x31));
}

// Legacy rows against C act columns, 8 blocks per step. Per block: the levels decoded once, then per
// column one integer dot (8 int32 lanes); per 8 blocks and column: a transposing add tree (sum8x8)
// makes one vector of the 8 blocks' dots, + the integer offset correction -kOff * qs (exact), one
// convert and one FMA with d * dx; the weights' d (and m) of the 8 blocks come from one gather. The
// signed path (Q8_0 where dot_u8s8 cannot take levels up to 255) dots the raw signed levels.
template <typename Dec, int C>
void direct_legacy(const MatArgs& a) {
  using Block = typename Dec::BlockT;
  constexpr bool kSignedPath = Dec::kOff == 128 && !kDotU8Full;
  constexpr int kOffShift = Dec::kOff == 128 ? 7 : Dec::kOff == 16 ? 4 : 3;  // kOff is 0, 8, 16 or 128
  static_assert(Dec::kOff == 0 || (1 << kOffShift) == Dec::kOff, "power-of-two offsets");
  const int64_t nb = a.K / 32;
  ActView act[C];
  for (int c = 0; c < C; ++c) act[c] = act_view(a.act + c * a.act_stride, a.K, 32);
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i goff = _mm256_mullo_epi32(iota, _mm256_set1_epi32(static_cast<int>(sizeof(Block))));
  StepPrefetchStream pf(a.w, a.w + a.n_rows * a.w_stride);
  for (int64_t r = 0; r < a.n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const Block*>(a.w + r * a.w_stride);
    __m256 acc[C];
    for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
    // 8 blocks from b0; kTail: the row's last, partial step (n < 8): its missing blocks repeat the
    // last one, with d = 0 (and the act's zero padding past the row: dx = sy = qs = 0).
    auto step = [&](int64_t b0, int n, auto tail) {
      constexpr bool kTail = decltype(tail)::value;
      pf.step<8 * sizeof(Block)>(blocks + b0);
      __m256 dw, mw = _mm256_setzero_ps();
      if constexpr (Dec::kE8M0) {
        alignas(32) float d[8];
        for (int i = 0; i < 8; ++i) d[i] = i < n ? e8m0_half(blocks[b0 + i].e) : 0.f;
        dw = _mm256_load_ps(d);
      } else {
        const __m256i lanes = kTail ? _mm256_cmpgt_epi32(_mm256_set1_epi32(n), iota) : _mm256_set1_epi32(-1);
        const __m256i g = _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), reinterpret_cast<const int*>(blocks + b0), goff, lanes, 1);
        dw = halves_to_f32(g, false);
        if constexpr (Dec::kMin) mw = halves_to_f32(g, true);
      }
      __m256i dots[C][8];
      for (int i = 0; i < 8; ++i) {
        const int64_t b = kTail ? (b0 + i < nb ? b0 + i : nb - 1) : b0 + i;
        const __m256i u = kSignedPath ? DecQ8_0::raw(reinterpret_cast<const BlockQ8_0&>(blocks[b])) : Dec::levels(blocks[b]);
        for (int c = 0; c < C; ++c) {
          const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act[c].q + 32 * b));
          dots[c][i] = kSignedPath ? dot_s8s8(u, y) : dot_u8s8(u, y);
        }
      }
      for (int c = 0; c < C; ++c) {
        __m256i sum = sum8x8(dots[c]);
        if constexpr (Dec::kOff > 0 && !kSignedPath) {
          const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act[c].qs + b0));
          sum = _mm256_sub_epi32(sum, _mm256_slli_epi32(qs, kOffShift));
        }
        const __m256 sc = _mm256_mul_ps(dw, _mm256_loadu_ps(act[c].dx + b0));
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), sc, acc[c]);
        if constexpr (Dec::kMin) acc[c] = _mm256_fmadd_ps(mw, _mm256_loadu_ps(act[c].sy + b0), acc[c]);
      }
    };
    int64_t b0 = 0;
    for (; b0 + 8 <= nb; b0 += 8) step(b0, 8, std::false_type{});
    if (b0 < nb) step(b0, static_cast<int>(nb - b0), std::true_type{});
    for (int c = 0; c < C; ++c) a.out[c * a.out_stride + r] = hsum256(acc[c]);
  }
}

// Q4_0 / Q4_1 rows up to kNibMaxK, two blocks per ymm: the kernel above spends ~10 instructions per
// 32-level block (a 16-byte nibble load and split, the dot, a convert and an FMA per block). Here a
// ymm holds the 16 nibble bytes of blocks 2j and 2j + 1 (one per 128-bit lane), split into low and high
// nibbles (elements 0..15 and 16..31 of each block); the act columns are copied once per call with the
// middle quarters of every 64 bytes swapped to match, and their per-block dx, offset corrections
// (-8 * qs) and sy permuted to the chunk's lane order. Per pair and column the nibble products
// (vpmaddubsw) are summed in int16 over 4 pairs by a vphaddw tree (|sum of 16| <= 16 * 15 * 127 fits)
// and widened once (vpmaddwd): 8 block sums per vector, lanes in block order 0 2 4 6 1 3 5 7 (VNNI:
// vpdpbusd per pair, vphaddd tree). The chunk's offset correction, convert and FMA with d * dx run on
// that vector: ~5 instructions per block. d (and m) of the chunk come from one gather in that order.
constexpr int64_t kNibMaxK = 32768;

template <typename Dec, int C>
void direct_nib(const MatArgs& a) {
  static_assert(Dec::kOff == 8 || Dec::kOff == 0, "Q4_0 / Q4_1");
  using Block = typename Dec::BlockT;
  const int64_t nb = a.K / 32;
  constexpr int kMaxChunks = static_cast<int>(kNibMaxK / 256);
  alignas(32) int8_t yb[C][kNibMaxK + 256];
  // Per chunk of 8 blocks, in the chunk's lane order: dx, -8 * qs (Q4_0), sy (Q4_1); 0 past the row.
  alignas(32) float dxp[C][8 * kMaxChunks];
  alignas(32) int32_t corrp[Dec::kOff > 0 ? C : 1][8 * kMaxChunks];
  alignas(32) float syp[Dec::kMin ? C : 1][8 * kMaxChunks];
  const __m256i perm = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  const int64_t nch = (nb + 7) / 8;
  for (int c = 0; c < C; ++c) {
    const ActView act = act_view(a.act + c * a.act_stride, a.K, 32);
    for (int64_t b = 0; b < nb; b += 2) {
      const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act.q + 32 * b));
      const __m256i y1 = b + 1 < nb ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act.q + 32 * b + 32))
                                    : _mm256_setzero_si256();
      _mm256_store_si256(reinterpret_cast<__m256i*>(yb[c] + 32 * b), _mm256_permute2x128_si256(y0, y1, 0x20));
      _mm256_store_si256(reinterpret_cast<__m256i*>(yb[c] + 32 * b + 32), _mm256_permute2x128_si256(y0, y1, 0x31));
    }
    for (int64_t b = (nb + 1) / 2 * 2; b < nch * 8; ++b)  // the last chunk's blocks past the row
      _mm256_store_si256(reinterpret_cast<__m256i*>(yb[c] + 32 * b), _mm256_setzero_si256());
    for (int64_t ch = 0; ch < nch; ++ch) {  // the act's group arrays are zero-padded to 16 groups
      _mm256_store_ps(dxp[c] + 8 * ch, _mm256_permutevar8x32_ps(_mm256_loadu_ps(act.dx + 8 * ch), perm));
      if constexpr (Dec::kOff > 0) {
        const __m256i qs = _mm256_permutevar8x32_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(act.qs + 8 * ch)), perm);
        _mm256_store_si256(reinterpret_cast<__m256i*>(corrp[c] + 8 * ch), _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(qs, 3)));
      }
      if constexpr (Dec::kMin)
        _mm256_store_ps(syp[c] + 8 * ch, _mm256_permutevar8x32_ps(_mm256_loadu_ps(act.sy + 8 * ch), perm));
    }
  }
  const __m256i gidx = _mm256_mullo_epi32(perm, _mm256_set1_epi32(static_cast<int>(sizeof(Block))));
  const __m256i mf = _mm256_set1_epi8(0x0F);
  StepPrefetchStream pf(a.w, a.w + a.n_rows * a.w_stride);
  for (int64_t r = 0; r < a.n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const Block*>(a.w + r * a.w_stride);
    __m256 acc[C], macc[C];
    for (int c = 0; c < C; ++c) acc[c] = macc[c] = _mm256_setzero_ps();
    // A chunk of 8 blocks from b0; kTail: the row's last, partial chunk (n < 8).
    auto chunk = [&](int64_t b0, int n, auto tail) {
      constexpr bool kTail = decltype(tail)::value;
      pf.step<8 * sizeof(Block)>(blocks + b0);
      const __m256i lanes = kTail ? _mm256_cmpgt_epi32(_mm256_set1_epi32(n), perm) : _mm256_set1_epi32(-1);
      const __m256i g = _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), reinterpret_cast<const int*>(blocks + b0), gidx, lanes, 1);
      const __m256 dw = halves_to_f32(g, false);  // 0 past the row: the padded act is 0 there too
      __m256i v[4][C];  // per pair and column: int16 nibble products (VNNI: int32 dots)
      for (int j = 0; j < 4; ++j) {
        // Past the row's last block, the pair's missing half repeats its first (times a zero act).
        int64_t i0 = b0 + 2 * j, i1 = i0 + 1;
        if constexpr (kTail) {
          i0 = i0 < nb ? i0 : nb - 1;
          i1 = i1 < nb ? i1 : i0;
        }
        const __m256i w = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(blocks[i1].qs),
                                              reinterpret_cast<const __m128i*>(blocks[i0].qs));
        const __m256i lo = _mm256_and_si256(w, mf), hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), mf);
        for (int c = 0; c < C; ++c) {
          const int8_t* y = yb[c] + 32 * (b0 + 2 * j);
          const __m256i ylo = _mm256_load_si256(reinterpret_cast<const __m256i*>(y));
          const __m256i yhi = _mm256_load_si256(reinterpret_cast<const __m256i*>(y + 32));
          if constexpr (kDotU8Full) {
            v[j][c] = dot_u8s8_acc(dot_u8s8(lo, ylo), hi, yhi);
          } else {  // |sum of 4 products| <= 4 * 15 * 127
            v[j][c] = _mm256_add_epi16(_mm256_maddubs_epi16(lo, ylo), _mm256_maddubs_epi16(hi, yhi));
          }
        }
      }
      for (int c = 0; c < C; ++c) {
        __m256i sum;
        if constexpr (kDotU8Full) {
          sum = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0][c], v[1][c]), _mm256_hadd_epi32(v[2][c], v[3][c]));
        } else {
          const __m256i h = _mm256_hadd_epi16(_mm256_hadd_epi16(v[0][c], v[1][c]), _mm256_hadd_epi16(v[2][c], v[3][c]));
          sum = _mm256_madd_epi16(h, _mm256_set1_epi16(1));
        }
        if constexpr (Dec::kOff > 0)
          sum = _mm256_add_epi32(sum, _mm256_load_si256(reinterpret_cast<const __m256i*>(corrp[c] + b0)));
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(dw, _mm256_load_ps(dxp[c] + b0)), acc[c]);
        if constexpr (Dec::kMin) macc[c] = _mm256_fmadd_ps(halves_to_f32(g, true), _mm256_load_ps(syp[c] + b0), macc[c]);
      }
    };
    int64_t b0 = 0;
    for (; b0 + 8 <= nb; b0 += 8) chunk(b0, 8, std::false_type{});
    if (b0 < nb) chunk(b0, static_cast<int>(nb - b0), std::true_type{});
    for (int c = 0; c < C; ++c) a.out[c * a.out_stride + r] = hsum256(_mm256_add_ps(acc[c], macc[c]));
  }
}

}  // namespace
}  // namespace ferry::kernels::cpu

#include "kernels/cpu/simd_kquant_impl.h"

namespace ferry::kernels::cpu {
namespace {

// Dispatch on the column count (1..kMaxDirectCols). KT::run<C> is the kernel for C columns.
template <typename KT>
void direct_by_cols(const MatArgs& a) {
  switch (a.n_cols) {
    case 1: return KT::template run<1>(a);
    case 2: return KT::template run<2>(a);
    case 3: return KT::template run<3>(a);
    default: return KT::template run<4>(a);
  }
}
template <typename Dec>
struct LegacyK {
  template <int C>
  static void run(const MatArgs& a) { direct_legacy<Dec, C>(a); }
};
// Q4_0 / Q4_1: the paired kernel for rows up to kNibMaxK, else the per-block one.
template <typename Dec>
struct NibK {
  template <int C>
  static void run(const MatArgs& a) {
    if (a.K > kNibMaxK) return direct_legacy<Dec, C>(a);
    direct_nib<Dec, C>(a);
  }
};
template <typename Dec>
struct KquantK {
  template <int C>
  static void run(const MatArgs& a) { direct_kquant<Dec, C>(a); }
};
// Q6_K: the chunked kernel for rows up to kQ6MaxK (simd_kquant_impl.h), else the plain one.
struct KquantQ6 {
  template <int C>
  static void run(const MatArgs& a) {
    if (a.K > kQ6MaxK) return direct_kquant<DecQ6_K, C>(a);
    direct_q6k<C>(a);
  }
};
// Q4_K / Q5_K: the chunked kernel for rows up to kK4MaxK (simd_kquant_impl.h), else the plain one.
template <typename Dec>
struct KquantK4 {
  template <int C>
  static void run(const MatArgs& a) {
    if (a.K > kK4MaxK) return direct_kquant<Dec, C>(a);
    direct_k4<Dec, C>(a);
  }
};

inline void set_direct_quant(KernelTable* t) {
  struct Entry {
    DType type;
    void (*fn)(const MatArgs&);
  };
  const Entry entries[] = {
      {DType::Q4_0, direct_by_cols<NibK<DecQ4_0>>},     {DType::Q4_1, direct_by_cols<NibK<DecQ4_1>>},
      {DType::Q5_0, direct_by_cols<LegacyK<DecQ5_0>>}, {DType::Q5_1, direct_by_cols<LegacyK<DecQ5_1>>},
      {DType::Q8_0, direct_by_cols<LegacyK<DecQ8_0>>}, {DType::MXFP4, direct_by_cols<LegacyK<DecMXFP4>>},
      {DType::Q2_K, direct_by_cols<KquantK<DecQ2_K>>},
      {DType::Q3_K, direct_by_cols<KquantK<DecQ3_K>>}, {DType::Q4_K, direct_by_cols<KquantK4<DecQ4_K>>},
      {DType::Q5_K, direct_by_cols<KquantK4<DecQ5_K>>}, {DType::Q6_K, direct_by_cols<KquantQ6>},
  };
  for (const Entry& e : entries) {
    MatKernel& m = t->mat[static_cast<uint32_t>(e.type)];
    m.direct = e.fn;
    m.direct_cols = kMaxDirectCols;
  }
}

}  // namespace
}  // namespace ferry::kernels::cpu
