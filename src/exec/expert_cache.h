// The hot-expert cache of a mixture-of-experts model under a VRAM budget (issue 29, item 5).
//
// A budget rarely holds every expert, so a decode step computes the experts the plan leaves off the
// device on the CPU. Real routers are skewed (a few experts of each layer take many of the picks, and a
// token's experts are often the previous token's), so a few device slots per layer that hold the experts
// picked most lately take a share of that CPU work. The cache is the executor's, not the planner's: the
// planner leaves its bytes free (HybridOptions::expert_cache_bytes), the runner counts the routing of
// every step the host sees, and between steps it copies the experts whose recent picks outweigh a slot's
// expert into that slot (ExpertCacheTable::choose). A step then runs each routed CPU-placed expert that a
// slot holds on the device, beside the CPU's share (hybrid_moe.cc).
//
// This header holds what the executor's device work does not need: the cache's geometry and the table
// of which expert sits in which slot, with its policy and statistics (unit-tested alone).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "model/model_spec.h"
#include "model/sublayer.h"

namespace ferry::exec {

// One expert's bytes per matrix (gate, up, down), as stacked in the file; the bias columns (gpt-oss),
// and the slots per MoE layer a byte budget buys. Every MoE layer gets the same number of slots, each
// layer's slots one block: the gate matrices of its slots side by side, then the up ones, the down ones,
// then (with expert biases) the bias columns, each region 256-aligned.
struct ExpertCacheGeometry {
  int32_t slots = 0;                 // per MoE layer (0: no cache)
  int32_t n_layers = 0;              // MoE layers
  uint64_t matrix_bytes[3] = {};     // one expert's gate, up, down
  uint64_t bias_floats[3] = {};      // one expert's gate, up, down bias (0 without expert biases)
  uint64_t region_offset[6] = {};    // inside a layer's block: gate, up, down matrices, then their biases
  uint64_t layer_bytes = 0;          // one layer's block
  uint64_t ids_bytes = 0;            // the device copy of one step's remapped routing (I32)
  uint64_t bytes() const { return layer_bytes * static_cast<uint64_t>(n_layers) + ids_bytes; }
};

// The cache that `budget` bytes buy for this model (slots == 0: none, also for dense models); n_batch:
// most tokens per step (the routing's size).
ExpertCacheGeometry expert_cache_geometry(const model::ModelSpec& spec, const std::vector<model::SubLayer>& subs,
                                          uint64_t budget, int32_t n_batch);

// A copy the cache asks for between two steps: expert `expert` of MoE layer `layer` into slot `slot`.
struct ExpertPromotion {
  int32_t layer = 0;  // index among the MoE layers
  int32_t slot = 0;
  int32_t expert = 0;
  int32_t evicted = -1;  // the expert the slot held (-1: it was empty)
};

struct ExpertCacheStats {
  int64_t lookups = 0;     // routed picks of experts the plan put on the CPU (in steps the host saw)
  int64_t hits = 0;        // of which a slot held the expert: computed on the device
  int64_t promotions = 0;  // experts copied into a slot
  uint64_t promoted_bytes = 0;
  double hit_rate() const { return lookups > 0 ? static_cast<double>(hits) / static_cast<double>(lookups) : 0.0; }
};

// Which expert each slot holds, and the routing counts that decide it. Scores are exponentially decayed
// pick counts (half-life `half_life_steps` steps), so the cache follows what the router picks now; a
// slot changes hands only when a candidate's score passes its expert's by kMinGain plus kRelGain of it,
// so experts of near equal popularity (uniform routing) seldom chase each other through the slots.
class ExpertCacheTable {
 public:
  static constexpr double kMinGain = 2.0;        // recent picks more than the expert it evicts ...
  static constexpr double kRelGain = 0.5;        // ... plus this share of that expert's score
  static constexpr double kHalfLifeSteps = 16.0;

  ExpertCacheTable() = default;
  ExpertCacheTable(int32_t n_layers, int32_t n_expert, int32_t slots, double half_life_steps = kHalfLifeSteps);

  int32_t slots() const { return slots_; }
  int32_t n_layers() const { return n_layers_; }
  // The slot holding expert e of MoE layer l, or -1.
  int32_t slot_of(int32_t l, int32_t e) const { return slot_of_[index(l, e)]; }
  int32_t expert_in(int32_t l, int32_t slot) const { return expert_in_[static_cast<size_t>(l) * slots_ + slot]; }
  double score(int32_t l, int32_t e) const { return score_[index(l, e)]; }

  // A routed pick of expert e in layer l that the plan computes on the CPU; returns the slot holding it
  // (-1: the CPU computes it) and counts it.
  int32_t pick(int32_t l, int32_t e);
  // The end of a step that picked: every score decays.
  void end_step();
  // Up to max_copies promotions, the largest score gains first (at most one per layer and step, so a
  // layer's slots turn over gradually); the table holds them at once. eligible(l, e): whether expert e
  // of layer l may be cached now (the plan computes it on the CPU).
  template <typename Eligible>
  std::vector<ExpertPromotion> choose(int32_t max_copies, const Eligible& eligible);
  // Empties every slot (the device memory went away); keeps the scores.
  void clear();

  ExpertCacheStats stats;

 private:
  size_t index(int32_t l, int32_t e) const { return static_cast<size_t>(l) * n_expert_ + e; }
  void place(const ExpertPromotion& p);

  int32_t n_layers_ = 0, n_expert_ = 0, slots_ = 0;
  double decay_ = 1.0;
  std::vector<double> score_;       // [layer][expert]
  std::vector<int32_t> slot_of_;    // [layer][expert]: slot or -1
  std::vector<int32_t> expert_in_;  // [layer][slot]: expert or -1
};

template <typename Eligible>
std::vector<ExpertPromotion> ExpertCacheTable::choose(int32_t max_copies, const Eligible& eligible) {
  struct Candidate {
    double gain;
    ExpertPromotion p;
  };
  std::vector<Candidate> best;
  for (int32_t l = 0; l < n_layers_ && slots_ > 0; ++l) {
    // The layer's strongest uncached eligible expert against its weakest slot.
    int32_t cand = -1;
    for (int32_t e = 0; e < n_expert_; ++e)
      if (slot_of(l, e) < 0 && score(l, e) > 0 && (cand < 0 || score(l, e) > score(l, cand)) && eligible(l, e)) cand = e;
    if (cand < 0) continue;
    int32_t victim = 0;
    double victim_score = -1;
    for (int32_t s = 0; s < slots_; ++s) {
      const int32_t held = expert_in(l, s);
      const double v = held < 0 ? -1.0 : (eligible(l, held) ? score(l, held) : -0.5);
      if (s == 0 || v < victim_score) {
        victim = s;
        victim_score = v;
      }
    }
    // An empty slot (or one whose expert the plan no longer runs on the CPU) takes any recent pick.
    const double gain = score(l, cand) - std::max(victim_score, 0.0);
    if (victim_score >= 0 && gain < kMinGain + kRelGain * victim_score) continue;
    best.push_back({gain, {l, victim, cand, expert_in(l, victim)}});
  }
  std::sort(best.begin(), best.end(), [](const Candidate& a, const Candidate& b) { return a.gain > b.gain; });
  std::vector<ExpertPromotion> out;
  for (const Candidate& c : best) {
    if (static_cast<int32_t>(out.size()) >= max_copies) break;
    place(c.p);
    out.push_back(c.p);
  }
  return out;
}

}  // namespace ferry::exec
