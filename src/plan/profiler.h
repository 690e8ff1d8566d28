// Profiler: measures a HardwareProfile on this machine with the kernels ferry runs. The CPU part
// goes through the Ops interface (an Ops factory by thread count: CpuOps when present, RefOps
// otherwise), the GPU part through a GpuProber (absent without a GPU: the profile then has no
// link / gpu sections and plans run on the CPU). Quick mode fits in ~30 s; full takes minutes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

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
};

struct ProfileOptions {
  bool quick = true;
  int32_t max_threads = 0;      // 0 = physical cores
  double time_budget_s = 0;     // 0 = 25 s quick / 600 s full; later points are skipped past it
  uint64_t buffer_bytes = 0;    // weight pool / bandwidth buffer; 0 = 2x LLC within [64 MiB, 512 MiB or 1 GiB]
  // Progress: fraction done in [0, 1] and what is being measured. Called from the measuring thread.
  std::function<void(double fraction, const std::string& what)> progress;
  // Host read bandwidth in GB/s with `threads` threads over about `seconds`; empty = the built-in probe
  // (tests inject a machine that was busy during the first pass).
  std::function<double(int32_t threads, double seconds)> read_bw;
};

// CPU model, cores (physical, within this process's affinity), SIMD level, memory, LLC.
MachineInfo detect_machine();

// Measures everything; `gpu` may be null (no GPU). At the end the bandwidth at all threads is measured
// again; if it comes out more than 15 % above the first figure (the machine was busy with something
// else), the CPU part is measured a second time and each point keeps the faster of its two figures.
Expected<HardwareProfile> measure_profile(const CpuKernels& cpu, GpuProber* gpu, const ProfileOptions& options);

}  // namespace ferry::plan
