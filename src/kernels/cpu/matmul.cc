// CpuOps::matmul: convert the activations once (Q8_0/Q8_1/Q8_K/F16/BF16 form by weight type, split
// over tokens), then split the weight rows over the pool:
//   - few tokens (decode): each thread streams its share of rows once through the direct kernel,
//     up to direct_cols tokens per weight read;
//   - many tokens (prefill, when the level has a panel kernel): each thread unpacks kPanelRows rows
//     into a panel (decoded once) and multiplies it with all tokens, kPanelCols at a time; up to 4
//     panels per task share each pass over the tokens.
#include <algorithm>
#include <cstring>

#include "base/status.h"
#include "kernels/cpu/cpu_ops_impl.h"

namespace ferry::kernels::cpu {

namespace {

// Panel path: up to this many panels per thread task, while their packed bytes fit this L2 budget.
constexpr int kMaxPanelGroup = 4;
constexpr size_t kPanelGroupL2Bytes = size_t{1} << 20;
// Float panels: the largest K block of a pair of panels that stays in L1 beside the act's block.
constexpr size_t kPairL1Bytes = size_t{32} << 10;

// The column groups of the interleaved act (float panels): groups of S columns, except that a tail
// of 1 or 2 columns is merged with the group before it and the two split evenly (8 = 4 + 4 at S = 6):
// a kernel call on 1 or 2 columns has too few accumulator chains to cover the FMA latency, so it would
// take about as long as one on 4. A column is computed alone in either grouping (same result).
struct IlGroups {
  int64_t T = 0;
  int S = 0;
  int64_t n = 0;        // groups
  int64_t b_start = 0;  // first column of the last group when the tail is split, else T
  IlGroups(int64_t t, int s) : T(t), S(s) {
    if (S == 0) return;
    n = (T + S - 1) / S;
    const int64_t r = T % S;
    b_start = T > S && r > 0 && r <= 2 ? (T / S - 1) * S + (S + r + 1) / 2 : T;
  }
  int64_t start(int64_t g) const { return g == n - 1 && b_start < T ? b_start : g * S; }
  int width(int64_t g) const {
    const int64_t end = g == n - 1 ? T : (g == n - 2 && b_start < T ? b_start : (g + 1) * S);
    return static_cast<int>(end - start(g));
  }
  int64_t group_of(int64_t t) const { return t >= b_start ? n - 1 : t / S; }
};

}  // namespace

void CpuOps::matmul(const TensorView& w, const TensorView& x, TensorView out) { matmul_into(w, x, out, nullptr); }

// acc += W x: the matmul into tmp, and each task adds the rows it computed into acc while they are in
// L1 (no separate add op, no extra pass over tmp). The same single rounding as matmul then add.
void CpuOps::matmul_acc(const TensorView& w, const TensorView& x, TensorView tmp, TensorView acc) {
  FERRY_ASSERT(acc.dtype == DType::F32 && acc.ne[0] == w.ne[1] && acc.ne[1] == x.ne[1] && acc.ne[2] == 1);
  FERRY_ASSERT(acc.data != x.data && acc.data != tmp.data);
  matmul_into(w, x, tmp, &acc);
}

// With token groups on (set_token_groups), the decode columns take the direct kernels and the prompt
// columns the panel kernels whatever their count: each column's result is the same in any group of
// columns of its path (both kernels compute a column alone, in a fixed order), so a token's logits do
// not depend on the rest of its step.
void CpuOps::matmul_into(const TensorView& w, const TensorView& x, TensorView out, const TensorView* acc) {
  const int64_t T = x.ne[1];
  if (group_decode_ < 0) return matmul_path(w, x, out, acc, MatPath::kByTokens);
  if (T != group_tokens_) return matmul_path(w, x, out, acc, MatPath::kDirect);
  const int64_t d = std::min<int64_t>(group_decode_, T);
  auto part = [&](int64_t c0, int64_t n, MatPath path) {
    if (n == 0) return;
    TensorView acc_part = acc != nullptr ? acc->rows(c0, n) : TensorView{};
    matmul_path(w, x.rows(c0, n), out.rows(c0, n), acc != nullptr ? &acc_part : nullptr, path);
  };
  part(0, d, MatPath::kDirect);
  part(d, T - d, MatPath::kPanel);
}

void CpuOps::matmul_path(const TensorView& w, const TensorView& x, TensorView out, const TensorView* acc,
                         MatPath path) {
  const int64_t K = w.ne[0], N = w.ne[1], T = x.ne[1];
  FERRY_ASSERT(x.dtype == DType::F32 && out.dtype == DType::F32);
  FERRY_ASSERT(x.ne[0] == K && out.ne[0] == N && out.ne[1] == T && x.ne[2] == 1 && out.ne[2] == 1);
  FERRY_ASSERT(w.ne[2] == 1 && w.ne[3] == 1 && w.where == Where::kHost);
  FERRY_ASSERT(x.data != out.data);
  FERRY_ASSERT(static_cast<uint32_t>(w.dtype) < kDTypeIdLimit);
  const MatKernel& mk = tab_->mat[static_cast<uint32_t>(w.dtype)];
  FERRY_ASSERT_MSG(mk.direct != nullptr, "CpuOps::matmul: weight type not supported");
  FERRY_ASSERT_MSG(K % traits(w.dtype).block_elems == 0, "CpuOps::matmul: K not a multiple of the block size");
  if (T == 0 || N == 0) return;

  // 1. Activations -> act form, [T] columns of act_stride bytes.
  // Float panel kernels with panel_il also get the act interleaved by column group behind it:
  // [ceil(T / S)][K][S] f32 (S = panel_il_cols; groups as IlGroups), written while each column is
  // still in L1.
  const size_t act_stride = mk.act_bytes(K);
  const bool panel = mk.pack != nullptr && (path == MatPath::kPanel || (path == MatPath::kByTokens && T >= mk.panel_min_tokens));
  const int il_cols = panel && mk.panel_il != nullptr ? mk.panel_il_cols : 0;
  const size_t il_group = static_cast<size_t>(K) * static_cast<size_t>(il_cols);  // floats per column group
  const IlGroups groups(T, il_cols);
  const size_t act_total = (act_stride * static_cast<size_t>(T) + 63) / 64 * 64;
  const size_t il_bytes = static_cast<size_t>(groups.n) * il_group * sizeof(float);
  uint8_t* act = act_.get(act_total + il_bytes);
  float* il = reinterpret_cast<float*>(act + act_total);
  auto quantize = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      uint8_t* col = act + static_cast<size_t>(t) * act_stride;
      mk.quantize(static_cast<const float*>(x.row(t)), K, col);
      if (panel && mk.panel_act_u8)
        for (int64_t k = 0; k < K; ++k) col[k] ^= 0x80;  // int8 q -> uint8 q + 128
      if (il_cols > 0) {
        const float* src = reinterpret_cast<const float*>(col);
        const int64_t g = groups.group_of(t);
        float* dst = il + static_cast<size_t>(g) * il_group + static_cast<size_t>(t - groups.start(g));
        for (int64_t k = 0; k < K; ++k) dst[static_cast<size_t>(k) * static_cast<size_t>(il_cols)] = src[k];
      }
    }
  };
  if (T * K < (1 << 16)) {
    quantize(0, T);
  } else {
    pool_.parallel_for(T, quantize);
  }

  float* out0 = static_cast<float*>(out.data);
  const size_t out_stride = out.nb[1] / sizeof(float);
  // Rows [r0, r1) of columns [c0, c1): acc += out.
  float* acc0 = acc != nullptr ? static_cast<float*>(acc->data) : nullptr;
  const size_t acc_stride = acc != nullptr ? acc->nb[1] / sizeof(float) : 0;
  auto accumulate = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      float* a = acc0 + static_cast<size_t>(c) * acc_stride + r0;
      tab_->add(a, out0 + static_cast<size_t>(c) * out_stride + r0, a, r1 - r0);
    }
  };
  const auto* w0 = static_cast<const uint8_t*>(w.data);
  const size_t w_stride = w.nb[1];

  // 2a. Panel path. Threads take groups of up to kMaxPanelGroup consecutive panels: all of a group's
  // panels are packed first, then each column group of act is applied to every panel of the group, so
  // the act (T columns, several MB at T = 512) is streamed from the LLC once per group instead of once
  // per panel, as long as the group's panels fit the L2 budget. (Streaming the act once per panel
  // would make the LLC, shared by all cores, the limit of a many-core prefill.) Float panels walk K in
  // blocks; where a pair of panels' block fits L1 (kPairL1Bytes), each pair passes over all column
  // groups within a block: the act block (all columns, T x kb floats) is read from the LLC by the first
  // pair and from L2 by the others, while the pair's block stays in L1 (with every column group passing
  // over all the group's panels, their blocks would not fit L1 together).
  if (panel) {
    const size_t panel_bytes = mk.panel_bytes(K), tmp_bytes = mk.pack_tmp_bytes(K);
    const int64_t n_panels = (N + kPanelRows - 1) / kPanelRows;
    // Float panels with K blocks read only one block of each panel per pass, so the L2 budget does
    // not bound the group (and panel_il works on pairs).
    const bool blocked = mk.panel_k_block > 0;
    int gp = blocked ? kMaxPanelGroup
                     : static_cast<int>(std::min<size_t>(kMaxPanelGroup, std::max<size_t>(1, kPanelGroupL2Bytes / panel_bytes)));
    // Keep at least one group per thread (k/v projections have few panels).
    gp = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(gp, n_panels / pool_.size())));
    const int64_t kb = blocked ? mk.panel_k_block : K;
    // Float panels: [K][kPanelRows] f32, act F32 (offsets of a K block).
    const size_t kb_panel = blocked ? static_cast<size_t>(kb) * kPanelRows * sizeof(float) : 0;
    const size_t kb_act = blocked ? static_cast<size_t>(kb) * sizeof(float) : 0;
    // Float panels whose pair of K blocks fits L1: panel pairs outside the column groups (see above).
    const bool pairs_outer = il_cols > 0 && 2 * kb_panel <= kPairL1Bytes;
    // Float panels with pairs outside: the group's outputs go to a tile [T][gp * kPanelRows] first (out's
    // columns lie a multiple of 4 KB apart, so the kernels' output lines of all columns would share
    // one L1 set and evict the panels' lines there), copied to out after the last K block.
    const int64_t tile_stride = static_cast<int64_t>(gp) * kPanelRows;
    const size_t tile_bytes = pairs_outer ? static_cast<size_t>(T * tile_stride) * sizeof(float) : 0;
    const size_t slice = static_cast<size_t>(gp) * panel_bytes + tmp_bytes + tile_bytes;
    uint8_t* scratch = per_thread_.get(slice * static_cast<size_t>(pool_.size()));
    const int64_t n_groups_p = (n_panels + gp - 1) / gp;
    const int cstep = il_cols > 0 ? il_cols : kPanelCols;
    // Kernel passes per group (column groups x K blocks, x panel pairs there): the next group's
    // prefetch is spread over them.
    const int64_t n_passes = (T + cstep - 1) / cstep * ((K + kb - 1) / kb) * (pairs_outer ? (gp + 1) / 2 : 1);
    pool_.parallel_for(n_groups_p, 1, [&](int64_t g0, int64_t g1, int ith) {
      uint8_t* panels = scratch + slice * static_cast<size_t>(ith);
      uint8_t* tmp = panels + static_cast<size_t>(gp) * panel_bytes;
      float* tile = reinterpret_cast<float*>(tmp + tmp_bytes);
      for (int64_t g = g0; g < g1; ++g) {
        const int64_t p0 = g * gp;
        const int np = static_cast<int>(n_panels - p0 < gp ? n_panels - p0 : gp);
        int nr[kMaxPanelGroup];
        for (int i = 0; i < np; ++i) {
          const int64_t r0 = (p0 + i) * kPanelRows;
          nr[i] = static_cast<int>(N - r0 < kPanelRows ? N - r0 : kPanelRows);
          mk.pack(K, w0 + static_cast<size_t>(r0) * w_stride, w_stride, nr[i], panels + i * panel_bytes, tmp);
        }
        const int64_t row0 = p0 * kPanelRows, row1 = std::min<int64_t>(N, (p0 + np) * kPanelRows);
        MatArgs a;
        a.act_stride = act_stride;
        a.out_stride = out_stride;
        // While this group computes, pull the next group's weight rows towards L2 in small doses per
        // pass, so the next packs do not wait on DRAM (a pack is otherwise mostly memory stalls).
        const int64_t next_r0 = (p0 + np) * kPanelRows;
        const int64_t next_rows = next_r0 < N ? std::min<int64_t>(N - next_r0, static_cast<int64_t>(gp) * kPanelRows) : 0;
        const size_t next_bytes = static_cast<size_t>(next_rows) * w_stride;
        const size_t dose = (next_bytes / 64 + static_cast<size_t>(n_passes) - 1) / static_cast<size_t>(n_passes) * 64;
        const uint8_t* pf = w0 + static_cast<size_t>(next_r0) * w_stride;
        size_t pf_done = 0;
        auto prefetch_dose = [&] {
          for (size_t e = pf_done + dose; pf_done < next_bytes && pf_done < e; pf_done += 64) __builtin_prefetch(pf + pf_done, 0, 2);
        };
        for (int64_t k0 = 0, kbi = 0; k0 < K; k0 += kb, ++kbi) {
          a.K = K - k0 < kb ? K - k0 : kb;
          a.accumulate = k0 > 0;
          const bool last_k = k0 + a.K >= K;
          if (il_cols > 0) {
            // Float panels: one or two panels (from panel i) per call on column group cg's
            // interleaved act.
            auto il_call = [&](int i, int64_t cg) {
              a.w = panels + i * panel_bytes + static_cast<size_t>(kbi) * kb_panel;
              a.w_stride = panel_bytes;
              a.n_rows = i + 1 < np ? kPanelRows + nr[i + 1] : nr[i];
              a.act = reinterpret_cast<const uint8_t*>(il + static_cast<size_t>(cg) * il_group +
                                                       static_cast<size_t>(k0) * static_cast<size_t>(il_cols));
              a.n_cols = groups.width(cg);
              if (pairs_outer) {
                a.out = tile + groups.start(cg) * tile_stride + i * kPanelRows;
                a.out_stride = static_cast<size_t>(tile_stride);
              } else {
                a.out = out0 + static_cast<size_t>(groups.start(cg)) * out_stride + (p0 + i) * kPanelRows;
              }
              mk.panel_il(a);
            };
            if (pairs_outer) {
              for (int i = 0; i < np; i += 2)
                for (int64_t cg = 0; cg < groups.n; ++cg) {
                  prefetch_dose();
                  il_call(i, cg);
                }
              if (last_k) {
                for (int64_t t = 0; t < T; ++t)
                  std::memcpy(out0 + static_cast<size_t>(t) * out_stride + row0, tile + t * tile_stride,
                              static_cast<size_t>(row1 - row0) * sizeof(float));
                if (acc0 != nullptr) accumulate(row0, row1, 0, T);
              }
            } else {
              for (int64_t cg = 0; cg < groups.n; ++cg) {
                prefetch_dose();
                for (int i = 0; i < np; i += 2) il_call(i, cg);
                if (acc0 != nullptr && last_k) accumulate(row0, row1, groups.start(cg), groups.start(cg) + groups.width(cg));
              }
            }
            continue;
          }
          for (int64_t c0 = 0; c0 < T; c0 += cstep) {
            prefetch_dose();
            const int nc = static_cast<int>(T - c0 < cstep ? T - c0 : cstep);
            const uint8_t* act_c = act + static_cast<size_t>(c0) * act_stride + static_cast<size_t>(kbi) * kb_act;
            float* out_c = out0 + static_cast<size_t>(c0) * out_stride;
            for (int i = 0; i < np; ++i) {
              for (int cc = 0; cc < nc; cc += kPanelCols) {
                a.w = panels + i * panel_bytes + static_cast<size_t>(kbi) * kb_panel;
                a.n_rows = nr[i];
                a.act = act_c + static_cast<size_t>(cc) * act_stride;
                a.n_cols = nc - cc < kPanelCols ? nc - cc : kPanelCols;
                a.out = out_c + static_cast<size_t>(cc) * out_stride + (p0 + i) * kPanelRows;
                mk.panel_mul(a);
              }
            }
            if (acc0 != nullptr && last_k) accumulate(row0, row1, c0, c0 + nc);
          }
        }
      }
    });
    return;
  }

  // 2b. Direct path.
  const int dc = mk.direct_cols;
  const int64_t sub_rows = T <= dc ? N : static_cast<int64_t>(kDirectL2Bytes / (w_stride + 1)) + 1;
  auto rows_body = [&](int64_t r0, int64_t r1) {
    // The kernels prefetch a few KB ahead of the row they decode; start that stream at once for the
    // first rows of this chunk (decode is a sequence of short matmuls split into chunks, and each
    // chunk's first rows would otherwise wait on DRAM one cache line at a time).
    const uint8_t* c0p = w0 + static_cast<size_t>(r0) * w_stride;
    const size_t ramp = std::min<size_t>(4096, static_cast<size_t>(r1 - r0) * w_stride);
    for (size_t off = 0; off < ramp; off += 64) __builtin_prefetch(c0p + off, 0, 3);
    MatArgs a;
    a.K = K;
    a.w_stride = w_stride;
    a.act_stride = act_stride;
    a.out_stride = out_stride;
    for (int64_t s0 = r0; s0 < r1; s0 += sub_rows) {
      const int64_t s1 = s0 + sub_rows < r1 ? s0 + sub_rows : r1;
      a.w = w0 + static_cast<size_t>(s0) * w_stride;
      a.n_rows = s1 - s0;
      for (int64_t c0 = 0; c0 < T; c0 += dc) {
        a.act = act + static_cast<size_t>(c0) * act_stride;
        a.n_cols = static_cast<int>(T - c0 < dc ? T - c0 : dc);
        a.out = out0 + static_cast<size_t>(c0) * out_stride + s0;
        mk.direct(a);
        if (acc0 != nullptr) accumulate(s0, s1, c0, c0 + a.n_cols);
      }
    }
  };
  // Tiny matmuls stay on the calling thread; otherwise chunks of >= 4 rows (and >= ~16 KB of weights).
  const int64_t work = N * K * (T < dc ? T : dc);
  if (work < (1 << 17) || pool_.size() == 1) {
    rows_body(0, N);
  } else {
    const int64_t grain = static_cast<int64_t>(16384 / (w_stride + 1)) + 4;
    guided_for(pool_, N, grain, rows_body);
  }
}

// Several matmuls of one activation x (q/k/v, gate/up): for few tokens, x is converted once and all the
// weights' rows are split over the pool as one job, so the threads meet once instead of once per
// matrix (each meeting costs the slowest thread's tail). Otherwise one matmul after the other.
void CpuOps::matmul_many(int n, const TensorView* const* ws, const TensorView& x, TensorView* outs) {
  constexpr int kMaxMany = 8;
  const int64_t K = ws[0]->ne[0], T = x.ne[1];
  // The merged job runs the direct kernels: with token groups on, only where every column takes them.
  const bool all_direct = group_decode_ < 0 || T != group_tokens_ || group_decode_ >= T;
  bool merge = n >= 2 && n <= kMaxMany && pool_.size() > 1 && all_direct;
  const MatKernel* mk = nullptr;
  if (merge) {
    FERRY_ASSERT(static_cast<uint32_t>(ws[0]->dtype) < kDTypeIdLimit);
    mk = &tab_->mat[static_cast<uint32_t>(ws[0]->dtype)];
    merge = mk->direct != nullptr && T >= 1 && T <= mk->direct_cols && x.dtype == DType::F32 && x.ne[0] == K &&
            x.ne[2] == 1 && K % traits(ws[0]->dtype).block_elems == 0;
    for (int i = 0; merge && i < n; ++i) {
      const TensorView& w = *ws[i];
      merge = w.dtype == ws[0]->dtype && w.ne[0] == K && w.ne[2] == 1 && w.ne[3] == 1 && w.where == Where::kHost &&
              outs[i].dtype == DType::F32 && outs[i].ne[0] == w.ne[1] && outs[i].ne[1] == T && outs[i].ne[2] == 1 &&
              outs[i].data != x.data;
    }
  }
  if (!merge) {
    for (int i = 0; i < n; ++i) matmul(*ws[i], x, outs[i]);
    return;
  }
  const size_t act_stride = mk->act_bytes(K);
  uint8_t* act = act_.get(act_stride * static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t)
    mk->quantize(static_cast<const float*>(x.row(t)), K, act + static_cast<size_t>(t) * act_stride);

  int64_t first[kMaxMany + 1];  // global row index of each matrix's first row
  first[0] = 0;
  size_t max_stride = 0;
  for (int i = 0; i < n; ++i) {
    first[i + 1] = first[i] + ws[i]->ne[1];
    max_stride = std::max(max_stride, ws[i]->nb[1]);
  }
  auto rows_body = [&](int64_t g0, int64_t g1) {
    for (int i = 0; i < n && g0 < g1; ++i) {
      if (g0 >= first[i + 1]) continue;
      const int64_t r0 = g0 - first[i], r1 = std::min(g1, first[i + 1]) - first[i];
      const TensorView& w = *ws[i];
      const auto* w0 = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r0) * w.nb[1];
      const size_t ramp = std::min<size_t>(4096, static_cast<size_t>(r1 - r0) * w.nb[1]);
      for (size_t off = 0; off < ramp; off += 64) __builtin_prefetch(w0 + off, 0, 3);
      MatArgs a;
      a.K = K;
      a.w = w0;
      a.w_stride = w.nb[1];
      a.n_rows = r1 - r0;
      a.act = act;
      a.act_stride = act_stride;
      a.n_cols = static_cast<int>(T);
      a.out = static_cast<float*>(outs[i].data) + r0;
      a.out_stride = outs[i].nb[1] / sizeof(float);
      mk->direct(a);
      g0 = first[i] + r1;
    }
  };
  if (first[n] * K * T < (1 << 17)) {
    rows_body(0, first[n]);
    return;
  }
  const int64_t grain = static_cast<int64_t>(16384 / (max_stride + 1)) + 4;
  guided_for(pool_, first[n], grain, rows_body);
}

}  // namespace ferry::kernels::cpu
