// Planner: decides, for a VRAM budget, which sub-layers live in VRAM (one resident set shared by all
// token tiers, so a tier switch never re-uploads weights) and, per tier, the strategy
// (gpu-stream, static, dynamic: docs/ARCHITECTURE.md §4) and the placement of every sub-layer. Plain data in (spec,
// sub-layers, profile, options), plain data out (PlanSet); no device calls. Every device byte the
// executor will take is in PlanSet::arena; the CUDA context's own memory is stated separately.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/model_spec.h"
#include "model/sublayer.h"
#include "plan/cost_model.h"
#include "plan/profile.h"
#include "plan/simulate.h"

namespace ferry::plan {

enum class Strategy : uint8_t { kGpuStream, kStatic, kDynamic };
const char* strategy_name(Strategy s);  // "gpu-stream", "static", "dynamic"

enum class Placement : uint8_t { kResident, kStreamed, kCpu };
const char* placement_name(Placement p);  // "resident", "streamed", "cpu"

// Device memory, bytes. total = weights + kv + ring + scratch + workspace.
struct VramBreakdown {
  uint64_t weights = 0;    // resident matrices + every norm / bias vector
  uint64_t kv = 0;         // KV cache (F16) for the planned context, all layers
  uint64_t ring = 0;       // ring_slots * ring_slot_bytes (0 when nothing can stream)
  uint64_t scratch = 0;    // activations of the largest tier, dequant / F16 staging for GEMMs
  uint64_t workspace = 0;  // cuBLAS workspace
  uint64_t total = 0;
};

// One strategy evaluated for one tier.
struct StrategyEstimate {
  Strategy strategy = Strategy::kStatic;
  bool feasible = false;
  std::string why_not;               // when !feasible
  double step_ms = 0;                // steady-state step time
  // Work per step, each resource alone; copy_ms: the copies a steady step makes (streamed sub-layers
  // still in their ring slot from the previous step are not copied again).
  double cpu_ms = 0, gpu_ms = 0, copy_ms = 0, xfer_ms = 0;
  std::vector<Placement> placement;  // per sub-layer
  int32_t n_cpu = 0, n_streamed = 0; // sub-layers (matrices) on the CPU / streamed
};

struct Plan {
  int32_t tokens = 1;                // tier: steps of up to this many new tokens
  Strategy strategy = Strategy::kStatic;
  double predicted_ms = 0;           // step time at PlanSet::eval_context
  // The same placement's step time at context 0 (an empty cache before the step), scaled as predicted_ms
  // is: with predicted_ms it gives the step time at any context by linear interpolation (predicted_at),
  // which is how measured steps at other contexts are compared with the plan.
  double predicted_ms_low = 0;
  std::vector<Placement> placement;  // per sub-layer, PlanSet::sublayers order
  // Per sub-layer, ms at eval_context on its own: the CPU's time for a CPU sub-layer (no copies running),
  // the GPU kernels' (launched one by one) for a resident or streamed one; a streamed one's copy is not
  // in it. What `ferry bench --explain` prints next to each measured sub-layer.
  std::vector<double> sub_ms;
  VramBreakdown vram;                // the arena while this tier runs (shared by all tiers)
  std::vector<StrategyEstimate> candidates;  // gpu-stream, static, dynamic (in that order)
  std::string runner_up;             // "" when no other strategy was feasible
  std::string why_runner_up_lost;
};

// Plan p's step time at context c (KV cells before the step, as the cost model counts), interpolated
// linearly between predicted_ms_low (context 0) and predicted_ms (context eval_context).
double predicted_at(const Plan& p, int32_t eval_context, double c);

struct SubLayerSummary {
  std::string label;                 // "blk.7.ffn"
  model::SubLayerKind kind = model::SubLayerKind::kFfn;
  int32_t layer = -1;
  int32_t slice = -1;                // FFN slice index (model::SubLayer::slice); -1: a whole sub-layer
  uint64_t bytes = 0;                // matrix bytes (what residency / streaming moves)
  uint64_t vector_bytes = 0;         // norms and biases (always resident on a GPU)
  bool streamable = false;           // fits a ring slot
};

struct PlannerOptions {
  uint64_t vram_budget = 0;
  int32_t context = 4096;            // planned context: the KV cache holds this many tokens
  int32_t batch = 1024;              // largest tier (tokens per step)
  int32_t cpu_threads = 0;           // 0 = profile's default
  int32_t ring_slots = 0;            // K: 0 = the planner tries 2, 3, 4, 6, 8 and keeps the best; else 2..64
  int32_t max_sequences = 1;         // rows of logits per step (sequences decoded together)
  // The scenario the shared resident set is optimised for, and TTFT / tok/s are predicted at:
  // a prompt of prompt_tokens, then gen_tokens decode steps.
  int32_t prompt_tokens = 1024;
  int32_t gen_tokens = 128;
  int32_t eval_context = 0;          // context of tier estimates; 0 = min(prompt_tokens, context)
  // Robust choice (docs/PLANNER.md, "Choosing the set"): among the candidates whose scenario is within
  // copy_window of the best, the planner takes the one with the lowest scenario + gen_tokens x
  // copy_risk x (copy time of a steady decode step's weight copies, alone): copies the simulation
  // hides under compute cost more on the GPU host than predicted, while steps without copies are
  // predicted closely (docs/PLANNER.md). 0 / 0: off.
  double copy_window = 0.06;
  double copy_risk = 0.5;
  // Candidates whose scores (as above) lie within score_tie of the best are equally good: the one with
  // the shallowest ring is taken (plans that repeat from one profile of a machine to the next).
  double score_tie = 0.01;
  uint64_t workspace_bytes = 32ull << 20;          // cuBLAS workspace (its recommendation on Hopper)
  // Scratch for the F16 copy of dequantized weights a prefill GEMM multiplies (CudaScratchShape's); 0: the
  // largest quantized matrix whole. Smaller leaves more of a tight budget to weights, in exchange for
  // prefill GEMMs on fewer rows at a time (faster decode, slower prefill on a tight budget:
  // bench/RESULTS.md). kGemmStagingAuto: the planner plans with the whole matrix and with
  // kGemmStagingSmall and keeps the small staging only where it lets the budget hold more weights and
  // the decode step is predicted at least 3 % faster (or where only it fits the budget);
  // PlanSet::options holds the value chosen, which the executor sizes CudaOps' scratch with.
  static constexpr uint64_t kGemmStagingAuto = ~0ull;
  static constexpr uint64_t kGemmStagingSmall = 16ull << 20;
  uint64_t gemm_staging_bytes = kGemmStagingAuto;
  // Beside the arena (vram_budget here is the arena's): context + modules + handles. A process budget
  // (runtime::open, `ferry plan`) holds both; runtime/budget.h splits it.
  uint64_t cuda_context_bytes = 512ull << 20;
  // FFN slices (model::slice_ffn_sublayers): each dense FFN cut into this many slices along its width,
  // placed one by one, so part of an FFN can stay in VRAM while the CPU computes the rest at the same
  // time, and ring slots shrink with them. 1: whole FFNs (the default: on the GPU host slices ran slower
  // than whole FFNs in every configuration tried, docs/PLANNER.md "FFN slices").
  // kFfnSlicesAuto: the planner plans with whole FFNs and with kFfnSlicesTry slices (dense models that
  // do not fit) and keeps the better by the robust rule (PlanSet::ffn_slices says which; the executor
  // cuts its list the same way).
  static constexpr int32_t kFfnSlicesAuto = 0;
  static constexpr int32_t kFfnSlicesTry = 2;
  int32_t ffn_slices = 1;
  // What a layer split between CPU and GPU slices costs beyond its transfers (cost_model.h, kSplitLayerS;
  // the executor tests set 0 so that tiny models split).
  double split_layer_s = kSplitLayerS;
};

// One ring depth the planner evaluated: the best resident set it allows at the budget.
struct RingChoice {
  int32_t slots = 0;                 // K
  double scenario_ms = 0;            // ttft + gen_tokens * decode step (what the planner minimises)
  double decode_ms = 0;              // tier-1 step
};

struct PlanSet {
  std::string model;                 // name for people
  int32_t n_layer = 0;
  std::vector<SubLayerSummary> sublayers;
  PlannerOptions options;
  int32_t eval_context = 0;
  int32_t cpu_threads = 0;           // threads the CPU estimates assume
  bool gpu = false;                  // false: the profile has no GPU, everything runs on the CPU
  std::string gpu_name;
  std::string profile_source;        // "measured" | "estimated"
  std::string profile_fingerprint;
  int32_t ffn_slices = 1;            // the list planned: sub-layers = slice_ffn_sublayers(whole, ffn_slices)
  int32_t ring_slots = 0;            // K; 0: no ring
  bool ring_auto = false;            // K chosen by the planner (options.ring_slots == 0)
  std::vector<RingChoice> ring_choices;  // each depth tried (with a ring), increasing K
  uint64_t ring_slot_bytes = 0;
  uint64_t min_budget = 0;           // the smallest budget that has a plan
  VramBreakdown arena;               // == every tier's vram
  uint64_t cuda_context_bytes = 0;   // stated headroom outside the budget
  std::vector<bool> resident;        // per sub-layer: shared resident set
  std::vector<Plan> tiers;           // increasing tokens: 1, 2, 4, ... batch
  double ttft_ms = 0;                // prompt_tokens processed in chunks of the largest fitting tier
  double decode_tok_s = 0;           // 1000 / tier-1 step time
  // ttft_ms + gen_tokens * tier-1 step: what the shared resident set minimises. Never larger for a
  // larger budget (the candidates of a smaller budget are a subset of a larger one's); single tiers
  // may trade a few percent against it.
  double scenario_ms = 0;
  // Part of scenario_ms: the first decode step's time beyond the steady tier-1 step (the ring holds
  // the prompt tier's sub-layers after prefill, so streamed sub-layers a steady decode step finds in
  // their slots are copied once more). scenario_ms = ttft_ms + this + gen_tokens * tier-1 step.
  double first_decode_extra_ms = 0;
  uint64_t weights_total = 0;        // W: matrix bytes read per decode step (embed excluded)
  uint64_t weights_resident = 0;     // R
  double limit_h_ms = 0;             // (W - R) / H: the decode ceiling (docs/ARCHITECTURE.md §4)
  double limit_cp_ms = 0;            // (W - R) / (C + P), optimistic
  // One sequence's decode ceiling when the GPU computes part of each step: a sub-layer needs the previous
  // one's output, so the CPU sub-layers (their bytes at no more than H) and the GPU's compute (predicted,
  // tier 1) cannot overlap; copies can hide behind either. max((W - R) / H, cpu bytes / H + GPU ms):
  // above limit_h_ms when the GPU holds most of the model.
  double limit_serial_ms = 0;
  std::vector<std::string> notes;

  // The plan of the smallest tier >= n (the largest tier for larger n).
  const Plan& plan_for(int32_t n_tokens) const;
};

class Planner {
 public:
  Planner(const HardwareProfile& profile, PlannerOptions options);
  // Errors: budget below the minimum (kOutOfMemory, naming the minimum), bad options
  // (kInvalidArgument).
  Expected<PlanSet> plan(const model::ModelSpec& spec, const std::vector<model::SubLayer>& subs) const;

 private:
  // plan() for one sub-layer list, with the GEMM staging resolved (auto: both tried).
  Expected<PlanSet> plan_staging(const model::ModelSpec& spec, const std::vector<model::SubLayer>& subs,
                                 const PlannerOptions& o) const;
  // plan() for one (resolved) gemm_staging_bytes.
  Expected<PlanSet> plan_once(const model::ModelSpec& spec, const std::vector<model::SubLayer>& subs,
                              const PlannerOptions& o) const;

  HardwareProfile profile_;
  PlannerOptions options_;
};

// The planner's predicted steady-state step time (ms) of a given placement (one per sub-layer) at
// `tokens` new tokens, context options.eval_context (0: min(prompt_tokens, context)), and a ring of
// `ring_slots` slots: what Plan::predicted_ms is for the placement the planner chose. For checking
// the model against measurements and comparing ring depths on one placement.
Expected<double> predict_step_ms(const HardwareProfile& profile, const PlannerOptions& options,
                                 const model::ModelSpec& spec, const std::vector<model::SubLayer>& subs,
                                 const std::vector<Placement>& placement, int32_t tokens, int32_t ring_slots);

// The simulation behind predict_step_ms, step by step: `placements[s]` is step s's placement (e.g. a
// prefill tier's, then the decode tier's several times), `tokens[s]` its new tokens, every step at
// context options.eval_context (0: min(prompt_tokens, context)). items[s] are the simulated items
// (item i = sub-layer i, id = i); result has the times and, per step, the fills that copied / hit as
// exec::TierStats counts them.
struct StepsSimulation {
  std::vector<std::vector<SimItem>> items;
  SimResult result;
};
Expected<StepsSimulation> simulate_steps(const HardwareProfile& profile, const PlannerOptions& options,
                                         const model::ModelSpec& spec, const std::vector<model::SubLayer>& subs,
                                         const std::vector<std::vector<Placement>>& placements,
                                         const std::vector<int32_t>& tokens, int32_t ring_slots);

// Per sub-layer: 1 where it is one of a layer's FFN slices (model::is_ffn_slice) and at least one slice of
// that layer is on the CPU. The executor runs such layers' slices at once (the device's beside the
// CPU's), outside graph segments; the simulation runs them as a group of two lanes (SimItem::group).
std::vector<uint8_t> split_layers(const std::vector<model::SubLayer>& subs, const std::vector<Placement>& placement);

// Token tiers 1, 2, 4, ... up to batch (batch itself included when not a power of two).
std::vector<int32_t> token_tiers(int32_t batch);

// JSON: {model, budget, ..., tiers:[{tokens, strategy, predicted_ms, vram{...}, placement[...]}]}.
std::string plan_to_json(const PlanSet& ps);
// One screen for a person: per tier strategy, compact placement, VRAM, predictions, runner-up.
std::string plan_to_text(const PlanSet& ps);
// "1.50 GiB", "640 MiB", "12 KiB"
std::string format_bytes(uint64_t bytes);

}  // namespace ferry::plan
