// What `ferry profile` and `ferry plan` share: the host kernels and the GPU prober they measure, and
// "load the cached profile of this machine or measure a quick one" (the library's, runtime/
// profile_source.h, with its notes and progress drawn on stderr), and a progress bar.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "kernels/cpu/cpu_ops.h"
#include "plan/gpu_prober.h"
#include "plan/profile.h"
#include "plan/profiler.h"

namespace ferry::cli {

// The host kernels ferry runs (CpuOps at dispatch level `isa`; nullopt: the default), as an Ops factory.
plan::CpuKernels host_kernels(std::optional<kernels::CpuIsa> isa = std::nullopt);

// The GPU to measure (CUDA device 0), or nullptr when there is none or ferry is built without CUDA.
std::unique_ptr<plan::GpuProber> make_gpu_prober();

// FERRY_GEMM_STAGING_MB in bytes (plan::PlannerOptions::gemm_staging_bytes, for `ferry plan` and `--vram`
// runs alike): unset = the planner's choice (kGemmStagingAuto), 0 = a whole matrix, N = N MiB.
uint64_t gemm_staging_bytes_from_env();

// A progress callback drawing a bar on stderr ("\r" updates on a terminal, a line per 10 % when not).
std::function<void(double, const std::string&)> progress_bar(const std::string& title);

// The profile for planning: `path` when given; else this machine's cached profile; else a quick
// profile measured now (announced on stderr, with a progress bar) and saved to the cache.
// `cached` (optional): whether the profile is this machine's cached file (loaded or just saved there).
Expected<plan::HardwareProfile> load_or_measure_profile(const std::string& path, std::string* origin,
                                                        bool* cached = nullptr);

}  // namespace ferry::cli
