// Profile plumbing (profile_source.h).
#include "runtime/profile_source.h"

#include <sys/stat.h>

#include <cstdio>

#include "exec/device.h"
#include "exec/gpu_prober_cuda.h"
#include "kernels/cpu/cpu_ops.h"
#include "plan/profile_check.h"

namespace ferry::runtime {

namespace {

void say(const NoteFn& note, const std::string& text) {
  if (note) note(text);
}

bool exists(const std::string& path) {
  struct stat st;
  return !path.empty() && ::stat(path.c_str(), &st) == 0;
}

}  // namespace

plan::CpuKernels host_kernels(std::optional<kernels::CpuIsa> isa) {
  plan::CpuKernels k;
  k.name = "cpu";  // CpuOps: SIMD dispatch + thread pool, what `ferry run` computes with
  k.multithreaded = true;
  const kernels::CpuIsa level = isa.value_or(kernels::default_cpu_isa());
  k.make_ops = [level](int32_t threads) { return kernels::make_cpu_ops(threads, level); };
  if (level != kernels::default_cpu_isa()) k.simd = kernels::cpu_isa_name(level);
  return k;
}

namespace {

// This machine as the profile cache knows it, with the kernels' level when it is not the default.
plan::MachineInfo this_machine(std::optional<kernels::CpuIsa> isa) {
  plan::MachineInfo m = plan::detect_machine();
  if (const std::string simd = host_kernels(isa).simd; !simd.empty()) m.simd = simd;
  return m;
}

}  // namespace

std::unique_ptr<plan::GpuProber> make_gpu_prober(const NoteFn& note, uint64_t process_cap) {
  if (!exec::cuda_available(nullptr)) return nullptr;  // no GPU (or a build without CUDA): CPU profile
  Expected<std::unique_ptr<plan::GpuProber>> p = exec::make_cuda_gpu_prober(0, process_cap);
  if (!p) {
    // A GPU is there but cannot be probed: say why, and profile the CPU alone rather than fail.
    say(note, "warning: GPU not measured: " + p.status().message());
    return nullptr;
  }
  return std::move(*p);
}

Expected<plan::HardwareProfile> load_or_measure_profile(const std::string& path, std::string* origin, bool* cached_out,
                                                        const NoteFn& note, const ProgressFn& progress,
                                                        std::optional<kernels::CpuIsa> isa,
                                                        uint64_t gpu_process_cap) {
  if (cached_out) *cached_out = false;
  if (!path.empty()) {
    if (origin) *origin = path;
    return plan::load_profile(path);
  }
  plan::MachineInfo m = this_machine(isa);
  std::unique_ptr<plan::GpuProber> gpu = make_gpu_prober(note, gpu_process_cap);
  if (gpu) {
    m.gpu_name = gpu->name();
    m.gpu_driver = gpu->driver();
  }
  const std::string cached = plan::cached_profile_path(m);
  if (exists(cached)) {
    Expected<plan::HardwareProfile> p = plan::load_profile(cached);
    if (p) {
      if (origin) *origin = cached;
      if (cached_out) *cached_out = true;
      return p;
    }
    say(note, "cached profile unusable (" + p.status().message() + "); measuring again");
  }
  say(note, "no hardware profile for this machine yet; running the quick profile (~30 s, once)");
  plan::ProfileOptions opt;
  opt.quick = true;
  opt.progress = progress;
  FERRY_ASSIGN_OR_RETURN(plan::HardwareProfile p, plan::measure_profile(host_kernels(isa), gpu.get(), opt));
  if (!cached.empty()) {
    const Status s = plan::save_profile(p, cached);
    if (s) {
      say(note, "profile saved to " + cached + " (`ferry profile` measures the full one)");
      if (cached_out) *cached_out = true;
    } else {
      say(note, "warning: " + s.message());
    }
  }
  if (origin) *origin = cached.empty() ? "quick profile (not saved)" : cached;
  return p;
}

Expected<plan::HardwareProfile> load_gpu_profile(const std::string& path, std::string* origin, bool* cached,
                                                 const NoteFn& note, const ProgressFn& progress,
                                                 std::optional<kernels::CpuIsa> isa,
                                                        uint64_t gpu_process_cap) {
  if (path.empty() && !exec::cuda_available(nullptr)) {
    // Measuring here would give a profile without a GPU: only this machine's cached profile can do, and
    // only if someone copied a GPU machine's there.
    const std::string cached_path = plan::cached_profile_path(this_machine(isa));
    if (!exists(cached_path))
      return make_error(ErrorCode::kInvalidArgument,
                        "the emulated device plans for a GPU described by a profile, and this machine has neither "
                        "a GPU nor a cached GPU profile: pass one measured on a GPU machine (--profile FILE, "
                        "written by `ferry profile -o FILE` there)");
  }
  FERRY_ASSIGN_OR_RETURN(plan::HardwareProfile prof, load_or_measure_profile(path, origin, cached, note, progress, isa,
                                                                              gpu_process_cap));;
  if (!prof.has_gpu())
    return make_error(ErrorCode::kInvalidArgument,
                      "the profile (%s) has no GPU: a VRAM budget needs a profile measured on a GPU machine "
                      "(--profile FILE)",
                      origin->c_str());
  return prof;
}

Expected<std::vector<DType>> measure_missing_cpu_types(plan::HardwareProfile* profile, const std::vector<DType>& types,
                                                       bool cached, const std::string& origin,
                                                       std::optional<kernels::CpuIsa> isa) {
  std::vector<DType> missing;
  for (DType t : types) {
    bool have = false;
    for (const plan::ThroughputCurve& c : profile->cpu.matmul) have = have || c.dtype == t;
    if (!have) missing.push_back(t);
  }
  if (missing.empty() || !cached) return std::vector<DType>{};
  FERRY_RETURN_IF_ERROR(plan::remeasure_cpu(host_kernels(isa), missing, plan::ProfileOptions{}, profile));
  FERRY_RETURN_IF_ERROR(plan::save_profile(*profile, origin));
  return missing;
}

std::string check_profile_after_run(const std::vector<exec::TierStats>& stats, const std::string& origin,
                                    bool profile_cached, const std::vector<DType>& weight_types,
                                    std::optional<kernels::CpuIsa> isa) {
  const std::optional<double> cv = exec::cpu_vs_profile(stats);
  if (!cv || !plan::cpu_time_off(*cv)) return "";
  plan::ProfileRecheck r;
  r.cpu_vs_profile = *cv;
  r.weight_types = weight_types;
  r.profile_path = origin;
  r.cached = profile_cached;
  const Expected<std::string> said = plan::recheck_profile_after_run(r, host_kernels(isa), plan::ProfileOptions{});
  if (said) return *said;
  return "warning: profile check: " + said.status().message();
}

}  // namespace ferry::runtime
