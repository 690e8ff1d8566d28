// PlacementPricer (internal to the planner): what a placement of the sub-layers costs on this machine —
// the device bytes it needs (matrices, vectors, KV cache, scratch) and its simulated step time
// (plan/simulate.h) at a token count and context. Sub-layer costs come from the CostModel, computed once
// per (tokens, context) and shared by the threads that evaluate candidates.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "model/model_spec.h"
#include "model/sublayer.h"
#include "plan/cost_model.h"
#include "plan/planner.h"
#include "plan/simulate.h"

namespace ferry::plan::detail {

constexpr uint64_t kDeviceAlign = 256;  // device allocations are 256-byte aligned
inline uint64_t align_up(uint64_t bytes) { return (bytes + kDeviceAlign - 1) / kDeviceAlign * kDeviceAlign; }

inline bool is_matrix(const model::WeightRef& w) { return w.rows > 1; }

// The matrices prefill GEMMs multiply: the largest one (elements, per expert for expert groups), the
// widest input, and whether any is quantized (only those are dequantized into the F16 staging).
struct GemmShapes {
  int64_t max_elems = 0, max_cols = 0;
  bool quantized = false;
};
GemmShapes gemm_shapes(const std::vector<model::SubLayer>& subs);
// Bytes of the F16 staging at PlannerOptions::gemm_staging_bytes `staging` (0 / auto: the whole matrix).
uint64_t gemm_staging_need(const GemmShapes& g, uint64_t staging);
// The cost model of a plan with options `o`: its threads and its GEMM staging (auto plans, and
// predictions asked with auto, are priced with the whole matrix, as the cost model's 0).
CostModel make_cost_model(const HardwareProfile& profile, const PlannerOptions& o);

// Van der Corput rank of i among count items: 0, count/2, count/4, 3count/4, ... Used to spread
// equally good candidates over the layers instead of taking layer 0 first, so that resident
// (or CPU) sub-layers interleave with streamed ones and the copy engine always has time to refill.
uint64_t spread_key(uint32_t i, uint32_t count);

// One sub-layer's times at one (tokens, context), seconds.
struct SubLayerCosts {
  double cpu_s = 0, gpu_s = 0, copy_s = 0;
  double gpu_graph_s = 0;  // on the GPU, replayed from a CUDA graph
};

class PlacementPricer {
 public:
  PlacementPricer(const CostModel& cost_model, const model::ModelSpec& spec, const std::vector<model::SubLayer>& subs,
                  const PlannerOptions& options);

  const model::ModelSpec& spec() const { return spec_; }
  const CostModel& cost_model() const { return cost_model_; }
  const PlannerOptions& options() const { return options_; }
  size_t size() const { return subs_.size(); }
  const model::SubLayer& sublayer(size_t i) const { return subs_[i]; }
  // Per sub-layer, 256-aligned: its matrices (what residency and streaming move) / its vectors.
  const std::vector<uint64_t>& matrix_bytes() const { return matrix_bytes_; }
  const std::vector<uint64_t>& vector_bytes() const { return vector_bytes_; }
  const std::vector<int32_t>& tiers() const { return tiers_; }

  bool is_embed(size_t i) const { return subs_[i].kind == model::SubLayerKind::kEmbed; }
  bool is_attn(size_t i) const { return subs_[i].kind == model::SubLayerKind::kAttention; }
  bool is_head(size_t i) const { return subs_[i].kind == model::SubLayerKind::kHead; }

  // Rows of logits a step of n tokens computes.
  int64_t out_rows(int64_t n) const { return std::min<int64_t>(n, std::max(1, options_.max_sequences)); }
  // The smallest tier >= n (the largest tier for larger n).
  int32_t tier_for(int32_t n) const;
  int32_t prompt_tokens() const { return std::max(1, std::min(options_.prompt_tokens, options_.context)); }
  int32_t eval_context() const {
    return options_.eval_context > 0 ? std::min(options_.eval_context, options_.context) : prompt_tokens();
  }

  // Costs of sub-layer i at (n, c), computed once per (n, c): planning simulates thousands of steps.
  const SubLayerCosts& costs(size_t i, int64_t n, int64_t c) const { return costs_row(n, c)[i]; }
  // Every sub-layer's costs at (n, c). Thread-safe: candidates are evaluated on several threads (a row,
  // once made, never moves or changes).
  const std::vector<SubLayerCosts>& costs_row(int64_t n, int64_t c) const;
  // Plan::sub_ms of a placement at tier n.
  std::vector<double> sub_ms(const std::vector<Placement>& placement, int32_t n) const;

  // Device bytes every plan with a GPU needs: the KV cache, the scratch of the largest tier, all vectors.
  uint64_t kv_bytes() const;
  uint64_t scratch_bytes() const;
  uint64_t vectors_total() const;

  // Which sub-layers the executor replays from CUDA graphs (exec::HybridRunner): in steps of up to
  // kGpuMatvecMaxTokens tokens, the whole step when everything after the embedding is resident, else
  // every run of >= 2 consecutive resident sub-layers other than the head.
  std::vector<char> graphed(const std::vector<Placement>& placement, int64_t n) const;
  // The simulation items of one step of n tokens at context c under `placement`.
  std::vector<SimItem> items(const std::vector<Placement>& placement, int64_t n, int64_t c) const;
  SimParams sim_params(int32_t ring_slots) const;
  // Steady-state step time (s): three identical steps back to back, the last one measured.
  double step_s(const std::vector<Placement>& placement, int64_t n, int64_t c, int32_t ring_slots) const;
  // A strategy's estimate for `placement` (feasible; the caller says otherwise).
  StrategyEstimate estimate(Strategy strategy, std::vector<Placement> placement, int64_t n, int64_t c,
                            int32_t ring_slots) const;

 private:
  const CostModel& cost_model_;
  const model::ModelSpec& spec_;
  const std::vector<model::SubLayer>& subs_;
  const PlannerOptions& options_;
  std::vector<uint64_t> matrix_bytes_, vector_bytes_;
  std::vector<int32_t> tiers_;
  mutable std::mutex costs_mutex_;
  mutable std::map<std::pair<int64_t, int64_t>, std::vector<SubLayerCosts>> costs_by_shape_;  // (n, c) -> row
};

}  // namespace ferry::plan::detail
