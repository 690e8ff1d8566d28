// Profile plumbing of the CLI: the library's (runtime/profile_source.h) with stderr for its notes, and
// the progress bar.
#include "profile_support.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "base/env_options.h"
#include "plan/planner.h"
#include "runtime/profile_source.h"

namespace ferry::cli {

plan::CpuKernels host_kernels(std::optional<kernels::CpuIsa> isa) { return runtime::host_kernels(isa); }

std::unique_ptr<plan::GpuProber> make_gpu_prober() {
  return runtime::make_gpu_prober([](const std::string& text) { std::fprintf(stderr, "ferry: %s\n", text.c_str()); });
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

Expected<plan::HardwareProfile> load_or_measure_profile(const std::string& path, std::string* origin, bool* cached) {
  return runtime::load_or_measure_profile(
      path, origin, cached, [](const std::string& text) { std::fprintf(stderr, "ferry: %s\n", text.c_str()); },
      progress_bar("profile"));
}

}  // namespace ferry::cli
