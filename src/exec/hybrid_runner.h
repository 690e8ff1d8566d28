// HybridRunner: the pipelined-sharding executor (docs/EXECUTOR.md). Runs a PlanSet's per-tier plans
// under a hard VRAM budget: every device byte comes from the Device's budget-capped arena; resident
// weights (and every norm / bias vector) are uploaded once and shared by all tiers; streamed sub-layers'
// weights sit in pinned host memory and flow through a WeightRing on the copy stream, K slots ahead of
// the compute stream; CPU sub-layers run on CpuOps over host activations; the residual stream crosses
// through pinned buffers; the KV cache lives on the device (attention always runs there when a GPU is
// planned) and is never re-uploaded. Each step picks the tier of its token count. The implementation is
// split by responsibility: hybrid_runner_impl.h lists its files.
//
// This class knows nothing of the Engine (exec sits below engine): StepIo mirrors engine::StepInput,
// and runtime::open wraps a HybridRunner into an engine::StepRunner (runtime/hybrid_step_runner.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "exec/device.h"
#include "exec/expert_cache.h"
#include "exec/timeline.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_ops.h"
#include "model/forward.h"
#include "model/model_spec.h"
#include "model/sublayer.h"
#include "model/vision/vision_input.h"
#include "model/vision/vision_model.h"
#include "model/weights.h"
#include "plan/planner.h"
#include "plan/profile.h"

namespace ferry::exec {

// One validated step, all arrays on the host (same meaning as engine::StepInput).
struct StepIo {
  int32_t n_tokens = 0;
  const int32_t* tokens = nullptr;    // [n_tokens]
  const int32_t* pos = nullptr;       // [n_tokens]
  const int32_t* seq = nullptr;       // [n_tokens]
  const int32_t* cell = nullptr;      // [n_tokens] KV cell receiving each token's K/V
  const int32_t* cell_pos = nullptr;  // [n_cells] position per cell (this step's tokens included)
  const int32_t* cell_seq = nullptr;  // [n_cells] sequence per cell (-1 empty)
  int32_t n_cells_scan = 0;
  const int32_t* out_rows = nullptr;  // [n_out] ascending batch rows that want logits
  int32_t n_out = 0;
  const float* embd = nullptr;        // [n_embd, n_tokens] input rows for the tokens that are -1, or null
  const int32_t* mrope_pos = nullptr; // [4 * n_tokens] M-RoPE positions, section-major, or null
};

// How HybridRunner::encode_image ran the vision tower.
struct VisionRun {
  std::string where;          // "cuda" / "emulated" (the device), or "cpu"
  std::string note;           // why it ran on the CPU; empty otherwise
  uint64_t device_bytes = 0;  // arena bytes the encoder held (activations, its ring, the tower's vectors)
  uint64_t copied_bytes = 0;  // weight bytes copied to the device for this image
  double ms = 0;              // the encoder, inputs up to embeddings back on the host
};

// Where streamed sub-layers' weights are copied to the device from.
enum class PinMode : uint8_t {
  kAuto,      // kRegister for the streamed sub-layers the CPU also computes in some tier (the CPU reads
              // the mmap, so a pinned copy would hold their bytes twice in host memory), kCopy for the rest
  kCopy,      // copy each into pinned host memory once at load, in slot layout (one copy per fill)
  kRegister,  // page-lock the model file's mmap in place and copy from it (one copy per matrix per
              // fill; no second host copy of the weights, no split-layout repack of streamed matrices)
};
const char* pin_mode_name(PinMode mode);  // "auto", "copy", "register"

struct HybridOptions {
  int32_t n_cells = 4096;    // KV cells (the engine's n_ctx); also the planned context
  int32_t n_batch = 512;     // most tokens per step; the largest tier
  int32_t cpu_threads = 0;   // CpuOps threads (0 = physical cores)
  std::optional<kernels::CpuIsa> cpu_isa;  // CpuOps dispatch level; nullopt: kernels::default_cpu_isa()
  int32_t max_sequences = 1; // logits rows the device head computes per chunk
  // Use this strategy's placement in every tier where the planner found it feasible (tests, studies).
  std::optional<plan::Strategy> force_strategy;
  bool measure = false;      // time every sub-layer and copy (events / host clocks) for explain()
  // CUDA: replay decode steps whose sub-layers are all resident on the device (full VRAM) from CUDA
  // graphs (one launch instead of hundreds), keyed by token count, logits rows and a bucket of the
  // scanned KV cells (padding cells are masked). Off with measure or a timeline (they need per-op events).
  bool cuda_graphs = true;
  int32_t graph_max_tokens = 8;
  // CUDA: store quantized matrices whose type has a split layout (tensor/repack.h) repacked, so the
  // decode kernels read 16-byte-aligned quant planes. Lossless (same bytes, same values): test_cuda_ops
  // compares split and ggml layouts on every awkward shape.
  bool split_layout = true;
  // Streamed weights: copied once into pinned memory, or the mmap registered in place, or (kAuto) each
  // sub-layer the way that keeps one host copy of it. A registration the driver refuses falls back to
  // copying (PinStats::note says why).
  PinMode pin_mode = PinMode::kAuto;
  int32_t pin_threads = 0;   // threads copying / registering streamed weights at load (0 = physical cores)
  // CUDA: bytes of dequantized F16 weight rows a prefill GEMM stages at a time, as asked of the planner
  // (plan::PlannerOptions::gemm_staging_bytes: 0 = a whole matrix, kGemmStagingAuto = its choice); CudaOps'
  // scratch is sized from what the plan resolved (PlanSet::options).
  uint64_t gemm_staging_bytes = plan::PlannerOptions::kGemmStagingAuto;
  // FFN slices, as asked of the planner (plan::PlannerOptions::ffn_slices: 1 whole, 0 = its choice); the
  // runner cuts its sub-layer list as the plan says (PlanSet::ffn_slices).
  int32_t ffn_slices = 1;
  // Mixture of experts: device bytes for the hot-expert cache (exec/expert_cache.h), taken from what the
  // planner may place; 0: none. The slots it buys (the same number per MoE layer) hold the experts the
  // plan leaves to the CPU that the router picked most lately.
  uint64_t expert_cache_bytes = 0;
  // CUDA: the kernels' options (defaults: the production kernels). make_hybrid_runner applies an
  // experiments build's FERRY_CUDA_* switches over them (kernels::with_experiments).
  kernels::CudaOpsOptions cuda_ops;
};

// The load phase that makes streamed weights copyable asynchronously.
struct PinStats {
  PinMode mode = PinMode::kCopy;  // as asked (HybridOptions::pin_mode); what happened is in the counts below
  std::string note;               // why a registration fell back to copying; empty otherwise
  double seconds = 0;             // wall time of the phase (a failed registration attempt included)
  double alloc_s = 0;             // summed over threads: allocate_pinned + register_host
  double copy_s = 0;              // summed over threads: memcpy / split repack into pinned memory
  int32_t threads = 0;
  int32_t ranges = 0;             // pinned buffers + registered page ranges
  int32_t registered_ranges = 0;  // of which registered page ranges of the mmap
  uint64_t bytes = 0;             // page-locked bytes holding streamed weights
  uint64_t registered_bytes = 0;  // of which registered in place (the rest: pinned copies)
  // Host memory: mmap bytes handed back to the page cache at load (madvise) because nothing on the host
  // reads them again: resident weights once uploaded, streamed weights once copied (unless the CPU
  // computes them in some tier).
  uint64_t released_bytes = 0;
};

// Measured per tier (accumulated over steps until reset_stats()).
struct TierStats {
  int32_t tokens = 0;              // tier
  plan::Strategy strategy = plan::Strategy::kStatic;
  double predicted_ms = 0;         // planner's step time at its eval context
  int64_t steps = 0;
  double context_sum = 0;          // KV cells before each step (max position + 1 - tokens), summed
  // The planner's step time at these steps' mean context (plan::predicted_at): what wall_ms / steps is
  // compared with (a prefill tier's chunks run at contexts 0 .. prompt, not all at the eval context).
  double predicted_at_steps(const plan::PlanSet& ps, size_t tier) const;
  double wall_ms = 0;              // host wall time of run(), summed
  // With measure: per sub-layer time (device: events on the compute stream, CPU: host clock), summed.
  std::vector<double> sub_ms;
  double copy_ms = 0;              // weight copies on the copy stream (events), summed
  int64_t copies = 0;
  uint64_t copy_bytes = 0;
  int64_t prefetch_hits = 0;       // slots a previous step had already filled
  // The end-of-step prefetch of the next step's first K fills (not in copies / copy_bytes above; the
  // next step counts them as prefetch_hits): copies + prefetch_copies is the weight traffic.
  int64_t prefetch_copies = 0;
  uint64_t prefetch_bytes = 0;
  int64_t graph_replays = 0;       // steps replayed from a CUDA graph
  int64_t graph_captures = 0;
  // CPU sub-layers (not the embedding) that the plan prices at >= 20 us, every step (host clock):
  // measured time and the plan's time for them alone (Plan::sub_ms), summed. Far apart, the profile
  // the plan came from does not describe this machine as it is now (cpu_vs_profile).
  double cpu_ms = 0;
  double cpu_plan_ms = 0;
  int64_t cpu_calls = 0;
};

// Measured / planned time of the CPU sub-layers over every tier (TierStats::cpu_ms / cpu_plan_ms), once
// they ran at least `min_calls` times; nullopt before that or without CPU sub-layers. Copies running
// beside them make 1.0-1.6 normal (the CPU's share while copying).
std::optional<double> cpu_vs_profile(const std::vector<TierStats>& stats, int64_t min_calls = 8);

class HybridRunner {
 public:
  // `plan` must come from the same sub-layer list; weights are the host views (mmap) of the model.
  // The device's arena is the budget. Errors: a block that does not fit (kOutOfMemory with numbers),
  // a placement this executor cannot run (kUnsupported), device errors.
  static Expected<std::unique_ptr<HybridRunner>> create(const model::ModelSpec& spec,
                                                        const model::ModelWeights& weights,
                                                        const std::vector<model::SubLayer>& subs,
                                                        const plan::PlanSet& plan, std::unique_ptr<Device> device,
                                                        const HybridOptions& options);
  virtual ~HybridRunner() = default;

  // Writes n_out rows of n_vocab logits (host) in out_rows order.
  virtual Status run(const StepIo& in, float* logits) = 0;
  // The embeddings of one image (model::encode_image's result: [proj_dim, tokens] F32, raster order),
  // computed under the same budget as the language model (docs/ARCHITECTURE.md, "Vision under the
  // budget"): the language model's resident weights and ring leave the arena, the tower runs in what they
  // held (its weights streamed from pinned host memory through a ring of its own, activations in one
  // block), everything it took goes back, and the next run() uploads the resident weights again. The KV
  // cache stays. Where the tower does not fit, it runs on the CPU. `w` views host memory (the mmproj).
  virtual Expected<std::vector<float>> encode_image(const model::VisionSpec& spec, const model::VisionWeights& w,
                                                    const model::VisionInput& in, VisionRun* run = nullptr) = 0;
  // Called with the named intermediates of sub-layers that run on the CPU (empty = off).
  virtual void set_debug_hook(model::DebugHook hook) = 0;
  // Records spans (copies, device sub-layers, CPU sub-layers, host waits) of the next steps into
  // `timeline` until it is full (nullptr = stop). Steps recorded run without CUDA graphs.
  virtual void set_timeline(Timeline* timeline) = 0;
  virtual const char* name() const = 0;  // "hybrid-cuda", "hybrid-emulated"

  virtual const plan::PlanSet& plan() const = 0;
  virtual Device& device() = 0;
  // Placement actually used per tier (the plan's, or the forced strategy's), PlanSet::tiers order.
  virtual const std::vector<std::vector<plan::Placement>>& placements() const = 0;
  virtual const std::vector<TierStats>& stats() const = 0;
  virtual void reset_stats() = 0;
  // Arena blocks this runner asked for, bytes by tag ("kv", "ring", "weights", ...), for reports.
  virtual const std::vector<std::pair<std::string, uint64_t>>& arena_blocks() const = 0;
  // Page-locked host bytes holding streamed weights (pinned copies, or registered mmap pages), and the
  // seconds the whole load took.
  virtual uint64_t pinned_weight_bytes() const = 0;
  virtual double load_seconds() const = 0;
  // The part of load_seconds() spent pinning streamed weights (copy or registration), with details.
  virtual double pin_seconds() const = 0;
  virtual const PinStats& pin_stats() const = 0;
  // The hot-expert cache: its geometry (slots == 0: none) and what it did since the load or reset_stats().
  virtual const ExpertCacheGeometry& expert_cache_geometry() const = 0;
  virtual const ExpertCacheStats& expert_cache_stats() const = 0;
};

// Device bytes a HybridRunner takes for `plan` beyond what the plan's accounting names (activation
// scratch, batch metadata, CudaOps scratch): used to shrink the budget handed to the planner so the
// executor's blocks always fit the arena.
uint64_t hybrid_extra_bytes(const model::ModelSpec& spec, const std::vector<model::SubLayer>& subs,
                            const plan::PlanSet& plan, const HybridOptions& options, DeviceKind kind);

// Everything from a budget to a running executor: plan with `profile`, make the device (arena = budget),
// create the runner. Budget below the planner's minimum => kOutOfMemory naming the minimum.
struct HybridSetup {
  uint64_t vram_budget = 0;
  std::string device = "emulated";   // "cuda" | "emulated"
  int32_t ordinal = 0;
  plan::HardwareProfile profile;
  HybridOptions options;
  int32_t ring_slots = 2;            // K; 0 = the planner chooses (ferry run / bench without --ring)
  EmulatedOptions emulated;          // budget is overwritten with vram_budget
  double split_layer_s = plan::kSplitLayerS;  // plan::PlannerOptions::split_layer_s
  int32_t prompt_tokens = 1024;      // planner scenario
  int32_t gen_tokens = 128;
  // Prefill chunk choice: when > options.n_batch, the planner also plans with steps of up to this many
  // tokens, and the larger chunk is kept where it predicts a faster prefill and a decode step no more
  // than kBatchChoiceDecodeSlack slower (its activations take arena from resident weights). A larger
  // chunk pays off where every chunk streams weights that more tokens share: mixture-of-experts prefill
  // streams every routed expert group once per chunk. The runner's plan().options.batch says which was kept.
  int32_t batch_max = 0;
};
inline constexpr double kBatchChoiceDecodeSlack = 0.02;
// The smallest budget make_hybrid_runner accepts for this model and setup (vram_budget ignored).
Expected<uint64_t> hybrid_min_budget(const model::ModelSpec& spec, const std::vector<model::SubLayer>& subs,
                                     const HybridSetup& setup);
Expected<std::unique_ptr<HybridRunner>> make_hybrid_runner(const model::ModelSpec& spec,
                                                           const model::ModelWeights& weights,
                                                           const std::vector<model::SubLayer>& subs,
                                                           const HybridSetup& setup);

// One screen: per tier predicted vs measured step time; with measure, the slowest sub-layers and copies.
std::string explain_text(const HybridRunner& runner);

}  // namespace ferry::exec
