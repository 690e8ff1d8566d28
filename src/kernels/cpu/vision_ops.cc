// CpuOps for vision-language models: rope_multi (Qwen2-VL's M-RoPE and its vision tower's 2-D RoPE) and
// attention_segments (a vision encoder's window and full attention, no KV cache).
//
// rope_multi computes the angles as ggml's rope_multi does on the CPU (ggml_mrope_cache_init): per
// position stream a float recurrence theta_s *= base^(-2 / n_rot) started at the stream's position (and
// restarted at each section's first pair in vision mode), th = freq_scale * (theta / freq_factor), cosf /
// sinf; the rotation is the table's NeoX kernel with the pair distance of the mode.
//
// attention_segments is tiled: a work item is (head, block of kQBlock queries of one segment); it walks
// its segment's keys in tiles of kKTile with an online softmax (running max and sum per query), so its
// scratch is a few kQBlock x kKTile and head_dim x kKTile tiles whatever the segment's length. The two
// products per tile are the kernel table's small F32 GEMM. F32 throughout.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "base/status.h"
#include "kernels/cpu/cpu_ops_impl.h"
#include "kernels/cpu/kernels.h"

namespace ferry::kernels::cpu {

namespace {

constexpr int64_t kQBlock = 64;  // queries per work item (the keys' transpose serves them all)
constexpr int64_t kKTile = 128;  // keys per softmax tile

float* frow(const TensorView& t, int64_t i1, int64_t i2 = 0, int64_t i3 = 0) {
  return static_cast<float*>(t.row(i1, i2, i3));
}

// Angles of one token for rope_multi: cs / sn [n_pairs].
void rope_multi_angles(const RopeParams& p, const int32_t pos4[4], int64_t n_pairs, float theta_scale, float* cs,
                       float* sn) {
  const int32_t* sec = p.sections;
  const int32_t sect_dims = sec[0] + sec[1] + sec[2] + sec[3];
  const int32_t b1 = sec[0], b2 = sec[0] + sec[1], b3 = sec[0] + sec[1] + sec[2];
  const float* ff = p.freq_factors.data != nullptr ? p.freq_factors.ptr<const float>() : nullptr;
  float theta[4];
  for (int s = 0; s < 4; ++s) theta[s] = static_cast<float>(pos4[s]);
  for (int64_t i = 0; i < n_pairs; ++i) {
    const int32_t sector = static_cast<int32_t>(i % sect_dims);
    if (p.vision) {  // each section's recurrence starts again at its first pair
      if (sector == 0) theta[0] = static_cast<float>(pos4[0]);
      else if (sector == b1) theta[1] = static_cast<float>(pos4[1]);
      else if (sector == b2) theta[2] = static_cast<float>(pos4[2]);
      else if (sector == b3) theta[3] = static_cast<float>(pos4[3]);
    }
    const int s = sector < b1 ? 0 : sector < b2 ? 1 : sector < b3 ? 2 : 3;
    const float th = p.freq_scale * (theta[s] / (ff != nullptr ? ff[i] : 1.0f));
    cs[i] = std::cos(th);
    sn[i] = std::sin(th);
    for (float& t : theta) t *= theta_scale;
  }
}

}  // namespace

void CpuOps::rope_multi(TensorView x, const TensorView& pos, const RopeParams& p) {
  const int64_t hd = x.ne[0], n_head = x.ne[1], n_tok = x.ne[2];
  FERRY_ASSERT(x.dtype == DType::F32 && x.ne[3] == 1 && x.where == Where::kHost);
  FERRY_ASSERT(pos.dtype == DType::I32 && pos.ne[0] == 4 * n_tok && pos.where == Where::kHost);
  FERRY_ASSERT(p.n_rot > 0 && p.n_rot % 2 == 0);
  FERRY_ASSERT(p.sections[0] >= 0 && p.sections[1] >= 0 && p.sections[2] >= 0 && p.sections[3] >= 0 &&
               p.sections[0] + p.sections[1] + p.sections[2] + p.sections[3] > 0);
  // Pairs rotated and their distance: NeoX (i, i + n_rot / 2), or vision (i, i + n_rot) over 2 * n_rot.
  const int64_t n_pairs = p.vision ? p.n_rot : p.n_rot / 2;
  FERRY_ASSERT(p.vision ? hd == 2 * p.n_rot : p.n_rot <= hd);
  if (p.freq_factors.data != nullptr) FERRY_ASSERT(p.freq_factors.dtype == DType::F32 && p.freq_factors.ne[0] >= n_pairs);
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
  const int32_t* pv = pos.ptr<const int32_t>();
  const size_t slice = static_cast<size_t>(n_pairs) * 2 * sizeof(float) + 64;
  uint8_t* base = per_thread_.get(slice * static_cast<size_t>(pool_.size()));
  auto body = [&](int64_t t0, int64_t t1, int ith) {
    auto* cs = reinterpret_cast<float*>(base + slice * static_cast<size_t>(ith));
    float* sn = cs + n_pairs;
    for (int64_t t = t0; t < t1; ++t) {
      const int32_t p4[4] = {pv[t], pv[n_tok + t], pv[2 * n_tok + t], pv[3 * n_tok + t]};
      rope_multi_angles(p, p4, n_pairs, theta_scale, cs, sn);
      for (int64_t h = 0; h < n_head; ++h) tab_->rope(frow(x, h, t), cs, sn, n_pairs, true);
    }
  };
  if (n_tok * n_head * hd < (1 << 15) || n_tok < 2) {
    body(0, n_tok, 0);
  } else {
    pool_.parallel_for(n_tok, 1, body);
  }
}

void CpuOps::attention_segments(const TensorView& q, const TensorView& k, const TensorView& v, const int32_t* bounds,
                                int32_t n_seg, float scale, TensorView out) {
  const int64_t hd = q.ne[0], n_head = q.ne[1], n = q.ne[2], n_kv = k.ne[1];
  FERRY_ASSERT(q.dtype == DType::F32 && k.dtype == DType::F32 && v.dtype == DType::F32 && out.dtype == DType::F32);
  FERRY_ASSERT(k.ne[0] == hd && v.ne[0] == hd && v.ne[1] == n_kv && k.ne[2] == n && v.ne[2] == n);
  FERRY_ASSERT(n_kv > 0 && n_head % n_kv == 0 && out.ne[0] == hd * n_head && out.ne[1] == n);
  FERRY_ASSERT(q.nb[0] == 4 && k.nb[0] == 4 && v.nb[0] == 4 && q.nb[2] % 4 == 0 && k.nb[2] % 4 == 0 && v.nb[2] % 4 == 0);
  FERRY_ASSERT(n_seg >= 1 && bounds[0] == 0 && bounds[n_seg] == n);
  for (int32_t s = 0; s < n_seg; ++s) FERRY_ASSERT(bounds[s] < bounds[s + 1]);
  const int64_t group = n_head / n_kv;
  const int64_t q_ld = static_cast<int64_t>(q.nb[2] / 4), v_ld = static_cast<int64_t>(v.nb[2] / 4);

  // Items: (segment, query block) pairs for every head, head-major inside each block.
  std::vector<int64_t> block_start;  // first query of each block
  std::vector<int32_t> block_seg;
  for (int32_t s = 0; s < n_seg; ++s)
    for (int64_t t = bounds[s]; t < bounds[s + 1]; t += kQBlock) {
      block_start.push_back(t);
      block_seg.push_back(s);
    }
  const int64_t n_blocks = static_cast<int64_t>(block_start.size());
  // Per thread: scores / probabilities [kQBlock][kKTile], the tile's keys transposed [hd][kKTile], the
  // running output [kQBlock][hd], running max and sum [kQBlock].
  const size_t floats = static_cast<size_t>(kQBlock * kKTile + hd * kKTile + kQBlock * hd + 2 * kQBlock);
  const size_t slice = (floats * sizeof(float) + 63) & ~size_t{63};
  uint8_t* base = per_thread_.get(slice * static_cast<size_t>(pool_.size()));

  auto body = [&](int64_t i0, int64_t i1, int ith) {
    auto* sc = reinterpret_cast<float*>(base + slice * static_cast<size_t>(ith));
    float* kt = sc + kQBlock * kKTile;
    float* acc = kt + hd * kKTile;
    float* mx = acc + kQBlock * hd;
    float* sum = mx + kQBlock;
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t b = item / n_head, h = item % n_head, kvh = h / group;
      const int32_t seg = block_seg[static_cast<size_t>(b)];
      const int64_t t0 = block_start[static_cast<size_t>(b)];
      const int64_t nq = std::min<int64_t>(kQBlock, bounds[seg + 1] - t0);
      const int64_t k0 = bounds[seg], k1 = bounds[seg + 1];
      const float* qb = frow(q, h, t0);
      std::fill(acc, acc + nq * hd, 0.f);
      std::fill(mx, mx + nq, -std::numeric_limits<float>::infinity());
      std::fill(sum, sum + nq, 0.f);
      for (int64_t j0 = k0; j0 < k1; j0 += kKTile) {
        const int64_t nk = std::min<int64_t>(kKTile, k1 - j0);
        for (int64_t j = 0; j < nk; ++j) {  // the tile's keys as columns
          const float* kr = frow(k, kvh, j0 + j);
          for (int64_t d = 0; d < hd; ++d) kt[d * kKTile + j] = kr[d];
        }
        tab_->gemm_f32(qb, q_ld, kt, kKTile, sc, kKTile, nq, nk, hd, false);  // scores [nq][nk]
        // Online softmax: rescale what earlier tiles left, this tile's exp(score - max) into sc.
        for (int64_t i = 0; i < nq; ++i) {
          float* s = sc + i * kKTile;
          float m = mx[i];
          for (int64_t j = 0; j < nk; ++j) m = std::max(m, s[j] *= scale);
          const float r = std::exp(mx[i] - m);
          sum[i] = sum[i] * r + tab_->exp_sum(s, nk, m);
          mx[i] = m;
          if (r != 1.f) tab_->scale(acc + i * hd, r, acc + i * hd, hd);
        }
        tab_->gemm_f32(sc, kKTile, frow(v, kvh, j0), v_ld, acc, hd, nq, hd, nk, true);  // acc += P . V
      }
      for (int64_t i = 0; i < nq; ++i) tab_->scale(acc + i * hd, 1.0f / sum[i], frow(out, t0 + i) + h * hd, hd);
    }
  };
  const int64_t n_items = n_blocks * n_head;
  if (n_items < 2) {
    body(0, n_items, 0);
  } else {
    pool_.parallel_for(n_items, 1, body);
  }
}

}  // namespace ferry::kernels::cpu
