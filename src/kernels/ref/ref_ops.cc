// RefOps: see ref_ops.h. Every op checks its shapes with FERRY_ASSERT (a mismatch is a bug in the
// caller, not bad input) and walks rows through the views' byte strides, so strided views work too.
#include "kernels/ref/ref_ops.h"

#include <algorithm>
#include <cmath>
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

}  // namespace

float silu_ref(float x) { return static_cast<float>(x / (1.0 + std::exp(-static_cast<double>(x)))); }

float gelu_tanh_ref(float x) {
  const double xd = x;
  const double kSqrt2OverPi = 0.79788456080286535588;
  return static_cast<float>(0.5 * xd * (1.0 + std::tanh(kSqrt2OverPi * (xd + 0.044715 * xd * xd * xd))));
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
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
    for (int64_t i = 0; i < d; ++i) yr[i] = static_cast<float>(xr[i] * inv) * wv[i];
  });
}

void RefOps::matmul(const TensorView& w, const TensorView& x, TensorView out) {
  const int64_t K = w.ne[0], N = w.ne[1], T = x.ne[1];
  FERRY_ASSERT(x.dtype == DType::F32 && out.dtype == DType::F32);
  FERRY_ASSERT(x.ne[0] == K && out.ne[0] == N && out.ne[1] == T && x.ne[2] == 1 && out.ne[2] == 1);
  FERRY_ASSERT(x.data != out.data);
  for (int64_t t = 0; t < T; ++t) {
    const float* xr = frow(x, t);
    float* yr = frow(out, t);
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
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      double theta = static_cast<double>(pos[t]) * p.freq_scale *
                     std::pow(static_cast<double>(p.freq_base), -2.0 * static_cast<double>(i) / p.n_rot);
      if (ff != nullptr) theta /= ff[i];
      cs[i] = std::cos(theta);
      sn[i] = std::sin(theta);
    }
    for (int64_t h = 0; h < n_head; ++h) {
      float* v = frow(x, h, t);
      for (int64_t i = 0; i < half; ++i) {
        const int64_t i0 = p.neox ? i : 2 * i;
        const int64_t i1 = p.neox ? i + half : 2 * i + 1;
        const double x0 = v[i0], x1 = v[i1];
        v[i0] = static_cast<float>(x0 * cs[i] - x1 * sn[i]);
        v[i1] = static_cast<float>(x0 * sn[i] + x1 * cs[i]);
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
// asked), then the weighted sum of v_c. Everything accumulates in double.
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
  for (int64_t t = 0; t < n_tok; ++t) {
    visible.clear();
    for (int32_t c = 0; c < kv.n_cells; ++c) {
      if (cseq[c] != seq[t] || cpos[c] < 0 || cpos[c] > pos[t]) continue;
      if (p.window > 0 && pos[t] - cpos[c] >= p.window) continue;
      visible.push_back(c);
    }
    FERRY_ASSERT_MSG(!visible.empty(), "attention: a token sees no cell (its own K/V must be stored first)");
    score.resize(visible.size());
    float* orow = frow(out, t);
    for (int64_t h = 0; h < p.n_head; ++h) {
      const float* qh = frow(q, h, t);
      const int64_t kvh = h / group;
      double mx = -INFINITY;
      for (size_t j = 0; j < visible.size(); ++j) {
        const auto* kr = static_cast<const uint16_t*>(kv.k.row(visible[j])) + kvh * hd;
        double s = 0.0;
        for (int64_t i = 0; i < hd; ++i) s += static_cast<double>(qh[i]) * fp16_to_fp32(kr[i]);
        s *= p.scale;
        if (p.softcap > 0.f) s = p.softcap * std::tanh(s / p.softcap);
        score[j] = s;
        mx = std::max(mx, s);
      }
      double sum = 0.0;
      for (double& s : score) {
        s = std::exp(s - mx);
        sum += s;
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t j = 0; j < visible.size(); ++j) {
        const auto* vr = static_cast<const uint16_t*>(kv.v.row(visible[j])) + kvh * hd;
        const double w = score[j] / sum;
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
    for (int64_t i = 0; i < gate.ne[0]; ++i) {
      const float a = act == Activation::kSilu ? silu_ref(g[i]) : gelu_tanh_ref(g[i]);
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

std::unique_ptr<Ops> make_ref_ops() { return std::make_unique<RefOps>(); }

}  // namespace ferry::kernels
