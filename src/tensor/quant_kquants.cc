// Reference k-quants (256-element super-blocks): Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and the Q8_K activation
// type. Dequantizers reproduce ggml's dequantize_row_* bit for bit; quantizers reproduce ggml's
// quantize_row_*_ref (the no-importance-matrix path that llama-quantize and ggml_quantize_chunk take)
// value for value, including the scale search and its float operation order. Every float expression
// below keeps ggml's evaluation order on purpose: reordering a sum or a product changes the last bit,
// which changes a rounding decision, which changes the quantized bytes.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "tensor/quant_blocks.h"

namespace ferry::kquant {
namespace {

// ggml's GROUP_MAX_EPS: a group whose largest |x| is below this is treated as all zeros.
constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest, ties to even, by adding 1.5 * 2^23 and reading the mantissa (ggml's nearest_int).
// Valid for |fval| <= 2^22 - 1; outside that it returns the same garbage as ggml's, which is what we
// want for bit equality.
inline int nearest_int(float fval) {
  const float val = fval + 12582912.f;
  int32_t i;
  memcpy(&i, &val, sizeof(i));
  return (i & 0x007fffff) - 0x00400000;
}

inline int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Symmetric quantization of n values to L[i] in [0, 2*nmax) (stored as level + nmax) with the scale
// picked by a least-squares search over 19 candidate inverse scales, weights w = x^2 (ggml's
// make_qx_quants with rmse_type = 1 and no importance weights). Returns the scale.
float make_qx_quants_rmse1(int n, int nmax, const float* x, int8_t* L) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  float scale = suml2 != 0.f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * static_cast<float>(l);
      suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = static_cast<int8_t>(nmax + clampi(l, -nmax, nmax - 1));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Symmetric 3-bit quantization with up to 5 rounds of coordinate descent on the levels (ggml's
// make_q3_quants with do_rmse = true). L[i] in [0, 2*nmax). Returns the scale.
float make_q3_quants_rmse(int n, int nmax, const float* x, int8_t* L) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      if (slx > 0) {
        float sl2 = suml2 - w * li * li;
        const int new_l = clampi(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (new_l != L[i]) {
          slx += w * x[i] * static_cast<float>(new_l);
          sl2 += w * static_cast<float>(new_l) * static_cast<float>(new_l);
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Asymmetric quantization x ~ scale * L - the_min, L in [0, nmax], with a weighted least-squares
// fit of (scale, min) at nstep + 1 candidate inverse scales (ggml's make_qkx2_quants). Note that a
// better candidate updates `min`, and later candidates are computed from the updated min, as in ggml.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(clampi(l, 0, nmax));
    float diff = scale * static_cast<float>(L[i]) + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clampi(nearest_int(iscale * (x[i] - min)), 0, nmax);
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      const float fl = static_cast<float>(l);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Pack 2-bit levels L[256] into 64 bytes: byte l of each 32-byte group holds elements l, l+32, l+64,
// l+96 of a 128-element half in bits 0-1, 2-3, 4-5, 6-7 (Q2_K and Q3_K share this).
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQK_K; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                           (L[j + l + 96] << 6));
}

// Pack 8 6-bit scales and 8 6-bit mins into the 12 bytes of Q4_K / Q5_K (inverse of get_scale_min_k4).
void pack_scale_min_k4(const uint8_t* ls, const uint8_t* lm, uint8_t* q) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      q[j] = ls[j];
      q[j + 4] = lm[j];
    } else {
      q[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      q[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      q[j - 0] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
}

// The shared part of Q4_K / Q5_K quantization: per 32-element sub-block an asymmetric search, then
// 6-bit scales and mins relative to the largest of each, then requantization of every element against
// the scales as stored. Fills block scales/d/dmin and L[256] with levels in [0, nmax].
template <typename Block>
void quantize_qkx_superblock(const float* x, Block& y, uint8_t* L, int nmax, float rmin, int nstep) {
  uint8_t Laux[32];
  float weights[32];
  float mins[8];
  float scales[8];
  float max_scale = 0;  // scales are positive as the min is subtracted
  float max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep,
                                 false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    // ggml stores nearest_int into a uint8_t before clamping: keep the same wrap-around.
    const uint8_t s = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
    const uint8_t m = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
    ls[j] = s < 63 ? s : 63;
    lm[j] = m < 63 ? m : 63;
  }
  pack_scale_min_k4(ls, lm, y.scales);
  y.d = fp32_to_fp16(max_scale / 63.f);
  y.dmin = fp32_to_fp16(max_min / 63.f);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    get_scale_min_k4(j, y.scales, &sc, &m);
    const float d = fp16_to_fp32(y.d) * static_cast<float>(sc);
    if (d == 0.f) continue;
    const float dm = fp16_to_fp32(y.dmin) * static_cast<float>(m);
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<uint8_t>(clampi(l, 0, nmax));
    }
  }
}

// 6-bit signed scale j (0..15) of a Q3_K block, before the -32 offset.
inline int q3k_scale(const uint8_t* s, int j) {
  const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
  const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return lo | (hi << 4);
}

}  // namespace

// ---- Q2_K ------------------------------------------------------------------------------------------

void quantize_q2_k(const float* x, BlockQ2_K* y, int64_t nb) {
  uint8_t L[kQK_K];
  uint8_t Laux[16];
  float weights[16];
  float mins[16];
  float scales[16];
  const float q4scale = 15.f;
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float max_scale = 0;
    float max_min = 0;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < 16; ++j) y[i].scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
      y[i].d = fp32_to_fp16(max_scale / q4scale);
    } else {
      for (int j = 0; j < 16; ++j) y[i].scales[j] = 0;
      y[i].d = fp32_to_fp16(0.f);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < 16; ++j) {
        const int l = nearest_int(iscale * mins[j]);
        y[i].scales[j] = static_cast<uint8_t>(y[i].scales[j] | static_cast<uint8_t>(static_cast<uint32_t>(l) << 4));
      }
      y[i].dmin = fp32_to_fp16(max_min / q4scale);
    } else {
      y[i].dmin = fp32_to_fp16(0.f);
    }
    for (int j = 0; j < 16; ++j) {
      const float d = fp16_to_fp32(y[i].d) * static_cast<float>(y[i].scales[j] & 0xF);
      if (d == 0.f) continue;
      const float dm = fp16_to_fp32(y[i].dmin) * static_cast<float>(y[i].scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        const int l = nearest_int((x[16 * j + ii] + dm) / d);
        L[16 * j + ii] = static_cast<uint8_t>(clampi(l, 0, 3));
      }
    }
    pack_2bit(L, y[i].qs);
  }
}

void dequantize_q2_k(const BlockQ2_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float min = fp16_to_fp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    for (int n = 0; n < kQK_K; n += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int half = 0; half < 2; ++half) {  // two 16-element sub-blocks per shift
          const uint8_t sc = x[i].scales[is++];
          const float dl = d * static_cast<float>(sc & 0xF);
          const float ml = min * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l)
            *y++ = dl * static_cast<float>((q[l + 16 * half] >> shift) & 3) - ml;
        }
      }
    }
  }
}

// ---- Q3_K ------------------------------------------------------------------------------------------

void quantize_q3_k(const float* x, BlockQ3_K* y, int64_t nb) {
  int8_t L[kQK_K];
  float scales[16];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float max_scale = 0;
    float amax = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = make_q3_quants_rmse(16, 4, x + 16 * j, L + 16 * j);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) {
        amax = scale;
        max_scale = scales[j];
      }
    }
    memset(y[i].scales, 0, 12);
    if (max_scale != 0.f) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < 16; ++j) {
        // ggml narrows nearest_int to int8_t before clamping; values stay in range here.
        int8_t l8 = static_cast<int8_t>(nearest_int(iscale * scales[j]));
        int l = clampi(l8, -32, 31) + 32;
        if (j < 8) {
          y[i].scales[j] = static_cast<uint8_t>(l & 0xF);
        } else {
          y[i].scales[j - 8] = static_cast<uint8_t>(y[i].scales[j - 8] | ((l & 0xF) << 4));
        }
        l >>= 4;
        y[i].scales[j % 4 + 8] = static_cast<uint8_t>(y[i].scales[j % 4 + 8] | (l << (2 * (j / 4))));
      }
      y[i].d = fp32_to_fp16(1 / iscale);
    } else {
      y[i].d = fp32_to_fp16(0.f);
    }
    for (int j = 0; j < 16; ++j) {
      const int sc = q3k_scale(y[i].scales, j) - 32;
      const float d = fp16_to_fp32(y[i].d) * static_cast<float>(sc);
      if (d == 0.f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = clampi(nearest_int(x[16 * j + ii] / d), -4, 3);
        L[16 * j + ii] = static_cast<int8_t>(l + 4);
      }
    }
    // High bit of element j goes to bit (j / 32) of hmask[j % 32].
    memset(y[i].hmask, 0, kQK_K / 8);
    uint8_t L2[kQK_K];
    for (int j = 0; j < kQK_K; ++j) {
      int l = L[j];
      if (l > 3) {
        y[i].hmask[j % 32] = static_cast<uint8_t>(y[i].hmask[j % 32] | (1u << (j / 32)));
        l -= 4;
      }
      L2[j] = static_cast<uint8_t>(l);
    }
    pack_2bit(L2, y[i].qs);
  }
}

void dequantize_q3_k(const BlockQ3_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d_all = fp16_to_fp32(x[i].d);
    const uint8_t* q = x[i].qs;
    const uint8_t* hm = x[i].hmask;
    uint8_t m = 1;
    int is = 0;
    for (int n = 0; n < kQK_K; n += 128, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
        for (int half = 0; half < 2; ++half) {
          const float dl = d_all * static_cast<float>(q3k_scale(x[i].scales, is++) - 32);
          for (int l = 16 * half; l < 16 * half + 16; ++l) {
            const int v = ((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
            *y++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
}

// ---- Q4_K ------------------------------------------------------------------------------------------

void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t nb) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    quantize_qkx_superblock(x, y[i], L, 15, -1.f, 20);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < kQK_K; j += 64, q += 32)
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

void dequantize_q4_k(const BlockQ4_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* q = x[i].qs;
    const float d = fp16_to_fp32(x[i].d);
    const float min = fp16_to_fp32(x[i].dmin);
    int is = 0;
    for (int j = 0; j < kQK_K; j += 64, q += 32, is += 2) {
      uint8_t sc, m;
      get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
      get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

// ---- Q5_K ------------------------------------------------------------------------------------------

void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t nb) {
  uint8_t L[kQK_K];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    quantize_qkx_superblock(x, y[i], L, 31, -0.5f, 15);
    uint8_t* qh = y[i].qh;
    uint8_t* ql = y[i].qs;
    memset(qh, 0, kQK_K / 8);
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < kQK_K; n += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        int l2 = L[n + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
    }
  }
}

void dequantize_q5_k(const BlockQ5_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    const float d = fp16_to_fp32(x[i].d);
    const float min = fp16_to_fp32(x[i].dmin);
    int is = 0;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < kQK_K; j += 64, ql += 32, is += 2) {
      uint8_t sc, m;
      get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
      get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

// ---- Q6_K ------------------------------------------------------------------------------------------

void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t nb) {
  int8_t L[kQK_K];
  float scales[16];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float max_scale = 0;
    float max_abs_scale = 0;
    for (int ib = 0; ib < 16; ++ib) {
      const float scale = make_qx_quants_rmse1(16, 32, x + 16 * ib, L + 16 * ib);
      scales[ib] = scale;
      const float abs_scale = std::fabs(scale);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scale;
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      memset(&y[i], 0, sizeof(BlockQ6_K));
      y[i].d = fp32_to_fp16(0.f);
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = fp32_to_fp16(1 / iscale);
    for (int ib = 0; ib < 16; ++ib) {
      const int s = nearest_int(iscale * scales[ib]);
      y[i].scales[ib] = static_cast<int8_t>(s < 127 ? s : 127);
    }
    for (int j = 0; j < 16; ++j) {
      const float d = fp16_to_fp32(y[i].d) * static_cast<float>(y[i].scales[j]);
      if (d == 0.f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        const int l = clampi(nearest_int(x[16 * j + ii] / d), -32, 31);
        L[16 * j + ii] = static_cast<int8_t>(l + 32);
      }
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t a = static_cast<uint8_t>(L[j + l]), b = static_cast<uint8_t>(L[j + l + 32]);
        const uint8_t c = static_cast<uint8_t>(L[j + l + 64]), e = static_cast<uint8_t>(L[j + l + 96]);
        ql[l + 0] = static_cast<uint8_t>((a & 0xF) | ((c & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((b & 0xF) | ((e & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6));
      }
    }
  }
}

void dequantize_q6_k(const BlockQ6_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int n = 0; n < kQK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

// ---- Q8_K ------------------------------------------------------------------------------------------

// Note: for an all-zero block ggml leaves bsums unwritten; we zero them (the only sensible value).
void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    float max = 0;
    float amax = 0;
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.f) {
      y[i].d = 0;
      memset(y[i].qs, 0, sizeof(y[i].qs));
      memset(y[i].bsums, 0, sizeof(y[i].bsums));
      continue;
    }
    // -127 (not -128) so that the largest magnitude maps to -127..127 symmetric, as in ggml.
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK_K; ++j) {
      const int v = nearest_int(iscale * x[j]);
      y[i].qs[j] = static_cast<int8_t>(v < 127 ? v : 127);
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

void dequantize_q8_k(const BlockQ8_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i)
    for (int j = 0; j < kQK_K; ++j) *y++ = x[i].d * static_cast<float>(x[i].qs[j]);
}

}  // namespace ferry::kquant
