// HybridRunner, mixture-of-experts layers (model/sublayer.h: a kMoeRouter sub-layer, then the layer's
// kExperts groups). Each group's weights are one contiguous byte range of each stacked tensor, so a group
// is resident, streamed through a ring slot or read from the mmap by the CPU like any other sub-layer's
// matrices. A layer runs as a unit (run_moe_layer):
//   1. the router where it is placed: xn = norm(x), logits, each token's experts and weights;
//   2. the routing crosses once: down (xn, ids, weights) when the router ran on the device and some group
//      is on the CPU, up (xn, ids, weights) when it ran on the CPU and some group is on the device;
//   3. the device's groups are enqueued in order (streamed ones through their slots), summing into the
//      device's proj, and only then the CPU runs its groups, summing into the host's proj, so both compute
//      at once; the CPU's groups are one moe_experts call over their experts (the mmap holds them side by
//      side; device groups between them are masked out of its routing), its time shared among
//      them by expert count in the statistics;
//   4. the CPU's sum goes up (into the device's moe_out, free in stream order once the device's groups are
//      done) and is added to proj, then x += proj on the device. A layer with nothing on the device ends on
//      the host, and then equals the CPU path (forward_moe) bit for bit.
// Steps of up to graph_max_tokens tokens replay the resident parts from segment graphs: the layer's
// attention with a resident router (run_sublayers), and each run of resident groups; the routing copies,
// the handover and the CPU's sum stay host-driven.
#include <algorithm>

#include "exec/hybrid_runner_impl.h"

namespace ferry::exec::detail {

using model::SubLayerKind;
using plan::Placement;

void HybridRunnerImpl::make_expert_group_views() {
  const size_t m = sublayers_.size();
  host_groups_.assign(m, {});
  device_groups_.assign(m, {});
  for (size_t i = 0; i < m; ++i) {
    const model::SubLayer& sl = sublayers_[i];
    if (sl.kind != SubLayerKind::kExperts) continue;
    kernels::ExpertGroup& h = host_groups_[i];
    h = model::expert_group_views(spec_, host_weights_.layers[sl.layer], sl.expert_begin, sl.expert_end);
    kernels::ExpertGroup& d = device_groups_[i];
    d = h;
    for (auto [src, dst] : {std::pair{&h.gate, &d.gate}, {&h.up, &d.up}, {&h.down, &d.down}})
      *dst = TensorView::make(src->dtype, nullptr, src->ne[0], src->ne[1], src->ne[2], 1, device_where_);
  }
}

void HybridRunnerImpl::bind_expert_biases() {
  for (size_t i = 0; i < sublayers_.size(); ++i) {
    const model::SubLayer& sl = sublayers_[i];
    if (sl.kind != SubLayerKind::kExperts) continue;
    const kernels::ExpertGroup cols =
        model::expert_group_views(spec_, device_weights_.layers[sl.layer], sl.expert_begin, sl.expert_end);
    kernels::ExpertGroup& d = device_groups_[i];
    d.gate_bias = cols.gate_bias;
    d.up_bias = cols.up_bias;
    d.down_bias = cols.down_bias;
  }
}

bool HybridRunnerImpl::moe_device_group_before(size_t tier, size_t i) const {
  const std::vector<Placement>& pl = placements_[tier];
  for (size_t j = i; j-- > 0 && sublayers_[j].kind == SubLayerKind::kExperts;)
    if (pl[j] != Placement::kCpu) return true;
  return false;
}

size_t HybridRunnerImpl::moe_layer_end(size_t router) const {
  size_t e = router + 1;
  while (e < sublayers_.size() && sublayers_[e].kind == SubLayerKind::kExperts &&
         sublayers_[e].layer == sublayers_[router].layer)
    ++e;
  return e;
}

Status HybridRunnerImpl::run_moe_layer(Step& step, size_t router, size_t end, bool router_enqueued) {
  const std::vector<Placement>& pl = placements_[step.tier];
  const int32_t n = step.n;
  const int32_t il = sublayers_[router].layer;
  const model::ModelSpec* spec = &spec_;
  const model::Scratch* ds = &device_scratch_;
  const model::DebugHook* hook = debug_hook_ ? &debug_hook_ : nullptr;
  const bool router_dev = pl[router] != Placement::kCpu;
  bool any_dev = false, any_cpu = false;
  for (size_t i = router + 1; i < end; ++i) (pl[i] == Placement::kCpu ? any_cpu : any_dev) = true;
  bool end_on_device = router_dev || any_dev;
  // The hot-expert cache takes part where the CPU computes some of the layer's experts.
  const bool caching = cache_block_ && any_cpu;
  bool routed = false;  // route_through_cache ran: masked_ids_ is the CPU's routing
  int32_t cache_hits = 0, cpu_picks = 0;
  const size_t d_bytes = static_cast<size_t>(spec_.n_embd) * n * sizeof(float);
  const size_t route_bytes = static_cast<size_t>(spec_.n_expert_used) * n * sizeof(float);  // ids (I32) or weights
  // The routing's three buffers, device -> host or host -> device, on the compute stream.
  auto copy_routing = [&](bool down) -> Status {
    const std::pair<void*, void*> bufs[3] = {{host_scratch_.xn.data, device_scratch_.xn.data},
                                             {host_scratch_.moe_ids.data, device_scratch_.moe_ids.data},
                                             {host_scratch_.moe_weights.data, device_scratch_.moe_weights.data}};
    for (int b = 0; b < 3; ++b) {
      const size_t bytes = b == 0 ? d_bytes : route_bytes;
      FERRY_RETURN_IF_ERROR(down ? device_->copy_d2h(bufs[b].first, bufs[b].second, bytes, *compute_stream_)
                                 : device_->copy_h2d(bufs[b].second, bufs[b].first, bytes, *compute_stream_));
    }
    return Status::ok();
  };

  // 1-2. The router, and the routing where the groups need it.
  if (router_dev) {
    if (!router_enqueued) {
      if (!step.x_on_device) FERRY_RETURN_IF_ERROR(residual_to_device(step));
      FERRY_RETURN_IF_ERROR(device_work(step, router, [&] { return device_sublayer(router, step); }));
    }
    if (any_cpu) {
      FERRY_RETURN_IF_ERROR(copy_routing(true));
      FERRY_RETURN_IF_ERROR(device_->record(*handover_event_, *compute_stream_));
    }
  } else {
    // The device's copy of x stays valid after residual_to_host: the end reuses it.
    const bool x_was_on_device = step.x_on_device;
    if (step.x_on_device) FERRY_RETURN_IF_ERROR(residual_to_host(step));
    step.cpu_start_ms[router] = now_ms();
    model::forward_moe_router(*cpu_ops_, spec_, host_weights_, il, n, host_scratch_, hook);
    step.cpu_end_ms[router] = now_ms();
    if (caching) {
      cache_hits = route_through_cache(step, router, end, &cpu_picks);
      routed = true;
      end_on_device = end_on_device || cache_hits > 0;
    }
    if (any_dev || cache_hits > 0) FERRY_RETURN_IF_ERROR(copy_routing(false));
    if (end_on_device && !x_was_on_device) FERRY_RETURN_IF_ERROR(residual_to_device(step));
    step.x_on_device = end_on_device;
  }

  // 3. The device's groups first, so the CPU's run beside them; runs of resident groups from segment graphs.
  bool proj_started = false;
  for (size_t i = router + 1; i < end; ++i) {
    if (pl[i] == Placement::kCpu) continue;
    if (step.segment_graphs && pl[i] == Placement::kResident) {
      size_t e = i + 1;
      while (e < end && pl[e] == Placement::kResident) ++e;
      FERRY_RETURN_IF_ERROR(replay_segment(step, i, e));
      proj_started = true;
      i = e - 1;
      continue;
    }
    // device_sublayer reads the group's views in stream order (a streamed group's are rebound per ring slot)
    // and accumulates after the layer's device groups before it, as proj_started says.
    FERRY_RETURN_IF_ERROR(device_work(step, i, [&] { return device_sublayer(i, step); }));
    proj_started = true;
  }
  bool cpu_ran = false;
  if (any_cpu) {
    if (router_dev) {
      const double wait_start = now_ms();
      FERRY_RETURN_IF_ERROR(device_->sync(*handover_event_));
      if (step.recording) step.host_waits.emplace_back(wait_start, now_ms());
    }
    if (caching && !routed) {
      cache_hits = route_through_cache(step, router, end, &cpu_picks);
      routed = true;
    }
    // The picks a cache slot holds run on the device now, beside the CPU's share.
    if (cache_hits > 0) {
      FERRY_RETURN_IF_ERROR(run_cached_experts(step, router, proj_started));
      proj_started = true;
    }
    const TensorView hproj = host_scratch_.proj.rows(0, n);
    // The CPU's groups as one moe_experts call over the experts from its first group to its last: when
    // device groups sit between them, a copy of the routing names their experts -1 (no group's), so the
    // call skips them. One call pays the per-call costs (sort, activation conversion, two pool jobs)
    // once, and its jobs split all the CPU's routed rows at once.
    size_t first = end, last = router;
    for (size_t i = router + 1; i < end; ++i) {
      if (pl[i] != Placement::kCpu) continue;
      first = std::min(first, i);
      last = i;
    }
    const int32_t e0 = sublayers_[first].expert_begin, e1 = sublayers_[last].expert_end;
    model::Scratch cpu_scratch = host_scratch_;
    bool gaps = false;
    for (size_t i = first; i <= last; ++i) gaps = gaps || pl[i] != Placement::kCpu;
    if (gaps && !routed) {  // device groups between the CPU's: the routing with their experts as -1
      route_through_cache(step, router, end, &cpu_picks);
      routed = true;
    }
    if (routed)
      cpu_scratch.moe_ids =
          TensorView::make(DType::I32, masked_ids_.data(), spec_.n_expert_used, n, 1, 1, Where::kHost);
    const kernels::ExpertGroup run = model::expert_group_views(spec_, host_weights_.layers[il], e0, e1);
    const double t0 = now_ms();
    cpu_ran = !caching || cpu_picks > 0;  // every CPU pick cached: nothing left to compute here
    if (cpu_ran) model::forward_moe_group(*cpu_ops_, spec_, run, n, cpu_scratch, hproj, false);
    const double t1 = now_ms();
    int32_t cpu_experts = 0;
    for (size_t g = first; g <= last; ++g)
      if (pl[g] == Placement::kCpu) cpu_experts += sublayers_[g].expert_end - sublayers_[g].expert_begin;
    double at = t0;
    for (size_t g = first; g <= last; ++g) {  // the call's time, shared by expert count
      if (pl[g] != Placement::kCpu) continue;
      step.cpu_start_ms[g] = at;
      at += (t1 - t0) * (sublayers_[g].expert_end - sublayers_[g].expert_begin) / cpu_experts;
      step.cpu_end_ms[g] = at;
    }
    if (!end_on_device) {  // the whole layer on the host: forward_moe's end
      model::forward_moe_end(*cpu_ops_, spec_, il, n, host_scratch_, TensorView{}, true, hook);
      return Status::ok();
    }
  }

  // 4. The CPU's sum up and in, then the residual add, on the device.
  TensorView part;
  if (cpu_ran) {
    FERRY_RETURN_IF_ERROR(
        device_->copy_h2d(device_scratch_.moe_out.data, host_scratch_.proj.data, d_bytes, *compute_stream_));
    part = TensorView::make(DType::F32, device_scratch_.moe_out.data, spec_.n_embd, n, 1, 1, device_where_);
  }
  step.x_on_device = true;
  return on_device([=](kernels::Ops& ops) {
    model::forward_moe_end(ops, *spec, il, n, *ds, part, proj_started, nullptr);
  });
}

}  // namespace ferry::exec::detail
