// gpt-oss's expert path on CUDA against RefOps: add_expert_bias (ggml's add_id) and moe_experts on MXFP4
// stacks with per-expert biases and the clamped SwiGLU, on the fast path (moe_matvec over the sorted pairs,
// the biases added by expert id after each matvec) and on Ops' default composition over CudaOps' kernels.
// The MXFP4 matmul itself is CudaMxfp4/CudaMatmul, the activation CudaOps.AddScaleGlu, the sinks CudaSinks
// (cuda_ops_test.cc). GPU only (test_cuda_ops).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_test_util.h"
#include "kernels/ref/ref_ops.h"

namespace ferry::cudatest {
namespace {

using kernels::Activation;
using kernels::ExpertGroup;
using kernels::MoeScratch;
using kernels::RefNumerics;
using kernels::RefOps;

Env* gptoss_env() {
  std::string why;
  return env(&why);
}

#define REQUIRE_GPU()       \
  Env* E = gptoss_env();    \
  if (E == nullptr) GTEST_SKIP() << "no usable CUDA GPU"

#define SYNC()                                           \
  do {                                                   \
    const Status sync_st_ = E->sync();                   \
    ASSERT_TRUE(sync_st_.is_ok()) << sync_st_.message(); \
  } while (0)

// A copy with its own bytes (HostTensor's copy would keep viewing the original's).
HostTensor copy_of(const HostTensor& h) {
  HostTensor c(h.view.dtype, h.view.ne[0], h.view.ne[1], h.view.ne[2], h.view.ne[3]);
  c.bytes = h.bytes;
  return c;
}

void expect_close(const HostTensor& got, const HostTensor& ref, double tol, const std::string& what) {
  ASSERT_EQ(got.n(), ref.n()) << what;
  const ErrStats s = compare(got.data<float>(), ref.data<float>(), got.n());
  EXPECT_EQ(s.non_finite, 0) << what << ": " << describe(s);
  EXPECT_LE(s.nrmse, tol) << what << ": " << describe(s);
  EXPECT_LE(s.max_abs, 8 * tol * std::max(s.ref_max, 1e-3)) << what << ": " << describe(s);
}

HostTensor uniform_f32(std::mt19937& rng, int64_t ne0, int64_t ne1, int64_t ne2 = 1, float lo = -1.f, float hi = 1.f) {
  HostTensor t(DType::F32, ne0, ne1, ne2);
  fill_uniform(rng, t.data<float>(), t.n(), lo, hi);
  return t;
}

// [k, T] routing: k distinct experts per token out of n_expert, expert 0 never (a group of it gets nothing).
HostTensor routing(std::mt19937& rng, int64_t n_expert, int64_t k, int64_t T) {
  HostTensor ids(DType::I32, k, T);
  std::vector<int32_t> pool;
  for (int64_t t = 0; t < T; ++t) {
    pool.clear();
    for (int32_t e = 1; e < n_expert; ++e) pool.push_back(e);
    std::shuffle(pool.begin(), pool.end(), rng);
    for (int64_t j = 0; j < k; ++j) ids.data<int32_t>()[t * k + j] = pool[static_cast<size_t>(j)];
  }
  return ids;
}

// A stacked [K, N, n] view of a [K, N * n] tensor; experts [begin, begin + count) of it.
TensorView experts(TensorView v, int64_t N, int64_t n, int64_t begin, int64_t count) {
  v.ne[1] = N;
  v.ne[2] = count;
  v.nb[2] = v.nb[1] * static_cast<size_t>(N);
  v.nb[3] = v.nb[2] * static_cast<size_t>(n);
  v.data = static_cast<char*>(v.data) + static_cast<size_t>(begin) * v.nb[2];
  return v;
}
// Columns [begin, begin + count) of a bias table [N, n].
TensorView columns(TensorView v, int64_t begin, int64_t count) {
  v.data = static_cast<char*>(v.data) + static_cast<size_t>(begin) * v.nb[1];
  v.ne[1] = count;
  return v;
}

// ggml's add_id: one rounded add per element, so bit for bit RefOps'; slots of other groups untouched.
TEST(CudaSwigluOai, AddExpertBiasBitwiseAsRef) {
  REQUIRE_GPU();
  std::mt19937 rng(29);
  const int64_t n_expert = 8, k = 4, N = 300, T = 7;
  HostTensor bias = uniform_f32(rng, N, n_expert), ids = routing(rng, n_expert, k, T);
  DevTensor dbias(*E, bias), dids(*E, ids);
  for (int64_t begin : {0, 3}) {
    const int64_t count = begin == 0 ? n_expert : 4;
    HostTensor y = uniform_f32(rng, N, k, T), want = copy_of(y);
    RefOps().add_expert_bias(columns(bias.view, begin, count), ids.view, static_cast<int32_t>(begin), want.view);
    DevTensor dy(*E, y);
    E->ops->add_expert_bias(columns(dbias.view, begin, count), dids.view, static_cast<int32_t>(begin), dy.view);
    SYNC();
    EXPECT_EQ(dy.download().bytes, want.bytes) << "experts [" << begin << ", " << begin + count << ")";
  }
}

// A layer's experts in MXFP4 with gate / up / down biases and the clamped SwiGLU (gate and up large enough to
// cross the +-7 clamps), in groups, with and without accumulation, decode and batches.
TEST(CudaSwigluOai, BiasedMxfp4GroupsMatchRef) {
  REQUIRE_GPU();
  std::mt19937 rng(31);
  const DType t = DType::MXFP4;
  const int64_t n_expert = 8, k = 4, d = 512, ffe = 256, T_max = 64;
  HostTensor gate = random_weights(rng, t, d, ffe * n_expert), up = random_weights(rng, t, d, ffe * n_expert);
  HostTensor down = random_weights(rng, t, ffe, d * n_expert);
  HostTensor bg = uniform_f32(rng, ffe, n_expert, 1, -2.f, 2.f), bu = uniform_f32(rng, ffe, n_expert, 1, -2.f, 2.f);
  HostTensor bd = uniform_f32(rng, d, n_expert);
  DevTensor dgate(*E, gate), dup(*E, up), ddown(*E, down), dbg(*E, bg), dbu(*E, bu), dbd(*E, bd);
  DevTensor sg(*E, DType::F32, ffe, k, T_max), su(*E, DType::F32, ffe, k, T_max), sy(*E, DType::F32, d, k, T_max);
  kernels::CudaOpsOptions o;
  o.moe_kernels = false;
  kernels::CudaOps plain(*E->ctx, o);  // Ops' default composition on CudaOps' kernels
  RefOps ref, llama(RefNumerics::kLlamaCpp);
  for (int64_t T : {1, 5, 64}) {
    HostTensor ids = routing(rng, n_expert, k, T), w = uniform_f32(rng, k, T, 1, 0.f, 1.f);
    HostTensor x = uniform_f32(rng, d, T, 1, -3.f, 3.f);
    DevTensor dids(*E, ids), dw(*E, w), dx(*E, x);
    for (int64_t begin : {0, 2}) {
      const int64_t count = begin == 0 ? n_expert : 4;
      for (bool accumulate : {false, true}) {
        const std::string what = "T=" + std::to_string(T) + " experts [" + std::to_string(begin) + ", " +
                                 std::to_string(begin + count) + ")" + (accumulate ? " acc" : "");
        auto group = [&](const TensorView& g_, const TensorView& u_, const TensorView& d_, const TensorView& bg_,
                         const TensorView& bu_, const TensorView& bd_) {
          ExpertGroup g;
          g.gate = experts(g_, ffe, n_expert, begin, count);
          g.up = experts(u_, ffe, n_expert, begin, count);
          g.down = experts(d_, d, n_expert, begin, count);
          g.begin = static_cast<int32_t>(begin);
          g.act = Activation::kSwigluOai;
          g.gate_bias = columns(bg_, begin, count);
          g.up_bias = columns(bu_, begin, count);
          g.down_bias = columns(bd_, begin, count);
          return g;
        };
        const ExpertGroup hg = group(gate.view, up.view, down.view, bg.view, bu.view, bd.view);
        const ExpertGroup dg = group(dgate.view, dup.view, ddown.view, dbg.view, dbu.view, dbd.view);
        HostTensor out0 = uniform_f32(rng, d, T);
        HostTensor hgs(DType::F32, ffe, k, T), hus(DType::F32, ffe, k, T), hys(DType::F32, d, k, T);
        const MoeScratch hs{hgs.view, hus.view, hys.view};
        HostTensor want = copy_of(out0), want_llama = copy_of(out0);
        ref.moe_experts(hg, x.view, ids.view, w.view, hs, accumulate, want.view);
        llama.moe_experts(hg, x.view, ids.view, w.view, hs, accumulate, want_llama.view);
        const MoeScratch ds{sg.view, su.view, sy.view};
        DevTensor fast(*E, out0), dflt(*E, out0);
        E->ops->moe_experts(dg, dx.view, dids.view, dw.view, ds, accumulate, fast.view);
        SYNC();
        const HostTensor got = fast.download();
        plain.moe_experts(dg, dx.view, dids.view, dw.view, ds, accumulate, dflt.view);
        SYNC();
        const HostTensor got_default = dflt.download();
        // Q8 activations (32-element blocks) against RefOps' float ones; the two CUDA paths round alike.
        expect_close(got, want, 2e-2, what + " fast vs RefOps");
        expect_close(got, want_llama, 6e-2, what + " fast vs RefOps (llama.cpp numerics)");
        expect_close(got_default, got, 2e-3, what + " default vs fast");
      }
    }
  }
}

}  // namespace
}  // namespace ferry::cudatest
