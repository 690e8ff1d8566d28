// YaRN RoPE as ggml computes it (ggml_rope_yarn_corr_dims, and rope_yarn in the CPU backend's rope
// cache), for one rotated pair. Host code, header-only: RefOps and CpuOps share it, so both rotate by
// the same angles in float. With ext_factor == 0 and attn_factor == 1 it is plain RoPE bit for bit:
// theta = freq_scale * theta_extrap, cos / sin times 1.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace ferry::kernels {

// The pair index (as a dimension, 0 .. n_dims - 1) where a rotation of `n_rot` turns over n_ctx_orig
// positions: n_dims * ln(n_ctx_orig / (n_rot * 2 pi)) / (2 ln base).
inline float rope_yarn_corr_dim(int32_t n_dims, int32_t n_ctx_orig, float n_rot, float base) {
  return static_cast<float>(n_dims) *
         std::log(static_cast<float>(n_ctx_orig) / (n_rot * 2 * static_cast<float>(M_PI))) / (2 * std::log(base));
}

// dims[0] = max(0, floor(corr_dim(beta_fast))), dims[1] = min(n_dims - 1, ceil(corr_dim(beta_slow))).
inline void rope_yarn_corr_dims(int32_t n_dims, int32_t n_ctx_orig, float base, float beta_fast, float beta_slow,
                                float dims[2]) {
  const float start = std::floor(rope_yarn_corr_dim(n_dims, n_ctx_orig, beta_fast, base));
  const float end = std::ceil(rope_yarn_corr_dim(n_dims, n_ctx_orig, beta_slow, base));
  dims[0] = start > 0.f ? start : 0.f;
  dims[1] = end < static_cast<float>(n_dims - 1) ? end : static_cast<float>(n_dims - 1);
}

// cos / sin of pair i0 / 2 (i0 even) with unscaled angle theta_extrap: the interpolated angle
// freq_scale * theta_extrap, blended towards theta_extrap by the ramp between the correction dims times
// ext_factor, and both scaled by mscale (attn_factor; times 1 + 0.1 ln(1 / freq_scale) with YaRN on).
inline void rope_yarn(float theta_extrap, float freq_scale, const float corr_dims[2], int64_t i0, float ext_factor,
                      float mscale, float* cos_theta, float* sin_theta) {
  const float theta_interp = freq_scale * theta_extrap;
  float theta = theta_interp;
  if (ext_factor != 0.0f) {
    const float y = (static_cast<float>(i0 / 2) - corr_dims[0]) / std::max(0.001f, corr_dims[1] - corr_dims[0]);
    const float ramp = 1 - std::min(1.f, std::max(0.f, y));
    const float ramp_mix = ramp * ext_factor;
    theta = theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix;
    mscale *= 1.0f + 0.1f * std::log(1.0f / freq_scale);
  }
  *cos_theta = std::cos(theta) * mscale;
  *sin_theta = std::sin(theta) * mscale;
}

}  // namespace ferry::kernels
