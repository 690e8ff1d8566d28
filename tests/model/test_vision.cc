// The vision tower from a synthetic Qwen2.5-VL pair (ferry synth): VisionSpec and pairing, the encoder's
// token order (windows contiguous, every patch once, the output permutation), and encode_image on CpuOps
// against RefOps. llama.cpp's own embeddings are compared in tests/python/test_vision.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <utility>

#include "format/gguf.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ref/ref_ops.h"
#include "model/model_spec.h"
#include "model/synth.h"
#include "model/vision/synth_mmproj.h"
#include "model/vision/vision_forward.h"
#include "model/vision/vision_input.h"
#include "model/vision/vision_model.h"
#include "tiny_model.h"

namespace ferry::model {
namespace {

struct Pair {
  testing::TempDir dir;
  std::unique_ptr<gguf::ModelFile> lm, mmproj;
};

std::unique_ptr<Pair> write_pair(DType mm_type) {
  auto p = std::make_unique<Pair>();
  SynthOptions o;
  o.preset = "tiny-qwen2.5-vl";
  o.type = DType::F32;
  o.path = p->dir.file("lm.gguf");
  o.n_threads = 2;
  EXPECT_TRUE(synth_write(o).has_value());
  auto mm = synth_write_mmproj(o, mm_type, p->dir.file("mmproj.gguf"));
  EXPECT_TRUE(mm.has_value()) << mm.status().message();
  auto lm = gguf::ModelFile::open(o.path);
  auto mmproj = gguf::ModelFile::open(p->dir.file("mmproj.gguf"));
  EXPECT_TRUE(lm.has_value() && mmproj.has_value());
  p->lm = std::move(*lm);
  p->mmproj = std::move(*mmproj);
  return p;
}

image::RgbImage test_image(int w, int h) {
  image::RgbImage img;
  img.width = w;
  img.height = h;
  img.rgb.resize(img.bytes());
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = static_cast<uint8_t>((i * 37 + i / 97) & 0xFF);
  return img;
}

TEST(Vision, SpecAndPairing) {
  auto p = write_pair(DType::F16);
  auto spec = VisionSpec::from_gguf(*p->mmproj);
  ASSERT_TRUE(spec.has_value()) << spec.status().message();
  EXPECT_EQ(spec->projector, "qwen2.5vl_merger");
  EXPECT_EQ(spec->n_layer, 4);
  EXPECT_EQ(spec->n_embd, 64);
  EXPECT_EQ(spec->head_dim, 16);
  EXPECT_EQ(spec->patch_size, 14);
  EXPECT_EQ(spec->n_wa_pattern, 2);
  EXPECT_FALSE(spec->full_attention(0));
  EXPECT_TRUE(spec->full_attention(1));
  EXPECT_EQ(spec->window_tokens(), 4);
  auto lm = ModelSpec::from_gguf(*p->lm);
  ASSERT_TRUE(lm.has_value());
  EXPECT_TRUE(check_vision_pairing(*spec, *lm).is_ok());
  ModelSpec other = *lm;
  other.n_embd = 128;
  EXPECT_FALSE(check_vision_pairing(*spec, other).is_ok());
  other = *lm;
  other.arch = Arch::kQwen2;
  EXPECT_FALSE(check_vision_pairing(*spec, other).is_ok());
  EXPECT_TRUE(bind_vision_weights(*spec, *p->mmproj).has_value());
  // The language model file is not a projector.
  auto not_mm = VisionSpec::from_gguf(*p->lm);
  ASSERT_FALSE(not_mm.has_value());
  EXPECT_NE(not_mm.status().message().find("not a multimodal projector"), std::string::npos);
}

TEST(Vision, InputOrder) {
  auto p = write_pair(DType::F16);
  const VisionSpec spec = *VisionSpec::from_gguf(*p->mmproj);
  auto in = prepare_vision_input(spec, test_image(300, 200));
  ASSERT_TRUE(in.has_value());
  EXPECT_EQ(in->width, 308);  // llama.cpp's size for this image (11 x 7 tokens)
  EXPECT_EQ(in->height, 196);
  ASSERT_EQ(in->grid_w, 11);
  ASSERT_EQ(in->grid_h, 7);
  EXPECT_EQ(in->n_patches, 4 * 77);
  // 4 x 4-token windows: 3 across, 2 down.
  ASSERT_EQ(in->windows.size(), 7u);
  EXPECT_EQ(in->windows[1], 4 * 16);
  EXPECT_EQ(in->windows.back(), in->n_patches);
  // Every patch exactly once; a window's patches lie in its 8 x 8-patch square; units are 2 x 2 squares.
  std::set<std::pair<int, int>> seen;
  for (size_t w = 0; w + 1 < in->windows.size(); ++w) {
    const int wy = static_cast<int>(w) / 3, wx = static_cast<int>(w) % 3;
    for (int j = in->windows[w]; j < in->windows[w + 1]; ++j) {
      const int y = in->pos[j], x = in->pos[in->n_patches + j];
      EXPECT_EQ(y / 8, wy);
      EXPECT_EQ(x / 8, wx);
      EXPECT_EQ(y / 2, in->pos[j - j % 4] / 2);
      EXPECT_EQ(x / 2, in->pos[in->n_patches + j - j % 4] / 2);
      EXPECT_TRUE(seen.insert({y, x}).second);
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(in->n_patches));
  // Output token (raster) -> unit: the unit's first patch sits at that token's place.
  for (int t = 0; t < in->n_tokens(); ++t) {
    const int j = 4 * in->token_unit[t];
    EXPECT_EQ(in->pos[j], 2 * (t / in->grid_w));
    EXPECT_EQ(in->pos[in->n_patches + j], 2 * (t % in->grid_w));
  }
}

TEST(Vision, EncodeCpuMatchesRef) {
  for (DType t : {DType::F32, DType::F16, DType::Q8_0}) {
    auto p = write_pair(t);
    const VisionSpec spec = *VisionSpec::from_gguf(*p->mmproj);
    auto w = bind_vision_weights(spec, *p->mmproj);
    ASSERT_TRUE(w.has_value()) << w.status().message();
    auto in = prepare_vision_input(spec, test_image(150, 120));
    ASSERT_TRUE(in.has_value());
    kernels::RefOps ref(kernels::RefNumerics::kLlamaCpp);
    auto cpu = kernels::make_cpu_ops(2);
    auto a = encode_image(ref, spec, *w, *in);
    auto b = encode_image(*cpu, spec, *w, *in);
    ASSERT_TRUE(a.has_value() && b.has_value());
    ASSERT_EQ(a->size(), static_cast<size_t>(in->n_tokens()) * 256);
    double err = 0, sq = 0, scale = 0;
    for (size_t i = 0; i < a->size(); ++i) {
      ASSERT_TRUE(std::isfinite((*b)[i]));
      const double e = std::fabs((*a)[i] - (*b)[i]);
      err = std::max(err, e);
      sq += e * e;
      scale += static_cast<double>((*a)[i]) * (*a)[i];
    }
    scale = std::sqrt(scale / static_cast<double>(a->size()));
    const double rms = std::sqrt(sq / static_cast<double>(a->size()));
    // In units of the embeddings' rms: 8-bit activations round differently across summation orders and
    // four random blocks amplify that; float weights differ by summation order only.
    // F16 and Q8_0 activations: a 1-ulp difference upstream flips a rounding now and then.
    const double tol_max = t == DType::F32 ? 5e-3 : t == DType::F16 ? 1e-2 : 0.1;
    const double tol_rms = t == DType::F32 ? 5e-4 : t == DType::F16 ? 1e-3 : 0.02;
    EXPECT_LT(err, tol_max * scale) << dtype_name(t);
    EXPECT_LT(rms, tol_rms * scale) << dtype_name(t);
    std::printf("%s: max err %.2e rms err %.2e (embedding rms %.3f)\n", dtype_name(t), err, rms, scale);
  }
}

}  // namespace
}  // namespace ferry::model
