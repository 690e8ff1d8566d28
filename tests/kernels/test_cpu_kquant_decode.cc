// The decode (direct) kernels on row lengths the shared matmul test does not reach, at every vector
// level this CPU has, 1..4 act columns: the chunked Q4_K / Q5_K kernels (AVX-512:
// kernels_avx512_kquants.cc; AVX2 and AVX-VNNI: simd_kquant_impl.h) and the other k-quants over several
// scale chunks with a partial last one, the kernels' largest row (32768) and one past it (the fallback
// kernel); the legacy types' 8-block steps (simd_direct_impl.h) and the AVX-512 16-block chunks with a
// partial last step, and the paired-nibble Q4_0 / Q4_1 kernel's largest row and one past it. Against
// the scalar level (same act quantization) to float rounding, and against the dequantized weights to
// the act quantization error.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "tensor/quant.h"

namespace ferry::kernels {
namespace {

class CpuKquantDecode : public ::testing::TestWithParam<DType> {};

TEST_P(CpuKquantDecode, LongRowsMatchScalar) {
  const DType type = GetParam();
  std::vector<CpuIsa> vector_levels;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx2Vnni, CpuIsa::kAvx512})
    if (cpu_isa_supported(isa)) vector_levels.push_back(isa);
  if (vector_levels.empty()) GTEST_SKIP() << "no AVX2";
  auto scalar = make_cpu_ops(1, CpuIsa::kScalar);
  uint32_t seed = 11;
  std::vector<int64_t> Ks = {4096, 256 * 17, 256 * 37, 32768, 33024};
  if (traits(type).block_elems == 32) {  // partial last 8-block steps: 131 = 16 * 8 + 3 blocks, 1027 = 128 * 8 + 3
    Ks.push_back(32 * 131);
    Ks.push_back(32 * 1027);
  }
  for (int64_t K : Ks) {
    const int64_t N = 19;
    std::mt19937 rng(seed++);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> wf(static_cast<size_t>(K * N));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) wf[n * K + k] = nd(rng) * 0.02f * (1.f + static_cast<float>(n % 3)) + 0.01f;
    const size_t rb = row_bytes(type, K);
    std::vector<uint8_t> w(rb * static_cast<size_t>(N));
    std::vector<float> deq(static_cast<size_t>(K * N));
    for (int64_t n = 0; n < N; ++n) {
      quantize_row(type, wf.data() + n * K, w.data() + rb * n, K);
      dequantize_row(type, w.data() + rb * n, deq.data() + n * K, K);
    }
    for (int64_t T : {1, 2, 3, 4}) {
      std::vector<float> x(static_cast<size_t>(K * T));
      for (float& v : x) v = nd(rng);
      std::vector<float> want(static_cast<size_t>(N * T));
      const TensorView wv = TensorView::make(type, w.data(), K, N);
      const TensorView xv = TensorView::make(DType::F32, x.data(), K, T);
      scalar->matmul(wv, xv, TensorView::make(DType::F32, want.data(), N, T));
      for (CpuIsa isa : vector_levels) {
        std::vector<float> got(want.size());
        make_cpu_ops(2, isa)->matmul(wv, xv, TensorView::make(DType::F32, got.data(), N, T));
        for (int64_t t = 0; t < T; ++t)
          for (int64_t n = 0; n < N; ++n) {
            double mag = 0, exact = 0;
            for (int64_t k = 0; k < K; ++k) {
              mag += std::fabs(static_cast<double>(deq[n * K + k]) * x[t * K + k]);
              exact += static_cast<double>(deq[n * K + k]) * x[t * K + k];
            }
            const size_t i = static_cast<size_t>(t * N + n);
            SCOPED_TRACE(std::string(dtype_name(type)) + " " + cpu_isa_name(isa) + " K=" + std::to_string(K) +
                         " T=" + std::to_string(T) + " t=" + std::to_string(t) + " n=" + std::to_string(n));
            ASSERT_NEAR(got[i], want[i], 2e-5 * mag + 1e-6);
            // int8 activations: relative error per element <= 1/254 of the block's max.
            ASSERT_NEAR(got[i], exact, 0.01 * mag + 1e-4);
          }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kquants, CpuKquantDecode,
                         ::testing::Values(DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q2_K, DType::Q3_K),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });
INSTANTIATE_TEST_SUITE_P(Legacy, CpuKquantDecode,
                         ::testing::Values(DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::MXFP4),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

}  // namespace
}  // namespace ferry::kernels
