// Profiler: measures a HardwareProfile on this machine with the kernels ferry runs. The CPU part
// goes through the Ops interface (an Ops factory by thread count: CpuOps when present, RefOps
// otherwise; plan/cpu_profiler.h), the GPU part through a GpuProber (absent without a GPU: the profile
// then has no link / gpu sections and plans run on the CPU; plan/gpu_profiler.h). Every figure is the
// robust mean of repeated samples (plan/profile_stats.h). Quick mode takes ~10-20 s; full, minutes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/ops.h"
#include "plan/gpu_prober.h"
#include "plan/profile.h"

namespace ferry::plan {

// The host kernels to measure.
struct CpuKernels {
  std::string name;  // recorded as cpu.kernels: "cpu" (CpuOps) or "ref" (RefOps)
  // An Ops computing on the host with `threads` threads.
  std::function<std::unique_ptr<kernels::Ops>(int32_t threads)> make_ops;
  bool multithreaded = true;  // false: only 1 thread is measured (e.g. RefOps)
  // The SIMD level the kernels run at when it is not the one this machine's kernels use by default
  // (a --cpu-isa choice); recorded as machine.simd, so such a profile is cached apart from the default
  // one. Empty: the machine's own (detect_machine).
  std::string simd;
};

struct ProfileOptions {
  bool quick = true;
  int32_t max_threads = 0;      // 0 = physical cores
  double time_budget_s = 0;     // 0 = 60 s quick / 900 s full; past it, figures get fewer samples (at least 3)
  uint64_t buffer_bytes = 0;    // each host buffer; 0 = 4x LLC, at least 256 MiB (cpu_profiler.h)
  int32_t rounds = 0;           // samples per CPU figure; 0 = 7
  double sample_s = 0;          // seconds per CPU sample; 0 = 0.03 quick / 0.04 full
  double copy_window_s = 0;     // each CPU window of the copy-contention figures; 0 = 0.25 quick / 0.5 full
  // Progress: fraction done in [0, 1] and what is being measured. Called from the measuring thread.
  std::function<void(double fraction, const std::string& what)> progress;
  // One sample of host read bandwidth in GB/s with `threads` threads over about `seconds`; empty = the
  // built-in probe (tests inject a machine that was busy during the first pass).
  std::function<double(int32_t threads, double seconds)> read_bw;
};

// CPU model, cores (physical, within this process's affinity), SIMD level, memory, LLC.
MachineInfo detect_machine();

// Measures everything; `gpu` may be null (no GPU). At the end the bandwidth at all threads is measured
// again; if it comes out more than 15 % above the first figure (the machine was busy with something
// else), the CPU part is measured a second time and each point keeps the faster of its two figures.
// The profile's notes say how many cores other processes (and the hypervisor) took meanwhile.
Expected<HardwareProfile> measure_profile(const CpuKernels& cpu, GpuProber* gpu, const ProfileOptions& options);

// Measures the host bandwidth points and the CPU matmul curves of `dtypes` again (at the thread counts
// and token counts `p` has for them; a dtype `p` has no curve for at the thread counts of its other
// curves, with the quick profile's token counts) and replaces those figures in `p`; the rest of `p`
// stays. What the run-time profile check re-measures (plan/profile_check.h).
Status remeasure_cpu(const CpuKernels& cpu, const std::vector<DType>& dtypes, const ProfileOptions& options,
                     HardwareProfile* p);

}  // namespace ferry::plan
