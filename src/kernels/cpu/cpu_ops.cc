// CpuOps: construction, factories and the row-wise ops (embed, norms, add/scale, RoPE, GLU, KV store,
// gather). Each op checks shapes with FERRY_ASSERT like RefOps (a mismatch is a caller bug), walks
// rows through the views' byte strides, and splits rows over the pool when the op is big enough to
// pay for a wake-up (~a few microseconds).
#include "kernels/cpu/cpu_ops_impl.h"

#include <cmath>
#include <cstring>

#include "base/status.h"
#include "tensor/quant.h"

namespace ferry::kernels {

namespace cpu {

namespace {

// Below this many elements an element-wise op runs on the calling thread.
constexpr int64_t kParallelElems = 1 << 15;

float* frow(const TensorView& t, int64_t i1, int64_t i2 = 0, int64_t i3 = 0) {
  return static_cast<float*>(t.row(i1, i2, i3));
}

bool same_shape(const TensorView& a, const TensorView& b) {
  return a.ne[0] == b.ne[0] && a.ne[1] == b.ne[1] && a.ne[2] == b.ne[2] && a.ne[3] == b.ne[3];
}

const int32_t* ivec(const TensorView& t) {
  FERRY_ASSERT(t.dtype == DType::I32 && t.where == Where::kHost);
  return t.ptr<const int32_t>();
}

}  // namespace

CpuOps::CpuOps(int n_threads, CpuIsa isa) : tab_(&kernel_table(isa)), pool_(n_threads) {
  name_ = std::string("cpu-") + cpu_isa_name(isa);
}

template <typename F>
void CpuOps::for_rows(const TensorView& t, F&& fn) {
  const int64_t n1 = t.ne[1], n12 = t.ne[1] * t.ne[2], nrows = t.nrows();
  auto body = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) fn(r % n1, (r / n1) % t.ne[2], r / n12);
  };
  if (nrows * t.ne[0] < kParallelElems || pool_.size() == 1) {
    body(0, nrows);
    return;
  }
  const int64_t grain = kParallelElems / 4 / (t.ne[0] > 0 ? t.ne[0] : 1) + 1;
  pool_.parallel_for(nrows, grain, body);
}

void CpuOps::embed(const TensorView& table, const TensorView& tokens, float scale, TensorView out) {
  const int64_t d = table.ne[0], n = tokens.ne[0];
  FERRY_ASSERT(out.dtype == DType::F32 && out.ne[0] == d && out.ne[1] == n);
  const int32_t* ids = ivec(tokens);
  for (int64_t t = 0; t < n; ++t) FERRY_ASSERT(ids[t] >= 0 && ids[t] < table.ne[1]);
  auto body = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* y = frow(out, t);
      dequantize_row(table.dtype, table.row(ids[t]), y, d);
      if (scale != 1.f) tab_->scale(y, scale, y, d);
    }
  };
  if (n * d < kParallelElems) {
    body(0, n);
  } else {
    pool_.parallel_for(n, body);
  }
}

void CpuOps::rms_norm(const TensorView& x, const TensorView& w, float eps, TensorView out) {
  const int64_t d = x.ne[0];
  FERRY_ASSERT(x.dtype == DType::F32 && out.dtype == DType::F32 && same_shape(x, out));
  FERRY_ASSERT(w.dtype == DType::F32 && w.ne[0] == d);
  const float* wv = w.ptr<const float>();
  for_rows(x, [&](int64_t i1, int64_t i2, int64_t i3) {
    const float* xr = frow(x, i1, i2, i3);
    // As ggml: the mean in float from a double sum, then (x * scale) * w.
    const float mean = static_cast<float>(tab_->sum_sq(xr, d) / static_cast<double>(d));
    const float inv = 1.0f / std::sqrt(mean + eps);
    tab_->mul_scale(xr, inv, wv, frow(out, i1, i2, i3), d);
  });
}

void CpuOps::add(const TensorView& a, const TensorView& b, TensorView out) {
  FERRY_ASSERT(a.dtype == DType::F32 && b.dtype == DType::F32 && out.dtype == DType::F32 && same_shape(a, out));
  const bool bcast = b.ne[1] == 1 && b.ne[2] == 1 && b.ne[3] == 1;
  FERRY_ASSERT(b.ne[0] == a.ne[0] && (bcast || same_shape(a, b)));
  for_rows(a, [&](int64_t i1, int64_t i2, int64_t i3) {
    const float* br = bcast ? frow(b, 0) : frow(b, i1, i2, i3);
    tab_->add(frow(a, i1, i2, i3), br, frow(out, i1, i2, i3), a.ne[0]);
  });
}

void CpuOps::scale(const TensorView& x, float s, TensorView out) {
  FERRY_ASSERT(x.dtype == DType::F32 && out.dtype == DType::F32 && same_shape(x, out));
  for_rows(x, [&](int64_t i1, int64_t i2, int64_t i3) {
    tab_->scale(frow(x, i1, i2, i3), s, frow(out, i1, i2, i3), x.ne[0]);
  });
}

void CpuOps::glu(const TensorView& gate, const TensorView& up, Activation act, TensorView out) {
  FERRY_ASSERT(gate.dtype == DType::F32 && up.dtype == DType::F32 && out.dtype == DType::F32);
  FERRY_ASSERT(same_shape(gate, up) && same_shape(gate, out));
  for_rows(gate, [&](int64_t i1, int64_t i2, int64_t i3) {
    tab_->glu(frow(gate, i1, i2, i3), frow(up, i1, i2, i3), frow(out, i1, i2, i3), gate.ne[0], act);
  });
}

// RoPE angles as ggml computes them (and RefOps' kLlamaCpp numerics): in float, theta_i = pos *
// base^(-2i / n_rot) by repeated multiplication, th = freq_scale * (theta_i / freq_factor[i]) blended by
// YaRN where it is on, cosf / sinf times attn_factor (kernels/rope_yarn.h); then the rotation of every
// head of the token.
namespace {

struct RopeTables {
  int64_t half = 0;
  const float* ff = nullptr;  // freq factors or null
  float theta_scale = 1.f;
  float corr_dims[2] = {0.f, 0.f};  // YaRN
  size_t slice = 0;           // per-thread bytes: cos + sin
};

RopeTables rope_tables(const RopeParams& p, int64_t hd) {
  FERRY_ASSERT(p.n_rot > 0 && p.n_rot % 2 == 0 && p.n_rot <= hd);
  RopeTables r;
  r.half = p.n_rot / 2;
  if (p.freq_factors.data != nullptr) {
    FERRY_ASSERT(p.freq_factors.dtype == DType::F32 && p.freq_factors.ne[0] >= r.half);
    r.ff = p.freq_factors.ptr<const float>();
  }
  r.theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  rope_yarn_corr_dims(p.n_rot, p.n_ctx_orig, p.freq_base, p.beta_fast, p.beta_slow, r.corr_dims);
  r.slice = static_cast<size_t>(r.half) * 2 * sizeof(float) + 64;
  return r;
}

// cs / sn [half] for position pos.
void rope_angles(const RopeTables& r, const RopeParams& p, int32_t pos, float* cs, float* sn) {
  float theta = static_cast<float>(pos);
  for (int64_t i = 0; i < r.half; ++i) {
    rope_yarn(theta / (r.ff != nullptr ? r.ff[i] : 1.0f), p.freq_scale, r.corr_dims, 2 * i, p.ext_factor,
              p.attn_factor, &cs[i], &sn[i]);
    theta *= r.theta_scale;
  }
}

// f(t, cs, sn) for every token t with its angles in cs / sn (a per-thread slice of base), over the pool
// when `work` elements make it worth it.
template <class F>
void for_tokens_with_angles(ThreadPool& pool, uint8_t* base, const RopeTables& r, const RopeParams& p,
                            const int32_t* pos, int64_t n_tok, int64_t work, F f) {
  auto body = [&](int64_t t0, int64_t t1, int ith) {
    auto* cs = reinterpret_cast<float*>(base + r.slice * static_cast<size_t>(ith));
    float* sn = cs + r.half;
    for (int64_t t = t0; t < t1; ++t) {
      rope_angles(r, p, pos[t], cs, sn);
      f(t, cs, sn);
    }
  };
  if (work < kParallelElems || n_tok < 2) {
    body(0, n_tok, 0);
  } else {
    pool.parallel_for(n_tok, 1, body);
  }
}

}  // namespace

void CpuOps::rope(TensorView x, const BatchMeta& batch, const RopeParams& p) {
  const int64_t hd = x.ne[0], n_head = x.ne[1], n_tok = x.ne[2];
  FERRY_ASSERT(x.dtype == DType::F32 && n_tok == batch.n_tokens && x.ne[3] == 1);
  const RopeTables r = rope_tables(p, hd);
  uint8_t* base = per_thread_.get(r.slice * static_cast<size_t>(pool_.size()));
  for_tokens_with_angles(pool_, base, r, p, ivec(batch.pos), n_tok, n_tok * n_head * hd,
                         [&](int64_t t, const float* cs, const float* sn) {
                           for (int64_t h = 0; h < n_head; ++h) tab_->rope(frow(x, h, t), cs, sn, r.half, p.neox);
                         });
}

// rope_qk + kv_store in one pass per token: the angles once for q and k, and the rotated k row
// converted to the cache while it is in L1. Same numbers as the three ops.
void CpuOps::rope_qk_store(TensorView q3, TensorView k3, const TensorView& k, const TensorView& v,
                           const BatchMeta& batch, const RopeParams& p, KvView kv) {
  const int64_t hd = q3.ne[0], n_head = q3.ne[1], n_kv = k3.ne[1], n_tok = batch.n_tokens, kvd = k.ne[0];
  FERRY_ASSERT(q3.dtype == DType::F32 && k3.dtype == DType::F32 && q3.ne[2] == n_tok && k3.ne[2] == n_tok);
  FERRY_ASSERT(k3.ne[0] == hd && q3.ne[3] == 1 && k3.ne[3] == 1);
  FERRY_ASSERT(k.dtype == DType::F32 && v.dtype == DType::F32 && same_shape(k, v) && k.ne[1] == n_tok);
  FERRY_ASSERT(kvd == hd * n_kv && k3.data == k.data);
  FERRY_ASSERT(kv.k.dtype == DType::F16 && kv.v.dtype == DType::F16 && kv.k.ne[0] == kvd && kv.v.ne[0] == kvd);
  const int32_t* cell = ivec(batch.cell);
  for (int64_t t = 0; t < n_tok; ++t) FERRY_ASSERT(cell[t] >= 0 && cell[t] < kv.k.ne[1]);
  const RopeTables r = rope_tables(p, hd);
  uint8_t* base = per_thread_.get(r.slice * static_cast<size_t>(pool_.size()));
  for_tokens_with_angles(pool_, base, r, p, ivec(batch.pos), n_tok, n_tok * (n_head + 2 * n_kv) * hd,
                         [&](int64_t t, const float* cs, const float* sn) {
                           for (int64_t h = 0; h < n_head; ++h) tab_->rope(frow(q3, h, t), cs, sn, r.half, p.neox);
                           for (int64_t h = 0; h < n_kv; ++h) tab_->rope(frow(k3, h, t), cs, sn, r.half, p.neox);
                           tab_->f32_to_f16(frow(k, t), static_cast<uint16_t*>(kv.k.row(cell[t])), kvd);
                           tab_->f32_to_f16(frow(v, t), static_cast<uint16_t*>(kv.v.row(cell[t])), kvd);
                         });
}

void CpuOps::kv_store(const TensorView& k, const TensorView& v, const BatchMeta& batch, KvView kv) {
  const int64_t kvd = k.ne[0];
  FERRY_ASSERT(k.dtype == DType::F32 && v.dtype == DType::F32 && same_shape(k, v) && k.ne[1] == batch.n_tokens);
  FERRY_ASSERT(kv.k.dtype == DType::F16 && kv.v.dtype == DType::F16 && kv.k.ne[0] == kvd && kv.v.ne[0] == kvd);
  const int32_t* cell = ivec(batch.cell);
  for (int64_t t = 0; t < batch.n_tokens; ++t) FERRY_ASSERT(cell[t] >= 0 && cell[t] < kv.k.ne[1]);
  auto body = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      tab_->f32_to_f16(frow(k, t), static_cast<uint16_t*>(kv.k.row(cell[t])), kvd);
      tab_->f32_to_f16(frow(v, t), static_cast<uint16_t*>(kv.v.row(cell[t])), kvd);
    }
  };
  if (batch.n_tokens * kvd < kParallelElems) {
    body(0, batch.n_tokens);
  } else {
    pool_.parallel_for(batch.n_tokens, body);
  }
}

void CpuOps::gather_rows(const TensorView& x, const int32_t* rows, TensorView out) {
  FERRY_ASSERT(x.dtype == DType::F32 && out.dtype == DType::F32 && out.ne[0] == x.ne[0]);
  FERRY_ASSERT(out.data != x.data);
  for (int64_t i = 0; i < out.ne[1]; ++i) {
    FERRY_ASSERT(rows[i] >= 0 && rows[i] < x.ne[1]);
    std::memcpy(frow(out, i), frow(x, rows[i]), static_cast<size_t>(x.ne[0]) * sizeof(float));
  }
}

}  // namespace cpu

std::unique_ptr<Ops> make_cpu_ops(int n_threads, CpuIsa isa) {
  FERRY_ASSERT_MSG(cpu_isa_supported(isa), "make_cpu_ops: dispatch level not supported by this CPU");
  return std::make_unique<cpu::CpuOps>(n_threads, isa);
}

std::unique_ptr<Ops> make_cpu_ops(int n_threads) { return make_cpu_ops(n_threads, default_cpu_isa()); }

}  // namespace ferry::kernels
