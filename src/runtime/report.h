// What the hybrid executor did, for people and for scripts: device memory of the process (the budget's
// split, the arena's high-water mark, the process peak read from the driver), the plan per tier,
// predicted vs measured step time, and the fraction of the hybrid limits (docs/ARCHITECTURE.md §4)
// reached; plus the recording of a timeline of a few steps. Runtime's report_* methods call these.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"
#include "exec/hybrid_runner.h"
#include "exec/timeline.h"
#include "runtime/budget.h"
#include "runtime/runtime.h"

namespace ferry::runtime {

// What the reports read: the runner (owned by the engine) and how it was set up.
struct HybridState {
  exec::HybridRunner* runner = nullptr;  // null: nothing to report
  std::string device;                    // "cuda" | "emulated"
  ProcessBudget budget;
  std::string profile_origin;
  bool profile_cached = false;           // profile_origin is this machine's cached profile
  std::vector<DType> weight_types;       // the model's matmul weight types (the run-time profile check)
  kernels::CpuIsa cpu_isa = kernels::CpuIsa::kScalar;  // the CPU kernels' level (as resolved by open)
  double link_gbs = 0;                   // P of the profile: the prefill limit (W-R)/P
};

// Decode and prefill measured against the hybrid limits: limit ms over measured ms per step (1 = at the
// limit). Decode: tier 1's steps vs (W-R)/H and (W-R)/(C+P); prefill: the largest tier that ran vs
// (W-R)/P. Absent (nullopt) where nothing streams (W = R) or the tier did not run.
struct LimitFractions {
  double decode_ms = 0, prefill_ms = 0;  // measured per step (runner wall time)
  int32_t prefill_tier = 0;
  double limit_h_ms = 0, limit_cp_ms = 0, limit_p_ms = 0, limit_serial_ms = 0;
  std::optional<double> decode_h, decode_cp, decode_serial, prefill_p;
};
LimitFractions limit_fractions(const HybridState& s);

// Device memory, plan per tier, predicted vs measured per tier, limit fractions (and with explain, per
// sub-layer). `process`: the process's peak device memory (Runtime::vram_peak_process).
std::string hybrid_report_text(const HybridState& s, const ProcessMemory& process, bool explain);
nlohmann::json hybrid_report_json(const HybridState& s, const ProcessMemory& process);

// Records the steps run by `steps` (the runner's first max_steps steps after this call) into a
// timeline titled `title`; the runner stops on its own when it is full.
Expected<exec::Timeline> record_timeline(const HybridState& s, int32_t max_steps, const std::string& title,
                                         const std::function<Status()>& steps);

}  // namespace ferry::runtime
