// The forward (see forward.h). Reads top to bottom like the llama.cpp graphs it reproduces
// (models/llama.cpp, qwen2.cpp, qwen3.cpp, gemma3.cpp, qwen3moe.cpp, openai-moe.cpp); the only per-architecture branches
// are the ModelSpec flags. The residual stream x is updated in place; every other buffer is reused per block.
#include "model/forward.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>

#include "base/status.h"

namespace ferry::model {

using kernels::Activation;
using kernels::AttnParams;
using kernels::BatchMeta;
using kernels::KvView;
using kernels::Ops;
using kernels::RopeParams;

namespace {

// Records `t` under a printf-formatted name; formats nothing when there is no hook.
void record(const DebugHook* hook, const TensorView& t, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
void record(const DebugHook* hook, const TensorView& t, const char* fmt, ...) {
  if (hook == nullptr || !*hook) return;
  char name[96];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(name, sizeof(name), fmt, ap);
  va_end(ap);
  (*hook)(name, t);
}

bool recording(const DebugHook* hook) { return hook != nullptr && *hook; }

// gemma3's graph multiplies q by the attention scale before attention (and attends with scale 1);
// the math is the same either way, the rounding is llama.cpp's only this way.
bool prescale_q(const ModelSpec& spec) { return spec.arch == Arch::kGemma3; }

// View of the first n columns of a [features, n_max] scratch buffer as [a, b, n].
TensorView heads(const TensorView& buf, int64_t a, int64_t b, int64_t n) {
  FERRY_ASSERT(buf.ne[0] == a * b && n <= buf.ne[1]);
  return TensorView::make(DType::F32, buf.data, a, b, n, 1, buf.where);
}

// Width of the gate / up buffers: the dense FFN's, or every routed expert's of a token.
size_t glu_width(const ModelSpec& spec) {
  return std::max(static_cast<size_t>(spec.n_ff), static_cast<size_t>(spec.n_expert_used) * spec.n_ff_expert);
}

}  // namespace

size_t scratch_floats(const ModelSpec& spec, int32_t n_max, int32_t n_out_max) {
  const size_t n = static_cast<size_t>(n_max), no = static_cast<size_t>(n_out_max);
  const size_t d = spec.n_embd, qd = spec.q_dim(), kvd = spec.kv_dim(), ff = glu_width(spec);
  const size_t moe = static_cast<size_t>(spec.n_expert) + 2 * static_cast<size_t>(spec.n_expert_used) +
                     d * static_cast<size_t>(spec.n_expert_used);
  return n * (3 * d + 2 * qd + 2 * kvd + 2 * ff + moe) + no * (d + static_cast<size_t>(spec.n_vocab));
}

Scratch make_scratch(const ModelSpec& spec, int32_t n_max, int32_t n_out_max, float* base, Where where) {
  Scratch s;
  s.n_max = n_max;
  s.n_out_max = n_out_max;
  float* p = base;
  auto take = [&](int64_t ne0, int64_t ne1) {
    TensorView v = TensorView::make(DType::F32, p, ne0, ne1, 1, 1, where);
    p += ne0 * ne1;
    return v;
  };
  s.x = take(spec.n_embd, n_max);
  s.xn = take(spec.n_embd, n_max);
  s.q = take(spec.q_dim(), n_max);
  s.k = take(spec.kv_dim(), n_max);
  s.v = take(spec.kv_dim(), n_max);
  s.attn = take(spec.q_dim(), n_max);
  s.proj = take(spec.n_embd, n_max);
  s.gate = take(static_cast<int64_t>(glu_width(spec)), n_max);
  s.up = take(static_cast<int64_t>(glu_width(spec)), n_max);
  s.moe_logits = take(spec.n_expert, n_max);
  s.moe_ids = take(spec.n_expert_used, n_max);
  s.moe_ids.dtype = DType::I32;  // same element size as F32
  s.moe_weights = take(spec.n_expert_used, n_max);
  s.moe_out = take(spec.n_embd, static_cast<int64_t>(spec.n_expert_used) * n_max);
  s.head_x = take(spec.n_embd, n_out_max);
  s.logits = take(spec.n_vocab, n_out_max);
  FERRY_ASSERT(static_cast<size_t>(p - base) == scratch_floats(spec, n_max, n_out_max));
  return s;
}

RopeParams layer_rope(const ModelSpec& spec, const ModelWeights& w, int32_t layer) {
  RopeParams r;
  r.n_rot = spec.n_rot;
  r.freq_base = spec.layer_rope_base(layer);
  r.freq_scale = spec.layer_rope_freq_scale(layer);
  r.neox = spec.rope_neox;
  r.freq_factors = w.rope_freqs;  // data == nullptr when the file has none
  for (int i = 0; i < 4; ++i) r.sections[i] = spec.rope_sections[i];  // qwen2vl (rope_multi only)
  r.ext_factor = spec.rope_ext_factor;  // YaRN (gpt-oss)
  r.attn_factor = spec.rope_attn_factor;
  r.beta_fast = spec.yarn_beta_fast;
  r.beta_slow = spec.yarn_beta_slow;
  r.n_ctx_orig = spec.n_ctx_orig_yarn;
  return r;
}

AttnParams layer_attn(const ModelSpec& spec, int32_t layer) {
  AttnParams a;
  a.n_head = spec.n_head;
  a.n_kv_head = spec.n_kv_head;
  a.head_dim = spec.head_dim;
  a.scale = prescale_q(spec) ? 1.f : spec.kq_scale();
  a.window = spec.is_swa_layer(layer) ? spec.sliding_window : 0;
  a.softcap = 0.f;
  return a;
}

void forward_embed(Ops& ops, const ModelSpec& spec, const ModelWeights& w, const TensorView& tokens,
                   const Scratch& s, const DebugHook* hook) {
  const int64_t n = tokens.ne[0];
  FERRY_ASSERT(n <= s.n_max);
  TensorView x = s.x.rows(0, n);
  ops.embed(w.token_embd, tokens, spec.embed_scale, x);
  record(hook, x, "inp_embd");
}

void forward_embed_rows(Ops& ops, const ModelSpec& spec, const TensorView& embd, const Scratch& s,
                        const DebugHook* hook) {
  const int64_t n = embd.ne[1];
  FERRY_ASSERT(n <= s.n_max && embd.ne[0] == spec.n_embd && embd.dtype == DType::F32);
  TensorView x = s.x.rows(0, n);
  ops.scale(embd, 1.f, x);  // a copy
  record(hook, x, "inp_embd");
}

void forward_embed_mixed(Ops& ops, const ModelSpec& spec, const ModelWeights& w, const TensorView& tokens,
                         const TensorView& embd, const Scratch& s, const DebugHook* hook) {
  const int64_t n = tokens.ne[0];
  FERRY_ASSERT(n <= s.n_max && embd.ne[0] == spec.n_embd && embd.ne[1] == n && embd.dtype == DType::F32);
  const int32_t* t = tokens.ptr<const int32_t>();
  for (int64_t r0 = 0; r0 < n;) {
    const bool image = t[r0] < 0;
    int64_t r1 = r0 + 1;
    while (r1 < n && (t[r1] < 0) == image) ++r1;
    const TensorView x = s.x.rows(r0, r1 - r0);
    if (image) ops.scale(embd.rows(r0, r1 - r0), 1.f, x);  // a copy
    else
      ops.embed(w.token_embd,
                TensorView::make(DType::I32, const_cast<int32_t*>(t + r0), r1 - r0, 1, 1, 1, tokens.where),
                spec.embed_scale, x);
    r0 = r1;
  }
  record(hook, s.x.rows(0, n), "inp_embd");
}

void forward_attention(Ops& ops, const ModelSpec& spec, const ModelWeights& w, int32_t il, const BatchMeta& batch,
                       const KvView& kv, const Scratch& s, const DebugHook* hook) {
  const LayerWeights& L = w.layers[il];
  const int64_t n = batch.n_tokens;
  FERRY_ASSERT(n <= s.n_max);
  const TensorView x = s.x.rows(0, n), xn = s.xn.rows(0, n);
  const TensorView q = s.q.rows(0, n), k = s.k.rows(0, n), v = s.v.rows(0, n);
  const TensorView attn = s.attn.rows(0, n), proj = s.proj.rows(0, n);

  {  // q, k, v share their input: a backend may quantize it once and fuse the launches
    const TensorView* ws[3] = {&L.attn_q, &L.attn_k, &L.attn_v};
    TensorView outs[3] = {q, k, v};
    ops.norm_matmul_many(x, L.attn_norm, spec.rms_eps, xn, 3, ws, outs);
  }
  // With a recorder no matmul_acc announces a norm (expect_norm below), so xn has been written.
  record(hook, xn, "blk.%d.attn_norm", il);
  if (present(L.attn_q_bias)) ops.add(q, L.attn_q_bias, q);
  if (present(L.attn_k_bias)) ops.add(k, L.attn_k_bias, k);
  if (present(L.attn_v_bias)) ops.add(v, L.attn_v_bias, v);
  record(hook, q, "blk.%d.Qcur", il);
  record(hook, k, "blk.%d.Kcur", il);
  record(hook, v, "blk.%d.Vcur", il);

  // Per-head views: [head_dim, heads, n].
  const TensorView q3 = heads(q, spec.head_dim, spec.n_head, n);
  const TensorView k3 = heads(k, spec.head_dim, spec.n_kv_head, n);
  const RopeParams rope = layer_rope(spec, w, il);
  if (batch.mrope_pos.data != nullptr) {  // qwen2vl with image positions in the step: M-RoPE
    FERRY_ASSERT(!spec.qk_norm && !prescale_q(spec));
    ops.rope_multi(q3, batch.mrope_pos, rope);
    ops.rope_multi(k3, batch.mrope_pos, rope);
    record(hook, q, "blk.%d.Qcur_rope", il);
    record(hook, k, "blk.%d.Kcur_rope", il);
    ops.kv_store(k, v, batch, kv);
  } else if (!prescale_q(spec) && !recording(hook)) {  // one pass where the backend can
    if (spec.qk_norm) {
      ops.qk_norm_rope_store(q3, k3, L.attn_q_norm, L.attn_k_norm, spec.rms_eps, k, v, batch, rope, kv);
    } else {
      ops.rope_qk_store(q3, k3, k, v, batch, rope, kv);
    }
  } else {
    if (spec.qk_norm) {
      ops.rms_norm(q3, L.attn_q_norm, spec.rms_eps, q3);
      ops.rms_norm(k3, L.attn_k_norm, spec.rms_eps, k3);
      record(hook, q, "blk.%d.Qcur_normed", il);
      record(hook, k, "blk.%d.Kcur_normed", il);
    }
    ops.rope_qk(q3, k3, batch, rope);
    record(hook, q, "blk.%d.Qcur_rope", il);
    record(hook, k, "blk.%d.Kcur_rope", il);
    if (prescale_q(spec)) ops.scale(q, spec.kq_scale(), q);
    ops.kv_store(k, v, batch, kv);
  }
  AttnParams ap = layer_attn(spec, il);
  ap.sinks = L.attn_sinks;  // gpt-oss (data == nullptr elsewhere)
  ops.attention(q3, kv, batch, ap, attn);
  record(hook, attn, "blk.%d.kqv_out", il);

  // Without a bias, post-norm or a recorder, the projection is added to x where it is computed.
  if (!present(L.attn_output_bias) && !spec.post_norms && !recording(hook)) {
    // The dense FFN's norm comes next (an MoE block norms with a plain rms_norm: no hint).
    if (present(L.ffn_norm) && spec.n_expert == 0) ops.expect_norm(x, L.ffn_norm, spec.rms_eps);
    ops.matmul_acc(L.attn_output, attn, proj, x);
    return;
  }
  ops.matmul(L.attn_output, attn, proj);
  if (present(L.attn_output_bias)) ops.add(proj, L.attn_output_bias, proj);
  record(hook, proj, "blk.%d.attn_out", il);
  if (spec.post_norms) {
    ops.rms_norm(proj, L.post_attention_norm, spec.rms_eps, proj);
    record(hook, proj, "blk.%d.attn_post_norm", il);
  }
  ops.add(x, proj, x);
  record(hook, x, "blk.%d.ffn_inp", il);
}

namespace {

// The [features, n] prefix of a scratch buffer, contiguous (a slice's gate / up are narrower than n_ff).
TensorView prefix(const TensorView& buf, int64_t features, int64_t n) {
  FERRY_ASSERT(features * n <= buf.ne[0] * buf.ne[1]);
  return TensorView::make(DType::F32, buf.data, features, n, 1, 1, buf.where);
}

// What ffn_middle does before its gate / up: nothing (s.xn holds the normed input), or the norm itself.
struct FfnNorm {
  const TensorView* w = nullptr;  // norm s.x with this weight into s.xn first; null: s.xn is ready
  float eps = 0.f;
  const TensorView* next = nullptr;  // the norm that follows the block's accumulate into out (a hint)
};

// The middle of an FFN block, whole or one slice (the views say which): gate and up from s.xn, the
// activation, then out = down · act, or out += it with `accumulate`.
void ffn_middle(Ops& ops, const ModelSpec& spec, const TensorView& wg, const TensorView& wu, const TensorView& wd,
                int64_t n, const Scratch& s, const TensorView& out, bool accumulate, const DebugHook* hook, int32_t il,
                const FfnNorm& norm = {}) {
  const int64_t width = wg.ne[1];
  const TensorView xn = s.xn.rows(0, n);
  const TensorView gate = prefix(s.gate, width, n), up = prefix(s.up, width, n);
  const Activation act = spec.gelu ? Activation::kGeluTanh : Activation::kSilu;
  if (norm.w != nullptr)
    ops.norm_matmul_glu(s.x.rows(0, n), *norm.w, norm.eps, xn, wg, wu, act, gate, up);
  else
    ops.matmul_glu(wg, wu, xn, act, gate, up);
  record(hook, gate, "blk.%d.ffn_act", il);
  if (accumulate) {
    if (norm.next != nullptr) ops.expect_norm(out, *norm.next, norm.eps);
    ops.matmul_acc(wd, gate, prefix(s.up, spec.n_embd, n), out);  // up is free after the glu
  } else {
    ops.matmul(wd, gate, out);
  }
}

// The end of an FFN block whose output is in proj: the post-norm (gemma3), then x += proj.
void ffn_end(Ops& ops, const ModelSpec& spec, const LayerWeights& L, int32_t il, int64_t n, const Scratch& s,
             const DebugHook* hook) {
  const TensorView x = s.x.rows(0, n), proj = s.proj.rows(0, n);
  record(hook, proj, "blk.%d.ffn_out", il);
  if (spec.post_norms) {
    ops.rms_norm(proj, L.post_ffw_norm, spec.rms_eps, proj);
    record(hook, proj, "blk.%d.ffn_post_norm", il);
  }
  ops.add(x, proj, x);
  record(hook, x, "blk.%d.l_out", il);
}

}  // namespace

void forward_ffn(Ops& ops, const ModelSpec& spec, const ModelWeights& w, int32_t il, int32_t n_tokens,
                 const Scratch& s, const DebugHook* hook) {
  if (spec.n_expert > 0) {
    forward_moe(ops, spec, w, il, n_tokens, s, hook);
    return;
  }
  const LayerWeights& L = w.layers[il];
  const int64_t n = n_tokens;
  FERRY_ASSERT(n <= s.n_max);
  // Without a post-norm (or intermediates to record) the residual add is the down matmul's accumulate, and
  // the norm goes with the gate / up (norm_matmul_glu); the next layer's norm is announced to the down.
  if (!spec.post_norms && !recording(hook)) {
    FfnNorm norm;
    norm.w = &L.ffn_norm;
    norm.eps = spec.rms_eps;
    if (il + 1 < static_cast<int32_t>(w.layers.size()) && present(w.layers[il + 1].attn_norm))
      norm.next = &w.layers[il + 1].attn_norm;
    ffn_middle(ops, spec, L.ffn_gate, L.ffn_up, L.ffn_down, n, s, s.x.rows(0, n), true, hook, il, norm);
    return;
  }
  forward_ffn_norm(ops, spec, w, il, n_tokens, s, hook);
  ffn_middle(ops, spec, L.ffn_gate, L.ffn_up, L.ffn_down, n, s, s.proj.rows(0, n), false, hook, il);
  ffn_end(ops, spec, L, il, n, s, hook);
}

void forward_moe_router(Ops& ops, const ModelSpec& spec, const ModelWeights& w, int32_t il, int32_t n_tokens,
                        const Scratch& s, const DebugHook* hook) {
  const LayerWeights& L = w.layers[il];
  const int64_t n = n_tokens;
  FERRY_ASSERT(n <= s.n_max && spec.n_expert > 0);
  const TensorView x = s.x.rows(0, n), xn = s.xn.rows(0, n);
  ops.rms_norm(x, L.ffn_norm, spec.rms_eps, xn);
  record(hook, xn, "blk.%d.ffn_norm", il);
  const TensorView logits = s.moe_logits.rows(0, n);
  ops.matmul(L.ffn_gate_inp, xn, logits);
  record(hook, logits, "blk.%d.ffn_moe_logits", il);
  if (present(L.ffn_gate_inp_bias)) {  // gpt-oss
    ops.add(logits, L.ffn_gate_inp_bias, logits);
    record(hook, logits, "blk.%d.ffn_moe_logits_biased", il);
  }
  kernels::MoeRoute route;
  route.n_used = spec.n_expert_used;
  route.gating = spec.expert_softmax_selected ? kernels::MoeGating::kSoftmaxSelected : kernels::MoeGating::kSoftmax;
  route.normalize = spec.expert_weights_norm;
  const TensorView weights = s.moe_weights.rows(0, n);
  ops.moe_route(logits, route, s.moe_ids.rows(0, n), weights);
  record(hook, weights, "blk.%d.ffn_moe_weights", il);
}

kernels::ExpertGroup expert_group_views(const ModelSpec& spec, const LayerWeights& L, int32_t begin, int32_t end) {
  FERRY_ASSERT(begin >= 0 && begin < end && end <= spec.n_expert);
  auto part = [&](const TensorView& stacked) {
    TensorView v = stacked;
    v.data = static_cast<char*>(stacked.data) + static_cast<size_t>(begin) * stacked.nb[2];
    v.ne[2] = end - begin;
    return v;
  };
  kernels::ExpertGroup g;
  g.gate = part(L.ffn_gate_exps);
  g.up = part(L.ffn_up_exps);
  g.down = part(L.ffn_down_exps);
  g.begin = begin;
  g.act = spec.swiglu_oai ? Activation::kSwigluOai : Activation::kSilu;
  // Per-expert biases [N, n_expert] (gpt-oss): the group's columns.
  auto columns = [&](const TensorView& bias) {
    if (!present(bias)) return TensorView{};
    TensorView v = bias;
    v.data = static_cast<char*>(bias.data) + static_cast<size_t>(begin) * bias.nb[1];
    v.ne[1] = end - begin;
    return v;
  };
  g.gate_bias = columns(L.ffn_gate_exps_bias);
  g.up_bias = columns(L.ffn_up_exps_bias);
  g.down_bias = columns(L.ffn_down_exps_bias);
  return g;
}

void forward_moe_group(Ops& ops, const ModelSpec& spec, const kernels::ExpertGroup& group, int32_t n_tokens,
                       const Scratch& s, const TensorView& out, bool accumulate) {
  const int64_t n = n_tokens;
  FERRY_ASSERT(n <= s.n_max);
  kernels::MoeScratch ms;
  ms.gate = s.gate;
  ms.up = s.up;
  ms.y = s.moe_out;
  ops.moe_experts(group, s.xn.rows(0, n), s.moe_ids.rows(0, n), s.moe_weights.rows(0, n), ms, accumulate, out);
  (void)spec;
}

void forward_moe_end(Ops& ops, const ModelSpec& spec, int32_t il, int32_t n_tokens, const Scratch& s,
                     const TensorView& part, bool proj_started, const DebugHook* hook) {
  (void)spec;
  const int64_t n = n_tokens;
  const TensorView x = s.x.rows(0, n), proj = s.proj.rows(0, n);
  FERRY_ASSERT(proj_started || part.data != nullptr);
  if (part.data != nullptr && !proj_started) {
    ops.add(x, part, x);
  } else {
    if (part.data != nullptr) ops.add(proj, part, proj);
    record(hook, proj, "blk.%d.ffn_moe_out", il);
    ops.add(x, proj, x);
  }
  record(hook, x, "blk.%d.l_out", il);
}

void forward_moe(Ops& ops, const ModelSpec& spec, const ModelWeights& w, int32_t il, int32_t n_tokens,
                 const Scratch& s, const DebugHook* hook) {
  const LayerWeights& L = w.layers[il];
  const int64_t n = n_tokens, d = spec.n_embd, k = spec.n_expert_used, ffe = spec.n_ff_expert;
  forward_moe_router(ops, spec, w, il, n_tokens, s, hook);
  const TensorView xn = s.xn.rows(0, n), ids = s.moe_ids.rows(0, n), weights = s.moe_weights.rows(0, n);

  // Each token's routed experts: gate / up [ffe, k, n] from the token's xn, down [d, k, n] from its slots.
  const TensorView gate = TensorView::make(DType::F32, s.gate.data, ffe, k, n, 1, s.gate.where);
  const TensorView up = TensorView::make(DType::F32, s.up.data, ffe, k, n, 1, s.up.where);
  {
    const TensorView* ws[2] = {&L.ffn_gate_exps, &L.ffn_up_exps};
    TensorView outs[2] = {gate, up};
    ops.matmul_id(2, ws, TensorView::make(DType::F32, xn.data, d, 1, n, 1, xn.where), ids, 0, outs);
  }
  record(hook, gate, "blk.%d.ffn_moe_gate", il);
  record(hook, up, "blk.%d.ffn_moe_up", il);
  if (present(L.ffn_up_exps_bias)) ops.add_expert_bias(L.ffn_up_exps_bias, ids, 0, up);  // gpt-oss
  if (present(L.ffn_gate_exps_bias)) ops.add_expert_bias(L.ffn_gate_exps_bias, ids, 0, gate);
  const TensorView gate2 = TensorView::make(DType::F32, s.gate.data, ffe, k * n, 1, 1, s.gate.where);
  const TensorView up2 = TensorView::make(DType::F32, s.up.data, ffe, k * n, 1, 1, s.up.where);
  ops.glu(gate2, up2, spec.swiglu_oai ? Activation::kSwigluOai : Activation::kSilu, gate2);
  record(hook, gate, spec.swiglu_oai ? "blk.%d.ffn_moe_swiglu_oai" : "blk.%d.ffn_moe_swiglu", il);
  TensorView y = TensorView::make(DType::F32, s.moe_out.data, d, k, n, 1, s.moe_out.where);
  const TensorView* down = &L.ffn_down_exps;
  ops.matmul_id(1, &down, gate, ids, 0, &y);
  if (present(L.ffn_down_exps_bias)) ops.add_expert_bias(L.ffn_down_exps_bias, ids, 0, y);
  record(hook, y, "blk.%d.ffn_moe_down", il);
  ops.moe_combine(y, weights, s.proj.rows(0, n));
  forward_moe_end(ops, spec, il, n_tokens, s, TensorView{}, true, hook);
}

FfnSlice ffn_slice_views(const LayerWeights& L, int64_t f0, int64_t f1) {
  FfnSlice v;
  v.gate = L.ffn_gate.rows(f0, f1 - f0);
  v.up = L.ffn_up.rows(f0, f1 - f0);
  v.down = L.ffn_down;
  FERRY_ASSERT(f0 % traits(v.down.dtype).block_elems == 0 && f1 % traits(v.down.dtype).block_elems == 0 &&
               f1 <= v.down.ne[0]);
  v.down.ne[0] = f1 - f0;
  v.down.data = static_cast<char*>(L.ffn_down.data) + row_bytes(v.down.dtype, f0);
  return v;
}

void forward_ffn_norm(Ops& ops, const ModelSpec& spec, const ModelWeights& w, int32_t il, int32_t n_tokens,
                      const Scratch& s, const DebugHook* hook) {
  const TensorView x = s.x.rows(0, n_tokens), xn = s.xn.rows(0, n_tokens);
  ops.rms_norm(x, w.layers[il].ffn_norm, spec.rms_eps, xn);
  record(hook, xn, "blk.%d.ffn_norm", il);
}

void forward_ffn_part(Ops& ops, const ModelSpec& spec, const FfnSlice& slice, int32_t n_tokens, const Scratch& s,
                      const TensorView& out, bool accumulate) {
  ffn_middle(ops, spec, slice.gate, slice.up, slice.down, n_tokens, s, out, accumulate, nullptr, -1);
}

void forward_ffn_slice(Ops& ops, const ModelSpec& spec, const ModelWeights& w, int32_t il, const FfnSlice& slice,
                       int32_t n_tokens, const Scratch& s, const DebugHook* hook) {
  const int64_t n = n_tokens;
  FERRY_ASSERT(n <= s.n_max);
  if (slice.first) forward_ffn_norm(ops, spec, w, il, n_tokens, s, hook);
  if (!spec.post_norms) {
    forward_ffn_part(ops, spec, slice, n_tokens, s, s.x.rows(0, n), true);
    if (slice.last) record(hook, s.x.rows(0, n), "blk.%d.l_out", il);
    return;
  }
  forward_ffn_part(ops, spec, slice, n_tokens, s, s.proj.rows(0, n), !slice.first);
  if (slice.last) ffn_end(ops, spec, w.layers[il], il, n, s, hook);
}

void forward_ffn_combine(Ops& ops, const ModelSpec& spec, const ModelWeights& w, int32_t il, int32_t n_tokens,
                         const Scratch& s, const TensorView& part, bool proj_started, const DebugHook* hook) {
  const int64_t n = n_tokens;
  const TensorView x = s.x.rows(0, n), proj = s.proj.rows(0, n);
  if (!spec.post_norms) {
    ops.add(x, part, x);
    record(hook, x, "blk.%d.l_out", il);
    return;
  }
  if (proj_started)
    ops.add(proj, part, proj);
  else
    ops.scale(part, 1.f, proj);  // a copy
  ffn_end(ops, spec, w.layers[il], il, n, s, hook);
}

void forward_head(Ops& ops, const ModelSpec& spec, const ModelWeights& w, const int32_t* rows, int32_t n_rows,
                  const Scratch& s, const DebugHook* hook) {
  FERRY_ASSERT(n_rows <= s.n_out_max);
  if (n_rows == 0) return;
  const TensorView hx = s.head_x.rows(0, n_rows), logits = s.logits.rows(0, n_rows);
  ops.gather_rows(s.x, rows, hx);
  ops.rms_norm(hx, w.output_norm, spec.rms_eps, hx);
  record(hook, hx, "result_norm");
  ops.matmul(w.output, hx, logits);
  record(hook, logits, "result_output");
}

void apply_logit_softcap(const ModelSpec& spec, float* logits, int64_t n) {
  const float cap = spec.final_logit_softcap;
  if (!(cap > 0.f)) return;
  for (int64_t i = 0; i < n; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
}

DebugHook Recorder::hook() {
  return [this](const std::string& name, const TensorView& t) {
    if (t.where != Where::kHost || t.dtype != DType::F32) return;
    std::vector<float>& dst = tensors[name];
    dst.clear();
    dst.reserve(static_cast<size_t>(t.nelements()));
    for (int64_t i3 = 0; i3 < t.ne[3]; ++i3)
      for (int64_t i2 = 0; i2 < t.ne[2]; ++i2)
        for (int64_t i1 = 0; i1 < t.ne[1]; ++i1) {
          const float* r = static_cast<const float*>(t.row(i1, i2, i3));
          dst.insert(dst.end(), r, r + t.ne[0]);
        }
    shapes[name] = {t.ne[0], t.ne[1], t.ne[2], t.ne[3]};
  };
}

}  // namespace ferry::model
