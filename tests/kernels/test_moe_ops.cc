// The mixture-of-experts ops: the router (kernels/moe_route.h) against hand-computed choices; matmul_id and
// moe_combine of CpuOps at every dispatch level against RefOps with llama.cpp numerics (whose matmul_id is
// Ops' default: one reference matmul per (slot, token)) and against CpuOps' own matmul of each expert's
// tokens, bit for bit; token counts from decode (1) to prefill (the panel path), shared inputs (gate / up)
// and one input per slot (down), weights of different types in one call.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/moe_route.h"
#include "kernels/ref/ref_ops.h"
#include "tensor/quant.h"

namespace ferry::kernels {
namespace {

std::vector<CpuIsa> levels() {
  std::vector<CpuIsa> v;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512})
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

TEST(MoeRoute, SoftmaxTopKNormalised) {
  const float logits[6] = {0.5f, 2.0f, -1.0f, 1.5f, 2.0f, 0.0f};
  float scratch[6], w[3];
  int32_t ids[3];
  MoeRoute r;
  r.n_used = 3;
  r.gating = MoeGating::kSoftmax;
  route_token(logits, 6, r, scratch, ids, w);
  // Highest first; the tie between experts 1 and 4 goes to the lower index.
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 4);
  EXPECT_EQ(ids[2], 3);
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l));
  EXPECT_NEAR(w[0], std::exp(2.0) / z, 1e-6);
  EXPECT_NEAR(w[2], std::exp(1.5) / z, 1e-6);

  r.normalize = true;
  route_token(logits, 6, r, scratch, ids, w);
  const double sel = 2 * std::exp(2.0) + std::exp(1.5);
  EXPECT_NEAR(w[0], std::exp(2.0) / sel, 1e-6);
  EXPECT_NEAR(w[2], std::exp(1.5) / sel, 1e-6);
  EXPECT_NEAR(w[0] + w[1] + w[2], 1.0, 1e-6);
}

TEST(MoeRoute, SoftmaxOverSelectedLogits) {
  const float logits[5] = {3.0f, -2.0f, 1.0f, 0.0f, 2.5f};
  float scratch[5], w[2];
  int32_t ids[2];
  MoeRoute r;
  r.n_used = 2;
  r.gating = MoeGating::kSoftmaxSelected;
  route_token(logits, 5, r, scratch, ids, w);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 4);
  EXPECT_NEAR(w[0], 1.0 / (1.0 + std::exp(-0.5)), 1e-6);
  EXPECT_NEAR(w[1], 1.0 / (1.0 + std::exp(0.5)), 1e-6);
}

TEST(MoeRoute, NormalisationClampsATinySum) {
  // Every weight vanishes after the softmax: the sum is clamped, the weights stay finite.
  const float logits[4] = {0.f, -200.f, -200.f, -200.f};
  float scratch[4], w[2];
  int32_t ids[2];
  MoeRoute r;
  r.n_used = 2;
  r.gating = MoeGating::kSoftmaxSelected;
  r.normalize = true;
  route_token(logits, 4, r, scratch, ids, w);
  EXPECT_TRUE(std::isfinite(w[0]) && std::isfinite(w[1]));
}

// The Ops defaults and CpuOps route identically (one shared function).
TEST(MoeRoute, OpsAgree) {
  const int64_t E = 12, T = 7, k = 4;
  std::vector<float> logits = randn(static_cast<size_t>(E * T), 3);
  MoeRoute r;
  r.n_used = static_cast<int32_t>(k);
  r.normalize = true;
  RefOps ref(RefNumerics::kLlamaCpp);
  std::vector<int32_t> ids0(k * T), ids1(k * T);
  std::vector<float> w0(k * T), w1(k * T);
  ref.moe_route(TensorView::make(DType::F32, logits.data(), E, T), r, TensorView::make(DType::I32, ids0.data(), k, T),
                TensorView::make(DType::F32, w0.data(), k, T));
  auto cpu = make_cpu_ops(2);
  cpu->moe_route(TensorView::make(DType::F32, logits.data(), E, T), r, TensorView::make(DType::I32, ids1.data(), k, T),
                 TensorView::make(DType::F32, w1.data(), k, T));
  EXPECT_EQ(ids0, ids1);
  EXPECT_EQ(w0, w1);
}

// Stacked experts [K, N, E] of one type, random rows quantized.
std::vector<uint8_t> experts(DType t, int64_t K, int64_t N, int64_t E, uint32_t seed) {
  const std::vector<float> v = randn(static_cast<size_t>(K * N * E), seed, 1.f / std::sqrt(static_cast<float>(K)));
  std::vector<uint8_t> out(row_bytes(t, K) * static_cast<size_t>(N * E));
  quantize_row(t, v.data(), out.data(), K * N * E);
  return out;
}

// Routing where some experts get many tokens, some few, some none (expert 0 never).
std::vector<int32_t> routing(int64_t E, int64_t k, int64_t T, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(k * T));
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> pool;
    for (int32_t e = 1; e < E; ++e) pool.push_back(e);
    std::shuffle(pool.begin(), pool.end(), rng);
    // Expert 1 is popular: first choice of every other token.
    if (t % 2 == 0) std::swap(pool[0], *std::find(pool.begin(), pool.end(), 1));
    for (int64_t j = 0; j < k; ++j) ids[static_cast<size_t>(t * k + j)] = pool[static_cast<size_t>(j)];
  }
  return ids;
}

struct IdCase {
  DType type;
  int64_t K, N;
};

TEST(MoeOps, MatmulIdMatchesRefAndPerExpertMatmul) {
  const int64_t E = 6, k = 3;
  for (const IdCase& c : {IdCase{DType::F32, 96, 40}, IdCase{DType::F16, 128, 33}, IdCase{DType::Q8_0, 256, 48},
                          IdCase{DType::Q4_0, 160, 17}, IdCase{DType::Q4_K, 512, 40}, IdCase{DType::Q6_K, 256, 24}}) {
    std::vector<uint8_t> wg = experts(c.type, c.K, c.N, E, 11), wu = experts(c.type, c.K, c.N, E, 12);
    TensorView vg = TensorView::make(c.type, wg.data(), c.K, c.N, E), vu = TensorView::make(c.type, wu.data(), c.K, c.N, E);
    for (int64_t T : {1, 2, 5, 40, 130}) {
      std::vector<int32_t> ids = routing(E, k, T, static_cast<uint32_t>(T));
      const TensorView vid = TensorView::make(DType::I32, ids.data(), k, T);
      for (bool shared : {true, false}) {  // gate / up (one input per token) or down (one per slot)
        const int64_t rows_x = shared ? 1 : k;
        std::vector<float> x = randn(static_cast<size_t>(c.K * rows_x * T), 7 + static_cast<uint32_t>(T));
        const TensorView vx = TensorView::make(DType::F32, x.data(), c.K, rows_x, T);
        const size_t n_out = static_cast<size_t>(c.N * k * T);
        std::vector<float> want_g(n_out), want_u(n_out);
        {
          RefOps ref(RefNumerics::kLlamaCpp);
          const TensorView* ws[2] = {&vg, &vu};
          TensorView outs[2] = {TensorView::make(DType::F32, want_g.data(), c.N, k, T),
                                TensorView::make(DType::F32, want_u.data(), c.N, k, T)};
          ref.matmul_id(2, ws, vx, vid, 0, outs);
        }
        for (CpuIsa isa : levels()) {
          SCOPED_TRACE(std::string(dtype_name(c.type)) + " " + cpu_isa_name(isa) + " T=" + std::to_string(T) +
                       (shared ? " shared x" : " x per slot"));
          auto ops = make_cpu_ops(2, isa);
          std::vector<float> got_g(n_out, NAN), got_u(n_out, NAN);
          const TensorView* ws[2] = {&vg, &vu};
          TensorView outs[2] = {TensorView::make(DType::F32, got_g.data(), c.N, k, T),
                                TensorView::make(DType::F32, got_u.data(), c.N, k, T)};
          ops->matmul_id(2, ws, vx, vid, 0, outs);
          // Against the reference (one matmul per column): rounding of the activations' conversion.
          double scale = 0;
          for (float v : want_g) scale = std::max(scale, std::fabs(static_cast<double>(v)));
          for (size_t i = 0; i < n_out; ++i) {
            ASSERT_NEAR(got_g[i], want_g[i], 2e-5 * scale + 1e-6) << "gate " << i;
            ASSERT_NEAR(got_u[i], want_u[i], 2e-5 * scale + 1e-6) << "up " << i;
          }
          // Against CpuOps' matmul of each expert over its tokens' columns: the same numbers.
          for (int64_t e = 0; e < E; ++e) {
            std::vector<int64_t> pairs;
            for (int64_t p = 0; p < k * T; ++p)
              if (ids[static_cast<size_t>(p)] == e) pairs.push_back(p);
            if (pairs.empty()) continue;
            const int64_t n = static_cast<int64_t>(pairs.size());
            std::vector<float> xe(static_cast<size_t>(c.K * n)), ye(static_cast<size_t>(c.N * n));
            for (int64_t i = 0; i < n; ++i) {
              const int64_t p = pairs[static_cast<size_t>(i)];
              const float* src = static_cast<const float*>(vx.row(shared ? 0 : p % k, p / k));
              std::copy(src, src + c.K, xe.begin() + i * c.K);
            }
            TensorView we = vg;
            we.data = wg.data() + static_cast<size_t>(e) * vg.nb[2];
            we.ne[2] = 1;
            ops->matmul(we, TensorView::make(DType::F32, xe.data(), c.K, n), TensorView::make(DType::F32, ye.data(), c.N, n));
            for (int64_t i = 0; i < n; ++i) {
              const int64_t p = pairs[static_cast<size_t>(i)];
              for (int64_t r = 0; r < c.N; ++r)
                ASSERT_EQ(got_g[static_cast<size_t>(p * c.N + r)], ye[static_cast<size_t>(i * c.N + r)])
                    << "expert " << e << " pair " << p << " row " << r;
            }
          }
        }
      }
    }
  }
}

// Token groups on (Ops::set_token_groups, the server's batch-invariant numerics): each token's expert
// outputs are bit-identical whether it shares the step with others or runs alone in its group, for decode
// tokens (the decode kernels) and prompt tokens (the prefill kernels), whatever the expert groups' sizes.
TEST(MoeOps, MatmulIdFollowsTokenGroups) {
  const int64_t E = 6, k = 3, T = 40, n_decode = 7;
  for (const IdCase& c : {IdCase{DType::F32, 96, 40}, IdCase{DType::Q8_0, 256, 48}, IdCase{DType::Q4_K, 512, 40}}) {
    std::vector<uint8_t> wg = experts(c.type, c.K, c.N, E, 31);
    const TensorView vg = TensorView::make(c.type, wg.data(), c.K, c.N, E);
    const std::vector<int32_t> ids = routing(E, k, T, 9);
    for (bool shared : {true, false}) {
      const int64_t rows_x = shared ? 1 : k;
      const std::vector<float> x = randn(static_cast<size_t>(c.K * rows_x * T), 13);
      // Tokens [t0, t0 + n) as one step with groups (n, d); out [N, k, n].
      auto step = [&](Ops& ops, int64_t t0, int64_t n, int32_t d) {
        std::vector<float> xs(x.begin() + t0 * c.K * rows_x, x.begin() + (t0 + n) * c.K * rows_x);
        std::vector<int32_t> is(ids.begin() + t0 * k, ids.begin() + (t0 + n) * k);
        std::vector<float> out(static_cast<size_t>(c.N * k * n), NAN);
        const TensorView* ws[1] = {&vg};
        TensorView o = TensorView::make(DType::F32, out.data(), c.N, k, n);
        ops.set_token_groups(static_cast<int32_t>(n), d);
        ops.matmul_id(1, ws, TensorView::make(DType::F32, xs.data(), c.K, rows_x, n),
                      TensorView::make(DType::I32, is.data(), k, n), 0, &o);
        return out;
      };
      for (CpuIsa isa : levels()) {
        SCOPED_TRACE(std::string(dtype_name(c.type)) + " " + cpu_isa_name(isa) + (shared ? " shared x" : " x per slot"));
        auto ops = make_cpu_ops(2, isa);
        const std::vector<float> all = step(*ops, 0, T, n_decode);
        const size_t col = static_cast<size_t>(c.N * k);
        for (int64_t t = 0; t < T; ++t) {  // each token alone, in its group
          const std::vector<float> one = step(*ops, t, 1, t < n_decode ? 1 : 0);
          ASSERT_TRUE(std::equal(one.begin(), one.end(), all.begin() + static_cast<std::ptrdiff_t>(t * col)))
              << "token " << t;
        }
        // The prompt tokens as a step of their own.
        const std::vector<float> prompt = step(*ops, n_decode, T - n_decode, 0);
        ASSERT_TRUE(std::equal(prompt.begin(), prompt.end(), all.begin() + static_cast<std::ptrdiff_t>(n_decode * col)));
      }
    }
  }
}

// Weights of two types in one call (a Q4_K gate with a Q6_K up, as in mixed quantizations) give what
// each gives alone.
TEST(MoeOps, MatmulIdMixedTypes) {
  const int64_t E = 4, k = 2, K = 256, N = 20, T = 9;
  std::vector<uint8_t> wa = experts(DType::Q4_K, K, N, E, 21), wb = experts(DType::Q6_K, K, N, E, 22);
  TensorView va = TensorView::make(DType::Q4_K, wa.data(), K, N, E), vb = TensorView::make(DType::Q6_K, wb.data(), K, N, E);
  std::vector<int32_t> ids = routing(E, k, T, 5);
  std::vector<float> x = randn(static_cast<size_t>(K * T), 6);
  const TensorView vx = TensorView::make(DType::F32, x.data(), K, 1, T), vid = TensorView::make(DType::I32, ids.data(), k, T);
  auto ops = make_cpu_ops(2);
  std::vector<float> a0(N * k * T), b0(N * k * T), a1(N * k * T), b1(N * k * T);
  const TensorView* both[2] = {&va, &vb};
  TensorView outs[2] = {TensorView::make(DType::F32, a0.data(), N, k, T), TensorView::make(DType::F32, b0.data(), N, k, T)};
  ops->matmul_id(2, both, vx, vid, 0, outs);
  const TensorView* one_a = &va;
  const TensorView* one_b = &vb;
  TensorView oa = TensorView::make(DType::F32, a1.data(), N, k, T), ob = TensorView::make(DType::F32, b1.data(), N, k, T);
  ops->matmul_id(1, &one_a, vx, vid, 0, &oa);
  ops->matmul_id(1, &one_b, vx, vid, 0, &ob);
  EXPECT_EQ(a0, a1);
  EXPECT_EQ(b0, b1);
}

// Only the routed experts' weights are read: the other experts' pages are made unreadable (a read would
// fault; the kernels' prefetches past a row do not), for decode and prefill token counts.
TEST(MoeOps, MatmulIdReadsOnlyRoutedExperts) {
  const int64_t E = 6, k = 2, K = 256, N = 256;  // Q8_0: 272 bytes a row, 17 pages an expert
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t expert_bytes = row_bytes(DType::Q8_0, K) * static_cast<size_t>(N);
  ASSERT_EQ(expert_bytes % page, 0u);
  void* map = mmap(nullptr, expert_bytes * E, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  const std::vector<uint8_t> w = experts(DType::Q8_0, K, N, E, 41);
  std::memcpy(map, w.data(), w.size());
  for (int64_t e : {0, 2, 4, 5})
    ASSERT_EQ(mprotect(static_cast<uint8_t*>(map) + expert_bytes * e, expert_bytes, PROT_NONE), 0);
  const TensorView vw = TensorView::make(DType::Q8_0, map, K, N, E);
  for (int64_t T : {1, 4, 64}) {
    std::vector<int32_t> ids(static_cast<size_t>(k * T));
    for (int64_t t = 0; t < T; ++t) {
      ids[static_cast<size_t>(t * k)] = t % 2 ? 3 : 1;
      ids[static_cast<size_t>(t * k + 1)] = t % 2 ? 1 : 3;
    }
    std::vector<float> x = randn(static_cast<size_t>(K * T), 42), got(static_cast<size_t>(N * k * T)), want(got.size());
    const TensorView vx = TensorView::make(DType::F32, x.data(), K, 1, T), vid = TensorView::make(DType::I32, ids.data(), k, T);
    const TensorView* ws[1] = {&vw};
    for (CpuIsa isa : levels()) {
      auto ops = make_cpu_ops(2, isa);
      TensorView out = TensorView::make(DType::F32, got.data(), N, k, T);
      ops->matmul_id(1, ws, vx, vid, 0, &out);
    }
    RefOps ref(RefNumerics::kLlamaCpp);
    TensorView out = TensorView::make(DType::F32, want.data(), N, k, T);
    ref.matmul_id(1, ws, vx, vid, 0, &out);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-3) << "T=" << T << " at " << i;
  }
  munmap(map, expert_bytes * E);
}

// moe_combine: the reference (Ops' default: scale and add per slot) and CpuOps agree bit for bit.
TEST(MoeOps, CombineMatchesRef) {
  for (int64_t T : {1, 3, 70}) {
    const int64_t d = 300, k = 4;
    std::vector<float> y = randn(static_cast<size_t>(d * k * T), 31), w = randn(static_cast<size_t>(k * T), 32, 0.3f);
    std::vector<float> want(static_cast<size_t>(d * T)), got(static_cast<size_t>(d * T));
    std::vector<float> y_ref = y;  // the default scales y in place
    RefOps ref(RefNumerics::kLlamaCpp);
    ref.moe_combine(TensorView::make(DType::F32, y_ref.data(), d, k, T), TensorView::make(DType::F32, w.data(), k, T),
                    TensorView::make(DType::F32, want.data(), d, T));
    for (CpuIsa isa : levels()) {
      auto ops = make_cpu_ops(2, isa);
      ops->moe_combine(TensorView::make(DType::F32, y.data(), d, k, T), TensorView::make(DType::F32, w.data(), k, T),
                       TensorView::make(DType::F32, got.data(), d, T));
      EXPECT_EQ(got, want) << cpu_isa_name(isa) << " T=" << T;
    }
  }
}

// Expert groups: moe_experts over a partition of the experts, accumulated, equals forward_moe's ops
// (matmul_id, glu, matmul_id, moe_combine) over all of them within rounding; one group of every expert
// equals them bit for bit; a group none of whose experts a token routes to writes zeros.
TEST(MoeOps, ExpertGroupsSumToTheWholeBlock) {
  const int64_t E = 8, k = 3, d = 64, ffe = 96;
  const DType t = DType::Q8_0;
  std::vector<uint8_t> gw = experts(t, d, ffe, E, 41), uw = experts(t, d, ffe, E, 42), dw = experts(t, ffe, d, E, 43);
  auto stack = [&](std::vector<uint8_t>& b, int64_t K, int64_t N, int64_t e0, int64_t n) {
    TensorView v = TensorView::make(t, b.data() + static_cast<size_t>(e0) * row_bytes(t, K) * N, K, N, n);
    return v;
  };
  for (int64_t T : {1, 5, 40}) {
    const std::vector<float> x = randn(static_cast<size_t>(d * T), 44);
    const std::vector<int32_t> ids = routing(E, k, T, 45);
    std::vector<float> w = randn(static_cast<size_t>(k * T), 46, 0.3f);
    const TensorView vx = TensorView::make(DType::F32, const_cast<float*>(x.data()), d, T);
    const TensorView vid = TensorView::make(DType::I32, const_cast<int32_t*>(ids.data()), k, T);
    const TensorView vw = TensorView::make(DType::F32, w.data(), k, T);
    std::vector<float> g(static_cast<size_t>(ffe * k * T)), u(g.size()), y(static_cast<size_t>(d * k * T));
    const MoeScratch s{TensorView::make(DType::F32, g.data(), ffe, k, T), TensorView::make(DType::F32, u.data(), ffe, k, T),
                       TensorView::make(DType::F32, y.data(), d, k, T)};
    RefOps ref(RefNumerics::kLlamaCpp);
    auto cpu = make_cpu_ops(2);
    for (Ops* ops : {static_cast<Ops*>(&ref), static_cast<Ops*>(cpu.get())}) {
      SCOPED_TRACE(std::string(ops->name()) + " T=" + std::to_string(T));
      // The whole block through forward_moe's ops.
      std::vector<float> want(static_cast<size_t>(d * T));
      {
        const TensorView* ws[2] = {&s.gate, &s.up};
        TensorView gv = stack(gw, d, ffe, 0, E), uv = stack(uw, d, ffe, 0, E), dv = stack(dw, ffe, d, 0, E);
        const TensorView* wgu[2] = {&gv, &uv};
        TensorView outs[2] = {s.gate, s.up};
        ops->matmul_id(2, wgu, TensorView::make(DType::F32, const_cast<float*>(x.data()), d, 1, T), vid, 0, outs);
        (void)ws;
        const TensorView g2 = TensorView::make(DType::F32, g.data(), ffe, k * T), u2 = TensorView::make(DType::F32, u.data(), ffe, k * T);
        ops->glu(g2, u2, Activation::kSilu, g2);
        const TensorView* wd = &dv;
        TensorView yv = s.y;
        ops->matmul_id(1, &wd, s.gate, vid, 0, &yv);
        ops->moe_combine(s.y, vw, TensorView::make(DType::F32, want.data(), d, T));
      }
      // One group of every expert: bit for bit.
      std::vector<float> one(static_cast<size_t>(d * T), NAN);
      ExpertGroup all{stack(gw, d, ffe, 0, E), stack(uw, d, ffe, 0, E), stack(dw, ffe, d, 0, E), 0, Activation::kSilu};
      ops->moe_experts(all, vx, vid, vw, s, false, TensorView::make(DType::F32, one.data(), d, T));
      EXPECT_EQ(one, want);
      // Groups [0, 3), [3, 5), [5, 8): summed within rounding.
      std::vector<float> sum(static_cast<size_t>(d * T), NAN);
      bool acc = false;
      for (auto [e0, e1] : {std::pair<int64_t, int64_t>{0, 3}, {3, 5}, {5, 8}}) {
        ExpertGroup grp{stack(gw, d, ffe, e0, e1 - e0), stack(uw, d, ffe, e0, e1 - e0), stack(dw, ffe, d, e0, e1 - e0),
                        static_cast<int32_t>(e0), Activation::kSilu};
        ops->moe_experts(grp, vx, vid, vw, s, acc, TensorView::make(DType::F32, sum.data(), d, T));
        acc = true;
      }
      for (size_t i = 0; i < sum.size(); ++i) ASSERT_NEAR(sum[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << i;
      // The Ops default over the same groups gives the same bits as the backend's moe_experts (CpuOps: its own).
      std::vector<float> composed(sum.size(), NAN);
      acc = false;
      for (auto [e0, e1] : {std::pair<int64_t, int64_t>{0, 3}, {3, 5}, {5, 8}}) {
        ExpertGroup grp{stack(gw, d, ffe, e0, e1 - e0), stack(uw, d, ffe, e0, e1 - e0), stack(dw, ffe, d, e0, e1 - e0),
                        static_cast<int32_t>(e0), Activation::kSilu};
        ops->Ops::moe_experts(grp, vx, vid, vw, s, acc, TensorView::make(DType::F32, composed.data(), d, T));
        acc = true;
      }
      EXPECT_EQ(composed, sum);
      // Expert 0 is never routed: its group alone writes zeros.
      std::vector<float> none(static_cast<size_t>(d * T), NAN);
      ExpertGroup e0{stack(gw, d, ffe, 0, 1), stack(uw, d, ffe, 0, 1), stack(dw, ffe, d, 0, 1), 0, Activation::kSilu};
      ops->moe_experts(e0, vx, vid, vw, s, false, TensorView::make(DType::F32, none.data(), d, T));
      EXPECT_EQ(none, std::vector<float>(none.size(), 0.f));

      // gpt-oss: per-expert biases and the clamped SwiGLU. Reference: the same composition with the biases
      // added by hand to each routed slot; split into groups, each group takes its columns of the biases.
      std::vector<float> bg = randn(static_cast<size_t>(ffe * E), 47, 0.5f), bu = randn(bg.size(), 48, 0.5f);
      std::vector<float> bd = randn(static_cast<size_t>(d * E), 49, 0.5f);
      auto cols = [](std::vector<float>& b, int64_t n, int64_t e0, int64_t ne) {
        return TensorView::make(DType::F32, b.data() + e0 * n, n, ne);
      };
      std::vector<float> want_b(static_cast<size_t>(d * T));
      {
        TensorView gv = stack(gw, d, ffe, 0, E), uv = stack(uw, d, ffe, 0, E), dv = stack(dw, ffe, d, 0, E);
        const TensorView* wgu[2] = {&gv, &uv};
        TensorView outs[2] = {s.gate, s.up};
        ops->matmul_id(2, wgu, TensorView::make(DType::F32, const_cast<float*>(x.data()), d, 1, T), vid, 0, outs);
        for (int64_t t = 0; t < T; ++t)
          for (int64_t j = 0; j < k; ++j) {
            const int32_t e = ids[static_cast<size_t>(t * k + j)];
            for (int64_t i = 0; i < ffe; ++i) {
              g[static_cast<size_t>((t * k + j) * ffe + i)] += bg[static_cast<size_t>(e * ffe + i)];
              u[static_cast<size_t>((t * k + j) * ffe + i)] += bu[static_cast<size_t>(e * ffe + i)];
            }
          }
        const TensorView g2 = TensorView::make(DType::F32, g.data(), ffe, k * T), u2 = TensorView::make(DType::F32, u.data(), ffe, k * T);
        ops->glu(g2, u2, Activation::kSwigluOai, g2);
        const TensorView* wd = &dv;
        TensorView yv = s.y;
        ops->matmul_id(1, &wd, s.gate, vid, 0, &yv);
        for (int64_t t = 0; t < T; ++t)
          for (int64_t j = 0; j < k; ++j) {
            const int32_t e = ids[static_cast<size_t>(t * k + j)];
            for (int64_t i = 0; i < d; ++i) y[static_cast<size_t>((t * k + j) * d + i)] += bd[static_cast<size_t>(e * d + i)];
          }
        ops->moe_combine(s.y, vw, TensorView::make(DType::F32, want_b.data(), d, T));
      }
      std::vector<float> got_b(static_cast<size_t>(d * T), NAN);
      ExpertGroup allb{stack(gw, d, ffe, 0, E), stack(uw, d, ffe, 0, E), stack(dw, ffe, d, 0, E), 0,
                       Activation::kSwigluOai, cols(bg, ffe, 0, E), cols(bu, ffe, 0, E), cols(bd, d, 0, E)};
      ops->moe_experts(allb, vx, vid, vw, s, false, TensorView::make(DType::F32, got_b.data(), d, T));
      EXPECT_EQ(got_b, want_b);
      std::vector<float> sum_b(static_cast<size_t>(d * T), NAN);
      acc = false;
      for (auto [e0, e1] : {std::pair<int64_t, int64_t>{0, 3}, {3, 5}, {5, 8}}) {
        ExpertGroup grp{stack(gw, d, ffe, e0, e1 - e0), stack(uw, d, ffe, e0, e1 - e0), stack(dw, ffe, d, e0, e1 - e0),
                        static_cast<int32_t>(e0), Activation::kSwigluOai, cols(bg, ffe, e0, e1 - e0),
                        cols(bu, ffe, e0, e1 - e0), cols(bd, d, e0, e1 - e0)};
        ops->moe_experts(grp, vx, vid, vw, s, acc, TensorView::make(DType::F32, sum_b.data(), d, T));
        acc = true;
      }
      for (size_t i = 0; i < sum_b.size(); ++i) ASSERT_NEAR(sum_b[i], want_b[i], 1e-5 * (1 + std::fabs(want_b[i]))) << i;
    }
  }
}

}  // namespace
}  // namespace ferry::kernels
