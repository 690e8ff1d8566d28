// The hot-expert cache's geometry and its table (expert_cache.h).
#include "exec/expert_cache.h"

#include <algorithm>
#include <cmath>

#include "base/status.h"

namespace ferry::exec {

namespace {

uint64_t align256(uint64_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

ExpertCacheGeometry expert_cache_geometry(const model::ModelSpec& spec, const std::vector<model::SubLayer>& subs,
                                          uint64_t budget, int32_t n_batch) {
  ExpertCacheGeometry g;
  if (spec.n_expert <= 0 || budget == 0) return g;
  for (const model::SubLayer& s : subs) {
    if (s.kind == model::SubLayerKind::kMoeRouter) ++g.n_layers;
    if (s.kind != model::SubLayerKind::kExperts || s.weights.size() != 3) continue;
    const uint64_t n = static_cast<uint64_t>(std::max(1, s.expert_end - s.expert_begin));
    for (int k = 0; k < 3; ++k) g.matrix_bytes[k] = std::max(g.matrix_bytes[k], s.weights[k].bytes / n);
  }
  if (g.n_layers == 0 || g.matrix_bytes[0] == 0) return ExpertCacheGeometry{};
  if (spec.expert_biases) {
    g.bias_floats[0] = g.bias_floats[1] = static_cast<uint64_t>(spec.n_ff_expert);
    g.bias_floats[2] = static_cast<uint64_t>(spec.n_embd);
  }
  g.ids_bytes = align256(sizeof(int32_t) * static_cast<uint64_t>(spec.n_expert_used) * std::max(1, n_batch));
  auto layer_bytes = [&](int32_t slots, uint64_t* offsets) {
    uint64_t at = 0;
    uint64_t per[6];
    for (int k = 0; k < 3; ++k) {
      per[k] = g.matrix_bytes[k];
      per[3 + k] = g.bias_floats[k] * sizeof(float);
    }
    for (int k = 0; k < 6; ++k) {
      if (offsets) offsets[k] = at;
      at += align256(per[k] * static_cast<uint64_t>(slots));
    }
    return at;
  };
  if (budget <= g.ids_bytes) return ExpertCacheGeometry{};
  const uint64_t per_slot = layer_bytes(1, nullptr) * static_cast<uint64_t>(g.n_layers);
  int32_t slots = static_cast<int32_t>(std::min<uint64_t>((budget - g.ids_bytes) / per_slot, spec.n_expert));
  while (slots > 0 && layer_bytes(slots, nullptr) * g.n_layers + g.ids_bytes > budget) --slots;
  if (slots <= 0) return ExpertCacheGeometry{};
  g.slots = slots;
  g.layer_bytes = layer_bytes(slots, g.region_offset);
  return g;
}

ExpertCacheTable::ExpertCacheTable(int32_t n_layers, int32_t n_expert, int32_t slots, double half_life_steps)
    : n_layers_(n_layers), n_expert_(n_expert), slots_(slots),
      decay_(half_life_steps > 0 ? std::pow(0.5, 1.0 / half_life_steps) : 0.0),
      score_(static_cast<size_t>(n_layers) * n_expert, 0.0),
      slot_of_(static_cast<size_t>(n_layers) * n_expert, -1),
      expert_in_(static_cast<size_t>(n_layers) * slots, -1) {}

int32_t ExpertCacheTable::pick(int32_t l, int32_t e) {
  FERRY_ASSERT(l >= 0 && l < n_layers_ && e >= 0 && e < n_expert_);
  score_[index(l, e)] += 1.0;
  const int32_t s = slot_of(l, e);
  ++stats.lookups;
  stats.hits += s >= 0;
  return s;
}

void ExpertCacheTable::end_step() {
  for (double& s : score_) s *= decay_;
}

void ExpertCacheTable::place(const ExpertPromotion& p) {
  const size_t at = static_cast<size_t>(p.layer) * slots_ + p.slot;
  if (expert_in_[at] >= 0) slot_of_[index(p.layer, expert_in_[at])] = -1;
  expert_in_[at] = p.expert;
  slot_of_[index(p.layer, p.expert)] = p.slot;
}

void ExpertCacheTable::clear() {
  std::fill(slot_of_.begin(), slot_of_.end(), -1);
  std::fill(expert_in_.begin(), expert_in_.end(), -1);
}

}  // namespace ferry::exec
