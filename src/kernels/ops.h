// Ops: the op vocabulary the model code is written against, once. RefOps (scalar golden), CpuOps
// (SIMD + thread pool) and CudaOps implement it; the forward of a sub-layer never knows which one
// runs it. Ops never allocate long-lived memory: every output is a view the caller owns.
//
// Conventions (ggml order, ne[0] innermost):
//   activations  x   [d, n_tokens]            F32, contiguous rows
//   weight       W   [in = K, out = N]        any weight dtype
//   q                [head_dim, n_head, n_tokens]     F32
//   KV cache layer   K, V [head_dim * n_kv_head, n_cells]  F16
//   stacked experts  W [K, N, n_expert]      any weight dtype (expert e: the [K, N] matrix at e * nb[2])
//   routing          ids [n_used, n_tokens] I32, weights [n_used, n_tokens] F32
// All views passed to one Ops instance live where that instance computes (host or device).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "base/status.h"
#include "kernels/moe_route.h"
#include "kernels/rope_yarn.h"
#include "tensor/tensor_view.h"

namespace ferry::kernels {

struct RopeParams {
  int32_t n_rot = 0;          // dimensions rotated (== head_dim for the supported models)
  float freq_base = 10000.f;  // theta
  float freq_scale = 1.f;     // linear position scaling (1 / factor)
  bool neox = false;          // NeoX style: pairs (i, i + n_rot/2); normal style: pairs (2i, 2i+1)
  // Optional per-frequency divisors (llama3 rope scaling, tensor rope_freqs.weight), [n_rot/2] F32,
  // or data == nullptr.
  TensorView freq_factors;
  // rope_multi only (ggml's rope_multi): pair i takes its angle from position stream s, where sections[0]
  // pairs come from stream 0, the next sections[1] from stream 1, ..., repeating every sum(sections)
  // pairs. Qwen2-VL's M-RoPE is {16, 24, 24, 0} (time, height, width) over NeoX pairs (i, i + n_rot/2);
  // plain rope ignores these fields.
  int32_t sections[4] = {0, 0, 0, 0};
  // The vision tower's 2-D RoPE (GGML_ROPE_TYPE_VISION): a head of 2 * n_rot, pairs (i, i + n_rot) for
  // i < n_rot, and each section's angle recurrence restarts at its first pair.
  bool vision = false;
  // YaRN (kernels/rope_yarn.h; plain rope only): ext_factor 0 turns it off; attn_factor scales cos and
  // sin (1 = none); the ramp between the correction dims of beta_fast / beta_slow over n_ctx_orig
  // positions blends interpolated and unscaled angles.
  float ext_factor = 0.f;
  float attn_factor = 1.f;
  float beta_fast = 32.f;
  float beta_slow = 1.f;
  int32_t n_ctx_orig = 0;
};

// Per-step metadata of a batch, as I32 vectors of length n_tokens, living where the Ops computes.
struct BatchMeta {
  int32_t n_tokens = 0;
  TensorView pos;   // [n_tokens] I32 position of each new token in its sequence
  TensorView seq;   // [n_tokens] I32 sequence id of each new token
  TensorView cell;  // [n_tokens] I32 KV-cache cell that receives each token's K/V
  // M-RoPE positions (qwen2vl), [4 * n_tokens] I32 section-major (stream s of token t at s * n_tokens + t),
  // or data == nullptr: every stream of a token is at `pos` (text), which is plain rope exactly.
  TensorView mrope_pos;
};

// One layer's KV cache plus the cache's cell metadata (shared by all layers).
struct KvView {
  TensorView k;          // [head_dim * n_kv_head, n_cells] F16
  TensorView v;          // [head_dim * n_kv_head, n_cells] F16
  TensorView cell_pos;   // [n_cells] I32, position held by each cell (-1 = empty)
  TensorView cell_seq;   // [n_cells] I32, sequence id held by each cell (-1 = empty)
  int32_t n_cells = 0;   // cells to scan: every used cell has index < n_cells
};

struct AttnParams {
  int32_t n_head = 0;
  int32_t n_kv_head = 0;
  int32_t head_dim = 0;
  float scale = 1.f;        // applied to q.k
  int32_t window = 0;       // sliding window: token at p sees cells with p - p_cell < window; 0 = none
  float softcap = 0.f;      // logit soft-capping (0 = none)
  // Attention sinks (gpt-oss): one learned logit per query head [n_head] F32 that joins each head's
  // softmax denominator (max and sum) without a value row, as ggml_soft_max_add_sinks; data == nullptr:
  // none. Lives where the Ops computes.
  TensorView sinks;
};

// kSwigluOai: gpt-oss's clamped SwiGLU (ggml_swiglu_oai with alpha 1.702, limit 7): with
// g' = min(g, 7) and u' = clamp(u, -7, 7), act = g' / (1 + exp(-1.702 g')) * (u' + 1).
enum class Activation : uint8_t { kSilu, kGeluTanh, kSwigluOai };
inline constexpr float kSwigluOaiAlpha = 1.702f;
inline constexpr float kSwigluOaiLimit = 7.0f;

// One group of a mixture-of-experts layer's experts: experts [begin, begin + n) of the layer's stacked
// weights, as views [K, N, n] (a slice of the [K, N, n_expert] tensors, or a copy of it in device memory).
struct ExpertGroup {
  TensorView gate;  // [d, ffe, n]
  TensorView up;    // [d, ffe, n]
  TensorView down;  // [ffe, d, n]
  int32_t begin = 0;  // the global id of the group's first expert
  Activation act = Activation::kSilu;
  // Per-expert biases (gpt-oss), added to each routed expert's gate / up / down output; data == nullptr:
  // none. F32 [ffe, n], [ffe, n], [d, n]: the group's columns of the layer's [., n_expert] tensors.
  TensorView gate_bias;
  TensorView up_bias;
  TensorView down_bias;
  int32_t size() const { return static_cast<int32_t>(gate.ne[2]); }
  bool holds(int32_t e) const { return e >= begin && e - begin < size(); }
};

// Scratch of Ops::moe_experts, where the Ops computes: gate / up [ffe, n_used, T], y [d, n_used, T] F32.
struct MoeScratch {
  TensorView gate;
  TensorView up;
  TensorView y;
};

class Ops {
 public:
  virtual ~Ops() = default;
  virtual const char* name() const = 0;

  // out[:, t] = dequant(table[:, tokens[t]]) * scale. table [d, vocab] any dtype; tokens [n] I32.
  virtual void embed(const TensorView& table, const TensorView& tokens, float scale, TensorView out) = 0;
  // Row-wise RMS norm: out[:, r] = x[:, r] / sqrt(mean(x[:, r]^2) + eps) * w. w [ne0] F32.
  // Rows may be heads (x viewed as [head_dim, n_head * n_tokens]) for q/k norms. In place allowed.
  virtual void rms_norm(const TensorView& x, const TensorView& w, float eps, TensorView out) = 0;
  // out[n, t] = sum_k W[k, n] * x[k, t]. W [K, N] any weight dtype; x [K, T] F32; out [N, T] F32.
  virtual void matmul(const TensorView& w, const TensorView& x, TensorView out) = 0;
  // outs[i] = ws[i] x for n weights that multiply the same x (the q/k/v projections, gate/up): same
  // contract as matmul per weight. A backend may fuse them (CudaOps, decode: x quantized once, one launch
  // per weight type); the default is one matmul each.
  virtual void matmul_many(int n, const TensorView* const* ws, const TensorView& x, TensorView* outs) {
    for (int i = 0; i < n; ++i) matmul(*ws[i], x, outs[i]);
  }
  // gate = act(Wg x) * (Wu x): an FFN's gate / up projections and its activation. up [ff, T] F32 is
  // scratch the default uses (matmul_many into gate and up, then glu in place); a backend may apply the
  // activation in the matmul's epilogue instead (CudaOps, one decode token: the same values) and leave
  // up untouched.
  virtual void matmul_glu(const TensorView& wg, const TensorView& wu, const TensorView& x, Activation act,
                          TensorView gate, TensorView up) {
    const TensorView* ws[2] = {&wg, &wu};
    TensorView outs[2] = {gate, up};
    matmul_many(2, ws, x, outs);
    glu(gate, up, act, gate);
  }
  // rms_norm(x, nw, eps) -> xn, then matmul_many of xn: a sub-layer's norm and its first projections. xn
  // is scratch: a backend may leave it unwritten (CudaOps, after a matmul_acc that expect_norm prepared:
  // the projections read the norm's Q8 image made by that matmul_acc, no norm kernel runs).
  virtual void norm_matmul_many(const TensorView& x, const TensorView& nw, float eps, TensorView xn, int n,
                                const TensorView* const* ws, TensorView* outs) {
    rms_norm(x, nw, eps, xn);
    matmul_many(n, ws, xn, outs);
  }
  // rms_norm(x, nw, eps) -> xn, then matmul_glu of xn; xn as in norm_matmul_many.
  virtual void norm_matmul_glu(const TensorView& x, const TensorView& nw, float eps, TensorView xn,
                               const TensorView& wg, const TensorView& wu, Activation act, TensorView gate,
                               TensorView up) {
    rms_norm(x, nw, eps, xn);
    matmul_glu(wg, wu, xn, act, gate, up);
  }
  // A hint for the next op: it is a matmul_acc into x, and x's next use is norm_matmul_many / _glu with
  // weight nw and eps. A backend may compute what that norm needs in the matmul_acc's epilogue (CudaOps,
  // one token: each 32-group's sum of squares and the Q8 image of x * nw). Results never depend on it.
  virtual void expect_norm(const TensorView& x, const TensorView& nw, float eps) {
    (void)x;
    (void)nw;
    (void)eps;
  }
  // acc += W x (an output projection followed by the residual add). tmp [N, T] F32 is scratch the
  // default uses (matmul into tmp, then add); a backend may add in the matmul's epilogue instead (the same
  // single rounding of acc + (W x)) and leave tmp untouched.
  virtual void matmul_acc(const TensorView& w, const TensorView& x, TensorView tmp, TensorView acc) {
    matmul(w, x, tmp);
    add(acc, tmp, acc);
  }
  // out = a + b, b broadcast along rows when b.ne[1] == 1 (bias). In place (out == a) allowed.
  virtual void add(const TensorView& a, const TensorView& b, TensorView out) = 0;
  // out = x * s. In place allowed.
  virtual void scale(const TensorView& x, float s, TensorView out) = 0;
  // Rotary embedding in place on x [head_dim, n_head, n_tokens] at positions batch.pos.
  virtual void rope(TensorView x, const BatchMeta& batch, const RopeParams& p) = 0;
  // rope on q and on k (same positions and parameters); a backend may do both in one pass.
  virtual void rope_qk(TensorView q, TensorView k, const BatchMeta& batch, const RopeParams& p) {
    rope(q, batch, p);
    rope(k, batch, p);
  }
  // rope_qk, then kv_store of the rotated k and of v; k3 is k viewed per head [head_dim, n_kv_head, n].
  // A backend may do it in one pass (the rotated k is still written back to k).
  virtual void rope_qk_store(TensorView q3, TensorView k3, const TensorView& k, const TensorView& v,
                             const BatchMeta& batch, const RopeParams& p, KvView kv) {
    rope_qk(q3, k3, batch, p);
    kv_store(k, v, batch, kv);
  }
  // Per-head RMS norms of q3 and k3 (weights qn, kn [head_dim], in place), then rope_qk_store (qwen3 /
  // gemma3 decode). A backend may do all of it in one pass.
  virtual void qk_norm_rope_store(TensorView q3, TensorView k3, const TensorView& qn, const TensorView& kn, float eps,
                                  const TensorView& k, const TensorView& v, const BatchMeta& batch,
                                  const RopeParams& p, KvView kv) {
    rms_norm(q3, qn, eps, q3);
    rms_norm(k3, kn, eps, k3);
    rope_qk_store(q3, k3, k, v, batch, p, kv);
  }
  // Writes k, v ([head_dim * n_kv_head, n_tokens] F32) into the cache cells batch.cell (as F16).
  virtual void kv_store(const TensorView& k, const TensorView& v, const BatchMeta& batch, KvView kv) = 0;
  // Causal attention of q [head_dim, n_head, n_tokens] over the cache (cells of the same sequence
  // with position <= the token's, within the window), GQA by n_head / n_kv_head.
  // out [head_dim * n_head, n_tokens] F32. RefOps and CpuOps sum over the cells in position order.
  virtual void attention(const TensorView& q, const KvView& kv, const BatchMeta& batch, const AttnParams& p,
                         TensorView out) = 0;
  // out = act(gate) * up, elementwise; all [ff, n_tokens] F32. In place (out == gate) allowed.
  virtual void glu(const TensorView& gate, const TensorView& up, Activation act, TensorView out) = 0;
  // Copy rows: out[:, i] = x[:, rows[i]]. rows is a host array (n = out.ne[1]).
  virtual void gather_rows(const TensorView& x, const int32_t* rows, TensorView out) = 0;

  // ---- mixture of experts (model/forward.h: forward_moe) ----------------------------------------------
  // Router: logits [n_expert, T] F32 -> per token the r.n_used experts it runs, ids [n_used, T] I32, highest
  // weight first, and their mixing weights [n_used, T] F32 (kernels/moe_route.h: route_token).
  virtual void moe_route(const TensorView& logits, const MoeRoute& r, TensorView ids, TensorView weights);
  // The expert matmul (ggml's mul_mat_id): outs[i][:, j, t] = expert ids[j, t] of ws[i] times x[:, j', t],
  // for n stacked expert weights ws[i] [K, N_i, E] of one input. x [K, 1 or n_used, T] F32: with
  // one row per token every slot multiplies it (gate / up, j' = 0), else slot j its own row (down, j' = j).
  // outs[i] [N_i, n_used, T] F32. The stack holds experts [expert_begin, expert_begin + E): a slot whose
  // expert is outside it is skipped (its output columns are left as they are), so one group of a layer's
  // experts computes its share of the slots. Only the routed experts' weights are read. The default is
  // one matmul per (slot, token) over views of the expert's matrix.
  virtual void matmul_id(int n, const TensorView* const* ws, const TensorView& x, const TensorView& ids,
                         int32_t expert_begin, TensorView* outs);
  // y[:, j, t] += bias[:, ids[j, t] - expert_begin] for each slot whose expert the bias holds (columns
  // [expert_begin, expert_begin + bias.ne[1])); other slots are left as they are (ggml's add_id). bias
  // [N, E] F32; y [N, n_used, T] F32. The default adds column by column.
  virtual void add_expert_bias(const TensorView& bias, const TensorView& ids, int32_t expert_begin, TensorView y);
  // out[:, t] = sum over j = 0, 1, ... of weights[j, t] * y[:, j, t]: each product rounded to F32, then
  // added left to right (ggml's mul, then its adds in slot order). y [d, n_used, T] may be overwritten.
  virtual void moe_combine(const TensorView& y, const TensorView& weights, TensorView out);
  // One expert group's share of a mixture-of-experts block, weighted and summed: for each token t, over its
  // slots j in order whose expert e = ids[j, t] the group holds,
  //   out[:, t] (+)= weights[j, t] * (down_e(act(gate_e x_t + bg_e) * (up_e x_t + bu_e)) + bd_e),
  // each product rounded before its add (as moe_combine). x [d, T] F32; ids / weights as moe_route writes
  // them; accumulate = false: out = that sum (zeros for a token none of whose slots the group holds).
  // The biases b*_e are the group's (zero where absent).
  // With one group of every expert this is forward_moe's matmul_id, glu, matmul_id, moe_combine. The
  // default composes those ops on the scratch (slots the group does not hold carry scratch values through
  // glu and are never read).
  virtual void moe_experts(const ExpertGroup& g, const TensorView& x, const TensorView& ids, const TensorView& weights,
                           const MoeScratch& s, bool accumulate, TensorView out);
  // Bytes between this Ops' memory and the host, complete when the call returns (the MoE defaults read
  // the routing through them). The defaults are memcpy: host Ops need nothing else.
  virtual void copy_to_host(const TensorView& src, void* dst, size_t bytes) {
    FERRY_ASSERT(src.where == Where::kHost);
    std::memcpy(dst, src.data, bytes);
  }
  virtual void copy_from_host(const void* src, TensorView dst, size_t bytes) {
    FERRY_ASSERT(dst.where == Where::kHost);
    std::memcpy(dst.data, src, bytes);
  }
  // ---- vision-language models (Qwen2.5-VL); the defaults refuse: RefOps, CpuOps and CudaOps implement
  // them.
  // RoPE in place on x [head_dim, n_head, n_tokens] with per-token positions per stream: pos is
  // [4 * n_tokens] I32 section-major; p.sections / p.vision say which stream each pair uses.
  virtual void rope_multi(TensorView x, const TensorView& pos, const RopeParams& p) {
    (void)x;
    (void)pos;
    (void)p;
    FERRY_ASSERT_MSG(false, "rope_multi is not implemented by this Ops");
  }
  // Attention without a cache, bidirectional within segments (a vision encoder's windows): q, k, v
  // [head_dim, n_head, n_tokens] F32 (k / v may have fewer heads: GQA); token t attends to every token of
  // its segment, the segments being [bounds[s], bounds[s + 1]) for s < n_seg. bounds [n_seg + 1] I32
  // lives where the Ops computes, like every other view (bounds[0] = 0, bounds[n_seg] = n_tokens,
  // ascending). out [head_dim * n_head, n_tokens] F32. F32 throughout (llama.cpp's clip graph with flash
  // attention off); no buffer grows with n_tokens^2.
  virtual void attention_segments(const TensorView& q, const TensorView& k, const TensorView& v,
                                  const TensorView& bounds, float scale, TensorView out) {
    (void)q;
    (void)k;
    (void)v;
    (void)bounds;
    (void)scale;
    (void)out;
    FERRY_ASSERT_MSG(false, "attention_segments is not implemented by this Ops");
  }
  // Batch-invariant numerics, for continuous batching across requests: until the next call, a matmul
  // of n_tokens columns and attention over n_tokens tokens compute the first n_decode columns (tokens
  // that continue a sequence from a sampled token) with the decode kernels and the others (prompt
  // tokens) with the prefill kernels, whatever n_tokens is; a matmul of any other column count uses
  // the decode kernels. A token's result then depends on its group only, not on which other tokens
  // share the step (RefOps and CpuOps visit a token's cells in position order, so where the cells lie
  // in the cache does not matter either).
  // n_decode < 0 turns it off (kernels chosen by the batch size). Backends whose results never depend
  // on the batch keep the default.
  virtual void set_token_groups(int32_t n_tokens, int32_t n_decode) {}
};

// Column (j, t) of a [ne0, ne1, ne2] F32 view, as a [ne0, 1] view.
inline TensorView column_view(const TensorView& v, int64_t j, int64_t t) {
  TensorView c = v;
  c.data = v.row(j, t);
  c.ne[1] = c.ne[2] = c.ne[3] = 1;
  c.nb[2] = c.nb[3] = c.nb[1];
  return c;
}

// Expert e of a stacked [K, N, n_expert] weight, as its [K, N] matrix.
inline TensorView expert_view(const TensorView& w, int64_t e) {
  TensorView m = w;
  m.data = static_cast<char*>(w.data) + static_cast<size_t>(e) * w.nb[2];
  m.ne[2] = m.ne[3] = 1;
  m.nb[3] = m.nb[2];
  return m;
}

inline void Ops::moe_route(const TensorView& logits, const MoeRoute& r, TensorView ids, TensorView weights) {
  const int64_t E = logits.ne[0], T = logits.ne[1], k = r.n_used;
  FERRY_ASSERT(logits.dtype == DType::F32 && ids.dtype == DType::I32 && weights.dtype == DType::F32);
  FERRY_ASSERT(k > 0 && k <= E && ids.ne[0] == k && ids.ne[1] == T && weights.ne[0] == k && weights.ne[1] == T);
  FERRY_ASSERT(logits.is_contiguous() && ids.is_contiguous() && weights.is_contiguous());
  std::vector<float> l(static_cast<size_t>(E * T)), scratch(static_cast<size_t>(E)), w(static_cast<size_t>(k * T));
  std::vector<int32_t> id(static_cast<size_t>(k * T));
  copy_to_host(logits, l.data(), l.size() * sizeof(float));
  for (int64_t t = 0; t < T; ++t)
    route_token(l.data() + t * E, static_cast<int32_t>(E), r, scratch.data(), id.data() + t * k, w.data() + t * k);
  copy_from_host(id.data(), ids, id.size() * sizeof(int32_t));
  copy_from_host(w.data(), weights, w.size() * sizeof(float));
}

inline void Ops::matmul_id(int n, const TensorView* const* ws, const TensorView& x, const TensorView& ids,
                           int32_t expert_begin, TensorView* outs) {
  const int64_t k = ids.ne[0], T = ids.ne[1];
  FERRY_ASSERT(ids.dtype == DType::I32 && ids.is_contiguous() && x.dtype == DType::F32);
  FERRY_ASSERT(x.ne[2] == T && (x.ne[1] == 1 || x.ne[1] == k));
  std::vector<int32_t> id(static_cast<size_t>(k * T), 0);
  copy_to_host(ids, id.data(), id.size() * sizeof(int32_t));
  for (int i = 0; i < n; ++i) {
    const TensorView& w = *ws[i];
    FERRY_ASSERT(w.ne[0] == x.ne[0] && outs[i].ne[0] == w.ne[1] && outs[i].ne[1] == k && outs[i].ne[2] == T);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < k; ++j) {
        const int32_t e = id[static_cast<size_t>(t * k + j)] - expert_begin;
        if (e < 0 || e >= w.ne[2]) continue;  // another group's expert
        matmul(expert_view(w, e), column_view(x, x.ne[1] == 1 ? 0 : j, t), column_view(outs[i], j, t));
      }
  }
}

inline void Ops::add_expert_bias(const TensorView& bias, const TensorView& ids, int32_t expert_begin, TensorView y) {
  const int64_t k = ids.ne[0], T = ids.ne[1];
  FERRY_ASSERT(ids.dtype == DType::I32 && ids.is_contiguous() && bias.dtype == DType::F32 && y.dtype == DType::F32);
  FERRY_ASSERT(bias.ne[0] == y.ne[0] && y.ne[1] == k && y.ne[2] == T);
  std::vector<int32_t> id(static_cast<size_t>(k * T), 0);
  copy_to_host(ids, id.data(), id.size() * sizeof(int32_t));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = id[static_cast<size_t>(t * k + j)] - expert_begin;
      if (e < 0 || e >= bias.ne[1]) continue;  // another group's expert
      const TensorView yj = column_view(y, j, t);
      add(yj, column_view(bias, e, 0), yj);
    }
}

inline void Ops::moe_combine(const TensorView& y, const TensorView& weights, TensorView out) {
  const int64_t k = y.ne[1], T = y.ne[2];
  FERRY_ASSERT(y.dtype == DType::F32 && weights.dtype == DType::F32 && out.dtype == DType::F32);
  FERRY_ASSERT(weights.ne[0] == k && weights.ne[1] == T && out.ne[0] == y.ne[0] && out.ne[1] == T);
  FERRY_ASSERT(weights.is_contiguous());
  std::vector<float> w(static_cast<size_t>(k * T), 0.f);
  copy_to_host(weights, w.data(), w.size() * sizeof(float));
  for (int64_t t = 0; t < T; ++t) {
    const TensorView o = column_view(out, t, 0);
    scale(column_view(y, 0, t), w[static_cast<size_t>(t * k)], o);
    for (int64_t j = 1; j < k; ++j) {
      const TensorView yj = column_view(y, j, t);
      scale(yj, w[static_cast<size_t>(t * k + j)], yj);
      add(o, yj, o);
    }
  }
}

inline void Ops::moe_experts(const ExpertGroup& g, const TensorView& x, const TensorView& ids,
                             const TensorView& weights, const MoeScratch& s, bool accumulate, TensorView out) {
  const int64_t d = x.ne[0], k = ids.ne[0], T = ids.ne[1], ffe = g.gate.ne[1];
  FERRY_ASSERT(x.dtype == DType::F32 && x.is_contiguous() && x.ne[1] == T);
  FERRY_ASSERT(g.up.ne[1] == ffe && g.down.ne[0] == ffe && g.down.ne[1] == d && g.up.ne[2] == g.size() &&
               g.down.ne[2] == g.size());
  FERRY_ASSERT(weights.ne[0] == k && weights.ne[1] == T && weights.is_contiguous());
  FERRY_ASSERT(out.dtype == DType::F32 && out.ne[0] == d && out.ne[1] == T);
  const TensorView gate = TensorView::make(DType::F32, s.gate.data, ffe, k, T, 1, s.gate.where);
  const TensorView up = TensorView::make(DType::F32, s.up.data, ffe, k, T, 1, s.up.where);
  TensorView y = TensorView::make(DType::F32, s.y.data, d, k, T, 1, s.y.where);
  {
    const TensorView* ws[2] = {&g.gate, &g.up};
    TensorView outs[2] = {gate, up};
    matmul_id(2, ws, TensorView::make(DType::F32, x.data, d, 1, T, 1, x.where), ids, g.begin, outs);
  }
  if (g.up_bias.data != nullptr) add_expert_bias(g.up_bias, ids, g.begin, up);
  if (g.gate_bias.data != nullptr) add_expert_bias(g.gate_bias, ids, g.begin, gate);
  const TensorView gate2 = TensorView::make(DType::F32, s.gate.data, ffe, k * T, 1, 1, s.gate.where);
  const TensorView up2 = TensorView::make(DType::F32, s.up.data, ffe, k * T, 1, 1, s.up.where);
  glu(gate2, up2, g.act, gate2);
  const TensorView* down = &g.down;
  matmul_id(1, &down, gate, ids, g.begin, &y);
  if (g.down_bias.data != nullptr) add_expert_bias(g.down_bias, ids, g.begin, y);

  std::vector<int32_t> id(static_cast<size_t>(k * T), 0);
  std::vector<float> w(static_cast<size_t>(k * T), 0.f);
  copy_to_host(ids, id.data(), id.size() * sizeof(int32_t));
  copy_to_host(weights, w.data(), w.size() * sizeof(float));
  std::vector<float> zeros;
  for (int64_t t = 0; t < T; ++t) {
    const TensorView o = column_view(out, t, 0);
    bool started = accumulate;
    for (int64_t j = 0; j < k; ++j) {
      const size_t p = static_cast<size_t>(t * k + j);
      if (!g.holds(id[p])) continue;
      const TensorView yj = column_view(y, j, t);
      if (!started) {
        scale(yj, w[p], o);
        started = true;
      } else {
        scale(yj, w[p], yj);
        add(o, yj, o);
      }
    }
    if (!started) {
      zeros.assign(static_cast<size_t>(d), 0.f);
      copy_from_host(zeros.data(), o, zeros.size() * sizeof(float));
    }
  }
}

}  // namespace ferry::kernels
