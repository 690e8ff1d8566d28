// Images for vision-language models: decoding JPEG and PNG into 8-bit RGB (libjpeg-turbo, libpng, both
// linked statically), and the resampling a vision preprocessor needs. Pixels are what llama.cpp's
// multimodal tools feed their encoders (stb_image): alpha dropped (not composited), 16-bit samples cut
// to their high byte, grey and palette expanded to RGB, no gamma or EXIF orientation applied.
//
// Bad input is an error, never a crash: a file that is not JPEG or PNG, a truncated or corrupt one
// (libjpeg's "premature end" warnings included), and an image over the size limits below, which are
// checked from the header before any pixel memory is allocated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace ferry::image {

// Largest image ferry decodes: each side at most 16384 pixels, and at most 64 megapixels in all (192 MB of
// RGB). 8K UHD (7680 x 4320, 33 MP) fits; a vision model resizes far below either anyway.
inline constexpr int32_t kMaxSide = 16384;
inline constexpr int64_t kMaxPixels = int64_t{64} << 20;

struct RgbImage {
  int32_t width = 0;
  int32_t height = 0;
  std::vector<uint8_t> rgb;  // [height][width][3], rows top to bottom

  size_t bytes() const { return static_cast<size_t>(width) * static_cast<size_t>(height) * 3; }
};

// Decodes a JPEG or PNG held in memory; `name` labels errors (a path, "image 2", ...).
Expected<RgbImage> decode(const uint8_t* data, size_t size, const std::string& name);
// Reads and decodes a file (kNotFound / kIo when it cannot be read).
Expected<RgbImage> decode_file(const std::string& path);

// Checks width x height against the limits above (kUnsupported naming `name` and the limit).
Status check_size(int64_t width, int64_t height, const std::string& name);

// ---- resampling (image/resize.cc) ----

// Pillow's separable resampling with bicubic weights (a = -0.5), fixed-point coefficients with 22
// fractional bits and 8-bit intermediates between the horizontal and the vertical pass: what llama.cpp's
// mtmd uses for Qwen2-VL, so the same input gives the same pixels. A side that keeps its size is copied.
RgbImage resize_bicubic(const RgbImage& src, int32_t width, int32_t height);

// Resizes src to fit target_w x target_h keeping its aspect ratio (the scaled size rounded up, capped at
// the target), pasted centred on a black canvas of exactly target_w x target_h (llama.cpp's PAD_CEIL). The
// same size: a copy.
RgbImage resize_fit_pad(const RgbImage& src, int32_t target_w, int32_t target_h);

struct Size {
  int32_t width = 0;
  int32_t height = 0;
};
// Qwen2-VL's "smart resize" as llama.cpp computes it: each side rounded to a multiple of `align`, then,
// when the area exceeds max_pixels (or is below min_pixels), both sides scaled by one factor and floored
// (ceiled) to multiples of `align`. Sides of at least `align`.
Size fit_to_grid(Size in, int32_t align, int64_t min_pixels, int64_t max_pixels);

}  // namespace ferry::image
