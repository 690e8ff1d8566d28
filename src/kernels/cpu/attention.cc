// CpuOps::attention over the F16 KV cache. Work items are (token, KV head) pairs, token-major, split
// over the pool; an item computes the scores of the KV head's query group against every visible cell
// (each K row read once for the whole group), the softmax per head, then the weighted sum of V rows.
// With fewer items than twice the threads (decode), items are (token, query head) instead.
// A thread keeps the visible-cell list of its last token, so consecutive items of one token share it.
// Numerics as llama.cpp's (flash attention off, F16 cache): q rounded to F16 for the K product, float
// scores, softmax probabilities rounded to F16 for the V product.
// Decode (few tokens) on levels with the cells kernels instead splits each token's visible cells into
// chunks: a job computes every head's scores for each chunk (streaming whole K rows), the caller takes
// the softmax per head, a second job sums each chunk's share of V rows, and the caller adds the chunks'
// partial outputs in chunk order. The chunking depends only on the number of visible cells, so the
// result does not depend on the thread count.
// With token groups on (Ops::set_token_groups), decode tokens take the cells path and prompt tokens the
// work items whatever their count. Either path takes a token's visible cells in position order.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/status.h"
#include "kernels/cpu/cpu_ops_impl.h"

namespace ferry::kernels::cpu {

namespace {

// Cells path: tokens per step it is used for, cells per chunk, most chunks (the partial outputs are
// n_head * hd floats per chunk).
constexpr int64_t kCellsMaxTokens = 4;
constexpr int kCellsChunkMin = 64;
constexpr int kCellsMaxChunks = 32;

// Head h's sink logit, or -inf (none).
float sink_of(const AttnParams& p, int64_t h) {
  return p.sinks.data != nullptr ? p.sinks.ptr<const float>()[h] : -INFINITY;
}

}  // namespace

void order_by_position(int32_t* vis, int n, const int32_t* cell_pos) {
  auto by_pos = [cell_pos](int32_t a, int32_t b) { return cell_pos[a] < cell_pos[b]; };
  if (!std::is_sorted(vis, vis + n, by_pos)) std::sort(vis, vis + n, by_pos);
}

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
  FERRY_ASSERT(p.sinks.data == nullptr || (p.sinks.dtype == DType::F32 && p.sinks.ne[0] == p.n_head));
  if (n_tok == 0) return;
  // Tokens [0, n_cells_path) take the cells path, the others the work items: by the token count, or
  // with token groups on (set_token_groups) the decode tokens and the prompt tokens respectively.
  const bool cells_ok = tab_->attn_cells_scores != nullptr && hd % tab_->attn_cells_hd_multiple == 0;
  int64_t n_cells_path = cells_ok && n_tok <= kCellsMaxTokens ? n_tok : 0;
  if (group_decode_ >= 0 && n_tok == group_tokens_) n_cells_path = cells_ok ? std::min<int64_t>(group_decode_, n_tok) : 0;
  for (int64_t t = 0; t < n_cells_path; ++t) attention_cells(q, kv, batch, p, t, out);
  if (n_cells_path < n_tok) attention_items(q, kv, batch, p, n_cells_path, out);
}

void CpuOps::attention_items(const TensorView& q, const KvView& kv, const BatchMeta& batch, const AttnParams& p,
                             int64_t t0, TensorView out) {
  const int64_t hd = p.head_dim, n_tok = batch.n_tokens - t0;
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
      const int64_t t = t0 + item / items_per_tok, hi = item % items_per_tok;
      const int64_t kvh = per_head ? hi / group : hi;
      if (t != vis_tok) {
        n_vis = 0;
        for (int32_t c = 0; c < n_cells; ++c) {
          if (cseq[c] != seq[t] || cpos[c] < 0 || cpos[c] > pos[t]) continue;
          if (p.window > 0 && pos[t] - cpos[c] >= p.window) continue;
          vis[n_vis++] = c;
        }
        order_by_position(vis, n_vis, cpos);
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
      for (int g = 0; g < item_heads; ++g)
        tab_->softmax(scores + static_cast<size_t>(g) * n_vis, n_vis, sink_of(p, h0 + g));
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

void CpuOps::attention_cells(const TensorView& q, const KvView& kv, const BatchMeta& batch, const AttnParams& p,
                             int64_t t, TensorView out) {
  const int hd = p.head_dim, n_head = p.n_head, n_kv = p.n_kv_head, group = n_head / n_kv;
  const int32_t pos = batch.pos.ptr<const int32_t>()[t], seq = batch.seq.ptr<const int32_t>()[t];
  const int32_t* cpos = kv.cell_pos.ptr<const int32_t>();
  const int32_t* cseq = kv.cell_seq.ptr<const int32_t>();
  const int n_cells = kv.n_cells;
  const size_t head_floats = static_cast<size_t>(n_head) * hd;

  // Shared scratch: visible cells, q rounded to F16 [n_head][hd], scores [n_head][n_vis], then the
  // chunks' partial outputs [n_chunks][n_head][hd].
  auto align64 = [](size_t b) { return (b + 63) & ~size_t{63}; };
  const size_t vis_bytes = align64(static_cast<size_t>(n_cells) * 4);
  const size_t q_bytes = align64(head_floats * 4);
  const size_t s_bytes = align64(static_cast<size_t>(n_head) * static_cast<size_t>(n_cells) * 4);
  const size_t part_bytes = head_floats * 4 * kCellsMaxChunks;
  uint8_t* base = per_thread_.get(vis_bytes + q_bytes + s_bytes + part_bytes);
  auto* vis = reinterpret_cast<int32_t*>(base);
  auto* q16 = reinterpret_cast<float*>(base + vis_bytes);
  auto* scores = reinterpret_cast<float*>(base + vis_bytes + q_bytes);
  auto* part = reinterpret_cast<float*>(base + vis_bytes + q_bytes + s_bytes);

  int n_vis = 0;
  for (int32_t c = 0; c < n_cells; ++c) {
    if (cseq[c] != seq || cpos[c] < 0 || cpos[c] > pos) continue;
    if (p.window > 0 && pos - cpos[c] >= p.window) continue;
    vis[n_vis++] = c;
  }
  order_by_position(vis, n_vis, cpos);
  FERRY_ASSERT_MSG(n_vis > 0, "attention: a token sees no cell (its own K/V must be stored first)");
  for (int h = 0; h < n_head; ++h)
    tab_->round_f16(static_cast<const float*>(q.row(h, t)), q16 + static_cast<size_t>(h) * hd, hd);

  const int n_chunks = std::min(kCellsMaxChunks, (n_vis + kCellsChunkMin - 1) / kCellsChunkMin);
  const int chunk = (n_vis + n_chunks - 1) / n_chunks;
  const auto* kb = static_cast<const uint8_t*>(kv.k.data);
  const auto* vb = static_cast<const uint8_t*>(kv.v.data);
  const bool parallel = n_chunks > 1 && pool_.size() > 1;

  auto scores_body = [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int j0 = static_cast<int>(c) * chunk, n = std::min(chunk, n_vis - j0);
      tab_->attn_cells_scores(q16, n_kv, group, hd, kb, kv.k.nb[1], vis + j0, n, p.scale, p.softcap, scores + j0,
                              n_vis);
    }
  };
  if (parallel) {
    pool_.parallel_for(n_chunks, 1, 1, scores_body);
  } else {
    scores_body(0, n_chunks);
  }
  for (int h = 0; h < n_head; ++h) tab_->softmax(scores + static_cast<size_t>(h) * n_vis, n_vis, sink_of(p, h));

  auto values_body = [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int j0 = static_cast<int>(c) * chunk, n = std::min(chunk, n_vis - j0);
      float* o = part + static_cast<size_t>(c) * head_floats;
      std::memset(o, 0, head_floats * sizeof(float));
      tab_->attn_cells_values(scores + j0, n_vis, n_kv, group, hd, vb, kv.v.nb[1], vis + j0, n, o);
    }
  };
  if (parallel) {
    pool_.parallel_for(n_chunks, 1, 1, values_body);
  } else {
    values_body(0, n_chunks);
  }
  float* o = static_cast<float*>(out.row(t));
  std::memcpy(o, part, head_floats * sizeof(float));
  for (int c = 1; c < n_chunks; ++c) tab_->add(o, part + static_cast<size_t>(c) * head_floats, o, static_cast<int64_t>(head_floats));
}

}  // namespace ferry::kernels::cpu
