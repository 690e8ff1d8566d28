// The rotary embedding's rotation of one pair, shared by the rope kernels (elementwise.cu) and the QKV
// matvec that rotates its own outputs (matvec.cu, MatvecLaunch::rope), so both compute it identically.
#pragma once

#include "kernels/cuda/launch.h"

namespace ferry::kernels::cuda {

// Pair i of a head at position p rotated: theta_i = p * freq_scale * base^(-2i / n_rot) / freq_factor[i]
// in double, then (x0, x1) -> (x0 c - x1 s, x0 s + x1 c) in float.
__device__ __forceinline__ float2 rope_rotate(const RopeArgs& a, double p, double log2_base, int i, float x0,
                                              float x1) {
  double theta = p * static_cast<double>(a.freq_scale) * exp2(-2.0 * i / a.n_rot * log2_base);
  if (a.freq_factors) theta /= static_cast<double>(a.freq_factors[i]);
  double sn, cn;
  sincos(theta, &sn, &cn);
  const float c = static_cast<float>(cn), s = static_cast<float>(sn);
  return make_float2(x0 * c - x1 * s, x0 * s + x1 * c);
}

}  // namespace ferry::kernels::cuda
