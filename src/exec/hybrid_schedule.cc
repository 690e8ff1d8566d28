// HybridRunner, one step: pick the tier of its token count, stage the batch metadata (one pinned mirror,
// one upload), then run the sub-layers in order. Device work goes on the compute stream; the copy
// stream fills the ring up to K streamed sub-layers ahead (a slot freed by its consumer takes the next
// streamed sub-layer at once); the residual stream crosses through pinned buffers where the placement
// changes between the device and the CPU, and only there does the host wait. After the step, the next
// step's first K fills start at once (weights do not depend on data).
#include <algorithm>
#include <cstring>

#include "exec/hybrid_runner_impl.h"

namespace ferry::exec::detail {

using model::SubLayerKind;
using plan::Placement;

size_t HybridRunnerImpl::tier_for(int32_t n_tokens) const {
  for (size_t t = 0; t < plan_.tiers.size(); ++t)
    if (plan_.tiers[t].tokens >= n_tokens) return t;
  return plan_.tiers.size() - 1;
}

Status HybridRunnerImpl::on_device(std::function<void(kernels::Ops&)> fn) {
  if (on_cuda_) {
    fn(cuda_ops_->ops());
    return Status::ok();
  }
  kernels::Ops* ops = emulated_ops_.get();
  return device_->host_fn(*compute_stream_, [ops, fn = std::move(fn)] { fn(*ops); });
}

void HybridRunnerImpl::stage_meta(const StepIo& in, int32_t scan, kernels::BatchMeta* host_batch,
                                  kernels::KvView* host_kv, kernels::BatchMeta* device_batch,
                                  kernels::KvView* device_kv) {
  const int32_t n = in.n_tokens, real = in.n_cells_scan;
  int32_t* h = host_meta_;
  if (in.tokens != nullptr) std::memcpy(h, in.tokens, n * sizeof(int32_t));
  else std::fill(h, h + n, -1);  // image rows
  std::memcpy(h + n, in.pos, n * sizeof(int32_t));
  std::memcpy(h + 2 * n, in.seq, n * sizeof(int32_t));
  std::memcpy(h + 3 * n, in.cell, n * sizeof(int32_t));
  std::memcpy(h + 4 * n, in.cell_pos, real * sizeof(int32_t));
  std::fill(h + 4 * n + real, h + 4 * n + scan, -1);
  std::memcpy(h + 4 * n + scan, in.cell_seq, real * sizeof(int32_t));
  std::fill(h + 4 * n + scan + real, h + 4 * n + 2 * scan, -1);
  if (in.mrope_pos != nullptr) std::memcpy(h + 4 * n + 2 * scan, in.mrope_pos, 4ull * n * sizeof(int32_t));
  auto views = [&](int32_t* base, Where where, kernels::BatchMeta* b, kernels::KvView* kv) {
    b->n_tokens = n;
    b->pos = TensorView::make(DType::I32, base + n, n, 1, 1, 1, where);
    b->seq = TensorView::make(DType::I32, base + 2 * n, n, 1, 1, 1, where);
    b->cell = TensorView::make(DType::I32, base + 3 * n, n, 1, 1, 1, where);
    kv->cell_pos = TensorView::make(DType::I32, base + 4 * n, std::max(scan, 1), 1, 1, 1, where);
    kv->cell_seq = TensorView::make(DType::I32, base + 4 * n + scan, std::max(scan, 1), 1, 1, 1, where);
    kv->n_cells = scan;
    b->mrope_pos = in.mrope_pos != nullptr
                       ? TensorView::make(DType::I32, base + 4 * n + 2 * scan, 4 * n, 1, 1, 1, where)
                       : TensorView{};
  };
  if (host_batch) views(h, Where::kHost, host_batch, host_kv);
  views(device_meta_, device_where_, device_batch, device_kv);
}

Status HybridRunnerImpl::fill_events(size_t j, Event** t0, Event** t1) {
  while (fill_start_events_.size() <= j) {
    FERRY_ASSIGN_OR_RETURN(auto start, device_->create_event(true));
    FERRY_ASSIGN_OR_RETURN(auto end, device_->create_event(true));
    fill_start_events_.push_back(std::move(start));
    fill_end_events_.push_back(std::move(end));
  }
  *t0 = fill_start_events_[j].get();
  *t1 = fill_end_events_[j].get();
  return Status::ok();
}

Status HybridRunnerImpl::fill(size_t tier, size_t j, Event* t0, Event* t1, bool* copied_out, TierStats* stats) {
  const std::vector<size_t>& streamed = streamed_by_tier_[tier];
  if (j >= streamed.size()) return Status::ok();
  const size_t i = streamed[j];
  const int32_t k = static_cast<int32_t>(j % ring_->slots());
  bool copied = false;
  FERRY_RETURN_IF_ERROR(ring_->fill(k, static_cast<int32_t>(i), fill_pieces_[i], *copy_stream_, t0, t1, &copied));
  if (copied_out) *copied_out = copied;
  if (stats) {
    if (copied) {
      ++stats->copies;
      for (const WeightRing::Piece& p : fill_pieces_[i]) stats->copy_bytes += p.bytes;
    } else {
      ++stats->prefetch_hits;
    }
  }
  return Status::ok();
}

Status HybridRunnerImpl::fill_ring_upto(Step& step, size_t end) {
  const size_t n_streamed = streamed_by_tier_[step.tier].size();
  for (; step.fills_issued < std::min(end, n_streamed); ++step.fills_issued) {
    const size_t j = step.fills_issued;
    Event* t0 = nullptr;
    Event* t1 = nullptr;
    if (step.timed) FERRY_RETURN_IF_ERROR(fill_events(j, &t0, &t1));
    bool copied = false;
    FERRY_RETURN_IF_ERROR(fill(step.tier, j, t0, t1, &copied, &tier_stats_[step.tier]));
    if (step.timed) {
      if (fill_copied_.size() <= j) fill_copied_.resize(j + 1);
      fill_copied_[j] = copied;
    }
  }
  return Status::ok();
}

Status HybridRunnerImpl::residual_to_device(Step& step) {
  const size_t bytes = static_cast<size_t>(spec_.n_embd) * step.n * sizeof(float);
  const Status s = device_->copy_h2d(device_scratch_.x.data, host_scratch_.x.data, bytes, *compute_stream_);
  step.x_on_device = true;
  return s;
}

Status HybridRunnerImpl::residual_to_host(Step& step) {
  const size_t bytes = static_cast<size_t>(spec_.n_embd) * step.n * sizeof(float);
  Status s = device_->copy_d2h(host_scratch_.x.data, device_scratch_.x.data, bytes, *compute_stream_);
  if (s.is_ok()) s = device_->record(*handover_event_, *compute_stream_);
  const double wait_start = now_ms();
  if (s.is_ok()) s = device_->sync(*handover_event_);
  if (step.recording) step.host_waits.emplace_back(wait_start, now_ms());
  step.x_on_device = false;
  return s;
}

Status HybridRunnerImpl::device_sublayer(size_t i, const Step& step) {
  const model::SubLayer& s = sublayers_[i];
  const model::ModelSpec* spec = &spec_;
  const model::ModelWeights* w = &device_weights_;
  const model::Scratch* ds = &device_scratch_;
  const int32_t n = step.n;
  switch (s.kind) {
    case SubLayerKind::kAttention: {
      kernels::KvView kv = step.device_kv;
      kv.k = kv_keys_[s.layer];
      kv.v = kv_values_[s.layer];
      const kernels::BatchMeta db = step.device_batch;
      const int32_t il = s.layer;
      return on_device([=](kernels::Ops& ops) { model::forward_attention(ops, *spec, *w, il, db, kv, *ds, nullptr); });
    }
    case SubLayerKind::kFfn: {
      const int32_t il = s.layer;
      if (model::is_ffn_slice(s)) {
        // Read in stream order (a streamed slice's views are rebound on the emulated device's worker).
        const model::FfnSlice* sl = &device_slices_[i];
        return on_device([=](kernels::Ops& ops) { model::forward_ffn_slice(ops, *spec, *w, il, *sl, n, *ds, nullptr); });
      }
      return on_device([=](kernels::Ops& ops) { model::forward_ffn(ops, *spec, *w, il, n, *ds, nullptr); });
    }
    case SubLayerKind::kHead: {
      const StepIo& in = *step.in;
      const size_t V = static_cast<size_t>(spec_.n_vocab);
      for (int32_t r0 = 0; r0 < in.n_out; r0 += sizes_.n_out_dev) {
        const int32_t nr = std::min(sizes_.n_out_dev, in.n_out - r0);
        const int32_t* rows = in.out_rows + r0;
        FERRY_RETURN_IF_ERROR(
            on_device([=](kernels::Ops& ops) { model::forward_head(ops, *spec, *w, rows, nr, *ds, nullptr); }));
        FERRY_RETURN_IF_ERROR(device_->copy_d2h(host_scratch_.logits.data, device_scratch_.logits.data,
                                                nr * V * sizeof(float), *compute_stream_));
        FERRY_RETURN_IF_ERROR(device_->record(*handover_event_, *compute_stream_));
        FERRY_RETURN_IF_ERROR(device_->sync(*handover_event_));
        std::memcpy(step.logits + r0 * V, host_scratch_.logits.data, nr * V * sizeof(float));
      }
      return Status::ok();
    }
    case SubLayerKind::kMoeRouter: {
      const int32_t il = s.layer;
      return on_device([=](kernels::Ops& ops) { model::forward_moe_router(ops, *spec, *w, il, n, *ds, nullptr); });
    }
    case SubLayerKind::kExperts: {  // a resident group: it sums into proj after the layer's device groups before it
      const kernels::ExpertGroup* g = &device_groups_[i];
      const bool acc = moe_device_group_before(step.tier, i);
      return on_device(
          [=](kernels::Ops& ops) { model::forward_moe_group(ops, *spec, *g, n, *ds, ds->proj.rows(0, n), acc); });
    }
    default:
      return make_error(ErrorCode::kUnsupported, "%s on the device", s.label().c_str());
  }
}

Status HybridRunnerImpl::cpu_sublayer(size_t i, const Step& step) {
  const model::SubLayer& s = sublayers_[i];
  const model::DebugHook* hook = debug_hook_ ? &debug_hook_ : nullptr;
  switch (s.kind) {
    case SubLayerKind::kEmbed:
      if (step.in->embd != nullptr) {  // image rows (token -1): their embeddings replace the token lookup
        const TensorView rows = TensorView::make(DType::F32, const_cast<float*>(step.in->embd), spec_.n_embd, step.n);
        model::forward_embed_mixed(*cpu_ops_, spec_, host_weights_, step.host_tokens, rows, host_scratch_, hook);
      } else {
        model::forward_embed(*cpu_ops_, spec_, host_weights_, step.host_tokens, host_scratch_, hook);
      }
      break;
    case SubLayerKind::kFfn:
      if (model::is_ffn_slice(s)) return make_error(ErrorCode::kInternal, "%s outside its slices' run", s.label().c_str());
      model::forward_ffn(*cpu_ops_, spec_, host_weights_, s.layer, step.n, host_scratch_, hook);
      break;
    case SubLayerKind::kHead: {
      const StepIo& in = *step.in;
      const size_t V = static_cast<size_t>(spec_.n_vocab);
      for (int32_t r0 = 0; r0 < in.n_out; r0 += host_scratch_.n_out_max) {
        const int32_t nr = std::min(host_scratch_.n_out_max, in.n_out - r0);
        model::forward_head(*cpu_ops_, spec_, host_weights_, in.out_rows + r0, nr, host_scratch_, hook);
        std::memcpy(step.logits + r0 * V, host_scratch_.logits.data, nr * V * sizeof(float));
      }
      break;
    }
    default:
      return make_error(ErrorCode::kUnsupported, "%s on the CPU", s.label().c_str());
  }
  return Status::ok();
}

Status HybridRunnerImpl::run_sublayers(Step& step) {
  const std::vector<Placement>& pl = placements_[step.tier];
  const std::vector<uint8_t>& split = split_ffn_by_tier_[step.tier];
  const size_t m = sublayers_.size();
  for (size_t i = 0; i < m; ++i) {
    if (sublayers_[i].kind == SubLayerKind::kMoeRouter) {  // a mixture-of-experts layer: router and groups
      const size_t e = moe_layer_end(i);
      FERRY_RETURN_IF_ERROR(run_moe_layer(step, i, e));
      i = e - 1;
      continue;
    }
    if (split[i]) {  // the first of a layer's FFN slices, some on the CPU: all of them at once
      Status s = step.x_on_device ? Status::ok() : residual_to_device(step);
      step.x_on_device = true;
      const size_t e = i + static_cast<size_t>(sublayers_[i].n_slices);
      if (s.is_ok()) s = run_slices(step, i, e);
      FERRY_RETURN_IF_ERROR(s);
      i = e - 1;
      continue;
    }
    const bool on_dev = pl[i] != Placement::kCpu;
    if (on_dev && !step.x_on_device) {
      FERRY_RETURN_IF_ERROR(residual_to_device(step));
    } else if (!on_dev && step.x_on_device) {
      FERRY_RETURN_IF_ERROR(residual_to_host(step));
    }
    if (!on_dev) {
      step.cpu_start_ms[i] = now_ms();
      const Status s = cpu_sublayer(i, step);
      step.cpu_end_ms[i] = now_ms();
      FERRY_RETURN_IF_ERROR(s);
      continue;
    }
    // Segment graphs: runs of resident device sub-layers replayed from CUDA graphs (the step scans a
    // bucket of cells then; device and host views both see the padding cells). A resident router ends
    // its run (its layer's routing goes on from run_moe_layer), and a lone attention counts as a run (in
    // a mixture-of-experts model it sits between two routers): it is a dozen kernels.
    auto graphable = [&](size_t j) {
      const SubLayerKind k = sublayers_[j].kind;
      return pl[j] == Placement::kResident &&
             (k == SubLayerKind::kAttention || k == SubLayerKind::kFfn || k == SubLayerKind::kMoeRouter) && !split[j];
    };
    if (step.segment_graphs && graphable(i)) {
      size_t e = i;
      while (e < m && graphable(e) && (e == i || sublayers_[e - 1].kind != SubLayerKind::kMoeRouter)) ++e;
      const bool to_router = sublayers_[e - 1].kind == SubLayerKind::kMoeRouter;
      if (e - i >= 2 || sublayers_[i].kind == SubLayerKind::kAttention) {
        FERRY_RETURN_IF_ERROR(replay_segment(step, i, e));
        if (to_router) {  // the rest of the router's layer, its router already enqueued
          const size_t end = moe_layer_end(e - 1);
          FERRY_RETURN_IF_ERROR(run_moe_layer(step, e - 1, end, /*router_enqueued=*/true));
          e = end;
        }
        i = e - 1;  // the loop's ++i moves past the segment
        continue;
      }
    }
    FERRY_RETURN_IF_ERROR(device_work(step, i, [&] { return device_sublayer(i, step); }));
  }
  return Status::ok();
}

Status HybridRunnerImpl::prefetch_next_step(Step& step) {
  const std::vector<size_t>& streamed = streamed_by_tier_[step.tier];
  TierStats& stats = tier_stats_[step.tier];
  Status s = Status::ok();
  for (size_t j = 0; j < std::min(step.ring_slots, streamed.size()) && s.is_ok(); ++j) {
    const bool timeline_copy = step.recording && j < prefetch_start_events_.size();
    bool copied = false;
    s = fill(step.tier, j, timeline_copy ? prefetch_start_events_[j].get() : nullptr,
             timeline_copy ? prefetch_end_events_[j].get() : nullptr, &copied, nullptr);
    if (s.is_ok() && copied) {
      ++stats.prefetch_copies;
      stats.prefetch_bytes += slot_layouts_[streamed[j]].bytes;
    }
    if (s.is_ok() && timeline_copy && copied)
      pending_prefetches_.push_back(
          {j, "prefetch " + sublayers_[streamed[j]].label(), slot_layouts_[streamed[j]].bytes, timeline_step_});
  }
  return s;
}

Status HybridRunnerImpl::run(const StepIo& in, float* logits) {
  const double start_ms = now_ms();
  const int32_t n = in.n_tokens;
  if (n <= 0 || n > options_.n_batch)
    return make_error(ErrorCode::kInvalidArgument, "step of %d tokens (batch holds %d)", n, options_.n_batch);
  if (in.n_cells_scan > options_.n_cells)
    return make_error(ErrorCode::kInvalidArgument, "step scans %d cells, the cache has %d", in.n_cells_scan,
                      options_.n_cells);
  // After an image: the resident weights come back before anything reads them.
  FERRY_RETURN_IF_ERROR(restore_residents());
  const size_t tier = tier_for(n);
  if (timeline_ && timeline_->full()) timeline_ = nullptr;
  const bool recording = timeline_ != nullptr;
  if (recording) begin_timeline_step(tier, n, start_ms);

  {
    bool used = false;
    Status gs = run_whole_step_graph(in, logits, tier, &used);
    if (used) {
      if (!gs.is_ok()) {
        (void)device_->synchronize();
        return gs;
      }
      model::apply_logit_softcap(spec_, logits, static_cast<int64_t>(in.n_out) * spec_.n_vocab);
      count_step(tier, in, start_ms);
      return Status::ok();
    }
  }

  Step step;
  step.in = &in;
  step.logits = logits;
  step.tier = tier;
  step.n = n;
  step.recording = recording;
  step.timed = options_.measure || recording;
  step.segment_graphs = on_cuda_ && options_.cuda_graphs && !step.timed && n <= options_.graph_max_tokens;
  step.scan = step.segment_graphs ? scan_bucket(in.n_cells_scan) : in.n_cells_scan;
  stage_meta(in, step.scan, &step.host_batch, &step.host_kv, &step.device_batch, &step.device_kv);
  step.host_tokens = TensorView::make(DType::I32, host_meta_, n);
  step.ring_slots = ring_ ? static_cast<size_t>(ring_->slots()) : 0;
  step.cpu_start_ms.assign(sublayers_.size(), -1.0);
  step.cpu_end_ms.assign(sublayers_.size(), -1.0);
  // Prefetches the previous step issued after its end: their spans are complete now (this step's
  // first acquires wait for them), resolved at this step's end.
  step.previous_prefetches.swap(pending_prefetches_);

  Status s = device_->copy_h2d(device_meta_, host_meta_, meta_ints(in, step.scan) * sizeof(int32_t), *compute_stream_);
  if (s.is_ok() && ring_) s = fill_ring_upto(step, step.ring_slots);
  if (s.is_ok()) s = run_sublayers(step);
  const double wait_start = now_ms();
  if (s.is_ok()) s = device_->sync(*compute_stream_);
  if (recording) step.host_waits.emplace_back(wait_start, now_ms());
  if (s.is_ok() && on_cuda_) s = cuda_ops_->status();
  if (!s.is_ok()) {
    (void)device_->synchronize();
    if (ring_) ring_->forget();
    return s;
  }
  model::apply_logit_softcap(spec_, logits, static_cast<int64_t>(in.n_out) * spec_.n_vocab);

  // Measurements of this step (the copy stream may still run ahead: only in-step copies are timed).
  if (step.timed) s = record_step_times(step);
  // Weights do not depend on data: start the next step's first copies now (assuming the same tier,
  // the common case in decode); the next step reuses them if its tier agrees.
  if (s.is_ok() && ring_ && !options_.measure) s = prefetch_next_step(step);
  // The hot-expert cache follows this step's routing (its copies after the prefetches).
  if (s.is_ok()) s = promote_experts(step);
  count_cpu_time(step);
  count_step(tier, in, start_ms);
  if (recording) end_timeline_step();
  return s;
}

}  // namespace ferry::exec::detail
