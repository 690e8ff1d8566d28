// The CLI side of the hybrid executor: `--vram SIZE [--profile FILE]` on `ferry run` / `ferry bench`
// plans for the budget with this machine's profile and hands the Engine a HybridRunner (through
// EngineOptions::runner_factory, so neither engine nor exec depends on the other), then reports peak
// device memory, the plan per tier and predicted vs measured step time.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "cli.h"
#include "engine/engine.h"
#include "exec/hybrid_runner.h"

namespace ferry::cli {

struct HybridArgs {
  std::string vram_text;      // --vram SIZE; empty = no hybrid executor
  std::string profile_path;   // --profile FILE
  int32_t ring_slots = 2;     // --ring K
  bool explain = false;       // --explain: per sub-layer timing (bench)
};

// Adds --vram, --profile, --ring (and --explain when with_explain) to app.
void add_hybrid_options(CLI::App& app, HybridArgs* a, bool with_explain);

// Filled by install_hybrid; runner is set once Engine::load built it (owned by the engine).
struct HybridState {
  bool active = false;
  uint64_t budget = 0;
  std::string device;          // "cuda" | "emulated"
  std::string profile_origin;
  exec::HybridRunner* runner = nullptr;
};

// When --vram is given: resolves the device (`cpu`, the default, becomes cuda when a GPU is usable,
// else emulated with a note on stderr), loads or measures the profile, installs the runner factory.
// Bad usage -> kInvalidArgument.
Status install_hybrid(const HybridArgs& a, engine::EngineOptions* opt, const std::shared_ptr<HybridState>& state);

// Peak device memory, plan per tier, predicted vs measured per tier (and with explain, per sub-layer).
std::string hybrid_report_text(const HybridState& s, bool explain);
nlohmann::json hybrid_report_json(const HybridState& s);

}  // namespace ferry::cli
