// CpuOps::attention over the F16 KV cache. Work items are (token, KV head) pairs, token-major, split
// over the pool; an item computes the scores of the KV head's query group against every visible cell
// (each K row read once for the whole group), the softmax per head, then the weighted sum of V rows.
// With fewer items than twice the threads (decode), items are (token, query head) instead.
// A thread keeps the visible-cell list of its last token, so consecutive items of one token share it.
// Numerics as llama.cpp's (flash attention off, F16 cache): q rounded to F16 for the K product, float
// scores, softmax probabilities rounded to F16 for the V product.
#include <cmath>

#include "base/status.h"
#include "kernels/cpu/cpu_ops_impl.h"

namespace ferry::kernels::cpu {

void CpuOps::attention(const TensorView& q, const KvView& kv, const BatchMeta& batch, const AttnParams& p,
                       TensorView out) {
  const int64_t hd = p.head_dim, n_tok = batch.n_tokens;
  FERRY_ASSERT(q.dtype == DType::F32 && q.ne[0] == hd && q.ne[1] == p.n_head && q.ne[2] == n_tok);
  FERRY_ASSERT(p.n_kv_head > 0 && p.n_head % p.n_kv_head == 0);
  FERRY_ASSERT(out.dtype == DType::F32 && out.ne[0] == hd * p.n_head && out.ne[1] == n_tok);
  FERRY_ASSERT(kv.k.dtype == DType::F16 && kv.v.dtype == DType::F16);
  FERRY_ASSERT(kv.k.ne[0] == hd * p.n_kv_head && kv.v.ne[0] == hd * p.n_kv_head && kv.n_cells <= kv.k.ne[1]);
  FERRY_ASSERT(batch.pos.dtype == DType::I32 && batch.seq.dtype == DType::I32);
  FERRY_ASSERT(kv.cell_pos.dtype == DType::I32 && kv.cell_seq.dtype == DType::I32);
  if (n_tok == 0) return;
  const int32_t* pos = batch.pos.ptr<const int32_t>();
  const int32_t* seq = batch.seq.ptr<const int32_t>();
  const int32_t* cpos = kv.cell_pos.ptr<const int32_t>();
  const int32_t* cseq = kv.cell_seq.ptr<const int32_t>();
  const int group = p.n_head / p.n_kv_head;
  const int n_cells = kv.n_cells;

  // Per-thread slice: visible cells (int32), q of the group rounded to F16 [group][hd], scores
  // [group][n_cells] (f32).
  const size_t cells_bytes = (static_cast<size_t>(n_cells) * 4 + 63) & ~size_t{63};
  const size_t q_bytes = (static_cast<size_t>(group * hd) * 4 + 63) & ~size_t{63};
  const size_t slice = cells_bytes + q_bytes + static_cast<size_t>(group) * static_cast<size_t>(n_cells) * 4 + 64;
  uint8_t* base = per_thread_.get(slice * static_cast<size_t>(pool_.size()));

  // Items: (token, KV head) with the whole query group, or, when that leaves threads idle (decode: 8
  // KV heads for 16 threads), (token, query head): a group's K/V rows are then read once per query
  // head (from cache: a layer's K/V at 1K context is ~4 MB) but all threads work. Same numbers either
  // way (each head's scores, softmax and sums are computed alone).
  const bool per_head = group > 1 && n_tok * p.n_kv_head < 2 * static_cast<int64_t>(pool_.size());
  const int item_heads = per_head ? 1 : group;  // query heads per item
  const int64_t items_per_tok = per_head ? p.n_head : p.n_kv_head;
  const int64_t n_items = n_tok * items_per_tok;
  auto body = [&](int64_t i0, int64_t i1, int ith) {
    auto* vis = reinterpret_cast<int32_t*>(base + slice * static_cast<size_t>(ith));
    auto* q16 = reinterpret_cast<float*>(base + slice * static_cast<size_t>(ith) + cells_bytes);
    auto* scores = reinterpret_cast<float*>(base + slice * static_cast<size_t>(ith) + cells_bytes + q_bytes);
    int64_t vis_tok = -1;
    int n_vis = 0;
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t t = item / items_per_tok, hi = item % items_per_tok;
      const int64_t kvh = per_head ? hi / group : hi;
      if (t != vis_tok) {
        n_vis = 0;
        for (int32_t c = 0; c < n_cells; ++c) {
          if (cseq[c] != seq[t] || cpos[c] < 0 || cpos[c] > pos[t]) continue;
          if (p.window > 0 && pos[t] - cpos[c] >= p.window) continue;
          vis[n_vis++] = c;
        }
        vis_tok = t;
        FERRY_ASSERT_MSG(n_vis > 0, "attention: a token sees no cell (its own K/V must be stored first)");
      }
      const int64_t h0 = per_head ? hi : kvh * group;  // first query head of the item
      for (int g = 0; g < item_heads; ++g)
        tab_->round_f16(static_cast<const float*>(q.row(h0 + g, t)), q16 + g * hd, hd);
      const auto* kbase = static_cast<const uint8_t*>(kv.k.data) + static_cast<size_t>(kvh * hd) * 2;
      const auto* vbase = static_cast<const uint8_t*>(kv.v.data) + static_cast<size_t>(kvh * hd) * 2;
      tab_->attn_scores(q16, hd, item_heads, kbase, kv.k.nb[1], vis, n_vis, static_cast<int>(hd), p.scale,
                        p.softcap, scores);
      for (int g = 0; g < item_heads; ++g) tab_->softmax(scores + static_cast<size_t>(g) * n_vis, n_vis);
      float* o = static_cast<float*>(out.row(t)) + h0 * hd;
      tab_->attn_values(scores, item_heads, vbase, kv.v.nb[1], vis, n_vis, static_cast<int>(hd), o);
    }
  };
  const int64_t work = n_tok * p.n_head * static_cast<int64_t>(n_cells) * hd;
  if (work < (1 << 16) || n_items < 2) {
    body(0, n_items, 0);
  } else {
    pool_.parallel_for(n_items, 1, body);
  }
}

}  // namespace ferry::kernels::cpu
