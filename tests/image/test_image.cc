// ferry_image: decoding (JPEG / PNG made here with libjpeg / libpng, in every colour form a decoder must
// turn into RGB) and its errors (not an image, truncated, corrupt, too large from the header alone), and
// the resampling helpers (copies, constant images, the grid sizes llama.cpp computes).
#include <gtest/gtest.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <jpeglib.h>
#include <png.h>

#include "image/image.h"

namespace ferry::image {
namespace {

std::vector<uint8_t> pattern(int w, int h, int channels) {
  std::vector<uint8_t> v(static_cast<size_t>(w) * h * channels);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < channels; ++c)
        v[(static_cast<size_t>(y) * w + x) * channels + c] = static_cast<uint8_t>((x * 7 + y * 3 + c * 50) & 0xFF);
  return v;
}

// Gradients without wrap-around: what JPEG keeps well.
std::vector<uint8_t> smooth_pattern(int w, int h) {
  std::vector<uint8_t> v(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) v[(static_cast<size_t>(y) * w + x) * 3 + c] = static_cast<uint8_t>(x + y + c * 40);
  return v;
}

Expected<RgbImage> decode_from(const std::vector<uint8_t>& bytes) { return decode(bytes.data(), bytes.size(), "t"); }

std::vector<uint8_t> make_jpeg(int w, int h, int quality = 95) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = static_cast<JDIMENSION>(w);
  c.image_height = static_cast<JDIMENSION>(h);
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  jpeg_start_compress(&c, TRUE);
  const std::vector<uint8_t> px = smooth_pattern(w, h);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(px.data()) + static_cast<size_t>(c.next_scanline) * w * 3;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  std::vector<uint8_t> out(buf, buf + size);
  jpeg_destroy_compress(&c);
  std::free(buf);
  return out;
}

void png_append(png_structp png, png_bytep data, png_size_t n) {
  auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}

// A PNG of `color` type and `depth` bits from `samples` (row-major, channels per the colour type).
std::vector<uint8_t> make_png(int w, int h, int color, int depth, const std::vector<uint8_t>& samples,
                              const std::vector<png_color>& palette = {}) {
  std::vector<uint8_t> out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return {};
  }
  png_set_write_fn(png, &out, png_append, nullptr);
  png_set_IHDR(png, info, static_cast<png_uint_32>(w), static_cast<png_uint_32>(h), depth, color, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!palette.empty()) png_set_PLTE(png, info, palette.data(), static_cast<int>(palette.size()));
  png_write_info(png, info);
  const size_t row = samples.size() / static_cast<size_t>(h);
  for (int y = 0; y < h; ++y) png_write_row(png, const_cast<uint8_t*>(samples.data()) + static_cast<size_t>(y) * row);
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

TEST(ImageDecode, PngRgbIsExact) {
  const std::vector<uint8_t> px = pattern(37, 21, 3);
  const std::vector<uint8_t> file = make_png(37, 21, PNG_COLOR_TYPE_RGB, 8, px);
  auto img = decode(file.data(), file.size(), "t");
  ASSERT_TRUE(img.has_value()) << img.status().message();
  EXPECT_EQ(img->width, 37);
  EXPECT_EQ(img->height, 21);
  EXPECT_EQ(img->rgb, px);
}

// stb_image's conversions: alpha dropped, grey replicated, 16 bits cut to the high byte, palette looked up.
TEST(ImageDecode, PngColourFormsBecomeRgb) {
  const int w = 5, h = 3;
  const std::vector<uint8_t> rgba = pattern(w, h, 4);
  auto a = decode_from(make_png(w, h, PNG_COLOR_TYPE_RGBA, 8, rgba));
  ASSERT_TRUE(a.has_value());
  for (int i = 0; i < w * h; ++i)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(a->rgb[i * 3 + c], rgba[i * 4 + c]);

  const std::vector<uint8_t> grey = pattern(w, h, 1);
  auto g = decode_from(make_png(w, h, PNG_COLOR_TYPE_GRAY, 8, grey));
  ASSERT_TRUE(g.has_value());
  for (int i = 0; i < w * h; ++i)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(g->rgb[i * 3 + c], grey[i]);

  std::vector<uint8_t> rgb16(static_cast<size_t>(w) * h * 6);  // big-endian 16-bit samples
  for (size_t i = 0; i < rgb16.size(); i += 2) {
    rgb16[i] = static_cast<uint8_t>(i * 11);
    rgb16[i + 1] = 0xFF;
  }
  auto s = decode_from(make_png(w, h, PNG_COLOR_TYPE_RGB, 16, rgb16));
  ASSERT_TRUE(s.has_value());
  for (size_t i = 0; i < s->rgb.size(); ++i) EXPECT_EQ(s->rgb[i], rgb16[2 * i]);

  const std::vector<png_color> pal = {{10, 20, 30}, {200, 100, 50}};
  std::vector<uint8_t> idx(static_cast<size_t>(w) * h);
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<uint8_t>(i % 2);
  auto p = decode_from(make_png(w, h, PNG_COLOR_TYPE_PALETTE, 8, idx, pal));
  ASSERT_TRUE(p.has_value());
  for (size_t i = 0; i < idx.size(); ++i) {
    EXPECT_EQ(p->rgb[i * 3 + 0], pal[idx[i]].red);
    EXPECT_EQ(p->rgb[i * 3 + 2], pal[idx[i]].blue);
  }
}

TEST(ImageDecode, JpegIsCloseToItsSource) {
  const std::vector<uint8_t> file = make_jpeg(64, 48, 100);
  auto img = decode_from(file);
  ASSERT_TRUE(img.has_value()) << img.status().message();
  ASSERT_EQ(img->width, 64);
  ASSERT_EQ(img->height, 48);
  const std::vector<uint8_t> src = smooth_pattern(64, 48);
  double err = 0;
  for (size_t i = 0; i < src.size(); ++i) err += std::abs(static_cast<int>(img->rgb[i]) - src[i]);
  EXPECT_LT(err / static_cast<double>(src.size()), 2.0);  // quality 100, 4:2:0 chroma
}

TEST(ImageDecode, Errors) {
  auto expect_error = [](const std::vector<uint8_t>& bytes, const char* part) {
    auto r = decode(bytes.data(), bytes.size(), "image 'x'");
    ASSERT_FALSE(r.has_value()) << part;
    EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().rfind("image 'x'", 0), 0u) << r.status().message();
  };
  expect_error({'G', 'I', 'F', '8', '9', 'a', 0, 0}, "not a JPEG or PNG");
  expect_error({}, "not a JPEG or PNG");

  std::vector<uint8_t> jpg = make_jpeg(256, 256);
  std::vector<uint8_t> head(jpg.begin(), jpg.begin() + 100);  // ends inside the headers
  expect_error(head, "corrupt or truncated JPEG");
  jpg.resize(jpg.size() * 2 / 3);  // ends inside the scan: libjpeg would pad it with grey
  expect_error(jpg, "truncated JPEG data");
  std::vector<uint8_t> png = make_png(40, 40, PNG_COLOR_TYPE_RGB, 8, pattern(40, 40, 3));
  std::vector<uint8_t> half(png.begin(), png.begin() + static_cast<std::ptrdiff_t>(png.size() / 2));
  expect_error(half, "PNG");
  std::vector<uint8_t> bad_crc = png;
  bad_crc[40] ^= 0x55;  // inside IDAT
  expect_error(bad_crc, "PNG");

  // Headers that claim huge images fail before any pixel memory is allocated.
  std::vector<uint8_t> big_png = png;
  const uint32_t side = 20000;  // IHDR width at offset 16, big-endian (its CRC is wrong too: libpng would say so)
  for (int i = 0; i < 4; ++i) big_png[16 + i] = static_cast<uint8_t>(side >> (24 - 8 * i));
  auto r = decode(big_png.data(), big_png.size(), "image 'x'");
  ASSERT_FALSE(r.has_value());
  std::vector<uint8_t> big_jpg = make_jpeg(16, 16);
  for (size_t i = 2; i + 8 < big_jpg.size(); ++i)
    if (big_jpg[i] == 0xFF && big_jpg[i + 1] == 0xC0) {  // SOF0: length(2) precision(1) height(2) width(2)
      big_jpg[i + 5] = 0x4E, big_jpg[i + 6] = 0x20;       // 20000
      big_jpg[i + 7] = 0x4E, big_jpg[i + 8] = 0x20;
      break;
    }
  expect_error(big_jpg, "too large");
  EXPECT_FALSE(check_size(kMaxSide, kMaxSide, "x").is_ok());  // 256 MP > 64 MP
  EXPECT_TRUE(check_size(7680, 4320, "x").is_ok());
}

TEST(ImageDecode, MissingFile) {
  auto r = decode_file("/nonexistent/dir/img.png");
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.status().message().find("cannot open image"), std::string::npos);
}

TEST(ImageResize, CopiesAndConstants) {
  RgbImage src;
  src.width = 50;
  src.height = 30;
  src.rgb = pattern(50, 30, 3);
  EXPECT_EQ(resize_bicubic(src, 50, 30).rgb, src.rgb);
  EXPECT_EQ(resize_fit_pad(src, 50, 30).rgb, src.rgb);
  RgbImage flat = src;
  std::fill(flat.rgb.begin(), flat.rgb.end(), 77);
  for (auto [w, h] : {std::pair{17, 9}, std::pair{123, 31}, std::pair{50, 61}}) {
    const RgbImage r = resize_bicubic(flat, w, h);
    ASSERT_EQ(r.bytes(), r.rgb.size());
    for (uint8_t v : r.rgb) ASSERT_EQ(v, 77) << w << "x" << h;
  }
  // Fit and pad: a 2:1 image into a square is centred with black bars above and below.
  const RgbImage padded = resize_fit_pad(flat, 40, 40);
  EXPECT_EQ(padded.rgb[0], 0);
  EXPECT_EQ(padded.rgb[(20 * 40 + 20) * 3], 77);
}

TEST(ImageResize, GridSizes) {
  const int64_t area = 28 * 28;
  auto fit = [&](int w, int h) { return fit_to_grid({w, h}, 28, 8 * area, 4096 * area); };
  EXPECT_EQ(fit(300, 200).width, 308);  // llama.cpp (mtmd) gives 11 x 7 tokens for this image
  EXPECT_EQ(fit(300, 200).height, 196);
  EXPECT_EQ(fit(1920, 1080).width, 1932);
  EXPECT_EQ(fit(1920, 1080).height, 1092);
  const Size big = fit(2560, 1440);  // over 4096 tokens: scaled down and floored to the grid
  EXPECT_LE(int64_t{big.width} * big.height, 4096 * area);
  EXPECT_EQ(big.width % 28, 0);
  const Size tiny = fit(10, 10);  // under 8 tokens: scaled up
  EXPECT_GE(int64_t{tiny.width} * tiny.height, 8 * area);
}

}  // namespace
}  // namespace ferry::image
