// CostModel: predicted times from a HardwareProfile. A matmul costs
//   overhead + max(flops / rate(dtype, tokens), bytes / bandwidth)
// where rate is the measured throughput curve (interpolated log-log in tokens and linearly in
// threads) and bandwidth the measured memory bandwidth: a roofline over measured curves, not
// datasheet peaks. Sub-layer times add the attention core, the small ops and their per-call costs.
// Copies: latency + bytes / link bandwidth (alone, or with CPU kernels running).
// GPU matmuls are scaled from the probe's 4096 x 4096 point by element count with the probe's
// per-call fixed cost taken out, so real (larger) shapes stream at the kernel's rate; decode steps
// replayed from CUDA graphs pay a graph node per kernel instead of a launch (see gpu_matmul_s).
// GPU attention uses the profile's measured attention times when it has them (gpu_attention_core_s).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_spec.h"
#include "model/sublayer.h"
#include "plan/profile.h"

namespace ferry::plan {

class CostModel {
 public:
  // cpu_threads 0 = the profile's default.
  explicit CostModel(const HardwareProfile& profile, int32_t cpu_threads = 0);
  // The prefill GEMMs' F16 staging in bytes (0: a whole matrix): a smaller one runs a quantized matrix as
  // several dequantize + GEMM pairs.
  void set_gemm_staging_bytes(uint64_t b) { gemm_staging_bytes_ = b; }

  bool has_gpu() const { return profile_.has_gpu(); }
  int32_t cpu_threads() const { return threads_; }
  const HardwareProfile& profile() const { return profile_; }

  // Throughput in GFLOP/s at `tokens` (fractional for expert shares), interpolated.
  double cpu_gflops(DType t, double tokens) const;
  double gpu_gflops(DType t, double tokens) const;
  double host_bw_gbs() const;  // host memory read bandwidth at cpu_threads()
  // Weight bytes per second the CPU matmul kernels demonstrably stream from DRAM at cpu_threads(): the
  // fastest one-token point of the measured curves (their weights are cycled through DRAM), never
  // below host_bw_gbs(). The memory floor of cpu_matmul_s.
  double cpu_stream_gbs() const;

  // One matmul y[rows, n] = W[rows, cols] x[cols, n], seconds. The GPU version is a launched call:
  // gpu_kernel_issue_s(false) + gpu_matmul_kernel_s.
  double cpu_matmul_s(DType t, int64_t rows, int64_t cols, double tokens) const;
  double gpu_matmul_s(DType t, int64_t rows, int64_t cols, double tokens) const;
  // Device time of the matmul's kernels alone (no issue cost): the probe's time at `tokens` minus its
  // per-call fixed cost, scaled by rows * cols / the probe's; never faster than the weight bytes at
  // kGpuStreamShare of the device bandwidth. GEMM path (tokens > kGpuMatvecMaxTokens) of a quantized
  // matrix larger than the probe's: + the dequantized F16 copy's DRAM round trip (the probe's copy
  // stayed in L2).
  double gpu_matmul_kernel_s(DType t, int64_t rows, int64_t cols, double tokens) const;
  // Cost of issuing one kernel: a launch (profile launch_us), or a node of a replayed CUDA graph.
  double gpu_kernel_issue_s(bool graph) const;

  // Device time of an attention sub-layer's core (scores, softmax, weighted V: the flash-attention
  // kernels) at n new tokens of one sequence over context c. Without gpu.attention in the profile:
  // max(KV bytes / device bandwidth, core flops / F16 matmul rate at n x GQA). With it, the largest of
  // (1) the measured one-token time interpolated piecewise-linearly in KV bytes (the model's KV bytes
  // per cell against the measured heads'), extrapolated linearly past the points, (2) the measured
  // prefill chunk's time scaled by core flops, and the KV bytes at the device bandwidth (decode steps,
  // n <= kGpuMatvecMaxTokens) or the formula above (longer steps). See docs/PLANNER.md for why.
  double gpu_attention_core_s(const model::SubLayer& s, const model::ModelSpec& spec, int64_t n, int64_t c) const;

  // A whole sub-layer at n new tokens and context c (for the head, n = rows of logits). `graph`: the
  // sub-layer is replayed from a CUDA graph (resident decode steps, see the executor).
  double cpu_sublayer_s(const model::SubLayer& s, const model::ModelSpec& spec, int64_t n, int64_t c) const;
  double gpu_sublayer_s(const model::SubLayer& s, const model::ModelSpec& spec, int64_t n, int64_t c,
                        bool graph = false) const;

  // Weight copy host -> device from pinned memory (bandwidth only; the copy engine is a pipeline).
  double h2d_s(double bytes) const;
  // Activation hand-over (small, latency-bound): latency + bytes / bandwidth.
  double activation_h2d_s(double bytes) const;
  double activation_d2h_s(double bytes) const;
  // Contention factors (1 = none): the share of CPU kernel speed kept while copies run, and the share
  // of copy speed kept while CPU kernels run.
  double cpu_share_while_copying() const;
  double copy_share_while_cpu() const;
  // Combined host-memory rate H (GB/s) and the plain C + P sum, for the limits of docs/ARCHITECTURE.md §4.
  double host_combined_gbs() const;
  double link_gbs() const;

  // Human-readable notes (e.g. "no CPU curve for Q5_1: scaled from Q5_0"), in a stable order.
  std::vector<std::string> notes_for(const std::vector<model::SubLayer>& subs) const;

 private:
  const ThroughputCurve* cpu_curve_for(DType t, int32_t threads, DType* used) const;
  double curve_rate(const ThroughputCurve& c, double tokens) const;
  double cpu_rate_at_threads(DType t, double tokens) const;
  DType nearest_measured(DType t, bool gpu) const;
  double measured_decode_attention_s(double ref_cells) const;
  double measured_chunk_attention_s(double core_flops, int64_t n, int64_t c) const;

  HardwareProfile profile_;  // a copy: the model outlives whatever it was built from
  int32_t threads_;
  double cpu_stream_gbs_ = 0;  // cpu_stream_gbs(), computed once (every CPU matmul estimate reads it)
  uint64_t gemm_staging_bytes_ = 0;
};

// What one more dequantize + GEMM pair costs a prefill matmul whose F16 staging holds only part of the
// matrix (launches, and GEMMs on fewer rows filling the GPU less), per pair as gpu_matmul_kernel_s counts
// them (staging / (2 x cols) rows a pair). Fitted on the GPU host (bench/RESULTS.md, "GEMM staging").
constexpr double kGemmExtraChunkS = 10.6e-6;

// What a layer whose FFN slices run on the CPU and on the GPU at once costs beyond its transfers and its
// slices' own times (exec::HybridRunner, run_slices): the host waits for the device's queue to reach the
// normed rows, its CPU slices' matmuls are half-size calls that run slower per byte, and the combine and
// the next layer launch after the sum comes up. Fitted on the GPU host (bench/RESULTS.md, "FFN slices").
constexpr double kSplitLayerS = 0.2e-3;

// The CUDA backend's matvec kernels take steps of up to this many tokens (kernels/cuda/matvec.cu);
// larger steps dequantize to F16 and run cuBLAS GEMMs.
constexpr double kGpuMatvecMaxTokens = 8;
// Share of the profile's device copy bandwidth (read + write bytes of a D2D copy) that a weight-
// streaming kernel can reach at most: a ceiling for dtypes whose probe point is faster than that
// (e.g. F16 matvec), the "0.6-0.75 x copy bandwidth" of large-matrix decode kernels on Hopper.
constexpr double kGpuStreamShare = 0.75;
// Issue cost of one kernel node of a replayed CUDA graph when the profile does not measure it
// (gpu.graph_kernel_us): the gap between dependent kernels of a graph on Hopper is ~1-2 us; 1.5 fits an
// all-resident decode step of ~650 kernels on the GPU host (bench/RESULTS.md).
constexpr double kGraphKernelUsDefault = 1.5;

// Bits per weight of a dtype (block bytes * 8 / block elements).
double bits_per_weight(DType t);

}  // namespace ferry::plan
