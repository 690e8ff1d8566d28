// CudaOps' mixture-of-experts ops (ops.h): shape checks, then the launchers of moe.cu / moe_matvec.cu, all
// enqueued on the stream without reading anything back. matmul_id and moe_experts sort the routed pairs by
// expert on the device (moe_plan), quantize the activations once (or take the Q8 stash of the rms_norm /
// glu that wrote them), and run moe_matvec over the plan; moe_experts adds glu (its Q8 image written by the
// same kernel) and the weighted combine. Token counts beyond what the scratch holds go in chunks. Whatever
// the kernels do not take (see cuda_ops.h) falls back to Ops' defaults.
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/launch.h"

namespace ferry::kernels {

namespace cu = ferry::kernels::cuda;

namespace {

uint64_t align256(uint64_t x) { return (x + 255) / 256 * 256; }

// Bump allocation in the scratch body for one op (as cuda_ops.cc's Scratch).
class Bump {
 public:
  Bump(void* base, uint64_t bytes) : base_(static_cast<char*>(base)), bytes_(bytes) {}
  template <typename T>
  T* take(uint64_t n) {
    const uint64_t off = used_;
    used_ = align256(used_ + n);
    FERRY_ASSERT_MSG(used_ <= bytes_, "CudaOps scratch too small for the MoE plan");
    return reinterpret_cast<T*>(base_ + off);
  }

 private:
  char* base_;
  uint64_t bytes_;
  uint64_t used_ = 0;
};

constexpr int32_t kItemPairs = 32;  // pairs of one expert per work item (8 passes of 4)

cu::MoePlanShape plan_shape(int64_t k, int64_t nt, int32_t E) {
  cu::MoePlanShape s;
  s.n_pairs = k * nt;
  s.n_expert = E;
  s.item_pairs = kItemPairs;
  return s;
}

uint64_t moe_bytes(int64_t k, int64_t nt, int32_t E, int64_t q8_elems) {
  const uint64_t q8 = static_cast<uint64_t>(q8_elems * nt);
  return align256(4 * static_cast<uint64_t>(plan_shape(k, nt, E).ints())) + align256(q8) + align256(q8 / 32 * 8);
}

bool f32_rows(const TensorView& t) { return t.dtype == DType::F32 && t.nb[0] == 4; }

// Stack m of a set: weight w [K, N, E], output column (j, t) of `out` at j * nb1 + t * nb2.
void add_to_set(cu::MoeMatvecSet* set, const TensorView& w, float* out, int64_t out_s1, int64_t out_s2) {
  const int m = set->n++;
  set->w[m] = w.data;
  set->w_nb1[m] = static_cast<int64_t>(w.nb[1]);
  set->w_nb2[m] = static_cast<int64_t>(w.nb[2]);
  set->rows[m] = w.ne[1];
  set->out[m] = out;
  set->out_s1[m] = out_s1;
  set->out_s2[m] = out_s2;
}

}  // namespace

bool CudaOps::moe_stack_ok(const TensorView& w, int64_t K) const {
  return w.ne[0] == K && w.ne[1] > 0 && w.ne[2] > 0 && w.ne[2] <= cu::kMoePlanMaxExperts && w.ne[3] == 1 &&
         cu::moe_matvec_supported(w.dtype, w.layout, w.data, static_cast<int64_t>(w.nb[1]),
                                  static_cast<int64_t>(w.nb[2]), K);
}

int64_t CudaOps::moe_token_chunk(int64_t T, int64_t k, int32_t E, int64_t q8_elems) const {
  const uint64_t body = body_bytes();
  int64_t nt = std::min<int64_t>(T, 65535);
  auto fits = [&](int64_t n) {
    return moe_bytes(k, n, E, q8_elems) <= body && plan_shape(k, n, E).max_items() <= 65535;
  };
  while (nt > 1 && !fits(nt)) nt = (nt + 1) / 2;
  return fits(nt) ? nt : 0;
}

bool CudaOps::moe_stash_rows(const void* data, int64_t K, int64_t rows, int8_t** xq, void** xds) const {
  if (!stash_hit(TensorView::make(DType::F32, const_cast<void*>(data), K, rows, 1, 1, Where::kDevice))) return false;
  *xq = stash_xq() + stash_.off;
  *xds = stash_xds() + stash_.off / 32 * sizeof(float2);
  return true;
}

void CudaOps::moe_route(const TensorView& logits, const MoeRoute& r, TensorView ids, TensorView weights) {
  if (!ctx_.ok()) return;
  const int64_t E = logits.ne[0], T = logits.ne[1], k = r.n_used;
  FERRY_ASSERT(logits.dtype == DType::F32 && ids.dtype == DType::I32 && weights.dtype == DType::F32);
  FERRY_ASSERT(k > 0 && k <= E && ids.ne[0] == k && ids.ne[1] == T && weights.ne[0] == k && weights.ne[1] == T);
  FERRY_ASSERT(ids.is_contiguous() && weights.is_contiguous());
  const bool known = r.gating == MoeGating::kSoftmax || r.gating == MoeGating::kSoftmaxSelected;
  if (!options_.moe_kernels || !known || E > cu::kMoeRouteMaxExperts || k > cu::kMoeRouteMaxUsed ||
      logits.nb[0] != 4 || logits.ne[2] != 1 || logits.ne[3] != 1) {
    forget_stash();
    Ops::moe_route(logits, r, ids, weights);
    return;
  }
  note_write(ids);  // the norm's stash (the experts' input) stays
  note_write(weights);
  check(cu::moe_route(logits.ptr<const float>(), static_cast<int64_t>(logits.nb[1] / 4), static_cast<int>(E),
                      static_cast<int>(T), static_cast<int>(k), r.gating == MoeGating::kSoftmax ? 0 : 1, r.normalize,
                      ids.ptr<int32_t>(), weights.ptr<float>(), ctx_.stream()),
        "moe_route");
}

void CudaOps::matmul_id(int n, const TensorView* const* ws, const TensorView& x, const TensorView& ids,
                        int32_t expert_begin, TensorView* outs) {
  if (!ctx_.ok()) return;
  const int64_t k = ids.ne[0], T = ids.ne[1], K = x.ne[0];
  FERRY_ASSERT(ids.dtype == DType::I32 && ids.is_contiguous() && x.dtype == DType::F32);
  FERRY_ASSERT(x.ne[2] == T && (x.ne[1] == 1 || x.ne[1] == k));
  const bool shared = x.ne[1] == 1;
  // Activation rows: token t (shared) or slot (j, t) = row t * k + j, evenly spaced.
  const int64_t x_stride = static_cast<int64_t>((shared ? x.nb[2] : x.nb[1]) / 4);
  bool fast = options_.moe_kernels && n >= 1 && n <= cu::kMatvecMaxMats && f32_rows(x) && x.ne[3] == 1 &&
              (shared || x.nb[2] == static_cast<size_t>(k) * x.nb[1]) && x.nb[1] % 4 == 0 && x.nb[2] % 4 == 0;
  for (int i = 0; fast && i < n; ++i) {
    const TensorView& w = *ws[i];
    FERRY_ASSERT(w.ne[0] == K && outs[i].ne[0] == w.ne[1] && outs[i].ne[1] == k && outs[i].ne[2] == T);
    fast = moe_stack_ok(w, K) && w.dtype == ws[0]->dtype && w.layout == ws[0]->layout && w.ne[2] == ws[0]->ne[2] &&
           f32_rows(outs[i]) && outs[i].nb[1] % 4 == 0 && outs[i].nb[2] % 4 == 0;
  }
  const bool quant = fast && traits(ws[0]->dtype).quantized;
  fast = fast && (quant || (x_stride % 4 == 0 && reinterpret_cast<uintptr_t>(x.data) % 16 == 0));
  const int32_t E = fast ? static_cast<int32_t>(ws[0]->ne[2]) : 0;
  const int64_t per_token = shared ? 1 : k;  // activation rows per token
  const int64_t chunk = fast ? moe_token_chunk(T, k, E, quant ? per_token * K : 0) : 0;
  if (chunk == 0) {
    forget_stash();
    Ops::matmul_id(n, ws, x, ids, expert_begin, outs);
    return;
  }
  int8_t* stash_q = nullptr;
  void* stash_ds = nullptr;
  const bool stashed = quant && chunk == T && x_stride == K && moe_stash_rows(x.data, K, per_token * T, &stash_q, &stash_ds);
  for (int i = 0; i < n; ++i) note_write(outs[i]);
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t nt = std::min(chunk, T - t0);
    Bump sc(ctx_.scratch(), body_bytes());
    const cu::MoePlanShape shape = plan_shape(k, nt, E);
    auto* plan = sc.take<int32_t>(4 * static_cast<uint64_t>(shape.ints()));
    check(cu::moe_plan(ids.ptr<const int32_t>() + t0 * k, expert_begin, shape, plan, ctx_.stream()), "matmul_id: moe_plan");
    cu::MoeMatvecSet set;
    for (int i = 0; i < n; ++i) {
      add_to_set(&set, *ws[i], outs[i].ptr<float>() + t0 * static_cast<int64_t>(outs[i].nb[2] / 4),
                 static_cast<int64_t>(outs[i].nb[1] / 4), static_cast<int64_t>(outs[i].nb[2] / 4));
    }
    cu::MoeMatvecArgs a;
    a.plan = plan;
    a.shape = shape;
    a.k = static_cast<int>(k);
    a.shared_x = shared;
    a.max_per_expert = nt;
    a.mma = options_.moe_mma;
    const float* x0 = x.ptr<const float>() + t0 * per_token * x_stride;
    if (!quant) {
      check(cu::moe_matvec_float(ws[0]->dtype, set, K, x0, x_stride, a, ctx_.stream()), "matmul_id: moe_matvec_float");
      continue;
    }
    const int64_t rows = per_token * nt;
    int8_t* xq = stash_q;
    auto* xds = static_cast<float2*>(stash_ds);
    if (!stashed) {
      xq = sc.take<int8_t>(static_cast<uint64_t>(rows * K));
      xds = sc.take<float2>(static_cast<uint64_t>(rows * (K / 32)) * sizeof(float2));
      check(cu::quantize_q8(x0, x_stride, K, static_cast<int>(rows), xq, xds, ctx_.stream()), "matmul_id: quantize_q8");
    }
    check(cu::moe_matvec_quant(ws[0]->dtype, ws[0]->layout, set, K, xq, xds, a, ctx_.stream()), "matmul_id: moe_matvec_quant");
  }
}

void CudaOps::moe_combine(const TensorView& y, const TensorView& weights, TensorView out) {
  if (!ctx_.ok()) return;
  const int64_t k = y.ne[1], T = y.ne[2], d = y.ne[0];
  FERRY_ASSERT(y.dtype == DType::F32 && weights.dtype == DType::F32 && out.dtype == DType::F32);
  FERRY_ASSERT(weights.ne[0] == k && weights.ne[1] == T && out.ne[0] == d && out.ne[1] == T);
  FERRY_ASSERT(weights.is_contiguous());
  if (!options_.moe_kernels || !f32_rows(y) || !f32_rows(out) || y.nb[1] % 4 != 0 || y.nb[2] % 4 != 0 ||
      out.nb[1] % 4 != 0) {
    forget_stash();
    Ops::moe_combine(y, weights, out);
    return;
  }
  note_write(out);
  check(cu::moe_combine(y.ptr<const float>(), static_cast<int64_t>(y.nb[1] / 4), static_cast<int64_t>(y.nb[2] / 4),
                        nullptr, weights.ptr<const float>(), static_cast<int>(k), d, static_cast<int>(T), 0, 0, false,
                        out.ptr<float>(), static_cast<int64_t>(out.nb[1] / 4), ctx_.stream()),
        "moe_combine");
}

void CudaOps::add_expert_bias(const TensorView& bias, const TensorView& ids, int32_t expert_begin, TensorView y) {
  if (!ctx_.ok()) return;
  const int64_t k = ids.ne[0], T = ids.ne[1];
  FERRY_ASSERT(ids.dtype == DType::I32 && ids.is_contiguous() && bias.dtype == DType::F32 && y.dtype == DType::F32);
  FERRY_ASSERT(bias.ne[0] == y.ne[0] && y.ne[1] == k && y.ne[2] == T);
  // Slots as evenly spaced columns of y, the bias's columns evenly spaced too.
  if (!f32_rows(y) || !f32_rows(bias) || y.nb[1] % 4 != 0 || y.nb[2] != static_cast<size_t>(k) * y.nb[1] ||
      bias.nb[1] % 4 != 0 || y.ne[3] != 1) {
    forget_stash();
    Ops::add_expert_bias(bias, ids, expert_begin, y);
    return;
  }
  note_write(y);
  check(cu::moe_add_bias(y.ptr<float>(), static_cast<int64_t>(y.nb[1] / 4), y.ne[0], k * T, ids.ptr<const int32_t>(),
                         expert_begin, static_cast<int32_t>(bias.ne[1]), bias.ptr<const float>(),
                         static_cast<int64_t>(bias.nb[1] / 4), ctx_.stream()),
        "add_expert_bias");
}

// The kernels compute gate, up, down, their biases and the activation of a group and nothing else: a field
// added to ExpertGroup must be checked below (else Ops' default) before this compiles.
static_assert(sizeof(ExpertGroup) == 6 * sizeof(TensorView) + 8,
              "ExpertGroup changed: teach CudaOps::moe_experts its new fields or fall back to Ops::moe_experts");

void CudaOps::moe_experts(const ExpertGroup& g, const TensorView& x, const TensorView& ids, const TensorView& weights,
                          const MoeScratch& s, bool accumulate, TensorView out) {
  if (!ctx_.ok()) return;
  const int64_t d = x.ne[0], k = ids.ne[0], T = ids.ne[1], ffe = g.gate.ne[1];
  const int32_t E = g.size();
  FERRY_ASSERT(x.dtype == DType::F32 && x.is_contiguous() && x.ne[1] == T);
  FERRY_ASSERT(g.up.ne[1] == ffe && g.down.ne[0] == ffe && g.down.ne[1] == d && g.up.ne[2] == g.size() &&
               g.down.ne[2] == g.size());
  FERRY_ASSERT(weights.ne[0] == k && weights.ne[1] == T && weights.is_contiguous());
  FERRY_ASSERT(out.dtype == DType::F32 && out.ne[0] == d && out.ne[1] == T);
  FERRY_ASSERT(ids.dtype == DType::I32 && ids.is_contiguous());
  const uint64_t h_bytes = static_cast<uint64_t>(ffe * k * T) * 4;
  const bool gu_quant = traits(g.gate.dtype).quantized, down_quant = traits(g.down.dtype).quantized;
  // Biases: F32 [n, E] with evenly spaced columns (the group's columns of the layer's tables).
  auto bias_ok = [&](const TensorView& b, int64_t n) {
    return b.data == nullptr ||
           (b.dtype == DType::F32 && b.ne[0] == n && b.ne[1] == E && f32_rows(b) && b.nb[1] % 4 == 0);
  };
  bool fast = options_.moe_kernels && bias_ok(g.gate_bias, ffe) && bias_ok(g.up_bias, ffe) && bias_ok(g.down_bias, d) &&
              moe_stack_ok(g.gate, d) && moe_stack_ok(g.up, d) && moe_stack_ok(g.down, ffe) &&
              g.up.dtype == g.gate.dtype && g.up.layout == g.gate.layout && f32_rows(out) && out.nb[1] % 4 == 0 &&
              s.gate.data != nullptr && s.up.data != nullptr && s.y.data != nullptr && s.gate.nbytes() >= h_bytes &&
              s.up.nbytes() >= h_bytes && s.y.nbytes() >= static_cast<uint64_t>(d * k * T) * 4;
  // The float kernels read their F32 activations with 16-byte loads.
  fast = fast && (gu_quant || (d % 4 == 0 && reinterpret_cast<uintptr_t>(x.data) % 16 == 0)) &&
         (down_quant || (ffe % 4 == 0 && reinterpret_cast<uintptr_t>(s.gate.data) % 16 == 0));
  // Q8 rows a token needs at once: its x (gate / up) and, later in the same bytes, its k slots' h (down).
  const int64_t q8_elems = std::max<int64_t>(gu_quant ? d : 0, down_quant ? k * ffe : 0);
  const int64_t chunk = fast ? moe_token_chunk(T, k, E, q8_elems) : 0;
  if (chunk == 0) {
    forget_stash();
    Ops::moe_experts(g, x, ids, weights, s, accumulate, out);
    return;
  }
  int8_t* stash_q = nullptr;
  void* stash_ds = nullptr;
  const bool stashed = gu_quant && chunk == T && moe_stash_rows(x.data, d, T, &stash_q, &stash_ds);
  note_write(out);
  note_write(s.gate);
  note_write(s.up);
  note_write(s.y);
  auto* h = s.gate.ptr<float>();  // [ffe, k, nt]: gate, then act(gate) * up in place
  auto* up = s.up.ptr<float>();
  auto* y = s.y.ptr<float>();     // [d, k, nt]
  const int act = cu_act(g.act);
  // Adds a bias's columns to the slots [k, nt] of y (n floats each) by expert id.
  auto add_bias = [&](const TensorView& b, float* yv, int64_t n, const int32_t* ids_c, int64_t nt) {
    if (b.data == nullptr) return;
    check(cu::moe_add_bias(yv, n, n, k * nt, ids_c, g.begin, E, b.ptr<const float>(), static_cast<int64_t>(b.nb[1] / 4),
                           ctx_.stream()),
          "moe_experts: bias");
  };
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t nt = std::min(chunk, T - t0);
    Bump sc(ctx_.scratch(), body_bytes());
    const cu::MoePlanShape shape = plan_shape(k, nt, E);
    auto* plan = sc.take<int32_t>(4 * static_cast<uint64_t>(shape.ints()));
    int8_t* q8 = nullptr;
    float2* q8ds = nullptr;
    if (q8_elems > 0) {
      q8 = sc.take<int8_t>(static_cast<uint64_t>(q8_elems * nt));
      q8ds = sc.take<float2>(static_cast<uint64_t>(q8_elems * nt / 32) * sizeof(float2));
    }
    const int32_t* ids_c = ids.ptr<const int32_t>() + t0 * k;
    check(cu::moe_plan(ids_c, g.begin, shape, plan, ctx_.stream()), "moe_experts: moe_plan");
    cu::MoeMatvecArgs a;
    a.plan = plan;
    a.shape = shape;
    a.k = static_cast<int>(k);
    a.max_per_expert = nt;
    a.mma = options_.moe_mma;

    // gate / up of every pair the group holds: h, up [ffe, k, nt].
    cu::MoeMatvecSet gu;
    add_to_set(&gu, g.gate, h, ffe, k * ffe);
    add_to_set(&gu, g.up, up, ffe, k * ffe);
    a.shared_x = true;
    const float* xt = x.ptr<const float>() + t0 * d;
    if (gu_quant) {
      int8_t* xq = stash_q;
      auto* xds = static_cast<float2*>(stash_ds);
      if (!stashed) {
        xq = q8;
        xds = q8ds;
        check(cu::quantize_q8(xt, d, d, static_cast<int>(nt), xq, xds, ctx_.stream()), "moe_experts: quantize_q8");
      }
      check(cu::moe_matvec_quant(g.gate.dtype, g.gate.layout, gu, d, xq, xds, a, ctx_.stream()), "moe_experts: gate/up");
    } else {
      check(cu::moe_matvec_float(g.gate.dtype, gu, d, xt, d, a, ctx_.stream()), "moe_experts: gate/up");
    }
    add_bias(g.gate_bias, h, ffe, ids_c, nt);
    add_bias(g.up_bias, up, ffe, ids_c, nt);

    // h = act(gate) * up over every slot (those of other groups carry scratch values, never read), with its Q8
    // image for a quantized down projection.
    cu::RowView hv;
    hv.data = reinterpret_cast<char*>(h);
    hv.ne0 = ffe;
    hv.ne1 = k * nt;
    hv.nb1 = ffe * 4;
    hv.nb2 = hv.nb3 = hv.nb1 * hv.ne1;
    cu::RowView uv = hv;
    uv.data = reinterpret_cast<char*>(up);
    check(cu::glu(hv, uv, act, hv, ctx_.stream(), down_quant ? q8 : nullptr, down_quant ? q8ds : nullptr),
          "moe_experts: glu");

    // down of every held pair: y [d, k, nt], then the weighted sum in slot order into out.
    cu::MoeMatvecSet dn;
    add_to_set(&dn, g.down, y, d, k * d);
    a.shared_x = false;
    if (down_quant) {
      check(cu::moe_matvec_quant(g.down.dtype, g.down.layout, dn, ffe, q8, q8ds, a, ctx_.stream()), "moe_experts: down");
    } else {
      check(cu::moe_matvec_float(g.down.dtype, dn, ffe, h, ffe, a, ctx_.stream()), "moe_experts: down");
    }
    add_bias(g.down_bias, y, d, ids_c, nt);
    check(cu::moe_combine(y, d, k * d, ids_c, weights.ptr<const float>() + t0 * k, static_cast<int>(k), d,
                          static_cast<int>(nt), g.begin, E, accumulate, out.ptr<float>() + t0 * (out.nb[1] / 4),
                          static_cast<int64_t>(out.nb[1] / 4), ctx_.stream()),
          "moe_experts: combine");
  }
}

}  // namespace ferry::kernels
