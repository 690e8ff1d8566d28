// The three strategies of one token tier (internal to the planner), given the shared resident set and
// the ring: gpu-stream (every flexible sub-layer streamed), static (every flexible sub-layer on the
// CPU) and dynamic (the mix of the two that simulates fastest), each estimated by simulation; then the
// tier's choice among the feasible ones, with why the runner-up lost.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/placement_pricer.h"
#include "plan/planner.h"

namespace ferry::plan::detail {

// gpu-stream, static, dynamic (in that order) for steps of n tokens at context c. "Flexible": not
// resident, not attention (which streams when not resident), not the embedding (always on the CPU),
// and small enough for a ring slot of `slot_bytes` (0: no ring).
std::vector<StrategyEstimate> tier_strategies(const PlacementPricer& pricer, const std::vector<bool>& resident,
                                              uint64_t slot_bytes, int32_t ring_slots, int64_t n, int64_t c);

// Sets plan's strategy, predicted_ms and placement from its fastest feasible candidate (the simpler
// strategy on a near tie), and its runner-up with why it lost.
void choose_strategy(Plan& plan);

// "+12.3%"
std::string percent(double fraction);

}  // namespace ferry::plan::detail
