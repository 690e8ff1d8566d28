// gpu_support: `--device cuda` without --vram = the whole model on the GPU (see gpu_support.h).
#include "gpu_support.h"

#include <cstdio>
#include <string>

#include "exec/device.h"
#include "plan/planner.h"

namespace ferry::cli {

namespace {

// Left free below the arena for whatever allocates outside it later (cuBLAS handles, graphs, the
// driver's own growth); make_cuda_device(0, 0) already keeps the CUDA context's headroom.
constexpr uint64_t kMargin = 256ull << 20;

std::string fmt(uint64_t b) { return plan::format_bytes(b); }

// The arena a fresh CUDA device would get (all free memory but the context's headroom), less kMargin.
Expected<uint64_t> free_budget() {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<exec::Device> dev, exec::make_cuda_device(0, 0));
  FERRY_ASSIGN_OR_RETURN(exec::MemoryInfo mi, dev->memory_info());
  if (mi.arena_capacity <= 2 * kMargin)
    return make_error(ErrorCode::kOutOfMemory, "--device cuda: only %s of GPU memory is free",
                      fmt(mi.arena_capacity).c_str());
  return mi.arena_capacity - kMargin;
}

// The runner must hold the whole model: a creation failure for lack of memory, or a plan that leaves
// weights, KV cache or scratch outside the budget, becomes an error suggesting --vram.
Status check_whole_model(uint64_t budget, const Status& created, const exec::HybridRunner* r) {
  if (!r) {
    if (created.code() == ErrorCode::kOutOfMemory)
      return make_error(ErrorCode::kOutOfMemory,
                        "the model does not fit in the GPU's free memory (%s usable): %s; use --vram SIZE to "
                        "run it with the hybrid CPU/GPU executor, or a smaller context (-c)",
                        fmt(budget).c_str(), created.message().c_str());
    return created;
  }
  // Whole model = every matrix resident: weights_total (all matrices but the embedding) + vectors +
  // KV + scratch + workspace must fit the budget.
  const plan::PlanSet& ps = r->plan();
  const uint64_t vectors = ps.arena.weights - ps.weights_resident;
  const uint64_t need = ps.weights_total + vectors + ps.arena.kv + ps.arena.scratch + ps.arena.workspace;
  if (need > budget)
    return make_error(ErrorCode::kOutOfMemory,
                      "the model does not fit in the GPU's free memory: it needs %s (weights %s, KV cache %s, "
                      "scratch %s) but %s is usable; use --vram SIZE to run it with the hybrid CPU/GPU "
                      "executor, or a smaller context (-c)",
                      fmt(need).c_str(), fmt(ps.weights_total + vectors).c_str(), fmt(ps.arena.kv).c_str(),
                      fmt(ps.arena.scratch + ps.arena.workspace).c_str(), fmt(budget).c_str());
  if (ps.weights_resident < ps.weights_total)
    std::fprintf(stderr, "note: %s of %s weights resident, the rest streams to the GPU each step (planner's choice)\n",
                 fmt(ps.weights_resident).c_str(), fmt(ps.weights_total).c_str());
  return Status::ok();
}

}  // namespace

Status install_device_runner(const HybridArgs& a, engine::EngineOptions* opt,
                             const std::shared_ptr<HybridState>& state) {
  // n_batch 0 = the caller's default: 512, or 1024 with the whole model on the GPU (the F16 prefill
  // GEMMs of a llama3-8b run ~12 % faster at 1024 tokens a chunk on an H200: 19.1k -> 21.4k tok/s at a
  // 4096-token prompt; the hybrid executor's tiers stop at 512, where activations are budget).
  const bool auto_batch = opt->n_batch <= 0;
  if (auto_batch) opt->n_batch = 512;
  if (opt->device != "cuda" || !a.vram_text.empty()) return install_hybrid(a, opt, state);
  if (auto_batch) opt->n_batch = 1024;
  std::string why;
  if (!exec::cuda_available(&why))
    return make_error(ErrorCode::kDevice, "--device cuda: %s; use --device cpu", why.c_str());
  RunnerConfig cfg;
  FERRY_ASSIGN_OR_RETURN(cfg.budget, free_budget());
  FERRY_ASSIGN_OR_RETURN(cfg.profile, load_gpu_profile(a.profile_path, "--device cuda", &cfg.profile_origin));
  cfg.device = "cuda";
  cfg.name = "gpu-resident";
  // Every sub-layer on the device: with room for all weights the planner's resident set holds every
  // matrix it gains from, and gpu-stream runs any other one on the GPU too (never the CPU).
  cfg.force_strategy = plan::Strategy::kGpuStream;
  const uint64_t budget = cfg.budget;
  cfg.check = [budget](const Status& created, const exec::HybridRunner* r) {
    return check_whole_model(budget, created, r);
  };
  install_runner_factory(a, opt, state, std::move(cfg));
  return Status::ok();
}

}  // namespace ferry::cli
