// CpuOps::matmul_id, moe_combine and moe_experts: the routed experts of a mixture-of-experts layer.
// matmul_id groups the (slot, token) pairs by expert, gathers their inputs in that order, multiplies each
// routed expert's matrix with its group of columns (reading only the routed experts' rows), and scatters
// the columns back to [N, n_used, T]:
//   - every group shorter than the panel path's minimum (decode, small batches): the activations are
//     converted once per pair and the rows of every (routed expert, weight) are split over the pool as one
//     job, each expert's rows read once per direct_cols columns of its group;
//   - otherwise (prefill): one CpuOps matmul per routed expert and weight over its group of columns.
// A column's value is the matmul's for that column, whatever the grouping. With token groups on
// (Ops::set_token_groups) a pair's kernels follow its token's group, so the results are batch-invariant.
#include <algorithm>
#include <cstring>

#include "base/status.h"
#include "kernels/cpu/cpu_ops_impl.h"

namespace ferry::kernels::cpu {

namespace {

// Copies below this many floats run on the calling thread.
constexpr int64_t kParallelCopy = 1 << 16;

constexpr int kMaxIdWeights = 4;

}  // namespace

void CpuOps::matmul_id(int n, const TensorView* const* ws, const TensorView& x, const TensorView& ids,
                       int32_t expert_begin, TensorView* outs) {
  FERRY_ASSERT(n >= 1 && n <= kMaxIdWeights);
  for (int i = 1; i < n; ++i) {
    if (ws[i]->dtype != ws[0]->dtype) {  // one weight type per job: one call per weight
      for (int w = 0; w < n; ++w) matmul_id(1, &ws[w], x, ids, expert_begin, &outs[w]);
      return;
    }
  }
  const int64_t K = x.ne[0], k = ids.ne[0], T = ids.ne[1], E = ws[0]->ne[2];
  FERRY_ASSERT(ids.dtype == DType::I32 && ids.where == Where::kHost && ids.is_contiguous());
  FERRY_ASSERT(x.dtype == DType::F32 && x.where == Where::kHost && x.ne[2] == T && (x.ne[1] == 1 || x.ne[1] == k));
  for (int i = 0; i < n; ++i) {
    const TensorView& w = *ws[i];
    FERRY_ASSERT(w.ne[0] == K && w.ne[2] == E && w.ne[3] == 1 && w.where == Where::kHost);
    FERRY_ASSERT(outs[i].dtype == DType::F32 && outs[i].ne[0] == w.ne[1] && outs[i].ne[1] == k && outs[i].ne[2] == T);
  }
  const int32_t* id = ids.ptr<const int32_t>();
  const int64_t all_pairs = k * T;
  // The stack's index of pair p's expert; outside [0, E): another group's expert, skipped.
  auto local = [&](int64_t p) { return static_cast<int64_t>(id[p]) - expert_begin; };

  // 1. The pairs p = t * k + j of the stack's experts grouped by expert (a counting sort keeps each group
  // in token order); P of them.
  moe_first_.assign(static_cast<size_t>(E + 1), 0);
  for (int64_t p = 0; p < all_pairs; ++p) {
    const int64_t e = local(p);
    if (e >= 0 && e < E) ++moe_first_[static_cast<size_t>(e) + 1];
  }
  int64_t max_group = 0;
  for (int64_t e = 0; e < E; ++e) {
    max_group = std::max(max_group, moe_first_[static_cast<size_t>(e) + 1]);
    moe_first_[static_cast<size_t>(e) + 1] += moe_first_[static_cast<size_t>(e)];
  }
  const int64_t P = moe_first_[static_cast<size_t>(E)];
  if (P == 0) return;
  moe_order_.resize(static_cast<size_t>(P));
  {
    std::vector<int64_t>& next = moe_next_;
    next.assign(moe_first_.begin(), moe_first_.end() - 1);
    for (int64_t p = 0; p < all_pairs; ++p) {
      const int64_t e = local(p);
      if (e >= 0 && e < E) moe_order_[static_cast<size_t>(next[static_cast<size_t>(e)]++)] = p;
    }
  }
  const int64_t* first = moe_first_.data();
  const int64_t* order = moe_order_.data();
  auto input_of = [&](int64_t p) {
    return static_cast<const float*>(x.row(x.ne[1] == 1 ? 0 : p % k, p / k));
  };

  // 2. Outputs in group order: weight i's [N_i, P] at yg[i].
  size_t y_floats = 0;
  for (int i = 0; i < n; ++i) y_floats += static_cast<size_t>(ws[i]->ne[1]) * static_cast<size_t>(P);
  float* yg[kMaxIdWeights];
  {
    float* base = reinterpret_cast<float*>(moe_y_.get(y_floats * sizeof(float)));
    for (int i = 0; i < n; ++i) {
      yg[i] = base;
      base += static_cast<size_t>(ws[i]->ne[1]) * static_cast<size_t>(P);
    }
  }

  FERRY_ASSERT(static_cast<uint32_t>(ws[0]->dtype) < kDTypeIdLimit);
  const MatKernel& mk = tab_->mat[static_cast<uint32_t>(ws[0]->dtype)];
  FERRY_ASSERT_MSG(mk.direct != nullptr, "CpuOps::matmul_id: weight type not supported");
  FERRY_ASSERT_MSG(K % traits(ws[0]->dtype).block_elems == 0, "CpuOps::matmul_id: K not a multiple of the block size");

  // With token groups on (set_token_groups), a pair's kernels follow its token's group, never the other
  // tokens of the step: tokens [0, n_dec) the decode kernels, the others the prefill kernels. A group
  // lists its pairs in token order, so its decode pairs come first.
  const bool grouped = group_decode_ >= 0;
  const int64_t n_dec = !grouped ? 0 : T == group_tokens_ ? std::min<int64_t>(group_decode_, T) : T;
  const bool use_panel = mk.pack != nullptr && (grouped ? n_dec < T : max_group >= mk.panel_min_tokens);

  if (use_panel) {
    // 3a. Prefill: inputs gathered [K, P] in group order, then a matmul per routed expert and weight.
    float* xg = reinterpret_cast<float*>(moe_x_.get(static_cast<size_t>(K * P) * sizeof(float)));
    auto gather = [&](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g)
        std::memcpy(xg + static_cast<size_t>(g * K), input_of(order[g]), static_cast<size_t>(K) * sizeof(float));
    };
    if (P * K < kParallelCopy) gather(0, P);
    else pool_.parallel_for(P, gather);
    for (int64_t e = 0; e < E; ++e) {
      const int64_t g0 = first[e], c = first[e + 1] - g0;
      if (c == 0) continue;
      int64_t c_dec = 0;  // the group's leading pairs of decode tokens
      while (c_dec < c && order[g0 + c_dec] / k < n_dec) ++c_dec;
      for (int i = 0; i < n; ++i) {
        const int64_t N = ws[i]->ne[1];
        const TensorView we = expert_view(*ws[i], e);
        auto part = [&](int64_t a, int64_t m, MatPath path) {
          if (m == 0) return;
          matmul_path(we, TensorView::make(DType::F32, xg + static_cast<size_t>((g0 + a) * K), K, m),
                      TensorView::make(DType::F32, yg[i] + static_cast<size_t>((g0 + a) * N), N, m), nullptr, path);
        };
        if (!grouped) {
          part(0, c, MatPath::kByTokens);
        } else {
          part(0, c_dec, MatPath::kDirect);
          part(c_dec, c - c_dec, MatPath::kPanel);
        }
      }
    }
  } else {
    // 3b. Decode: activations converted once per pair in group order, then one job over the rows of every
    // (routed expert, weight).
    const size_t act_stride = mk.act_bytes(K);
    uint8_t* act = act_.get(act_stride * static_cast<size_t>(P));
    auto quantize = [&](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) mk.quantize(input_of(order[g]), K, act + static_cast<size_t>(g) * act_stride);
    };
    if (x.ne[1] == 1 && P * K < kParallelCopy) {
      // One input row per token (gate / up): each token's row converted once, copied to its other pairs.
      std::vector<int64_t>& done = moe_next_;  // the counting sort is over: its cursors are free
      done.assign(static_cast<size_t>(T), -1);
      for (int64_t g = 0; g < P; ++g) {
        uint8_t* dst = act + static_cast<size_t>(g) * act_stride;
        int64_t& src = done[static_cast<size_t>(order[g] / k)];
        if (src < 0) {
          mk.quantize(input_of(order[g]), K, dst);
          src = g;
        } else {
          std::memcpy(dst, act + static_cast<size_t>(src) * act_stride, act_stride);
        }
      }
    } else if (P * K < kParallelCopy) {
      quantize(0, P);
    } else {
      pool_.parallel_for(P, quantize);
    }

    using Segment = IdSegment;
    std::vector<Segment>& segs = moe_segments_;
    segs.clear();
    int64_t rows = 0;
    size_t max_stride = 0;
    for (int64_t e = 0; e < E; ++e) {
      if (first[e + 1] == first[e]) continue;
      for (int i = 0; i < n; ++i) {
        segs.push_back({e, rows, i});
        rows += ws[i]->ne[1];
        max_stride = std::max(max_stride, ws[i]->nb[1]);
      }
    }
    const int dc = mk.direct_cols;
    auto rows_body = [&](int64_t r0, int64_t r1) {
      // The segment holding r0: the last one starting at or before it.
      size_t s = static_cast<size_t>(std::upper_bound(segs.begin(), segs.end(), r0,
                                                      [](int64_t r, const Segment& sg) { return r < sg.first_row; }) -
                                     segs.begin()) - 1;
      for (; r0 < r1; ++s) {
        const Segment& sg = segs[s];
        const TensorView& w = *ws[sg.w];
        const int64_t N = w.ne[1];
        const int64_t a0 = r0 - sg.first_row, a1 = std::min(r1, sg.first_row + N) - sg.first_row;
        const int64_t g0 = first[sg.e], c = first[sg.e + 1] - g0;
        const auto* wrows = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(sg.e) * w.nb[2];
        const uint8_t* w0 = wrows + static_cast<size_t>(a0) * w.nb[1];
        const size_t ramp = std::min<size_t>(4096, static_cast<size_t>(a1 - a0) * w.nb[1]);
        for (size_t off = 0; off < ramp; off += 64) __builtin_prefetch(w0 + off, 0, 3);
        const int64_t sub_rows = c <= dc ? a1 - a0 : static_cast<int64_t>(kDirectL2Bytes / (w.nb[1] + 1)) + 1;
        MatArgs a;
        a.K = K;
        a.w_stride = w.nb[1];
        a.act_stride = act_stride;
        a.out_stride = static_cast<size_t>(N);
        for (int64_t s0 = a0; s0 < a1; s0 += sub_rows) {
          const int64_t s1 = std::min(a1, s0 + sub_rows);
          a.w = wrows + static_cast<size_t>(s0) * w.nb[1];
          a.n_rows = s1 - s0;
          for (int64_t c0 = 0; c0 < c; c0 += dc) {
            a.act = act + static_cast<size_t>(g0 + c0) * act_stride;
            a.n_cols = static_cast<int>(std::min<int64_t>(dc, c - c0));
            a.out = yg[sg.w] + static_cast<size_t>((g0 + c0) * N + s0);
            mk.direct(a);
          }
        }
        r0 = sg.first_row + a1;
      }
    };
    if (rows * K * std::min<int64_t>(max_group, dc) < (1 << 17) || pool_.size() == 1) {
      rows_body(0, rows);
    } else {
      const int64_t grain = static_cast<int64_t>(16384 / (max_stride + 1)) + 4;
      guided_for(pool_, rows, grain, rows_body);
    }
  }

  // 4. Columns back to [N_i, n_used, T].
  auto scatter = [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t p = order[g];
      for (int i = 0; i < n; ++i) {
        const int64_t N = ws[i]->ne[1];
        std::memcpy(outs[i].row(p % k, p / k), yg[i] + static_cast<size_t>(g * N), static_cast<size_t>(N) * sizeof(float));
      }
    }
  };
  if (static_cast<int64_t>(y_floats) < kParallelCopy) scatter(0, P);
  else pool_.parallel_for(P, scatter);
}

// out[:, t] = w[0, t] * y[:, 0, t] + w[1, t] * y[:, 1, t] + ..., each product rounded before its add
// (this file is compiled without FMA contraction), split over tokens.
void CpuOps::moe_combine(const TensorView& y, const TensorView& weights, TensorView out) {
  const int64_t d = y.ne[0], k = y.ne[1], T = y.ne[2];
  FERRY_ASSERT(y.dtype == DType::F32 && weights.dtype == DType::F32 && out.dtype == DType::F32);
  FERRY_ASSERT(weights.ne[0] == k && weights.ne[1] == T && weights.is_contiguous() && weights.where == Where::kHost);
  FERRY_ASSERT(out.ne[0] == d && out.ne[1] == T && out.where == Where::kHost && y.where == Where::kHost);
  const float* w = weights.ptr<const float>();
  auto body = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* o = static_cast<float*>(out.row(t));
      const float* wt = w + t * k;
      const float* y0 = static_cast<const float*>(y.row(0, t));
      for (int64_t i = 0; i < d; ++i) o[i] = wt[0] * y0[i];
      for (int64_t j = 1; j < k; ++j) {
        const float* yj = static_cast<const float*>(y.row(j, t));
        for (int64_t i = 0; i < d; ++i) o[i] = o[i] + wt[j] * yj[i];
      }
    }
  };
  if (d * k * T < kParallelCopy) body(0, T);
  else pool_.parallel_for(T, body);
}

// Ops::moe_experts as the default composes it (matmul_id of gate / up, glu, matmul_id of down), with the
// weighted sum of the group's slots in one pass over tokens: out[:, t] (+)= w[j, t] * y[:, j, t] for the
// slots j whose expert the group holds, in slot order, each product rounded before its add. With one group
// of every expert that is moe_combine bit for bit.
void CpuOps::moe_experts(const ExpertGroup& g, const TensorView& x, const TensorView& ids, const TensorView& weights,
                         const MoeScratch& s, bool accumulate, TensorView out) {
  const int64_t d = x.ne[0], k = ids.ne[0], T = ids.ne[1], ffe = g.gate.ne[1];
  FERRY_ASSERT(x.dtype == DType::F32 && x.is_contiguous() && x.ne[1] == T && x.where == Where::kHost);
  FERRY_ASSERT(g.up.ne[1] == ffe && g.down.ne[0] == ffe && g.down.ne[1] == d && g.up.ne[2] == g.size() &&
               g.down.ne[2] == g.size());
  FERRY_ASSERT(weights.dtype == DType::F32 && weights.ne[0] == k && weights.ne[1] == T && weights.is_contiguous() &&
               weights.where == Where::kHost);
  FERRY_ASSERT(out.dtype == DType::F32 && out.ne[0] == d && out.ne[1] == T && out.where == Where::kHost);
  const TensorView gate = TensorView::make(DType::F32, s.gate.data, ffe, k, T, 1, Where::kHost);
  const TensorView up = TensorView::make(DType::F32, s.up.data, ffe, k, T, 1, Where::kHost);
  TensorView y = TensorView::make(DType::F32, s.y.data, d, k, T, 1, Where::kHost);
  {
    const TensorView* ws[2] = {&g.gate, &g.up};
    TensorView outs[2] = {gate, up};
    matmul_id(2, ws, TensorView::make(DType::F32, x.data, d, 1, T, 1, Where::kHost), ids, g.begin, outs);
  }
  // Per-expert biases (gpt-oss) in the order of Ops' default (and of forward_moe): up, gate, then down's.
  if (g.up_bias.data != nullptr) add_expert_bias(g.up_bias, ids, g.begin, up);
  if (g.gate_bias.data != nullptr) add_expert_bias(g.gate_bias, ids, g.begin, gate);
  const TensorView gate2 = TensorView::make(DType::F32, s.gate.data, ffe, k * T, 1, 1, Where::kHost);
  const TensorView up2 = TensorView::make(DType::F32, s.up.data, ffe, k * T, 1, 1, Where::kHost);
  glu(gate2, up2, g.act, gate2);
  const TensorView* down = &g.down;
  matmul_id(1, &down, gate, ids, g.begin, &y);
  if (g.down_bias.data != nullptr) add_expert_bias(g.down_bias, ids, g.begin, y);

  const int32_t* id = ids.ptr<const int32_t>();
  const float* w = weights.ptr<const float>();
  auto body = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* o = static_cast<float*>(out.row(t));
      bool started = accumulate;
      for (int64_t j = 0; j < k; ++j) {
        if (!g.holds(id[t * k + j])) continue;
        const float wj = w[t * k + j];
        const float* yj = static_cast<const float*>(y.row(j, t));
        if (started) {
          for (int64_t i = 0; i < d; ++i) o[i] = o[i] + yj[i] * wj;
        } else {
          for (int64_t i = 0; i < d; ++i) o[i] = yj[i] * wj;
          started = true;
        }
      }
      if (!started) std::fill(o, o + d, 0.f);
    }
  };
  if (d * k * T < kParallelCopy) body(0, T);
  else pool_.parallel_for(T, body);
}

}  // namespace ferry::kernels::cpu
