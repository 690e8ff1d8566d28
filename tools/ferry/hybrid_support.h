// The CLI side of GPU runs on `ferry run` / `ferry bench`: the flags (--vram, --profile, --ring, --pin,
// ... and for bench --explain, --timeline) and their translation into runtime::OpenOptions. Everything
// they drive — device resolution, profile, the process budget, the hybrid executor, its reports — is
// the library's (runtime/runtime.h); this file only parses and prints.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "cli.h"
#include "runtime/runtime.h"

namespace ferry::cli {

struct HybridArgs {
  std::string vram_text;      // --vram SIZE; empty = no budget
  std::string profile_path;   // --profile FILE
  int32_t ring_slots = 0;     // --ring K; 0 = the planner chooses K
  std::string strategy;       // --strategy: use this strategy's placement wherever the planner found it feasible
  int32_t ffn_slices = 1;     // --ffn-slices N; 1 = whole FFNs, 0 = the planner chooses (PlannerOptions::ffn_slices)
  int32_t cuda_graphs = 1;    // --cuda-graphs 0|1 (A/B studies)
  int32_t split_layout = 1;   // --split-layout 0|1 (A/B studies)
  std::string pin = "auto";   // --pin auto|copy|register (exec::PinMode)
  std::string expert_cache;   // --expert-cache SIZE: the hot-expert cache's share of the budget (MoE)
  bool explain = false;       // --explain: per sub-layer timing (bench)
  std::string timeline_path;  // --timeline FILE: SVG of a few steps (bench)
};

// Adds --vram, --profile, --ring, --pin, ... (and for bench --explain and --timeline) to app.
void add_hybrid_options(CLI::App& app, HybridArgs* a, bool bench);

// The flags into `o` (budget, profile, executor overrides; notes and the profile's progress bar on
// stderr). A --vram that is not a size -> kInvalidArgument.
Status fill_open_options(const HybridArgs& a, runtime::OpenOptions* o);

// Whether the flags ask for a GPU (or emulated) device: --device cuda / emulated, or a budget.
bool wants_gpu(const HybridArgs& a, const std::string& device);

// After a run: prints the runtime's profile warning (Runtime::check_profile_after_run) on stderr.
void warn_profile_after_run(runtime::Runtime& rt);

}  // namespace ferry::cli
