// OpsRunner: the all-on-one-Ops StepRunner. A step is embed, then attention + FFN per layer, then
// the head over the rows that want logits, in chunks so the logits scratch stays small even for a
// 262k-token vocabulary.
#include "engine/step_runner.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <vector>

namespace ferry::engine {

namespace {

// Head rows computed per chunk: enough to amortize reading the output matrix, small enough that
// [n_vocab, chunk] F32 scratch stays modest (32 x 262144 x 4 B = 32 MiB for gemma3).
constexpr int32_t kHeadChunk = 32;

template <typename T>
Expected<std::unique_ptr<T[]>> alloc_array(size_t n, const char* what) {
  std::unique_ptr<T[]> p(new (std::nothrow) T[n]);
  if (!p)
    return make_error(ErrorCode::kOutOfMemory, "cannot allocate %zu MiB for the %s",
                      n * sizeof(T) / (1024 * 1024), what);
  return p;
}

class OpsRunner final : public StepRunner {
 public:
  OpsRunner(const model::ModelSpec& spec, const model::ModelWeights& weights, std::unique_ptr<kernels::Ops> ops,
            int32_t n_cells, int32_t n_batch)
      : spec_(spec), w_(weights), ops_(std::move(ops)), n_cells_(n_cells), n_batch_(n_batch) {}

  Status init() {
    const size_t kvd = static_cast<size_t>(spec_.kv_dim());
    const size_t per_layer = kvd * static_cast<size_t>(n_cells_);
    // Cells are never read before a step writes them (attention only visits cells the bookkeeping
    // marks used), so the cache needs no zero fill.
    FERRY_ASSIGN_OR_RETURN(kv_, alloc_array<uint16_t>(2 * per_layer * spec_.n_layer, "KV cache"));
    layer_k_.resize(spec_.n_layer);
    layer_v_.resize(spec_.n_layer);
    for (int32_t il = 0; il < spec_.n_layer; ++il) {
      uint16_t* base = kv_.get() + 2 * per_layer * il;
      layer_k_[il] = TensorView::make(DType::F16, base, spec_.kv_dim(), n_cells_);
      layer_v_[il] = TensorView::make(DType::F16, base + per_layer, spec_.kv_dim(), n_cells_);
    }
    const int32_t n_out_max = std::min(n_batch_, kHeadChunk);
    FERRY_ASSIGN_OR_RETURN(scratch_buf_,
                           alloc_array<float>(model::scratch_floats(spec_, n_batch_, n_out_max), "step scratch"));
    scratch_ = model::make_scratch(spec_, n_batch_, n_out_max, scratch_buf_.get());
    meta_.resize(7 * static_cast<size_t>(n_batch_));
    return Status::ok();
  }

  const char* name() const override { return ops_->name(); }
  void set_debug_hook(model::DebugHook hook) override { hook_ = std::move(hook); }

  Status run(const StepInput& in, float* logits) override {
    FERRY_ASSERT(in.n_tokens > 0 && in.n_tokens <= n_batch_);
    const int32_t n = in.n_tokens;
    const model::DebugHook* hook = hook_ ? &hook_ : nullptr;
    // Host Ops: batch metadata views point at our own copies (the Ops may not keep pointers).
    int32_t* tokens = meta_.data();
    int32_t* pos = tokens + n_batch_;
    int32_t* seq = pos + n_batch_;
    int32_t* mrope = seq + n_batch_;  // [4][n]
    std::memcpy(tokens, in.tokens, n * sizeof(int32_t));
    std::memcpy(pos, in.pos, n * sizeof(int32_t));
    std::memcpy(seq, in.seq, n * sizeof(int32_t));
    cells_.assign(in.cell, in.cell + n);

    kernels::BatchMeta batch;
    batch.n_tokens = n;
    batch.pos = TensorView::make(DType::I32, pos, n);
    batch.seq = TensorView::make(DType::I32, seq, n);
    batch.cell = TensorView::make(DType::I32, cells_.data(), n);
    if (in.mrope_pos != nullptr) {
      std::memcpy(mrope, in.mrope_pos, 4 * static_cast<size_t>(n) * sizeof(int32_t));
      batch.mrope_pos = TensorView::make(DType::I32, mrope, 4 * n);
    }
    const TensorView tok = TensorView::make(DType::I32, tokens, n);

    kernels::KvView kv;
    kv.cell_pos = TensorView::make(DType::I32, const_cast<int32_t*>(in.cell_pos), n_cells_);
    kv.cell_seq = TensorView::make(DType::I32, const_cast<int32_t*>(in.cell_seq), n_cells_);
    kv.n_cells = in.n_cells_scan;

    ops_->set_token_groups(n, in.n_decode);
    if (in.embd != nullptr) {
      const TensorView rows = TensorView::make(DType::F32, const_cast<float*>(in.embd), spec_.n_embd, n);
      model::forward_embed_rows(*ops_, spec_, rows, scratch_, hook);
    } else {
      model::forward_embed(*ops_, spec_, w_, tok, scratch_, hook);
    }
    for (int32_t il = 0; il < spec_.n_layer; ++il) {
      kv.k = layer_k_[il];
      kv.v = layer_v_[il];
      model::forward_attention(*ops_, spec_, w_, il, batch, kv, scratch_, hook);
      model::forward_ffn(*ops_, spec_, w_, il, n, scratch_, hook);
    }
    const size_t n_vocab = static_cast<size_t>(spec_.n_vocab);
    for (int32_t r0 = 0; r0 < in.n_out; r0 += scratch_.n_out_max) {
      const int32_t nr = std::min(scratch_.n_out_max, in.n_out - r0);
      // Batch-invariant: every head row by the decode kernels, whatever rows share the chunk.
      if (in.n_decode >= 0) ops_->set_token_groups(nr, nr);
      model::forward_head(*ops_, spec_, w_, in.out_rows + r0, nr, scratch_, hook);
      for (int32_t r = 0; r < nr; ++r)
        std::memcpy(logits + (r0 + r) * n_vocab, scratch_.logits.row(r), n_vocab * sizeof(float));
    }
    model::apply_logit_softcap(spec_, logits, static_cast<int64_t>(in.n_out) * spec_.n_vocab);
    return Status::ok();
  }

 private:
  const model::ModelSpec& spec_;
  const model::ModelWeights& w_;
  std::unique_ptr<kernels::Ops> ops_;
  int32_t n_cells_;
  int32_t n_batch_;
  std::unique_ptr<uint16_t[]> kv_;           // [n_layer][K, V][kv_dim * n_cells] F16
  std::vector<TensorView> layer_k_, layer_v_;  // [kv_dim, n_cells] F16 per layer
  std::unique_ptr<float[]> scratch_buf_;
  model::Scratch scratch_;
  std::vector<int32_t> meta_;                // tokens, pos, seq: [3][n_batch], M-RoPE positions [4][n_batch]
  std::vector<int32_t> cells_;
  model::DebugHook hook_;
};

}  // namespace

Expected<std::unique_ptr<StepRunner>> make_ops_runner(const model::ModelSpec& spec, const model::ModelWeights& weights,
                                                      std::unique_ptr<kernels::Ops> ops, int32_t n_cells,
                                                      int32_t n_batch) {
  if (n_cells <= 0 || n_batch <= 0)
    return make_error(ErrorCode::kInvalidArgument, "runner needs n_ctx > 0 and n_batch > 0 (got %d, %d)", n_cells,
                      n_batch);
  auto runner = std::make_unique<OpsRunner>(spec, weights, std::move(ops), n_cells, n_batch);
  FERRY_RETURN_IF_ERROR(runner->init());
  return std::unique_ptr<StepRunner>(std::move(runner));
}

}  // namespace ferry::engine
