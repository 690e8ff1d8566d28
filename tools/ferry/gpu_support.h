// The CLI side of `--device cuda` without `--vram`: the whole model on the GPU. The budget is the GPU's
// free memory less a margin; the hybrid executor runs with every sub-layer on the device (gpu-stream
// strategy forced, so with a budget that holds all weights nothing streams and nothing runs on the
// CPU). A model that does not fit -> a clear error suggesting --vram. With --vram, or any other
// device, this defers to install_hybrid; both build the runner through install_runner_factory
// (hybrid_support.h).
#pragma once

#include <memory>

#include "base/status.h"
#include "engine/engine.h"
#include "hybrid_support.h"

namespace ferry::cli {

// Installs the runner factory for opt->device (cpu/ref: nothing). --device cuda and no --vram: the
// all-on-GPU runner; a missing GPU or driver -> kDevice with the reason.
Status install_device_runner(const HybridArgs& a, engine::EngineOptions* opt,
                             const std::shared_ptr<HybridState>& state);

}  // namespace ferry::cli
