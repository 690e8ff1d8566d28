// The v2 decode kernels' weight decoders and the split layout's dequantization, written once for host and
// device (FERRY_HD) like quant_units.h, so the exact code the GPU runs is unit-tested on the host in CI
// (tests/kernels/cuda/quant_units_test.cc):
//   ChunkDec<T>                   16-byte chunks of a row: load / load_x / dot (below)
//   ChunkDecQ4KWide, ChunkDecQ4KPair  Q4_K in 64-weight units (the pair form device only: shuffles)
//   dequant32_split<T>(row,K,g,o) elements [32g, 32g + 32) of a split-layout row (tensor/repack.h)
#pragma once

#include "kernels/cuda/quant_units.h"

namespace ferry::kernels::cuda {

// ---- 16-byte chunks --------------------------------------------------------------------------------
// The v2 decode kernels read a row's main quant plane as 16-byte chunks: chunk c is bytes [16c, 16c + 16)
// of the split row's first plane (tensor/repack.h) for Q4_0 / Q8_0 / Q6_K, and the c % 8-th 16 bytes of
// the qs of block c / 8 for Q4_K / Q5_K (ggml layout: their 144 / 176-byte blocks are 16-byte multiples).
// Consecutive lanes take consecutive chunks, so one warp load instruction reads 512 contiguous bytes (4 x
// 128 for Q4_K / Q5_K) and every 32-byte sector it touches is used whole. Per type, ChunkDec<T> has
//   kElems              elements per chunk
//   W, load(row,K,c,w)  the register image of everything chunk c needs from the weights (loaded for
//                       several chunks before any is used, so several loads per lane are in flight)
//   X, load_x(c,xq,xds) the token's activations for chunk c (xq = the token's int8 row, xds its {d, d*sum}
//                       per 32), loaded once for all the rows a warp handles
//   dot(w, c, x)        the chunk's dot product; the row dot is the sum over chunks. Same integer sums and
//                       scale products as dot_slice, so results differ from it only in float order.

struct alignas(16) Q16 {
  uint32_t w[4];
};

// A plain (not .nc) load: ptxas keeps plain loads above griddepcontrol.wait, where the v2 kernels issue
// their first weight loads; it sank __ldg's there (seen in the SASS), which would undo the early start.
FERRY_HD Q16 ld_q16(const void* p) {
#if defined(__CUDA_ARCH__)
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  return Q16{{v.x, v.y, v.z, v.w}};
#else
  Q16 v;
  memcpy(&v, p, 16);
  return v;
#endif
}

FERRY_HD XDs ld_xds(const XDs* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(p);
#else
  return *p;
#endif
}

FERRY_HD uint32_t byte_of(uint32_t w, int i) { return (w >> (8 * i)) & 0xFFu; }

// Scale and min j (0..7) of a Q4_K / Q5_K block from its header words h1..h3 (= scales[0..11]), one value
// at a time as ggml reads them: the reference q4k_pair_scales is tested against (quant_units_test.cc).
FERRY_HD void scale_min_k4_regs(int j, uint32_t h1, uint32_t h2, uint32_t h3, int* sc, int* m) {
  const int jj = j & 3;
  const uint32_t b1 = byte_of(h1, jj), b2 = byte_of(h2, jj), b3 = byte_of(h3, jj);
  if (j < 4) {
    *sc = static_cast<int>(b1 & 63);
    *m = static_cast<int>(b2 & 63);
  } else {
    *sc = static_cast<int>((b3 & 0xF) | ((b1 >> 6) << 4));
    *m = static_cast<int>((b3 >> 4) | ((b2 >> 6) << 4));
  }
}

template <DType T>
struct ChunkDec;

// Q4_0 split [qs K/2][d K/32]: chunk c = block c; byte j's low nibble is element j, high nibble j + 16.
template <>
struct ChunkDec<DType::Q4_0> {
  static constexpr int kElems = 32;
  struct W {
    Q16 q;
    uint32_t d;
  };
  struct X {
    Q16 a, b;  // elements 0..15, 16..31
    XDs ds;
  };
  FERRY_HD static void load(const uint8_t* row, int64_t K, int c, W& w) {
    w.q = ld_q16(row + 16 * static_cast<int64_t>(c));
    w.d = ld_u16(row + K / 2 + 2 * static_cast<int64_t>(c));
  }
  FERRY_HD static void load_x(int c, const int8_t* xq, const XDs* xds, X& x) {
    x.a = ld_q16(xq + 32 * static_cast<int64_t>(c));
    x.b = ld_q16(xq + 32 * static_cast<int64_t>(c) + 16);
    x.ds = ld_xds(xds + c);
  }
  FERRY_HD static float dot(const W& w, int, const X& x) {
    int s = 0;
    FERRY_UNROLL
    for (int i = 0; i < 4; ++i) {
      s = dp4a(static_cast<int>(w.q.w[i] & 0x0F0F0F0Fu), static_cast<int>(x.a.w[i]), s);
      s = dp4a(static_cast<int>((w.q.w[i] >> 4) & 0x0F0F0F0Fu), static_cast<int>(x.b.w[i]), s);
    }
    return half_to_float(static_cast<uint16_t>(w.d)) * (x.ds.x * static_cast<float>(s) - 8.f * x.ds.y);
  }
};

// Q8_0 split [qs K][d K/32]: chunk c = half c % 2 of block c / 2 (16 quants).
template <>
struct ChunkDec<DType::Q8_0> {
  static constexpr int kElems = 16;
  struct W {
    Q16 q;
    uint32_t d;
  };
  struct X {
    Q16 a;
    float dx;
  };
  FERRY_HD static void load(const uint8_t* row, int64_t K, int c, W& w) {
    w.q = ld_q16(row + 16 * static_cast<int64_t>(c));
    w.d = ld_u16(row + K + 2 * static_cast<int64_t>(c >> 1));
  }
  FERRY_HD static void load_x(int c, const int8_t* xq, const XDs* xds, X& x) {
    x.a = ld_q16(xq + 16 * static_cast<int64_t>(c));
    x.dx = ld_xds(xds + (c >> 1)).x;
  }
  FERRY_HD static float dot(const W& w, int, const X& x) {
    int s = 0;
    FERRY_UNROLL
    for (int i = 0; i < 4; ++i) s = dp4a(static_cast<int>(w.q.w[i]), static_cast<int>(x.a.w[i]), s);
    return half_to_float(static_cast<uint16_t>(w.d)) * x.dx * static_cast<float>(s);
  }
};

// Q4_1 split [qs K/2][d m K/32]: as Q4_0, plus the min: + m * (d_x * sum(q_x)).
template <>
struct ChunkDec<DType::Q4_1> {
  static constexpr int kElems = 32;
  struct W {
    Q16 q;
    uint32_t dm;
  };
  using X = ChunkDec<DType::Q4_0>::X;
  FERRY_HD static void load(const uint8_t* row, int64_t K, int c, W& w) {
    w.q = ld_q16(row + 16 * static_cast<int64_t>(c));
    w.dm = static_cast<uint32_t>(ld_a4(row + K / 2 + 4 * static_cast<int64_t>(c)));
  }
  FERRY_HD static void load_x(int c, const int8_t* xq, const XDs* xds, X& x) {
    ChunkDec<DType::Q4_0>::load_x(c, xq, xds, x);
  }
  FERRY_HD static float dot(const W& w, int, const X& x) {
    int s = 0;
    FERRY_UNROLL
    for (int i = 0; i < 4; ++i) {
      s = dp4a(static_cast<int>(w.q.w[i] & 0x0F0F0F0Fu), static_cast<int>(x.a.w[i]), s);
      s = dp4a(static_cast<int>((w.q.w[i] >> 4) & 0x0F0F0F0Fu), static_cast<int>(x.b.w[i]), s);
    }
    return half_to_float(static_cast<uint16_t>(w.dm & 0xFFFFu)) * x.ds.x * static_cast<float>(s) +
           half_to_float(static_cast<uint16_t>(w.dm >> 16)) * x.ds.y;
  }
};

// Q5_0 / Q5_1 split [qs K/2][qh K/8][d or d m]: as Q4_0 / Q4_1; bit j of the block's qh word is the 5th bit
// of element j (word i of qs: elements 4i.. low nibbles, 16 + 4i.. high nibbles).
template <DType T>
struct ChunkDecQ5 {
  static constexpr bool kMin = T == DType::Q5_1;
  static constexpr int kElems = 32;
  struct W {
    Q16 q;
    uint32_t qh, dm;
  };
  using X = ChunkDec<DType::Q4_0>::X;
  FERRY_HD static void load(const uint8_t* row, int64_t K, int c, W& w) {
    w.q = ld_q16(row + 16 * static_cast<int64_t>(c));
    w.qh = static_cast<uint32_t>(ld_a4(row + K / 2 + 4 * static_cast<int64_t>(c)));
    const uint8_t* dm = row + K / 2 + K / 8 + (kMin ? 4 : 2) * static_cast<int64_t>(c);
    w.dm = kMin ? static_cast<uint32_t>(ld_a4(dm)) : ld_u16(dm);
  }
  FERRY_HD static void load_x(int c, const int8_t* xq, const XDs* xds, X& x) {
    ChunkDec<DType::Q4_0>::load_x(c, xq, xds, x);
  }
  FERRY_HD static float dot(const W& w, int, const X& x) {
    int s = 0;
    FERRY_UNROLL
    for (int i = 0; i < 4; ++i) {
      const int lo = static_cast<int>(w.q.w[i] & 0x0F0F0F0Fu) | spread_bit4(w.qh >> (4 * i));
      const int hi = static_cast<int>((w.q.w[i] >> 4) & 0x0F0F0F0Fu) | spread_bit4(w.qh >> (4 * i + 16));
      s = dp4a(lo, static_cast<int>(x.a.w[i]), s);
      s = dp4a(hi, static_cast<int>(x.b.w[i]), s);
    }
    const float d = half_to_float(static_cast<uint16_t>(w.dm & 0xFFFFu));
    if (kMin) return d * x.ds.x * static_cast<float>(s) + half_to_float(static_cast<uint16_t>(w.dm >> 16)) * x.ds.y;
    return d * (x.ds.x * static_cast<float>(s) - 16.f * x.ds.y);
  }
};
template <>
struct ChunkDec<DType::Q5_0> : ChunkDecQ5<DType::Q5_0> {};
template <>
struct ChunkDec<DType::Q5_1> : ChunkDecQ5<DType::Q5_1> {};

// Q2_K / Q3_K split: chunk c = qs bytes [16q, 16q + 16) of super-block sb = c / 4, q = c % 4 = 2h + m. Bits
// 2j.. of byte i are element e_j = 128h + 32j + 16m + i (j = 0..3: 64 elements), scale index 8h + 2j + m.
// Activations: the four 16-element runs e_0.., e_1.., e_2.., e_3.. (32 apart).
struct ChunkXQ2 {
  Q16 a[4];
  float dx[4];
};
FERRY_HD void load_x_q2(int c, const int8_t* xq, const XDs* xds, ChunkXQ2& x) {
  const int64_t sb = c >> 2;
  const int q = c & 3, h = q >> 1, m = q & 1;
  const int64_t e = 256 * sb + 128 * h + 16 * m;
  FERRY_UNROLL
  for (int j = 0; j < 4; ++j) {
    x.a[j] = ld_q16(xq + e + 32 * j);
    x.dx[j] = ld_xds(xds + 8 * sb + 4 * h + j).x;
  }
}

// Q2_K split [qs K/4][scales K/16][d dmin K/256]: scale byte low nibble = scale, high nibble = min.
template <>
struct ChunkDec<DType::Q2_K> {
  static constexpr int kElems = 64;
  struct W {
    Q16 q;
    uint32_t sc;  // scale bytes 8h + m + 2j, j = 0..3 (byte j)
    uint32_t dm;
  };
  using X = ChunkXQ2;
  FERRY_HD static void load(const uint8_t* row, int64_t K, int c, W& w) {
    const int64_t sb = c >> 2;
    const int q = c & 3, h = q >> 1, m = q & 1;
    w.q = ld_q16(row + 16 * static_cast<int64_t>(c));
    const uint8_t* sc = row + K / 4 + 16 * sb + 8 * h;  // 8-byte aligned: bytes m, m + 2, m + 4, m + 6
    const uint32_t lo = static_cast<uint32_t>(ld_a4(sc)), hi = static_cast<uint32_t>(ld_a4(sc + 4));
    w.sc = byte_of(lo, m) | (byte_of(lo, m + 2) << 8) | (byte_of(hi, m) << 16) | (byte_of(hi, m + 2) << 24);
    w.dm = static_cast<uint32_t>(ld_a4(row + K / 4 + K / 16 + 4 * sb));
  }
  FERRY_HD static void load_x(int c, const int8_t* xq, const XDs* xds, X& x) { load_x_q2(c, xq, xds, x); }
  FERRY_HD static float dot(const W& w, int, const X& x) {
    float acc_d = 0.f, acc_m = 0.f;
    FERRY_UNROLL
    for (int j = 0; j < 4; ++j) {
      int sq = 0, sx = 0;
      FERRY_UNROLL
      for (int i = 0; i < 4; ++i) {
        sq = dp4a(static_cast<int>((w.q.w[i] >> (2 * j)) & 0x03030303u), static_cast<int>(x.a[j].w[i]), sq);
        sx = dp4a(0x01010101, static_cast<int>(x.a[j].w[i]), sx);
      }
      const int s = static_cast<int>(byte_of(w.sc, j));
      acc_d += x.dx[j] * static_cast<float>((s & 0xF) * sq);
      acc_m += x.dx[j] * static_cast<float>((s >> 4) * sx);
    }
    return half_to_float(static_cast<uint16_t>(w.dm & 0xFFFFu)) * acc_d -
           half_to_float(static_cast<uint16_t>(w.dm >> 16)) * acc_m;
  }
};

// Q3_K split [qs K/4][hmask K/8][scales 12 per 256][d K/256]: bit 4h + j of hmask byte 16m + i is the high
// bit of e_j; value (low | high << 2) - 4; scales are ggml's packed 6-bit values minus 32.
template <>
struct ChunkDec<DType::Q3_K> {
  static constexpr int kElems = 64;
  struct W {
    Q16 q, hm;
    uint32_t s0, s1, s2;  // the super-block's 12 scale bytes
    uint32_t d;
  };
  using X = ChunkXQ2;
  FERRY_HD static void load(const uint8_t* row, int64_t K, int c, W& w) {
    const int64_t sb = c >> 2;
    const int m = c & 1;
    w.q = ld_q16(row + 16 * static_cast<int64_t>(c));
    w.hm = ld_q16(row + K / 4 + 32 * sb + 16 * m);
    const uint8_t* sc = row + K / 4 + K / 8 + 12 * sb;
    w.s0 = static_cast<uint32_t>(ld_a4(sc));
    w.s1 = static_cast<uint32_t>(ld_a4(sc + 4));
    w.s2 = static_cast<uint32_t>(ld_a4(sc + 8));
    w.d = ld_u16(row + K / 4 + K / 8 + 12 * (K / 256) + 2 * sb);
  }
  FERRY_HD static void load_x(int c, const int8_t* xq, const XDs* xds, X& x) { load_x_q2(c, xq, xds, x); }
  FERRY_HD static float dot(const W& w, int c, const X& x) {
    const int q = c & 3, h = q >> 1, m = q & 1;
    float acc = 0.f;
    FERRY_UNROLL
    for (int j = 0; j < 4; ++j) {
      int sq = 0, sx = 0;
      FERRY_UNROLL
      for (int i = 0; i < 4; ++i) {
        const uint32_t v = ((w.q.w[i] >> (2 * j)) & 0x03030303u) | (((w.hm.w[i] >> (4 * h + j)) & 0x01010101u) << 2);
        sq = dp4a(static_cast<int>(v), static_cast<int>(x.a[j].w[i]), sq);
        sx = dp4a(0x04040404, static_cast<int>(x.a[j].w[i]), sx);
      }
      // q3k_scale6 of index 8h + m + 2j: low nibble from byte m + 2j (high nibble when h == 1), 2 high
      // bits from byte 8 + ((m + 2j) & 3) at bit 2 (2h + (j >> 1)).
      const int k = m + 2 * j;
      const uint32_t lo_byte = byte_of(k < 4 ? w.s0 : w.s1, k & 3);
      const int lo = static_cast<int>(h ? (lo_byte >> 4) : (lo_byte & 0xF));
      const int hi = static_cast<int>((byte_of(w.s2, k & 3) >> (2 * (2 * h + (j >> 1)))) & 3);
      acc += x.dx[j] * static_cast<float>(((lo | (hi << 4)) - 32) * (sq - sx));
    }
    return half_to_float(static_cast<uint16_t>(w.d)) * acc;
  }
};

// Q6_K split [ql K/2][qh K/4][scales K/16][d K/256]: chunk c = ql bytes [16q, 16q + 16) of super-block
// sb = c / 8, q = c % 8 = 4h + 2k + m. Byte j's low nibble + qh[32h + 16m + j] bits 2k.. is element
// e = 128h + 32k + 16m + j (scale 8h + 2k + m), its high nibble + bits 2k + 4.. is element e + 64 (scale + 4).
// Quants are 6-bit minus 32: dot(q - 32, x) = dp4a(q, x) - dp4a(0x20202020, x), exact in int32.
template <>
struct ChunkDec<DType::Q6_K> {
  static constexpr int kElems = 32;
  struct W {
    Q16 ql, qh;
    int32_t sc_lo, sc_hi;
    uint32_t d;
  };
  struct X {
    Q16 a, b;  // elements e.., e + 64..
    float da, db;
  };
  FERRY_HD static void load(const uint8_t* row, int64_t K, int c, W& w) {
    const int64_t sb = c >> 3;
    const int q = c & 7, h = q >> 2, k = (q >> 1) & 1, m = q & 1;
    w.ql = ld_q16(row + 16 * static_cast<int64_t>(c));
    w.qh = ld_q16(row + K / 2 + 64 * sb + 32 * h + 16 * m);
    const uint8_t* sc = row + K / 2 + K / 4 + 16 * sb + 8 * h + 2 * k + m;
    w.sc_lo = static_cast<int8_t>(sc[0]);
    w.sc_hi = static_cast<int8_t>(sc[4]);
    w.d = ld_u16(row + K / 2 + K / 4 + K / 16 + 2 * sb);
  }
  FERRY_HD static void load_x(int c, const int8_t* xq, const XDs* xds, X& x) {
    const int64_t sb = c >> 3;
    const int q = c & 7, h = q >> 2, k = (q >> 1) & 1, m = q & 1;
    const int64_t e = 256 * sb + 128 * h + 32 * k + 16 * m;
    x.a = ld_q16(xq + e);
    x.b = ld_q16(xq + e + 64);
    x.da = ld_xds(xds + e / 32).x;
    x.db = ld_xds(xds + e / 32 + 2).x;
  }
  FERRY_HD static float dot(const W& w, int c, const X& x) {
    const int k = (c >> 1) & 1;
    int sa = 0, za = 0, sb = 0, zb = 0;
    FERRY_UNROLL
    for (int i = 0; i < 4; ++i) {
      const uint32_t l = w.ql.w[i], hb = w.qh.w[i];
      const int lo = static_cast<int>((l & 0x0F0F0F0Fu) | (((hb >> (2 * k)) & 0x03030303u) << 4));
      const int hi = static_cast<int>(((l >> 4) & 0x0F0F0F0Fu) | (((hb >> (2 * k + 4)) & 0x03030303u) << 4));
      sa = dp4a(lo, static_cast<int>(x.a.w[i]), sa);
      za = dp4a(0x20202020, static_cast<int>(x.a.w[i]), za);
      sb = dp4a(hi, static_cast<int>(x.b.w[i]), sb);
      zb = dp4a(0x20202020, static_cast<int>(x.b.w[i]), zb);
    }
    return half_to_float(static_cast<uint16_t>(w.d)) *
           (x.da * static_cast<float>(w.sc_lo * (sa - za)) + x.db * static_cast<float>(w.sc_hi * (sb - zb)));
  }
};

// Scales and mins of the Q4_K sub-block pair (2cc, 2cc + 1) from header words h1..h3 (= scales[0..11]),
// packed as bytes {sc0, sc1, m0, m1}: the same values as scale_min_k4_regs, in two byte permutes and a few
// masks instead of six variable byte extracts and selects per value. Pairs 0, 1 are the low 6 bits of
// scales[2cc..] / scales[4 + 2cc..]; pairs 2, 3 take their low 4 bits from scales[8 + 2k..] (k = cc - 2;
// scale low, min high nibble) and their top 2 bits from the top 2 bits of the bytes pairs 0, 1 use.
FERRY_HD uint32_t q4k_pair_scales(int cc, uint32_t h1, uint32_t h2, uint32_t h3) {
  const uint32_t u = byte_perm(h1, h2, (cc & 1) ? 0x7632u : 0x5410u);  // {h1[b], h1[b+1], h2[b], h2[b+1]}
  if (cc < 2) return u & 0x3F3F3F3Fu;
  const uint32_t t = byte_perm(h3, h3, (cc & 1) ? 0x3232u : 0x1010u);  // {h3[b], h3[b+1], h3[b], h3[b+1]}
  return (t & 0x00000F0Fu) | ((t >> 4) & 0x0F0F0000u) | ((u >> 2) & 0x30303030u);
}

// The scale step of a Q4_K sub-block pair (2cc, 2cc + 1) of the block whose header words are hd: the
// integer sums s0, s1 times scale * d_x, minus (with_min) each sub-block's min times d_x * sum(q_x).
FERRY_HD float q4k_pair(const Q16& hd, int cc, int s0, int s1, const XDs& d0, const XDs& d1, bool with_min) {
  const uint32_t sm = q4k_pair_scales(cc, hd.w[1], hd.w[2], hd.w[3]);  // {sc0, sc1, m0, m1}
  const float d = half_to_float(static_cast<uint16_t>(hd.w[0] & 0xFFFFu));
  float r = d * (static_cast<float>(sm & 0xFFu) * d0.x * static_cast<float>(s0) +
                 static_cast<float>((sm >> 8) & 0xFFu) * d1.x * static_cast<float>(s1));
  if (with_min) {
    const float dmin = half_to_float(static_cast<uint16_t>(hd.w[0] >> 16));
    r -= dmin * (static_cast<float>((sm >> 16) & 0xFFu) * d0.y + static_cast<float>(sm >> 24) * d1.y);
  }
  return r;
}

// A small integer as a float, exactly (|v| < 2^22): on the GPU an integer add into the bits of 1.5 x 2^23
// and a float subtract (full-rate pipes) instead of a conversion instruction; the host converts.
FERRY_HD float small_int_to_float(int v) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(v + 0x4B400000) - 12582912.f;
#else
  return static_cast<float>(v);
#endif
}
// Byte i of w as a float, exactly: on the GPU one byte permute into the mantissa of 2^23 and a subtract.
FERRY_HD float byte_to_float(uint32_t w, int i) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(byte_perm(w, 0x4B000000u, 0x7440u | static_cast<uint32_t>(i))) - 8388608.f;
#else
  return static_cast<float>(byte_of(w, i));
#endif
}

// q4k_pair (with the mins) with each scale multiplied into its integer sum (exact: |s| <= 32 x 15 x 127,
// times 63 < 2^22) and no conversion instructions: d * (float(sc0 s0) d0 + float(sc1 s1) d1) - dmin * (m0
// dsum0 + m1 dsum1). The same value up to float rounding (one product fewer per sub-block); two fewer
// conversions and products per unit, the other four conversions become adds.
FERRY_HD float q4k_pair_int(const Q16& hd, int cc, int s0, int s1, const XDs& d0, const XDs& d1) {
  const uint32_t sm = q4k_pair_scales(cc, hd.w[1], hd.w[2], hd.w[3]);  // {sc0, sc1, m0, m1}
  const int t0 = static_cast<int>(sm & 0xFFu) * s0, t1 = static_cast<int>((sm >> 8) & 0xFFu) * s1;
  const float d = half_to_float(static_cast<uint16_t>(hd.w[0] & 0xFFFFu));
  const float dmin = half_to_float(static_cast<uint16_t>(hd.w[0] >> 16));
  return d * (small_int_to_float(t0) * d0.x + small_int_to_float(t1) * d1.x) -
         dmin * (byte_to_float(sm, 2) * d0.y + byte_to_float(sm, 3) * d1.y);
}

// Q4_K (ggml layout): chunk c = qs bytes [16p, 16p + 16) of block b = c / 8, p = c % 8 = 2cc + half. Byte
// j's low nibble is element e = 64cc + 16half + j (sub-block 2cc), its high nibble e + 32 (sub-block
// 2cc + 1). The 16-byte header (d, dmin, scales) is loaded by the 8 lanes of the block (one broadcast).
// The min terms need a whole 32-group's activation sum: added by the half == 0 chunk of each pair.
template <>
struct ChunkDec<DType::Q4_K> {
  static constexpr int kElems = 32;
  struct W {
    Q16 q, hd;
  };
  struct X {
    Q16 a, b;
    XDs d0, d1;
  };
  FERRY_HD static void load(const uint8_t* row, int64_t, int c, W& w) {
    const uint8_t* blk = row + 144 * static_cast<int64_t>(c >> 3);
    w.q = ld_q16(blk + 16 + 16 * (c & 7));
    w.hd = ld_q16(blk);
  }
  FERRY_HD static void load_x(int c, const int8_t* xq, const XDs* xds, X& x) {
    const int p = c & 7, cc = p >> 1, half = p & 1;
    const int64_t e = 256 * static_cast<int64_t>(c >> 3) + 64 * cc + 16 * half;
    x.a = ld_q16(xq + e);
    x.b = ld_q16(xq + e + 32);
    const int64_t g = 8 * static_cast<int64_t>(c >> 3) + 2 * cc;
    x.d0 = ld_xds(xds + g);
    x.d1 = ld_xds(xds + g + 1);
  }
  FERRY_HD static float dot(const W& w, int c, const X& x) {
    const int p = c & 7, cc = p >> 1;
    int s0 = 0, s1 = 0;
    FERRY_UNROLL
    for (int i = 0; i < 4; ++i) {
      s0 = dp4a(static_cast<int>(w.q.w[i] & 0x0F0F0F0Fu), static_cast<int>(x.a.w[i]), s0);
      s1 = dp4a(static_cast<int>((w.q.w[i] >> 4) & 0x0F0F0F0Fu), static_cast<int>(x.b.w[i]), s1);
    }
    return q4k_pair(w.hd, cc, s0, s1, x.d0, x.d1, (p & 1) == 0);
  }
};

// Q4_K (ggml layout) in 32-byte chunks (the default decode path for Q4_K; FERRY_CUDA_Q4K_WIDE=0 selects
// ChunkDec<Q4_K>): chunk c
// = qs bytes [32cc, 32cc + 32) of block c / 4, cc = c % 4, i.e. ChunkDec<Q4_K>'s chunks 2cc and 2cc + 1
// together: low nibbles are elements 64cc + 0..31 (sub-block 2cc), high nibbles 64cc + 32..63 (2cc + 1).
// The two sub-blocks' scales and mins are decoded once per 64 weights instead of once per 32, and the
// min term comes with every chunk. Two 16-byte qs loads per lane.
struct ChunkDecQ4KWide {
  static constexpr int kElems = 64;
  struct W {
    Q16 q0, q1, hd;
  };
  struct X {
    Q16 a0, a1, b0, b1;  // elements 64cc + 0.., + 16.., + 32.., + 48..
    XDs d0, d1;
  };
  FERRY_HD static void load(const uint8_t* row, int64_t, int c, W& w) {
    const uint8_t* blk = row + 144 * static_cast<int64_t>(c >> 2);
    const uint8_t* q = blk + 16 + 32 * (c & 3);
    w.q0 = ld_q16(q);
    w.q1 = ld_q16(q + 16);
    w.hd = ld_q16(blk);
  }
  FERRY_HD static void load_x(int c, const int8_t* xq, const XDs* xds, X& x) {
    const int64_t e = 256 * static_cast<int64_t>(c >> 2) + 64 * (c & 3);
    x.a0 = ld_q16(xq + e);
    x.a1 = ld_q16(xq + e + 16);
    x.b0 = ld_q16(xq + e + 32);
    x.b1 = ld_q16(xq + e + 48);
    const int64_t g = 8 * static_cast<int64_t>(c >> 2) + 2 * (c & 3);
    x.d0 = ld_xds(xds + g);
    x.d1 = ld_xds(xds + g + 1);
  }
  // The high nibbles are dotted in place: dp4a_us on w & 0xF0F0F0F0, one mask instead of a shift and a
  // mask (the kernel is instruction-bound); the sum is 16 x the same integer, shifted back exactly.
  FERRY_HD static float dot(const W& w, int c, const X& x) {
    const int cc = c & 3;
    int s0 = 0, s1 = 0;
    FERRY_UNROLL
    for (int i = 0; i < 4; ++i) {
      s0 = dp4a(static_cast<int>(w.q0.w[i] & 0x0F0F0F0Fu), static_cast<int>(x.a0.w[i]), s0);
      s0 = dp4a(static_cast<int>(w.q1.w[i] & 0x0F0F0F0Fu), static_cast<int>(x.a1.w[i]), s0);
      s1 = dp4a_us(w.q0.w[i] & 0xF0F0F0F0u, static_cast<int>(x.b0.w[i]), s1);
      s1 = dp4a_us(w.q1.w[i] & 0xF0F0F0F0u, static_cast<int>(x.b1.w[i]), s1);
    }
    s1 >>= 4;  // exact: the sum is a multiple of 16
    return q4k_pair(w.hd, cc, s0, s1, x.d0, x.d1, /*with_min=*/true);
  }
};

// Q5_K (ggml layout): as Q4_K with qs at 48; the 5th bits of chunk p are qh[16(p % 2) + j] bit 2cc (low
// nibbles) and 2cc + 1 (high), one more broadcast 16-byte load.
template <>
struct ChunkDec<DType::Q5_K> {
  static constexpr int kElems = 32;
  struct W {
    Q16 q, qh, hd;
  };
  using X = ChunkDec<DType::Q4_K>::X;
  FERRY_HD static void load(const uint8_t* row, int64_t, int c, W& w) {
    const uint8_t* blk = row + 176 * static_cast<int64_t>(c >> 3);
    w.q = ld_q16(blk + 48 + 16 * (c & 7));
    w.qh = ld_q16(blk + 16 + 16 * (c & 1));
    w.hd = ld_q16(blk);
  }
  FERRY_HD static void load_x(int c, const int8_t* xq, const XDs* xds, X& x) {
    ChunkDec<DType::Q4_K>::load_x(c, xq, xds, x);
  }
  FERRY_HD static float dot(const W& w, int c, const X& x) {
    const int p = c & 7, cc = p >> 1;
    int s0 = 0, s1 = 0;
    FERRY_UNROLL
    for (int i = 0; i < 4; ++i) {
      const uint32_t v = w.q.w[i], h = w.qh.w[i];
      const int lo = static_cast<int>((v & 0x0F0F0F0Fu) | (((h >> (2 * cc)) & 0x01010101u) << 4));
      const int hi = static_cast<int>(((v >> 4) & 0x0F0F0F0Fu) | (((h >> (2 * cc + 1)) & 0x01010101u) << 4));
      s0 = dp4a(lo, static_cast<int>(x.a.w[i]), s0);
      s1 = dp4a(hi, static_cast<int>(x.b.w[i]), s1);
    }
    return q4k_pair(w.hd, cc, s0, s1, x.d0, x.d1, (p & 1) == 0);
  }
};

// ---- dequantization of 32 elements of a split row ----------------------------------------------------
// dequant32_split<T>(row, K, g, out): as dequant32 for a split-layout row of K elements.

template <DType T>
FERRY_HD void dequant32_split(const uint8_t* row, int64_t K, int g, float* out);

template <>
FERRY_HD void dequant32_split<DType::Q4_0>(const uint8_t* row, int64_t K, int g, float* out) {
  const uint8_t* qs = row + 16 * static_cast<int64_t>(g);
  const float d = half_to_float(ld_u16(row + K / 2 + 2 * static_cast<int64_t>(g)));
  FERRY_UNROLL
  for (int j = 0; j < 16; ++j) {
    const int q = qs[j];
    out[j] = static_cast<float>((q & 0xF) - 8) * d;
    out[j + 16] = static_cast<float>((q >> 4) - 8) * d;
  }
}
template <>
FERRY_HD void dequant32_split<DType::Q8_0>(const uint8_t* row, int64_t K, int g, float* out) {
  const uint8_t* qs = row + 32 * static_cast<int64_t>(g);
  const float d = half_to_float(ld_u16(row + K + 2 * static_cast<int64_t>(g)));
  FERRY_UNROLL
  for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(static_cast<int8_t>(qs[j])) * d;
}
template <>
FERRY_HD void dequant32_split<DType::Q6_K>(const uint8_t* row, int64_t K, int g, float* out) {
  const int64_t sb = g >> 3;
  const int r = g & 7, h = r >> 2, k4 = r & 3;
  const float d = half_to_float(ld_u16(row + K / 2 + K / 4 + K / 16 + 2 * sb));
  const uint8_t* ql = row + 128 * sb + 64 * h + 32 * (k4 & 1);
  const uint8_t* qh = row + K / 2 + 64 * sb + 32 * h;
  const int8_t* sc = reinterpret_cast<const int8_t*>(row + K / 2 + K / 4 + 16 * sb + 8 * h);
  FERRY_UNROLL
  for (int l = 0; l < 32; ++l) {
    const int lo4 = (k4 >> 1) ? (ql[l] >> 4) : (ql[l] & 0xF);
    const int q = (lo4 | (((qh[l] >> (2 * k4)) & 3) << 4)) - 32;
    out[l] = d * static_cast<float>(sc[l / 16 + 2 * k4]) * static_cast<float>(q);
  }
}

template <>
FERRY_HD void dequant32_split<DType::Q4_1>(const uint8_t* row, int64_t K, int g, float* out) {
  const uint8_t* qs = row + 16 * static_cast<int64_t>(g);
  const uint8_t* dm = row + K / 2 + 4 * static_cast<int64_t>(g);
  const float d = half_to_float(ld_u16(dm)), m = half_to_float(ld_u16(dm + 2));
  FERRY_UNROLL
  for (int j = 0; j < 16; ++j) {
    const int q = qs[j];
    out[j] = static_cast<float>(q & 0xF) * d + m;
    out[j + 16] = static_cast<float>(q >> 4) * d + m;
  }
}
template <DType T>
FERRY_HD void dequant32_split_q5(const uint8_t* row, int64_t K, int g, float* out) {
  constexpr bool kMin = T == DType::Q5_1;
  const uint8_t* qs = row + 16 * static_cast<int64_t>(g);
  const uint32_t qh = static_cast<uint32_t>(ld_a4(row + K / 2 + 4 * static_cast<int64_t>(g)));
  const uint8_t* dm = row + K / 2 + K / 8 + (kMin ? 4 : 2) * static_cast<int64_t>(g);
  const float d = half_to_float(ld_u16(dm)), m = kMin ? half_to_float(ld_u16(dm + 2)) : 0.f;
  FERRY_UNROLL
  for (int j = 0; j < 16; ++j) {
    const int q = qs[j];
    const int lo = (q & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (q >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    out[j] = kMin ? static_cast<float>(lo) * d + m : static_cast<float>(lo - 16) * d;
    out[j + 16] = kMin ? static_cast<float>(hi) * d + m : static_cast<float>(hi - 16) * d;
  }
}
template <>
FERRY_HD void dequant32_split<DType::Q5_0>(const uint8_t* row, int64_t K, int g, float* out) {
  dequant32_split_q5<DType::Q5_0>(row, K, g, out);
}
template <>
FERRY_HD void dequant32_split<DType::Q5_1>(const uint8_t* row, int64_t K, int g, float* out) {
  dequant32_split_q5<DType::Q5_1>(row, K, g, out);
}
template <>
FERRY_HD void dequant32_split<DType::Q2_K>(const uint8_t* row, int64_t K, int g, float* out) {
  const int64_t sb = g >> 3;
  const int r = g & 7, h = r >> 2, j = r & 3;
  const uint8_t* qs = row + 64 * sb + 32 * h;
  const uint8_t* sc = row + K / 4 + 16 * sb;
  const uint8_t* dm = row + K / 4 + K / 16 + 4 * sb;
  const float d = half_to_float(ld_u16(dm)), dmin = half_to_float(ld_u16(dm + 2));
  FERRY_UNROLL
  for (int hf = 0; hf < 2; ++hf) {
    const int s = sc[8 * h + 2 * j + hf];
    const float dl = d * static_cast<float>(s & 0xF), ml = dmin * static_cast<float>(s >> 4);
    FERRY_UNROLL
    for (int l = 0; l < 16; ++l) {
      const int q = (qs[16 * hf + l] >> (2 * j)) & 3;
      out[16 * hf + l] = dl * static_cast<float>(q) - ml;
    }
  }
}
template <>
FERRY_HD void dequant32_split<DType::Q3_K>(const uint8_t* row, int64_t K, int g, float* out) {
  const int64_t sb = g >> 3;
  const int r = g & 7, h = r >> 2, j = r & 3;
  const uint8_t* qs = row + 64 * sb + 32 * h;
  const uint8_t* hm = row + K / 4 + 32 * sb;
  const uint8_t* sc = row + K / 4 + K / 8 + 12 * sb;
  const float d = half_to_float(ld_u16(row + K / 4 + K / 8 + 12 * (K / 256) + 2 * sb));
  const int hbit = 4 * h + j;
  FERRY_UNROLL
  for (int hf = 0; hf < 2; ++hf) {
    const float dl = d * static_cast<float>(q3k_scale6(sc, 8 * h + 2 * j + hf) - 32);
    FERRY_UNROLL
    for (int l = 16 * hf; l < 16 * hf + 16; ++l) {
      const int q = ((qs[l] >> (2 * j)) & 3) - (((hm[l] >> hbit) & 1) ? 0 : 4);
      out[l] = dl * static_cast<float>(q);
    }
  }
}

#if defined(__CUDACC__)
// Q4_K for K % 2048 == 0 with a lane pair per 32-byte unit: the same 64-weight units as
// ChunkDecQ4KWide (unit u = qs bytes [32(u % 4), + 32) of block u / 4), but a lane loads 16-byte halves,
// so one warp load instruction reads whole 128-byte runs of qs (four blocks' qs) instead of every other
// 16 bytes of eight blocks. In a tile of 32 units (8 blocks) lane l = 2i + h loads half h of units i and
// 16 + i, dots both halves, and the pair swaps sums (two shuffles): the even lane finishes unit i, the odd
// lane unit 16 + i (their scales and mins decoded once per unit, as in the wide chunks). Needs every lane
// of a tile converged and no tile cut short: the kernels' tiles are warp-uniform, and K % 2048 == 0 makes
// every tile whole. Device only (the shuffles); the integer sums are the wide decoder's. kIntScale: the
// scale step is q4k_pair_int, else q4k_pair.
template <bool kIntScale = true>
struct ChunkDecQ4KPair {
  static constexpr int kElems = 64;
  struct W {
    Q16 qa, qb, hd;  // half h of units i and 16 + i; the header of the unit this lane finishes
  };
  struct X {
    Q16 a0, b0, a1, b1;  // activations of the low / high nibbles of qa, then of qb
    XDs d0, d1;          // the finished unit's two 32-groups
  };
  __device__ __forceinline__ static int unit_a(int c) { return (c & ~31) + ((c & 31) >> 1); }
  __device__ __forceinline__ static int unit_done(int c) { return unit_a(c) + ((c & 1) ? 16 : 0); }
  __device__ __forceinline__ static const uint8_t* half_at(const uint8_t* row, int u, int h) {
    return row + 144 * static_cast<int64_t>(u >> 2) + 16 + 32 * (u & 3) + 16 * h;
  }
  __device__ __forceinline__ static int64_t elem_at(int u, int h) {
    return 256 * static_cast<int64_t>(u >> 2) + 64 * (u & 3) + 16 * h;
  }
  __device__ __forceinline__ static void load(const uint8_t* row, int64_t, int c, W& w) {
    const int ua = unit_a(c), h = c & 1;
    w.qa = ld_q16(half_at(row, ua, h));
    w.qb = ld_q16(half_at(row, ua + 16, h));
    w.hd = ld_q16(row + 144 * static_cast<int64_t>(unit_done(c) >> 2));
  }
  __device__ __forceinline__ static void load_x(int c, const int8_t* xq, const XDs* xds, X& x) {
    const int ua = unit_a(c), h = c & 1, ud = unit_done(c);
    const int64_t ea = elem_at(ua, h), eb = elem_at(ua + 16, h);
    x.a0 = ld_q16(xq + ea);
    x.b0 = ld_q16(xq + ea + 32);
    x.a1 = ld_q16(xq + eb);
    x.b1 = ld_q16(xq + eb + 32);
    const int64_t g = 8 * static_cast<int64_t>(ud >> 2) + 2 * (ud & 3);
    x.d0 = ld_xds(xds + g);
    x.d1 = ld_xds(xds + g + 1);
  }
  __device__ __forceinline__ static float dot(const W& w, int c, const X& x) {
    int a0 = 0, a1 = 0, b0 = 0, b1 = 0;  // unit i's low / high sums, unit 16 + i's
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      a0 = dp4a(static_cast<int>(w.qa.w[i] & 0x0F0F0F0Fu), static_cast<int>(x.a0.w[i]), a0);
      a1 = dp4a_us(w.qa.w[i] & 0xF0F0F0F0u, static_cast<int>(x.b0.w[i]), a1);
      b0 = dp4a(static_cast<int>(w.qb.w[i] & 0x0F0F0F0Fu), static_cast<int>(x.a1.w[i]), b0);
      b1 = dp4a_us(w.qb.w[i] & 0xF0F0F0F0u, static_cast<int>(x.b1.w[i]), b1);
    }
    const bool odd = c & 1;
    const int r0 = __shfl_xor_sync(0xffffffffu, odd ? a0 : b0, 1);
    const int r1 = __shfl_xor_sync(0xffffffffu, odd ? a1 : b1, 1);
    const int s0 = (odd ? b0 : a0) + r0;
    const int s1 = ((odd ? b1 : a1) + r1) >> 4;  // exact: both are multiples of 16
    return kIntScale ? q4k_pair_int(w.hd, unit_done(c) & 3, s0, s1, x.d0, x.d1)
                     : q4k_pair(w.hd, unit_done(c) & 3, s0, s1, x.d0, x.d1, /*with_min=*/true);
  }
};
#endif  // __CUDACC__

}  // namespace ferry::kernels::cuda
