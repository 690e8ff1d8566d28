// RefOps against hand-computed values: rms_norm, matmul, embed, add/scale, RoPE (normal, NeoX,
// scaling, frequency factors), KV store + attention (GQA, causal and sequence masks, sliding window,
// soft-cap), GLU activations, gather_rows. Values are chosen exactly representable in F16 where
// they pass through the KV cache.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/ref/ref_ops.h"
#include "tensor/quant.h"
#include "tensor/quant_blocks.h"

namespace ferry::kernels {
namespace {

TensorView f32(std::vector<float>& v, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1) {
  EXPECT_EQ(static_cast<int64_t>(v.size()), ne0 * ne1 * ne2);
  return TensorView::make(DType::F32, v.data(), ne0, ne1, ne2);
}
TensorView i32(std::vector<int32_t>& v) {
  return TensorView::make(DType::I32, v.data(), static_cast<int64_t>(v.size()));
}

TEST(RefOps, RmsNorm) {
  RefOps ops;
  std::vector<float> x = {1, 2, 3, 4, -2, 0, 0, 0}, w = {1, 1, 2, 0.5f}, y(8);
  ops.rms_norm(f32(x, 4, 2), f32(w, 4), 0.f, f32(y, 4, 2));
  const double inv0 = 1.0 / std::sqrt(7.5), inv1 = 1.0 / std::sqrt(1.0);
  EXPECT_NEAR(y[0], 1 * inv0, 1e-6);
  EXPECT_NEAR(y[1], 2 * inv0, 1e-6);
  EXPECT_NEAR(y[2], 3 * inv0 * 2, 1e-6);
  EXPECT_NEAR(y[3], 4 * inv0 * 0.5, 1e-6);
  EXPECT_NEAR(y[4], -2 * inv1, 1e-6);
  // eps matters, and in place works: x = [3, 4] with eps 1 -> 1/sqrt(12.5 + 1).
  std::vector<float> z = {3, 4}, w2 = {1, 1};
  ops.rms_norm(f32(z, 2), f32(w2, 2), 1.f, f32(z, 2));
  EXPECT_NEAR(z[0], 3 / std::sqrt(13.5), 1e-6);
  EXPECT_NEAR(z[1], 4 / std::sqrt(13.5), 1e-6);
}

TEST(RefOps, RmsNormPerHead) {
  // [head_dim 2, 2 heads, 1 token]: each head normalised on its own.
  RefOps ops;
  std::vector<float> x = {3, 4, 1, 1}, w = {1, 2};
  TensorView v = TensorView::make(DType::F32, x.data(), 2, 2, 1);
  ops.rms_norm(v, f32(w, 2), 0.f, v);
  EXPECT_NEAR(x[0], 3 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(x[1], 8 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(x[2], 1, 1e-6);
  EXPECT_NEAR(x[3], 2, 1e-6);
}

TEST(RefOps, MatmulF32) {
  RefOps ops;
  // W [K=3, N=2]: row n holds the weights of output n.
  std::vector<float> w = {1, 2, 3, -1, 0, 1}, x = {1, 1, 1, 2, 0, -1}, y(4);
  ops.matmul(f32(w, 3, 2), f32(x, 3, 2), f32(y, 2, 2));
  EXPECT_FLOAT_EQ(y[0], 6);
  EXPECT_FLOAT_EQ(y[1], 0);
  EXPECT_FLOAT_EQ(y[2], -1);
  EXPECT_FLOAT_EQ(y[3], -3);
}

TEST(RefOps, MatmulQ8_0MatchesDequantizedDot) {
  RefOps ops;
  const int K = 64, N = 3;
  std::vector<float> wf(K * N), x(K), y(N);
  for (int i = 0; i < K * N; ++i) wf[i] = std::sin(0.37f * i);
  for (int i = 0; i < K; ++i) x[i] = std::cos(0.11f * i);
  std::vector<uint8_t> wq(row_bytes(DType::Q8_0, K) * N);
  for (int n = 0; n < N; ++n) quantize_row(DType::Q8_0, wf.data() + n * K, wq.data() + n * row_bytes(DType::Q8_0, K), K);
  ops.matmul(TensorView::make(DType::Q8_0, wq.data(), K, N), f32(x, K), f32(y, N));
  std::vector<float> row(K);
  for (int n = 0; n < N; ++n) {
    dequantize_row(DType::Q8_0, wq.data() + n * row_bytes(DType::Q8_0, K), row.data(), K);
    double want = 0;
    for (int k = 0; k < K; ++k) want += static_cast<double>(row[k]) * x[k];
    EXPECT_NEAR(y[n], want, 1e-5);
  }
}

TEST(RefOps, EmbedScalesRows) {
  RefOps ops;
  std::vector<float> table = {1, 2, 3, 4, 5, 6};  // [d=2, vocab=3]
  std::vector<int32_t> tok = {2, 0, 2};
  std::vector<float> y(6);
  ops.embed(f32(table, 2, 3), i32(tok), 0.5f, f32(y, 2, 3));
  EXPECT_EQ(y, (std::vector<float>{2.5f, 3, 0.5f, 1, 2.5f, 3}));
}

TEST(RefOps, AddBroadcastScaleGather) {
  RefOps ops;
  std::vector<float> a = {1, 2, 3, 4}, b = {10, 20}, y(4);
  ops.add(f32(a, 2, 2), f32(b, 2), f32(y, 2, 2));
  EXPECT_EQ(y, (std::vector<float>{11, 22, 13, 24}));
  ops.add(f32(a, 2, 2), f32(y, 2, 2), f32(a, 2, 2));  // in place, same shape
  EXPECT_EQ(a, (std::vector<float>{12, 24, 16, 28}));
  ops.scale(f32(a, 2, 2), 0.25f, f32(a, 2, 2));
  EXPECT_EQ(a, (std::vector<float>{3, 6, 4, 7}));
  std::vector<float> g(4);
  const int32_t rows[2] = {1, 1};
  ops.gather_rows(f32(a, 2, 2), rows, f32(g, 2, 2));
  EXPECT_EQ(g, (std::vector<float>{4, 7, 4, 7}));
}

TEST(RefOps, Glu) {
  RefOps ops;
  std::vector<float> g = {1, -2, 0, 3}, u = {2, 1, 5, -1}, y(4);
  ops.glu(f32(g, 4), f32(u, 4), Activation::kSilu, f32(y, 4));
  EXPECT_NEAR(y[0], 2.0 / (1 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(y[1], -2.0 / (1 + std::exp(2.0)), 1e-6);
  EXPECT_NEAR(y[2], 0, 1e-7);
  EXPECT_NEAR(y[3], -3.0 / (1 + std::exp(-3.0)), 1e-6);
  ops.glu(f32(g, 4), f32(u, 4), Activation::kGeluTanh, f32(y, 4));
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), by hand: gelu(1) = 0.8411920, gelu(-2) = -0.0454023,
  // gelu(3) = 2.9963627.
  EXPECT_NEAR(y[0], 2 * 0.8411920, 1e-6);
  EXPECT_NEAR(y[1], -0.0454023, 1e-6);
  EXPECT_NEAR(y[2], 0, 1e-7);
  EXPECT_NEAR(y[3], -2.9963627, 1e-6);
}

struct RopeCase {
  std::vector<int32_t> pos, seq, cell;
  BatchMeta meta() {
    BatchMeta m;
    m.n_tokens = static_cast<int32_t>(pos.size());
    m.pos = i32(pos);
    m.seq = i32(seq);
    m.cell = i32(cell);
    return m;
  }
};

TEST(RefOps, RopeNormalAndNeox) {
  RefOps ops;
  RopeCase rc{{1}, {0}, {0}};
  RopeParams p;
  p.n_rot = 4;
  p.freq_base = 10000.f;
  // theta_0 = pos * 1 = 1, theta_1 = pos * 10000^(-2/4) = 0.01.
  std::vector<float> x = {1, 0, 0, 1};
  ops.rope(TensorView::make(DType::F32, x.data(), 4, 1, 1), rc.meta(), p);
  // Normal: pairs (0,1) by theta_0 and (2,3) by theta_1.
  EXPECT_NEAR(x[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(x[1], std::sin(1.0), 1e-6);
  EXPECT_NEAR(x[2], -std::sin(0.01), 1e-6);
  EXPECT_NEAR(x[3], std::cos(0.01), 1e-6);

  std::vector<float> y = {1, 0, 0, 1};
  p.neox = true;
  ops.rope(TensorView::make(DType::F32, y.data(), 4, 1, 1), rc.meta(), p);
  // NeoX: pairs (0,2) by theta_0 and (1,3) by theta_1.
  EXPECT_NEAR(y[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(y[2], std::sin(1.0), 1e-6);
  EXPECT_NEAR(y[1], -std::sin(0.01), 1e-6);
  EXPECT_NEAR(y[3], std::cos(0.01), 1e-6);
}

TEST(RefOps, RopeScalingFactorsAndPositions) {
  RefOps ops;
  RopeCase rc{{0, 3}, {0, 0}, {0, 1}};
  RopeParams p;
  p.n_rot = 4;
  p.freq_base = 100.f;
  p.freq_scale = 0.5f;
  std::vector<float> ff = {1.f, 4.f};
  p.freq_factors = TensorView::make(DType::F32, ff.data(), 2);
  // 2 heads x 2 tokens; token 0 at pos 0 is unchanged.
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 1, 0, 1, 0, 0, 1, 0, 1};
  ops.rope(TensorView::make(DType::F32, x.data(), 4, 2, 2), rc.meta(), p);
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(x[i], static_cast<float>(i + 1));
  // Token 1, pos 3: theta_0 = 3 * 0.5 = 1.5; theta_1 = 3 * 0.5 * 100^(-1/2) / 4 = 0.0375.
  const double t0 = 1.5, t1 = 0.0375;
  EXPECT_NEAR(x[8], std::cos(t0), 1e-6);   // (1, 0) by t0
  EXPECT_NEAR(x[9], std::sin(t0), 1e-6);
  EXPECT_NEAR(x[10], std::cos(t1), 1e-6);  // (1, 0) by t1
  EXPECT_NEAR(x[11], std::sin(t1), 1e-6);
  EXPECT_NEAR(x[12], -std::sin(t0), 1e-6);  // second head (0, 1) by t0
  EXPECT_NEAR(x[13], std::cos(t0), 1e-6);
}

TEST(RefOps, RopePartialRotationLeavesTail) {
  RefOps ops;
  RopeCase rc{{2}, {0}, {0}};
  RopeParams p;
  p.n_rot = 2;
  std::vector<float> x = {1, 0, 7, 9};
  ops.rope(TensorView::make(DType::F32, x.data(), 4, 1, 1), rc.meta(), p);
  EXPECT_NEAR(x[0], std::cos(2.0), 1e-6);
  EXPECT_NEAR(x[1], std::sin(2.0), 1e-6);
  EXPECT_EQ(x[2], 7);
  EXPECT_EQ(x[3], 9);
}

// A small KV cache: head_dim 2, one KV head, 8 cells.
struct Cache {
  static constexpr int kCells = 8;
  std::vector<uint16_t> k = std::vector<uint16_t>(2 * kCells), v = std::vector<uint16_t>(2 * kCells);
  std::vector<int32_t> cpos = std::vector<int32_t>(kCells, -1), cseq = std::vector<int32_t>(kCells, -1);
  KvView view(int32_t n_cells = kCells) {
    KvView kv;
    kv.k = TensorView::make(DType::F16, k.data(), 2, kCells);
    kv.v = TensorView::make(DType::F16, v.data(), 2, kCells);
    kv.cell_pos = i32(cpos);
    kv.cell_seq = i32(cseq);
    kv.n_cells = n_cells;
    return kv;
  }
};

// Stores cells: seq 0 at pos 0..3 in cells 0..3 (k = [1,0],[0,1],[2,0],[1,1], v = [1,2],[3,4],[5,6],[7,8]),
// seq 1 pos 0 in cell 5 (k = [1,0], v = [-1,-1]).
void fill(RefOps& ops, Cache& c) {
  RopeCase rc{{0, 1, 2, 3, 0}, {0, 0, 0, 0, 1}, {0, 1, 2, 3, 5}};
  std::vector<float> k = {1, 0, 0, 1, 2, 0, 1, 1, 1, 0}, v = {1, 2, 3, 4, 5, 6, 7, 8, -1, -1};
  for (int t = 0; t < 5; ++t) {
    c.cpos[rc.cell[t]] = rc.pos[t];
    c.cseq[rc.cell[t]] = rc.seq[t];
  }
  ops.kv_store(f32(k, 2, 5), f32(v, 2, 5), rc.meta(), c.view());
}

// softmax(scores) . values, by hand.
std::vector<double> mix(const std::vector<double>& s, const std::vector<std::vector<double>>& vals) {
  double mx = -1e300, sum = 0;
  for (double x : s) mx = std::max(mx, x);
  std::vector<double> out(vals[0].size(), 0.0);
  for (double x : s) sum += std::exp(x - mx);
  for (size_t j = 0; j < s.size(); ++j)
    for (size_t i = 0; i < out.size(); ++i) out[i] += std::exp(s[j] - mx) / sum * vals[j][i];
  return out;
}

TEST(RefOps, KvStoreRoundsToF16) {
  RefOps ops;
  Cache c;
  fill(ops, c);
  EXPECT_EQ(fp16_to_fp32(c.k[2 * 2]), 2.f);
  EXPECT_EQ(fp16_to_fp32(c.v[2 * 5 + 1]), -1.f);
  RopeCase rc{{9}, {0}, {7}};
  std::vector<float> k = {0.1f, 1e-8f}, v = {65504.f, -3.f};
  ops.kv_store(f32(k, 2, 1), f32(v, 2, 1), rc.meta(), c.view());
  EXPECT_EQ(c.k[14], fp32_to_fp16(0.1f));
  EXPECT_EQ(fp16_to_fp32(c.v[14]), 65504.f);
}

TEST(RefOps, AttentionCausalGqaAndSequences) {
  RefOps ops;
  Cache c;
  fill(ops, c);
  // Three query tokens, 2 query heads sharing the one KV head:
  //   t0: seq 0 pos 1 (sees cells 0, 1); t1: seq 0 pos 3 (sees 0..3); t2: seq 1 pos 0 (sees cell 5).
  RopeCase rc{{1, 3, 0}, {0, 0, 1}, {1, 3, 5}};
  std::vector<float> q = {1, 0, 0, 2,  /*t1*/ 1, 0, 0.5f, 0.5f, /*t2*/ 3, 3, -1, 4};
  std::vector<float> out(12);
  AttnParams p;
  p.n_head = 2;
  p.n_kv_head = 1;
  p.head_dim = 2;
  p.scale = 0.5f;
  ops.attention(TensorView::make(DType::F32, q.data(), 2, 2, 3), c.view(6), rc.meta(), p, f32(out, 4, 3));
  const std::vector<std::vector<double>> V = {{1, 2}, {3, 4}, {5, 6}, {7, 8}};
  // t0 head 0: q=[1,0], k0.q=1, k1.q=0, scaled by 0.5.
  auto e = mix({0.5, 0.0}, {V[0], V[1]});
  EXPECT_NEAR(out[0], e[0], 1e-6);
  EXPECT_NEAR(out[1], e[1], 1e-6);
  // t0 head 1: q=[0,2]: k0.q=0, k1.q=2.
  e = mix({0.0, 1.0}, {V[0], V[1]});
  EXPECT_NEAR(out[2], e[0], 1e-6);
  EXPECT_NEAR(out[3], e[1], 1e-6);
  // t1 head 0: q=[1,0]: 1, 0, 2, 1.
  e = mix({0.5, 0.0, 1.0, 0.5}, V);
  EXPECT_NEAR(out[4], e[0], 1e-6);
  EXPECT_NEAR(out[5], e[1], 1e-6);
  // t1 head 1: q=[.5,.5]: .5, .5, 1, 1.
  e = mix({0.25, 0.25, 0.5, 0.5}, V);
  EXPECT_NEAR(out[6], e[0], 1e-6);
  EXPECT_NEAR(out[7], e[1], 1e-6);
  // t2 (seq 1) sees only its own cell: output = its value for both heads.
  for (int i = 8; i < 12; ++i) EXPECT_NEAR(out[i], -1.0, 1e-6);
}

TEST(RefOps, AttentionSlidingWindowAndSoftcap) {
  RefOps ops;
  Cache c;
  fill(ops, c);
  RopeCase rc{{3}, {0}, {3}};
  std::vector<float> q = {1, 0}, out(2);
  AttnParams p;
  p.n_head = 1;
  p.n_kv_head = 1;
  p.head_dim = 2;
  p.scale = 1.f;
  p.window = 2;  // pos 3 sees positions 2 and 3 only (3 - p < 2)
  ops.attention(TensorView::make(DType::F32, q.data(), 2, 1, 1), c.view(), rc.meta(), p, f32(out, 2, 1));
  auto e = mix({2.0, 1.0}, {{5, 6}, {7, 8}});
  EXPECT_NEAR(out[0], e[0], 1e-6);
  EXPECT_NEAR(out[1], e[1], 1e-6);

  p.window = 0;
  p.softcap = 1.5f;  // scores -> 1.5 tanh(s / 1.5)
  ops.attention(TensorView::make(DType::F32, q.data(), 2, 1, 1), c.view(), rc.meta(), p, f32(out, 2, 1));
  auto cap = [](double s) { return 1.5 * std::tanh(s / 1.5); };
  e = mix({cap(1), cap(0), cap(2), cap(1)}, {{1, 2}, {3, 4}, {5, 6}, {7, 8}});
  EXPECT_NEAR(out[0], e[0], 1e-6);
  EXPECT_NEAR(out[1], e[1], 1e-6);
}

TEST(RefOps, AttentionIgnoresCellsPastScanBoundAndEmptyCells) {
  RefOps ops;
  Cache c;
  fill(ops, c);
  c.cseq[2] = -1;  // emptied (seq_rm): cell 2 is no longer visible
  c.cpos[2] = -1;
  RopeCase rc{{3}, {0}, {3}};
  std::vector<float> q = {1, 0}, out(2);
  AttnParams p;
  p.n_head = 1;
  p.n_kv_head = 1;
  p.head_dim = 2;
  p.scale = 1.f;
  ops.attention(TensorView::make(DType::F32, q.data(), 2, 1, 1), c.view(4), rc.meta(), p, f32(out, 2, 1));
  auto e = mix({1.0, 0.0, 1.0}, {{1, 2}, {3, 4}, {7, 8}});
  EXPECT_NEAR(out[0], e[0], 1e-6);
  EXPECT_NEAR(out[1], e[1], 1e-6);
}

}  // namespace
}  // namespace ferry::kernels

namespace ferry::kernels {
namespace {

// ---- RefNumerics::kLlamaCpp: llama.cpp's rounding points --------------------------------------

TEST(RefOpsLlama, ActivationTypes) {
  EXPECT_EQ(activation_type(DType::Q4_0), DType::Q8_0);
  EXPECT_EQ(activation_type(DType::Q5_0), DType::Q8_0);
  EXPECT_EQ(activation_type(DType::Q8_0), DType::Q8_0);
  EXPECT_EQ(activation_type(DType::Q4_1), DType::Q8_1);
  EXPECT_EQ(activation_type(DType::Q5_1), DType::Q8_1);
  for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K})
    EXPECT_EQ(activation_type(t), DType::Q8_K);
  EXPECT_EQ(activation_type(DType::F16), DType::F16);
  EXPECT_EQ(activation_type(DType::BF16), DType::BF16);
  EXPECT_EQ(activation_type(DType::F32), DType::F32);
}

// One Q8_0 weight row of all ones (d = 1): the dot is the sum of the activation's 8-bit levels times
// the activation scale, so the levels can be read off.
TEST(RefOpsLlama, Q8ActivationsRoundHalfToEven) {
  RefOps ops(RefNumerics::kLlamaCpp);
  BlockQ8_0 w{};
  w.d = fp32_to_fp16(1.f);
  for (int j = 0; j < 32; ++j) w.qs[j] = j == 1 ? 1 : 0;  // picks element 1
  // amax 127 => scale 1: element 1 = 42.5 is an exact tie; ggml's x86 quantizer rounds it to 42
  // (half to even), the reference quantizer (x / d, ties away) to 43.
  std::vector<float> x(32, 0.f), y(1);
  x[0] = 127.f;
  x[1] = 42.5f;
  ops.matmul(TensorView::make(DType::Q8_0, &w, 32, 1), f32(x, 32), f32(y, 1));
  EXPECT_EQ(y[0], 42.f);
  x[1] = 43.5f;
  ops.matmul(TensorView::make(DType::Q8_0, &w, 32, 1), f32(x, 32), f32(y, 1));
  EXPECT_EQ(y[0], 44.f);
  RefOps exact;
  exact.matmul(TensorView::make(DType::Q8_0, &w, 32, 1), f32(x, 32), f32(y, 1));
  EXPECT_EQ(y[0], 43.5f);  // exact numerics: no activation rounding at all
}

TEST(RefOpsLlama, Q4_1UsesF16SumOfActivations) {
  // Q4_1 x Q8_1: (d_w d_x) * sum(q_w q_x) + m_w * s_x with s_x = F16(d_x * sum(q_x)).
  RefOps ops(RefNumerics::kLlamaCpp);
  BlockQ4_1 w{};
  w.d = fp32_to_fp16(0.5f);
  w.m = fp32_to_fp16(0.75f);
  for (int j = 0; j < 16; ++j) w.qs[j] = static_cast<uint8_t>((j % 16) | ((15 - j % 16) << 4));
  std::vector<float> x(32), y(1);
  for (int j = 0; j < 32; ++j) x[j] = 0.37f * static_cast<float>(j) - 3.1f;
  ops.matmul(TensorView::make(DType::Q4_1, &w, 32, 1), f32(x, 32), f32(y, 1));
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float d = amax / 127.f, id = 127.f / amax;
  int qx[32], sum = 0;
  for (int j = 0; j < 32; ++j) sum += qx[j] = static_cast<int>(std::nearbyint(x[j] * id));
  int64_t sumi = 0;
  for (int j = 0; j < 16; ++j) sumi += (j % 16) * qx[j] + (15 - j % 16) * qx[j + 16];
  const float dx = fp16_to_fp32(fp32_to_fp16(d)), sx = fp16_to_fp32(fp32_to_fp16(d * static_cast<float>(sum)));
  const double want = static_cast<double>(0.5f * dx) * static_cast<double>(sumi) + static_cast<double>(0.75f * sx);
  EXPECT_FLOAT_EQ(y[0], static_cast<float>(want));
}

TEST(RefOpsLlama, F16WeightsSeeF16Activations) {
  RefOps ops(RefNumerics::kLlamaCpp);
  const uint16_t one = fp32_to_fp16(1.f);
  std::vector<uint16_t> w(2, one);
  std::vector<float> x = {1.f + 1.f / 4096.f, 0.f}, y(1);  // 1 + 2^-12 rounds to 1 in F16
  ops.matmul(TensorView::make(DType::F16, w.data(), 2, 1), f32(x, 2), f32(y, 1));
  EXPECT_EQ(y[0], 1.f);
}

TEST(RefOpsLlama, GeluThroughF16Table) {
  for (float x : {-12.f, -10.f, -3.3f, -0.5f, 0.f, 0.1234567f, 1.f, 2.71828f, 9.99f, 10.f, 25.f}) {
    float want;
    if (x <= -10.f) {
      want = 0.f;
    } else if (x >= 10.f) {
      want = x;
    } else {
      const float h = fp16_to_fp32(fp32_to_fp16(x));
      want = fp16_to_fp32(fp32_to_fp16(0.5f * h * (1.f + std::tanh(0.7978845608f * h * (1.f + 0.044715f * h * h)))));
    }
    EXPECT_EQ(gelu_tanh_ggml(x), want) << x;
    EXPECT_NEAR(gelu_tanh_ggml(x), x >= 10.f ? x : gelu_tanh_ref(x), 2e-3 * std::max(1.f, std::fabs(x))) << x;
  }
}

TEST(RefOpsLlama, AttentionRoundsQueryAndProbabilitiesToF16) {
  RefOps ops(RefNumerics::kLlamaCpp);
  Cache c;
  fill(ops, c);
  RopeCase rc{{1}, {0}, {1}};
  // q = [1 + 2^-12, 0]: F16 turns it into [1, 0]; scores 1 and 0 (cells 0 and 1).
  std::vector<float> q = {1.f + 1.f / 4096.f, 0.f}, out(2);
  AttnParams p;
  p.n_head = 1;
  p.n_kv_head = 1;
  p.head_dim = 2;
  p.scale = 1.f;
  ops.attention(TensorView::make(DType::F32, q.data(), 2, 1, 1), c.view(), rc.meta(), p, f32(out, 2, 1));
  const float e = std::exp(-1.f), inv = static_cast<float>(1.0 / (1.0 + static_cast<double>(e)));
  const float p0 = fp16_to_fp32(fp32_to_fp16(1.f * inv)), p1 = fp16_to_fp32(fp32_to_fp16(e * inv));
  EXPECT_FLOAT_EQ(out[0], p0 * 1.f + p1 * 3.f);
  EXPECT_FLOAT_EQ(out[1], p0 * 2.f + p1 * 4.f);
}

TEST(RefOpsLlama, CloseToExactElsewhere) {
  RefOps exact, llama(RefNumerics::kLlamaCpp);
  // rms_norm and rope differ only by float vs double rounding.
  std::vector<float> x(64), w(64), a(64), b(64);
  for (int i = 0; i < 64; ++i) {
    x[i] = std::sin(1.3f * i);
    w[i] = 1.f + 0.01f * i;
  }
  exact.rms_norm(f32(x, 64), f32(w, 64), 1e-6f, f32(a, 64));
  llama.rms_norm(f32(x, 64), f32(w, 64), 1e-6f, f32(b, 64));
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(a[i], b[i], 1e-6);
  RopeCase rc{{777}, {0}, {0}};
  RopeParams p;
  p.n_rot = 64;
  p.freq_base = 1e6f;
  p.neox = true;
  a = x;
  b = x;
  exact.rope(TensorView::make(DType::F32, a.data(), 64, 1, 1), rc.meta(), p);
  llama.rope(TensorView::make(DType::F32, b.data(), 64, 1, 1), rc.meta(), p);
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(a[i], b[i], 1e-4);  // float angles at position 777
}

}  // namespace
}  // namespace ferry::kernels
