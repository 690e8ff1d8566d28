// Launch-level switches of the CUDA kernels below CudaOps: how a kernel is launched, not what it computes,
// and the timing ablation that skips kernels (the results are wrong then). They exist for A/B studies only:
// a production build uses the defaults below and compiles the ablation checks out; an experiments build
// (-DFERRY_EXPERIMENTS=ON) takes them once from the environment (base/env_options.h: FERRY_CUDA_PDL,
// FERRY_CUDA_NORM_PDL, FERRY_CUDA_ATTN_SPLIT_SM, FERRY_CUDA_ATTN_DEC_CELLS, FERRY_CUDA_ABLATE;
// docs/ENVIRONMENT.md). Plain C++17, no CUDA header: the launchers and cuda_ops.cc include it.
#pragma once

#include "base/env_options.h"

namespace ferry::kernels::cuda {

struct LaunchSettings {
  bool pdl = true;                        // programmatic dependent launch of the small decode kernels (sm_90+)
  bool norm_pdl = true;                   // ... also of the short-row rms_norm kernels
  int attention_split_blocks_per_sm = 2;  // blocks per SM the flash-decoding split count aims for
  int attention_decode_cells = 0;         // cells a split of the decode kernel takes; 0: two rounds of every warp
};

#if FERRY_EXPERIMENTS
// The settings from the environment, parsed once (cuda_ops.cc).
const LaunchSettings& launch_settings();
// Timing ablation: whether the launches of kernel family `what` (norm, rope, attn, combine, glu, matvec)
// are skipped (FERRY_CUDA_ABLATE). A step without them measures what they cost inside the CUDA graph.
bool ablated(const char* what);
#else
inline const LaunchSettings& launch_settings() {
  static constexpr LaunchSettings kDefaults{};
  return kDefaults;
}
inline constexpr bool ablated(const char*) { return false; }
#endif

}  // namespace ferry::kernels::cuda
