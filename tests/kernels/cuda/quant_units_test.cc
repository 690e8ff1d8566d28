// Host tests of kernels/cuda/quant_units.h: the per-type decoders the CUDA kernels run, checked on the CPU
// against the reference dequantizer (tensor/quant.h) so layout mistakes are caught in CI without a GPU.
#include "kernels/cuda/quant_chunks.h"
#include "kernels/cuda/quant_groups_i8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "tensor/quant.h"
#include "tensor/repack.h"

namespace ferry::kernels::cuda {
namespace {

constexpr DType kQuantTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                                 DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::MXFP4};

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
    case DType::MXFP4: return dequant32_row<DType::MXFP4>(row, K, out);
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
    case DType::MXFP4: return dot_row<DType::MXFP4>(row, K, xq, xds);
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
  // MXFP4 codes -> kMxfp4Values bytes, four at a time, every code in every byte position.
  for (uint32_t c = 0; c < 16; ++c) {
    const uint32_t q = c | ((15 - c) << 8) | (((c + 5) & 15) << 16) | (((c * 7) & 15) << 24);
    const int v = mxfp4_bytes(q);
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(static_cast<int8_t>((v >> (8 * i)) & 0xff), kMxfp4Values[(q >> (8 * i)) & 15]) << c << " " << i;
  }
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

// ---- int8 groups (the tensor-core expert kernel) ---------------------------------------------------------

template <DType T>
void decode_row_i8(const uint8_t* row, int64_t K, int8_t* q, float* scale, float* min_coef) {
  for (int g = 0; g < K / 32; ++g) {
    uint32_t words[8];
    decode_group_i8<T>(row, g, words, scale + g, min_coef + g);
    std::memcpy(q + 32 * g, words, 32);
  }
}

void dispatch_decode_i8(DType t, const uint8_t* row, int64_t K, int8_t* q, float* scale, float* min_coef) {
  switch (t) {
    case DType::Q4_0: return decode_row_i8<DType::Q4_0>(row, K, q, scale, min_coef);
    case DType::Q4_1: return decode_row_i8<DType::Q4_1>(row, K, q, scale, min_coef);
    case DType::Q5_0: return decode_row_i8<DType::Q5_0>(row, K, q, scale, min_coef);
    case DType::Q5_1: return decode_row_i8<DType::Q5_1>(row, K, q, scale, min_coef);
    case DType::Q8_0: return decode_row_i8<DType::Q8_0>(row, K, q, scale, min_coef);
    case DType::Q4_K: return decode_row_i8<DType::Q4_K>(row, K, q, scale, min_coef);
    case DType::Q5_K: return decode_row_i8<DType::Q5_K>(row, K, q, scale, min_coef);
    case DType::MXFP4: return decode_row_i8<DType::MXFP4>(row, K, q, scale, min_coef);
    case DType::Q6_K: return decode_row_i8<DType::Q6_K>(row, K, q, scale, min_coef);
    default: FAIL() << dtype_name(t);
  }
}

class QuantGroupsI8 : public ::testing::TestWithParam<DType> {};

// scale * q + min_coef is the reference dequantizer's value of every element (halves types: scale * q in
// elements 0..15 of a group, min_coef * q in 16..31), and the group dot products (the integer sums the
// tensor cores form, then the two float terms) equal dot_slice's row dot.
TEST_P(QuantGroupsI8, ValuesAndDotsMatchReference) {
  const DType t = GetParam();
  ASSERT_TRUE(group_i8_supported(t));
  const int64_t K = 2048;
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int rep = 0; rep < 4; ++rep) {
    std::vector<float> w(K), x(K);
    for (float& v : w) v = nd(rng) + (rep == 3 ? 0.7f : 0.f);  // rep 3: an offset, so the mins matter
    for (float& v : x) v = nd(rng) * (rep + 1);
    std::vector<uint8_t> qw(row_bytes(t, K));
    quantize_row(t, w.data(), qw.data(), K);
    std::vector<float> wd(K), scale(K / 32), min_coef(K / 32);
    dequantize_row(t, qw.data(), wd.data(), K);
    std::vector<int8_t> q(K);
    dispatch_decode_i8(t, qw.data(), K, q.data(), scale.data(), min_coef.data());
    const bool halves = group_i8_halves(t);
    for (int64_t k = 0; k < K; ++k) {
      const float v = halves ? (k % 32 < 16 ? scale[k / 32] : min_coef[k / 32]) * static_cast<float>(q[k])
                             : scale[k / 32] * static_cast<float>(q[k]) + min_coef[k / 32];
      ASSERT_NEAR(v, wd[k], 1e-6f * std::fabs(wd[k]) + 1e-7f) << dtype_name(t) << " element " << k;
    }
    std::vector<int8_t> xq(K);
    std::vector<XDs> xds(K / 32);
    quantize_q8_host(x.data(), K, xq.data(), xds.data());
    float got = 0.f;
    double mag = 0;
    for (int64_t g = 0; g < K / 32; ++g) {
      int lo = 0, hi = 0;
      for (int i = 0; i < 16; ++i) lo += q[32 * g + i] * xq[32 * g + i];
      for (int i = 16; i < 32; ++i) hi += q[32 * g + i] * xq[32 * g + i];
      if (halves)
        got += scale[g] * xds[g].x * static_cast<float>(lo) + min_coef[g] * xds[g].x * static_cast<float>(hi);
      else
        got += scale[g] * xds[g].x * static_cast<float>(lo + hi) + min_coef[g] * xds[g].y;
      for (int i = 0; i < 32; ++i) mag += std::fabs(static_cast<double>(wd[32 * g + i]) * xds[g].x * xq[32 * g + i]);
    }
    const float ref = dispatch_dot(t, qw.data(), K, reinterpret_cast<const int*>(xq.data()), xds.data());
    EXPECT_NEAR(got, ref, 2e-5 * mag + 1e-6) << dtype_name(t) << " rep " << rep;
  }
}

INSTANTIATE_TEST_SUITE_P(GroupTypes, QuantGroupsI8,
                         ::testing::Values(DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K,
                                           DType::Q5_K, DType::MXFP4, DType::Q6_K),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

// ---- 16-byte chunk decoders (v2 decode kernels) and split-row dequantization ---------------------------

// Sum over a row's chunks of D::dot (a ChunkDec), exactly as matvec.cu's v2 kernel composes load, load_x, dot.
template <class D>
float decoder_dot_row(const uint8_t* row, int64_t K, const int8_t* xq, const XDs* xds) {
  float s = 0.f;
  for (int c = 0; c < K / D::kElems; ++c) {
    typename D::W w;
    typename D::X x;
    D::load(row, K, c, w);
    D::load_x(c, xq, xds, x);
    s += D::dot(w, c, x);
  }
  return s;
}
template <DType T>
float chunk_dot_row(const uint8_t* row, int64_t K, const int8_t* xq, const XDs* xds) {
  return decoder_dot_row<ChunkDec<T>>(row, K, xq, xds);
}

float dispatch_chunk_dot(DType t, const uint8_t* row, int64_t K, const int8_t* xq, const XDs* xds) {
  switch (t) {
    case DType::Q4_0: return chunk_dot_row<DType::Q4_0>(row, K, xq, xds);
    case DType::Q4_1: return chunk_dot_row<DType::Q4_1>(row, K, xq, xds);
    case DType::Q5_0: return chunk_dot_row<DType::Q5_0>(row, K, xq, xds);
    case DType::Q5_1: return chunk_dot_row<DType::Q5_1>(row, K, xq, xds);
    case DType::Q8_0: return chunk_dot_row<DType::Q8_0>(row, K, xq, xds);
    case DType::Q2_K: return chunk_dot_row<DType::Q2_K>(row, K, xq, xds);
    case DType::Q3_K: return chunk_dot_row<DType::Q3_K>(row, K, xq, xds);
    case DType::Q6_K: return chunk_dot_row<DType::Q6_K>(row, K, xq, xds);
    case DType::Q4_K: return chunk_dot_row<DType::Q4_K>(row, K, xq, xds);
    case DType::Q5_K: return chunk_dot_row<DType::Q5_K>(row, K, xq, xds);
    default: return NAN;
  }
}

void dispatch_dequant_split(DType t, const uint8_t* row, int64_t K, float* out) {
  for (int g = 0; g < K / 32; ++g) {
    switch (t) {
      case DType::Q4_0: dequant32_split<DType::Q4_0>(row, K, g, out + 32 * g); break;
      case DType::Q4_1: dequant32_split<DType::Q4_1>(row, K, g, out + 32 * g); break;
      case DType::Q5_0: dequant32_split<DType::Q5_0>(row, K, g, out + 32 * g); break;
      case DType::Q5_1: dequant32_split<DType::Q5_1>(row, K, g, out + 32 * g); break;
      case DType::Q8_0: dequant32_split<DType::Q8_0>(row, K, g, out + 32 * g); break;
      case DType::Q2_K: dequant32_split<DType::Q2_K>(row, K, g, out + 32 * g); break;
      case DType::Q3_K: dequant32_split<DType::Q3_K>(row, K, g, out + 32 * g); break;
      case DType::Q6_K: dequant32_split<DType::Q6_K>(row, K, g, out + 32 * g); break;
      default: FAIL();
    }
  }
}

TEST(QuantUnits, ScaleMinFromRegisters) {
  std::mt19937 rng(5);
  for (int rep = 0; rep < 200; ++rep) {
    uint8_t s[12];
    for (uint8_t& b : s) b = static_cast<uint8_t>(rng());
    uint32_t h[3];
    std::memcpy(h, s, 12);
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      get_scale_min_k4(j, s, &sc, &m);
      int sc2, m2;
      scale_min_k4_regs(j, h[0], h[1], h[2], &sc2, &m2);
      ASSERT_EQ(sc2, sc) << j;
      ASSERT_EQ(m2, m) << j;
    }
  }
}

// The types the v2 kernels read; `split` = through the split layout (repack_to_split) vs ggml's.
struct ChunkCase {
  DType type;
  bool split;
};
class QuantUnitsChunk : public ::testing::TestWithParam<ChunkCase> {};

TEST_P(QuantUnitsChunk, ChunkDotsMatchSlices) {
  const auto [t, split] = GetParam();
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t K : {2048, 4096, 14336}) {
    if (split && !split_layout_supported(t, K)) continue;
    std::vector<float> w(K), x(K);
    for (float& v : w) v = nd(rng);
    for (float& v : x) v = nd(rng);
    std::vector<uint8_t> q(row_bytes(t, K)), qs(q.size());
    quantize_row(t, w.data(), q.data(), K);
    if (split) repack_to_split(t, K, 1, q.data(), qs.data());
    std::vector<int8_t> xq(K);
    std::vector<XDs> xds(K / 32);
    quantize_q8_host(x.data(), K, xq.data(), xds.data());
    const float want = dispatch_dot(t, q.data(), K, reinterpret_cast<const int*>(xq.data()), xds.data());
    const float got = dispatch_chunk_dot(t, split ? qs.data() : q.data(), K, xq.data(), xds.data());
    double mag = 0;
    std::vector<float> wd(K);
    dequantize_row(t, q.data(), wd.data(), K);
    for (int64_t k = 0; k < K; ++k) mag += std::fabs(static_cast<double>(wd[k]) * xds[k / 32].x * xq[k]);
    EXPECT_NEAR(got, want, 2e-5 * mag + 1e-6) << dtype_name(t) << " K=" << K;
    if (split) {
      std::vector<float> ref(K), got_d(K);
      dequantize_row(t, q.data(), ref.data(), K);
      dispatch_dequant_split(t, qs.data(), K, got_d.data());
      for (int64_t i = 0; i < K; ++i) ASSERT_EQ(got_d[i], ref[i]) << dtype_name(t) << " split element " << i;
    }
  }
}

// Every chunk on its own: one chunk's weights nonzero at a time must give the same dot as the slices
// (catches a chunk reading another chunk's scale or activations, which a whole-row sum could hide).
TEST_P(QuantUnitsChunk, EachChunkAlone) {
  const auto [t, split] = GetParam();
  const int64_t K = 2048;
  std::mt19937 rng(29);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(K);
  for (float& v : x) v = nd(rng);
  std::vector<int8_t> xq(K);
  std::vector<XDs> xds(K / 32);
  quantize_q8_host(x.data(), K, xq.data(), xds.data());
  for (int64_t g = 0; g < K / 32; g += 3) {  // a 32-group of weights, the rest zero
    std::vector<float> w(K, 0.f);
    for (int i = 0; i < 32; ++i) w[32 * g + i] = nd(rng);
    std::vector<uint8_t> q(row_bytes(t, K)), qs(q.size());
    quantize_row(t, w.data(), q.data(), K);
    if (split) repack_to_split(t, K, 1, q.data(), qs.data());
    const float want = dispatch_dot(t, q.data(), K, reinterpret_cast<const int*>(xq.data()), xds.data());
    const float got = dispatch_chunk_dot(t, split ? qs.data() : q.data(), K, xq.data(), xds.data());
    EXPECT_NEAR(got, want, 1e-4 * (std::fabs(want) + 1.f)) << dtype_name(t) << " group " << g;
  }
}

// A random Q4_K row of K weights (normal, times w_scale) and random activations in Q8.
struct Q4KRowCase {
  std::vector<uint8_t> q;
  std::vector<int8_t> xq;
  std::vector<XDs> xds;
  Q4KRowCase(std::mt19937& rng, int64_t K, float w_scale = 1.f) : q(row_bytes(DType::Q4_K, K)), xq(K), xds(K / 32) {
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> w(K), x(K);
    for (float& v : w) v = nd(rng) * w_scale;
    for (float& v : x) v = nd(rng);
    quantize_row(DType::Q4_K, w.data(), q.data(), K);
    quantize_q8_host(x.data(), K, xq.data(), xds.data());
  }
};

// The 32-byte Q4_K decoder (ChunkDecQ4KWide) against the reference slices: whole rows, and one 32-group
// of weights at a time (a chunk reading another's scales or activations would show there).
TEST(QuantUnits, Q4KWideChunksMatchSlices) {
  const DType t = DType::Q4_K;
  std::mt19937 rng(31);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t K : {256, 2048, 4096, 14336}) {
    Q4KRowCase r(rng, K);
    const std::vector<uint8_t>& q = r.q;
    const std::vector<int8_t>& xq = r.xq;
    const std::vector<XDs>& xds = r.xds;
    const float want = dispatch_dot(t, q.data(), K, reinterpret_cast<const int*>(xq.data()), xds.data());
    const float got = decoder_dot_row<ChunkDecQ4KWide>(q.data(), K, xq.data(), xds.data());
    double mag = 0;
    std::vector<float> wd(K);
    dequantize_row(t, q.data(), wd.data(), K);
    for (int64_t k = 0; k < K; ++k) mag += std::fabs(static_cast<double>(wd[k]) * xds[k / 32].x * xq[k]);
    EXPECT_NEAR(got, want, 2e-5 * mag + 1e-6) << "K=" << K;
  }
  const int64_t K = 2048;
  std::vector<float> x(K);
  for (float& v : x) v = nd(rng);
  std::vector<int8_t> xq(K);
  std::vector<XDs> xds(K / 32);
  quantize_q8_host(x.data(), K, xq.data(), xds.data());
  for (int64_t g = 0; g < K / 32; ++g) {
    std::vector<float> w(K, 0.f);
    for (int i = 0; i < 32; ++i) w[32 * g + i] = nd(rng);
    std::vector<uint8_t> q(row_bytes(t, K));
    quantize_row(t, w.data(), q.data(), K);
    const float want = dispatch_dot(t, q.data(), K, reinterpret_cast<const int*>(xq.data()), xds.data());
    const float got = decoder_dot_row<ChunkDecQ4KWide>(q.data(), K, xq.data(), xds.data());
    EXPECT_NEAR(got, want, 1e-4 * (std::fabs(want) + 1.f)) << "group " << g;
  }
}

// q4k_pair_scales packs the same scales and mins as scale_min_k4_regs, for random header words (every
// bit pattern of the 6-bit fields shows up) and all four sub-block pairs.
TEST(QuantUnits, Q4KPairScalesMatchScaleMin) {
  std::mt19937 rng(7);
  for (int it = 0; it < 20000; ++it) {
    const uint32_t h1 = rng(), h2 = rng(), h3 = rng();
    for (int cc = 0; cc < 4; ++cc) {
      const uint32_t p = q4k_pair_scales(cc, h1, h2, h3);
      int sc0, m0, sc1, m1;
      scale_min_k4_regs(2 * cc, h1, h2, h3, &sc0, &m0);
      scale_min_k4_regs(2 * cc + 1, h1, h2, h3, &sc1, &m1);
      ASSERT_EQ(p & 0xFF, static_cast<uint32_t>(sc0)) << cc;
      ASSERT_EQ((p >> 8) & 0xFF, static_cast<uint32_t>(sc1)) << cc;
      ASSERT_EQ((p >> 16) & 0xFF, static_cast<uint32_t>(m0)) << cc;
      ASSERT_EQ(p >> 24, static_cast<uint32_t>(m1)) << cc;
    }
  }
  // The helpers' host fallbacks against their definitions.
  EXPECT_EQ(byte_perm(0x33221100u, 0x77665544u, 0x7632u), 0x77663322u);
  EXPECT_EQ(byte_perm(0x33221100u, 0x77665544u, 0x5410u), 0x55441100u);
  EXPECT_EQ(dp4a_us(0xF0F0F0F0u, static_cast<int>(0x80FF017Fu), 5), 5 + 240 * (127 + 1 - 1 - 128));
}

// Unit c (64 weights) of a Q4_K row as ChunkDecQ4KWide loads it, with its two sub-blocks' integer sums
// written out (shift-and-mask nibbles), scale_min_k4_regs' scales and mins, and d / dmin.
struct Q4KUnit {
  ChunkDecQ4KWide::W w;
  ChunkDecQ4KWide::X x;
  int s0 = 0, s1 = 0, sc0 = 0, m0 = 0, sc1 = 0, m1 = 0;
  float d = 0.f, dmin = 0.f;
  Q4KUnit(const Q4KRowCase& r, int64_t K, int c) {
    ChunkDecQ4KWide::load(r.q.data(), K, c, w);
    ChunkDecQ4KWide::load_x(c, r.xq.data(), r.xds.data(), x);
    for (int i = 0; i < 4; ++i) {
      for (const auto& [wq, xa, xb] : {std::tuple{w.q0.w[i], x.a0.w[i], x.b0.w[i]},
                                       std::tuple{w.q1.w[i], x.a1.w[i], x.b1.w[i]}}) {
        s0 = dp4a(static_cast<int>(wq & 0x0F0F0F0Fu), static_cast<int>(xa), s0);
        s1 = dp4a(static_cast<int>((wq >> 4) & 0x0F0F0F0Fu), static_cast<int>(xb), s1);
      }
    }
    scale_min_k4_regs(2 * (c & 3), w.hd.w[1], w.hd.w[2], w.hd.w[3], &sc0, &m0);
    scale_min_k4_regs(2 * (c & 3) + 1, w.hd.w[1], w.hd.w[2], w.hd.w[3], &sc1, &m1);
    d = half_to_float(static_cast<uint16_t>(w.hd.w[0] & 0xFFFFu));
    dmin = half_to_float(static_cast<uint16_t>(w.hd.w[0] >> 16));
  }
};

// ChunkDecQ4KWide's dot (session 11: byte-permuted scales, high nibbles dotted in place) gives bit for bit
// what its first form computed: shift-and-mask nibble sums, scale_min_k4_regs' scales, the same products.
TEST(QuantUnits, Q4KWideDotEqualsPairArithmetic) {
  std::mt19937 rng(32);
  for (int64_t K : {256, 4096, 14336}) {
    for (int rep = 0; rep < 4; ++rep) {
      const Q4KRowCase r(rng, K, static_cast<float>(rep + 1));
      for (int c = 0; c < K / 64; ++c) {
        const Q4KUnit u(r, K, c);
        float want = u.d * (static_cast<float>(u.sc0) * u.x.d0.x * static_cast<float>(u.s0) +
                            static_cast<float>(u.sc1) * u.x.d1.x * static_cast<float>(u.s1));
        want -= u.dmin * (static_cast<float>(u.m0) * u.x.d0.y + static_cast<float>(u.m1) * u.x.d1.y);
        const float got = ChunkDecQ4KWide::dot(u.w, c, u.x);
        ASSERT_EQ(std::memcmp(&want, &got, 4), 0) << "K=" << K << " chunk " << c << ": " << got << " vs " << want;
      }
    }
  }
}

// q4k_pair_int (the lane-pair decoder's scale step, session 16) against q4k_pair on the same units: the scale
// times the integer sum is exact in int and in float (< 2^22), so the two differ only by the rounding of one
// product per sub-block; and against the arithmetic written out with the scale folded into the integer.
TEST(QuantUnits, Q4KPairIntMatchesPair) {
  std::mt19937 rng(33);
  for (int64_t K : {256, 4096}) {
    for (int rep = 0; rep < 4; ++rep) {
      const Q4KRowCase r(rng, K, static_cast<float>(rep + 1));
      for (int c = 0; c < K / 64; ++c) {
        const Q4KUnit u(r, K, c);
        const XDs &d0 = u.x.d0, &d1 = u.x.d1;
        const float want = u.d * (static_cast<float>(u.sc0 * u.s0) * d0.x + static_cast<float>(u.sc1 * u.s1) * d1.x) -
                           u.dmin * (static_cast<float>(u.m0) * d0.y + static_cast<float>(u.m1) * d1.y);
        const float got = q4k_pair_int(u.w.hd, c & 3, u.s0, u.s1, d0, d1);
        ASSERT_EQ(std::memcmp(&want, &got, 4), 0) << "K=" << K << " unit " << c << ": " << got << " vs " << want;
        const float old = q4k_pair(u.w.hd, c & 3, u.s0, u.s1, d0, d1, /*with_min=*/true);
        const float mag = std::fabs(u.d * (u.sc0 * std::fabs(u.s0 * d0.x) + u.sc1 * std::fabs(u.s1 * d1.x))) +
                          std::fabs(u.dmin * (u.m0 * d0.y + u.m1 * d1.y));
        ASSERT_LE(std::fabs(got - old), 1e-6f * mag + 1e-30f) << "K=" << K << " unit " << c;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(V2, QuantUnitsChunk,
                         ::testing::Values(ChunkCase{DType::Q4_0, true}, ChunkCase{DType::Q4_1, true},
                                           ChunkCase{DType::Q5_0, true}, ChunkCase{DType::Q5_1, true},
                                           ChunkCase{DType::Q8_0, true}, ChunkCase{DType::Q2_K, true},
                                           ChunkCase{DType::Q3_K, true}, ChunkCase{DType::Q6_K, true},
                                           ChunkCase{DType::Q4_K, false}, ChunkCase{DType::Q5_K, false}),
                         [](const ::testing::TestParamInfo<ChunkCase>& i) {
                           return std::string(dtype_name(i.param.type)) + (i.param.split ? "_split" : "_ggml");
                         });

}  // namespace
}  // namespace ferry::kernels::cuda
