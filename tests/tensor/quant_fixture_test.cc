// Weight-type conversions against llama.cpp's own results. Fixtures (tests/data/tensor/quant_*.bin,
// made by tests/python/gen_quant_fixtures.py) hold float rows, the bytes ggml's (or gguf-py's)
// reference quantizer made from them, and the floats the reference dequantizes those bytes to.
// Our dequantize_row must equal the fixture floats bit for bit, our quantize_row must produce the
// same bytes (where a reference quantizer made them), and dot_row_ref must equal dequantize + dot.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/quant.h"

namespace ferry {
namespace {

constexpr uint32_t kFlagInput = 1, kFlagRefQuant = 2;
constexpr uint32_t kSrcRandom = 2;

struct Fixture {
  DType type = DType::F32;
  uint32_t nrows = 0, n_per_row = 0, flags = 0, source = 0;
  std::vector<float> input;     // [nrows * n_per_row], empty unless kFlagInput
  std::vector<uint8_t> quant;   // [nrows * row_bytes]
  std::vector<float> dequant;   // [nrows * n_per_row]
  size_t row_bytes() const { return ferry::row_bytes(type, n_per_row); }
};

// Reads and validates a fixture; on failure returns an error message.
std::string load_fixture(const std::string& name, Fixture* fx) {
  // FERRY_QUANT_FIXTURE_DIR points the test at a bigger, uncommitted set (gen_quant_fixtures.py --row-scale).
  const char* dir = std::getenv("FERRY_QUANT_FIXTURE_DIR");
  const std::string path = (dir && *dir ? std::string(dir) : std::string(FERRY_SOURCE_DIR) + "/tests/data/tensor") +
                           "/quant_" + name + ".bin";
  std::ifstream f(path, std::ios::binary);
  if (!f) return "cannot open " + path + " (run tests/python/gen_quant_fixtures.py)";
  std::vector<char> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  uint32_t h[7];
  if (data.size() < sizeof(h)) return "truncated header";
  memcpy(h, data.data(), sizeof(h));
  if (memcmp(data.data(), "FQFX", 4) != 0 || h[1] != 1) return "bad magic or version";
  const DTypeTraits* tr = dtype_traits(h[2]);
  const std::string type_name = name.substr(0, name.find('.'));  // "Q4_K.random" -> "Q4_K"
  if (tr == nullptr || std::string(tr->name) != type_name) return "type id does not match the file name";
  fx->type = tr->type;
  fx->nrows = h[3];
  fx->n_per_row = h[4];
  fx->flags = h[5];
  fx->source = h[6];
  if (fx->n_per_row % tr->block_elems != 0) return "row not a whole number of blocks";
  const size_t n = static_cast<size_t>(fx->nrows) * fx->n_per_row;
  const size_t qbytes = fx->row_bytes() * fx->nrows;
  const size_t want = sizeof(h) + ((fx->flags & kFlagInput) ? 4 * n : 0) + qbytes + 4 * n;
  if (data.size() != want) return "size " + std::to_string(data.size()) + " != " + std::to_string(want);
  const char* p = data.data() + sizeof(h);
  if (fx->flags & kFlagInput) {
    fx->input.resize(n);
    memcpy(fx->input.data(), p, 4 * n);
    p += 4 * n;
  }
  fx->quant.assign(p, p + qbytes);
  p += qbytes;
  fx->dequant.resize(n);
  memcpy(fx->dequant.data(), p, 4 * n);
  return "";
}

uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

class QuantFixture : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const std::string err = load_fixture(GetParam(), &fx_);
    ASSERT_EQ(err, "") << GetParam();
  }
  void check_dequantize();
  void check_dot();
  Fixture fx_;
};
// The random-block fixtures: dequantize and dot only (no floats were quantized).
class QuantRandomBlocks : public QuantFixture {};

void QuantFixture::check_dequantize() {
  const size_t n = fx_.n_per_row;
  std::vector<float> out(n);
  size_t mismatches = 0;
  for (uint32_t r = 0; r < fx_.nrows; ++r) {
    dequantize_row(fx_.type, fx_.quant.data() + r * fx_.row_bytes(), out.data(), static_cast<int64_t>(n));
    for (size_t i = 0; i < n; ++i) {
      const float want = fx_.dequant[r * n + i];
      if (bits(out[i]) != bits(want)) {
        if (mismatches < 5)
          ADD_FAILURE() << GetParam() << " row " << r << " elem " << i << ": got " << out[i] << " want " << want;
        ++mismatches;
      }
    }
  }
  EXPECT_EQ(mismatches, 0u) << GetParam() << ": floats differing from the reference";
}

TEST_P(QuantFixture, DequantizeIsBitExact) { check_dequantize(); }
TEST_P(QuantRandomBlocks, DequantizeIsBitExact) { check_dequantize(); }

TEST_P(QuantFixture, QuantizeMatchesReferenceBytes) {
  if (!(fx_.flags & kFlagRefQuant))
    GTEST_SKIP() << GetParam() << ": fixture has random blocks (no reference quantizer when generated)";
  ASSERT_TRUE(fx_.flags & kFlagInput);
  const size_t n = fx_.n_per_row, rb = fx_.row_bytes();
  const int64_t block_bytes = traits(fx_.type).block_bytes;
  std::vector<uint8_t> out(rb);
  size_t bytes_diff = 0, blocks_diff = 0;
  for (uint32_t r = 0; r < fx_.nrows; ++r) {
    quantize_row(fx_.type, fx_.input.data() + r * n, out.data(), static_cast<int64_t>(n));
    const uint8_t* want = fx_.quant.data() + r * rb;
    for (size_t b = 0; b < rb; b += static_cast<size_t>(block_bytes)) {
      size_t d = 0;
      for (size_t i = b; i < b + static_cast<size_t>(block_bytes); ++i) d += out[i] != want[i];
      if (d && blocks_diff < 5)
        ADD_FAILURE() << GetParam() << " row " << r << " block " << b / block_bytes << ": " << d << " bytes differ";
      bytes_diff += d;
      blocks_diff += d != 0;
    }
  }
  EXPECT_EQ(bytes_diff, 0u) << GetParam() << ": bytes differing from the reference quantizer (" << blocks_diff
                            << " blocks)";
}

// dot_row_ref is defined as dequantize + a double-accumulated dot; check exactly that, on the
// reference bytes and an activation vector derived from the fixture.
void QuantFixture::check_dot() {
  const size_t n = fx_.n_per_row;
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>((static_cast<int>(i * 7919 % 201) - 100)) / 37.0f;
  for (uint32_t r = 0; r < fx_.nrows; ++r) {
    double want = 0.0;
    for (size_t i = 0; i < n; ++i) want += static_cast<double>(fx_.dequant[r * n + i]) * static_cast<double>(x[i]);
    const double got = dot_row_ref(fx_.type, fx_.quant.data() + r * fx_.row_bytes(), x.data(),
                                   static_cast<int64_t>(n));
    if (std::isfinite(want)) {
      EXPECT_EQ(got, want) << GetParam() << " row " << r;
    } else {
      EXPECT_FALSE(std::isfinite(got)) << GetParam() << " row " << r;
    }
  }
}

TEST_P(QuantFixture, DotRowRefEqualsDequantizeDot) { check_dot(); }
TEST_P(QuantRandomBlocks, DotRowRefEqualsDequantizeDot) { check_dot(); }

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantFixture,
                         ::testing::Values("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1",
                                           "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "MXFP4"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

// Random valid blocks (bit patterns a quantizer never makes) dequantized by the reference.
INSTANTIATE_TEST_SUITE_P(AllTypes, QuantRandomBlocks,
                         ::testing::Values("Q4_0.random", "Q4_1.random", "Q5_0.random", "Q5_1.random", "Q8_0.random",
                                           "Q8_1.random", "Q2_K.random", "Q3_K.random", "Q4_K.random", "Q5_K.random",
                                           "Q6_K.random", "Q8_K.random", "MXFP4.random"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           const std::string s = info.param;
                           return s.substr(0, s.find('.'));
                         });

}  // namespace
}  // namespace ferry
