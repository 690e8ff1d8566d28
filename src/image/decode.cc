// Image decoding (see image.h): the format from the first bytes, then libjpeg-turbo or libpng with their
// errors turned into Status. Both libraries report fatal errors through a callback that must not return,
// so each decoder longjmps back to its entry point; nothing with a destructor is created between the
// setjmp and a possible longjmp except the output vector, which lives in the caller's frame.
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>

// jpeglib.h needs size_t and FILE declared first; jerror.h has the message codes.
#include <jpeglib.h>
#include <jerror.h>
#include <png.h>

#include "image/image.h"

namespace ferry::image {

namespace {

bool is_jpeg(const uint8_t* d, size_t n) { return n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF; }
bool is_png(const uint8_t* d, size_t n) {
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  return n >= 8 && std::memcmp(d, sig, 8) == 0;
}

// ---- JPEG -------------------------------------------------------------------------------------------

struct JpegError {
  jpeg_error_mgr mgr;  // first: libjpeg hands back a pointer to it
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
};

void jpeg_on_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

// Warnings (level < 0): data that ended early is an error for us (libjpeg would fill the rest with grey);
// other recoverable oddities are accepted as libjpeg accepts them. Trace messages are dropped.
void jpeg_on_message(j_common_ptr cinfo, int level) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF && !e->truncated) {
    e->truncated = true;
    (*cinfo->err->format_message)(cinfo, e->message);
  }
}

// Decodes into *out; returns an error message or "" (plain C-style flow: see the file comment).
std::string decode_jpeg(const uint8_t* data, size_t size, const std::string& name, RgbImage* out) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  std::memset(&err, 0, sizeof(err));
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_on_error;
  err.mgr.emit_message = jpeg_on_message;
  // Set before the setjmp: read after a longjmp, so it must not live in a register the jump restores.
  volatile bool created = false;
  std::string result;
  if (setjmp(err.jump) != 0) {
    if (created) jpeg_destroy_decompress(&cinfo);
    return "corrupt or truncated JPEG data (" + std::string(err.message) + ")";
  }
  jpeg_create_decompress(&cinfo);
  created = true;
  jpeg_mem_src(&cinfo, const_cast<unsigned char*>(data), static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  if (Status st = check_size(cinfo.image_width, cinfo.image_height, name); !st.is_ok()) {
    jpeg_destroy_decompress(&cinfo);
    return st.message();
  }
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&cinfo);
    return "CMYK JPEG images are not supported (convert it to RGB)";
  }
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  if (cinfo.output_components != 3) {
    jpeg_destroy_decompress(&cinfo);
    return "unexpected JPEG output (" + std::to_string(cinfo.output_components) + " components)";
  }
  out->width = static_cast<int32_t>(cinfo.output_width);
  out->height = static_cast<int32_t>(cinfo.output_height);
  out->rgb.resize(out->bytes());
  const size_t stride = static_cast<size_t>(out->width) * 3;
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out->rgb.data() + static_cast<size_t>(cinfo.output_scanline) * stride;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  if (err.truncated) return "truncated JPEG data (" + std::string(err.message) + ")";
  return result;
}

// ---- PNG --------------------------------------------------------------------------------------------

struct PngReader {
  const uint8_t* data;
  size_t size;
  size_t pos;
  char message[256];
};

void png_on_error(png_structp png, png_const_charp msg) {
  auto* r = static_cast<PngReader*>(png_get_error_ptr(png));
  std::snprintf(r->message, sizeof(r->message), "%s", msg);
  png_longjmp(png, 1);
}
void png_on_warning(png_structp, png_const_charp) {}  // e.g. an odd colour profile: still an image

void png_read_bytes(png_structp png, png_bytep out, png_size_t n) {
  auto* r = static_cast<PngReader*>(png_get_io_ptr(png));
  if (n > r->size - r->pos) png_error(png, "file ends early (truncated)");
  std::memcpy(out, r->data + r->pos, n);
  r->pos += n;
}

std::string decode_png(const uint8_t* data, size_t size, const std::string& name, RgbImage* out) {
  PngReader reader{data, size, 0, {0}};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader, png_on_error, png_on_warning);
  if (png == nullptr) return "cannot initialise libpng";
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return "cannot initialise libpng";
  }
  // Row pointers: allocated before the setjmp so a longjmp cannot skip their release.
  std::vector<png_bytep> rows;
  if (setjmp(png_jmpbuf(png)) != 0) {
    png_destroy_read_struct(&png, &info, nullptr);
    return "corrupt or truncated PNG data (" + std::string(reader.message) + ")";
  }
  png_set_read_fn(png, &reader, png_read_bytes);
  png_read_info(png, info);
  const png_uint_32 width = png_get_image_width(png, info), height = png_get_image_height(png, info);
  if (Status st = check_size(width, height, name); !st.is_ok()) {
    png_destroy_read_struct(&png, &info, nullptr);
    return st.message();
  }
  const int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  // To 8-bit RGB the way stb_image does it: palette and grey expanded, 16 bits cut to the high byte,
  // alpha (and tRNS transparency) dropped rather than composited.
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if ((color & PNG_COLOR_MASK_COLOR) == 0 && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16) png_set_strip_16(png);
  if ((color & PNG_COLOR_MASK_COLOR) == 0) png_set_gray_to_rgb(png);
  png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != static_cast<size_t>(width) * 3) {
    png_destroy_read_struct(&png, &info, nullptr);
    return "unexpected PNG row layout";
  }
  out->width = static_cast<int32_t>(width);
  out->height = static_cast<int32_t>(height);
  out->rgb.resize(out->bytes());
  rows.resize(height);
  for (png_uint_32 y = 0; y < height; ++y) rows[y] = out->rgb.data() + static_cast<size_t>(y) * width * 3;
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return "";
}

}  // namespace

Status check_size(int64_t width, int64_t height, const std::string& name) {
  if (width <= 0 || height <= 0)
    return make_error(ErrorCode::kCorrupt, "%s: empty image (%lld x %lld)", name.c_str(),
                      static_cast<long long>(width), static_cast<long long>(height));
  if (width > kMaxSide || height > kMaxSide || width * height > kMaxPixels)
    return make_error(ErrorCode::kUnsupported,
                      "%s: image of %lld x %lld pixels is too large (at most %d pixels a side and %lld megapixels)",
                      name.c_str(), static_cast<long long>(width), static_cast<long long>(height), kMaxSide,
                      static_cast<long long>(kMaxPixels >> 20));
  return Status::ok();
}

Expected<RgbImage> decode(const uint8_t* data, size_t size, const std::string& name) {
  RgbImage img;
  std::string err;
  if (is_jpeg(data, size)) {
    err = decode_jpeg(data, size, name, &img);
  } else if (is_png(data, size)) {
    err = decode_png(data, size, name, &img);
  } else {
    return make_error(ErrorCode::kUnsupported, "%s: not a JPEG or PNG image", name.c_str());
  }
  if (!err.empty()) {
    // check_size's messages already name the image.
    if (err.rfind(name + ":", 0) == 0) return make_error(ErrorCode::kUnsupported, "%s", err.c_str());
    return make_error(ErrorCode::kCorrupt, "%s: %s", name.c_str(), err.c_str());
  }
  return img;
}

Expected<RgbImage> decode_file(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return make_error(ErrorCode::kNotFound, "cannot open image '%s': %s", path.c_str(), std::strerror(errno));
  // Compressed data larger than the largest decodable image as raw RGB cannot be a valid image we accept.
  constexpr long kMaxFileBytes = 3 * kMaxPixels + (1 << 20);
  if (std::fseek(f.get(), 0, SEEK_END) != 0) return make_error(ErrorCode::kIo, "cannot read image '%s'", path.c_str());
  const long size = std::ftell(f.get());
  if (size < 0) return make_error(ErrorCode::kIo, "cannot read image '%s' (not a regular file?)", path.c_str());
  if (size > kMaxFileBytes)
    return make_error(ErrorCode::kUnsupported, "image '%s' is %ld MB, larger than any image ferry accepts",
                      path.c_str(), size >> 20);
  std::fseek(f.get(), 0, SEEK_SET);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  if (size > 0 && std::fread(bytes.data(), 1, bytes.size(), f.get()) != bytes.size())
    return make_error(ErrorCode::kIo, "cannot read image '%s'", path.c_str());
  return decode(bytes.data(), bytes.size(), "image '" + path + "'");
}

}  // namespace ferry::image
