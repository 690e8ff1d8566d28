// One matrix of an expert set (launch.h's MoeMatvecSet) at one expert, for the expert kernels (moe_matvec.cu,
// moe_mma.cu). Internal to kernels_cuda (device code).
#pragma once

#include "kernels/cuda/launch.h"

namespace ferry::kernels::cuda {

// Matrix m of the set, at expert e (compile-time indices into the set, so it stays in the parameter bank).
struct MoeMat {
  const uint8_t* w;
  int64_t nb1, rows;
  float* out;
  int64_t s1, s2;
};
__device__ __forceinline__ MoeMat moe_mat(const MoeMatvecSet& s, int m, int64_t e) {
  MoeMat r{static_cast<const uint8_t*>(s.w[0]) + e * s.w_nb2[0], s.w_nb1[0], s.rows[0], s.out[0], s.out_s1[0],
           s.out_s2[0]};
#pragma unroll
  for (int i = 1; i < kMatvecMaxMats; ++i) {
    if (i == m) {
      r = MoeMat{static_cast<const uint8_t*>(s.w[i]) + e * s.w_nb2[i], s.w_nb1[i], s.rows[i], s.out[i], s.out_s1[i],
                 s.out_s2[i]};
    }
  }
  return r;
}

}  // namespace ferry::kernels::cuda
