// The GPU half of a profile, through a GpuProber: the link alone and while CPU kernels run, the CPU's
// share of its speed while copies run and the combined host rate H, the device's copy bandwidth and
// launch overhead, small-copy latency, GPU matmul curves and attention times. Every figure is the
// robust mean (profile_stats.h) of several samples: a stalled sample (a device busy with something else
// for a moment) is an outlier, not the figure.
#pragma once

#include <atomic>
#include <functional>

#include "base/status.h"
#include "plan/gpu_prober.h"
#include "plan/profile.h"
#include "plan/profile_progress.h"
#include "plan/profiler.h"

namespace ferry::plan {

// Runs CPU kernels on all threads until `stop`; returns the weight bytes they read per second.
using CpuLoad = std::function<double(const std::atomic<bool>& stop)>;

// Fills `link` and `gpu` (name, memory, bandwidth, launch, curves, attention); progress walks
// [begin, end). Quick (options.quick): 3 samples a figure, five weight types; full: 5 samples, every
// weight type.
Status measure_gpu_part(GpuProber& gpu, const CpuLoad& cpu_load, const ProfileOptions& options,
                        ProfileProgress& progress, double begin, double end, LinkProfile* link, GpuProfile* g);

}  // namespace ferry::plan
