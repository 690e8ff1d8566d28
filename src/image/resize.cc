// Resampling for vision preprocessing (see image.h). The arithmetic follows Pillow's resampler as
// llama.cpp's mtmd reimplements it, so the pixels a model sees are the ones llama.cpp feeds it: per output
// pixel a window of input pixels around its centre (widened by the scale when shrinking), bicubic weights
// normalised to sum 1 and stored as 22-bit fixed point, integer accumulation with a rounding bias, clamped
// to 8 bits after each of the two passes (horizontal, then vertical). The size helpers compute in float
// where llama.cpp does, because their rounding decides the token grid.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "image/image.h"

namespace ferry::image {

namespace {

constexpr int kPrecisionBits = 22;  // 32 bits - 8 (pixel) - 2 (headroom)

// Bicubic kernel with a = -0.5 (Pillow's), support 2.
double bicubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

// The input window and fixed-point weights of every output position along one axis.
struct Taps {
  int ksize = 0;
  std::vector<int32_t> first;    // [out] first input index
  std::vector<int32_t> count;    // [out] input pixels used
  std::vector<int32_t> weights;  // [out][ksize]
};

Taps make_taps(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);  // shrinking widens the kernel (anti-aliasing)
  const double support = 2.0 * filter_scale;
  Taps t;
  t.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.first.resize(out_size);
  t.count.resize(out_size);
  t.weights.assign(static_cast<size_t>(out_size) * t.ksize, 0);
  std::vector<double> w(t.ksize);
  const double fixed_one = std::ldexp(1.0, kPrecisionBits);
  const double inv_filter_scale = 1.0 / filter_scale;
  for (int o = 0; o < out_size; ++o) {
    const double centre = (o + 0.5) * scale;
    const int lo = std::max(0, static_cast<int>(centre - support + 0.5));
    const int hi = std::min(in_size, static_cast<int>(centre + support + 0.5));
    const int n = hi - lo;
    double sum = 0.0;
    for (int i = 0; i < n; ++i) {
      w[i] = bicubic((i + lo - centre + 0.5) * inv_filter_scale);
      sum += w[i];
    }
    for (int i = 0; i < n; ++i) {
      const double v = sum != 0.0 ? w[i] / sum : w[i];
      // Round half away from zero, then truncate (Pillow's conversion).
      t.weights[static_cast<size_t>(o) * t.ksize + i] = static_cast<int32_t>(v * fixed_one + (v < 0 ? -0.5 : 0.5));
    }
    t.first[o] = lo;
    t.count[o] = n;
  }
  return t;
}

uint8_t clip8(int32_t v) { return static_cast<uint8_t>(std::clamp(v, 0, 255)); }

// Width pass: src [h][w_in][3] -> [h][w_out][3].
std::vector<uint8_t> resample_rows(const uint8_t* src, int w_in, int h, int w_out, const Taps& t) {
  (void)w_in;
  std::vector<uint8_t> out(static_cast<size_t>(w_out) * h * 3);
  const int32_t bias = 1 << (kPrecisionBits - 1);
  for (int y = 0; y < h; ++y) {
    const uint8_t* row = src + static_cast<size_t>(y) * w_in * 3;
    uint8_t* dst = out.data() + static_cast<size_t>(y) * w_out * 3;
    for (int o = 0; o < w_out; ++o) {
      const int32_t* k = &t.weights[static_cast<size_t>(o) * t.ksize];
      const uint8_t* p = row + static_cast<size_t>(t.first[o]) * 3;
      int32_t r = bias, g = bias, b = bias;
      for (int i = 0; i < t.count[o]; ++i, p += 3) {
        r += p[0] * k[i];
        g += p[1] * k[i];
        b += p[2] * k[i];
      }
      dst[o * 3 + 0] = clip8(r >> kPrecisionBits);
      dst[o * 3 + 1] = clip8(g >> kPrecisionBits);
      dst[o * 3 + 2] = clip8(b >> kPrecisionBits);
    }
  }
  return out;
}

// Height pass: src [h_in][w][3] -> [h_out][w][3], whole rows at a time.
std::vector<uint8_t> resample_columns(const uint8_t* src, int w, int h_out, const Taps& t) {
  const size_t row_len = static_cast<size_t>(w) * 3;
  std::vector<uint8_t> out(row_len * h_out);
  std::vector<int32_t> acc(row_len);
  for (int o = 0; o < h_out; ++o) {
    std::fill(acc.begin(), acc.end(), 1 << (kPrecisionBits - 1));
    const int32_t* k = &t.weights[static_cast<size_t>(o) * t.ksize];
    for (int i = 0; i < t.count[o]; ++i) {
      const uint8_t* row = src + static_cast<size_t>(t.first[o] + i) * row_len;
      for (size_t j = 0; j < row_len; ++j) acc[j] += row[j] * k[i];
    }
    uint8_t* dst = out.data() + static_cast<size_t>(o) * row_len;
    for (size_t j = 0; j < row_len; ++j) dst[j] = clip8(acc[j] >> kPrecisionBits);
  }
  return out;
}

}  // namespace

RgbImage resize_bicubic(const RgbImage& src, int32_t width, int32_t height) {
  FERRY_ASSERT(width > 0 && height > 0 && src.width > 0 && src.height > 0 && src.rgb.size() == src.bytes());
  RgbImage out;
  out.width = width;
  out.height = height;
  const bool horizontal = width != src.width, vertical = height != src.height;
  if (horizontal && vertical) {
    const std::vector<uint8_t> tmp = resample_rows(src.rgb.data(), src.width, src.height, width,
                                                   make_taps(src.width, width));
    out.rgb = resample_columns(tmp.data(), width, height, make_taps(src.height, height));
  } else if (horizontal) {
    out.rgb = resample_rows(src.rgb.data(), src.width, src.height, width, make_taps(src.width, width));
  } else if (vertical) {
    out.rgb = resample_columns(src.rgb.data(), width, height, make_taps(src.height, height));
  } else {
    out.rgb = src.rgb;
  }
  return out;
}

RgbImage resize_fit_pad(const RgbImage& src, int32_t target_w, int32_t target_h) {
  FERRY_ASSERT(target_w > 0 && target_h > 0);
  if (src.width == target_w && src.height == target_h) return src;
  const float scale = std::min(static_cast<float>(target_w) / static_cast<float>(src.width),
                               static_cast<float>(target_h) / static_cast<float>(src.height));
  const int32_t w = std::min(static_cast<int32_t>(std::ceil(static_cast<float>(src.width) * scale)), target_w);
  const int32_t h = std::min(static_cast<int32_t>(std::ceil(static_cast<float>(src.height) * scale)), target_h);
  const RgbImage scaled = resize_bicubic(src, std::max(w, 1), std::max(h, 1));
  RgbImage out;
  out.width = target_w;
  out.height = target_h;
  out.rgb.assign(out.bytes(), 0);
  const int32_t x0 = (target_w - scaled.width) / 2, y0 = (target_h - scaled.height) / 2;
  for (int32_t y = 0; y < scaled.height; ++y)
    std::memcpy(out.rgb.data() + (static_cast<size_t>(y + y0) * target_w + x0) * 3,
                scaled.rgb.data() + static_cast<size_t>(y) * scaled.width * 3, static_cast<size_t>(scaled.width) * 3);
  return out;
}

Size fit_to_grid(Size in, int32_t align, int64_t min_pixels, int64_t max_pixels) {
  FERRY_ASSERT(align > 0 && in.width > 0 && in.height > 0);
  const float f = static_cast<float>(align);
  auto round_to = [&](float x) { return static_cast<int32_t>(std::round(x / f)) * align; };
  auto ceil_to = [&](float x) { return static_cast<int32_t>(std::ceil(x / f)) * align; };
  auto floor_to = [&](float x) { return static_cast<int32_t>(std::floor(x / f)) * align; };
  const float w = static_cast<float>(in.width), h = static_cast<float>(in.height);
  int32_t wb = std::max(align, round_to(w)), hb = std::max(align, round_to(h));
  const int64_t area = static_cast<int64_t>(wb) * hb;
  if (max_pixels > 0 && area > max_pixels) {
    const float beta = std::sqrt(h * w / static_cast<float>(max_pixels));
    hb = std::max(align, floor_to(h / beta));
    wb = std::max(align, floor_to(w / beta));
  } else if (min_pixels > 0 && area < min_pixels) {
    const float beta = std::sqrt(static_cast<float>(min_pixels) / (h * w));
    hb = ceil_to(h * beta);
    wb = ceil_to(w * beta);
  }
  return {wb, hb};
}

}  // namespace ferry::image
