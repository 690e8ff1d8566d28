// MXFP4 against values derived from the OCP Microscaling spec by hand (not from any implementation):
// an E2M1 code s e1 e0 m is (-1)^s * (e == 0 ? m * 0.5 : 2^(e - 1) * (1 + m / 2)), i.e. 0, 0.5, 1, 1.5,
// 2, 3, 4, 6; the E8M0 scale byte x is 2^(x - 127). ggml keeps the codes doubled and the scale halved
// (the product is the same, exactly). ggml's own bytes and floats are pinned by quant_fixture_test
// (tests/data/tensor/quant_MXFP4*.bin, made through ctypes from llama-cpp-python's libggml-base).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/quant.h"
#include "tensor/quant_blocks.h"

namespace ferry {
namespace {

double e2m1(int code) {
  const int s = code >> 3, e = (code >> 1) & 3, m = code & 1;
  const double mag = e == 0 ? m * 0.5 : std::ldexp(1.0 + m * 0.5, e - 1);
  return s ? -mag : mag;
}

TEST(Mxfp4, TraitsAndLayout) {
  EXPECT_EQ(static_cast<uint32_t>(DType::MXFP4), 39u);
  EXPECT_EQ(traits(DType::MXFP4).block_elems, 32);
  EXPECT_EQ(traits(DType::MXFP4).block_bytes, 17);
  EXPECT_EQ(row_bytes(DType::MXFP4, 2880), 90u * 17u);
  ASSERT_TRUE(dtype_from_name("mxfp4").has_value());
}

TEST(Mxfp4, DequantizeMatchesSpec) {
  // Every code in both nibbles, at scale bytes covering subnormal halves (0, 1), 2^-127 .. 2^125.
  for (int x : {0, 1, 2, 3, 100, 126, 127, 128, 130, 200, 252}) {  // 6 * 2^(x - 127) overflows past 252
    BlockMXFP4 b;
    b.e = static_cast<uint8_t>(x);
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    float y[32];
    dequantize_row(DType::MXFP4, &b, y, 32);
    for (int j = 0; j < 16; ++j) {
      const double scale = std::ldexp(1.0, x - 127);
      ASSERT_EQ(static_cast<double>(y[j]), e2m1(j) * scale) << "x=" << x << " j=" << j;
      ASSERT_EQ(static_cast<double>(y[j + 16]), e2m1(15 - j) * scale) << "x=" << x << " j=" << j;
    }
  }
}

TEST(Mxfp4, HalfScaleIsExact) {
  for (int x = 0; x < 255; ++x) EXPECT_EQ(static_cast<double>(e8m0_to_fp32_half(static_cast<uint8_t>(x))), std::ldexp(1.0, x - 128));
}

TEST(Mxfp4, QuantizeFollowsTheReferenceRule) {
  // amax 5.0: floor(log2 5) = 2, so the scale byte is 127 and the step of the half-scale grid is 0.5
  // (values 0, +-0.5, 1, 1.5, 2, 3, 4, 6): each element goes to the nearest, the first code on ties.
  float x[32];
  const float vals[] = {5.0f, 0.0f, -0.0f, 0.24f, 0.26f, 0.75f, 1.2f, 2.5f, -2.6f, 3.6f, -5.1f, 7.0f, 4.9f, 1.74f, -1.76f, 0.5f};
  for (int j = 0; j < 16; ++j) {
    x[j] = vals[j];
    x[j + 16] = -vals[j] * 0.5f;
  }
  BlockMXFP4 b;
  quantize_row(DType::MXFP4, x, &b, 32);
  EXPECT_EQ(b.e, 127);
  float y[32];
  dequantize_row(DType::MXFP4, &b, y, 32);
  const float grid[] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  for (int j = 0; j < 32; ++j) {
    // nearest grid magnitude, the smaller one on ties (the positive codes come first)
    float best = 0.f;
    for (float g : grid)
      for (float s : {1.f, -1.f})
        if (std::fabs(s * g - x[j]) < std::fabs(best - x[j])) best = s * g;
    EXPECT_EQ(y[j], best) << "j=" << j << " x=" << x[j];
  }
  // +0 and -0 both take code 0 (positive zero, the first entry).
  EXPECT_EQ(b.qs[1] & 0x0F, 0);
  EXPECT_EQ(b.qs[2] & 0x0F, 0);
  // All zeros: scale byte 0, codes 0.
  float z[32] = {};
  quantize_row(DType::MXFP4, z, &b, 32);
  EXPECT_EQ(b.e, 0);
  for (uint8_t q : b.qs) EXPECT_EQ(q, 0);
}

}  // namespace
}  // namespace ferry
