// fp16 / bf16 <-> fp32 conversions of quant_blocks.h against references computed in double from the
// IEEE definitions: every one of the 65536 halves (and bf16s) decoded; encoding checked at every
// rounding boundary (each midpoint between adjacent values and its float neighbours, both signs)
// and on a million random bit patterns (NaN, inf, overflow, subnormals included).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "tensor/quant_blocks.h"

namespace ferry {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// A small IEEE binary format (fp16: 5/10, bf16: 8/7) described by exponent and mantissa widths.
struct Format {
  int exp_bits, man_bits;
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  int emin() const { return 1 - bias(); }
  uint32_t exp_all_ones() const { return (1u << exp_bits) - 1; }
  uint32_t inf_bits() const { return exp_all_ones() << man_bits; }
  uint32_t sign_bit() const { return 1u << (exp_bits + man_bits); }
};
constexpr Format kHalf{5, 10};
constexpr Format kBf16{8, 7};

// Value of a bit pattern, in double (NaN for NaNs).
double ref_decode(Format f, uint32_t h) {
  const bool neg = (h & f.sign_bit()) != 0;
  const uint32_t e = (h >> f.man_bits) & f.exp_all_ones();
  const uint32_t m = h & ((1u << f.man_bits) - 1);
  double v;
  if (e == f.exp_all_ones()) {
    v = m ? NAN : INFINITY;
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), f.emin() - f.man_bits);
  } else {
    v = std::ldexp(static_cast<double>((1u << f.man_bits) | m), static_cast<int>(e) - f.bias() - f.man_bits);
  }
  return neg ? -v : v;
}

// Round-to-nearest-even encoding of a finite or infinite float, computed in double.
uint32_t ref_encode(Format f, float x) {
  const uint32_t sign = std::signbit(x) ? f.sign_bit() : 0;
  const double a = std::fabs(static_cast<double>(x));
  const double min_normal = std::ldexp(1.0, f.emin());
  double q;  // spacing of representable values around a
  if (a < min_normal) {
    q = std::ldexp(1.0, f.emin() - f.man_bits);
  } else {
    int e;
    std::frexp(a, &e);  // a in [2^(e-1), 2^e)
    q = std::ldexp(1.0, e - 1 - f.man_bits);
  }
  const double r = std::nearbyint(a / q) * q;  // a / q is exact; nearbyint rounds half to even
  if (r == 0) return sign;
  if (r < min_normal) return sign | static_cast<uint32_t>(r / std::ldexp(1.0, f.emin() - f.man_bits));
  int e;
  std::frexp(r, &e);
  const int exp_field = e - 1 + f.bias();
  if (exp_field >= static_cast<int>(f.exp_all_ones())) return sign | f.inf_bits();
  const double mant = (r / std::ldexp(1.0, e - 1) - 1.0) * std::ldexp(1.0, f.man_bits);
  return sign | (static_cast<uint32_t>(exp_field) << f.man_bits) | static_cast<uint32_t>(mant);
}

uint32_t ref_fp16(float x) {
  if (std::isnan(x)) return (std::signbit(x) ? 0x8000u : 0u) | 0x7e00u;  // ggml's canonical quiet NaN
  return ref_encode(kHalf, x);
}
uint32_t ref_bf16(float x) {
  if (std::isnan(x)) return (bits_of(x) >> 16) | 64u;  // ggml keeps the payload, forces quiet
  return ref_encode(kBf16, x);
}

TEST(Half, DecodeAll65536) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float got = fp16_to_fp32(static_cast<uint16_t>(h));
    const double want = ref_decode(kHalf, h);
    if (std::isnan(want)) {
      const uint32_t want_bits = ((h & 0x8000u) << 16) | 0x7f800000u | ((h & 0x3ffu) << 13);
      ASSERT_EQ(bits_of(got), want_bits) << "h=" << h;  // NaN payload kept
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << "h=" << h;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << "h=" << h;
    }
  }
}

TEST(Bf16, DecodeAll65536) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float got = bf16_to_fp32(static_cast<uint16_t>(h));
    const double want = ref_decode(kBf16, h);
    if (std::isnan(want)) {
      ASSERT_EQ(bits_of(got), h << 16) << "h=" << h;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << "h=" << h;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << "h=" << h;
    }
  }
}

// Every representable value encodes to itself; every midpoint between neighbours rounds to the even
// one, and the floats just either side of the midpoint round to the nearer one.
template <typename Encode>
void check_boundaries(Format f, Encode encode, uint32_t (*ref)(float)) {
  const uint32_t n_finite = f.inf_bits();  // patterns 0 .. inf-1 are the positive finite values
  for (uint32_t sign : {0u, f.sign_bit()}) {
    for (uint32_t h = 0; h <= n_finite; ++h) {
      const float v = static_cast<float>(ref_decode(f, sign | h));
      ASSERT_EQ(static_cast<uint32_t>(encode(v)), sign | h) << "exact value h=" << (sign | h);
      if (h == n_finite) break;
      // Midpoint to the next value (for the largest finite value: the overflow threshold).
      const double lo = std::fabs(ref_decode(f, h));
      const double hi = h + 1 < n_finite ? ref_decode(f, h + 1)
                                         : lo + std::ldexp(1.0, static_cast<int>(std::log2(lo)) - f.man_bits);
      const float mid = static_cast<float>((lo + hi) / 2);  // exact: needs one more bit than the format
      ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
      for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
        const float sx = sign ? -x : x;
        ASSERT_EQ(static_cast<uint32_t>(encode(sx)), ref(sx)) << "x=" << sx << " bits=" << bits_of(sx);
      }
    }
  }
}

TEST(Half, EncodeRoundingBoundaries) { check_boundaries(kHalf, fp32_to_fp16, ref_fp16); }
TEST(Bf16, EncodeRoundingBoundaries) { check_boundaries(kBf16, fp32_to_bf16, ref_bf16); }

TEST(HalfAndBf16, EncodeRandomBitPatterns) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 1000000; ++i) {
    const float x = float_of(static_cast<uint32_t>(rng()));
    ASSERT_EQ(static_cast<uint32_t>(fp32_to_fp16(x)), ref_fp16(x)) << "bits=" << bits_of(x);
    ASSERT_EQ(static_cast<uint32_t>(fp32_to_bf16(x)), ref_bf16(x)) << "bits=" << bits_of(x);
  }
  // Values in fp16's own range, where a uniform bit pattern rarely lands.
  std::uniform_real_distribution<float> u(-70000.0f, 70000.0f);
  std::uniform_int_distribution<int> e(-30, 16);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::ldexp(u(rng) / 70000.0f, e(rng));
    ASSERT_EQ(static_cast<uint32_t>(fp32_to_fp16(x)), ref_fp16(x)) << "bits=" << bits_of(x);
  }
}

}  // namespace
}  // namespace ferry
