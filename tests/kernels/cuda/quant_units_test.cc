// Host tests of kernels/cuda/quant_units.h: the per-type decoders the CUDA kernels run, checked on the CPU
// against the reference dequantizer (tensor/quant.h) so layout mistakes are caught in CI without a GPU.
#include "kernels/cuda/quant_units.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tensor/quant.h"

namespace ferry::kernels::cuda {
namespace {

constexpr DType kQuantTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                                 DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};

template <DType T>
void dequant32_row(const uint8_t* row, int64_t K, float* out) {
  for (int g = 0; g < K / 32; ++g) dequant32<T>(row, g, out + 32 * g);
}

template <DType T>
float dot_row(const uint8_t* row, int64_t K, const int* xq, const XDs* xds) {
  const int be = traits(T).block_elems;
  float s = 0.f;
  for (int b = 0; b < K / be; ++b) {
    for (int sl = 0; sl < SliceTraits<T>::kSlices; ++sl) {
      s += dot_slice<T>(block_ptr<T>(row, b), sl, xq + b * (be / 4), xds + b * (be / 32));
    }
  }
  return s;
}

void dispatch_dequant(DType t, const uint8_t* row, int64_t K, float* out) {
  switch (t) {
    case DType::Q4_0: return dequant32_row<DType::Q4_0>(row, K, out);
    case DType::Q4_1: return dequant32_row<DType::Q4_1>(row, K, out);
    case DType::Q5_0: return dequant32_row<DType::Q5_0>(row, K, out);
    case DType::Q5_1: return dequant32_row<DType::Q5_1>(row, K, out);
    case DType::Q8_0: return dequant32_row<DType::Q8_0>(row, K, out);
    case DType::Q2_K: return dequant32_row<DType::Q2_K>(row, K, out);
    case DType::Q3_K: return dequant32_row<DType::Q3_K>(row, K, out);
    case DType::Q4_K: return dequant32_row<DType::Q4_K>(row, K, out);
    case DType::Q5_K: return dequant32_row<DType::Q5_K>(row, K, out);
    case DType::Q6_K: return dequant32_row<DType::Q6_K>(row, K, out);
    default: FAIL();
  }
}

float dispatch_dot(DType t, const uint8_t* row, int64_t K, const int* xq, const XDs* xds) {
  switch (t) {
    case DType::Q4_0: return dot_row<DType::Q4_0>(row, K, xq, xds);
    case DType::Q4_1: return dot_row<DType::Q4_1>(row, K, xq, xds);
    case DType::Q5_0: return dot_row<DType::Q5_0>(row, K, xq, xds);
    case DType::Q5_1: return dot_row<DType::Q5_1>(row, K, xq, xds);
    case DType::Q8_0: return dot_row<DType::Q8_0>(row, K, xq, xds);
    case DType::Q2_K: return dot_row<DType::Q2_K>(row, K, xq, xds);
    case DType::Q3_K: return dot_row<DType::Q3_K>(row, K, xq, xds);
    case DType::Q4_K: return dot_row<DType::Q4_K>(row, K, xq, xds);
    case DType::Q5_K: return dot_row<DType::Q5_K>(row, K, xq, xds);
    case DType::Q6_K: return dot_row<DType::Q6_K>(row, K, xq, xds);
    default: return NAN;
  }
}

// The activation quantization of matvec.cu's quantize_q8_kernel, on the host.
void quantize_q8_host(const float* x, int64_t K, int8_t* xq, XDs* xds) {
  for (int64_t b = 0; b < K / 32; ++b) {
    float amax = 0.f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
    const float d = amax / 127.f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      const int q = amax > 0.f ? static_cast<int>(std::nearbyint(x[32 * b + i] / d)) : 0;
      xq[32 * b + i] = static_cast<int8_t>(q);
      sum += q;
    }
    xds[b] = XDs{d, d * static_cast<float>(sum)};
  }
}

TEST(QuantUnits, BytePrimitives) {
  for (int q = 0; q < 64; ++q) {
    const int packed = q | (q << 8) | (63 - q) << 16 | (q ^ 21) << 24;
    const int s = sub32_bytes(packed);
    EXPECT_EQ(static_cast<int8_t>(s & 0xff), q - 32);
    EXPECT_EQ(static_cast<int8_t>((s >> 8) & 0xff), q - 32);
    EXPECT_EQ(static_cast<int8_t>((s >> 16) & 0xff), 63 - q - 32);
    EXPECT_EQ(static_cast<int8_t>((s >> 24) & 0xff), (q ^ 21) - 32);
  }
  for (int v = 0; v < 8; ++v) {
    const int packed = v | (7 - v) << 8 | v << 16 | (v ^ 5) << 24;
    const int s = sub4_bytes(packed);
    EXPECT_EQ(static_cast<int8_t>(s & 0xff), v - 4);
    EXPECT_EQ(static_cast<int8_t>((s >> 8) & 0xff), 7 - v - 4);
    EXPECT_EQ(static_cast<int8_t>((s >> 16) & 0xff), v - 4);
    EXPECT_EQ(static_cast<int8_t>((s >> 24) & 0xff), (v ^ 5) - 4);
  }
  EXPECT_EQ(dp4a(0x01020304, 0x01010101, 5), 15);
  EXPECT_EQ(dp4a(static_cast<int>(0xFF02FE01u), 0x02020202, 0), 2 * (-1 + 2 - 2 + 1));
  for (uint32_t b = 0; b < 16; ++b) {
    const int s = spread_bit4(b);
    for (int i = 0; i < 4; ++i) EXPECT_EQ((s >> (8 * i)) & 0xff, ((b >> i) & 1) << 4);
  }
}

class QuantUnitsType : public ::testing::TestWithParam<DType> {};

TEST_P(QuantUnitsType, Dequant32MatchesReference) {
  const DType t = GetParam();
  const int64_t K = 1024;  // 4 k-quant super-blocks
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> w(K);
  for (float& v : w) v = nd(rng);
  std::vector<uint8_t> q(row_bytes(t, K));
  quantize_row(t, w.data(), q.data(), K);
  std::vector<float> ref(K), got(K);
  dequantize_row(t, q.data(), ref.data(), K);
  dispatch_dequant(t, q.data(), K, got.data());
  for (int64_t i = 0; i < K; ++i) ASSERT_EQ(got[i], ref[i]) << dtype_name(t) << " element " << i;
}

TEST_P(QuantUnitsType, DotSlicesMatchReference) {
  const DType t = GetParam();
  const int64_t K = 2048;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int rep = 0; rep < 4; ++rep) {
    std::vector<float> w(K), x(K);
    for (float& v : w) v = nd(rng);
    for (float& v : x) v = nd(rng) * (rep + 1);
    std::vector<uint8_t> q(row_bytes(t, K));
    quantize_row(t, w.data(), q.data(), K);
    std::vector<float> wd(K);
    dequantize_row(t, q.data(), wd.data(), K);
    std::vector<int8_t> xq(K);
    std::vector<XDs> xds(K / 32);
    quantize_q8_host(x.data(), K, xq.data(), xds.data());
    // Reference: the dequantized weights times the dequantized int8 activations, in double.
    double ref = 0, mag = 0;
    for (int64_t k = 0; k < K; ++k) {
      const double xk = static_cast<double>(xds[k / 32].x) * xq[k];
      ref += static_cast<double>(wd[k]) * xk;
      mag += std::fabs(static_cast<double>(wd[k]) * xk);
    }
    const float got = dispatch_dot(t, q.data(), K, reinterpret_cast<const int*>(xq.data()), xds.data());
    EXPECT_NEAR(got, ref, 2e-5 * mag + 1e-6) << dtype_name(t) << " rep " << rep;
  }
}

INSTANTIATE_TEST_SUITE_P(AllQuant, QuantUnitsType, ::testing::ValuesIn(kQuantTypes),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

}  // namespace
}  // namespace ferry::kernels::cuda
