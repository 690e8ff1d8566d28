// HybridRunner, CUDA graphs: decode steps whose sub-layers after the embedding are all resident replay
// one graph per (tier, tokens, logits rows, bucket of scanned KV cells); other steps of up to
// graph_max_tokens tokens replay runs of >= 2 resident sub-layers from segment graphs. Padding cells of a
// bucket carry sequence -1 and position -1, which no query sees. A device or driver that cannot capture
// turns graphs off for the runner's life and the step runs op by op.
#include <algorithm>
#include <cstring>

#include "exec/hybrid_runner_impl.h"

namespace ferry::exec::detail {

using model::SubLayerKind;

int32_t HybridRunnerImpl::scan_bucket(int32_t scan) const {
  int32_t g = 256;
  while (g * 8 < scan) g *= 2;
  return std::min(options_.n_cells, (std::max(scan, 1) + g - 1) / g * g);
}

Expected<int> HybridRunnerImpl::find_or_capture(GraphKey key, const std::function<void()>& enqueue) {
  for (const auto& [k, gid] : graphs_)
    if (k == key) return gid;
  if (graphs_.size() >= 256) {  // bounded: start over (steps keep working, capture is ~ms)
    cuda_ops_->drop_graphs();
    graphs_.clear();
  }
  FERRY_RETURN_IF_ERROR(cuda_ops_->begin_capture());
  enqueue();
  FERRY_ASSIGN_OR_RETURN(int id, cuda_ops_->end_capture());
  const size_t tier = key.tier;
  graphs_.emplace_back(std::move(key), id);
  ++tier_stats_[tier].graph_captures;
  return id;
}

Status HybridRunnerImpl::replay_segment(const Step& step, size_t first, size_t end) {
  GraphKey key{step.tier, step.n, step.device_kv.n_cells, {}, first, end, step.in->mrope_pos != nullptr};
  auto id = find_or_capture(key, [&] {
    for (size_t i = first; i < end; ++i) (void)device_sublayer(i, step);
  });
  if (!id) {  // this device / driver cannot capture: enqueue one by one from now on
    cuda_ops_->clear_status();
    options_.cuda_graphs = false;
    for (size_t i = first; i < end; ++i) FERRY_RETURN_IF_ERROR(device_sublayer(i, step));
    return Status::ok();
  }
  ++tier_stats_[step.tier].graph_replays;
  return cuda_ops_->replay(*id);
}

Status HybridRunnerImpl::run_whole_step_graph(const StepIo& in, float* logits, size_t tier, bool* used) {
  *used = false;
  const int32_t n = in.n_tokens;
  if (!on_cuda_ || !options_.cuda_graphs || options_.measure || timeline_ || !whole_step_graph_ok_[tier] ||
      n > options_.graph_max_tokens || in.n_out < 1 || in.n_out > sizes_.n_out_dev)
    return Status::ok();
  *used = true;
  // Scan a bucket of cells (<= 1/8 extra beyond 2048 cells) so one graph serves many steps.
  const int32_t bucket = scan_bucket(in.n_cells_scan);
  kernels::BatchMeta db;
  kernels::KvView dkv;
  stage_meta(in, bucket, nullptr, nullptr, &db, &dkv);
  int32_t* h = host_meta_;

  // Embedding on the CPU (one row per token, or the step's image rows), then everything else from the graph.
  const model::DebugHook* hook = debug_hook_ ? &debug_hook_ : nullptr;
  if (in.embd != nullptr) {
    const TensorView rows = TensorView::make(DType::F32, const_cast<float*>(in.embd), spec_.n_embd, n);
    model::forward_embed_mixed(*cpu_ops_, spec_, host_weights_, TensorView::make(DType::I32, h, n), rows, host_scratch_,
                               hook);
  } else {
    model::forward_embed(*cpu_ops_, spec_, host_weights_, TensorView::make(DType::I32, h, n), host_scratch_, hook);
  }
  const size_t d_bytes = static_cast<size_t>(spec_.n_embd) * n * sizeof(float);
  FERRY_RETURN_IF_ERROR(device_->copy_h2d(device_meta_, h, meta_ints(in, bucket) * sizeof(int32_t), *compute_stream_));
  FERRY_RETURN_IF_ERROR(device_->copy_h2d(device_scratch_.x.data, host_scratch_.x.data, d_bytes, *compute_stream_));

  GraphKey key{tier, n, bucket, std::vector<int32_t>(in.out_rows, in.out_rows + in.n_out), 0, 0, in.mrope_pos != nullptr};
  auto captured = find_or_capture(std::move(key), [&] {
    const model::ModelSpec* spec = &spec_;
    const model::ModelWeights* w = &device_weights_;
    const model::Scratch* ds = &device_scratch_;
    kernels::Ops& ops = cuda_ops_->ops();
    for (size_t i = 1; i < sublayers_.size(); ++i) {
      const model::SubLayer& sl = sublayers_[i];
      switch (sl.kind) {
        case SubLayerKind::kAttention: {
          kernels::KvView kv = dkv;
          kv.k = kv_keys_[sl.layer];
          kv.v = kv_values_[sl.layer];
          model::forward_attention(ops, *spec, *w, sl.layer, db, kv, *ds, nullptr);
          break;
        }
        case SubLayerKind::kFfn:
          if (model::is_ffn_slice(sl))
            model::forward_ffn_slice(ops, *spec, *w, sl.layer, device_slices_[i], n, *ds, nullptr);
          else
            model::forward_ffn(ops, *spec, *w, sl.layer, n, *ds, nullptr);
          break;
        case SubLayerKind::kHead: model::forward_head(ops, *spec, *w, in.out_rows, in.n_out, *ds, nullptr); break;
        default: break;
      }
    }
  });
  if (!captured) {
    cuda_ops_->clear_status();
    options_.cuda_graphs = false;  // this device / driver cannot capture: run ops one by one from now on
    *used = false;
    return Status::ok();
  }
  const int id = *captured;
  FERRY_RETURN_IF_ERROR(cuda_ops_->replay(id));
  const size_t V = static_cast<size_t>(spec_.n_vocab);
  FERRY_RETURN_IF_ERROR(
      device_->copy_d2h(host_scratch_.logits.data, device_scratch_.logits.data, in.n_out * V * sizeof(float), *compute_stream_));
  FERRY_RETURN_IF_ERROR(device_->record(*handover_event_, *compute_stream_));
  FERRY_RETURN_IF_ERROR(device_->sync(*handover_event_));
  FERRY_RETURN_IF_ERROR(cuda_ops_->status());
  std::memcpy(logits, host_scratch_.logits.data, in.n_out * V * sizeof(float));
  ++tier_stats_[tier].graph_replays;
  return Status::ok();
}

}  // namespace ferry::exec::detail
