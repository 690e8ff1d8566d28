// RefOps: see ref_ops.h. Every op checks its shapes with FERRY_ASSERT (a mismatch is a bug in the
// caller, not bad input) and walks rows through the views' byte strides, so strided views work too.
#include "kernels/ref/ref_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/status.h"
#include "tensor/quant.h"
#include "tensor/quant_blocks.h"

namespace ferry::kernels {

namespace {

float* frow(const TensorView& t, int64_t i1, int64_t i2 = 0, int64_t i3 = 0) {
  return static_cast<float*>(t.row(i1, i2, i3));
}

bool same_shape(const TensorView& a, const TensorView& b) {
  return a.ne[0] == b.ne[0] && a.ne[1] == b.ne[1] && a.ne[2] == b.ne[2] && a.ne[3] == b.ne[3];
}

// Calls f(row index r, i1, i2, i3) for every row of t (dims 1..3 flattened in order).
template <typename F>
void for_each_row(const TensorView& t, F&& f) {
  int64_t r = 0;
  for (int64_t i3 = 0; i3 < t.ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < t.ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < t.ne[1]; ++i1) f(r++, i1, i2, i3);
}

const int32_t* ivec(const TensorView& t) {
  FERRY_ASSERT(t.dtype == DType::I32 && t.where == Where::kHost);
  return t.ptr<const int32_t>();
}

// Integer levels of one 32-element block of a legacy quant (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), with its
// scale d and (Q4_1, Q5_1) min m: element j = d * lv[j] + m.
void legacy_levels(DType t, const uint8_t* blk, int32_t lv[32], float* d, float* m) {
  *m = 0.f;
  uint32_t qh = 0;
  auto q5 = [&](const uint8_t* qs, int j) {
    const int lo = j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4);
    return lo | static_cast<int>(((qh >> j) & 1u) << 4);
  };
  switch (t) {
    case DType::Q4_0: {
      const auto* b = reinterpret_cast<const BlockQ4_0*>(blk);
      *d = fp16_to_fp32(b->d);
      for (int j = 0; j < 16; ++j) {
        lv[j] = (b->qs[j] & 0x0F) - 8;
        lv[j + 16] = (b->qs[j] >> 4) - 8;
      }
      return;
    }
    case DType::Q4_1: {
      const auto* b = reinterpret_cast<const BlockQ4_1*>(blk);
      *d = fp16_to_fp32(b->d);
      *m = fp16_to_fp32(b->m);
      for (int j = 0; j < 16; ++j) {
        lv[j] = b->qs[j] & 0x0F;
        lv[j + 16] = b->qs[j] >> 4;
      }
      return;
    }
    case DType::Q5_0: {
      const auto* b = reinterpret_cast<const BlockQ5_0*>(blk);
      *d = fp16_to_fp32(b->d);
      std::memcpy(&qh, b->qh, sizeof(qh));
      for (int j = 0; j < 32; ++j) lv[j] = q5(b->qs, j) - 16;
      return;
    }
    case DType::Q5_1: {
      const auto* b = reinterpret_cast<const BlockQ5_1*>(blk);
      *d = fp16_to_fp32(b->d);
      *m = fp16_to_fp32(b->m);
      std::memcpy(&qh, b->qh, sizeof(qh));
      for (int j = 0; j < 32; ++j) lv[j] = q5(b->qs, j);
      return;
    }
    case DType::Q8_0: {
      const auto* b = reinterpret_cast<const BlockQ8_0*>(blk);
      *d = fp16_to_fp32(b->d);
      for (int j = 0; j < 32; ++j) lv[j] = b->qs[j];
      return;
    }
    case DType::MXFP4: {  // the doubled E2M1 values with the half E8M0 scale, as ggml's vec_dot
      const auto* b = reinterpret_cast<const BlockMXFP4*>(blk);
      *d = e8m0_to_fp32_half(b->e);
      for (int j = 0; j < 16; ++j) {
        lv[j] = kMxfp4Values[b->qs[j] & 0x0F];
        lv[j + 16] = kMxfp4Values[b->qs[j] >> 4];
      }
      return;
    }
    default: FERRY_ASSERT_MSG(false, "legacy_levels: not a 32-element legacy quant");
  }
}

// Q8_0 / Q8_1 activation rows as ggml's x86 CPU backend makes them (quantize_row_q8_0/1 for AVX2 and
// up): d = amax / 127, q = round-half-even(x * (127 / amax)), Q8_1's s = F16(d * sum(q)). This differs
// from the reference quantizer (x / d, ties away from zero) at exact ties, which real activations do
// hit (e.g. gemma3's scaled embeddings), and each tie moves a dot product by a whole level.
void quantize_act_q8(DType at, const float* x, void* dst, int64_t K) {
  for (int64_t b = 0; b < K / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.f;
    const float id = amax != 0.f ? 127.f / amax : 0.f;
    int8_t* qs;
    if (at == DType::Q8_1) {
      auto* y = static_cast<BlockQ8_1*>(dst) + b;
      y->d = fp32_to_fp16(d);
      qs = y->qs;
    } else {
      auto* y = static_cast<BlockQ8_0*>(dst) + b;
      y->d = fp32_to_fp16(d);
      qs = y->qs;
    }
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      qs[j] = static_cast<int8_t>(std::nearbyint(xb[j] * id));  // default rounding: half to even
      sum += qs[j];
    }
    if (at == DType::Q8_1) (static_cast<BlockQ8_1*>(dst) + b)->s = fp32_to_fp16(d * static_cast<float>(sum));
  }
}

// ggml's dot of a legacy-quant row with a Q8_0 / Q8_1 activation row (its generic vec_dot_*_q8_*):
// per block (d_w * d_x) * sum(levels_w * levels_x), plus m_w * s_x for the types with a min, where
// s_x is Q8_1's F16 d * sum(levels_x). That F16 rounding of s is part of llama.cpp's result.
double dot_legacy_q8(DType wt, const void* wrow, DType at, const void* xrow, int64_t K) {
  const size_t wb = static_cast<size_t>(traits(wt).block_bytes);
  const size_t xb = static_cast<size_t>(traits(at).block_bytes);
  int32_t lw[32];
  double acc = 0.0;
  for (int64_t b = 0; b < K / 32; ++b) {
    float dw = 0.f, mw = 0.f;
    legacy_levels(wt, static_cast<const uint8_t*>(wrow) + b * wb, lw, &dw, &mw);
    const uint8_t* xblk = static_cast<const uint8_t*>(xrow) + b * xb;
    const int8_t* qx;
    float dx = 0.f, sx = 0.f;
    if (at == DType::Q8_1) {
      const auto* x = reinterpret_cast<const BlockQ8_1*>(xblk);
      dx = fp16_to_fp32(x->d);
      sx = fp16_to_fp32(x->s);
      qx = x->qs;
    } else {
      const auto* x = reinterpret_cast<const BlockQ8_0*>(xblk);
      dx = fp16_to_fp32(x->d);
      qx = x->qs;
    }
    int64_t sumi = 0;
    for (int j = 0; j < 32; ++j) sumi += static_cast<int64_t>(lw[j]) * qx[j];
    acc += static_cast<double>(dw * dx) * static_cast<double>(sumi);
    if (at == DType::Q8_1) acc += static_cast<double>(mw * sx);
  }
  return acc;
}

}  // namespace

DType activation_type(DType w) {
  switch (w) {
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0:
    case DType::MXFP4: return DType::Q8_0;
    case DType::Q4_1:
    case DType::Q5_1: return DType::Q8_1;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return DType::Q8_K;
    case DType::F16: return DType::F16;
    case DType::BF16: return DType::BF16;
    default: return DType::F32;
  }
}

float silu_ref(float x) { return static_cast<float>(x / (1.0 + std::exp(-static_cast<double>(x)))); }

float gelu_tanh_ref(float x) {
  const double xd = x;
  const double kSqrt2OverPi = 0.79788456080286535588;
  return static_cast<float>(0.5 * xd * (1.0 + std::tanh(kSqrt2OverPi * (xd + 0.044715 * xd * xd * xd))));
}

float gelu_tanh_ggml(float x) {
  if (x <= -10.f) return 0.f;
  if (x >= 10.f) return x;
  const float h = fp16_to_fp32(fp32_to_fp16(x));
  const float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  const float g = 0.5f * h * (1.0f + std::tanh(kSqrt2OverPi * h * (1.0f + 0.044715f * h * h)));
  return fp16_to_fp32(fp32_to_fp16(g));
}

void RefOps::embed(const TensorView& table, const TensorView& tokens, float scale, TensorView out) {
  const int64_t d = table.ne[0], n = tokens.ne[0];
  FERRY_ASSERT(out.dtype == DType::F32 && out.ne[0] == d && out.ne[1] == n);
  const int32_t* ids = ivec(tokens);
  for (int64_t t = 0; t < n; ++t) {
    FERRY_ASSERT(ids[t] >= 0 && ids[t] < table.ne[1]);
    float* y = frow(out, t);
    dequantize_row(table.dtype, table.row(ids[t]), y, d);
    if (scale != 1.f)
      for (int64_t i = 0; i < d; ++i) y[i] *= scale;
  }
}

void RefOps::rms_norm(const TensorView& x, const TensorView& w, float eps, TensorView out) {
  const int64_t d = x.ne[0];
  FERRY_ASSERT(x.dtype == DType::F32 && out.dtype == DType::F32 && same_shape(x, out));
  FERRY_ASSERT(w.dtype == DType::F32 && w.ne[0] == d);
  const float* wv = w.ptr<const float>();
  for_each_row(x, [&](int64_t, int64_t i1, int64_t i2, int64_t i3) {
    const float* xr = frow(x, i1, i2, i3);
    float* yr = frow(out, i1, i2, i3);
    double ss = 0.0;
    for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    if (llama()) {  // ggml: float mean and scale, x * scale, then * w
      const float mean = static_cast<float>(ss / static_cast<double>(d));
      const float inv = 1.0f / std::sqrt(mean + eps);
      for (int64_t i = 0; i < d; ++i) yr[i] = (xr[i] * inv) * wv[i];
      return;
    }
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
    for (int64_t i = 0; i < d; ++i) yr[i] = static_cast<float>(xr[i] * inv) * wv[i];
  });
}

void RefOps::matmul(const TensorView& w, const TensorView& x, TensorView out) {
  const int64_t K = w.ne[0], N = w.ne[1], T = x.ne[1];
  FERRY_ASSERT(x.dtype == DType::F32 && out.dtype == DType::F32);
  FERRY_ASSERT(x.ne[0] == K && out.ne[0] == N && out.ne[1] == T && x.ne[2] == 1 && out.ne[2] == 1);
  FERRY_ASSERT(x.data != out.data);
  const DType at = llama() ? activation_type(w.dtype) : DType::F32;
  std::vector<uint8_t> packed(at == DType::F32 ? 0 : row_bytes(at, K));
  std::vector<float> xa(at == DType::F32 ? 0 : K);
  // Legacy quants dot their integer levels with the 8-bit activations block by block, as ggml does;
  // the k-quants and F16 / BF16 see the rounded activations through the reference dot.
  const bool legacy = at == DType::Q8_0 || at == DType::Q8_1;
  for (int64_t t = 0; t < T; ++t) {
    const float* xr = frow(x, t);
    float* yr = frow(out, t);
    if (at != DType::F32) {  // the activation row as llama.cpp's dot product sees it
      if (legacy) {
        quantize_act_q8(at, xr, packed.data(), K);
        for (int64_t n = 0; n < N; ++n)
          yr[n] = static_cast<float>(dot_legacy_q8(w.dtype, w.row(n), at, packed.data(), K));
        continue;
      }
      quantize_row(at, xr, packed.data(), K);
      dequantize_row(at, packed.data(), xa.data(), K);
      xr = xa.data();
    }
    for (int64_t n = 0; n < N; ++n) yr[n] = static_cast<float>(dot_row_ref(w.dtype, w.row(n), xr, K));
  }
}

void RefOps::add(const TensorView& a, const TensorView& b, TensorView out) {
  FERRY_ASSERT(a.dtype == DType::F32 && b.dtype == DType::F32 && out.dtype == DType::F32 && same_shape(a, out));
  const bool bcast = b.ne[1] == 1 && b.ne[2] == 1 && b.ne[3] == 1;
  FERRY_ASSERT(b.ne[0] == a.ne[0] && (bcast || same_shape(a, b)));
  for_each_row(a, [&](int64_t, int64_t i1, int64_t i2, int64_t i3) {
    const float* ar = frow(a, i1, i2, i3);
    const float* br = bcast ? frow(b, 0) : frow(b, i1, i2, i3);
    float* yr = frow(out, i1, i2, i3);
    for (int64_t i = 0; i < a.ne[0]; ++i) yr[i] = ar[i] + br[i];
  });
}

void RefOps::scale(const TensorView& x, float s, TensorView out) {
  FERRY_ASSERT(x.dtype == DType::F32 && out.dtype == DType::F32 && same_shape(x, out));
  for_each_row(x, [&](int64_t, int64_t i1, int64_t i2, int64_t i3) {
    const float* xr = frow(x, i1, i2, i3);
    float* yr = frow(out, i1, i2, i3);
    for (int64_t i = 0; i < x.ne[0]; ++i) yr[i] = xr[i] * s;
  });
}

// theta(pos, i) = pos * freq_scale * base^(-2i / n_rot) / freq_factor[i], for pair i < n_rot / 2.
// Normal style rotates (x[2i], x[2i+1]); NeoX style rotates (x[i], x[i + n_rot/2]). Dimensions
// past n_rot pass through (ggml's partial-rotary behaviour).
void RefOps::rope(TensorView x, const BatchMeta& batch, const RopeParams& p) {
  const int64_t hd = x.ne[0], n_head = x.ne[1], n_tok = x.ne[2];
  FERRY_ASSERT(x.dtype == DType::F32 && n_tok == batch.n_tokens && x.ne[3] == 1);
  FERRY_ASSERT(p.n_rot > 0 && p.n_rot % 2 == 0 && p.n_rot <= hd);
  const int32_t* pos = ivec(batch.pos);
  const int64_t half = p.n_rot / 2;
  const float* ff = nullptr;
  if (p.freq_factors.data != nullptr) {
    FERRY_ASSERT(p.freq_factors.dtype == DType::F32 && p.freq_factors.ne[0] >= half);
    ff = p.freq_factors.ptr<const float>();
  }
  std::vector<double> cs(half), sn(half);
  // ggml's float recurrence: theta_i = theta_{i-1} * base^(-2 / n_rot), starting at pos.
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  float corr_dims[2];
  rope_yarn_corr_dims(p.n_rot, p.n_ctx_orig, p.freq_base, p.beta_fast, p.beta_slow, corr_dims);
  for (int64_t t = 0; t < n_tok; ++t) {
    float theta_f = static_cast<float>(pos[t]);
    for (int64_t i = 0; i < half; ++i) {
      if (llama()) {
        float c, s;
        rope_yarn(theta_f / (ff != nullptr ? ff[i] : 1.0f), p.freq_scale, corr_dims, 2 * i, p.ext_factor,
                  p.attn_factor, &c, &s);
        cs[i] = c;
        sn[i] = s;
        theta_f *= theta_scale;
        continue;
      }
      // The same blend in double: YaRN's ramp mixes the interpolated angle with the unscaled one.
      double extrap = static_cast<double>(pos[t]) *
                      std::pow(static_cast<double>(p.freq_base), -2.0 * static_cast<double>(i) / p.n_rot);
      if (ff != nullptr) extrap /= ff[i];
      double theta = p.freq_scale * extrap, mscale = p.attn_factor;
      if (p.ext_factor != 0.f) {
        const double y = (static_cast<double>(i) - corr_dims[0]) / std::max(0.001, static_cast<double>(corr_dims[1] - corr_dims[0]));
        const double mix = (1.0 - std::min(1.0, std::max(0.0, y))) * p.ext_factor;
        theta = theta * (1.0 - mix) + extrap * mix;
        mscale *= 1.0 + 0.1 * std::log(1.0 / p.freq_scale);
      }
      cs[i] = std::cos(theta) * mscale;
      sn[i] = std::sin(theta) * mscale;
    }
    for (int64_t h = 0; h < n_head; ++h) {
      float* v = frow(x, h, t);
      for (int64_t i = 0; i < half; ++i) {
        const int64_t i0 = p.neox ? i : 2 * i;
        const int64_t i1 = p.neox ? i + half : 2 * i + 1;
        if (llama()) {
          const float x0 = v[i0], x1 = v[i1], c = static_cast<float>(cs[i]), sv = static_cast<float>(sn[i]);
          v[i0] = x0 * c - x1 * sv;
          v[i1] = x0 * sv + x1 * c;
          continue;
        }
        const double x0 = v[i0], x1 = v[i1];
        v[i0] = static_cast<float>(x0 * cs[i] - x1 * sn[i]);
        v[i1] = static_cast<float>(x0 * sn[i] + x1 * cs[i]);
      }
    }
  }
}

// ggml's rope_multi (ggml_mrope_cache_init): pair i takes stream s by its sector i % sum(sections); with
// llama.cpp numerics each stream's angle is a float recurrence from its position (restarted at each
// section's first pair in vision mode), else theta = pos * base^(-2 j / n_rot) in double, j the pair's
// index counted from where its recurrence starts.
void RefOps::rope_multi(TensorView x, const TensorView& pos, const RopeParams& p) {
  const int64_t hd = x.ne[0], n_head = x.ne[1], n_tok = x.ne[2];
  FERRY_ASSERT(x.dtype == DType::F32 && x.ne[3] == 1);
  FERRY_ASSERT(pos.ne[0] == 4 * n_tok && p.n_rot > 0 && p.n_rot % 2 == 0);
  const int32_t* pv = ivec(pos);
  const int32_t* sec = p.sections;
  const int32_t sect_dims = sec[0] + sec[1] + sec[2] + sec[3];
  FERRY_ASSERT(sec[0] >= 0 && sec[1] >= 0 && sec[2] >= 0 && sec[3] >= 0 && sect_dims > 0);
  const int32_t start[4] = {0, sec[0], sec[0] + sec[1], sec[0] + sec[1] + sec[2]};
  const int64_t n_pairs = p.vision ? p.n_rot : p.n_rot / 2;  // pair distance is n_pairs either way
  FERRY_ASSERT(p.vision ? hd == 2 * p.n_rot : p.n_rot <= hd);
  const float* ff = nullptr;
  if (p.freq_factors.data != nullptr) {
    FERRY_ASSERT(p.freq_factors.dtype == DType::F32 && p.freq_factors.ne[0] >= n_pairs);
    ff = p.freq_factors.ptr<const float>();
  }
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  std::vector<double> cs(n_pairs), sn(n_pairs);
  for (int64_t t = 0; t < n_tok; ++t) {
    const int32_t p4[4] = {pv[t], pv[n_tok + t], pv[2 * n_tok + t], pv[3 * n_tok + t]};
    float theta_f[4] = {static_cast<float>(p4[0]), static_cast<float>(p4[1]), static_cast<float>(p4[2]),
                        static_cast<float>(p4[3])};
    for (int64_t i = 0; i < n_pairs; ++i) {
      const int32_t sector = static_cast<int32_t>(i % sect_dims);
      const int s = sector < start[1] ? 0 : sector < start[2] ? 1 : sector < start[3] ? 2 : 3;
      if (p.vision && sector == start[s]) theta_f[s] = static_cast<float>(p4[s]);
      const double f = ff != nullptr ? ff[i] : 1.0;
      if (llama()) {
        const float th = p.freq_scale * (theta_f[s] / static_cast<float>(f));
        cs[i] = std::cos(th);
        sn[i] = std::sin(th);
      } else {
        const int64_t j = p.vision ? sector - start[s] : i;
        const double theta = static_cast<double>(p4[s]) * p.freq_scale *
                             std::pow(static_cast<double>(p.freq_base), -2.0 * static_cast<double>(j) / p.n_rot) / f;
        cs[i] = std::cos(theta);
        sn[i] = std::sin(theta);
      }
      for (float& th : theta_f) th *= theta_scale;
    }
    for (int64_t h = 0; h < n_head; ++h) {
      float* v = frow(x, h, t);
      for (int64_t i = 0; i < n_pairs; ++i) {
        if (llama()) {
          const float x0 = v[i], x1 = v[i + n_pairs], c = static_cast<float>(cs[i]), sv = static_cast<float>(sn[i]);
          v[i] = x0 * c - x1 * sv;
          v[i + n_pairs] = x0 * sv + x1 * c;
          continue;
        }
        const double x0 = v[i], x1 = v[i + n_pairs];
        v[i] = static_cast<float>(x0 * cs[i] - x1 * sn[i]);
        v[i + n_pairs] = static_cast<float>(x0 * sn[i] + x1 * cs[i]);
      }
    }
  }
}

// Softmax attention per (token, head) over the token's segment, sums in double (both numerics: llama.cpp's
// clip graph computes this in F32 without intermediate roundings).
void RefOps::attention_segments(const TensorView& q, const TensorView& k, const TensorView& v,
                                const TensorView& bounds_view, float scale, TensorView out) {
  FERRY_ASSERT(bounds_view.dtype == DType::I32 && bounds_view.ne[0] >= 2);
  const int32_t* bounds = bounds_view.ptr<const int32_t>();
  const int32_t n_seg = static_cast<int32_t>(bounds_view.ne[0] - 1);
  const int64_t hd = q.ne[0], n_head = q.ne[1], n = q.ne[2], n_kv = k.ne[1];
  FERRY_ASSERT(q.dtype == DType::F32 && k.dtype == DType::F32 && v.dtype == DType::F32 && out.dtype == DType::F32);
  FERRY_ASSERT(k.ne[0] == hd && v.ne[0] == hd && v.ne[1] == n_kv && k.ne[2] == n && v.ne[2] == n);
  FERRY_ASSERT(n_kv > 0 && n_head % n_kv == 0 && out.ne[0] == hd * n_head && out.ne[1] == n);
  FERRY_ASSERT(n_seg >= 1 && bounds[0] == 0 && bounds[n_seg] == n);
  const int64_t group = n_head / n_kv;
  std::vector<double> score, acc(hd);
  for (int32_t s = 0; s < n_seg; ++s) {
    const int64_t k0 = bounds[s], k1 = bounds[s + 1];
    FERRY_ASSERT(k0 < k1);
    score.resize(static_cast<size_t>(k1 - k0));
    for (int64_t t = k0; t < k1; ++t) {
      for (int64_t h = 0; h < n_head; ++h) {
        const float* qh = frow(q, h, t);
        const int64_t kvh = h / group;
        double mx = -INFINITY;
        for (int64_t j = k0; j < k1; ++j) {
          const float* kr = frow(k, kvh, j);
          double d = 0.0;
          for (int64_t i = 0; i < hd; ++i) d += static_cast<double>(qh[i]) * kr[i];
          score[static_cast<size_t>(j - k0)] = d * scale;
          mx = std::max(mx, d * scale);
        }
        double sum = 0.0;
        for (double& x : score) sum += (x = std::exp(x - mx));
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = k0; j < k1; ++j) {
          const float* vr = frow(v, kvh, j);
          const double w = score[static_cast<size_t>(j - k0)] / sum;
          for (int64_t i = 0; i < hd; ++i) acc[i] += w * vr[i];
        }
        float* o = frow(out, t) + h * hd;
        for (int64_t i = 0; i < hd; ++i) o[i] = static_cast<float>(acc[i]);
      }
    }
  }
}

void RefOps::kv_store(const TensorView& k, const TensorView& v, const BatchMeta& batch, KvView kv) {
  const int64_t kvd = k.ne[0];
  FERRY_ASSERT(k.dtype == DType::F32 && v.dtype == DType::F32 && same_shape(k, v) && k.ne[1] == batch.n_tokens);
  FERRY_ASSERT(kv.k.dtype == DType::F16 && kv.v.dtype == DType::F16 && kv.k.ne[0] == kvd && kv.v.ne[0] == kvd);
  const int32_t* cell = ivec(batch.cell);
  for (int64_t t = 0; t < batch.n_tokens; ++t) {
    FERRY_ASSERT(cell[t] >= 0 && cell[t] < kv.k.ne[1]);
    const float* kr = frow(k, t);
    const float* vr = frow(v, t);
    auto* kd = static_cast<uint16_t*>(kv.k.row(cell[t]));
    auto* vd = static_cast<uint16_t*>(kv.v.row(cell[t]));
    for (int64_t i = 0; i < kvd; ++i) {
      kd[i] = fp32_to_fp16(kr[i]);
      vd[i] = fp32_to_fp16(vr[i]);
    }
  }
}

// For each token t and head h (KV head h / (n_head / n_kv_head)): softmax over the visible cells c
// (same sequence, cell_pos <= pos[t], pos[t] - cell_pos < window) of scale * q.k_c (soft-capped when
// asked), then the weighted sum of v_c, over the cells in position order. Everything accumulates in double.
void RefOps::attention(const TensorView& q, const KvView& kv, const BatchMeta& batch, const AttnParams& p,
                       TensorView out) {
  const int64_t hd = p.head_dim, n_tok = batch.n_tokens;
  FERRY_ASSERT(q.dtype == DType::F32 && q.ne[0] == hd && q.ne[1] == p.n_head && q.ne[2] == n_tok);
  FERRY_ASSERT(p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0);
  FERRY_ASSERT(out.dtype == DType::F32 && out.ne[0] == hd * p.n_head && out.ne[1] == n_tok);
  FERRY_ASSERT(kv.k.ne[0] == hd * p.n_kv_head && kv.n_cells <= kv.k.ne[1]);
  const int32_t* pos = ivec(batch.pos);
  const int32_t* seq = ivec(batch.seq);
  const int32_t* cpos = ivec(kv.cell_pos);
  const int32_t* cseq = ivec(kv.cell_seq);
  const int64_t group = p.n_head / p.n_kv_head;

  std::vector<int32_t> visible;
  std::vector<double> score, acc(hd);
  std::vector<float> q16(hd);
  for (int64_t t = 0; t < n_tok; ++t) {
    visible.clear();
    for (int32_t c = 0; c < kv.n_cells; ++c) {
      if (cseq[c] != seq[t] || cpos[c] < 0 || cpos[c] > pos[t]) continue;
      if (p.window > 0 && pos[t] - cpos[c] >= p.window) continue;
      visible.push_back(c);
    }
    // Position order, wherever the cells lie (sums in a fixed order: the result does not depend on
    // which cells other sequences freed).
    std::stable_sort(visible.begin(), visible.end(), [cpos](int32_t a, int32_t b) { return cpos[a] < cpos[b]; });
    FERRY_ASSERT_MSG(!visible.empty(), "attention: a token sees no cell (its own K/V must be stored first)");
    score.resize(visible.size());
    float* orow = frow(out, t);
    for (int64_t h = 0; h < p.n_head; ++h) {
      const float* qh = frow(q, h, t);
      if (llama()) {  // ggml's K.q product converts q to F16 first
        for (int64_t i = 0; i < hd; ++i) q16[i] = fp16_to_fp32(fp32_to_fp16(qh[i]));
        qh = q16.data();
      }
      const int64_t kvh = h / group;
      double mx = -INFINITY;
      for (size_t j = 0; j < visible.size(); ++j) {
        const auto* kr = static_cast<const uint16_t*>(kv.k.row(visible[j])) + kvh * hd;
        double s = 0.0;
        for (int64_t i = 0; i < hd; ++i) s += static_cast<double>(qh[i]) * fp16_to_fp32(kr[i]);
        if (llama()) s = static_cast<float>(s) * p.scale;  // float scores, as ggml's soft_max
        else s *= p.scale;
        if (p.softcap > 0.f) s = p.softcap * std::tanh(s / p.softcap);
        score[j] = s;
        mx = std::max(mx, s);
      }
      const bool sink = p.sinks.data != nullptr;  // the head's sink logit joins max and sum
      const float sk = sink ? p.sinks.ptr<const float>()[h] : 0.f;
      if (sink) mx = std::max(mx, static_cast<double>(sk));
      double sum = 0.0;
      for (double& s : score) {
        s = llama() ? std::exp(static_cast<float>(s - mx)) : std::exp(s - mx);
        sum += s;
      }
      if (sink) sum += llama() ? std::exp(static_cast<float>(sk - mx)) : std::exp(sk - mx);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t j = 0; j < visible.size(); ++j) {
        const auto* vr = static_cast<const uint16_t*>(kv.v.row(visible[j])) + kvh * hd;
        double w = score[j] / sum;
        if (llama()) w = fp16_to_fp32(fp32_to_fp16(static_cast<float>(score[j]) * static_cast<float>(1.0 / sum)));
        for (int64_t i = 0; i < hd; ++i) acc[i] += w * fp16_to_fp32(vr[i]);
      }
      for (int64_t i = 0; i < hd; ++i) orow[h * hd + i] = static_cast<float>(acc[i]);
    }
  }
}

void RefOps::glu(const TensorView& gate, const TensorView& up, Activation act, TensorView out) {
  FERRY_ASSERT(gate.dtype == DType::F32 && up.dtype == DType::F32 && out.dtype == DType::F32);
  FERRY_ASSERT(same_shape(gate, up) && same_shape(gate, out));
  for_each_row(gate, [&](int64_t, int64_t i1, int64_t i2, int64_t i3) {
    const float* g = frow(gate, i1, i2, i3);
    const float* u = frow(up, i1, i2, i3);
    float* y = frow(out, i1, i2, i3);
    if (act == Activation::kSwigluOai) {  // ggml's formula in float (llama.cpp computes it so too)
      for (int64_t i = 0; i < gate.ne[0]; ++i) {
        const float x = std::min(g[i], kSwigluOaiLimit);
        const float v = std::clamp(u[i], -kSwigluOaiLimit, kSwigluOaiLimit);
        const float out_glu = llama() ? x / (1.f + std::exp(kSwigluOaiAlpha * (-x)))
                                      : static_cast<float>(x / (1.0 + std::exp(-static_cast<double>(kSwigluOaiAlpha) * x)));
        y[i] = out_glu * (v + 1.f);
      }
      return;
    }
    for (int64_t i = 0; i < gate.ne[0]; ++i) {
      const float a = act == Activation::kSilu ? silu_ref(g[i])
                      : llama()                ? gelu_tanh_ggml(g[i])
                                               : gelu_tanh_ref(g[i]);
      y[i] = a * u[i];
    }
  });
}

void RefOps::gather_rows(const TensorView& x, const int32_t* rows, TensorView out) {
  FERRY_ASSERT(x.dtype == DType::F32 && out.dtype == DType::F32 && out.ne[0] == x.ne[0]);
  FERRY_ASSERT(out.data != x.data);
  for (int64_t i = 0; i < out.ne[1]; ++i) {
    FERRY_ASSERT(rows[i] >= 0 && rows[i] < x.ne[1]);
    const float* src = frow(x, rows[i]);
    float* dst = frow(out, i);
    for (int64_t j = 0; j < x.ne[0]; ++j) dst[j] = src[j];
  }
}

std::unique_ptr<Ops> make_ref_ops(RefNumerics numerics) { return std::make_unique<RefOps>(numerics); }

}  // namespace ferry::kernels
