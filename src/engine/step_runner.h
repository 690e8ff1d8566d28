// StepRunner: the seam between the Engine (batches, KV cell bookkeeping, validation) and whatever
// computes a step. The Engine decides *which* cells the new tokens occupy; the runner owns the K/V
// storage and runs the sub-layers (model/forward.h) wherever it likes. Today's runner puts every
// sub-layer on one Ops (RefOps or CpuOps, host memory); the hybrid executor (docs/ARCHITECTURE.md §3) is another
// StepRunner and needs no change in the Engine or the model code.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "kernels/ops.h"
#include "model/forward.h"
#include "model/model_spec.h"
#include "model/weights.h"

namespace ferry::engine {

// One validated step, all arrays on the host.
struct StepInput {
  int32_t n_tokens = 0;
  const int32_t* tokens = nullptr;    // [n_tokens] ids, < n_vocab
  const int32_t* pos = nullptr;       // [n_tokens] position in its sequence
  const int32_t* seq = nullptr;       // [n_tokens] sequence id
  const int32_t* cell = nullptr;      // [n_tokens] KV cell receiving the token's K/V (distinct, free before)
  const int32_t* cell_pos = nullptr;  // [n_cells_total] position held per cell, this step's tokens included
  const int32_t* cell_seq = nullptr;  // [n_cells_total] sequence held per cell (-1 = empty)
  int32_t n_cells_scan = 0;           // every used cell has index < n_cells_scan
  const int32_t* out_rows = nullptr;  // [n_out] rows (batch indices) that want logits, ascending
  int32_t n_out = 0;
  const float* embd = nullptr;        // [n_embd, n_tokens] input rows replacing tokens' embeddings, or null
  const int32_t* mrope_pos = nullptr; // [4 * n_tokens] M-RoPE positions, section-major, or null
  int32_t n_decode = -1;              // Batch::n_decode: leading decode tokens (batch-invariant kernels), or -1
};

class StepRunner {
 public:
  virtual ~StepRunner() = default;
  virtual const char* name() const = 0;
  // Runs the model over the step; writes n_out rows of n_vocab logits (host) in out_rows order.
  virtual Status run(const StepInput& in, float* logits) = 0;
  // Optional: called with every named intermediate of later steps (empty function = off).
  virtual void set_debug_hook(model::DebugHook hook) = 0;
};

// Every sub-layer on `ops` (host memory): K/V storage of n_cells cells per layer (F16) and scratch for
// steps of up to n_batch tokens. The spec and weights must outlive the runner.
Expected<std::unique_ptr<StepRunner>> make_ops_runner(const model::ModelSpec& spec, const model::ModelWeights& weights,
                                                      std::unique_ptr<kernels::Ops> ops, int32_t n_cells,
                                                      int32_t n_batch);

}  // namespace ferry::engine
