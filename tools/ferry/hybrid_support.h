// The CLI side of the hybrid executor: `--vram SIZE [--profile FILE]` on `ferry run` / `ferry bench`
// plans for the budget with this machine's profile and hands the Engine a HybridRunner (through
// EngineOptions::runner_factory, so neither engine nor exec depends on the other), then reports peak
// device memory, the plan per tier, predicted vs measured step time and the fraction of the hybrid
// limits reached. install_runner_factory is the one place both --vram and `--device cuda` (whole model
// on the GPU, gpu_support.h) build their runner; record_timeline serves `ferry bench --timeline`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "cli.h"
#include "engine/engine.h"
#include "exec/hybrid_runner.h"
#include "exec/timeline.h"
#include "plan/profile.h"
#include "plan/profile_check.h"

namespace ferry::cli {

struct HybridArgs {
  std::string vram_text;      // --vram SIZE; empty = no hybrid executor
  std::string profile_path;   // --profile FILE
  int32_t ring_slots = 0;     // --ring K; 0 = the planner chooses K
  std::string strategy;       // --strategy: use this strategy's placement wherever the planner found it feasible
  int32_t ffn_slices = 1;     // --ffn-slices N; 1 = whole FFNs, 0 = the planner chooses (PlannerOptions::ffn_slices)
  int32_t cuda_graphs = 1;    // --cuda-graphs 0|1 (A/B studies)
  int32_t split_layout = 1;   // --split-layout 0|1 (A/B studies)
  std::string pin = "copy";   // --pin copy|register: streamed weights copied to pinned memory / mmap registered
  bool explain = false;       // --explain: per sub-layer timing (bench)
  std::string timeline_path;  // --timeline FILE: SVG of a few steps (bench)
};

// Adds --vram, --profile, --ring, --pin (and for bench --explain and --timeline) to app.
void add_hybrid_options(CLI::App& app, HybridArgs* a, bool bench);

// Filled by install_runner_factory; runner is set once Engine::load built it (owned by the engine).
struct HybridState {
  bool active = false;
  uint64_t budget = 0;
  std::string device;          // "cuda" | "emulated"
  std::string profile_origin;
  bool profile_cached = false; // profile_origin is this machine's cached profile (not --profile FILE)
  double link_gbs = 0;         // P of the profile: the prefill limit (W-R)/P
  std::vector<DType> weight_types;  // the model's matrix types: what a profile re-check measures
  exec::HybridRunner* runner = nullptr;
};

// The profile a GPU run plans with (--profile FILE, else this machine's cached or measured one); one
// without a GPU -> kInvalidArgument naming `what` ("--vram", "--device cuda").
Expected<plan::HardwareProfile> load_gpu_profile(const std::string& path, const char* what, std::string* origin,
                                                 bool* cached = nullptr);

// What a GPU runner is built from, once the budget and device are resolved.
struct RunnerConfig {
  uint64_t budget = 0;
  std::string device;                           // "cuda" | "emulated"
  plan::HardwareProfile profile;
  std::string profile_origin;
  bool profile_cached = false;
  std::optional<plan::Strategy> force_strategy;
  uint64_t gemm_staging_bytes = plan::PlannerOptions::kGemmStagingAuto;  // HybridOptions::gemm_staging_bytes
  std::string name;                             // the StepRunner's name; empty = the HybridRunner's
  // Sees make_hybrid_runner's result before the engine gets it (runner null on failure) and may
  // replace the failure with a clearer one or reject the runner; empty = pass through.
  std::function<Status(const Status& created, const exec::HybridRunner* runner)> check;
};

// Marks state active with cfg's budget/device/profile and sets opt->runner_factory to build the runner.
void install_runner_factory(const HybridArgs& a, engine::EngineOptions* opt, const std::shared_ptr<HybridState>& state,
                            RunnerConfig cfg);

// When --vram is given: resolves the device (`cpu`, the default, becomes cuda when a GPU is usable,
// else emulated with a note on stderr), loads or measures the profile, installs the runner factory.
// Bad usage -> kInvalidArgument.
Status install_hybrid(const HybridArgs& a, engine::EngineOptions* opt, const std::shared_ptr<HybridState>& state);

// Decode and prefill measured against DESIGN.md §4's limits: limit ms over measured ms per step (1 =
// at the limit). Decode: tier 1's steps vs (W-R)/H and (W-R)/(C+P); prefill: the largest tier that ran
// vs (W-R)/P. Absent (nullopt) where nothing streams (W = R) or the tier did not run.
struct LimitFractions {
  double decode_ms = 0, prefill_ms = 0;  // measured per step (runner wall time)
  int32_t prefill_tier = 0;
  double limit_h_ms = 0, limit_cp_ms = 0, limit_p_ms = 0, limit_serial_ms = 0;
  std::optional<double> decode_h, decode_cp, decode_serial, prefill_p;
};
LimitFractions limit_fractions(const HybridState& s);

// Peak device memory, plan per tier, predicted vs measured per tier, limit fractions (and with
// explain, per sub-layer).
std::string hybrid_report_text(const HybridState& s, bool explain);
// After a run: when the CPU sub-layers ran far from the profile's times (exec::cpu_vs_profile outside
// [kProfileFastRatio, kProfileSlowRatio]), plan::recheck_profile_after_run re-measures the CPU figures
// the model uses and updates the cached profile (a --profile FILE is never touched); one line on stderr
// says what it found. Returns whether it said anything.
constexpr double kProfileFastRatio = plan::kCpuFastRatio;
constexpr double kProfileSlowRatio = plan::kCpuSlowRatio;
bool check_profile_after_run(const HybridState& s);
nlohmann::json hybrid_report_json(const HybridState& s);

// Records the steps run by `steps` (the runner's first max_steps steps after this call) into a
// timeline titled `title`; the runner stops on its own when it is full. Returns the timeline (empty
// when the device has no timing events).
Expected<exec::Timeline> record_timeline(const HybridState& s, int32_t max_steps, const std::string& title,
                                         const std::function<Status()>& steps);

}  // namespace ferry::cli
