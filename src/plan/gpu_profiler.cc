// measure_gpu_part: see gpu_profiler.h. One function per phase; each takes its samples back to back
// (device timings scatter little once warm, and the prober warms every call up itself) except the CPU
// under copies, whose lone and busy windows alternate so that a disturbance lands on one window of each.
#include "plan/gpu_profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "plan/profile_stats.h"

namespace ferry::plan {

namespace {

constexpr uint64_t kCopyBytes = 256ull << 20;        // link and device copies (smaller if the prober asks)
constexpr uint64_t kBackgroundChunk = 64ull << 20;   // background copies while the CPU is timed
constexpr int64_t kProbeRows = 4096, kProbeCols = 4096;
constexpr double kLoadRampS = 0.05;                  // CPU load running before copies are timed under it

struct GpuSampling {
  int samples = 3;         // per figure
  int copy_reps = 3;       // copies per sample
  int matmul_reps = 5;     // matmuls per sample
  double window_s = 0.25;  // a CPU window of the share / H measurement
  uint64_t copy_bytes = kCopyBytes;      // one timed copy
  uint64_t chunk_bytes = kBackgroundChunk;  // one background copy
  std::vector<DType> dtypes;
};

GpuSampling sampling_for(const ProfileOptions& opt) {
  GpuSampling s;
  if (opt.quick) {
    s.dtypes = {DType::F16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K};
  } else {
    s.samples = 5;
    s.copy_reps = 10;
    s.matmul_reps = 20;
    s.window_s = 0.5;
    s.dtypes.assign(std::begin(kWeightTypes), std::end(kWeightTypes));
  }
  if (opt.copy_window_s > 0) s.window_s = opt.copy_window_s;
  return s;
}

// GB/s of `reps` copies of `bytes` that took `seconds`.
Expected<double> copy_gbs(Expected<double> seconds, uint64_t bytes, int reps) {
  if (!seconds) return seconds.status();
  return static_cast<double>(bytes) * reps / std::max(*seconds, 1e-9) / 1e9;
}

// The robust mean of `n` samples of `sample()`.
template <typename F>
Expected<double> robust_of(int n, F sample) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) {
    Expected<double> x = sample();
    if (!x) return x.status();
    v.push_back(*x);
  }
  return robust_mean(std::move(v));
}

Status measure_link_alone(GpuProber& gpu, const GpuSampling& s, LinkProfile* l) {
  const int r = s.copy_reps;
  FERRY_ASSIGN_OR_RETURN(l->h2d_gbs, robust_of(s.samples, [&] { return copy_gbs(gpu.time_h2d(s.copy_bytes, r), s.copy_bytes, r); }));
  FERRY_ASSIGN_OR_RETURN(l->d2h_gbs, robust_of(s.samples, [&] { return copy_gbs(gpu.time_d2h(s.copy_bytes, r), s.copy_bytes, r); }));
  // Informational (ferry copies from pinned memory): one sample.
  FERRY_ASSIGN_OR_RETURN(l->h2d_pageable_gbs, copy_gbs(gpu.time_h2d_pageable(s.copy_bytes, 2), s.copy_bytes, 2));
  return Status::ok();
}

// A device copy reads and writes every byte: bandwidth = 2 x the copy rate.
Status measure_device(GpuProber& gpu, const GpuSampling& s, GpuProfile* g) {
  const int r = s.copy_reps;
  FERRY_ASSIGN_OR_RETURN(const double d2d, robust_of(s.samples, [&] {
                           return copy_gbs(gpu.time_d2d(s.copy_bytes, r), s.copy_bytes, r);
                         }));
  g->mem_bw_gbs = 2 * d2d;
  FERRY_ASSIGN_OR_RETURN(g->launch_us, robust_of(s.samples, [&] { return gpu.launch_overhead_us(); }));
  return Status::ok();
}

// Copies while CPU kernels run on all threads; the load runs kLoadRampS before the first copy is timed.
Status measure_link_under_cpu_load(GpuProber& gpu, const CpuLoad& cpu_load, const GpuSampling& s, LinkProfile* l) {
  std::atomic<bool> stop{false};
  std::thread load([&] { (void)cpu_load(stop); });
  std::this_thread::sleep_for(std::chrono::duration<double>(kLoadRampS));
  const int r = s.copy_reps;
  std::vector<double> h2d, d2h;
  Status st;
  for (int i = 0; i < s.samples && st; ++i) {
    Expected<double> a = copy_gbs(gpu.time_h2d(s.copy_bytes, r), s.copy_bytes, r);
    Expected<double> b = a ? copy_gbs(gpu.time_d2h(s.copy_bytes, r), s.copy_bytes, r) : Expected<double>(a.status());
    if (!a || !b) st = a ? b.status() : a.status();
    if (st) {
      h2d.push_back(*a);
      d2h.push_back(*b);
    }
  }
  stop = true;
  load.join();
  FERRY_RETURN_IF_ERROR(st);
  l->h2d_busy_gbs = robust_mean(h2d);
  l->d2h_busy_gbs = robust_mean(d2h);
  return Status::ok();
}

// CPU kernels alone and with H2D copies streaming, alternating windows: the share of its speed the CPU
// keeps (busy / alone) and H (CPU weight bytes + copied bytes, per second, together). A slow lone window
// (something else ran) would make copies look free; the robust means of several keep it out.
Status measure_cpu_under_copies(GpuProber& gpu, const CpuLoad& cpu_load, const GpuSampling& s, LinkProfile* l) {
  auto load_for = [&](double seconds) {
    std::atomic<bool> stop{false};
    double rate = 0;
    std::thread t([&] { rate = cpu_load(stop); });
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop = true;
    t.join();
    return rate;
  };
  std::vector<double> alone, busy, combined;
  for (int i = 0; i < s.samples; ++i) {
    alone.push_back(load_for(s.window_s));
    FERRY_RETURN_IF_ERROR(gpu.start_background_copies(true, s.chunk_bytes));
    const double cpu = load_for(s.window_s);
    FERRY_ASSIGN_OR_RETURN(const GpuProber::CopyStats cs, gpu.stop_background_copies());
    busy.push_back(cpu);
    combined.push_back((cpu + cs.bytes / std::max(cs.seconds, 1e-9)) / 1e9);
  }
  l->cpu_share_while_copying = std::clamp(robust_mean(busy) / std::max(robust_mean(alone), 1.0), 1e-3, 1.0);
  l->host_combined_gbs = robust_mean(combined);
  return Status::ok();
}

// Latency of a small transfer: 4 KiB copies (their bandwidth share is negligible).
Status measure_copy_latency(GpuProber& gpu, const GpuSampling& s, LinkProfile* l) {
  constexpr int kReps = 100;
  FERRY_ASSIGN_OR_RETURN(const double seconds, robust_of(s.samples, [&] { return gpu.time_h2d(4096, kReps); }));
  l->latency_us = seconds / kReps * 1e6;
  return Status::ok();
}

// One 4096 x 4096 matrix per dtype at tokens 1, 2, 4, ... 1024: GFLOP/s from the robust mean of the
// samples' times.
Expected<ThroughputCurve> measure_gpu_curve(GpuProber& gpu, DType t, const GpuSampling& s) {
  ThroughputCurve c;
  c.dtype = t;
  c.rows = kProbeRows;
  c.cols = kProbeCols;
  const int r = s.matmul_reps;
  for (int32_t n = 1; n <= 1024; n *= 2) {
    FERRY_ASSIGN_OR_RETURN(const double seconds, robust_of(s.samples, [&] {
                             return gpu.time_matmul(t, kProbeRows, kProbeCols, n, r);
                           }));
    c.tokens.push_back(n);
    c.gflops.push_back(2.0 * kProbeRows * kProbeCols * n * r / std::max(seconds, 1e-9) / 1e9);
  }
  return c;
}

// GPU attention for llama3-8b's heads (32 q, 8 KV, head_dim 128; the cost model scales to other models by
// KV bytes and flops): decode after 512 / 4K / 32K cells, where the split flash-decoding kernel is far
// from the device bandwidth, and the last 512-token chunk of a 4K prompt (how ferry prefills long
// prompts). Each point: the robust mean of 3 samples, a few ms of device
// time in all. nullopt: the prober cannot time attention.
constexpr int32_t kAttnHeads = 32, kAttnKvHeads = 8, kAttnHeadDim = 128;
constexpr int64_t kAttnDecodeCells[] = {512, 4096, 32768};
constexpr int64_t kAttnChunkTokens = 512, kAttnChunkCells = 4096;

Expected<std::optional<GpuAttentionProfile>> measure_attention(GpuProber& gpu, bool quick) {
  GpuAttentionProfile a;
  a.n_head = kAttnHeads;
  a.n_kv_head = kAttnKvHeads;
  a.head_dim = kAttnHeadDim;
  // Microseconds per call.
  auto point_us = [&](int64_t cells, int64_t tokens, int reps) -> Expected<double> {
    FERRY_ASSIGN_OR_RETURN(const double s, robust_of(3, [&] {
                             return gpu.time_attention(kAttnHeads, kAttnKvHeads, kAttnHeadDim, cells, tokens, reps);
                           }));
    return std::max(s / reps * 1e6, 1e-3);  // the profile's lower bound (a fake prober may answer 0)
  };
  for (int64_t cells : kAttnDecodeCells) {
    Expected<double> us = point_us(cells, 1, quick ? 20 : 100);
    if (!us && us.status().code() == ErrorCode::kUnsupported) return std::optional<GpuAttentionProfile>();
    if (!us) return us.status();
    a.decode.push_back({1, cells, *us});
  }
  FERRY_ASSIGN_OR_RETURN(const double chunk_us, point_us(kAttnChunkCells, kAttnChunkTokens, quick ? 4 : 20));
  a.prefill.push_back({kAttnChunkTokens, kAttnChunkCells, chunk_us});
  return std::optional<GpuAttentionProfile>(std::move(a));
}

}  // namespace

Status measure_gpu_part(GpuProber& gpu, const CpuLoad& cpu_load, const ProfileOptions& options,
                        ProfileProgress& progress, double begin, double end, LinkProfile* link, GpuProfile* g) {
  GpuSampling s = sampling_for(options);
  s.copy_bytes = std::min(s.copy_bytes, gpu.copy_bytes_limit());
  s.chunk_bytes = std::min(s.chunk_bytes, s.copy_bytes);
  g->name = gpu.name();
  g->memory_bytes = gpu.memory_bytes();
  g->context_bytes = gpu.context_bytes();
  progress.begin_span(begin, end, 6 + s.dtypes.size());
  progress.step("host to device copies");
  FERRY_RETURN_IF_ERROR(measure_link_alone(gpu, s, link));
  progress.step("device memory bandwidth, launch overhead");
  FERRY_RETURN_IF_ERROR(measure_device(gpu, s, g));
  progress.step("copies while CPU kernels run");
  FERRY_RETURN_IF_ERROR(measure_link_under_cpu_load(gpu, cpu_load, s, link));
  progress.step("CPU kernels while copies run (H)");
  FERRY_RETURN_IF_ERROR(measure_cpu_under_copies(gpu, cpu_load, s, link));
  progress.step("small copies (latency)");
  FERRY_RETURN_IF_ERROR(measure_copy_latency(gpu, s, link));
  g->matmul.clear();
  for (DType t : s.dtypes) {
    progress.step(std::string("GPU matmul ") + dtype_name(t));
    FERRY_ASSIGN_OR_RETURN(ThroughputCurve c, measure_gpu_curve(gpu, t, s));
    g->matmul.push_back(std::move(c));
  }
  progress.step("GPU attention");
  FERRY_ASSIGN_OR_RETURN(g->attention, measure_attention(gpu, options.quick));
  return Status::ok();
}

}  // namespace ferry::plan
