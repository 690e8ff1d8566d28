// The run-time profile check: after a --vram run, whether the CPU sub-layers ran as the profile the
// plan came from predicts (exec::cpu_vs_profile: measured / planned time), and when they did not, the
// part of the profile that prices them measured again: the host bandwidth and the CPU kernels of the
// weight types this model uses, a few seconds, written into the cached profile (a temporary file
// renamed over it, so a reader never sees half a profile) so that the next plan uses them. The rest of
// the profile stays, and a --profile FILE is never rewritten (the run only warns).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "model/sublayer.h"
#include "plan/profiler.h"
#include "tensor/dtype.h"

namespace ferry::plan {

// The band of measured / planned CPU time that counts as the profile describing this machine: copies
// running beside the CPU sub-layers make 1.0-1.6 normal.
inline constexpr double kCpuFastRatio = 0.5;
inline constexpr double kCpuSlowRatio = 2.5;
inline bool cpu_time_off(double cpu_vs_profile) {
  return cpu_vs_profile < kCpuFastRatio || cpu_vs_profile > kCpuSlowRatio;
}

// Re-measured figures whose median ratio to the old ones (over every point, or over the one-token points)
// is beyond this either way moved; within it, they held.
inline constexpr double kFigureMovedRatio = 1.15;

// The weight types of the matrices the model multiplies with (the embedding table is looked up, not
// multiplied), in kWeightTypes order.
std::vector<DType> matmul_weight_types(const std::vector<model::SubLayer>& subs);

struct ProfileRecheck {
  double cpu_vs_profile = 0;         // the run's measured / planned CPU sub-layer time
  std::vector<DType> weight_types;   // matmul_weight_types of the model
  std::string profile_path;          // where the plan's profile came from
  bool cached = false;               // profile_path is this machine's cached profile: it may be rewritten
};

// The one line to show after a run (empty when cpu_vs_profile is within the band). Outside it, with a
// cached profile: loads it, remeasure_cpu's the host bandwidth and the curves of weight_types (all of
// the profile's types when empty), and when the figures moved (kFigureMovedRatio) saves the profile with
// the new ones (and a note saying when and why) and says how far they moved; when they held, leaves the
// file alone and says the run was slowed (or sped up) by something else. `options` carries the progress
// callback and test overrides. A profile that cannot be loaded or saved is an error.
Expected<std::string> recheck_profile_after_run(const ProfileRecheck& r, const CpuKernels& cpu,
                                                const ProfileOptions& options);

}  // namespace ferry::plan
