// encode_image (see vision_forward.h). Buffers are [features, tokens] F32 vectors owned here; every
// computation is an Ops call.
#include "model/vision/vision_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <string>

namespace ferry::model {

using kernels::Activation;
using kernels::Ops;
using kernels::RopeParams;

namespace {

// Tokens per FFN chunk: gate and up are [n_ff, chunk] each.
constexpr int64_t kFfnChunk = 1024;

// A zero-initialised F32 buffer and its [ne0, ne1] view.
struct Buf {
  std::vector<float> v;
  TensorView t;
  Status alloc(int64_t ne0, int64_t ne1, const char* what) {
    try {
      v.assign(static_cast<size_t>(ne0 * ne1), 0.f);
    } catch (const std::bad_alloc&) {
      return make_error(ErrorCode::kOutOfMemory, "vision encoder: cannot allocate %lld MiB for %s",
                        static_cast<long long>(ne0 * ne1 * 4 >> 20), what);
    }
    t = TensorView::make(DType::F32, v.data(), ne0, ne1);
    return Status::ok();
  }
};

void record(const DebugHook* hook, const std::string& name, const TensorView& t) {
  if (hook != nullptr && *hook) (*hook)(name, t);
}

// out = rms_norm(x) * w (+ b).
void norm(Ops& ops, const TensorView& x, const TensorView& w, const TensorView& b, float eps, const TensorView& out) {
  ops.rms_norm(x, w, eps, out);
  if (present(b)) ops.add(out, b, out);
}

// out = W x (+ b).
void linear(Ops& ops, const TensorView& w, const TensorView& b, const TensorView& x, const TensorView& out) {
  ops.matmul(w, x, out);
  if (present(b)) ops.add(out, b, out);
}

TensorView heads(const TensorView& buf, int64_t hd, int64_t nh, int64_t n) {
  return TensorView::make(DType::F32, buf.data, hd, nh, n);
}

}  // namespace

Expected<std::vector<float>> encode_image(Ops& ops, const VisionSpec& spec, const VisionWeights& w,
                                          const VisionInput& in, const DebugHook* hook) {
  const int64_t d = spec.n_embd, n = in.n_patches, hd = spec.head_dim, nh = spec.n_head, ff = spec.n_ff;
  const int64_t pe = spec.patch_elems();
  FERRY_ASSERT(n > 0 && n % 4 == 0 && static_cast<int64_t>(in.patches.size()) == pe * n);
  FERRY_ASSERT(static_cast<int64_t>(in.pos.size()) == 4 * n && in.windows.size() >= 2 && in.windows.back() == n);
  const int64_t chunk = std::min(kFfnChunk, n);
  Buf x, xn, q, k, v, attn, tmp, gate, up;
  FERRY_RETURN_IF_ERROR(x.alloc(d, n, "the residual stream"));
  FERRY_RETURN_IF_ERROR(xn.alloc(d, n, "normed activations"));
  FERRY_RETURN_IF_ERROR(q.alloc(d, n, "queries"));
  FERRY_RETURN_IF_ERROR(k.alloc(d, n, "keys"));
  FERRY_RETURN_IF_ERROR(v.alloc(d, n, "values"));
  FERRY_RETURN_IF_ERROR(attn.alloc(d, n, "attention output"));
  FERRY_RETURN_IF_ERROR(tmp.alloc(d, n, "block output"));
  FERRY_RETURN_IF_ERROR(gate.alloc(ff, chunk, "FFN gate"));
  FERRY_RETURN_IF_ERROR(up.alloc(ff, chunk, "FFN up"));

  // Patch embedding: conv(W0, img) + conv(W1, img) with stride = kernel, i.e. two matmuls over patches.
  const TensorView patches = TensorView::make(DType::F32, const_cast<float*>(in.patches.data()), pe, n);
  ops.matmul(w.patch0, patches, x.t);
  ops.matmul(w.patch1, patches, tmp.t);
  ops.add(x.t, tmp.t, x.t);
  record(hook, "inp_patch", x.t);

  const TensorView pos = TensorView::make(DType::I32, const_cast<int32_t*>(in.pos.data()), 4 * n);
  RopeParams rope;  // llama.cpp: ggml_rope_multi(..., d_head / 2, {d_head / 4} x 4, VISION, base 10000)
  rope.n_rot = static_cast<int32_t>(hd / 2);
  rope.freq_base = spec.rope_base;
  rope.vision = true;
  for (int s = 0; s < 4; ++s) rope.sections[s] = static_cast<int32_t>(hd / 4);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int32_t whole[2] = {0, static_cast<int32_t>(n)};
  const int32_t n_windows = static_cast<int32_t>(in.windows.size()) - 1;

  for (int32_t il = 0; il < spec.n_layer; ++il) {
    const VisionLayerWeights& L = w.layers[static_cast<size_t>(il)];
    norm(ops, x.t, L.ln1, L.ln1_b, spec.eps, xn.t);
    {
      const TensorView* ws[3] = {&L.q, &L.k, &L.v};
      TensorView outs[3] = {q.t, k.t, v.t};
      ops.matmul_many(3, ws, xn.t, outs);
      ops.add(q.t, L.q_b, q.t);
      ops.add(k.t, L.k_b, k.t);
      ops.add(v.t, L.v_b, v.t);
    }
    const TensorView q3 = heads(q.t, hd, nh, n), k3 = heads(k.t, hd, nh, n), v3 = heads(v.t, hd, nh, n);
    ops.rope_multi(q3, pos, rope);
    ops.rope_multi(k3, pos, rope);
    if (spec.full_attention(il))
      ops.attention_segments(q3, k3, v3, whole, 1, scale, attn.t);
    else
      ops.attention_segments(q3, k3, v3, in.windows.data(), n_windows, scale, attn.t);
    linear(ops, L.out, L.out_b, attn.t, tmp.t);
    ops.add(x.t, tmp.t, x.t);

    for (int64_t t0 = 0; t0 < n; t0 += chunk) {  // FFN over token chunks
      const int64_t c = std::min(chunk, n - t0);
      const TensorView xc = x.t.rows(t0, c), xnc = xn.t.rows(t0, c), oc = tmp.t.rows(t0, c);
      const TensorView g = gate.t.rows(0, c), u = up.t.rows(0, c);
      norm(ops, xc, L.ln2, L.ln2_b, spec.eps, xnc);
      linear(ops, L.up, L.up_b, xnc, u);
      linear(ops, L.gate, L.gate_b, xnc, g);
      ops.glu(g, u, Activation::kSilu, g);
      linear(ops, L.down, L.down_b, g, oc);
      ops.add(xc, oc, xc);
    }
    if (hook != nullptr && *hook) record(hook, "layer_out-" + std::to_string(il), x.t);
  }

  // Merger: RMSNorm, then four consecutive patches (one unit) as one row of 4d.
  norm(ops, x.t, w.post_ln, w.post_ln_b, spec.eps, xn.t);
  record(hook, "post_ln", xn.t);
  const int64_t n_units = n / 4;
  const TensorView merged = TensorView::make(DType::F32, xn.v.data(), 4 * d, n_units);
  Buf hidden, ones, out;
  FERRY_RETURN_IF_ERROR(hidden.alloc(4 * d, n_units, "merger hidden"));
  const int64_t ones_cols = std::min<int64_t>(n_units, 256);
  FERRY_RETURN_IF_ERROR(ones.alloc(4 * d, ones_cols, "merger GELU"));
  FERRY_RETURN_IF_ERROR(out.alloc(spec.proj_dim, n_units, "image embeddings"));
  std::fill(ones.v.begin(), ones.v.end(), 1.f);
  linear(ops, w.mm0, w.mm0_b, merged, hidden.t);
  for (int64_t t0 = 0; t0 < n_units; t0 += ones_cols) {  // gelu(h) * 1: ggml_gelu exactly
    const int64_t c = std::min(ones_cols, n_units - t0);
    const TensorView h = hidden.t.rows(t0, c);
    ops.glu(h, ones.t.rows(0, c), Activation::kGeluTanh, h);
  }
  linear(ops, w.mm2, w.mm2_b, hidden.t, out.t);
  record(hook, "embeddings", out.t);

  std::vector<float> raster(out.v.size());
  const size_t row = static_cast<size_t>(spec.proj_dim);
  for (size_t j = 0; j < in.token_unit.size(); ++j)
    std::memcpy(raster.data() + j * row, out.v.data() + static_cast<size_t>(in.token_unit[j]) * row, row * sizeof(float));
  return raster;
}

}  // namespace ferry::model
