// HardwareProfile: what the planner knows about a machine, as measured by `ferry profile` (or
// estimated, for fixtures): host memory bandwidth by threads, CPU kernel throughput per weight type x
// threads x tokens, the PCIe link alone and under CPU load, the combined host-memory rate H, and the
// GPU (memory bandwidth, kernel throughput per weight type x tokens, launch overhead, attention times).
// Stored as versioned JSON (schema below, docs/PLANNER.md) and parsed strictly: an unknown key, a
// missing key or a value out of range is an error naming the key path.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace ferry::plan {

inline constexpr int kProfileVersion = 1;
inline constexpr const char* kProfileSchema = "ferry-hardware-profile";

// Identity of the machine a profile describes; the cache file is keyed by fingerprint().
struct MachineInfo {
  std::string cpu_model;          // /proc/cpuinfo "model name"
  int32_t cores = 0;              // physical cores
  int32_t logical_cpus = 0;
  std::string simd;               // best SIMD level: "avx512", "avx2", "sse4.2", "neon", "scalar"
  uint64_t host_memory_bytes = 0;
  uint64_t llc_bytes = 0;         // last-level cache size (0 = unknown)
  std::string gpu_name;           // empty: no GPU
  std::string gpu_driver;         // driver version, empty without GPU
  // Stable hex id over cpu_model, cores, simd, gpu_name, gpu_driver.
  std::string fingerprint() const;
};

// Achieved matmul throughput (GFLOP/s, 2 * rows * cols * tokens per call) at token counts.
struct ThroughputCurve {
  DType dtype = DType::F32;
  int32_t threads = 0;            // CPU thread count (0 for GPU curves)
  std::vector<int32_t> tokens;    // strictly increasing, >= 1
  std::vector<double> gflops;     // same length, > 0
  int64_t rows = 0, cols = 0;     // the weight shape measured (informational)
};

struct BandwidthPoint {
  int32_t threads = 0;
  double gbs = 0;                 // GB/s (1e9 bytes per second), read
};

struct CpuProfile {
  std::string kernels;                   // which Ops measured: "cpu" (CpuOps) or "ref" (RefOps)
  int32_t threads = 0;                   // threads ferry uses by default (physical cores)
  std::vector<BandwidthPoint> mem_bw;    // by threads, increasing
  std::vector<ThroughputCurve> matmul;   // one per (dtype, threads)
  double call_overhead_us = 0;           // fixed cost of one kernel call (thread-pool hand-off)
};

// Host <-> device copies from pinned memory. "busy" = while CPU kernels run on all threads.
struct LinkProfile {
  double h2d_gbs = 0;
  double d2h_gbs = 0;
  double h2d_busy_gbs = 0;
  double d2h_busy_gbs = 0;
  double h2d_pageable_gbs = 0;           // 0 = not measured (informational: ferry copies from pinned)
  double cpu_share_while_copying = 1;    // CPU matmul throughput kept while H2D copies run (0, 1]
  double host_combined_gbs = 0;          // H: weight bytes/s read by CPU kernels + copied, together
  double latency_us = 0;                 // fixed cost of one transfer (small activation copies)
};

// Measured GPU attention (CudaOps::attention: flash-decoding kernel + split combine) for one head
// configuration, one sequence, F16 KV cache over a pool larger than the L2 cache (as a real step reads
// it). Decode: 1 token at the last of `cells` positions; prefill: a causal chunk of `tokens` tokens at
// the last positions of `cells` cells. Microseconds of device time per call.
struct AttentionPoint {
  int64_t tokens = 1;
  int64_t cells = 0;
  double us = 0;
};

struct GpuAttentionProfile {
  int32_t n_head = 0;                    // the measured head configuration (32, 8, 128: llama3-8b)
  int32_t n_kv_head = 0;
  int32_t head_dim = 0;
  std::vector<AttentionPoint> decode;    // tokens == 1, cells strictly increasing
  std::vector<AttentionPoint> prefill;   // tokens > 1, (tokens, cells) strictly increasing
};

struct GpuProfile {
  std::string name;
  uint64_t memory_bytes = 0;
  double mem_bw_gbs = 0;                 // device memory, bytes read + written per second by a copy
  double launch_us = 0;                  // kernel launch overhead
  // Issue cost of one kernel node of a replayed CUDA graph; 0 = not measured (older profiles, and the
  // current prober): the cost model then uses kGraphKernelUsDefault. Optional key, written when > 0.
  double graph_kernel_us = 0;
  // Device memory a process holds outside ferry's arena once its CUDA context, a cuBLAS handle and the
  // streams exist (exec::measure_cuda_context); 0 = not measured (older profiles). The emulated device
  // models a budget with it (else exec::kDefaultCudaContextBytes). Optional key, written when > 0.
  uint64_t context_bytes = 0;
  std::vector<ThroughputCurve> matmul;   // one per dtype (threads = 0)
  // Optional key (additive, schema version unchanged): absent = not measured (older profiles, probers
  // that cannot time attention); the cost model then prices attention by bandwidth and flops alone.
  std::optional<GpuAttentionProfile> attention;
};

struct HardwareProfile {
  int32_t version = kProfileVersion;
  std::string source = "measured";       // "measured" | "estimated"
  std::string mode;                      // "quick" | "full" | "" (hand-written)
  std::string created;                   // ISO 8601 UTC
  double seconds = 0;                    // how long the measurement took
  std::string notes;
  MachineInfo machine;
  CpuProfile cpu;
  std::optional<LinkProfile> link;       // both absent without a GPU
  std::optional<GpuProfile> gpu;

  bool has_gpu() const { return gpu.has_value() && link.has_value(); }
};

// The current time as HardwareProfile::created holds it (ISO 8601 UTC, e.g. 2026-12-05T14:13:03Z).
std::string now_utc();

// Strict parse; `origin` (a file name) prefixes error messages.
Expected<HardwareProfile> parse_profile(std::string_view json_text, std::string_view origin = "profile");
Expected<HardwareProfile> load_profile(const std::string& path);
// Checks ranges and consistency (also run by parse_profile).
Status validate_profile(const HardwareProfile& p, std::string_view origin = "profile");
std::string profile_to_json(const HardwareProfile& p);  // pretty, stable key order
Status save_profile(const HardwareProfile& p, const std::string& path);  // creates parent dirs

// $XDG_CACHE_HOME/ferry or ~/.cache/ferry ("" if neither HOME nor XDG_CACHE_HOME is set).
std::string profile_cache_dir();
// <cache dir>/profile-<fingerprint>.json
std::string cached_profile_path(const MachineInfo& m);

}  // namespace ferry::plan
