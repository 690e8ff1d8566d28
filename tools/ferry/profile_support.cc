// Profile plumbing of the CLI: the library's (runtime/profile_source.h) with stderr for its notes, and
// the progress bar.
#include "profile_support.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "plan/planner.h"
#include "runtime/profile_source.h"

namespace ferry::cli {

plan::CpuKernels host_kernels() { return runtime::host_kernels(); }

std::unique_ptr<plan::GpuProber> make_gpu_prober() {
  return runtime::make_gpu_prober([](const std::string& text) { std::fprintf(stderr, "ferry: %s\n", text.c_str()); });
}

uint64_t gemm_staging_bytes_from_env() {
  const char* e = std::getenv("FERRY_GEMM_STAGING_MB");
  if (e == nullptr || *e == '\0') return plan::PlannerOptions::kGemmStagingAuto;
  char* end = nullptr;
  const long long mb = std::strtoll(e, &end, 10);
  if (end == e || *end != '\0' || mb < 0 || mb > (1ll << 20)) {
    std::fprintf(stderr, "ferry: warning: ignoring FERRY_GEMM_STAGING_MB='%s' (MiB as a whole number, 0 = a whole matrix)\n", e);
    return plan::PlannerOptions::kGemmStagingAuto;
  }
  return static_cast<uint64_t>(mb) << 20;
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
