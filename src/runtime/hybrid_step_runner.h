// The engine's StepRunner over the hybrid executor, and the sampler of the process's peak device memory.
// The engine does not depend on exec (engine::StepInput and exec::StepIo carry the same fields); this
// adapter joins them. Device memory outside the arena only grows at first times — a new step shape
// loads kernels, a graph capture instantiates a graph — so the process is read from the driver after
// those steps (and every kSampleEvery steps besides), not after every step.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "engine/step_runner.h"
#include "exec/hybrid_runner.h"
#include "exec/process_memory.h"
#include "runtime/runtime.h"

namespace ferry::runtime {

class PeakSampler {
 public:
  static constexpr int64_t kSampleEvery = 64;

  // cuda: reads the process from the driver (exec::process_memory_meter(ordinal)). emulated: the model,
  // `modelled_context` + the arena's capacity (a real GPU reserves the whole arena at start).
  static std::shared_ptr<PeakSampler> for_cuda(int ordinal);
  static std::shared_ptr<PeakSampler> modelled(uint64_t modelled_context);

  void attach(exec::HybridRunner* runner) { runner_ = runner; }
  void after_step(int32_t n_tokens);  // samples when the step may have grown the process
  ProcessMemory peak();               // samples now, then the largest reading since the start

 private:
  void sample();

  std::mutex mu_;
  bool cuda_ = false;
  int ordinal_ = 0;
  uint64_t modelled_context_ = 0;
  exec::HybridRunner* runner_ = nullptr;
  uint64_t peak_ = 0;
  bool read_any_ = false;
  std::set<int32_t> seen_tokens_;
  int64_t captures_seen_ = 0;
  int64_t steps_ = 0;
};

class HybridStepRunner final : public engine::StepRunner {
 public:
  HybridStepRunner(std::unique_ptr<exec::HybridRunner> runner, std::string name, std::shared_ptr<PeakSampler> peak);
  const char* name() const override { return name_.empty() ? runner_->name() : name_.c_str(); }
  void set_debug_hook(model::DebugHook hook) override { runner_->set_debug_hook(std::move(hook)); }
  Status run(const engine::StepInput& in, float* logits) override;

 private:
  std::unique_ptr<exec::HybridRunner> runner_;
  std::string name_;
  std::shared_ptr<PeakSampler> peak_;
};

}  // namespace ferry::runtime
