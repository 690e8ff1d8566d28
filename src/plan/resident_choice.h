// The shared resident set and the ring (internal to the planner). Each ring variant (slot size x depth)
// fixes the bytes every plan needs; the rest of the budget goes to matrices in a priority order (attention
// first, then predicted time saved per byte), greedily. Every distinct greedy set up to the budget is a
// candidate, scored by the scenario (TTFT of the prompt + gen_tokens decode steps); the fastest wins,
// subject to the robust rule (docs/PLANNER.md, "Choosing the set") and then grown into what it leaves of
// the budget. These are the phases Planner::plan_once runs in order.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "plan/placement_pricer.h"
#include "plan/planner.h"

namespace ferry::plan::detail {

// A ring configuration and the bytes it fixes.
struct RingVariant {
  uint64_t slot_bytes = 0;   // 0 = no ring
  int32_t slots = 0;         // K (0 when there is no ring)
  uint64_t fixed_bytes = 0;  // KV + scratch + workspace + vectors + ring
  uint64_t must_bytes = 0;   // attention matrices larger than a slot: resident in every plan
  bool feasible = false;     // fixed_bytes + must_bytes fit the budget
  uint64_t min_budget() const { return fixed_bytes + must_bytes; }
};

// The variants tried: ring slot sizes {none, the largest attention, the largest layer sub-layer} x
// depths (the user's K, else kRingDepths; an infeasible variant yields no candidate).
std::vector<RingVariant> ring_variants(const PlacementPricer& pricer);
// The variant with the smallest minimum budget (the first one on ties); variants must not be empty.
const RingVariant& smallest_variant(const std::vector<RingVariant>& variants);

// Priority of the sub-layers for residency in variant v (budget-independent): attention first (it runs
// next to its KV cache on the GPU in every strategy, so non-resident attention always streams), then by
// predicted time saved per byte; equally good candidates are spread over the layers.
std::vector<size_t> residency_order(const PlacementPricer& pricer, const RingVariant& v);

// One resident set of one ring variant, evaluated lazily: a tier's plan is computed when asked for.
struct Candidate {
  const RingVariant* variant = nullptr;
  uint64_t need = 0;                        // budget this set needs
  std::vector<bool> resident;
  std::map<int32_t, Plan> tiers;            // computed tiers by token count
  std::optional<Strategy> decode_strategy;  // tier 1's strategy when fixed (growing a chosen set)
  double ttft_ms = 0;
  double first_decode_extra_ms = 0;         // the first decode step's extra time (ring refill after prefill)
  double objective = 0;                     // ttft + first_decode_extra + gen_tokens * tier-1 step (ms)
};

// The candidate's plan of tier n (computed on first use).
const Plan& tier_plan(const PlacementPricer& pricer, Candidate& cand, int32_t n);
// Copy time (alone) of the weight copies a steady decode step makes under the candidate's tier-1 plan.
double decode_copy_ms(const PlacementPricer& pricer, Candidate& cand);

// Phase 1: for every feasible variant, the greedy resident set at every budget where it changes, up to
// the budget. A larger budget sees a superset of these, so its scenario is never predicted slower.
std::vector<Candidate> resident_candidates(const PlacementPricer& pricer, const std::vector<RingVariant>& variants);
// Phase 2: every candidate's scenario (Candidate::objective), on several threads.
void score_candidates(const PlacementPricer& pricer, std::vector<Candidate>& candidates);
// Phase 3: the fastest candidate (nullptr when there is none), and the fastest of each ring depth.
struct FastestCandidates {
  Candidate* overall = nullptr;
  std::map<int32_t, const Candidate*> by_depth;  // K -> its fastest candidate (K = 0: no ring)
};
FastestCandidates fastest_candidates(std::vector<Candidate>& candidates);
// Phase 4, the robust choice: within copy_window of the fastest scenario, each candidate is charged
// gen_tokens x copy_risk x its decode step's copy time; among those within score_tie of the cheapest,
// the shallowest ring is taken.
Candidate* robust_choice(const PlacementPricer& pricer, std::vector<Candidate>& candidates, Candidate* fastest);
// Phase 5: grows the chosen set into what it leaves of the budget: each further sub-layer (in the
// variant's priority order) that fits stays if the scenario is no slower and the decode step copies no
// more, with tier 1 kept on the chosen strategy. nullopt: nothing was added.
std::optional<Candidate> grow_into_budget(const PlacementPricer& pricer, const Candidate& chosen);

// The scenario of one candidate (sets ttft_ms, first_decode_extra_ms, objective).
void score_scenario(const PlacementPricer& pricer, Candidate& cand);

}  // namespace ferry::plan::detail
