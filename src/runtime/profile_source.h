// Where the planner's hardware profile comes from: the one place that picks the host kernels the
// profiler measures (CpuOps) and the GPU prober (the CUDA device's, exec/gpu_prober_cuda.h, when a
// usable GPU is present); loading the cached profile of this machine or measuring a quick one; and the
// after-run check that the profile still describes the machine. `ferry profile`, `ferry plan` and
// runtime::open go through these.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "exec/hybrid_runner.h"
#include "kernels/cpu/cpu_ops.h"
#include "plan/gpu_prober.h"
#include "plan/profile.h"
#include "plan/profiler.h"

namespace ferry::runtime {

using NoteFn = std::function<void(const std::string&)>;
using ProgressFn = std::function<void(double, const std::string&)>;

// The host kernels ferry runs (CpuOps at dispatch level `isa`, nullopt: kernels::default_cpu_isa()), as
// the profiler's Ops factory. A level other than the default is recorded in the profile (CpuKernels::simd).
plan::CpuKernels host_kernels(std::optional<kernels::CpuIsa> isa = std::nullopt);

// The GPU to measure (CUDA device 0), or nullptr when there is none or ferry is built without CUDA.
// A GPU that is present but cannot be probed is reported through `note` (the profile is then CPU-only).
// process_cap > 0: the probes keep the whole process's device memory under it (exec::make_cuda_gpu_prober).
std::unique_ptr<plan::GpuProber> make_gpu_prober(const NoteFn& note = {}, uint64_t process_cap = 0);

// The profile for planning: `path` when given; else this machine's cached profile for the CPU kernels
// at level `isa`; else a quick profile measured now (announced through `note`, progress through
// `progress`) and saved to the cache. *origin: where it came from; *cached (optional): whether it is
// this machine's cached file. gpu_process_cap: as make_gpu_prober's process_cap (a VRAM run measures
// inside its budget).
Expected<plan::HardwareProfile> load_or_measure_profile(const std::string& path, std::string* origin,
                                                        bool* cached = nullptr, const NoteFn& note = {},
                                                        const ProgressFn& progress = {},
                                                        std::optional<kernels::CpuIsa> isa = std::nullopt,
                                                        uint64_t gpu_process_cap = 0);

// The profile of a GPU run: as above, but one without a GPU is an error, found before anything is
// measured where possible (no GPU here and no cached GPU profile: say to pass a GPU profile file).
Expected<plan::HardwareProfile> load_gpu_profile(const std::string& path, std::string* origin, bool* cached,
                                                 const NoteFn& note, const ProgressFn& progress,
                                                 std::optional<kernels::CpuIsa> isa = std::nullopt,
                                                 uint64_t gpu_process_cap = 0);

// Before planning a model: the CPU matmul curves of the weight types it uses that the profile lacks (gpt-oss's
// MXFP4: the quick profile measures five common types) measured now, at the profile's thread counts, and, for
// this machine's cached profile (`cached`, saved at `origin`), added to the file so later runs have them.
// A profile from another machine (a --profile file) is left as it is: the cost model prices a missing type
// as its nearest measured one. Returns the types measured (empty: none were missing, or the profile is not
// this machine's).
Expected<std::vector<DType>> measure_missing_cpu_types(plan::HardwareProfile* profile, const std::vector<DType>& types,
                                                       bool cached, const std::string& origin,
                                                       std::optional<kernels::CpuIsa> isa = std::nullopt);

// After a run: when the CPU sub-layers ran far from the profile's times (exec::cpu_vs_profile outside
// plan::cpu_time_off's band), re-measures the part of the profile that prices them (host
// bandwidth, the CPU curves of `weight_types`) and, for this machine's cached profile, saves the new
// figures when they moved (plan/profile_check.h). Returns the one line to show; empty when the profile held
// or too few CPU sub-layers ran to tell.
std::string check_profile_after_run(const std::vector<exec::TierStats>& stats, const std::string& origin,
                                    bool profile_cached, const std::vector<DType>& weight_types,
                                    std::optional<kernels::CpuIsa> isa = std::nullopt);

}  // namespace ferry::runtime
