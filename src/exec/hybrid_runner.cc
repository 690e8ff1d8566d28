// HybridRunner: construction and the load (arena blocks in a fixed order, placements per tier), and the
// factories from a plan or a budget. The other rooms of the runner are listed in hybrid_runner_impl.h.
#include "exec/hybrid_runner.h"

#include <algorithm>

#include "exec/hybrid_runner_impl.h"
#include "kernels/cpu/cpu_ops.h"

namespace ferry::exec {

namespace detail {

using model::SubLayerKind;
using plan::Placement;

RunnerSizes sizes_for(const model::ModelSpec& spec, const std::vector<model::SubLayer>& subs,
                      const plan::PlanSet& plan, const HybridOptions& o, DeviceKind kind) {
  RunnerSizes z;
  z.n_out_dev = std::max(1, std::min(o.n_batch, std::max(1, o.max_sequences)));
  z.scratch = align256(model::scratch_floats(spec, o.n_batch, z.n_out_dev) * sizeof(float));
  // tokens, pos, seq, cell, then the cells' positions and sequences, then M-RoPE positions (4 streams).
  z.meta = align256(sizeof(int32_t) * (8ull * o.n_batch + 2ull * o.n_cells));
  int64_t max_k = 1, max_n = 1;
  for (const model::SubLayer& s : subs) {
    if (s.kind == SubLayerKind::kEmbed) continue;
    // An expert group's matrices are multiplied one expert at a time: N is one expert's rows.
    const int64_t per = s.kind == SubLayerKind::kExperts ? std::max(1, s.expert_end - s.expert_begin) : 1;
    for (const model::WeightRef& w : s.weights)
      if (w.rows > 1) {
        max_k = std::max(max_k, w.cols);
        if (s.kind != SubLayerKind::kHead) max_n = std::max(max_n, w.rows / per);
      }
  }
  z.shape.max_tokens = o.n_batch;
  z.shape.max_k = max_k;
  z.shape.max_n = max_n;
  z.shape.n_head = spec.n_head;
  z.shape.head_dim = spec.head_dim;
  z.shape.gemm_staging_bytes = plan.options.gemm_staging_bytes;
  z.expert_cache = expert_cache_geometry(spec, subs, o.expert_cache_bytes, o.n_batch).bytes();
#if defined(FERRY_HAVE_CUDA)
  if (kind == DeviceKind::kCuda)
    z.cuda_ops = align256(kernels::CudaOps::scratch_bytes(z.shape)) + align256(kernels::kCublasWorkspaceBytes);
#else
  (void)kind;
#endif
  return z;
}

HybridRunnerImpl::HybridRunnerImpl(const model::ModelSpec& spec, const model::ModelWeights& weights,
                                   const std::vector<model::SubLayer>& subs, const plan::PlanSet& plan,
                                   std::unique_ptr<Device> device, const HybridOptions& options)
    : spec_(spec), host_weights_(weights), sublayers_(subs), plan_(plan), device_(std::move(device)),
      options_(options) {}

HybridRunnerImpl::~HybridRunnerImpl() {
  if (device_) (void)device_->synchronize();
  ring_.reset();
  cuda_ops_.reset();
  emulated_ops_.reset();
  sublayer_start_events_.clear();
  sublayer_end_events_.clear();
  fill_start_events_.clear();
  fill_end_events_.clear();
  handover_event_.reset();
  cache_filled_.reset();
  stage_half_free_[0].reset();
  stage_half_free_[1].reset();
  compute_stream_.reset();
  copy_stream_.reset();
  for (DeviceBuffer& b : resident_blocks_) device_->release(&b);
  device_->release(&cache_block_);
  device_->release(&cache_ids_);
  for (DeviceBuffer& b : arena_buffers_) device_->release(&b);
  for (HostBuffer& h : pinned_buffers_) device_->release_pinned(&h);
  for (HostBuffer& h : vision_pinned_.items) device_->release_pinned(&h);
  device_->release_pinned(&vision_pinned_.vectors);
  device_->release_pinned(&vision_pinned_.io);
  for (HostBuffer& h : registered_ranges_) device_->unregister_host(&h);
}

Expected<DeviceBuffer> HybridRunnerImpl::take(uint64_t bytes, const char* tag) {
  FERRY_ASSIGN_OR_RETURN(DeviceBuffer b, device_->allocate(std::max<uint64_t>(bytes, 1), tag));
  arena_buffers_.push_back(b);
  arena_tags_.emplace_back(tag, align256(b.bytes));
  return b;
}

Expected<HostBuffer> HybridRunnerImpl::take_pinned(uint64_t bytes) {
  FERRY_ASSIGN_OR_RETURN(HostBuffer h, device_->allocate_pinned(std::max<uint64_t>(bytes, 1)));
  pinned_buffers_.push_back(h);
  return h;
}

Status HybridRunnerImpl::choose_placements() {
  const size_t m = sublayers_.size();
  if (plan_.sublayers.size() != m)
    return make_error(ErrorCode::kInvalidArgument, "plan has %zu sub-layers but the model has %zu",
                      plan_.sublayers.size(), m);
  if (!plan_.gpu) return make_error(ErrorCode::kUnsupported, "the plan has no GPU: use the CPU runner");
  for (const plan::Plan& p : plan_.tiers) {
    std::vector<Placement> pl = p.placement;
    plan::Strategy s = p.strategy;
    if (options_.force_strategy) {
      for (const plan::StrategyEstimate& c : p.candidates)
        if (c.strategy == *options_.force_strategy && c.feasible && c.placement.size() == m) {
          pl = c.placement;
          s = c.strategy;
        }
    }
    std::vector<size_t> streamed;
    bool moe = false;
    for (size_t i = 0; i < m; ++i) {
      const SubLayerKind k = sublayers_[i].kind;
      moe |= k == SubLayerKind::kMoeRouter || k == SubLayerKind::kExperts;
      if (k == SubLayerKind::kEmbed && pl[i] != Placement::kCpu)
        return make_error(ErrorCode::kUnsupported, "embed placed on the device: not supported");
      if (k == SubLayerKind::kAttention && pl[i] == Placement::kCpu)
        return make_error(ErrorCode::kUnsupported, "%s placed on the CPU: the KV cache lives on the device",
                          sublayers_[i].label().c_str());
      if (pl[i] == Placement::kResident && !plan_.resident[i] && slot_layouts_[i].bytes > 0)
        return make_error(ErrorCode::kInternal, "%s is resident in tier %d but not in the shared resident set",
                          sublayers_[i].label().c_str(), p.tokens);
      if (pl[i] == Placement::kStreamed) {
        // A streamed sub-layer is rebound to its ring slot; one of the shared resident set never is again.
        if (plan_.resident[i] && slot_layouts_[i].bytes > 0)
          return make_error(ErrorCode::kInternal, "%s is streamed in tier %d but in the shared resident set",
                            sublayers_[i].label().c_str(), p.tokens);
        if (slot_layouts_[i].bytes > plan_.ring_slot_bytes || plan_.ring_slots < 2)
          return make_error(ErrorCode::kInternal, "%s (%llu bytes) is streamed but the ring slot holds %llu",
                            sublayers_[i].label().c_str(), static_cast<unsigned long long>(slot_layouts_[i].bytes),
                            static_cast<unsigned long long>(plan_.ring_slot_bytes));
        streamed.push_back(i);
      }
    }
    for (size_t i = 0; i < m; ++i)
      if (model::is_ffn_slice(sublayers_[i]) && sublayers_[i].slice == 0 &&
          i + static_cast<size_t>(sublayers_[i].n_slices) > m)
        return make_error(ErrorCode::kInternal, "%s: its slices run past the list", sublayers_[i].label().c_str());
    split_ffn_by_tier_.push_back(plan::split_layers(sublayers_, pl));
    // A step of an MoE model is never one graph: its layers read the routing on the host (moe.cc).
    bool all_resident = !moe && m >= 2 && sublayers_[0].kind == SubLayerKind::kEmbed && pl[0] == Placement::kCpu;
    for (size_t i = 1; i < m && all_resident; ++i) all_resident = pl[i] == Placement::kResident;
    whole_step_graph_ok_.push_back(on_cuda_ && all_resident ? 1 : 0);
    placements_.push_back(std::move(pl));
    streamed_by_tier_.push_back(std::move(streamed));
    tier_stats_.push_back(blank_stats(p.tokens, s, p.predicted_ms));
    if (s != p.strategy) {
      for (const plan::StrategyEstimate& c : p.candidates)
        if (c.strategy == s) tier_stats_.back().predicted_ms = c.step_ms;
    }
  }
  // Every expert group follows its layer's router (run_moe_layer runs them as one).
  for (size_t i = 0; i < m; ++i) {
    const model::SubLayer& sl = sublayers_[i];
    if (sl.kind == SubLayerKind::kMoeRouter && moe_layer_end(i) == i + 1)
      return make_error(ErrorCode::kInvalidArgument, "%s has no expert groups after it", sl.label().c_str());
    if (sl.kind == SubLayerKind::kExperts && (i == 0 || sublayers_[i - 1].layer != sl.layer ||
                                              (sublayers_[i - 1].kind != SubLayerKind::kMoeRouter &&
                                               sublayers_[i - 1].kind != SubLayerKind::kExperts) ||
                                              sl.expert_begin >= sl.expert_end))
      return make_error(ErrorCode::kInvalidArgument, "%s does not follow its layer's router", sl.label().c_str());
  }
  return Status::ok();
}

Status HybridRunnerImpl::create_streams_and_events() {
  FERRY_ASSIGN_OR_RETURN(compute_stream_, device_->create_stream());
  FERRY_ASSIGN_OR_RETURN(copy_stream_, device_->create_stream());
  FERRY_ASSIGN_OR_RETURN(handover_event_, device_->create_event(false));
  if (options_.measure) {
    for (size_t i = 0; i < sublayers_.size(); ++i) {
      FERRY_ASSIGN_OR_RETURN(auto start, device_->create_event(true));
      FERRY_ASSIGN_OR_RETURN(auto end, device_->create_event(true));
      sublayer_start_events_.push_back(std::move(start));
      sublayer_end_events_.push_back(std::move(end));
    }
  }
  return Status::ok();
}

Status HybridRunnerImpl::allocate_arena(LoadBlocks* blocks) {
  const size_t m = sublayers_.size();
  const uint64_t kvd = static_cast<uint64_t>(spec_.kv_dim()), cells = static_cast<uint64_t>(options_.n_cells);
  FERRY_ASSIGN_OR_RETURN(blocks->kv, take(2 * kvd * cells * 2 * spec_.n_layer, "kv"));
  for (int32_t il = 0; il < spec_.n_layer; ++il) {
    char* base = static_cast<char*>(blocks->kv.ptr) + 2 * kvd * cells * 2 * il;
    kv_keys_.push_back(TensorView::make(DType::F16, base, spec_.kv_dim(), options_.n_cells, 1, 1, device_where_));
    kv_values_.push_back(
        TensorView::make(DType::F16, base + kvd * cells * 2, spec_.kv_dim(), options_.n_cells, 1, 1, device_where_));
  }
  device_weights_ = host_weights_;
  std::vector<TensorView*> vecs = vectors_of(device_weights_);
  uint64_t vec_bytes = 0;
  for (TensorView* t : vecs) vec_bytes += align256(t->nbytes());
  FERRY_ASSIGN_OR_RETURN(DeviceBuffer vb, take(vec_bytes, "vectors"));
  uint64_t off = 0;
  for (TensorView* t : vecs) {
    blocks->vectors.emplace_back(t, static_cast<char*>(vb.ptr) + off);
    off += align256(t->nbytes());
  }
  FERRY_RETURN_IF_ERROR(allocate_residents(&blocks->resident_base));
  for (size_t i = 0; i < m; ++i)
    if (resident_blocks_[i]) arena_tags_.emplace_back(sublayers_[i].label(), align256(resident_blocks_[i].bytes));
  FERRY_RETURN_IF_ERROR(make_ring());
  if (ring_) arena_tags_.emplace_back("ring", align256(static_cast<uint64_t>(plan_.ring_slots) * plan_.ring_slot_bytes));
  FERRY_ASSIGN_OR_RETURN(DeviceBuffer sb, take(sizes_.scratch, "activations"));
  device_scratch_ =
      model::make_scratch(spec_, options_.n_batch, sizes_.n_out_dev, static_cast<float*>(sb.ptr), device_where_);
  FERRY_ASSIGN_OR_RETURN(DeviceBuffer mb, take(sizes_.meta, "batch meta"));
  device_meta_ = static_cast<int32_t*>(mb.ptr);
  if (on_cuda_) {
    FERRY_ASSIGN_OR_RETURN(cuda_ops_,
                           CudaOpsBundle::create(*device_, *compute_stream_, sizes_.shape, options_.cuda_ops));
    arena_tags_.emplace_back("cuda ops scratch + cuBLAS workspace", sizes_.cuda_ops);
  } else {
    emulated_ops_ = kernels::make_cpu_ops(options_.cpu_threads, options_.cpu_isa.value_or(kernels::default_cpu_isa()));
  }
  return Status::ok();
}

Status HybridRunnerImpl::allocate_residents(std::vector<char*>* base) {
  const size_t m = sublayers_.size();
  base->assign(m, nullptr);
  resident_blocks_.assign(m, DeviceBuffer{});
  for (size_t i = 0; i < m; ++i) {
    if (!plan_.resident[i] || slot_layouts_[i].bytes == 0) continue;
    const std::string tag = sublayers_[i].label();
    FERRY_ASSIGN_OR_RETURN(resident_blocks_[i], device_->allocate(slot_layouts_[i].bytes, tag.c_str()));
    (*base)[i] = static_cast<char*>(resident_blocks_[i].ptr);
  }
  return Status::ok();
}

Status HybridRunnerImpl::make_ring() {
  if (plan_.ring_slots < 2 || plan_.ring_slot_bytes == 0) return Status::ok();
  bool any = false;
  for (const auto& s : streamed_by_tier_) any |= !s.empty();
  if (!any) return Status::ok();
  FERRY_ASSIGN_OR_RETURN(ring_, WeightRing::create(*device_, plan_.ring_slots, plan_.ring_slot_bytes));
  return Status::ok();
}

Status HybridRunnerImpl::allocate_pinned() {
  const int32_t n_out_host = std::max(std::min(options_.n_batch, kHostHeadChunk), sizes_.n_out_dev);
  FERRY_ASSIGN_OR_RETURN(HostBuffer hs,
                         take_pinned(model::scratch_floats(spec_, options_.n_batch, n_out_host) * sizeof(float)));
  host_scratch_ = model::make_scratch(spec_, options_.n_batch, n_out_host, static_cast<float*>(hs.ptr));
  FERRY_ASSIGN_OR_RETURN(HostBuffer hm, take_pinned(sizes_.meta));
  host_meta_ = static_cast<int32_t*>(hm.ptr);
  FERRY_ASSIGN_OR_RETURN(upload_stage_, device_->allocate_pinned(kUploadStageBytes));
  for (auto& e : stage_half_free_) {
    FERRY_ASSIGN_OR_RETURN(e, device_->create_event(false));
  }
  return Status::ok();
}

Status HybridRunnerImpl::init() {
  const double load_start = now_ms();
  on_cuda_ = device_->kind() == DeviceKind::kCuda;
  device_where_ = on_cuda_ ? Where::kDevice : Where::kHost;
  sizes_ = sizes_for(spec_, sublayers_, plan_, options_, device_->kind());
  make_slice_views();
  make_expert_group_views();
  make_slot_layouts();
  FERRY_RETURN_IF_ERROR(choose_placements());
  gather_cpu_slice_downs();
  fill_pieces_.assign(sublayers_.size(), {});
  // Registration first: it decides the layout of streamed matrices, which resident uploads share.
  pin_stats_.mode = options_.pin_mode;
  const std::vector<size_t> to_copy = register_as_asked();
  FERRY_RETURN_IF_ERROR(create_streams_and_events());
  cpu_ops_ = kernels::make_cpu_ops(options_.cpu_threads, options_.cpu_isa.value_or(kernels::default_cpu_isa()));
  LoadBlocks blocks;
  FERRY_RETURN_IF_ERROR(allocate_arena(&blocks));
  FERRY_RETURN_IF_ERROR(make_expert_cache());
  FERRY_RETURN_IF_ERROR(allocate_pinned());
  FERRY_RETURN_IF_ERROR(upload_at_load(blocks));
  FERRY_RETURN_IF_ERROR(copy_streamed(to_copy));
  FERRY_RETURN_IF_ERROR(device_->synchronize());
  load_seconds_ = (now_ms() - load_start) / 1e3;
  return Status::ok();
}

}  // namespace detail

uint64_t hybrid_extra_bytes(const model::ModelSpec& spec, const std::vector<model::SubLayer>& subs,
                            const plan::PlanSet& plan, const HybridOptions& options, DeviceKind kind) {
  const detail::RunnerSizes z = detail::sizes_for(spec, subs, plan, options, kind);
  const uint64_t mine = z.scratch + z.meta + z.cuda_ops + z.expert_cache;
  const uint64_t planned = plan.arena.scratch + plan.arena.workspace;
  return mine > planned ? mine - planned : 0;
}

Expected<std::unique_ptr<HybridRunner>> HybridRunner::create(const model::ModelSpec& spec,
                                                             const model::ModelWeights& weights,
                                                             const std::vector<model::SubLayer>& subs,
                                                             const plan::PlanSet& plan, std::unique_ptr<Device> device,
                                                             const HybridOptions& options) {
  if (!device) return make_error(ErrorCode::kInvalidArgument, "hybrid runner needs a device");
  if (options.n_cells <= 0 || options.n_batch <= 0)
    return make_error(ErrorCode::kInvalidArgument, "hybrid runner needs n_cells > 0 and n_batch > 0 (got %d, %d)",
                      options.n_cells, options.n_batch);
  if (plan.options.batch < options.n_batch)
    return make_error(ErrorCode::kInvalidArgument, "plan covers steps of up to %d tokens, runner needs %d",
                      plan.options.batch, options.n_batch);
  // A plan over FFN slices: the same cut of the list (model::slice_ffn_sublayers is deterministic).
  std::vector<model::SubLayer> list;
  if (plan.ffn_slices > 1 && plan.sublayers.size() != subs.size()) {
    FERRY_ASSIGN_OR_RETURN(list, model::slice_ffn_sublayers(spec, subs, plan.ffn_slices));
  }
  auto r = std::make_unique<detail::HybridRunnerImpl>(spec, weights, list.empty() ? subs : list, plan, std::move(device), options);
  FERRY_RETURN_IF_ERROR(r->init());
  return std::unique_ptr<HybridRunner>(std::move(r));
}

namespace {

Expected<plan::PlannerOptions> planner_options(const HybridSetup& setup, DeviceKind* kind) {
  if (setup.device != "cuda" && setup.device != "emulated")
    return make_error(ErrorCode::kInvalidArgument, "hybrid device must be cuda or emulated (got '%s')",
                      setup.device.c_str());
  *kind = setup.device == "cuda" ? DeviceKind::kCuda : DeviceKind::kEmulated;
  if (!setup.profile.has_gpu())
    return make_error(ErrorCode::kInvalidArgument, "the profile has no GPU: a VRAM budget needs a GPU profile");
  plan::PlannerOptions po;
  po.vram_budget = setup.vram_budget;
  po.context = setup.options.n_cells;
  po.batch = setup.options.n_batch;
  po.cpu_threads = setup.options.cpu_threads;
  po.ring_slots = setup.ring_slots;
  po.max_sequences = std::max(1, setup.options.max_sequences);
  po.prompt_tokens = setup.prompt_tokens;
  po.gen_tokens = setup.gen_tokens;
  po.gemm_staging_bytes = setup.options.gemm_staging_bytes;
  po.ffn_slices = setup.options.ffn_slices;
  po.split_layer_s = setup.split_layer_s;
  // The emulated device has no cuBLAS: its plan does not reserve the workspace.
  if (*kind == DeviceKind::kEmulated) po.workspace_bytes = 0;
  return po;
}

}  // namespace

Expected<uint64_t> hybrid_min_budget(const model::ModelSpec& spec, const std::vector<model::SubLayer>& subs,
                                     const HybridSetup& setup) {
  DeviceKind kind;
  FERRY_ASSIGN_OR_RETURN(plan::PlannerOptions po, planner_options(setup, &kind));
  // The largest budget the planner accepts (the device's memory): every candidate is feasible there.
  po.vram_budget = setup.profile.gpu->memory_bytes > 0 ? setup.profile.gpu->memory_bytes : UINT64_MAX / 4;
  FERRY_ASSIGN_OR_RETURN(plan::PlanSet any, plan::Planner(setup.profile, po).plan(spec, subs));
  // Every variant's arena needs the same scratch + workspace, so the extra is the same at the minimum.
  return any.min_budget + hybrid_extra_bytes(spec, subs, any, setup.options, kind);
}

namespace {

// The plan for `setup` (its options.n_batch as the largest tier): planned, then the planner's budget
// shrunk by what the executor takes beyond the plan's accounting (activation layout, metadata, CudaOps
// scratch) so every block fits the arena.
Expected<plan::PlanSet> plan_for(const model::ModelSpec& spec, const std::vector<model::SubLayer>& subs,
                                 const HybridSetup& setup, DeviceKind* kind) {
  FERRY_ASSIGN_OR_RETURN(plan::PlannerOptions po, planner_options(setup, kind));
  uint64_t extra = 0;
  plan::PlanSet ps;
  for (int attempt = 0; attempt < 4; ++attempt) {
    po.vram_budget = setup.vram_budget > extra ? setup.vram_budget - extra : 0;
    auto planned = plan::Planner(setup.profile, po).plan(spec, subs);
    if (!planned) {
      if (planned.status().code() != ErrorCode::kOutOfMemory) return planned.status();
      auto min_total = hybrid_min_budget(spec, subs, setup);
      if (!min_total) return planned.status();
      return make_error(ErrorCode::kOutOfMemory,
                        "VRAM budget %s is below the minimum %s (%llu bytes) for %s at context %d and batch %d "
                        "(KV cache, activations, norms and the ring or resident attention); raise --vram or lower -c",
                        plan::format_bytes(setup.vram_budget).c_str(), plan::format_bytes(*min_total).c_str(),
                        static_cast<unsigned long long>(*min_total),
                        spec.name.empty() ? "this model" : spec.name.c_str(), po.context, po.batch);
    }
    ps = std::move(*planned);
    const uint64_t need = hybrid_extra_bytes(spec, subs, ps, setup.options, *kind);
    if (need <= extra) break;
    extra = need;
  }
  return ps;
}

}  // namespace

Expected<std::unique_ptr<HybridRunner>> make_hybrid_runner(const model::ModelSpec& spec,
                                                           const model::ModelWeights& weights,
                                                           const std::vector<model::SubLayer>& subs,
                                                           const HybridSetup& setup) {
  DeviceKind kind;
  FERRY_ASSIGN_OR_RETURN(plan::PlanSet ps, plan_for(spec, subs, setup, &kind));
  HybridOptions options = setup.options;
  if (setup.batch_max > options.n_batch) {
    HybridSetup wide = setup;
    wide.options.n_batch = setup.batch_max;
    Expected<plan::PlanSet> alt = plan_for(spec, subs, wide, &kind);
    if (alt && alt->ttft_ms < ps.ttft_ms && !ps.tiers.empty() && !alt->tiers.empty() &&
        alt->tiers.front().predicted_ms <= ps.tiers.front().predicted_ms * (1 + kBatchChoiceDecodeSlack)) {
      ps = std::move(*alt);
      options.n_batch = setup.batch_max;
    }
  }
  EmulatedOptions eo = setup.emulated;
  eo.budget = setup.vram_budget;
  std::unique_ptr<Device> dev;
  if (kind == DeviceKind::kCuda) {
    FERRY_ASSIGN_OR_RETURN(dev, make_cuda_device(setup.ordinal, setup.vram_budget));
  } else {
    FERRY_ASSIGN_OR_RETURN(dev, make_emulated_device(eo));
  }
  options.cuda_ops = kernels::with_experiments(options.cuda_ops);
  return HybridRunner::create(spec, weights, subs, ps, std::move(dev), options);
}

}  // namespace ferry::exec
