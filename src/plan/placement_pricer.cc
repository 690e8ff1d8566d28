// PlacementPricer: device bytes and simulated step times of placements (see the header).
#include "plan/placement_pricer.h"

#include <algorithm>

namespace ferry::plan::detail {

using model::SubLayer;
using model::SubLayerKind;

GemmShapes gemm_shapes(const std::vector<SubLayer>& subs) {
  GemmShapes g;
  for (const auto& s : subs)
    for (const auto& w : s.weights)
      // Embed is a gather; the head is a mat-vec per sequence (max_sequences rows): neither GEMMs.
      if (is_matrix(w) && s.kind != SubLayerKind::kEmbed && s.kind != SubLayerKind::kHead) {
        const int64_t rows =
            s.kind == SubLayerKind::kExperts ? w.rows / std::max<int32_t>(1, s.expert_end - s.expert_begin) : w.rows;
        g.max_elems = std::max(g.max_elems, rows * w.cols);
        g.max_cols = std::max(g.max_cols, w.cols);
        g.quantized |= traits(w.dtype).quantized;
      }
  return g;
}

CostModel make_cost_model(const HardwareProfile& profile, const PlannerOptions& o) {
  CostModel cm(profile, o.cpu_threads);
  cm.set_gemm_staging_bytes(o.gemm_staging_bytes == PlannerOptions::kGemmStagingAuto ? 0 : o.gemm_staging_bytes);
  return cm;
}

uint64_t gemm_staging_need(const GemmShapes& g, uint64_t staging) {
  if (!g.quantized) return 0;
  const uint64_t whole = 2ull * static_cast<uint64_t>(g.max_elems);
  if (staging == 0 || staging == PlannerOptions::kGemmStagingAuto) return whole;
  return std::min<uint64_t>(whole, std::max<uint64_t>(staging, 256ull * g.max_cols));
}

uint64_t spread_key(uint32_t i, uint32_t count) {
  uint32_t bits = 0;
  while ((1u << bits) < count) ++bits;
  uint64_t r = 0;
  for (uint32_t b = 0; b < bits; ++b)
    if (i & (1u << b)) r |= 1ull << (bits - 1 - b);
  return r;
}

PlacementPricer::PlacementPricer(const CostModel& cost_model, const model::ModelSpec& spec,
                                 const std::vector<SubLayer>& subs, const PlannerOptions& options)
    : cost_model_(cost_model), spec_(spec), subs_(subs), options_(options) {
  const size_t n = subs.size();
  matrix_bytes_.assign(n, 0);
  vector_bytes_.assign(n, 0);
  for (size_t i = 0; i < n; ++i)
    for (const auto& w : subs[i].weights) (is_matrix(w) ? matrix_bytes_[i] : vector_bytes_[i]) += align_up(w.bytes);
  tiers_ = token_tiers(options.batch);
}

int32_t PlacementPricer::tier_for(int32_t n) const {
  for (int32_t t : tiers_)
    if (t >= n) return t;
  return tiers_.back();
}

const std::vector<SubLayerCosts>& PlacementPricer::costs_row(int64_t n, int64_t c) const {
  std::lock_guard<std::mutex> lock(costs_mutex_);
  std::vector<SubLayerCosts>& row = costs_by_shape_[{n, c}];
  if (row.empty()) {
    row.resize(subs_.size());
    for (size_t j = 0; j < subs_.size(); ++j) {
      const int64_t rows = is_head(j) ? out_rows(n) : n;
      SubLayerCosts& k = row[j];
      k.cpu_s = cost_model_.cpu_sublayer_s(subs_[j], spec_, rows, c);
      if (cost_model_.has_gpu()) {
        k.gpu_s = cost_model_.gpu_sublayer_s(subs_[j], spec_, rows, c);
        k.gpu_graph_s = cost_model_.gpu_sublayer_s(subs_[j], spec_, rows, c, /*graph=*/true);
        k.copy_s = cost_model_.h2d_s(static_cast<double>(matrix_bytes_[j]));
      }
    }
  }
  return row;
}

std::vector<double> PlacementPricer::sub_ms(const std::vector<Placement>& placement, int32_t n) const {
  std::vector<double> ms(subs_.size(), 0.0);
  for (size_t i = 0; i < subs_.size() && i < placement.size(); ++i) {
    const SubLayerCosts& k = costs(i, n, eval_context());
    ms[i] = (placement[i] == Placement::kCpu ? k.cpu_s : k.gpu_s) * 1e3;
  }
  return ms;
}

uint64_t PlacementPricer::kv_bytes() const {
  uint64_t kv = 0;
  for (const auto& s : subs_) kv += s.kv_bytes(spec_, options_.context);
  return align_up(kv);
}

uint64_t PlacementPricer::scratch_bytes() const {
  const int64_t n = tiers_.back();
  const int64_t d = spec_.n_embd, qd = spec_.q_dim(), kvd = spec_.kv_dim();
  const int64_t ff = spec_.n_expert > 0 ? static_cast<int64_t>(spec_.n_ff_expert) * spec_.n_expert_used : spec_.n_ff;
  // F32 activations of one step: residual, normed input, q, k, v, attention out, gate, up (GLU in
  // place), plus logits for the rows that need them.
  uint64_t b = 4ull * n * (2 * d + 2 * qd + 2 * kvd + 2 * ff) + 4ull * out_rows(n) * spec_.n_vocab;
  // GEMMs of quantized weights: a dequantized F16 copy of the largest matrix; activations in F16.
  const GemmShapes g = gemm_shapes(subs_);
  b += gemm_staging_need(g, options_.gemm_staging_bytes);
  b += 2ull * g.max_cols * n;
  return align_up(b);
}

uint64_t PlacementPricer::vectors_total() const {
  uint64_t v = 0;
  for (uint64_t b : vector_bytes_) v += b;
  return v;
}

std::vector<char> PlacementPricer::graphed(const std::vector<Placement>& pl, int64_t n) const {
  std::vector<char> g(subs_.size(), 0);
  if (static_cast<double>(n) > kGpuMatvecMaxTokens) return g;
  bool all = true;
  for (size_t i = 0; i < subs_.size(); ++i)
    if (!is_embed(i) && pl[i] != Placement::kResident) all = false;
  if (all) {
    for (size_t i = 0; i < subs_.size(); ++i) g[i] = !is_embed(i);
    return g;
  }
  const std::vector<uint8_t> split = split_layers(subs_, pl);
  auto segment = [&](size_t i) { return pl[i] == Placement::kResident && !is_head(i) && !is_embed(i) && !split[i]; };
  for (size_t i = 0; i < subs_.size();) {
    size_t e = i;
    while (e < subs_.size() && segment(e)) ++e;
    if (e - i >= 2)
      for (size_t k = i; k < e; ++k) g[k] = 1;
    i = e > i ? e : i + 1;
  }
  return g;
}

std::vector<SimItem> PlacementPricer::items(const std::vector<Placement>& pl, int64_t n, int64_t c) const {
  std::vector<SimItem> out;
  out.reserve(subs_.size());
  bool prev_gpu = false;  // a step starts on the host (token ids)
  const double act = 4.0 * spec_.n_embd * static_cast<double>(n);
  const std::vector<char> graph = graphed(pl, n);
  const std::vector<uint8_t> split = split_layers(subs_, pl);
  bool group_xfer = false;  // the current split group's CPU lane has its hand-overs
  const std::vector<SubLayerCosts>& row = costs_row(n, c);
  for (size_t i = 0; i < subs_.size(); ++i) {
    const SubLayerCosts& k = row[i];
    SimItem it;
    it.id = static_cast<int32_t>(i);
    it.on_gpu = pl[i] != Placement::kCpu;
    it.streamed = pl[i] == Placement::kStreamed;
    if (split[i]) {
      // Slices run at once (SimItem::group); the residual stays on the device. The CPU lane pays the
      // normed rows down and its partial sum up.
      if (subs_[i].slice == 0) group_xfer = false;
      it.group = subs_[i].layer;
      if (!it.on_gpu && !group_xfer) {
        it.xfer_s = cost_model_.activation_d2h_s(act) + cost_model_.activation_h2d_s(act) + options_.split_layer_s;
        group_xfer = true;
      }
      if (!prev_gpu && subs_[i].slice == 0) it.xfer_s += cost_model_.activation_h2d_s(act);
      it.compute_s = it.on_gpu ? k.gpu_s : k.cpu_s;
      it.copy_s = it.streamed ? k.copy_s : 0;
      prev_gpu = true;
      out.push_back(it);
      continue;
    }
    if (it.on_gpu != prev_gpu)
      it.xfer_s = it.on_gpu ? cost_model_.activation_h2d_s(act) : cost_model_.activation_d2h_s(act);
    it.compute_s = it.on_gpu ? (graph[i] ? k.gpu_graph_s : k.gpu_s) : k.cpu_s;
    if (is_head(i) && it.on_gpu)  // logits back to the host for sampling
      it.compute_s += cost_model_.activation_d2h_s(4.0 * spec_.n_vocab * static_cast<double>(out_rows(n)));
    it.copy_s = it.streamed ? k.copy_s : 0;
    prev_gpu = it.on_gpu;
    out.push_back(it);
  }
  return out;
}

SimParams PlacementPricer::sim_params(int32_t ring_slots) const {
  SimParams p;
  p.ring_slots = std::max(1, ring_slots);
  p.cpu_share_while_copying = cost_model_.cpu_share_while_copying();
  p.copy_share_while_cpu = cost_model_.copy_share_while_cpu();
  return p;
}

double PlacementPricer::step_s(const std::vector<Placement>& pl, int64_t n, int64_t c, int32_t ring_slots) const {
  const std::vector<SimItem> it = items(pl, n, c);
  const SimResult r = simulate({it, it, it}, sim_params(ring_slots));
  return r.step_end[2] - r.step_end[1];
}

StrategyEstimate PlacementPricer::estimate(Strategy strategy, std::vector<Placement> pl, int64_t n, int64_t c,
                                           int32_t ring_slots) const {
  StrategyEstimate e;
  e.strategy = strategy;
  e.feasible = true;
  const std::vector<SimItem> steady = items(pl, n, c);
  const SimResult r = simulate({steady, steady, steady}, sim_params(ring_slots));
  e.step_ms = (r.step_end[2] - r.step_end[1]) * 1e3;
  // Copies actually made in the steady state: streamed sub-layers still in their slot from the
  // previous step are not copied again.
  e.copy_ms = r.step_copy_s[2] * 1e3;
  for (const SimItem& it : steady) {
    (it.on_gpu ? e.gpu_ms : e.cpu_ms) += it.compute_s * 1e3;
    e.xfer_ms += it.xfer_s * 1e3;
  }
  for (size_t i = 0; i < pl.size(); ++i) {
    if (matrix_bytes_[i] == 0 || is_embed(i)) continue;
    e.n_cpu += pl[i] == Placement::kCpu;
    e.n_streamed += pl[i] == Placement::kStreamed;
  }
  e.placement = std::move(pl);
  return e;
}

}  // namespace ferry::plan::detail
