// test_cuda_ops, mixture of experts (CudaMoe*): CudaOps' device router against route_token (the same experts
// on logits without near ties, ties to the lower index, weights within a few ulp); matmul_id, moe_combine and
// moe_experts against host references for every weight type the expert kernels read (split layout where
// the engine uploads it), token counts from decode to prefill, groups of every expert, of a middle range,
// and of an expert no token routes to, accumulate on and off. Two references: the same math with the
// activations rounded as the kernels round them (Q8 blocks of 32 for quantized weights; tight), and RefOps
// with llama.cpp's numerics (its own activation rounding; loose). Skips without a usable GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_test_util.h"
#include "kernels/moe_route.h"
#include "kernels/ref/ref_ops.h"
#include "tensor/quant.h"

namespace ferry::cudatest {
namespace {

using kernels::Activation;
using kernels::ExpertGroup;
using kernels::MoeGating;
using kernels::MoeRoute;
using kernels::MoeScratch;
using kernels::RefNumerics;
using kernels::RefOps;

Env* moe_env() {
  std::string why;
  return env(&why);
}

#define REQUIRE_GPU()       \
  Env* E = moe_env();       \
  if (E == nullptr) GTEST_SKIP() << "no usable CUDA GPU"

#define SYNC()                                           \
  do {                                                   \
    const Status sync_st_ = E->sync();                   \
    ASSERT_TRUE(sync_st_.is_ok()) << sync_st_.message(); \
  } while (0)

HostTensor host_f32(const std::vector<float>& v, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1) {
  HostTensor t(DType::F32, ne0, ne1, ne2);
  std::memcpy(t.bytes.data(), v.data(), v.size() * 4);
  return t;
}

HostTensor host_i32(const std::vector<int32_t>& v, int64_t ne0, int64_t ne1) {
  HostTensor t(DType::I32, ne0, ne1);
  std::memcpy(t.bytes.data(), v.data(), v.size() * 4);
  return t;
}

template <typename T>
std::vector<T> values(const HostTensor& h) {
  std::vector<T> v(static_cast<size_t>(h.n()));
  std::memcpy(v.data(), h.bytes.data(), v.size() * sizeof(T));
  return v;
}

std::vector<float> uniform(std::mt19937& rng, size_t n, float lo = -1.f, float hi = 1.f) {
  std::vector<float> v(n);
  fill_uniform(rng, v.data(), static_cast<int64_t>(n), lo, hi);
  return v;
}

// ---- router -------------------------------------------------------------------------------------------

// Logits [E, T] without near ties: per token a random permutation of E values 0.05 apart, plus noise below
// 0.01, so the softmax values of different experts differ by far more than a few ulp.
std::vector<float> distinct_logits(std::mt19937& rng, int64_t E, int64_t T) {
  std::vector<float> l(static_cast<size_t>(E * T));
  std::vector<int> perm(static_cast<size_t>(E));
  std::uniform_real_distribution<float> noise(0.f, 0.01f);
  for (int64_t t = 0; t < T; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t e = 0; e < E; ++e)
      l[static_cast<size_t>(t * E + e)] = 0.05f * static_cast<float>(perm[static_cast<size_t>(e)] - E / 2) + noise(rng);
  }
  return l;
}

// Routes logits with CudaOps and with route_token; ids must match exactly, weights within rel_tol.
void check_route(Env* E, const std::vector<float>& logits, int64_t n_expert, int64_t T, const MoeRoute& r,
                 double rel_tol, const std::string& what) {
  const int64_t k = r.n_used;
  DevTensor dl(*E, host_f32(logits, n_expert, T));
  DevTensor di(*E, DType::I32, k, T), dw(*E, DType::F32, k, T);
  di.poison();
  dw.poison();
  E->ops->moe_route(dl.view, r, di.view, dw.view);
  const Status st = E->sync();
  ASSERT_TRUE(st.is_ok()) << st.message();
  const std::vector<int32_t> ids = values<int32_t>(di.download());
  const std::vector<float> w = values<float>(dw.download());
  std::vector<float> scratch(static_cast<size_t>(n_expert));
  std::vector<int32_t> want_ids(static_cast<size_t>(k));
  std::vector<float> want_w(static_cast<size_t>(k));
  int bad = 0;
  for (int64_t t = 0; t < T && bad < 5; ++t) {
    kernels::route_token(logits.data() + t * n_expert, static_cast<int32_t>(n_expert), r, scratch.data(),
                         want_ids.data(), want_w.data());
    for (int64_t j = 0; j < k; ++j) {
      const size_t p = static_cast<size_t>(t * k + j);
      const float ref = want_w[static_cast<size_t>(j)];
      const bool ok = ids[p] == want_ids[static_cast<size_t>(j)] &&
                      std::fabs(static_cast<double>(w[p]) - ref) <= rel_tol * std::fabs(static_cast<double>(ref)) + 1e-30;
      if (!ok) {
        ADD_FAILURE() << what << " token " << t << " slot " << j << ": id " << ids[p] << " weight " << w[p]
                      << ", want " << want_ids[static_cast<size_t>(j)] << " " << ref;
        ++bad;
      }
    }
  }
}

// A few ulp of float: expf on the GPU is within 2 ulp, 1 / sum and the normalisation add one rounding each.
constexpr double kRouteWeightTol = 2e-6;

TEST(CudaMoeRoute, MatchesRouteToken) {
  REQUIRE_GPU();
  std::mt19937 rng(11);
  for (int64_t n_expert : {8, 60, 128, 256}) {
    for (int32_t k : {1, 2, 8, 16}) {
      if (k > n_expert) continue;
      for (MoeGating gating : {MoeGating::kSoftmax, MoeGating::kSoftmaxSelected}) {
        for (bool norm : {false, true}) {
          for (int64_t T : {1, 7, 300}) {
            MoeRoute r;
            r.n_used = k;
            r.gating = gating;
            r.normalize = norm;
            check_route(E, distinct_logits(rng, n_expert, T), n_expert, T, r, kRouteWeightTol,
                        "E=" + std::to_string(n_expert) + " k=" + std::to_string(k) +
                            (gating == MoeGating::kSoftmax ? " softmax" : " softmax-selected") +
                            (norm ? " norm" : "") + " T=" + std::to_string(T));
          }
        }
      }
    }
  }
}

// Exact ties (logits from 3 values): route_token's order, the lower index first among equals.
TEST(CudaMoeRoute, TiesGoToTheLowerIndex) {
  REQUIRE_GPU();
  std::mt19937 rng(12);
  std::uniform_int_distribution<int> pick(0, 2);
  for (int64_t n_expert : {16, 128}) {
    const int64_t T = 40;
    std::vector<float> logits(static_cast<size_t>(n_expert * T));
    for (float& v : logits) v = 0.5f * static_cast<float>(pick(rng));
    for (MoeGating gating : {MoeGating::kSoftmax, MoeGating::kSoftmaxSelected}) {
      MoeRoute r;
      r.n_used = 8;
      r.gating = gating;
      r.normalize = true;
      check_route(E, logits, n_expert, T, r, kRouteWeightTol, "ties E=" + std::to_string(n_expert));
    }
  }
}

// More experts than the kernel holds: Ops' default (through the host), the same choices.
TEST(CudaMoeRoute, ManyExpertsFallBack) {
  REQUIRE_GPU();
  std::mt19937 rng(13);
  MoeRoute r;
  r.n_used = 4;
  r.normalize = true;
  check_route(E, distinct_logits(rng, 300, 5), 300, 5, r, 0.0, "E=300");
}

// ---- expert stacks -----------------------------------------------------------------------------------

// Stacked experts [K, N, n] of one type: the host copy in ggml's layout (the references'), the device copy
// in the split layout when asked (as the engine uploads Q4_0 / Q8_0 / Q6_K), and every expert dequantized.
struct Stack {
  HostTensor host;
  std::unique_ptr<DevTensor> dev;
  std::vector<float> deq;  // [n][N][K]
  int64_t K = 0, N = 0, n = 0;
  TensorView h() const { return stacked(host.view); }
  TensorView d() const { return stacked(dev->view); }
  TensorView stacked(TensorView v) const {
    v.ne[1] = N;
    v.ne[2] = n;
    v.nb[2] = v.nb[1] * static_cast<size_t>(N);
    v.nb[3] = v.nb[2] * static_cast<size_t>(n);
    return v;
  }
  const float* row(int64_t e, int64_t r) const { return deq.data() + (e * N + r) * K; }
};

std::unique_ptr<Stack> make_stack(Env* E, std::mt19937& rng, DType t, bool split, int64_t K, int64_t N, int64_t n) {
  auto s = std::make_unique<Stack>();
  s->K = K;
  s->N = N;
  s->n = n;
  s->host = random_weights(rng, t, K, N * n);
  if (E != nullptr) s->dev = std::make_unique<DevTensor>(*E, split ? to_split(s->host) : s->host);
  s->deq.resize(static_cast<size_t>(K * N * n));
  for (int64_t r = 0; r < N * n; ++r) dequantize_row(t, s->host.view.row(r), s->deq.data() + r * K, K);
  return s;
}

// Experts [begin, begin + n) of a stacked view.
TensorView slice(TensorView v, int64_t begin, int64_t n) {
  v.data = static_cast<char*>(v.data) + static_cast<size_t>(begin) * v.nb[2];
  v.ne[2] = n;
  v.nb[3] = v.nb[2] * static_cast<size_t>(n);
  return v;
}

// Routing [k, T]: k distinct experts a token, expert 0 never, expert 1 the first choice of every other token.
std::vector<int32_t> routing(int64_t n_expert, int64_t k, int64_t T, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(k * T));
  std::vector<int32_t> pool;
  for (int64_t t = 0; t < T; ++t) {
    pool.clear();
    for (int32_t e = 1; e < n_expert; ++e) pool.push_back(e);
    std::shuffle(pool.begin(), pool.end(), rng);
    if (t % 2 == 0) std::swap(pool[0], *std::find(pool.begin(), pool.end(), 1));
    for (int64_t j = 0; j < k; ++j) ids[static_cast<size_t>(t * k + j)] = pool[static_cast<size_t>(j)];
  }
  return ids;
}

// x's blocks of 32 replaced by d * round(x / d), d = max|x| / 127: what quantize_q8 hands the kernels.
void q8_round(float* x, int64_t n) {
  for (int64_t b = 0; b + 32 <= n; b += 32) {
    float amax = 0.f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b + i]));
    const float d = amax / 127.f;
    for (int i = 0; i < 32; ++i) x[b + i] = amax > 0.f ? d * static_cast<float>(std::nearbyint(x[b + i] / d)) : 0.f;
  }
}

std::vector<float> maybe_q8(const float* x, int64_t n, bool quant) {
  std::vector<float> v(x, x + n);
  if (quant) q8_round(v.data(), n);
  return v;
}

float dot(const float* w, const float* x, int64_t K) {
  double s = 0;
  for (int64_t i = 0; i < K; ++i) s += static_cast<double>(w[i]) * x[i];
  return static_cast<float>(s);
}

void expect_close_vec(const std::vector<float>& got, const std::vector<float>& ref, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  if (got.empty()) return;
  const ErrStats s = compare(got.data(), ref.data(), static_cast<int64_t>(got.size()));
  EXPECT_EQ(s.non_finite, 0) << what << ": " << describe(s);
  EXPECT_LE(s.nrmse, tol) << what << ": " << describe(s);
  EXPECT_LE(s.max_abs, 8 * tol * std::max(s.ref_max, 1e-3)) << what << ": " << describe(s);
}

struct MoeCase {
  DType type;
  bool split;
};
// Every type the expert kernels read: the split layout the engine uploads where these widths (512, 256) allow
// it (chunk decoders), Q4_K / Q5_K in ggml's (chunk decoders), the others in ggml's (the slice path; their
// split layout needs widths of 1024 / 2048: CudaMoeWide).
const MoeCase kMoeCases[] = {{DType::F16, false},  {DType::BF16, false}, {DType::F32, false},  {DType::Q8_0, true},
                             {DType::Q4_0, true},  {DType::Q4_1, true},  {DType::Q5_0, true},  {DType::Q5_1, true},
                             {DType::Q4_K, false}, {DType::Q5_K, false}, {DType::Q2_K, false}, {DType::Q3_K, false},
                             {DType::Q6_K, false}, {DType::Q4_0, false}, {DType::Q8_0, false}};
std::string case_name(const MoeCase& c) { return std::string(dtype_name(c.type)) + (c.split ? "_split" : ""); }

// Decode-path tolerance against the reference with the kernels' activation rounding (as CudaMatmul's), and
// against RefOps' llama.cpp numerics (Q8_K / Q8_1 / F16 activations, rounded differently: the k-quants'
// 256-element Q8_K blocks put a whole expert block near 0.015-0.018 from the kernels' 32-element ones,
// CudaMoeReference; the same 0.06 as check_cuda.sh's whole-model gate for quantized weights).
double tight_tol(DType t) { return traits(t).quantized ? 2e-3 : 1e-5; }
constexpr double kLlamaTol = 6e-2;

class CudaMoe : public ::testing::TestWithParam<MoeCase> {};

// matmul_id: gate / up (two stacks, one input row a token) and down (one input row a slot); held slots
// against both references, the other slots' outputs untouched (still the poison's NaN).
TEST_P(CudaMoe, MatmulIdMatchesRef) {
  REQUIRE_GPU();
  const auto [t, split] = GetParam();
  const bool quant = traits(t).quantized;
  std::mt19937 rng(static_cast<unsigned>(t) * 13 + (split ? 1 : 0));
  const int64_t n_expert = 8, k = 3, d = 512, ffe = 256;
  auto gate = make_stack(E, rng, t, split, d, ffe, n_expert);
  auto up = make_stack(E, rng, t, split, d, ffe, n_expert);
  auto down = make_stack(E, rng, t, split, ffe, d, n_expert);
  RefOps llama(RefNumerics::kLlamaCpp);
  for (int64_t T : {1, 3, 16, 64, 300}) {
    const std::vector<int32_t> ids = routing(n_expert, k, T, static_cast<uint32_t>(T) + 5);
    DevTensor dids(*E, host_i32(ids, k, T));
    for (const auto& [begin, n] : {std::pair<int64_t, int64_t>{0, n_expert}, {2, 4}}) {
      if (T == 300 && begin != 0) continue;
      for (bool shared : {true, false}) {
        const Stack* const st[2] = {shared ? gate.get() : down.get(), up.get()};
        const int nw = shared ? 2 : 1;
        const int64_t K = st[0]->K, N = st[0]->N, rows = shared ? 1 : k;
        const std::vector<float> x = uniform(rng, static_cast<size_t>(K * rows * T));
        DevTensor dx(*E, host_f32(x, K, rows, T));
        std::vector<std::unique_ptr<DevTensor>> douts;
        TensorView ws[2], outs[2];
        const TensorView* pw[2] = {&ws[0], &ws[1]};
        for (int i = 0; i < nw; ++i) {
          ws[i] = slice(st[i]->d(), begin, n);
          douts.push_back(std::make_unique<DevTensor>(*E, DType::F32, N, k, T));
          douts.back()->poison();
          outs[i] = douts.back()->view;
        }
        E->ops->matmul_id(nw, pw, dx.view, dids.view, static_cast<int32_t>(begin), outs);
        SYNC();
        const std::string what = case_name(GetParam()) + (shared ? " gate/up" : " down") + " T=" + std::to_string(T) +
                                 " group [" + std::to_string(begin) + ", " + std::to_string(begin + n) + ")";
        for (int i = 0; i < nw; ++i) {
          const std::vector<float> got_all = values<float>(douts[static_cast<size_t>(i)]->download());
          // RefOps with llama.cpp numerics (Ops' default: one matmul a slot), small T only (slow).
          std::vector<float> lref(static_cast<size_t>(N * k * T), 0.f);
          if (T <= 16) {
            HostTensor hx = host_f32(x, K, rows, T);
            TensorView hw = slice(st[i]->h(), begin, n), ho = TensorView::make(DType::F32, lref.data(), N, k, T);
            const TensorView* phw = &hw;
            llama.matmul_id(1, &phw, hx.view, host_i32(ids, k, T).view, static_cast<int32_t>(begin), &ho);
          }
          std::vector<float> got, want, want_llama;
          int untouched_bad = 0;
          for (int64_t tk = 0; tk < T; ++tk) {
            for (int64_t j = 0; j < k; ++j) {
              const int64_t e = ids[static_cast<size_t>(tk * k + j)] - begin;
              const float* col = got_all.data() + (tk * k + j) * N;
              if (e < 0 || e >= n) {
                for (int64_t r = 0; r < N; ++r) untouched_bad += std::isnan(col[r]) ? 0 : 1;
                continue;
              }
              const std::vector<float> xr = maybe_q8(x.data() + (tk * rows + (shared ? 0 : j)) * K, K, quant);
              for (int64_t r = 0; r < N; ++r) {
                got.push_back(col[r]);
                want.push_back(dot(st[i]->row(begin + e, r), xr.data(), K));
                want_llama.push_back(lref[static_cast<size_t>((tk * k + j) * N + r)]);
              }
            }
          }
          EXPECT_EQ(untouched_bad, 0) << what << ": outputs of slots outside the group were written";
          expect_close_vec(got, want, tight_tol(t), what + " out " + std::to_string(i));
          if (T <= 16) expect_close_vec(got, want_llama, kLlamaTol, what + " out " + std::to_string(i) + " vs llama");
        }
      }
    }
  }
}

// The emulated expert block: per held slot gate / up of x (rounded as the kernels do), act * up (rounded as
// the kernels do for the down projection), down, then the weighted sum in slot order with each product
// rounded before its add.
std::vector<float> emulate_experts(const Stack& gate, const Stack& up, const Stack& down, int64_t begin, int64_t n,
                                   const std::vector<float>& x, const std::vector<int32_t>& ids,
                                   const std::vector<float>& w, int64_t k, int64_t T, Activation act, bool accumulate,
                                   const std::vector<float>& out0, bool gu_quant, bool down_quant) {
  const int64_t d = gate.K, ffe = gate.N;
  std::vector<float> out = out0, h(static_cast<size_t>(ffe));
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<float> xr = maybe_q8(x.data() + t * d, d, gu_quant);
    bool started = accumulate;
    float* o = out.data() + t * d;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = ids[static_cast<size_t>(t * k + j)] - begin;
      if (e < 0 || e >= n) continue;
      for (int64_t r = 0; r < ffe; ++r) {
        const float g = dot(gate.row(begin + e, r), xr.data(), d), u = dot(up.row(begin + e, r), xr.data(), d);
        h[static_cast<size_t>(r)] = (act == Activation::kSilu ? kernels::silu_ref(g) : kernels::gelu_tanh_ref(g)) * u;
      }
      if (down_quant) q8_round(h.data(), ffe);
      const float wj = w[static_cast<size_t>(t * k + j)];
      for (int64_t r = 0; r < d; ++r) {
        const float p = wj * dot(down.row(begin + e, r), h.data(), ffe);
        o[r] = started ? o[r] + p : p;
      }
      started = true;
    }
    if (!started) std::fill(o, o + d, 0.f);
  }
  return out;
}

// moe_experts: groups of every expert, of a middle range and of one expert no token routes to; accumulate
// on and off; SiLU (and GELU once).
TEST_P(CudaMoe, ExpertsMatchRef) {
  REQUIRE_GPU();
  const auto [t, split] = GetParam();
  const bool quant = traits(t).quantized;
  std::mt19937 rng(static_cast<unsigned>(t) * 17 + (split ? 1 : 0));
  const int64_t n_expert = 8, k = 3, d = 512, ffe = 256;
  auto gate = make_stack(E, rng, t, split, d, ffe, n_expert);
  auto up = make_stack(E, rng, t, split, d, ffe, n_expert);
  auto down = make_stack(E, rng, t, split, ffe, d, n_expert);
  RefOps llama(RefNumerics::kLlamaCpp);
  const int64_t T_max = 300;
  DevTensor sg(*E, DType::F32, ffe, k, T_max), su(*E, DType::F32, ffe, k, T_max), sy(*E, DType::F32, d, k, T_max);
  struct Group {
    int64_t begin, n;
  };
  for (int64_t T : {1, 3, 16, 64, 300}) {
    const std::vector<int32_t> ids = routing(n_expert, k, T, static_cast<uint32_t>(T) + 9);
    const std::vector<float> x = uniform(rng, static_cast<size_t>(d * T)), w = uniform(rng, static_cast<size_t>(k * T), 0.f, 1.f);
    DevTensor dids(*E, host_i32(ids, k, T)), dw(*E, host_f32(w, k, T)), dx(*E, host_f32(x, d, T));
    for (const Group& grp : {Group{0, n_expert}, Group{2, 4}, Group{0, 1}}) {
      if (T == 300 && grp.begin == 2) continue;
      for (bool accumulate : {false, true}) {
        const Activation act = T == 3 && accumulate ? Activation::kGeluTanh : Activation::kSilu;
        const std::vector<float> out0 = uniform(rng, static_cast<size_t>(d * T));
        DevTensor dout(*E, host_f32(out0, d, T));
        ExpertGroup g;
        g.gate = slice(gate->d(), grp.begin, grp.n);
        g.up = slice(up->d(), grp.begin, grp.n);
        g.down = slice(down->d(), grp.begin, grp.n);
        g.begin = static_cast<int32_t>(grp.begin);
        g.act = act;
        MoeScratch s{sg.view, su.view, sy.view};
        E->ops->moe_experts(g, dx.view, dids.view, dw.view, s, accumulate, dout.view);
        SYNC();
        const std::vector<float> got = values<float>(dout.download());
        const std::string what = case_name(GetParam()) + " T=" + std::to_string(T) + " group [" +
                                 std::to_string(grp.begin) + ", " + std::to_string(grp.begin + grp.n) + ")" +
                                 (accumulate ? " acc" : "") + (act == Activation::kSilu ? "" : " gelu");
        const std::vector<float> want = emulate_experts(*gate, *up, *down, grp.begin, grp.n, x, ids, w, k, T, act,
                                                        accumulate, out0, quant, quant);
        if (grp.begin == 0 && grp.n == 1) {  // no token routes to expert 0: out untouched, or zeros
          const std::vector<float> zeros(static_cast<size_t>(d * T), 0.f);
          EXPECT_EQ(got, accumulate ? out0 : zeros) << what;
          continue;
        }
        expect_close_vec(got, want, tight_tol(t), what);
        if (T == 3 && !accumulate) {  // Ops' default composition on the same CudaOps kernels
          kernels::CudaOpsOptions o;
          o.moe_kernels = false;
          kernels::CudaOps plain(*E->ctx, o);
          DevTensor dout2(*E, host_f32(out0, d, T));
          plain.moe_experts(g, dx.view, dids.view, dw.view, s, accumulate, dout2.view);
          SYNC();
          expect_close_vec(values<float>(dout2.download()), want, tight_tol(t), what + " default");
        }
        if (T <= 16) {  // RefOps with llama.cpp numerics (Ops' default composition)
          std::vector<float> lout = out0, hg(static_cast<size_t>(ffe * k * T)), hu(hg.size()), hy(static_cast<size_t>(d * k * T));
          ExpertGroup hgp = g;
          hgp.gate = slice(gate->h(), grp.begin, grp.n);
          hgp.up = slice(up->h(), grp.begin, grp.n);
          hgp.down = slice(down->h(), grp.begin, grp.n);
          MoeScratch hs{TensorView::make(DType::F32, hg.data(), ffe, k, T), TensorView::make(DType::F32, hu.data(), ffe, k, T),
                        TensorView::make(DType::F32, hy.data(), d, k, T)};
          HostTensor hx = host_f32(x, d, T), hids = host_i32(ids, k, T), hw = host_f32(w, k, T);
          llama.moe_experts(hgp, hx.view, hids.view, hw.view, hs, accumulate, TensorView::make(DType::F32, lout.data(), d, T));
          // With accumulate the sum includes out0: compare what the group added.
          std::vector<float> got_d = got, lout_d = lout;
          if (accumulate) {
            for (size_t i = 0; i < got_d.size(); ++i) {
              got_d[i] -= out0[i];
              lout_d[i] -= out0[i];
            }
          }
          expect_close_vec(got_d, lout_d, kLlamaTol, what + " vs llama");
        }
      }
    }
  }
}

// The references above against RefOps, on the host (runs without a GPU): emulate_experts is RefOps' exact
// composition for float weights, and within the activation rounding for quantized ones.
TEST(CudaMoeReference, EmulationMatchesRefOps) {
  for (DType t : {DType::F16, DType::BF16, DType::Q4_K, DType::Q4_0, DType::Q4_1, DType::Q2_K, DType::Q6_K}) {
    std::mt19937 rng(static_cast<unsigned>(t) + 7);
    const int64_t n_expert = 8, k = 3, d = 256, ffe = 256, T = 5;
    auto gate = make_stack(nullptr, rng, t, false, d, ffe, n_expert);
    auto up = make_stack(nullptr, rng, t, false, d, ffe, n_expert);
    auto down = make_stack(nullptr, rng, t, false, ffe, d, n_expert);
    const std::vector<int32_t> ids = routing(n_expert, k, T, 4);
    const std::vector<float> x = uniform(rng, static_cast<size_t>(d * T)), w = uniform(rng, static_cast<size_t>(k * T), 0.f, 1.f);
    for (bool accumulate : {false, true}) {
      const std::vector<float> out0 = uniform(rng, static_cast<size_t>(d * T));
      const bool q = traits(t).quantized;
      const std::vector<float> want = emulate_experts(*gate, *up, *down, 2, 4, x, ids, w, k, T, Activation::kSilu,
                                                      accumulate, out0, q, q);
      std::vector<float> out = out0, hg(static_cast<size_t>(ffe * k * T)), hu(hg.size()), hy(static_cast<size_t>(d * k * T));
      ExpertGroup g;
      g.gate = slice(gate->h(), 2, 4);
      g.up = slice(up->h(), 2, 4);
      g.down = slice(down->h(), 2, 4);
      g.begin = 2;
      MoeScratch hs{TensorView::make(DType::F32, hg.data(), ffe, k, T), TensorView::make(DType::F32, hu.data(), ffe, k, T),
                    TensorView::make(DType::F32, hy.data(), d, k, T)};
      HostTensor hx = host_f32(x, d, T), hids = host_i32(ids, k, T), hw = host_f32(w, k, T);
      std::vector<float> lout = out0;
      RefOps ref, llama(RefNumerics::kLlamaCpp);
      ref.moe_experts(g, hx.view, hids.view, hw.view, hs, accumulate, TensorView::make(DType::F32, out.data(), d, T));
      llama.moe_experts(g, hx.view, hids.view, hw.view, hs, accumulate, TensorView::make(DType::F32, lout.data(), d, T));
      std::vector<float> want_d = want;
      if (accumulate) {
        for (size_t i = 0; i < out.size(); ++i) {
          out[i] -= out0[i];
          lout[i] -= out0[i];
          want_d[i] -= out0[i];
        }
      }
      const std::string what = std::string(dtype_name(t)) + (accumulate ? " acc" : "");
      expect_close_vec(want_d, out, q ? 2e-2 : 1e-5, what);
      expect_close_vec(want_d, lout, kLlamaTol, what + " vs llama");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(CudaMoeTypes, CudaMoe, ::testing::ValuesIn(kMoeCases),
                         [](const ::testing::TestParamInfo<MoeCase>& i) { return case_name(i.param); });

// Widths of 2048: the Q4_K rows the wide decoder reads (32-byte chunks), rows longer than one warp load (Q8_0:
// 2 rounds), and the split layouts of Q2_K / Q3_K / Q6_K; decode and a small batch.
TEST(CudaMoeWide, ExpertsMatchRef) {
  REQUIRE_GPU();
  for (const MoeCase c : {MoeCase{DType::Q4_K, false}, MoeCase{DType::Q8_0, true}, MoeCase{DType::Q2_K, true},
                          MoeCase{DType::Q3_K, true}, MoeCase{DType::Q6_K, true}}) {
    std::mt19937 rng(static_cast<unsigned>(c.type) + 100);
    const int64_t n_expert = 6, k = 4, d = 2048, ffe = 2048;
    auto gate = make_stack(E, rng, c.type, c.split, d, ffe, n_expert);
    auto up = make_stack(E, rng, c.type, c.split, d, ffe, n_expert);
    auto down = make_stack(E, rng, c.type, c.split, ffe, d, n_expert);
    DevTensor sg(*E, DType::F32, ffe, k, 16), su(*E, DType::F32, ffe, k, 16), sy(*E, DType::F32, d, k, 16);
    for (int64_t T : {1, 16}) {
      const std::vector<int32_t> ids = routing(n_expert, k, T, static_cast<uint32_t>(T) + 3);
      const std::vector<float> x = uniform(rng, static_cast<size_t>(d * T)), w = uniform(rng, static_cast<size_t>(k * T), 0.f, 1.f);
      DevTensor dids(*E, host_i32(ids, k, T)), dw(*E, host_f32(w, k, T)), dx(*E, host_f32(x, d, T)), dout(*E, DType::F32, d, T);
      dout.poison();
      ExpertGroup g;
      g.gate = gate->d();
      g.up = up->d();
      g.down = down->d();
      E->ops->moe_experts(g, dx.view, dids.view, dw.view, MoeScratch{sg.view, su.view, sy.view}, false, dout.view);
      SYNC();
      const std::vector<float> want = emulate_experts(*gate, *up, *down, 0, n_expert, x, ids, w, k, T, Activation::kSilu,
                                                      false, std::vector<float>(static_cast<size_t>(d * T)), true, true);
      expect_close_vec(values<float>(dout.download()), want, tight_tol(c.type),
                       case_name(c) + " d=2048 T=" + std::to_string(T));
    }
  }
}

// moe_combine: RefOps' scale and add in slot order, bit for bit.
TEST(CudaMoeCombine, BitwiseAsRef) {
  REQUIRE_GPU();
  std::mt19937 rng(21);
  RefOps ref;
  for (int64_t T : {1, 5, 300}) {
    const int64_t d = 200, k = 8;
    const std::vector<float> y = uniform(rng, static_cast<size_t>(d * k * T)), w = uniform(rng, static_cast<size_t>(k * T));
    DevTensor dy(*E, host_f32(y, d, k, T)), dw(*E, host_f32(w, k, T)), dout(*E, DType::F32, d, T);
    dout.poison();
    E->ops->moe_combine(dy.view, dw.view, dout.view);
    SYNC();
    std::vector<float> hy = y, want(static_cast<size_t>(d * T));
    ref.moe_combine(TensorView::make(DType::F32, hy.data(), d, k, T), host_f32(w, k, T).view,
                    TensorView::make(DType::F32, want.data(), d, T));
    EXPECT_EQ(values<float>(dout.download()), want) << "T=" << T;
  }
}

// In decode the experts' input is the rms_norm's output, whose Q8 image the norm stashed: moe_experts reads it
// instead of quantizing again, with the same result bit for bit.
TEST(CudaMoeStash, NormImageGivesTheSameResult) {
  REQUIRE_GPU();
  std::mt19937 rng(31);
  const int64_t n_expert = 8, k = 2, d = 512, ffe = 256, T = 2;
  auto gate = make_stack(E, rng, DType::Q4_K, false, d, ffe, n_expert);
  auto up = make_stack(E, rng, DType::Q4_K, false, d, ffe, n_expert);
  auto down = make_stack(E, rng, DType::Q4_K, false, ffe, d, n_expert);
  DevTensor sg(*E, DType::F32, ffe, k, T), su(*E, DType::F32, ffe, k, T), sy(*E, DType::F32, d, k, T);
  const std::vector<int32_t> ids = routing(n_expert, k, T, 1);
  DevTensor dids(*E, host_i32(ids, k, T)), dw(*E, host_f32(uniform(rng, static_cast<size_t>(k * T)), k, T));
  DevTensor dx(*E, host_f32(uniform(rng, static_cast<size_t>(d * T)), d, T)), dnw(*E, host_f32(uniform(rng, d), d));
  DevTensor dxn(*E, DType::F32, d, T), o1(*E, DType::F32, d, T), o2(*E, DType::F32, d, T);
  ExpertGroup g;
  g.gate = gate->d();
  g.up = up->d();
  g.down = down->d();
  const MoeScratch s{sg.view, su.view, sy.view};
  E->ops->rms_norm(dx.view, dnw.view, 1e-6f, dxn.view);  // stashes xn's Q8 image
  E->ops->moe_experts(g, dxn.view, dids.view, dw.view, s, false, o1.view);
  E->ops->scale(dx.view, 1.f, dx.view);  // any other op forgets the stash
  E->ops->moe_experts(g, dxn.view, dids.view, dw.view, s, false, o2.view);
  SYNC();
  EXPECT_EQ(values<float>(o1.download()), values<float>(o2.download()));
}

}  // namespace
}  // namespace ferry::cudatest
