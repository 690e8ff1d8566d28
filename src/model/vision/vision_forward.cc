// The vision tower's steps and encode_image (see vision_forward.h). Every computation is an Ops call on
// views of VisionBuffers.
#include "model/vision/vision_forward.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>

namespace ferry::model {

using kernels::Activation;
using kernels::Ops;
using kernels::RopeParams;

namespace {

// Tokens per FFN chunk: gate and up are [n_ff, chunk] each.
constexpr int64_t kFfnChunk = 1024;
// Merged tokens per GELU call (the width of `ones`).
constexpr int64_t kOnesCols = 256;

uint64_t align256(uint64_t bytes) { return (bytes + 255) / 256 * 256; }

// Parts of the buffer block, in order: floats (or int32s) each.
struct Parts {
  int64_t x, xn, q, k, v, gate, up, ones, pos, windows, whole;
};
Parts parts_of(const VisionSpec& spec, int64_t n, int64_t n_windows, int64_t* chunk, int64_t* ones_cols) {
  const int64_t d = spec.n_embd, ff = spec.n_ff, pe = spec.patch_elems();
  *chunk = std::min(kFfnChunk, n);
  *ones_cols = std::max<int64_t>(1, std::min(n / 4, kOnesCols));
  Parts p;
  p.x = p.xn = p.q = d * n;
  p.k = std::max(d, pe) * n;
  p.v = std::max(d * n, int64_t{spec.proj_dim} * (n / 4));
  p.gate = p.up = ff * *chunk;
  p.ones = 4 * d * *ones_cols;
  p.pos = 4 * n;
  p.windows = n_windows + 1;
  p.whole = 2;
  return p;
}

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
  return TensorView::make(DType::F32, buf.data, hd, nh, n, 1, buf.where);
}

}  // namespace

uint64_t vision_buffer_bytes(const VisionSpec& spec, int64_t n, int64_t n_windows) {
  int64_t chunk = 0, ones_cols = 0;
  const Parts p = parts_of(spec, n, n_windows, &chunk, &ones_cols);
  uint64_t bytes = 0;
  for (int64_t e : {p.x, p.xn, p.q, p.k, p.v, p.gate, p.up, p.ones, p.pos, p.windows, p.whole})
    bytes += align256(static_cast<uint64_t>(e) * 4);
  return bytes;
}

VisionBuffers vision_buffers(const VisionSpec& spec, int64_t n, int64_t n_windows, void* base, Where where) {
  int64_t chunk = 0, ones_cols = 0;
  const Parts p = parts_of(spec, n, n_windows, &chunk, &ones_cols);
  char* at = static_cast<char*>(base);
  auto take = [&](int64_t elems) {
    void* r = at;
    at += align256(static_cast<uint64_t>(elems) * 4);
    return r;
  };
  const int64_t d = spec.n_embd;
  VisionBuffers b;
  b.n = n;
  b.chunk = chunk;
  b.x = TensorView::make(DType::F32, take(p.x), d, n, 1, 1, where);
  b.xn = TensorView::make(DType::F32, take(p.xn), d, n, 1, 1, where);
  b.q = TensorView::make(DType::F32, take(p.q), d, n, 1, 1, where);
  b.k = TensorView::make(DType::F32, take(p.k), d, n, 1, 1, where);
  b.patches = TensorView::make(DType::F32, b.k.data, spec.patch_elems(), n, 1, 1, where);
  b.v = TensorView::make(DType::F32, take(p.v), d, n, 1, 1, where);
  b.gate = TensorView::make(DType::F32, take(p.gate), spec.n_ff, chunk, 1, 1, where);
  b.up = TensorView::make(DType::F32, take(p.up), spec.n_ff, chunk, 1, 1, where);
  b.ones = TensorView::make(DType::F32, take(p.ones), 4 * d, ones_cols, 1, 1, where);
  b.pos = TensorView::make(DType::I32, take(p.pos), 4 * n, 1, 1, 1, where);
  b.windows = TensorView::make(DType::I32, take(p.windows), n_windows + 1, 1, 1, 1, where);
  b.whole = TensorView::make(DType::I32, take(p.whole), 2, 1, 1, 1, where);
  return b;
}

VisionConstants vision_constants(const VisionSpec& spec, const VisionBuffers& b) {
  (void)spec;
  VisionConstants c;
  c.whole = {0, static_cast<int32_t>(b.n)};
  c.ones.assign(static_cast<size_t>(b.ones.ne[0] * b.ones.ne[1]), 1.f);
  return c;
}

void vision_patch_embed(Ops& ops, const VisionSpec& spec, const VisionWeights& w, const VisionBuffers& b,
                        const DebugHook* hook) {
  (void)spec;
  // conv(W0, img) + conv(W1, img) with stride = kernel, i.e. two matmuls over the patches (the second
  // into q, free until the first block).
  ops.matmul(w.patch0, b.patches, b.x);
  ops.matmul(w.patch1, b.patches, b.q);
  ops.add(b.x, b.q, b.x);
  record(hook, "inp_patch", b.x);
}

void vision_block(Ops& ops, const VisionSpec& spec, const VisionLayerWeights& L, int32_t il, const VisionBuffers& b,
                  const DebugHook* hook) {
  const int64_t n = b.n, hd = spec.head_dim, nh = spec.n_head;
  RopeParams rope;  // llama.cpp: ggml_rope_multi(..., d_head / 2, {d_head / 4} x 4, VISION, base 10000)
  rope.n_rot = static_cast<int32_t>(hd / 2);
  rope.freq_base = spec.rope_base;
  rope.vision = true;
  for (int s = 0; s < 4; ++s) rope.sections[s] = static_cast<int32_t>(hd / 4);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  norm(ops, b.x, L.ln1, L.ln1_b, spec.eps, b.xn);
  {
    const TensorView* ws[3] = {&L.q, &L.k, &L.v};
    TensorView outs[3] = {b.q, b.k, b.v};
    ops.matmul_many(3, ws, b.xn, outs);
    ops.add(b.q, L.q_b, b.q);
    ops.add(b.k, L.k_b, b.k);
    ops.add(b.v, L.v_b, b.v);
  }
  const TensorView q3 = heads(b.q, hd, nh, n), k3 = heads(b.k, hd, nh, n), v3 = heads(b.v, hd, nh, n);
  ops.rope_multi(q3, b.pos, rope);
  ops.rope_multi(k3, b.pos, rope);
  ops.attention_segments(q3, k3, v3, spec.full_attention(il) ? b.whole : b.windows, scale, b.xn);
  linear(ops, L.out, L.out_b, b.xn, b.q);
  ops.add(b.x, b.q, b.x);

  for (int64_t t0 = 0; t0 < n; t0 += b.chunk) {  // FFN over token chunks
    const int64_t c = std::min(b.chunk, n - t0);
    const TensorView xc = b.x.rows(t0, c), xnc = b.xn.rows(t0, c), oc = b.q.rows(t0, c);
    const TensorView g = b.gate.rows(0, c), u = b.up.rows(0, c);
    norm(ops, xc, L.ln2, L.ln2_b, spec.eps, xnc);
    linear(ops, L.up, L.up_b, xnc, u);
    linear(ops, L.gate, L.gate_b, xnc, g);
    ops.glu(g, u, Activation::kSilu, g);
    linear(ops, L.down, L.down_b, g, oc);
    ops.add(xc, oc, xc);
  }
  if (hook != nullptr && *hook) record(hook, "layer_out-" + std::to_string(il), b.x);
}

TensorView vision_merger(Ops& ops, const VisionSpec& spec, const VisionWeights& w, const VisionBuffers& b,
                         const DebugHook* hook) {
  // RMSNorm, then four consecutive patches (one unit) as one row of 4d.
  const int64_t d = spec.n_embd, n_units = b.n / 4;
  norm(ops, b.x, w.post_ln, w.post_ln_b, spec.eps, b.xn);
  record(hook, "post_ln", b.xn);
  const TensorView merged = TensorView::make(DType::F32, b.xn.data, 4 * d, n_units, 1, 1, b.xn.where);
  const TensorView hidden = TensorView::make(DType::F32, b.k.data, 4 * d, n_units, 1, 1, b.k.where);
  const TensorView out = TensorView::make(DType::F32, b.v.data, spec.proj_dim, n_units, 1, 1, b.v.where);
  linear(ops, w.mm0, w.mm0_b, merged, hidden);
  const int64_t cols = b.ones.ne[1];
  for (int64_t t0 = 0; t0 < n_units; t0 += cols) {  // gelu(h) * 1: ggml_gelu exactly
    const int64_t c = std::min(cols, n_units - t0);
    const TensorView h = hidden.rows(t0, c);
    ops.glu(h, b.ones.rows(0, c), Activation::kGeluTanh, h);
  }
  linear(ops, w.mm2, w.mm2_b, hidden, out);
  record(hook, "embeddings", out);
  return out;
}

std::vector<float> vision_raster(const VisionSpec& spec, const VisionInput& in, const float* encoder_order) {
  const size_t row = static_cast<size_t>(spec.proj_dim);
  std::vector<float> raster(in.token_unit.size() * row);
  for (size_t j = 0; j < in.token_unit.size(); ++j)
    std::memcpy(raster.data() + j * row, encoder_order + static_cast<size_t>(in.token_unit[j]) * row,
                row * sizeof(float));
  return raster;
}

Expected<std::vector<float>> encode_image(Ops& ops, const VisionSpec& spec, const VisionWeights& w,
                                          const VisionInput& in, const DebugHook* hook) {
  const int64_t n = in.n_patches, pe = spec.patch_elems();
  FERRY_ASSERT(n > 0 && n % 4 == 0 && static_cast<int64_t>(in.patches.size()) == pe * n);
  FERRY_ASSERT(static_cast<int64_t>(in.pos.size()) == 4 * n && in.windows.size() >= 2 && in.windows.back() == n);
  const int64_t n_windows = static_cast<int64_t>(in.windows.size()) - 1;
  const uint64_t bytes = vision_buffer_bytes(spec, n, n_windows);
  std::unique_ptr<float[]> block;
  try {
    block.reset(new float[bytes / sizeof(float) + 64]());
  } catch (const std::bad_alloc&) {
    return make_error(ErrorCode::kOutOfMemory, "vision encoder: cannot allocate %llu MiB of activations",
                      static_cast<unsigned long long>(bytes >> 20));
  }
  // 256-aligned inside the allocation.
  void* base = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(block.get()) + 255) & ~uintptr_t{255});
  const VisionBuffers b = vision_buffers(spec, n, n_windows, base);
  const VisionConstants c = vision_constants(spec, b);
  std::memcpy(b.patches.data, in.patches.data(), in.patches.size() * sizeof(float));
  std::memcpy(b.pos.data, in.pos.data(), in.pos.size() * sizeof(int32_t));
  std::memcpy(b.windows.data, in.windows.data(), in.windows.size() * sizeof(int32_t));
  std::memcpy(b.whole.data, c.whole.data(), c.whole.size() * sizeof(int32_t));
  std::memcpy(b.ones.data, c.ones.data(), c.ones.size() * sizeof(float));

  vision_patch_embed(ops, spec, w, b, hook);
  for (int32_t il = 0; il < spec.n_layer; ++il) vision_block(ops, spec, w.layers[static_cast<size_t>(il)], il, b, hook);
  const TensorView out = vision_merger(ops, spec, w, b, hook);
  return vision_raster(spec, in, out.ptr<const float>());
}

}  // namespace ferry::model
