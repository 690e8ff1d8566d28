// Profile plumbing of the CLI. The one place that picks the host kernels the profiler measures
// (CpuOps) and the GPU prober (the CUDA device's, exec/gpu_prober_cuda.h, when a usable GPU is present).
// Everything else (plan, profile) goes through these two.
#include "profile_support.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sys/stat.h>

#include "base/env_options.h"
#include "exec/device.h"
#include "exec/gpu_prober_cuda.h"
#include "kernels/cpu/cpu_ops.h"
#include "plan/planner.h"

namespace ferry::cli {

plan::CpuKernels host_kernels() {
  plan::CpuKernels k;
  k.name = "cpu";  // CpuOps: SIMD dispatch + thread pool, what `ferry run` computes with
  k.multithreaded = true;
  k.make_ops = [](int32_t threads) { return kernels::make_cpu_ops(threads); };
  return k;
}

std::unique_ptr<plan::GpuProber> make_gpu_prober() {
  if (!exec::cuda_available(nullptr)) return nullptr;  // no GPU (or a build without CUDA): CPU profile
  Expected<std::unique_ptr<plan::GpuProber>> p = exec::make_cuda_gpu_prober(0);
  if (!p) {
    // A GPU is there but cannot be probed: say why, and profile the CPU alone rather than fail.
    std::fprintf(stderr, "ferry: warning: GPU not measured: %s\n", p.status().message().c_str());
    return nullptr;
  }
  return std::move(*p);
}

uint64_t gemm_staging_bytes_from_env() {
  // A bad value is reported when the CLI starts (base/env_options.h).
  return env_options().gemm_staging_bytes.value_or(plan::PlannerOptions::kGemmStagingAuto);
}

std::function<void(double, const std::string&)> progress_bar(const std::string& title) {
  const bool tty = isatty(STDERR_FILENO);
  auto last_decile = std::make_shared<int>(-1);
  return [tty, title, last_decile](double f, const std::string& what) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(f * kWidth + 0.5);
    if (tty) {
      std::string bar(static_cast<size_t>(filled), '#');
      bar.resize(kWidth, '.');
      std::string label = what.size() > 48 ? what.substr(0, 48) : what;
      std::fprintf(stderr, "\r%s [%s] %3d%% %-48s", title.c_str(), bar.c_str(), static_cast<int>(f * 100 + 0.5),
                   label.c_str());
      if (f >= 1.0) std::fprintf(stderr, "\n");
      std::fflush(stderr);
    } else {
      const int decile = static_cast<int>(f * 10);
      if (decile != *last_decile) {
        *last_decile = decile;
        std::fprintf(stderr, "%s %3d%% %s\n", title.c_str(), decile * 10, what.c_str());
      }
    }
  };
}

Expected<plan::HardwareProfile> load_or_measure_profile(const std::string& path, std::string* origin, bool* cached_out) {
  if (cached_out) *cached_out = false;
  if (!path.empty()) {
    if (origin) *origin = path;
    return plan::load_profile(path);
  }
  plan::MachineInfo m = plan::detect_machine();
  std::unique_ptr<plan::GpuProber> gpu = make_gpu_prober();
  if (gpu) {
    m.gpu_name = gpu->name();
    m.gpu_driver = gpu->driver();
  }
  const std::string cached = plan::cached_profile_path(m);
  struct stat st;
  if (!cached.empty() && ::stat(cached.c_str(), &st) == 0) {
    Expected<plan::HardwareProfile> p = plan::load_profile(cached);
    if (p) {
      if (origin) *origin = cached;
      if (cached_out) *cached_out = true;
      return p;
    }
    std::fprintf(stderr, "ferry: cached profile unusable (%s); measuring again\n", p.status().message().c_str());
  }
  std::fprintf(stderr, "ferry: no hardware profile for this machine yet; running the quick profile (~30 s, once)\n");
  plan::ProfileOptions opt;
  opt.quick = true;
  opt.progress = progress_bar("profile");
  FERRY_ASSIGN_OR_RETURN(plan::HardwareProfile p, plan::measure_profile(host_kernels(), gpu.get(), opt));
  if (!cached.empty()) {
    const Status s = plan::save_profile(p, cached);
    if (s) {
      std::fprintf(stderr, "ferry: profile saved to %s (`ferry profile` measures the full one)\n", cached.c_str());
      if (cached_out) *cached_out = true;
    } else {
      std::fprintf(stderr, "ferry: warning: %s\n", s.message().c_str());
    }
  }
  if (origin) *origin = cached.empty() ? "quick profile (not saved)" : cached;
  return p;
}

}  // namespace ferry::cli
