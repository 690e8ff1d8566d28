// gpu_support: `--device cuda` without --vram = the whole model on the GPU (see gpu_support.h).
#include "gpu_support.h"

#include <cstdio>
#include <string>

#include "engine/step_runner.h"
#include "exec/device.h"
#include "format/gguf.h"
#include "model/sublayer.h"
#include "plan/planner.h"
#include "profile_support.h"

namespace ferry::cli {

namespace {

// Left free below the arena for whatever allocates outside it later (cuBLAS handles, graphs, the
// driver's own growth); make_cuda_device(0, 0) already keeps the CUDA context's headroom.
constexpr uint64_t kMargin = 256ull << 20;

std::string fmt(uint64_t b) { return plan::format_bytes(b); }

// engine::StepRunner over an exec::HybridRunner (same fields in both input structs).
class GpuStepRunner final : public engine::StepRunner {
 public:
  explicit GpuStepRunner(std::unique_ptr<exec::HybridRunner> r) : r_(std::move(r)) {}
  const char* name() const override { return "gpu-resident"; }
  void set_debug_hook(model::DebugHook hook) override { r_->set_debug_hook(std::move(hook)); }
  Status run(const engine::StepInput& in, float* logits) override {
    exec::StepIo io;
    io.n_tokens = in.n_tokens;
    io.tokens = in.tokens;
    io.pos = in.pos;
    io.seq = in.seq;
    io.cell = in.cell;
    io.cell_pos = in.cell_pos;
    io.cell_seq = in.cell_seq;
    io.n_cells_scan = in.n_cells_scan;
    io.out_rows = in.out_rows;
    io.n_out = in.n_out;
    return r_->run(io, logits);
  }

 private:
  std::unique_ptr<exec::HybridRunner> r_;
};

// The arena a fresh CUDA device would get (all free memory but the context's headroom), less kMargin.
Expected<uint64_t> free_budget() {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<exec::Device> dev, exec::make_cuda_device(0, 0));
  FERRY_ASSIGN_OR_RETURN(exec::MemoryInfo mi, dev->memory_info());
  if (mi.arena_capacity <= 2 * kMargin)
    return make_error(ErrorCode::kOutOfMemory, "--device cuda: only %s of GPU memory is free",
                      fmt(mi.arena_capacity).c_str());
  return mi.arena_capacity - kMargin;
}

}  // namespace

Status install_device_runner(const HybridArgs& a, engine::EngineOptions* opt,
                             const std::shared_ptr<HybridState>& state) {
  if (opt->device != "cuda" || !a.vram_text.empty()) return install_hybrid(a, opt, state);
  std::string why;
  if (!exec::cuda_available(&why))
    return make_error(ErrorCode::kDevice, "--device cuda: %s; use --device cpu", why.c_str());
  FERRY_ASSIGN_OR_RETURN(uint64_t budget, free_budget());
  std::string origin;
  auto prof = load_or_measure_profile(a.profile_path, &origin);
  if (!prof) return prof.status();
  if (!prof->has_gpu())
    return make_error(ErrorCode::kInvalidArgument,
                      "the profile (%s) has no GPU: --device cuda needs a profile measured with a GPU (or --profile FILE)",
                      origin.c_str());
  state->active = true;
  state->budget = budget;
  state->device = "cuda";
  state->profile_origin = origin;
  const int32_t threads = opt->n_threads;
  const int32_t n_seq = opt->n_seq_max;
  const int32_t ring = a.ring_slots;
  const bool measure = a.explain;
  plan::HardwareProfile profile = std::move(*prof);
  opt->runner_factory = [=](const model::ModelSpec& spec, const model::ModelWeights& w, const gguf::ModelFile& file,
                            int32_t n_ctx, int32_t n_batch) -> Expected<std::unique_ptr<engine::StepRunner>> {
    FERRY_ASSIGN_OR_RETURN(std::vector<model::SubLayer> subs, model::build_sublayers(spec, file));
    exec::HybridSetup s;
    s.vram_budget = budget;
    s.device = "cuda";
    s.profile = profile;
    s.ring_slots = ring;
    s.options.n_cells = n_ctx;
    s.options.n_batch = n_batch;
    s.options.cpu_threads = threads;
    s.options.max_sequences = n_seq;
    s.options.measure = measure;
    // Every sub-layer on the device: with room for all weights the planner's resident set holds every
    // matrix it gains from, and gpu-stream runs any other one on the GPU too (never the CPU).
    s.options.force_strategy = plan::Strategy::kGpuStream;
    auto r = exec::make_hybrid_runner(spec, w, subs, s);
    if (!r) {
      if (r.status().code() == ErrorCode::kOutOfMemory)
        return make_error(ErrorCode::kOutOfMemory,
                          "the model does not fit in the GPU's free memory (%s usable): %s; use --vram SIZE to "
                          "run it with the hybrid CPU/GPU executor, or a smaller context (-c)",
                          fmt(budget).c_str(), r.status().message().c_str());
      return r.status();
    }
    // Whole model = every matrix resident: weights_total (all matrices but the embedding) + vectors +
    // KV + scratch + workspace must fit the budget.
    const plan::PlanSet& ps = (*r)->plan();
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
    state->runner = r->get();
    return std::unique_ptr<engine::StepRunner>(new GpuStepRunner(std::move(*r)));
  };
  return Status::ok();
}

}  // namespace ferry::cli
