// CostModel: predicted times from a HardwareProfile. A matmul costs
//   overhead + max(flops / rate(dtype, tokens), bytes / bandwidth)
// where rate is the measured throughput curve (interpolated log-log in tokens and linearly in
// threads) and bandwidth the measured memory bandwidth: a roofline over measured curves, not
// datasheet peaks. Sub-layer times add the attention core, the small ops and their per-call costs.
// Copies: latency + bytes / link bandwidth (alone, or with CPU kernels running).
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

  bool has_gpu() const { return profile_.has_gpu(); }
  int32_t cpu_threads() const { return threads_; }
  const HardwareProfile& profile() const { return profile_; }

  // Throughput in GFLOP/s at `tokens` (fractional for expert shares), interpolated.
  double cpu_gflops(DType t, double tokens) const;
  double gpu_gflops(DType t, double tokens) const;
  double host_bw_gbs() const;  // host memory read bandwidth at cpu_threads()

  // One matmul y[rows, n] = W[rows, cols] x[cols, n], seconds.
  double cpu_matmul_s(DType t, int64_t rows, int64_t cols, double tokens) const;
  double gpu_matmul_s(DType t, int64_t rows, int64_t cols, double tokens) const;

  // A whole sub-layer at n new tokens and context c (for the head, n = rows of logits).
  double cpu_sublayer_s(const model::SubLayer& s, const model::ModelSpec& spec, int64_t n, int64_t c) const;
  double gpu_sublayer_s(const model::SubLayer& s, const model::ModelSpec& spec, int64_t n, int64_t c) const;

  // Weight copy host -> device from pinned memory (bandwidth only; the copy engine is a pipeline).
  double h2d_s(double bytes) const;
  // Activation hand-over (small, latency-bound): latency + bytes / bandwidth.
  double activation_h2d_s(double bytes) const;
  double activation_d2h_s(double bytes) const;
  // Contention factors (1 = none): the share of CPU kernel speed kept while copies run, and the share
  // of copy speed kept while CPU kernels run.
  double cpu_share_while_copying() const;
  double copy_share_while_cpu() const;
  // Combined host-memory rate H (GB/s) and the plain C + P sum, for the limits of DESIGN.md §4.
  double host_combined_gbs() const;
  double link_gbs() const;

  // Human-readable notes (e.g. "no CPU curve for Q5_1: scaled from Q5_0"), in a stable order.
  std::vector<std::string> notes_for(const std::vector<model::SubLayer>& subs) const;

 private:
  const ThroughputCurve* cpu_curve_for(DType t, int32_t threads, DType* used) const;
  double curve_rate(const ThroughputCurve& c, double tokens) const;
  double cpu_rate_at_threads(DType t, double tokens) const;
  DType nearest_measured(DType t, bool gpu) const;

  HardwareProfile profile_;  // a copy: the model outlives whatever it was built from
  int32_t threads_;
};

// Bits per weight of a dtype (block bytes * 8 / block elements).
double bits_per_weight(DType t);

}  // namespace ferry::plan
