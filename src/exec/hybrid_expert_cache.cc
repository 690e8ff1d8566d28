// HybridRunner, the hot-expert cache (exec/expert_cache.h): device slots, the same number per MoE layer,
// that hold experts the plan leaves to the CPU, chosen by how often the router picked them lately.
//   - load: one arena block of every layer's slots (gate, up, down regions, then expert-bias columns), one
//     for a step's slot routing, pinned staging for the routing and for the promotions' bytes;
//   - a step: when a MoE layer's routing is on the host (its CPU groups need it there anyway), each pick of
//     a CPU-placed expert is counted, and the picks a slot holds are taken from the CPU's routing (set to
//     -1) and given to the device as slot ids (route_through_cache); the device runs them as one group of
//     experts 0..slots, summing into proj beside the CPU's share (run_cached_experts);
//   - between steps: scores decay, and the experts that gained most are copied into their layer's weakest
//     slot on the copy stream, through the pinned staging (repacked as the device's groups are); the next
//     step's compute waits for those copies before it reads a slot (promote_experts).
// The sums differ from the CPU path only in order (a cached expert's share is added on the device), as
// with any split of a layer's groups.
#include <algorithm>
#include <cstring>
#include <string>

#include "exec/hybrid_runner_impl.h"

namespace ferry::exec::detail {

using model::SubLayerKind;
using plan::Placement;

namespace {

// Bytes of promotions a step may copy (host memcpy into the staging, then the copy stream): bounds the
// host time a step spends on the cache (~1 ms at 8 MB); at least one expert a step.
constexpr uint64_t kPromoteBytesPerStep = 8ull << 20;

// One expert's bytes in the staging: its three matrices and bias columns, each 256-aligned.
uint64_t expert_stage_bytes(const ExpertCacheGeometry& g) {
  uint64_t b = 0;
  for (int k = 0; k < 3; ++k) b += align256(g.matrix_bytes[k]) + align256(g.bias_floats[k] * sizeof(float));
  return b;
}

int32_t promotions_per_step(const ExpertCacheGeometry& g) {
  return static_cast<int32_t>(std::max<uint64_t>(1, kPromoteBytesPerStep / expert_stage_bytes(g)));
}

}  // namespace

Status HybridRunnerImpl::make_expert_cache() {
  cache_geo_ = ExpertCacheGeometry{};
  if (options_.expert_cache_bytes == 0 || spec_.n_expert <= 0) return Status::ok();
  bool cpu_experts = false;
  for (const std::vector<Placement>& pl : placements_)
    for (size_t i = 0; i < sublayers_.size(); ++i)
      cpu_experts = cpu_experts || (sublayers_[i].kind == SubLayerKind::kExperts && pl[i] == Placement::kCpu);
  if (!cpu_experts) return Status::ok();  // every expert is on the device in every tier: nothing to cache
  const ExpertCacheGeometry g =
      exec::expert_cache_geometry(spec_, sublayers_, options_.expert_cache_bytes, options_.n_batch);
  if (g.slots == 0) return Status::ok();
  cache_geo_ = g;
  moe_index_.assign(spec_.n_layer, -1);
  int32_t ml = 0;
  for (const model::SubLayer& s : sublayers_)
    if (s.kind == SubLayerKind::kMoeRouter) moe_index_[s.layer] = ml++;
  cache_ = ExpertCacheTable(g.n_layers, spec_.n_expert, g.slots);
  arena_tags_.emplace_back("expert cache (" + std::to_string(g.slots) + " experts a layer)",
                           align256(g.layer_bytes * g.n_layers) + align256(g.ids_bytes));
  FERRY_ASSIGN_OR_RETURN(cache_filled_, device_->create_event(false));
  const uint64_t pairs = static_cast<uint64_t>(spec_.n_expert_used) * options_.n_batch;
  FERRY_ASSIGN_OR_RETURN(cache_ids_host_, take_pinned(sizeof(int32_t) * pairs * g.n_layers));
  FERRY_ASSIGN_OR_RETURN(cache_stage_, take_pinned(expert_stage_bytes(g) * promotions_per_step(g)));
  return restore_expert_cache();
}

Status HybridRunnerImpl::restore_expert_cache() {
  if (cache_geo_.slots == 0 || cache_block_) return Status::ok();
  const ExpertCacheGeometry& g = cache_geo_;
  // Not arena_buffers_: a vision encode hands these back and takes them again (as the resident blocks).
  FERRY_ASSIGN_OR_RETURN(cache_block_, device_->allocate(g.layer_bytes * g.n_layers, "expert-cache"));
  FERRY_ASSIGN_OR_RETURN(cache_ids_, device_->allocate(g.ids_bytes, "expert-cache routing"));
  // Each MoE layer's slots as a group of experts 0..slots: the layer's own strides (its types), the
  // device groups' layout, the bias columns where the model has them.
  cache_groups_.assign(g.n_layers, {});
  char* block = static_cast<char*>(cache_block_.ptr);
  for (size_t i = 0; i < sublayers_.size(); ++i) {
    if (sublayers_[i].kind != SubLayerKind::kExperts || sublayers_[i].expert_begin != 0) continue;
    const int32_t il = sublayers_[i].layer, ml = moe_index_[il];
    char* base = block + g.layer_bytes * static_cast<uint64_t>(ml);
    kernels::ExpertGroup c = model::expert_group_views(spec_, host_weights_.layers[il], 0, g.slots);
    TensorView* mats[3] = {&c.gate, &c.up, &c.down};
    TensorView* biases[3] = {&c.gate_bias, &c.up_bias, &c.down_bias};
    for (int k = 0; k < 3; ++k) {
      mats[k]->data = base + g.region_offset[k];
      mats[k]->where = device_where_;
      mats[k]->layout = slot_layouts_[i].layout[k];
      if (biases[k]->data == nullptr) continue;
      biases[k]->data = base + g.region_offset[3 + k];
      biases[k]->where = device_where_;
    }
    cache_groups_[ml] = c;
  }
  return Status::ok();
}

void HybridRunnerImpl::release_expert_cache() {
  if (!cache_block_) return;
  device_->release(&cache_block_);
  device_->release(&cache_ids_);
  cache_.clear();
  cache_fill_pending_ = false;
}

int32_t HybridRunnerImpl::route_through_cache(const Step& step, size_t router, size_t end, int32_t* cpu_picks) {
  const std::vector<Placement>& pl = placements_[step.tier];
  const int32_t il = sublayers_[router].layer;
  const size_t pairs = static_cast<size_t>(spec_.n_expert_used) * static_cast<size_t>(step.n);
  const int32_t* ids = host_scratch_.moe_ids.ptr<const int32_t>();
  masked_ids_.resize(pairs);
  expert_place_.assign(spec_.n_expert, Placement::kResident);
  for (size_t i = router + 1; i < end; ++i)
    for (int32_t e = sublayers_[i].expert_begin; e < sublayers_[i].expert_end; ++e) expert_place_[e] = pl[i];
  const bool cached = cache_geo_.slots > 0 && cache_block_;
  const int32_t ml = cached ? moe_index_[il] : -1;
  int32_t* slots = cached ? static_cast<int32_t*>(cache_ids_host_.ptr) + static_cast<size_t>(ml) * spec_.n_expert_used *
                                                                             static_cast<size_t>(options_.n_batch)
                          : nullptr;
  int32_t hits = 0, left = 0;
  for (size_t p = 0; p < pairs; ++p) {
    const int32_t e = ids[p];
    const bool on_cpu = e >= 0 && e < spec_.n_expert && expert_place_[e] == Placement::kCpu;
    const int32_t s = on_cpu && cached ? cache_.pick(ml, e) : -1;
    if (slots) slots[p] = s;
    masked_ids_[p] = on_cpu && s < 0 ? e : -1;
    hits += s >= 0;
    left += on_cpu && s < 0;
  }
  cache_picked_ = cache_picked_ || cached;
  *cpu_picks = left;
  return hits;
}

Status HybridRunnerImpl::run_cached_experts(Step& step, size_t router, bool accumulate) {
  const int32_t ml = moe_index_[sublayers_[router].layer];
  const size_t pairs = static_cast<size_t>(spec_.n_expert_used) * static_cast<size_t>(step.n);
  const int32_t* slots = static_cast<const int32_t*>(cache_ids_host_.ptr) +
                         static_cast<size_t>(ml) * spec_.n_expert_used * static_cast<size_t>(options_.n_batch);
  if (cache_fill_pending_) {  // the last promotions' copies land before any slot is read
    FERRY_RETURN_IF_ERROR(device_->wait(*compute_stream_, *cache_filled_));
    cache_fill_pending_ = false;
  }
  FERRY_RETURN_IF_ERROR(device_->copy_h2d(cache_ids_.ptr, slots, pairs * sizeof(int32_t), *compute_stream_));
  model::Scratch s = device_scratch_;
  s.moe_ids = TensorView::make(DType::I32, cache_ids_.ptr, spec_.n_expert_used, step.n, 1, 1, device_where_);
  const kernels::ExpertGroup g = cache_groups_[ml];
  const model::ModelSpec* spec = &spec_;
  const int32_t n = step.n;
  return on_device([=](kernels::Ops& ops) { model::forward_moe_group(ops, *spec, g, n, s, s.proj.rows(0, n), accumulate); });
}

Status HybridRunnerImpl::promote_experts(const Step& step) {
  if (!cache_picked_) return Status::ok();
  cache_picked_ = false;
  cache_.end_step();
  if (!cache_block_) return Status::ok();
  const std::vector<Placement>& pl = placements_[step.tier];
  // Per MoE layer and expert: whether this tier computes it on the CPU (only those may take a slot).
  std::vector<uint8_t> cpu(static_cast<size_t>(cache_geo_.n_layers) * spec_.n_expert, 0);
  for (size_t i = 0; i < sublayers_.size(); ++i) {
    if (sublayers_[i].kind != SubLayerKind::kExperts || pl[i] != Placement::kCpu) continue;
    const int32_t ml = moe_index_[sublayers_[i].layer];
    for (int32_t e = sublayers_[i].expert_begin; e < sublayers_[i].expert_end; ++e)
      cpu[static_cast<size_t>(ml) * spec_.n_expert + e] = 1;
  }
  // The staging is free once the last promotions' copies are done (long ago, as a rule: a step ran since).
  FERRY_RETURN_IF_ERROR(device_->sync(*cache_filled_));
  const std::vector<ExpertPromotion> chosen = cache_.choose(
      promotions_per_step(cache_geo_),
      [&](int32_t ml, int32_t e) { return cpu[static_cast<size_t>(ml) * spec_.n_expert + e] != 0; });
  if (chosen.empty()) return Status::ok();
  char* stage = static_cast<char*>(cache_stage_.ptr);
  std::vector<char> gathered;
  for (const ExpertPromotion& p : chosen) {
    int32_t il = 0;
    while (moe_index_[il] != p.layer) ++il;
    size_t first_group = 0;  // the layer's group of expert 0: its device layout
    while (sublayers_[first_group].kind != SubLayerKind::kExperts || sublayers_[first_group].layer != il ||
           sublayers_[first_group].expert_begin != 0)
      ++first_group;
    const kernels::ExpertGroup src = model::expert_group_views(spec_, host_weights_.layers[il], p.expert, p.expert + 1);
    const kernels::ExpertGroup& dst = cache_groups_[p.layer];
    const TensorView* from[3] = {&src.gate, &src.up, &src.down};
    const TensorView* to[3] = {&dst.gate, &dst.up, &dst.down};
    const TensorView* bias_from[3] = {&src.gate_bias, &src.up_bias, &src.down_bias};
    const TensorView* bias_to[3] = {&dst.gate_bias, &dst.up_bias, &dst.down_bias};
    for (int k = 0; k < 3; ++k) {
      const uint64_t bytes = from[k]->nbytes();
      write_rows(*from[k], 0, from[k]->nrows(), slot_layouts_[first_group].layout[k], stage, &gathered);
      char* at = static_cast<char*>(to[k]->data) + static_cast<uint64_t>(p.slot) * to[k]->nb[2];
      FERRY_RETURN_IF_ERROR(device_->copy_h2d(at, stage, bytes, *copy_stream_));
      stage += align256(bytes);
      cache_.stats.promoted_bytes += bytes;
      if (bias_from[k]->data == nullptr) continue;
      const uint64_t bias_bytes = static_cast<uint64_t>(bias_from[k]->ne[0]) * sizeof(float);
      std::memcpy(stage, bias_from[k]->data, bias_bytes);
      char* bat = static_cast<char*>(bias_to[k]->data) + static_cast<uint64_t>(p.slot) * bias_to[k]->nb[1];
      FERRY_RETURN_IF_ERROR(device_->copy_h2d(bat, stage, bias_bytes, *copy_stream_));
      stage += align256(bias_bytes);
    }
    ++cache_.stats.promotions;
  }
  FERRY_RETURN_IF_ERROR(device_->record(*cache_filled_, *copy_stream_));
  cache_fill_pending_ = true;
  return Status::ok();
}

}  // namespace ferry::exec::detail
