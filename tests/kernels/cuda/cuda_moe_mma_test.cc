// test_cuda_ops, the tensor-core expert kernel (moe_mma.cu, CudaMoeMma*): matmul_id at prefill token counts
// on shapes the other expert tests do not reach (row counts not a multiple of the kernel's 64-row tile, K
// not a multiple of its 8-group step, MXFP4 at gpt-oss's width, items of 1 to 32 pairs), for every type the
// kernel reads, against the same math on the host with the activations rounded to Q8 blocks of 32 as the
// kernels round them; gate / up (two stacks, one input row a token) and down (one input row a slot).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_test_util.h"
#include "tensor/quant.h"

namespace ferry::cudatest {
namespace {

#define REQUIRE_GPU()                        \
  std::string why_;                          \
  Env* E = env(&why_);                       \
  if (E == nullptr) GTEST_SKIP() << why_

std::vector<float> q8_rounded(const float* x, int64_t n) {
  std::vector<float> v(x, x + n);
  for (int64_t b = 0; b + 32 <= n; b += 32) {
    float amax = 0.f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[b + i]));
    const float d = amax / 127.f;
    for (int i = 0; i < 32; ++i) v[b + i] = amax > 0.f ? d * std::nearbyint(v[b + i] / d) : 0.f;
  }
  return v;
}

struct MmaCase {
  DType type;
  int64_t K, N;
};

class CudaMoeMma : public ::testing::TestWithParam<MmaCase> {};

TEST_P(CudaMoeMma, MatmulIdMatchesRef) {
  REQUIRE_GPU();
  const MmaCase c = GetParam();
  const int64_t n_expert = 6, k = 2, T = 150;
  std::mt19937 rng(static_cast<unsigned>(c.type) * 7 + 3);
  // Routing: expert 5 takes token 0 only (an item of one pair), expert 0 every token (5 items of 32 and one
  // of 22), the other slot spread over experts 1..4.
  std::vector<int32_t> ids(static_cast<size_t>(k * T));
  for (int64_t t = 0; t < T; ++t) {
    ids[static_cast<size_t>(t * k)] = 0;
    ids[static_cast<size_t>(t * k + 1)] = t == 0 ? 5 : static_cast<int32_t>(1 + rng() % 4);
  }
  HostTensor hids(DType::I32, k, T);
  std::memcpy(hids.bytes.data(), ids.data(), ids.size() * 4);
  DevTensor dids(*E, hids);

  for (bool shared : {true, false}) {
    const int nw = shared ? 2 : 1;
    const int64_t rows = shared ? 1 : k;
    HostTensor w[2];
    std::vector<float> deq[2];
    std::vector<std::unique_ptr<DevTensor>> dw, dout;
    TensorView ws[2], outs[2];
    const TensorView* pw[2] = {&ws[0], &ws[1]};
    for (int i = 0; i < nw; ++i) {
      w[i] = random_weights(rng, c.type, c.K, c.N * n_expert);
      deq[i].resize(static_cast<size_t>(c.K * c.N * n_expert));
      for (int64_t r = 0; r < c.N * n_expert; ++r)
        dequantize_row(c.type, w[i].view.row(r), deq[i].data() + r * c.K, c.K);
      dw.push_back(std::make_unique<DevTensor>(*E, w[i]));
      ws[i] = dw.back()->view;
      ws[i].ne[1] = c.N;
      ws[i].ne[2] = n_expert;
      ws[i].nb[2] = ws[i].nb[1] * static_cast<size_t>(c.N);
      ws[i].nb[3] = ws[i].nb[2] * static_cast<size_t>(n_expert);
      dout.push_back(std::make_unique<DevTensor>(*E, DType::F32, c.N, k, T));
      dout.back()->poison();
      outs[i] = dout.back()->view;
    }
    HostTensor hx(DType::F32, c.K, rows, T);
    fill_uniform(rng, hx.data<float>(), hx.n());
    DevTensor dx(*E, hx);
    E->ops->matmul_id(nw, pw, dx.view, dids.view, 0, outs);
    const Status st = E->sync();
    ASSERT_TRUE(st.is_ok()) << st.message();

    for (int i = 0; i < nw; ++i) {
      const HostTensor got_h = dout[static_cast<size_t>(i)]->download();
      const float* got_all = got_h.data<float>();
      std::vector<float> got, want;
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t j = 0; j < k; ++j) {
          const int64_t e = ids[static_cast<size_t>(t * k + j)];
          const std::vector<float> xr = q8_rounded(hx.data<float>() + (t * rows + (shared ? 0 : j)) * c.K, c.K);
          for (int64_t r = 0; r < c.N; ++r) {
            const float* wr = deq[i].data() + (e * c.N + r) * c.K;
            double s = 0;
            for (int64_t kk = 0; kk < c.K; ++kk) s += static_cast<double>(wr[kk]) * xr[static_cast<size_t>(kk)];
            want.push_back(static_cast<float>(s));
            got.push_back(got_all[(t * k + j) * c.N + r]);
          }
        }
      }
      const ErrStats s = compare(got.data(), want.data(), static_cast<int64_t>(got.size()));
      const std::string what = std::string(dtype_name(c.type)) + " K=" + std::to_string(c.K) +
                               (shared ? " gate/up " : " down ") + std::to_string(i);
      EXPECT_EQ(s.non_finite, 0) << what << ": " << describe(s);
      EXPECT_LE(s.nrmse, 2e-3) << what << ": " << describe(s);
      EXPECT_LE(s.max_abs, 1.6e-2 * std::max(s.ref_max, 1e-3)) << what << ": " << describe(s);
    }
  }
}

// Legacy types at K = 352 (11 groups: a step of 8 and one of 3), k-quants at 1280 (5 super-blocks; Q6_K's
// scales per 16 as two products a group), MXFP4 at
// gpt-oss's 2880 (90 groups); 100 rows (a 64-row tile and a partial one).
const MmaCase kMmaCases[] = {{DType::Q4_0, 352, 100}, {DType::Q4_1, 352, 100}, {DType::Q5_0, 352, 100},
                             {DType::Q5_1, 352, 100}, {DType::Q8_0, 352, 100}, {DType::Q4_K, 1280, 100},
                             {DType::Q5_K, 1280, 100}, {DType::Q6_K, 1280, 100}, {DType::MXFP4, 2880, 100},
                             {DType::MXFP4, 352, 64}};

INSTANTIATE_TEST_SUITE_P(Types, CudaMoeMma, ::testing::ValuesIn(kMmaCases),
                         [](const ::testing::TestParamInfo<MmaCase>& i) {
                           return std::string(dtype_name(i.param.type)) + "_K" + std::to_string(i.param.K);
                         });

}  // namespace
}  // namespace ferry::cudatest
