// The process budget's split and its minimum-budget error (budget.h).
#include "runtime/budget.h"

#include <utility>

#include "exec/process_memory.h"
#include "plan/planner.h"

namespace ferry::runtime {

ProcessBudget split_budget(uint64_t budget, uint64_t context_bytes, std::string context_source,
                           uint64_t growth_reserve) {
  ProcessBudget b;
  b.budget = budget;
  b.context_bytes = context_bytes;
  b.context_source = std::move(context_source);
  b.growth_reserve = growth_reserve;
  b.arena = budget > b.outside_arena() ? budget - b.outside_arena() : 0;
  return b;
}

ProcessBudget modelled_budget(uint64_t budget, const plan::HardwareProfile& profile) {
  const uint64_t recorded = profile.gpu ? profile.gpu->context_bytes : 0;
  return split_budget(budget, recorded > 0 ? recorded : exec::kDefaultCudaContextBytes,
                      recorded > 0 ? "profile" : "default", exec::kCudaGrowthReserve);
}

Status budget_too_small(const ProcessBudget& b, uint64_t min_arena, const std::string& model, int32_t n_ctx,
                        int32_t n_batch) {
  const std::string need = plan::format_bytes(min_arena + b.outside_arena());
  const std::string outside = plan::format_bytes(b.outside_arena());
  const bool measured = b.context_source != "modelled" && b.context_source != "profile" && b.context_source != "default";
  const std::string ctx = plan::format_bytes(b.context_bytes) + (measured ? " measured (" : " modelled (") +
                          b.context_source + ")";
  const std::string reserve = plan::format_bytes(b.growth_reserve);
  const char* name = model.empty() ? "this model" : model.c_str();
  if (b.budget == 0)
    return make_error(ErrorCode::kInvalidArgument,
                      "the VRAM budget must be > 0: %s at context %d and batch %d needs at least %s (of which %s "
                      "for the CUDA context: %s + %s reserved for its growth)",
                      name, n_ctx, n_batch, need.c_str(), outside.c_str(), ctx.c_str(), reserve.c_str());
  return make_error(ErrorCode::kOutOfMemory,
                    "VRAM budget %s is too small: %s at context %d and batch %d needs at least %s (of which %s for "
                    "the CUDA context: %s + %s reserved for its growth; the rest holds the KV cache, activations, norms and "
                    "the ring or resident attention); raise --vram or lower -c",
                    plan::format_bytes(b.budget).c_str(), name, n_ctx, n_batch, need.c_str(), outside.c_str(),
                    ctx.c_str(), reserve.c_str());
}

}  // namespace ferry::runtime
