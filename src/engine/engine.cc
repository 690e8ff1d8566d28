// Engine::load and the Engine implementation: open the file, read the spec, bind the weights, build
// the tokenizer, pick the Ops for the device, and own the KV cell bookkeeping. step() validates a
// batch completely before anything is computed (a bad batch changes nothing), places its tokens in
// free cells, and hands the step to the StepRunner.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "base/env_options.h"
#include "engine/engine.h"
#include "engine/huge_weights.h"
#include "engine/kv_cells.h"
#include "engine/step_runner.h"
#include "format/gguf.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ref/ref_ops.h"
#include "model/model_spec.h"
#include "model/weights.h"
#include "text/tokenizer.h"

namespace ferry::engine {

namespace {

// The Ops that computes everything on `device`: "cpu" is CpuOps on n_threads threads (0: physical
// cores) at dispatch level cpu_isa; "ref" is RefOps with llama.cpp's rounding points, "ref-exact" RefOps with the math as
// written (both single-threaded).
Expected<std::unique_ptr<kernels::Ops>> make_ops(const std::string& device, int32_t n_threads,
                                                 const std::string& cpu_isa) {
  if (device == "cpu") {
    FERRY_ASSIGN_OR_RETURN(kernels::CpuIsa isa, kernels::resolve_cpu_isa(cpu_isa));
    return kernels::make_cpu_ops(n_threads, isa);
  }
  if (device == "ref") return kernels::make_ref_ops(kernels::RefNumerics::kLlamaCpp);
  if (device == "ref-exact") return kernels::make_ref_ops(kernels::RefNumerics::kExact);
  if (device == "cuda" || device == "emulated")
    return make_error(ErrorCode::kInvalidArgument,
                      "device '%s' runs the hybrid executor, which Engine::load does not build: open the model with "
                      "ferry::runtime::open (runtime/runtime.h)",
                      device.c_str());
  return make_error(ErrorCode::kInvalidArgument, "unknown device '%s' (expected cpu, ref, ref-exact, cuda or emulated)",
                    device.c_str());
}

class EngineImpl final : public Engine {
 public:
  const model::ModelSpec& spec() const override { return spec_; }
  const text::Tokenizer& tokenizer() const override { return *tokenizer_; }
  const gguf::ModelFile& file() const override { return *file_; }
  const EngineOptions& options() const override { return options_; }
  int32_t n_ctx() const override { return cells_->size(); }
  int32_t seq_next_pos(int32_t seq) const override { return cells_->seq_next_pos(seq); }
  void seq_rm(int32_t seq, int32_t p0, int32_t p1) override { cells_->seq_rm(seq, p0, p1); }
  void set_debug_hook(std::function<void(const std::string&, const TensorView&)> hook) override {
    runner_->set_debug_hook(std::move(hook));
  }

  Status step(const Batch& batch, std::vector<float>* logits) override;

  static Expected<std::unique_ptr<Engine>> load(const EngineOptions& options);

 private:
  Status validate(const Batch& batch);

  EngineOptions options_;
  std::unique_ptr<gguf::ModelFile> file_;
  model::ModelSpec spec_;
  model::ModelWeights weights_;
  std::unique_ptr<HugePageBuffer> huge_weights_;  // where weights_ points when set (outlives runner_)
  std::unique_ptr<text::Tokenizer> tokenizer_;
  std::unique_ptr<KvCells> cells_;
  std::unique_ptr<StepRunner> runner_;
  std::vector<int32_t> cell_of_token_;  // scratch: cells of the current step
  std::vector<int32_t> out_rows_;       // scratch: rows that want logits
  // Scratch of validate: the batch's (seq, pos), sorted. Members (like the two above) so a step
  // allocates nothing once the largest batch has been seen.
  std::vector<std::pair<int32_t, int32_t>> seen_;
  std::vector<float> discard_;          // logits of a step whose caller passed none
};

Expected<std::unique_ptr<Engine>> EngineImpl::load(const EngineOptions& options) {
  if (options.n_ctx < 0) return make_error(ErrorCode::kInvalidArgument, "n_ctx must be >= 0 (got %d)", options.n_ctx);
  if (options.n_batch < 1) return make_error(ErrorCode::kInvalidArgument, "n_batch must be >= 1 (got %d)", options.n_batch);
  if (options.n_seq_max < 1)
    return make_error(ErrorCode::kInvalidArgument, "n_seq_max must be >= 1 (got %d)", options.n_seq_max);
  if (options.n_threads < 0)
    return make_error(ErrorCode::kInvalidArgument, "n_threads must be >= 0 (got %d)", options.n_threads);

  auto e = std::make_unique<EngineImpl>();
  e->options_ = options;
  FERRY_ASSIGN_OR_RETURN(e->file_, gguf::ModelFile::open(options.model_path));
  FERRY_ASSIGN_OR_RETURN(e->spec_, model::ModelSpec::from_gguf(*e->file_));
  FERRY_ASSIGN_OR_RETURN(e->weights_, model::bind_weights(e->spec_, *e->file_));
  FERRY_ASSIGN_OR_RETURN(e->tokenizer_, text::Tokenizer::from_gguf(*e->file_));
  if (e->tokenizer_->vocab_size() != e->spec_.n_vocab)
    return make_error(ErrorCode::kCorrupt, "tokenizer has %d tokens but the model's vocabulary is %d",
                      e->tokenizer_->vocab_size(), e->spec_.n_vocab);

  const int32_t n_ctx = options.n_ctx > 0 ? options.n_ctx : e->spec_.n_ctx_train;
  e->options_.n_ctx = n_ctx;
  e->options_.n_batch = std::min(options.n_batch, n_ctx);
  e->cells_ = std::make_unique<KvCells>(n_ctx);
  if (options.runner_factory) {
    FERRY_ASSIGN_OR_RETURN(e->runner_,
                           options.runner_factory(e->spec_, e->weights_, *e->file_, n_ctx, &e->options_.n_batch));
    e->options_.n_batch = std::min(e->options_.n_batch, n_ctx);
    return std::unique_ptr<Engine>(std::move(e));
  }
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<kernels::Ops> ops, make_ops(options.device, options.n_threads, options.cpu_isa));
  if (options.device == "cpu" && options.cpu_huge_pages && env_options().cpu_huge_pages)
    e->huge_weights_ = copy_weights_to_huge_pages(*e->file_, &e->weights_, options.n_threads);
  FERRY_ASSIGN_OR_RETURN(e->runner_,
                         make_ops_runner(e->spec_, e->weights_, std::move(ops), n_ctx, e->options_.n_batch));
  return std::unique_ptr<Engine>(std::move(e));
}

Status EngineImpl::validate(const Batch& batch) {
  const int32_t n = batch.size();
  if (n == 0) return make_error(ErrorCode::kInvalidArgument, "empty batch");
  if (batch.pos.size() != batch.tokens.size() || batch.seq.size() != batch.tokens.size() ||
      batch.logits.size() != batch.tokens.size())
    return make_error(ErrorCode::kInvalidArgument, "batch arrays differ in length (tokens %zu, pos %zu, seq %zu, logits %zu)",
                      batch.tokens.size(), batch.pos.size(), batch.seq.size(), batch.logits.size());
  if (n > options_.n_batch)
    return make_error(ErrorCode::kInvalidArgument, "batch of %d tokens exceeds n_batch %d", n, options_.n_batch);
  const bool embd_rows = !batch.embd.empty();
  if (embd_rows && batch.embd.size() != static_cast<size_t>(n) * static_cast<size_t>(spec_.n_embd))
    return make_error(ErrorCode::kInvalidArgument, "batch embeddings hold %zu floats, expected %d rows of %d",
                      batch.embd.size(), n, spec_.n_embd);
  if (!batch.mrope_pos.empty()) {
    if (spec_.rope_sections[0] + spec_.rope_sections[1] + spec_.rope_sections[2] + spec_.rope_sections[3] == 0)
      return make_error(ErrorCode::kInvalidArgument, "M-RoPE positions given for a %s model, which has no rope sections",
                        model::arch_name(spec_.arch));
    if (batch.mrope_pos.size() != 4 * static_cast<size_t>(n))
      return make_error(ErrorCode::kInvalidArgument, "batch M-RoPE positions hold %zu values, expected 4 x %d",
                        batch.mrope_pos.size(), n);
    for (int32_t p : batch.mrope_pos)
      if (p < 0) return make_error(ErrorCode::kInvalidArgument, "negative M-RoPE position %d", p);
  }
  if (batch.n_decode < -1 || batch.n_decode > n)
    return make_error(ErrorCode::kInvalidArgument, "n_decode %d is outside -1..%d", batch.n_decode, n);
  seen_.clear();
  for (int32_t i = 0; i < n; ++i) {
    if ((batch.tokens[i] < 0 && !(embd_rows && batch.tokens[i] == -1)) || batch.tokens[i] >= spec_.n_vocab)
      return make_error(ErrorCode::kInvalidArgument, "token id %d at batch row %d is outside the vocabulary (0..%d)",
                        batch.tokens[i], i, spec_.n_vocab - 1);
    if (batch.seq[i] < 0 || batch.seq[i] >= options_.n_seq_max)
      return make_error(ErrorCode::kInvalidArgument, "sequence id %d at batch row %d is outside 0..%d", batch.seq[i], i,
                        options_.n_seq_max - 1);
    if (batch.pos[i] < 0)
      return make_error(ErrorCode::kInvalidArgument, "negative position %d at batch row %d", batch.pos[i], i);
    seen_.emplace_back(batch.seq[i], batch.pos[i]);
  }
  // A (seq, pos) given twice in the batch, or already held by a cell: sorted pairs, then one pass over
  // the cells with a binary search each (no per-step allocation, O((n + cells) log n)).
  std::sort(seen_.begin(), seen_.end());
  auto dup = std::adjacent_find(seen_.begin(), seen_.end());
  const int32_t* cpos = cells_->pos_data();
  const int32_t* cseq = cells_->seq_data();
  for (int32_t c = 0; dup == seen_.end() && c < cells_->size(); ++c) {
    if (cseq[c] < 0) continue;
    auto it = std::lower_bound(seen_.begin(), seen_.end(), std::make_pair(cseq[c], cpos[c]));
    if (it != seen_.end() && *it == std::make_pair(cseq[c], cpos[c])) dup = it;
  }
  if (dup != seen_.end())
    return make_error(ErrorCode::kInvalidArgument,
                      "position %d of sequence %d is already in the KV cache or the batch (seq_rm it first)",
                      dup->second, dup->first);
  return Status::ok();
}

Status EngineImpl::step(const Batch& batch, std::vector<float>* logits) {
  FERRY_RETURN_IF_ERROR(validate(batch));
  const int32_t n = batch.size();
  FERRY_RETURN_IF_ERROR(cells_->allocate(batch.seq.data(), batch.pos.data(), n, &cell_of_token_));

  out_rows_.clear();
  for (int32_t i = 0; i < n; ++i)
    if (batch.logits[i]) out_rows_.push_back(i);

  StepInput in;
  in.n_tokens = n;
  in.tokens = batch.tokens.data();
  in.pos = batch.pos.data();
  in.seq = batch.seq.data();
  in.cell = cell_of_token_.data();
  in.cell_pos = cells_->pos_data();
  in.cell_seq = cells_->seq_data();
  in.n_cells_scan = cells_->scan_end();
  in.out_rows = out_rows_.data();
  in.n_out = static_cast<int32_t>(out_rows_.size());
  in.embd = batch.embd.empty() ? nullptr : batch.embd.data();
  in.mrope_pos = batch.mrope_pos.empty() ? nullptr : batch.mrope_pos.data();
  in.n_decode = batch.n_decode;

  const size_t old = logits ? logits->size() : 0;
  discard_.clear();
  std::vector<float>* dst = logits ? logits : &discard_;
  dst->resize(old + out_rows_.size() * static_cast<size_t>(spec_.n_vocab));
  Status st = runner_->run(in, dst->data() + old);
  if (!st.is_ok()) {
    cells_->release(cell_of_token_);
    dst->resize(old);
  }
  return st;
}

}  // namespace

Expected<std::unique_ptr<Engine>> Engine::load(const EngineOptions& options) { return EngineImpl::load(options); }

}  // namespace ferry::engine
