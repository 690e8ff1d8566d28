// HybridRunner, FFN slices (model::is_ffn_slice): each slice's host views (into the mmap; a slice's
// columns of ffn_down strided, or gathered once when the CPU runs it) and device views (contiguous,
// bound to a resident block or a ring slot), and the layers whose slices run on the CPU and on the
// device at once.
#include "exec/hybrid_runner_impl.h"

namespace ferry::exec::detail {

using plan::Placement;

void HybridRunnerImpl::make_slice_views() {
  const size_t m = sublayers_.size();
  host_slices_.assign(m, {});
  device_slices_.assign(m, {});
  for (size_t i = 0; i < m; ++i) {
    const model::SubLayer& sl = sublayers_[i];
    if (!model::is_ffn_slice(sl)) continue;
    model::FfnSlice& h = host_slices_[i];
    h = model::ffn_slice_views(host_weights_.layers[sl.layer], sl.ff_begin, sl.ff_end);
    h.first = sl.slice == 0;
    h.last = sl.slice == sl.n_slices - 1;
    model::FfnSlice& d = device_slices_[i];
    d.first = h.first;
    d.last = h.last;
    for (auto [src, dst] : {std::pair{&h.gate, &d.gate}, {&h.up, &d.up}, {&h.down, &d.down}})
      *dst = TensorView::make(src->dtype, nullptr, src->ne[0], src->ne[1], 1, 1, device_where_);
  }
}

void HybridRunnerImpl::gather_cpu_slice_downs() {
  const size_t m = sublayers_.size();
  cpu_slice_downs_.resize(m);
  for (size_t i = 0; i < m; ++i) {
    bool cpu = false;
    for (const auto& pl : placements_) cpu |= pl[i] == Placement::kCpu;
    TensorView& d = host_slices_[i].down;
    if (!cpu || !model::is_ffn_slice(sublayers_[i]) || d.nb[1] == d.row_size()) continue;
    cpu_slice_downs_[i].resize(d.nbytes());
    gather_rows(d, 0, d.nrows(), reinterpret_cast<char*>(cpu_slice_downs_[i].data()));
    d = TensorView::make(d.dtype, cpu_slice_downs_[i].data(), d.ne[0], d.ne[1]);
  }
}

Status HybridRunnerImpl::run_slices(Step& step, size_t first, size_t end) {
  const std::vector<Placement>& pl = placements_[step.tier];
  const int32_t n = step.n;
  const model::ModelSpec* spec = &spec_;
  const model::ModelWeights* w = &device_weights_;
  const model::Scratch* ds = &device_scratch_;
  const int32_t il = sublayers_[first].layer;
  const size_t d_bytes = static_cast<size_t>(spec_.n_embd) * n * sizeof(float);
  // The device norms the residual and sends the normed rows down.
  FERRY_RETURN_IF_ERROR(
      on_device([=](kernels::Ops& ops) { model::forward_ffn_norm(ops, *spec, *w, il, n, *ds, nullptr); }));
  FERRY_RETURN_IF_ERROR(device_->copy_d2h(host_scratch_.xn.data, device_scratch_.xn.data, d_bytes, *compute_stream_));
  FERRY_RETURN_IF_ERROR(device_->record(*handover_event_, *compute_stream_));
  // The device's slices are enqueued before the CPU starts, so both compute at once. Without post-norms
  // each adds its part to x; with them the parts sum into proj.
  const bool post = spec_.post_norms;
  bool proj_started = false;
  for (size_t i = first; i < end; ++i) {
    if (pl[i] == Placement::kCpu) continue;
    const model::FfnSlice* sl = &device_slices_[i];
    const bool acc = !post || proj_started;
    FERRY_RETURN_IF_ERROR(device_work(step, i, [&] {
      return on_device([=](kernels::Ops& ops) {
        model::forward_ffn_part(ops, *spec, *sl, n, *ds, post ? ds->proj.rows(0, n) : ds->x.rows(0, n), acc);
      });
    }));
    proj_started = post;
  }
  // The CPU's slices on the normed rows, summed into the host's proj.
  const double wait_start = now_ms();
  FERRY_RETURN_IF_ERROR(device_->sync(*handover_event_));
  if (step.recording) step.host_waits.emplace_back(wait_start, now_ms());
  const TensorView hproj = host_scratch_.proj.rows(0, n);
  bool cpu_started = false;
  for (size_t i = first; i < end; ++i) {
    if (pl[i] != Placement::kCpu) continue;
    step.cpu_start_ms[i] = now_ms();
    model::forward_ffn_part(*cpu_ops_, spec_, host_slices_[i], n, host_scratch_, hproj, cpu_started);
    step.cpu_end_ms[i] = now_ms();
    cpu_started = true;
  }
  // Their sum goes up into the device's `up` buffer (in stream order the device's slices are done with
  // it) and is added; the post-norm and the residual add follow.
  const TensorView dpart = TensorView::make(DType::F32, device_scratch_.up.data, spec_.n_embd, n, 1, 1, device_where_);
  FERRY_RETURN_IF_ERROR(device_->copy_h2d(device_scratch_.up.data, host_scratch_.proj.data, d_bytes, *compute_stream_));
  return on_device([=](kernels::Ops& ops) {
    model::forward_ffn_combine(ops, *spec, *w, il, n, *ds, dpart, proj_started, nullptr);
  });
}

}  // namespace ferry::exec::detail
