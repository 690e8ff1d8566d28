// Engine: load a model (file -> spec -> weights -> tokenizer), own the KV cache, run steps.
// A step takes a batch of new tokens from one or more sequences (each token carries its sequence id
// and position) and returns logits for the tokens that asked for them. Where each sub-layer runs is
// the StepRunner's business: one Ops here (cpu, ref), the hybrid executor through runner_factory
// (runtime::open, runtime/runtime.h, builds it for cuda and emulated devices).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/tensor_view.h"

namespace ferry::gguf {
class ModelFile;
}
namespace ferry::text {
class Tokenizer;
}
namespace ferry::model {
struct ModelSpec;
struct ModelWeights;
}

namespace ferry::engine {

class StepRunner;
// Builds the step runner instead of the all-on-one-Ops runner (runtime::open passes the hybrid executor
// here for GPU devices; the engine itself does not depend on exec). n_ctx / n_batch as the engine resolved
// them; the factory may raise *n_batch (up to n_ctx) to the most tokens per step its runner takes.
using RunnerFactory = std::function<Expected<std::unique_ptr<StepRunner>>(
    const model::ModelSpec&, const model::ModelWeights&, const gguf::ModelFile&, int32_t n_ctx, int32_t* n_batch)>;

struct Batch {
  std::vector<int32_t> tokens;  // [n] token ids
  std::vector<int32_t> pos;     // [n] position of each token in its sequence
  std::vector<int32_t> seq;     // [n] sequence id (0 .. n_seq_max-1)
  std::vector<uint8_t> logits;  // [n] 1 = return logits for this token
  // Multimodal steps (qwen2vl): embeddings for the rows whose token is -1 (an image's tokens; the rows with
  // a token id embed it as usual, so one step may mix requests with and without images), and rope
  // positions per M-RoPE stream (every row). Empty: token ids, rope at `pos`.
  // `pos` stays the token's place in its sequence (the KV cache's order, strictly increasing).
  std::vector<float> embd;         // [n * n_embd]
  std::vector<int32_t> mrope_pos;  // [4 * n] section-major: stream s of row i at s * n + i
  // Batch-invariant numerics (continuous batching across requests): the first n_decode tokens each
  // continue their sequence from a sampled token, the rest are prompt tokens; the CPU and reference
  // devices then compute every token by the kernels of its group, so its logits do not depend on the
  // other tokens of the step (kernels::Ops::set_token_groups). -1: kernels chosen by the step's size.
  // The GPU executor ignores it.
  int32_t n_decode = -1;

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  void add(int32_t token, int32_t position, int32_t sequence, bool want_logits) {
    tokens.push_back(token);
    pos.push_back(position);
    seq.push_back(sequence);
    logits.push_back(want_logits ? 1 : 0);
  }
  void clear() {
    tokens.clear();
    pos.clear();
    seq.clear();
    logits.clear();
    embd.clear();
    mrope_pos.clear();
    n_decode = -1;
  }
};

struct EngineOptions {
  std::string model_path;
  int32_t n_ctx = 4096;        // KV cells in total (shared by all sequences); 0 = model's training ctx
  int32_t n_threads = 0;       // 0 = physical cores
  int32_t n_seq_max = 1;       // sequences that may be live at once
  int32_t n_batch = 512;       // most tokens per step (larger prompts are cut into chunks)
  std::string device = "cpu";  // cpu | ref | ref-exact (ref: RefOps with llama.cpp's rounding points;
                               // ref-exact: RefOps, math as written). cuda / emulated: runtime::open.
  uint64_t vram_budget = 0;    // bytes; 0 = no budget (whole model on the device if it fits)
  // device "cpu": the CPU kernels' dispatch level by name (kernels::resolve_cpu_isa): "" or "auto" for
  // the default (the best this CPU has, or FERRY_CPU_ISA), else scalar | avx2 | avx2-vnni | avx512 |
  // amx; one this CPU lacks is an error.
  std::string cpu_isa;
  // device "cpu": copy the weights into transparent huge pages (engine/huge_weights.h) when that is
  // possible; the environment variable FERRY_CPU_HUGEPAGES=0 also turns it off.
  bool cpu_huge_pages = true;
  RunnerFactory runner_factory;  // set: builds the runner (device is then the factory's business)
};

class Engine {
 public:
  static Expected<std::unique_ptr<Engine>> load(const EngineOptions& options);
  virtual ~Engine() = default;

  virtual const model::ModelSpec& spec() const = 0;
  virtual const text::Tokenizer& tokenizer() const = 0;
  virtual const gguf::ModelFile& file() const = 0;
  virtual const EngineOptions& options() const = 0;

  // Runs one step (batch.size() <= n_batch). Appends n_vocab floats to *logits for every token with
  // batch.logits[i] == 1, in batch order. Errors: no free KV cell, bad seq id / position, device error.
  virtual Status step(const Batch& batch, std::vector<float>* logits) = 0;
  // Forget the cells of `seq` with position in [p0, p1) (p1 < 0: to the end).
  virtual void seq_rm(int32_t seq, int32_t p0 = 0, int32_t p1 = -1) = 0;
  // Next position of `seq` (1 + largest position held), 0 if empty.
  virtual int32_t seq_next_pos(int32_t seq) const = 0;
  virtual int32_t n_ctx() const = 0;
  // Debugging: called with every named intermediate of later steps (names as in model/forward.h,
  // e.g. "blk.7.attn_out"); the view is valid only during the call. An empty function turns it off.
  virtual void set_debug_hook(std::function<void(const std::string& name, const TensorView& t)> hook) {}
};

}  // namespace ferry::engine
