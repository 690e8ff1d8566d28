// Fixture-free sanity checks of every weight type: quantize then dequantize stays within a per-type
// error bound, zeros stay zeros, constant and tiny blocks give finite values, and dot_row_ref equals
// dequantize + dot. (The tests that pin ggml equality are in quant_fixture_test.cc.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/quant.h"

namespace ferry {
namespace {

// Relative RMS error bound, sqrt(mean((deq - x)^2)) / sqrt(mean(x^2)), on Gaussian rows (4 x 4096,
// seed 7). Measured with this implementation (identical to ggml's), bound in parentheses; the ~20%
// headroom only absorbs other standard libraries' std::normal_distribution:
//   F32  0         (0)       F16  2.09e-4 (2.6e-4)   BF16 1.64e-3 (2.0e-3)
//   Q8_0 5.33e-3   (6.5e-3)  Q8_1 5.33e-3 (6.5e-3)   Q8_K 6.89e-3 (8.5e-3)
//   Q6_K 1.78e-2   (2.2e-2)  Q5_K 3.60e-2 (4.4e-2)   Q5_1 3.77e-2 (4.6e-2)   Q5_0 4.23e-2 (5.2e-2)
//   Q4_K 7.11e-2   (8.7e-2)  Q4_1 7.80e-2 (9.5e-2)   Q4_0 8.56e-2 (0.105)
//   Q3_K 0.151     (0.18)    Q2_K 0.296   (0.36)    MXFP4 0.115 (0.14: numpy's Gaussian; 2 mantissa levels
//   per octave and a power-of-two scale)
// (For a Gaussian the step of a b-bit symmetric block is ~2.1 sigma / 2^(b-1), RMS error step/sqrt(12).)
struct Bound {
  DType type;
  double rel_rmse;
};
constexpr Bound kBounds[] = {
    {DType::F32, 0.0},     {DType::F16, 2.6e-4},  {DType::BF16, 2.0e-3}, {DType::Q8_0, 6.5e-3},
    {DType::Q6_K, 2.2e-2}, {DType::Q5_0, 5.2e-2}, {DType::Q5_1, 4.6e-2}, {DType::Q5_K, 4.4e-2},
    {DType::Q4_0, 0.105},  {DType::Q4_1, 9.5e-2}, {DType::Q4_K, 8.7e-2}, {DType::Q3_K, 0.18},
    {DType::Q2_K, 0.36},   {DType::Q8_1, 6.5e-3}, {DType::Q8_K, 8.5e-3}, {DType::MXFP4, 0.14},
};

std::vector<float> gaussian(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

class RoundTrip : public ::testing::TestWithParam<Bound> {};

TEST_P(RoundTrip, ErrorWithinBound) {
  const DType t = GetParam().type;
  constexpr int64_t kRows = 4, kN = 4096;
  const std::vector<float> x = gaussian(kRows * kN, 7, 0.02f);
  std::vector<uint8_t> q(row_bytes(t, kN));
  std::vector<float> y(kN);
  double err2 = 0, ref2 = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    quantize_row(t, x.data() + r * kN, q.data(), kN);
    dequantize_row(t, q.data(), y.data(), kN);
    for (int64_t i = 0; i < kN; ++i) {
      const double d = static_cast<double>(y[i]) - x[r * kN + i];
      err2 += d * d;
      ref2 += static_cast<double>(x[r * kN + i]) * x[r * kN + i];
    }
  }
  const double rel = std::sqrt(err2 / ref2);
  RecordProperty("rel_rmse", std::to_string(rel));
  EXPECT_LE(rel, GetParam().rel_rmse) << dtype_name(t);
}

TEST_P(RoundTrip, SpecialBlocks) {
  const DType t = GetParam().type;
  const int64_t n = 512;  // two super-blocks / sixteen legacy blocks
  std::vector<uint8_t> q(row_bytes(t, n));
  std::vector<float> y(n);
  // Zeros stay exactly zero.
  std::vector<float> x(n, 0.0f);
  quantize_row(t, x.data(), q.data(), n);
  dequantize_row(t, q.data(), y.data(), n);
  for (float v : y) ASSERT_EQ(v, 0.0f) << dtype_name(t);
  // Constant blocks with one outlier, at ordinary and at tiny magnitudes: the output is finite and
  // within 1.25x the input range (fp16 scales in the subnormal range round coarsely; at 3e-7 the
  // k-quants' sub-scales underflow to zero, as in ggml), so only ordinary magnitudes get an error bound.
  for (float c : {0.37f, -2.5f, 1e-12f, 3e-7f}) {
    std::fill(x.begin(), x.end(), c);
    x[5] = c * 50;
    const float amax = std::fabs(c) * 50;
    quantize_row(t, x.data(), q.data(), n);
    dequantize_row(t, q.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(std::isfinite(y[i])) << dtype_name(t) << " c=" << c << " i=" << i;
      ASSERT_LE(std::fabs(y[i]), amax * 1.25f) << dtype_name(t) << " c=" << c << " i=" << i;
      // MXFP4's scale 2^(floor(log2 amax) - 2) tops out at 1.5 * 2^floor(log2 amax): amax just under a
      // power of two loses up to a quarter (ggml's rule; the outlier 125 here becomes 96).
      const float rel = t == DType::MXFP4 ? 0.25f : 0.2f;
      if (std::fabs(c) > 0.1f) ASSERT_LE(std::fabs(y[i] - x[i]), amax * rel) << dtype_name(t) << " c=" << c;
    }
  }
}

TEST_P(RoundTrip, DotRowRef) {
  const DType t = GetParam().type;
  const int64_t n = 2048 + 256 * 3;  // not a multiple of dot_row_ref's internal chunk
  const std::vector<float> w = gaussian(n, 11, 1.0f), x = gaussian(n, 12, 1.0f);
  std::vector<uint8_t> q(row_bytes(t, n));
  std::vector<float> y(n);
  quantize_row(t, w.data(), q.data(), n);
  dequantize_row(t, q.data(), y.data(), n);
  double want = 0;
  for (int64_t i = 0; i < n; ++i) want += static_cast<double>(y[i]) * static_cast<double>(x[i]);
  EXPECT_EQ(dot_row_ref(t, q.data(), x.data(), n), want) << dtype_name(t);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, RoundTrip, ::testing::ValuesIn(kBounds),
                         [](const ::testing::TestParamInfo<Bound>& info) {
                           return std::string(dtype_name(info.param.type));
                         });

}  // namespace
}  // namespace ferry
