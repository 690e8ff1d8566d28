// CpuOps element-wise, RoPE, KV store and attention ops against RefOps with llama.cpp numerics (the
// rounding points CpuOps reproduces) on random inputs of odd sizes, at every dispatch level this
// machine supports (token counts 1, 3, 17, 69; GQA; several sequences; sliding window; soft-cap), plus
// the activation quantizers bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/generic_impl.h"
#include "kernels/cpu/kernels.h"
#include "kernels/ref/ref_ops.h"
#include "tensor/quant.h"
#include "tensor/quant_blocks.h"

namespace ferry::kernels {
namespace {

std::vector<CpuIsa> levels() {
  std::vector<CpuIsa> v;
  for (CpuIsa isa : kAllCpuIsas)
    if (cpu_isa_supported(isa)) v.push_back(isa);
  return v;
}

std::vector<float> randn(size_t n, uint32_t seed, float sigma = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

TensorView f32(std::vector<float>& v, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1) {
  return TensorView::make(DType::F32, v.data(), ne0, ne1, ne2);
}
TensorView i32(std::vector<int32_t>& v) {
  return TensorView::make(DType::I32, v.data(), static_cast<int64_t>(v.size()));
}

// |got - want| <= abs + rel |want| everywhere, except that up to `loose_frac` of the elements may be
// off by `loose_rel` (one F16 rounding step landing the other way after a 1-ulp float difference).
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel, double abs,
                  const std::string& what, double loose_frac = 0.0, double loose_rel = 0.0) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  size_t loose = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    const double err = std::fabs(got[i] - want[i]);
    if (err <= abs + rel * std::fabs(want[i])) continue;
    if (err <= abs + loose_rel * std::fabs(want[i])) {
      ++loose;
      continue;
    }
    ++bad;
    ADD_FAILURE() << what << ": [" << i << "] got " << got[i] << " want " << want[i];
  }
  EXPECT_LE(static_cast<double>(loose), loose_frac * static_cast<double>(got.size()) + 1) << what;
}

const int64_t kTokens[] = {1, 3, 17, 69};

TEST(CpuOps, RmsNormAddScaleGlu) {
  RefOps ref(RefNumerics::kLlamaCpp);
  for (CpuIsa isa : levels()) {
    auto ops = make_cpu_ops(2, isa);
    const std::string tag = cpu_isa_name(isa);
    for (int64_t d : {5, 64, 577}) {
      for (int64_t T : kTokens) {
        std::vector<float> x = randn(d * T, 1), w = randn(d, 2), y0(d * T), y1(d * T);
        ref.rms_norm(f32(x, d, T), f32(w, d), 1e-5f, f32(y0, d, T));
        ops->rms_norm(f32(x, d, T), f32(w, d), 1e-5f, f32(y1, d, T));
        expect_close(y1, y0, 1e-5, 1e-6, tag + " rms_norm");
        // In place, per head ([d, 3, T] rows).
        std::vector<float> xh = randn(d * 3 * T, 3), zh = xh;
        TensorView vr = TensorView::make(DType::F32, xh.data(), d, 3, T);
        TensorView vc = TensorView::make(DType::F32, zh.data(), d, 3, T);
        ref.rms_norm(vr, f32(w, d), 1e-6f, vr);
        ops->rms_norm(vc, f32(w, d), 1e-6f, vc);
        expect_close(zh, xh, 1e-5, 1e-6, tag + " rms_norm per head");

        std::vector<float> b = randn(d * T, 4), bias = randn(d, 5), s0(d * T), s1(d * T);
        ref.add(f32(x, d, T), f32(b, d, T), f32(s0, d, T));
        ops->add(f32(x, d, T), f32(b, d, T), f32(s1, d, T));
        expect_close(s1, s0, 0, 0, tag + " add");
        std::vector<float> xb = x, xc = x;
        ref.add(f32(xb, d, T), f32(bias, d), f32(xb, d, T));
        ops->add(f32(xc, d, T), f32(bias, d), f32(xc, d, T));
        expect_close(xc, xb, 0, 0, tag + " add bias in place");
        ref.scale(f32(x, d, T), 0.37f, f32(s0, d, T));
        ops->scale(f32(x, d, T), 0.37f, f32(s1, d, T));
        expect_close(s1, s0, 0, 0, tag + " scale");

        std::vector<float> g = randn(d * T, 6, 3.f), u = randn(d * T, 7);
        for (Activation act : {Activation::kSilu, Activation::kGeluTanh, Activation::kSwigluOai}) {
          ref.glu(f32(g, d, T), f32(u, d, T), act, f32(s0, d, T));
          std::vector<float> gc = g;
          ops->glu(f32(gc, d, T), f32(u, d, T), act, f32(gc, d, T));  // in place
          expect_close(gc, s0, 2e-6, 1e-6, tag + " glu", 0.01, 1.0 / 1024);
        }
      }
    }
    // Extreme activation inputs: no NaN, the right limits.
    std::vector<float> g = {-1000.f, -90.f, -20.f, 0.f, 20.f, 90.f, 1000.f, -1e-8f, 3.f}, u(g.size(), 1.f);
    std::vector<float> r0(g.size()), r1(g.size());
    for (Activation act : {Activation::kSilu, Activation::kGeluTanh, Activation::kSwigluOai}) {
      ref.glu(f32(g, 9), f32(u, 9), act, f32(r0, 9));
      ops->glu(f32(g, 9), f32(u, 9), act, f32(r1, 9));
      expect_close(r1, r0, 2e-6, 1e-6, tag + " glu extremes", 0.2, 1.0 / 1024);
    }
  }
  // gpt-oss's clamped SwiGLU by hand: g' = min(g, 7), u' = clamp(u, -7, 7), g' / (1 + exp(-1.702 g')) * (u' + 1).
  std::vector<float> g = {-3.f, 0.f, 2.f, 7.f, 9.f, 100.f}, u = {0.5f, -9.f, 8.f, 1.f, -2.f, 0.f}, y(6);
  auto ops = make_cpu_ops(1, best_cpu_isa());
  ops->glu(f32(g, 6), f32(u, 6), Activation::kSwigluOai, f32(y, 6));
  for (size_t i = 0; i < g.size(); ++i) {
    const double x = std::min(g[i], 7.f), v = std::clamp(u[i], -7.f, 7.f);
    EXPECT_NEAR(y[i], x / (1.0 + std::exp(-1.702 * x)) * (v + 1.0), 1e-5 * (1 + std::fabs(y[i]))) << i;
  }
}

TEST(CpuOps, Embed) {
  RefOps ref(RefNumerics::kLlamaCpp);
  const int64_t vocab = 37;
  for (DType t : kWeightTypes) {
    const int64_t d = traits(t).block_elems == 256 ? 512 : 96;
    std::vector<float> tf = randn(d * vocab, 11);
    std::vector<uint8_t> table(row_bytes(t, d) * vocab);
    for (int64_t r = 0; r < vocab; ++r) quantize_row(t, tf.data() + r * d, table.data() + row_bytes(t, d) * r, d);
    std::vector<int32_t> ids = {0, 36, 5, 5, 17};
    std::vector<float> y0(d * 5), y1(d * 5);
    TensorView tv = TensorView::make(t, table.data(), d, vocab);
    ref.embed(tv, i32(ids), 1.5f, f32(y0, d, 5));
    for (CpuIsa isa : levels()) {
      auto ops = make_cpu_ops(2, isa);
      ops->embed(tv, i32(ids), 1.5f, f32(y1, d, 5));
      expect_close(y1, y0, 0, 0, std::string(dtype_name(t)) + " embed");
    }
  }
}

TEST(CpuOps, Rope) {
  RefOps ref(RefNumerics::kLlamaCpp);
  const int64_t hd = 64, n_head = 3;
  std::vector<float> ff = randn(hd / 2, 21);
  for (float& f : ff) f = 1.f + std::fabs(f);
  for (CpuIsa isa : levels()) {
    auto ops = make_cpu_ops(2, isa);
    for (int64_t T : kTokens) {
      std::vector<int32_t> pos(T);
      for (int64_t t = 0; t < T; ++t) pos[t] = static_cast<int32_t>((t * 37) % 4099);
      BatchMeta batch;
      batch.n_tokens = static_cast<int32_t>(T);
      batch.pos = i32(pos);
      for (int variant = 0; variant < 5; ++variant) {
        RopeParams p;
        if (variant == 4) {  // YaRN as gpt-oss sets it: factor 32 over 4096 positions, base 150000
          p.n_rot = static_cast<int32_t>(hd);
          p.freq_base = 150000.f;
          p.freq_scale = 1.f / 32.f;
          p.neox = true;
          p.ext_factor = 1.f;
          p.attn_factor = 1.f;
          p.n_ctx_orig = 4096;
          std::vector<float> x0 = randn(hd * n_head * T, 30), x1 = x0;
          ref.rope(f32(x0, hd, n_head, T), batch, p);
          ops->rope(f32(x1, hd, n_head, T), batch, p);
          expect_close(x1, x0, 2e-5, 2e-5, std::string(cpu_isa_name(isa)) + " rope yarn");
          continue;
        }
        p.n_rot = variant == 3 ? 32 : static_cast<int32_t>(hd);  // partial rotary
        p.freq_base = variant == 2 ? 500000.f : 10000.f;
        p.freq_scale = variant == 2 ? 0.25f : 1.f;
        p.neox = variant % 2 == 1;
        if (variant == 2) p.freq_factors = f32(ff, hd / 2);
        std::vector<float> x0 = randn(hd * n_head * T, 22 + variant), x1 = x0;
        ref.rope(f32(x0, hd, n_head, T), batch, p);
        ops->rope(f32(x1, hd, n_head, T), batch, p);
        expect_close(x1, x0, 2e-5, 2e-5, std::string(cpu_isa_name(isa)) + " rope " + std::to_string(variant));
      }
    }
  }
}

// rope_qk_store (one pass per token) equals rope of q, rope of k, then kv_store, bit for bit.
TEST(CpuOps, RopeQkStoreEqualsSeparateOps) {
  const int64_t hd = 64, n_head = 8, n_kv = 2, kvd = hd * n_kv, n_cells = 200;
  for (CpuIsa isa : levels()) {
    auto ops = make_cpu_ops(2, isa);
    for (int64_t T : kTokens) {
      std::vector<int32_t> pos(T), cell(T);
      for (int64_t t = 0; t < T; ++t) {
        pos[t] = static_cast<int32_t>((t * 37) % 4099);
        cell[t] = static_cast<int32_t>((t * 53 + 7) % n_cells);
      }
      BatchMeta batch;
      batch.n_tokens = static_cast<int32_t>(T);
      batch.pos = i32(pos);
      batch.cell = i32(cell);
      for (int variant = 0; variant < 2; ++variant) {
        RopeParams p;
        p.n_rot = static_cast<int32_t>(hd);
        p.freq_base = 500000.f;
        p.neox = variant == 1;
        std::vector<float> q0 = randn(hd * n_head * T, 30 + variant), k0 = randn(kvd * T, 40 + variant);
        std::vector<float> v = randn(kvd * T, 50 + variant), q1 = q0, k1 = k0;
        std::vector<uint16_t> kc0(kvd * n_cells, 1), vc0(kvd * n_cells, 2), kc1 = kc0, vc1 = vc0;
        auto kv_of = [&](std::vector<uint16_t>& kb, std::vector<uint16_t>& vb) {
          KvView kv;
          kv.k = TensorView::make(DType::F16, kb.data(), kvd, n_cells);
          kv.v = TensorView::make(DType::F16, vb.data(), kvd, n_cells);
          return kv;
        };
        ops->rope_qk(f32(q0, hd, n_head, T), f32(k0, hd, n_kv, T), batch, p);
        ops->kv_store(f32(k0, kvd, T), f32(v, kvd, T), batch, kv_of(kc0, vc0));
        ops->rope_qk_store(f32(q1, hd, n_head, T), f32(k1, hd, n_kv, T), f32(k1, kvd, T), f32(v, kvd, T), batch, p,
                           kv_of(kc1, vc1));
        const std::string what = std::string(cpu_isa_name(isa)) + " T=" + std::to_string(T);
        ASSERT_EQ(q1, q0) << what;
        ASSERT_EQ(k1, k0) << what;
        ASSERT_EQ(kc1, kc0) << what;
        ASSERT_EQ(vc1, vc0) << what;
      }
    }
  }
}

// A cache of n_cells cells holding several sequences; a batch of T new tokens stored with kv_store,
// then attention. Cells are shuffled (a token's history is not contiguous).
struct AttnCase {
  int64_t hd, n_head, n_kv_head, T, n_prev;
  int window;
  float softcap;
  bool sinks = false;  // gpt-oss's per-head sink logits
};

void run_attention_case(const AttnCase& c, uint32_t seed) {
  RefOps ref(RefNumerics::kLlamaCpp);
  const int64_t kvd = c.hd * c.n_kv_head, n_cells = c.n_prev + c.T + 5;
  std::mt19937 rng(seed);
  // Cell assignment: a random permutation.
  std::vector<int32_t> perm(n_cells);
  for (int64_t i = 0; i < n_cells; ++i) perm[i] = static_cast<int32_t>(i);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> cell_pos(n_cells, -1), cell_seq(n_cells, -1);
  // Previous tokens: two sequences (0 and 1) interleaved.
  std::vector<uint16_t> kc(kvd * n_cells, 0), vc(kvd * n_cells, 0);
  std::vector<float> prevk = randn(kvd * c.n_prev, seed + 1), prevv = randn(kvd * c.n_prev, seed + 2);
  int32_t next_pos[2] = {0, 0};
  for (int64_t i = 0; i < c.n_prev; ++i) {
    const int s = static_cast<int>(i % 2);
    const int32_t cell = perm[i];
    cell_pos[cell] = next_pos[s]++;
    cell_seq[cell] = s;
    for (int64_t j = 0; j < kvd; ++j) {
      kc[cell * kvd + j] = fp32_to_fp16(prevk[i * kvd + j]);
      vc[cell * kvd + j] = fp32_to_fp16(prevv[i * kvd + j]);
    }
  }
  // New tokens: alternate sequences too.
  std::vector<int32_t> pos(c.T), seq(c.T), cell(c.T);
  for (int64_t t = 0; t < c.T; ++t) {
    const int s = static_cast<int>(t % 2);
    seq[t] = s;
    pos[t] = next_pos[s]++;
    cell[t] = perm[c.n_prev + t];
    cell_pos[cell[t]] = pos[t];
    cell_seq[cell[t]] = s;
  }
  BatchMeta batch;
  batch.n_tokens = static_cast<int32_t>(c.T);
  batch.pos = i32(pos);
  batch.seq = i32(seq);
  batch.cell = i32(cell);
  std::vector<float> k = randn(kvd * c.T, seed + 3), v = randn(kvd * c.T, seed + 4);
  std::vector<float> q = randn(c.hd * c.n_head * c.T, seed + 5, 0.5f);
  AttnParams ap;
  ap.n_head = static_cast<int32_t>(c.n_head);
  ap.n_kv_head = static_cast<int32_t>(c.n_kv_head);
  ap.head_dim = static_cast<int32_t>(c.hd);
  ap.scale = 1.f / std::sqrt(static_cast<float>(c.hd));
  ap.window = c.window;
  ap.softcap = c.softcap;
  std::vector<float> sinks = randn(c.n_head, seed + 6, 2.f);
  if (c.sinks) ap.sinks = f32(sinks, c.n_head);

  auto kv_of = [&](std::vector<uint16_t>& kb, std::vector<uint16_t>& vb) {
    KvView kv;
    kv.k = TensorView::make(DType::F16, kb.data(), kvd, n_cells);
    kv.v = TensorView::make(DType::F16, vb.data(), kvd, n_cells);
    kv.cell_pos = i32(cell_pos);
    kv.cell_seq = i32(cell_seq);
    kv.n_cells = static_cast<int32_t>(n_cells);
    return kv;
  };
  std::vector<uint16_t> k0 = kc, v0 = vc;
  std::vector<float> out0(c.hd * c.n_head * c.T);
  ref.kv_store(f32(k, kvd, c.T), f32(v, kvd, c.T), batch, kv_of(k0, v0));
  ref.attention(f32(q, c.hd, c.n_head, c.T), kv_of(k0, v0), batch, ap, f32(out0, c.hd * c.n_head, c.T));
  for (CpuIsa isa : levels()) {
    auto ops = make_cpu_ops(2, isa);
    std::vector<uint16_t> k1 = kc, v1 = vc;
    std::vector<float> out1(out0.size());
    ops->kv_store(f32(k, kvd, c.T), f32(v, kvd, c.T), batch, kv_of(k1, v1));
    ASSERT_EQ(k1, k0) << "kv_store K";
    ASSERT_EQ(v1, v0) << "kv_store V";
    ops->attention(f32(q, c.hd, c.n_head, c.T), kv_of(k1, v1), batch, ap, f32(out1, c.hd * c.n_head, c.T));
    // Probabilities are rounded to F16 (as llama.cpp): a 1-ulp float difference in one exp moves a
    // probability by one F16 step (2^-11 relative), which moves the output by up to ~2^-11 |v|.
    expect_close(out1, out0, 1e-3, 1e-3,
                 std::string(cpu_isa_name(isa)) + " attention hd=" + std::to_string(c.hd) + " T=" +
                     std::to_string(c.T) + " heads=" + std::to_string(c.n_head) + "/" + std::to_string(c.n_kv_head));
    // Work split by KV-head groups (1 thread) or by query heads (8 threads, few tokens): same numbers.
    auto ops1 = make_cpu_ops(1, isa), ops8 = make_cpu_ops(8, isa);
    std::vector<float> o1(out0.size()), o8(out0.size());
    ops1->attention(f32(q, c.hd, c.n_head, c.T), kv_of(k1, v1), batch, ap, f32(o1, c.hd * c.n_head, c.T));
    ops8->attention(f32(q, c.hd, c.n_head, c.T), kv_of(k1, v1), batch, ap, f32(o8, c.hd * c.n_head, c.T));
    ASSERT_EQ(o1, o8) << cpu_isa_name(isa) << " attention: 1 vs 8 threads";
  }
}

TEST(CpuOps, Attention) {
  uint32_t seed = 100;
  for (int64_t T : kTokens) {
    run_attention_case({64, 4, 4, T, 10, 0, 0.f}, seed++);    // MHA
    run_attention_case({128, 8, 2, T, 33, 0, 0.f}, seed++);   // GQA 4
    run_attention_case({128, 8, 2, T, 300, 0, 0.f}, seed++);  // GQA 4, long history (split over threads)
    run_attention_case({64, 6, 1, T, 7, 5, 0.f}, seed++);     // MQA + sliding window
    run_attention_case({72, 4, 2, T, 20, 0, 30.f}, seed++);   // head_dim not a multiple of 16, soft-cap
    run_attention_case({40, 2, 2, T, 0, 0, 0.f}, seed++);     // head_dim % 16 != 0, empty history
    run_attention_case({64, 9, 3, T, 200, 0, 0.f}, seed++);   // GQA 3 (smollm2), several cell chunks
    run_attention_case({256, 4, 1, T, 130, 0, 0.f}, seed++);  // head_dim 256 (gemma3), MQA
    run_attention_case({80, 6, 2, T, 150, 9, 0.f}, seed++);   // head_dim % 32 == 16, window
    run_attention_case({64, 8, 2, T, 40, 16, 0.f, true}, seed++);  // gpt-oss: sinks, window
    run_attention_case({64, 8, 2, T, 300, 0, 0.f, true}, seed++);  // sinks over several cell chunks
    // llama3-8b heads, > 32 chunks of 64 cells (decode sizes only: the reference is slow at T = 69).
    if (T <= 3) run_attention_case({128, 32, 8, T, 2500, 0, 0.f}, seed);
    ++seed;
  }
}

TEST(CpuOps, GatherRows) {
  std::vector<float> x = randn(13 * 6, 5), y(13 * 3);
  std::vector<int32_t> rows = {5, 0, 5};
  for (CpuIsa isa : levels()) {
    auto ops = make_cpu_ops(2, isa);
    ops->gather_rows(f32(x, 13, 6), rows.data(), f32(y, 13, 3));
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 13; ++j) ASSERT_EQ(y[i * 13 + j], x[rows[i] * 13 + j]);
  }
}

// The act quantizers reproduce llama.cpp's x86 Q8_0 / Q8_1 and ferry::quantize_row's Q8_K exactly.
TEST(CpuOps, ActQuantizersBitExact) {
  using namespace ferry::kernels::cpu;
  for (int64_t K : {256, 768}) {
    std::vector<float> x = randn(K, 9, 2.f);
    x[3] = 0.f;
    x[100] = -7.5f;  // ties and an outlier
    for (int64_t i = 0; i < 32; ++i) x[64 + i] = 0.f;  // an all-zero block
    std::vector<uint8_t> act(q_act_bytes(K, 16) + q_act_bytes(K, 32));
    // Q8_0 / Q8_1: llama.cpp's x86 quantizer (d = amax / 127, round-half-even(x * 127 / amax)).
    for (bool q81 : {false, true}) {
      quantize_act_q8_legacy(x.data(), K, act.data(), q81);
      const ActView a = act_view(act.data(), K, 32);
      for (int64_t b = 0; b < K / 32; ++b) {
        float amax = 0.f;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
        const float d = amax / 127.f, id = amax != 0.f ? 127.f / amax : 0.f;
        int sum = 0;
        for (int i = 0; i < 32; ++i) {
          const int q = static_cast<int>(std::nearbyint(x[32 * b + i] * id));
          ASSERT_EQ(a.q[32 * b + i], q) << "block " << b;
          sum += q;
        }
        ASSERT_EQ(a.dx[b], fp16_to_fp32(fp32_to_fp16(d)));
        if (q81) ASSERT_EQ(a.sy[b], fp16_to_fp32(fp32_to_fp16(d * static_cast<float>(sum))));
        else ASSERT_EQ(a.sy[b], fp16_to_fp32(fp32_to_fp16(d)) * static_cast<float>(sum));
      }
    }
    // Q8_K, groups of 16 and 32.
    std::vector<BlockQ8_K> rk(K / 256);
    quantize_row(DType::Q8_K, x.data(), rk.data(), K);
    for (int G : {16, 32}) {
      quantize_act_q8_k(x.data(), K, act.data(), G);
      const ActView a = act_view(act.data(), K, G);
      for (int64_t b = 0; b < K / 256; ++b) {
        for (int i = 0; i < 256; ++i) ASSERT_EQ(a.q[256 * b + i], rk[b].qs[i]);
        for (int g = 0; g < 256 / G; ++g) {
          ASSERT_EQ(a.dx[b * (256 / G) + g], rk[b].d);
          int bs = 0;
          for (int j = 0; j < G / 16; ++j) bs += rk[b].bsums[g * (G / 16) + j];
          ASSERT_EQ(a.sy[b * (256 / G) + g], rk[b].d * static_cast<float>(bs));
        }
      }
    }
  }
}

// Every level's act converter (vectorized where the level has one) writes the same bytes as the
// portable one.
TEST(CpuOps, ActQuantizersSameAtEveryLevel) {
  using namespace ferry::kernels::cpu;
  // 1280: 40 legacy blocks (the AVX-512 Q8_0 / Q8_1 quantizer's 16-block groups and a tail).
  for (const int64_t K : {int64_t{1024}, int64_t{1280}}) {
    std::vector<float> x = randn(K, 19, 3.f);
    for (int i = 0; i < 32; ++i) x[256 + i] = 0.f;          // a zero legacy block
    for (int i = 512; i < 768; ++i) x[i] = 0.f;             // a zero super-block
    x[900] = 5.f;
    x[901] = -5.f;                                          // a tie of |max| with both signs
    x[10] = 0.5f / 127.f * 3.f;                             // a value near a rounding tie
    x[250] = -20.f;
    x[255] = 20.f;                                          // Q8_K: first |max| in a block's last 64, negative
    x[256 + 70] = 20.f;
    x[256 + 71] = -20.f;                                    // and in its second 64, positive
    for (DType t : kWeightTypes) {
      const KernelTable& ref = kernel_table(CpuIsa::kScalar);
      const MatKernel& r = ref.mat[static_cast<uint32_t>(t)];
      std::vector<uint8_t> want(r.act_bytes(K), 0xAB);
      r.quantize(x.data(), K, want.data());
      for (CpuIsa isa : levels()) {
        const MatKernel& m = kernel_table(isa).mat[static_cast<uint32_t>(t)];
        if (t == DType::BF16) continue;  // a different act form at some levels (bf16 pairs for vdpbf16ps)
        std::vector<uint8_t> got(m.act_bytes(K), 0xAB);
        m.quantize(x.data(), K, got.data());
        EXPECT_EQ(got, want) << dtype_name(t) << " at " << cpu_isa_name(isa) << ", K " << K;
      }
    }
  }
}

// Every level's Q8_K act quantizer (Q2_K .. Q6_K acts, groups of 16 and 32) and Q8_0 / Q8_1 one write
// the portable quantizer's bytes on super-blocks built for the corner cases: exact rounding ties (scale
// factor 1), |max| repeated with both signs (the first one sets Q8_K's scale sign), |max| in each
// 64-element word and at the last element, all-equal and +-0 blocks, very large and very small
// magnitudes; then random rows of several spreads.
TEST(CpuOps, ActQuantizersEdgeCases) {
  using namespace ferry::kernels::cpu;
  std::vector<std::vector<float>> rows;
  {
    std::vector<float> x = randn(256 * 12, 23, 1.f);
    float* blk = x.data();
    // 0: random. 1: ties: max -127 (iscale 1) with halves of both signs and -0.
    blk = x.data() + 256;
    for (int i = 0; i < 256; ++i) blk[i] = static_cast<float>((i % 253) - 126) + ((i & 1) ? 0.5f : -0.5f);
    blk[3] = -0.f;
    blk[17] = -127.f;
    // 2: ties with max +127 (iscale -1); the later -127 does not move the scale.
    blk = x.data() + 512;
    for (int i = 0; i < 256; ++i) blk[i] = static_cast<float>((i * 7) % 250 - 125) + 0.5f;
    blk[100] = 127.f;
    blk[101] = -127.f;
    // 3: large magnitudes; |max| first in the last word, at its last element, negative.
    blk = x.data() + 768;
    for (int i = 0; i < 256; ++i) blk[i] *= 1e30f;
    blk[255] = -9e30f;
    // 4: small magnitudes (1/|max| stays finite); |max| in the second word, positive, then negative.
    blk = x.data() + 1024;
    for (int i = 0; i < 256; ++i) blk[i] *= 1e-30f;
    blk[64 + 9] = 8e-30f;
    blk[64 + 10] = -8e-30f;
    blk[200] = -8e-30f;
    // 5: all equal (negative): the first element is the scale's.
    for (int i = 0; i < 256; ++i) x[1280 + i] = -3.25f;
    // 6: all +-0. 7: zeros and one value.
    for (int i = 0; i < 256; ++i) x[1536 + i] = (i & 1) ? -0.f : 0.f;
    for (int i = 0; i < 256; ++i) x[1792 + i] = 0.f;
    x[1792 + 130] = -1e-3f;
    // 8: +-|max| alternating from the first element. 9: |max| in the third word only.
    for (int i = 0; i < 256; ++i) x[2048 + i] = (i & 1) ? 2.f : -2.f;
    x[2304 + 150] = 40.f;
    // 10: values at level boundaries of iscale = -127 / 64: multiples of 32 / 127.
    for (int i = 0; i < 256; ++i) x[2560 + i] = static_cast<float>(i - 128) * (32.f / 127.f);
    x[2560 + 255] = 64.f;
    // 11: random with one huge outlier (most levels 0).
    x[2816 + 33] = 1e4f;
    rows.push_back(std::move(x));
  }
  for (uint32_t seed = 0; seed < 8; ++seed) rows.push_back(randn(4096, 100 + seed, seed < 4 ? 1.f : 50.f));
  const KernelTable& ref = kernel_table(CpuIsa::kScalar);
  for (const std::vector<float>& x : rows) {
    const int64_t K = static_cast<int64_t>(x.size());
    for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q4_0, DType::Q4_1,
                    DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::MXFP4}) {
      const MatKernel& r = ref.mat[static_cast<uint32_t>(t)];
      std::vector<uint8_t> want(r.act_bytes(K), 0xAB);
      r.quantize(x.data(), K, want.data());
      for (CpuIsa isa : levels()) {
        const MatKernel& m = kernel_table(isa).mat[static_cast<uint32_t>(t)];
        std::vector<uint8_t> got(m.act_bytes(K), 0xAB);
        m.quantize(x.data(), K, got.data());
        EXPECT_EQ(got, want) << dtype_name(t) << " at " << cpu_isa_name(isa) << ", K " << K;
      }
    }
  }
}

}  // namespace
}  // namespace ferry::kernels
