// Portable element-wise and attention kernels, compiled once per ISA file like generic_impl.h (same
// rules: internal linkage, builtins only). The scalar level uses all of them; the SIMD levels keep the
// ones the compiler vectorizes well (add, scale, norms, RoPE) and replace the rest.
// Numerics follow llama.cpp's CPU backend (RefOps' kLlamaCpp): norm sums of float squares in double,
// GELU through F16 (ggml's table), softmax probabilities rounded to F16 (ggml converts them for the
// F16 V product).
#pragma once

#include "kernels/cpu/generic_impl.h"

namespace ferry::kernels::cpu {
namespace {

// Sum of float squares, accumulated in double (ggml's rms_norm): eight double lanes so it vectorizes.
inline double g_sum_sq(const float* x, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += static_cast<double>(x[i + l] * x[i + l]);
  double s = 0.0;
  for (int l = 0; l < 8; ++l) s += acc[l];
  for (; i < n; ++i) s += static_cast<double>(x[i] * x[i]);
  return s;
}
inline void g_mul_scale(const float* x, float s, const float* w, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * s) * w[i];
}
inline void g_add(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}
inline void g_scale(const float* x, float s, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
}
inline float g_silu(float x) { return x / (1.0f + __builtin_expf(-x)); }
// ggml's GELU: x <= -10 -> 0, x >= 10 -> x, else the value for fp16(x), rounded to fp16 (its table).
inline float g_gelu_tanh(float x) {
  if (x <= -10.f) return 0.f;
  if (x >= 10.f) return x;
  const float h = h2f(f2h(x));
  const float k = 0.79788456080286535587989211986876f;  // sqrt(2/pi)
  return h2f(f2h(0.5f * h * (1.0f + __builtin_tanhf(k * h * (1.0f + 0.044715f * h * h)))));
}
// ggml's swiglu_oai, scalar as ggml computes it (libm expf).
inline void g_swiglu_oai(const float* g, const float* u, float* y, int64_t n) {
  const float alpha = kSwigluOaiAlpha, limit = kSwigluOaiLimit;
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i] < limit ? g[i] : limit;
    const float v = u[i] < -limit ? -limit : (u[i] > limit ? limit : u[i]);
    const float out_glu = x / (1.f + __builtin_expf(alpha * (-x)));
    y[i] = out_glu * (v + 1.f);
  }
}
inline void g_glu(const float* g, const float* u, float* y, int64_t n, Activation act) {
  if (act == Activation::kSwigluOai) {
    g_swiglu_oai(g, u, y, n);
  } else if (act == Activation::kSilu) {
    for (int64_t i = 0; i < n; ++i) y[i] = g_silu(g[i]) * u[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = g_gelu_tanh(g[i]) * u[i];
  }
}
inline void g_f32_to_f16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f2h(x[i]);
}
inline void g_rope(float* x, const float* cs, const float* sn, int64_t half, bool neox) {
  if (neox) {
    float* x0 = x;
    float* x1 = x + half;
    for (int64_t i = 0; i < half; ++i) {
      const float a = x0[i], b = x1[i];
      x0[i] = a * cs[i] - b * sn[i];
      x1[i] = a * sn[i] + b * cs[i];
    }
  } else {
    for (int64_t i = 0; i < half; ++i) {
      const float a = x[2 * i], b = x[2 * i + 1];
      x[2 * i] = a * cs[i] - b * sn[i];
      x[2 * i + 1] = a * sn[i] + b * cs[i];
    }
  }
}

inline float softcap_score(float s, float cap) { return cap > 0.f ? cap * __builtin_tanhf(s / cap) : s; }

inline void g_attn_scores(const float* q, int64_t q_stride, int ng, const uint8_t* k, size_t k_stride,
                          const int32_t* cells, int n, int hd, float scale, float softcap, float* s) {
  for (int j = 0; j < n; ++j) {
    const auto* kr = reinterpret_cast<const uint16_t*>(k + static_cast<size_t>(cells[j]) * k_stride);
    for (int g = 0; g < ng; ++g) {
      const float* qg = q + g * q_stride;
      float acc = 0.f;
      for (int i = 0; i < hd; ++i) acc += qg[i] * h2f(kr[i]);
      s[g * n + j] = softcap_score(acc * scale, softcap);
    }
  }
}
// p[j] = fp16(exp(s[j] - max) * float(1 / sum)), the sum in double; a sink logit (-inf: none) joins
// the max and, after the scores, the sum (ggml's soft_max with sinks).
inline void g_softmax(float* s, int n, float sink) {
  float mx = -__builtin_inff();
  for (int j = 0; j < n; ++j) mx = s[j] > mx ? s[j] : mx;
  mx = sink > mx ? sink : mx;
  double sum = 0.0;
  for (int j = 0; j < n; ++j) {
    s[j] = __builtin_expf(s[j] - mx);
    sum += s[j];
  }
  sum += static_cast<double>(__builtin_expf(sink - mx));
  const float inv = static_cast<float>(1.0 / sum);
  for (int j = 0; j < n; ++j) s[j] = h2f(f2h(s[j] * inv));
}
inline float g_exp_sum(float* s, int64_t n, float m) {
  float sum = 0.f;
  for (int64_t j = 0; j < n; ++j) sum += (s[j] = __builtin_expf(s[j] - m));
  return sum;
}
inline void g_gemm_f32(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t m,
                       int64_t n, int64_t k, bool accumulate) {
  for (int64_t i = 0; i < m; ++i) {
    float* ci = c + i * ldc;
    if (!accumulate)
      for (int64_t j = 0; j < n; ++j) ci[j] = 0.f;
    for (int64_t kk = 0; kk < k; ++kk) {
      const float av = a[i * lda + kk];
      const float* bk = b + kk * ldb;
      for (int64_t j = 0; j < n; ++j) ci[j] += av * bk[j];
    }
  }
}
inline void g_round_f16(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = h2f(f2h(x[i]));
}
inline void g_attn_values(const float* p, int ng, const uint8_t* v, size_t v_stride, const int32_t* cells, int n,
                          int hd, float* out) {
  for (int i = 0; i < ng * hd; ++i) out[i] = 0.f;
  for (int j = 0; j < n; ++j) {
    const auto* vr = reinterpret_cast<const uint16_t*>(v + static_cast<size_t>(cells[j]) * v_stride);
    for (int g = 0; g < ng; ++g) {
      const float w = p[g * n + j];
      float* o = out + g * hd;
      for (int i = 0; i < hd; ++i) o[i] += w * h2f(vr[i]);
    }
  }
}

// Installs the portable element-wise and attention kernels.
inline void set_generic_ops(KernelTable* t) {
  t->sum_sq = g_sum_sq;
  t->mul_scale = g_mul_scale;
  t->add = g_add;
  t->scale = g_scale;
  t->glu = g_glu;
  t->f32_to_f16 = g_f32_to_f16;
  t->rope = g_rope;
  t->attn_scores = g_attn_scores;
  t->softmax = g_softmax;
  t->exp_sum = g_exp_sum;
  t->gemm_f32 = g_gemm_f32;
  t->attn_values = g_attn_values;
  t->round_f16 = g_round_f16;
}

}  // namespace
}  // namespace ferry::kernels::cpu
