// A VRAM budget is the whole process's device memory. What the process holds outside the executor's
// arena — the CUDA context with the cuBLAS handle and streams (measured at open, or modelled on the
// emulated device), and exec::kCudaGrowthReserve for what the driver allocates later — comes off the
// budget first; the planner and the arena get the rest. The smallest budget that works is the planner's
// minimum arena plus that outside part, and the error for a smaller one says so.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "plan/profile.h"

namespace ferry::runtime {

struct ProcessBudget {
  uint64_t budget = 0;          // device memory the whole process may hold
  uint64_t context_bytes = 0;   // the CUDA context, cuBLAS handle and streams
  // How context_bytes was found: a reading of the driver ("nvml-process", "nvml-device-delta",
  // "cuda-free-delta"), "modelled" (the driver could not say), "profile" (the emulated device, from
  // the profile's gpu.context_bytes) or "default" (exec::kDefaultCudaContextBytes).
  std::string context_source;
  uint64_t growth_reserve = 0;  // left free for the driver's later allocations
  uint64_t arena = 0;           // what the planner and the arena get: budget - context - reserve, or 0

  uint64_t outside_arena() const { return context_bytes + growth_reserve; }
};

// Splits `budget` as above (arena 0 when the budget does not cover the outside part).
ProcessBudget split_budget(uint64_t budget, uint64_t context_bytes, std::string context_source,
                           uint64_t growth_reserve);

// The split a GPU described by `profile` would make, without one at hand (the emulated device, `ferry
// plan`): the profile's gpu.context_bytes when it records one ("profile"), else
// exec::kDefaultCudaContextBytes ("default"); exec::kCudaGrowthReserve.
ProcessBudget modelled_budget(uint64_t budget, const plan::HardwareProfile& profile);

// The error for a budget whose arena is below `min_arena` (the planner's minimum for the model, context
// and batch): "needs at least X (of which Y CUDA context ...)". A budget of 0 is bad usage
// (kInvalidArgument: "must be > 0"), any other kOutOfMemory.
Status budget_too_small(const ProcessBudget& b, uint64_t min_arena, const std::string& model, int32_t n_ctx,
                        int32_t n_batch);

}  // namespace ferry::runtime
