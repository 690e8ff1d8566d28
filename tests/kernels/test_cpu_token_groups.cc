// CpuOps with token groups on (Ops::set_token_groups, the server's batch-invariant numerics): a token's
// matmul and attention results are bit-identical whether it is computed alone or in a step with other
// tokens, at every dispatch level and for every weight type, and attention does not depend on where a
// sequence's cells lie in the cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "tensor/quant.h"
#include "tensor/quant_blocks.h"

namespace ferry::kernels {
namespace {

std::vector<CpuIsa> levels() {
  std::vector<CpuIsa> v;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAmx})
    if (cpu_isa_supported(isa)) v.push_back(isa);
  return v;
}

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                        DType::Q8_0, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};

struct Weights {
  int64_t K, N;
  std::vector<uint8_t> bytes;
  TensorView view() { return TensorView::make(type, bytes.data(), K, N); }
  DType type;
};

Weights make_weights(DType type, int64_t N, std::mt19937& rng) {
  Weights w{traits(type).block_elems == 256 ? 512 : 160, N, {}, type};
  std::normal_distribution<float> nd(0.f, 0.05f);
  std::vector<float> row(static_cast<size_t>(w.K));
  const size_t rb = row_bytes(type, w.K);
  w.bytes.resize(rb * static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    for (float& v : row) v = nd(rng);
    quantize_row(type, row.data(), w.bytes.data() + rb * n, w.K);
  }
  return w;
}

// Columns [c0, c0 + n) of x through `ops` with groups (n, n_decode); out [N, n].
std::vector<float> columns(Ops& ops, Weights& w, std::vector<float>& x, int64_t c0, int64_t n, int32_t n_decode,
                           bool many) {
  std::vector<float> out(static_cast<size_t>(w.N * n));
  const TensorView xv = TensorView::make(DType::F32, x.data() + c0 * w.K, w.K, n);
  ops.set_token_groups(static_cast<int32_t>(n), n_decode);
  if (many) {
    // The same weights twice through matmul_many: the fused job must follow the groups too.
    std::vector<float> second(out.size());
    const TensorView wv = w.view();
    const TensorView* ws[2] = {&wv, &wv};
    TensorView outs[2] = {TensorView::make(DType::F32, out.data(), w.N, n),
                          TensorView::make(DType::F32, second.data(), w.N, n)};
    ops.matmul_many(2, ws, xv, outs);
    EXPECT_EQ(0, std::memcmp(out.data(), second.data(), out.size() * sizeof(float)));
  } else {
    ops.matmul(w.view(), xv, TensorView::make(DType::F32, out.data(), w.N, n));
  }
  ops.set_token_groups(0, -1);
  return out;
}

TEST(CpuTokenGroups, MatmulColumnAloneEqualsColumnInAStep) {
  std::mt19937 rng(7);
  for (CpuIsa isa : levels()) {
    auto ops = make_cpu_ops(2, isa);
    for (DType type : kTypes) {
      for (bool many : {false, true}) {
        Weights w = make_weights(type, 37, rng);
        const int64_t T = 13;
        const int32_t n_decode = 4;
        std::vector<float> x(static_cast<size_t>(w.K * T));
        std::normal_distribution<float> nd(0.f, 1.f);
        for (float& v : x) v = nd(rng);
        const std::vector<float> all = columns(*ops, w, x, 0, T, n_decode, many);
        for (int64_t t = 0; t < T; ++t) {
          const bool decode = t < n_decode;
          const std::vector<float> one = columns(*ops, w, x, t, 1, decode ? 1 : 0, many);
          ASSERT_EQ(0, std::memcmp(one.data(), all.data() + t * w.N, w.N * sizeof(float)))
              << cpu_isa_name(isa) << " " << dtype_name(type) << " column " << t << (many ? " (matmul_many)" : "");
        }
        // Prompt columns in a step of a different size (the panel path at 3 columns) and decode columns
        // in a step with no prompt tokens give the same bits.
        const std::vector<float> prompt3 = columns(*ops, w, x, 5, 3, 0, many);
        EXPECT_EQ(0, std::memcmp(prompt3.data(), all.data() + 5 * w.N, 3 * w.N * sizeof(float)))
            << cpu_isa_name(isa) << " " << dtype_name(type);
        const std::vector<float> decode2 = columns(*ops, w, x, 1, 2, 2, many);
        EXPECT_EQ(0, std::memcmp(decode2.data(), all.data() + 1 * w.N, 2 * w.N * sizeof(float)))
            << cpu_isa_name(isa) << " " << dtype_name(type);
      }
    }
  }
}

// A KV cache of three sequences whose cells interleave in a shuffled order, and tokens that attend over
// it: the decode tokens of each sequence, then prompt tokens of sequence 2.
struct AttnCase {
  static constexpr int kHd = 64, kHeads = 6, kKvHeads = 2, kCells = 300;
  std::vector<uint16_t> k, v;
  std::vector<int32_t> cell_pos, cell_seq;
  std::vector<int32_t> pos, seq, cell;
  std::vector<float> q;
  int n_tok = 0;

  explicit AttnCase(bool shuffled) {
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.f, 1.f);
    const int kvd = kHd * kKvHeads;
    // (seq, pos) of every cell: sequences of 90, 150 and 40 tokens.
    std::vector<std::pair<int32_t, int32_t>> held;
    for (int s = 0; s < 3; ++s)
      for (int p = 0; p < (s == 0 ? 90 : s == 1 ? 150 : 40); ++p) held.push_back({s, p});
    held.resize(kCells, {-1, -1});
    if (shuffled) std::shuffle(held.begin(), held.end(), rng);
    cell_pos.resize(kCells);
    cell_seq.resize(kCells);
    for (int c = 0; c < kCells; ++c) {
      cell_seq[c] = held[c].first;
      cell_pos[c] = held[c].second;
    }
    // K/V values follow (seq, pos), not the cell, so both layouts hold the same cache.
    k.resize(static_cast<size_t>(kvd) * kCells);
    v.resize(k.size());
    for (int c = 0; c < kCells; ++c) {
      std::mt19937 cell_rng(static_cast<uint32_t>(1000 * (cell_seq[c] + 1) + cell_pos[c]));
      std::normal_distribution<float> cell_nd(0.f, 1.f);  // its own: a distribution keeps state
      for (int i = 0; i < kvd; ++i) {
        k[static_cast<size_t>(c) * kvd + i] = fp32_to_fp16(cell_nd(cell_rng));
        v[static_cast<size_t>(c) * kvd + i] = fp32_to_fp16(cell_nd(cell_rng));
      }
    }
    // Decode tokens at each sequence's last position, then 5 prompt tokens of sequence 2 (35..39).
    const int32_t last[3] = {89, 149, 39};
    for (int s = 0; s < 3; ++s) add_token(s, last[s]);
    for (int p = 35; p < 40; ++p) add_token(2, p);
    q.resize(static_cast<size_t>(kHd) * kHeads * n_tok);
    std::mt19937 q_rng(5);  // not rng, which the shuffle advanced
    for (float& x : q) x = nd(q_rng);
  }

  void add_token(int32_t s, int32_t p) {
    pos.push_back(p);
    seq.push_back(s);
    for (int c = 0; c < kCells; ++c)
      if (cell_seq[c] == s && cell_pos[c] == p) cell.push_back(c);
    ++n_tok;
  }

  // Attention of tokens [t0, t0 + n) with groups (n, n_decode): out [kHd * kHeads, n].
  std::vector<float> run(Ops& ops, int t0, int n, int32_t n_decode) {
    BatchMeta b;
    b.n_tokens = n;
    b.pos = TensorView::make(DType::I32, pos.data() + t0, n);
    b.seq = TensorView::make(DType::I32, seq.data() + t0, n);
    b.cell = TensorView::make(DType::I32, cell.data() + t0, n);
    KvView kv;
    kv.k = TensorView::make(DType::F16, k.data(), kHd * kKvHeads, kCells);
    kv.v = TensorView::make(DType::F16, v.data(), kHd * kKvHeads, kCells);
    kv.cell_pos = TensorView::make(DType::I32, cell_pos.data(), kCells);
    kv.cell_seq = TensorView::make(DType::I32, cell_seq.data(), kCells);
    kv.n_cells = kCells;
    AttnParams p;
    p.n_head = kHeads;
    p.n_kv_head = kKvHeads;
    p.head_dim = kHd;
    p.scale = 0.125f;
    std::vector<float> out(static_cast<size_t>(kHd) * kHeads * n);
    ops.set_token_groups(n, n_decode);
    ops.attention(TensorView::make(DType::F32, q.data() + static_cast<size_t>(t0) * kHd * kHeads, kHd, kHeads, n), kv, b,
                  p, TensorView::make(DType::F32, out.data(), kHd * kHeads, n));
    ops.set_token_groups(0, -1);
    return out;
  }
};

TEST(CpuTokenGroups, AttentionTokenAloneEqualsTokenInAStepWhereverItsCellsLie) {
  AttnCase ordered(false), shuffled(true);
  const size_t row = static_cast<size_t>(AttnCase::kHd) * AttnCase::kHeads;
  for (CpuIsa isa : levels()) {
    auto ops = make_cpu_ops(2, isa);
    const int n = ordered.n_tok, n_decode = 3;
    const std::vector<float> all = ordered.run(*ops, 0, n, n_decode);
    const std::vector<float> all_shuffled = shuffled.run(*ops, 0, n, n_decode);
    EXPECT_EQ(0, std::memcmp(all.data(), all_shuffled.data(), all.size() * sizeof(float))) << cpu_isa_name(isa);
    for (int t = 0; t < n; ++t) {
      const std::vector<float> one = shuffled.run(*ops, t, 1, t < n_decode ? 1 : 0);
      EXPECT_EQ(0, std::memcmp(one.data(), all.data() + t * row, row * sizeof(float)))
          << cpu_isa_name(isa) << " token " << t;
    }
  }
}

}  // namespace
}  // namespace ferry::kernels
