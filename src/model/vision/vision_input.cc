// prepare_vision_input (see vision_input.h).
#include "model/vision/vision_input.h"

#include <algorithm>

namespace ferry::model {

image::Size vision_input_size(const VisionSpec& spec, int32_t w, int32_t h) {
  const int64_t area = int64_t{spec.merge_px()} * spec.merge_px();
  return image::fit_to_grid({w, h}, spec.merge_px(), spec.min_tokens * area, spec.max_tokens * area);
}

Expected<VisionInput> prepare_vision_input(const VisionSpec& spec, const image::RgbImage& img) {
  if (img.width <= 0 || img.height <= 0 || img.rgb.size() != img.bytes())
    return make_error(ErrorCode::kInvalidArgument, "empty or malformed image");
  const image::Size size = vision_input_size(spec, img.width, img.height);
  const image::RgbImage px = image::resize_fit_pad(img, size.width, size.height);

  VisionInput in;
  const int32_t p = spec.patch_size, m = spec.n_merge;
  in.width = px.width;
  in.height = px.height;
  in.grid_w = px.width / spec.merge_px();
  in.grid_h = px.height / spec.merge_px();
  FERRY_ASSERT(in.grid_w > 0 && in.grid_h > 0 && in.grid_w * spec.merge_px() == px.width &&
               in.grid_h * spec.merge_px() == px.height);
  const int64_t n_units = int64_t{in.grid_w} * in.grid_h, per_unit = int64_t{m} * m;
  in.n_patches = n_units * per_unit;

  // Units in encoder order: windows of win x win units in raster order, units raster inside each.
  const int32_t win = spec.n_wa_pattern > 0 ? spec.window_tokens() : std::max(in.grid_w, in.grid_h);
  std::vector<int32_t> unit_order;  // encoder index -> raster unit index
  unit_order.reserve(static_cast<size_t>(n_units));
  in.windows.push_back(0);
  for (int32_t wy = 0; wy < in.grid_h; wy += win)
    for (int32_t wx = 0; wx < in.grid_w; wx += win) {
      for (int32_t uy = wy; uy < std::min(wy + win, in.grid_h); ++uy)
        for (int32_t ux = wx; ux < std::min(wx + win, in.grid_w); ++ux) unit_order.push_back(uy * in.grid_w + ux);
      in.windows.push_back(static_cast<int32_t>(unit_order.size() * per_unit));
    }
  in.token_unit.assign(static_cast<size_t>(n_units), 0);
  for (size_t e = 0; e < unit_order.size(); ++e) in.token_unit[static_cast<size_t>(unit_order[e])] = static_cast<int32_t>(e);

  // Normalised pixels as llama.cpp computes them: (u8 / 255 - mean) / std in float.
  float lut[3][256];
  for (int c = 0; c < 3; ++c)
    for (int v = 0; v < 256; ++v) lut[c][v] = (static_cast<float>(v) / 255.0f - spec.image_mean[c]) / spec.image_std[c];

  const int64_t pe = spec.patch_elems();
  in.patches.resize(static_cast<size_t>(pe * in.n_patches));
  in.pos.resize(static_cast<size_t>(4 * in.n_patches));
  int64_t j = 0;  // patch index in encoder order
  for (int32_t unit : unit_order) {
    const int32_t uy = unit / in.grid_w, ux = unit % in.grid_w;
    for (int32_t dy = 0; dy < m; ++dy)
      for (int32_t dx = 0; dx < m; ++dx, ++j) {
        const int32_t py = uy * m + dy, pxl = ux * m + dx;  // patch row / column
        float* dst = in.patches.data() + j * pe;
        for (int c = 0; c < 3; ++c)
          for (int32_t ky = 0; ky < p; ++ky) {
            const uint8_t* src = px.rgb.data() + (static_cast<size_t>(py * p + ky) * px.width + pxl * p) * 3 + c;
            for (int32_t kx = 0; kx < p; ++kx) dst[(c * p + ky) * p + kx] = lut[c][src[kx * 3]];
          }
        in.pos[static_cast<size_t>(j)] = py;
        in.pos[static_cast<size_t>(in.n_patches + j)] = pxl;
        in.pos[static_cast<size_t>(2 * in.n_patches + j)] = py;
        in.pos[static_cast<size_t>(3 * in.n_patches + j)] = pxl;
      }
  }
  return in;
}

}  // namespace ferry::model
