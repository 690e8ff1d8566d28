// HybridRunner implementation. Load: allocate every arena block up front (KV, vectors, resident
// weights, ring, activations, metadata, CudaOps scratch) so a budget problem shows at load, not mid
// step; upload resident weights once through pinned staging; make streamed sub-layers' weights
// copyable asynchronously: copied once (threads) into pinned host memory in the exact slot layout (one
// copy per sub-layer per step), or the mmap registered in place (one copy per matrix). Step: metadata
// up, then sub-layers in order; device work is enqueued on the compute stream (CUDA: kernels;
// emulated: host functions on its worker, so stream order and event waits are real), the copy stream
// stays up to K sub-layers ahead, and the host only blocks where data must cross to the CPU.
#include "exec/hybrid_runner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "base/cpu_info.h"
#include "base/thread_pool.h"
#include "exec/device_cuda.h"
#include "exec/weight_ring.h"
#include "tensor/repack.h"
#include "kernels/cpu/cpu_ops.h"

namespace ferry::exec {

const char* pin_mode_name(PinMode mode) {
  switch (mode) {
    case PinMode::kCopy: return "copy";
    case PinMode::kRegister: return "register";
  }
  return "unknown";
}

namespace {

using model::SubLayerKind;
using plan::Placement;

uint64_t align256(uint64_t x) { return (x + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Head rows per host chunk (as the all-on-one runner): bounded logits scratch for any vocabulary.
constexpr int32_t kHostHeadChunk = 32;
// Pinned staging for uploads at load (two halves alternate so memcpy and copy overlap).
constexpr uint64_t kStageBytes = 32ull << 20;
// Register mode: page ranges that merely touch are joined up to this size (fewer driver calls), larger
// ones stay apart so several threads pin them at once.
constexpr uint64_t kRegisterChunk = 256ull << 20;

// The weight matrices of a sub-layer (what residency and streaming move), in a fixed order.
std::vector<TensorView*> matrices_of(model::ModelWeights& w, const model::SubLayer& s) {
  switch (s.kind) {
    case SubLayerKind::kEmbed: return {&w.token_embd};
    case SubLayerKind::kHead: return {&w.output};
    case SubLayerKind::kAttention: {
      model::LayerWeights& l = w.layers[s.layer];
      return {&l.attn_q, &l.attn_k, &l.attn_v, &l.attn_output};
    }
    case SubLayerKind::kFfn: {
      model::LayerWeights& l = w.layers[s.layer];
      return {&l.ffn_gate, &l.ffn_up, &l.ffn_down};
    }
    default: return {};
  }
}

// Copies the rows of `t` into dst back to back (a strided view, e.g. an FFN slice's columns of ffn_down,
// becomes a contiguous matrix); `rows` rows from r0.
void gather_rows(const TensorView& t, int64_t r0, int64_t rows, char* dst) {
  const size_t row = t.row_size();
  if (t.nb[1] == row) {
    std::memcpy(dst, t.row(r0), row * static_cast<size_t>(rows));
    return;
  }
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * row, t.row(r0 + r), row);
}

// Rows [r0, r0 + nr) of `src`, strided or not, into dst back to back in layout `to` (kSplit: repacked for
// the CUDA decode kernels). `tmp` holds a strided source's rows before a repack.
void write_rows(const TensorView& src, int64_t r0, int64_t nr, ferry::Layout to, char* dst, std::vector<char>* tmp) {
  if (to == src.layout) {
    gather_rows(src, r0, nr, dst);
    return;
  }
  const char* rows = static_cast<const char*>(src.row(r0));
  if (src.nb[1] != src.row_size()) {
    tmp->resize(src.row_size() * static_cast<size_t>(nr));
    gather_rows(src, r0, nr, tmp->data());
    rows = tmp->data();
  }
  repack_to_split(src.dtype, src.ne[0], nr, rows, dst);
}

// Norms, biases and rope factors: always on the device when a GPU is planned (the planner counts
// every vector as resident).
std::vector<TensorView*> vectors_of(model::ModelWeights& w) {
  std::vector<TensorView*> v = {&w.output_norm, &w.rope_freqs};
  for (model::LayerWeights& l : w.layers)
    for (TensorView* t : {&l.attn_norm, &l.attn_q_bias, &l.attn_k_bias, &l.attn_v_bias, &l.attn_output_bias,
                          &l.attn_q_norm, &l.attn_k_norm, &l.post_attention_norm, &l.ffn_norm, &l.post_ffw_norm})
      v.push_back(t);
  std::vector<TensorView*> out;
  for (TensorView* t : v)
    if (model::present(*t)) out.push_back(t);
  return out;
}

// Offsets of a sub-layer's matrices inside a slot / pinned copy / resident block (256-aligned each,
// as the planner counts them).
struct SlotLayout {
  std::vector<uint64_t> offset;
  std::vector<ferry::Layout> layout;  // per matrix: kSplit when repacked for the CUDA decode kernels
  uint64_t bytes = 0;
};
SlotLayout layout_of(const std::vector<TensorView*>& mats, bool split) {
  SlotLayout l;
  for (const TensorView* t : mats) {
    l.offset.push_back(l.bytes);
    l.layout.push_back(split && t->layout == ferry::Layout::kGgml && split_layout_supported(t->dtype, t->ne[0])
                           ? ferry::Layout::kSplit
                           : t->layout);
    l.bytes += align256(t->nbytes());
  }
  return l;
}

struct Sizes {
  int32_t n_out_dev = 1;      // head rows per device chunk
  uint64_t scratch = 0;       // device activations
  uint64_t meta = 0;          // device batch metadata
  uint64_t cuda_ops = 0;      // CudaOps scratch + cuBLAS workspace (CUDA only)
  kernels::CudaScratchShape shape;
};

// `plan`'s options hold the GEMM staging the planner resolved (never kGemmStagingAuto).
Sizes sizes_for(const model::ModelSpec& spec, const std::vector<model::SubLayer>& subs, const plan::PlanSet& plan,
                const HybridOptions& o, DeviceKind kind) {
  Sizes z;
  z.n_out_dev = std::max(1, std::min(o.n_batch, std::max(1, o.max_sequences)));
  z.scratch = align256(model::scratch_floats(spec, o.n_batch, z.n_out_dev) * sizeof(float));
  z.meta = align256(sizeof(int32_t) * (4ull * o.n_batch + 2ull * o.n_cells));
  int64_t max_k = 1, max_n = 1;
  for (const model::SubLayer& s : subs) {
    if (s.kind == SubLayerKind::kEmbed) continue;
    for (const model::WeightRef& w : s.weights)
      if (w.rows > 1) {
        max_k = std::max(max_k, w.cols);
        if (s.kind != SubLayerKind::kHead) max_n = std::max(max_n, w.rows);
      }
  }
  z.shape.max_tokens = o.n_batch;
  z.shape.max_k = max_k;
  z.shape.max_n = max_n;
  z.shape.n_head = spec.n_head;
  z.shape.head_dim = spec.head_dim;
  z.shape.gemm_staging_bytes = plan.options.gemm_staging_bytes;
#if defined(FERRY_HAVE_CUDA)
  if (kind == DeviceKind::kCuda)
    z.cuda_ops = align256(kernels::CudaOps::scratch_bytes(z.shape)) + align256(kernels::kCublasWorkspaceBytes);
#else
  (void)kind;
#endif
  return z;
}

class Runner final : public HybridRunner {
 public:
  Runner(const model::ModelSpec& spec, const model::ModelWeights& weights, const std::vector<model::SubLayer>& subs,
         const plan::PlanSet& plan, std::unique_ptr<Device> device, const HybridOptions& o)
      : spec_(spec), host_w_(weights), subs_(subs), ps_(plan), dev_(std::move(device)), o_(o) {}

  ~Runner() override {
    if (dev_) (void)dev_->synchronize();
    ring_.reset();
    bundle_.reset();
    dev_cpu_ops_.reset();
    ev_t0_.clear();
    ev_t1_.clear();
    ev_c0_.clear();
    ev_c1_.clear();
    ev_x_.reset();
    ev_stage_[0].reset();
    ev_stage_[1].reset();
    cs_.reset();
    xs_.reset();
    for (DeviceBuffer& b : blocks_) dev_->release(&b);
    for (HostBuffer& h : pinned_) dev_->release_pinned(&h);
    for (HostBuffer& h : registered_) dev_->unregister_host(&h);
  }

  Status init();
  Status run(const StepIo& in, float* logits) override;
  void set_debug_hook(model::DebugHook hook) override { hook_ = std::move(hook); }
  void set_timeline(Timeline* timeline) override;
  const char* name() const override { return cuda_ ? "hybrid-cuda" : "hybrid-emulated"; }
  const plan::PlanSet& plan() const override { return ps_; }
  Device& device() override { return *dev_; }
  const std::vector<std::vector<Placement>>& placements() const override { return placements_; }
  const std::vector<TierStats>& stats() const override { return stats_; }
  void reset_stats() override {
    for (TierStats& t : stats_) {
      const TierStats fresh = blank_stats(t.tokens, t.strategy, t.predicted_ms);
      t = fresh;
    }
  }
  const std::vector<std::pair<std::string, uint64_t>>& arena_blocks() const override { return block_tags_; }
  uint64_t pinned_weight_bytes() const override { return pin_.bytes; }
  double load_seconds() const override { return load_s_; }
  double pin_seconds() const override { return pin_.seconds; }
  const PinStats& pin_stats() const override { return pin_; }

 private:
  TierStats blank_stats(int32_t tokens, plan::Strategy s, double pred) const {
    TierStats t;
    t.tokens = tokens;
    t.strategy = s;
    t.predicted_ms = pred;
    t.sub_ms.assign(subs_.size(), 0.0);
    return t;
  }
  Expected<DeviceBuffer> take(uint64_t bytes, const char* tag) {
    FERRY_ASSIGN_OR_RETURN(DeviceBuffer b, dev_->allocate(std::max<uint64_t>(bytes, 1), tag));
    blocks_.push_back(b);
    block_tags_.emplace_back(tag, align256(b.bytes));
    return b;
  }
  Expected<HostBuffer> take_pinned(uint64_t bytes) {
    FERRY_ASSIGN_OR_RETURN(HostBuffer h, dev_->allocate_pinned(std::max<uint64_t>(bytes, 1)));
    pinned_.push_back(h);
    return h;
  }
  Status choose_placements();
  std::vector<size_t> streamed_any() const;  // sub-layers streamed in some tier, ascending
  int32_t pin_threads(size_t items) const;
  // Register mode: page-locks the mmap ranges of streamed matrices in place; on failure leaves nothing
  // registered and pin_.mode = kCopy with the reason in pin_.note (the caller then copies).
  void register_streamed();
  // Copy mode: one pinned buffer per streamed sub-layer in slot layout, filled by several threads.
  Status copy_streamed();
  Status upload(void* dst, const void* src, uint64_t bytes);
  // A matrix, repacked on the way when `to` is kSplit (whole rows per staging half).
  Status upload_matrix(void* dst, const TensorView& src, ferry::Layout to);
  // Runs fn with the device Ops in compute-stream order (CUDA: enqueues its kernels now).
  Status on_device(std::function<void(kernels::Ops&)> fn) {
    if (cuda_) {
      fn(bundle_->ops());
      return Status::ok();
    }
    kernels::Ops* ops = dev_cpu_ops_.get();
    return dev_->host_fn(*cs_, [ops, fn = std::move(fn)] { fn(*ops); });
  }
  // Points dev_w_'s matrices of sub-layer i at base (+ layout offsets); base == nullptr: leaves them.
  void bind(size_t i, char* base) {
    std::vector<TensorView*> mats = dev_mats(i);
    for (size_t k = 0; k < mats.size(); ++k) {
      mats[k]->data = base + layout_[i].offset[k];
      mats[k]->where = dev_where_;
      mats[k]->layout = layout_[i].layout[k];
    }
  }
  // Issues the copy of the j-th streamed sub-layer of `tier` into slot j % K; t0/t1 (optional) time it.
  Status fill(size_t tier, size_t j, Event* t0, Event* t1, bool* copied, TierStats* st);
  Status in_step_events(size_t j, Event** t0, Event** t1);
  // The decode fast path: every sub-layer after the embedding resident on the device, replayed from a
  // CUDA graph. Returns false in *used when this step is not eligible (nothing was done).
  Status run_graph(const StepIo& in, float* logits, size_t ti, bool* used);
  double tl_ms(Event& e);  // device event time on the timeline (ms from its origin), -1 if unknown
  // KV cells a graph-replayed step scans: scan rounded up to a bucket (<= 1/8 extra past 2048 cells).
  // Writes the step's metadata into the pinned mirror h_meta_ (tokens, pos, seq, cell [n], then
  // cell_pos, cell_seq [scan], cells past the real scan padded with -1) and returns the host and device
  // views of it.
  void stage_meta(const StepIo& in, int32_t scan, kernels::BatchMeta* hb, kernels::KvView* hkv,
                  kernels::BatchMeta* db, kernels::KvView* dkv) {
    const int32_t n = in.n_tokens, real = in.n_cells_scan;
    int32_t* h = h_meta_;
    std::memcpy(h, in.tokens, n * sizeof(int32_t));
    std::memcpy(h + n, in.pos, n * sizeof(int32_t));
    std::memcpy(h + 2 * n, in.seq, n * sizeof(int32_t));
    std::memcpy(h + 3 * n, in.cell, n * sizeof(int32_t));
    std::memcpy(h + 4 * n, in.cell_pos, real * sizeof(int32_t));
    std::fill(h + 4 * n + real, h + 4 * n + scan, -1);
    std::memcpy(h + 4 * n + scan, in.cell_seq, real * sizeof(int32_t));
    std::fill(h + 4 * n + scan + real, h + 4 * n + 2 * scan, -1);
    auto views = [&](int32_t* base, Where where, kernels::BatchMeta* b, kernels::KvView* kv) {
      b->n_tokens = n;
      b->pos = TensorView::make(DType::I32, base + n, n, 1, 1, 1, where);
      b->seq = TensorView::make(DType::I32, base + 2 * n, n, 1, 1, 1, where);
      b->cell = TensorView::make(DType::I32, base + 3 * n, n, 1, 1, 1, where);
      kv->cell_pos = TensorView::make(DType::I32, base + 4 * n, std::max(scan, 1), 1, 1, 1, where);
      kv->cell_seq = TensorView::make(DType::I32, base + 4 * n + scan, std::max(scan, 1), 1, 1, 1, where);
      kv->n_cells = scan;
    };
    if (hb) views(h, Where::kHost, hb, hkv);
    views(d_meta_, dev_where_, db, dkv);
  }
  int32_t scan_bucket(int32_t scan) const {
    int32_t g = 256;
    while (g * 8 < scan) g *= 2;
    return std::min(o_.n_cells, (std::max(scan, 1) + g - 1) / g * g);
  }
  // Replays (capturing on first use) the resident attention / FFN sub-layers [first, end) of a step.
  Status replay_segment(size_t ti, size_t first, size_t end, const kernels::BatchMeta& db,
                        const kernels::KvView& dkv, int32_t n, const StepIo& in, float* logits);
  void tl_span(Lane lane, double t0, double t1, const std::string& label, uint64_t bytes = 0);
  Status device_sublayer(size_t i, const kernels::BatchMeta& db, const kernels::KvView& dkv, int32_t n,
                         const StepIo& in, float* logits);
  Status cpu_sublayer(size_t i, const kernels::BatchMeta& hb, const TensorView& htok, int32_t n, const StepIo& in,
                      float* logits);
  // The matrices of sub-layer i as host views (a slice's down strided) / as the device views to bind.
  std::vector<TensorView*> host_mats(model::ModelWeights& hw, size_t i);
  std::vector<TensorView*> dev_mats(size_t i);
  // The slices [first, end) of one layer's FFN, some of them on the CPU: the device norms the residual
  // and sends it down, its slices run while the CPU runs the others, the CPU's sum goes back up and is
  // added. x is on the device before and after.
  struct SliceTimes {
    std::vector<double>* cpu_t0;
    std::vector<double>* cpu_t1;
    std::vector<std::pair<double, double>>* waits;
  };
  Status run_slices(size_t ti, size_t first, size_t end, int32_t n, bool timed, size_t* j, size_t K,
                    const std::function<Status(size_t)>& fill_upto, const SliceTimes& times);
  // Sub-layer i's device work (`enqueue()`) on the compute stream. A streamed one first waits for its ring
  // slot and is bound to it (*j: the tier's next streamed sub-layer), and frees the slot after, which
  // fill_upto refills at once; `timed`: events around the work.
  template <typename Enqueue, typename FillUpto>
  Status device_work(size_t ti, size_t i, bool timed, size_t* j, size_t K, const FillUpto& fill_upto,
                     const Enqueue& enqueue) {
    int32_t slot = -1;
    if (placements_[ti][i] == Placement::kStreamed) {
      FERRY_ASSERT(*j < streamed_[ti].size() && streamed_[ti][*j] == i);
      slot = static_cast<int32_t>(*j % K);
      FERRY_RETURN_IF_ERROR(ring_->acquire(slot, *cs_));
      char* base = static_cast<char*>(ring_->slot_ptr(slot));
      // Rebinding happens in stream order (emulated: on the compute worker; CUDA: now, before the
      // kernels that read it are enqueued).
      FERRY_RETURN_IF_ERROR(on_device([this, i, base](kernels::Ops&) { bind(i, base); }));
    }
    if (timed) FERRY_RETURN_IF_ERROR(dev_->record(*ev_t0_[i], *cs_));
    FERRY_RETURN_IF_ERROR(enqueue());
    if (timed) FERRY_RETURN_IF_ERROR(dev_->record(*ev_t1_[i], *cs_));
    if (slot < 0) return Status::ok();
    FERRY_RETURN_IF_ERROR(ring_->release(slot, *cs_));
    ++*j;
    return fill_upto(*j + K);  // the freed slot takes the next streamed sub-layer at once
  }

  const model::ModelSpec& spec_;
  const model::ModelWeights& host_w_;
  std::vector<model::SubLayer> subs_;
  plan::PlanSet ps_;
  std::unique_ptr<Device> dev_;
  HybridOptions o_;
  bool cuda_ = false;
  Where dev_where_ = Where::kDevice;  // views of device memory (emulated: host-addressable, kHost for CpuOps)
  Sizes sz_;

  std::vector<std::vector<Placement>> placements_;  // per tier
  std::vector<std::vector<size_t>> streamed_;       // per tier: streamed sub-layers in order
  std::vector<SlotLayout> layout_;                  // per sub-layer
  std::vector<std::vector<WeightRing::Piece>> pieces_;  // per sub-layer: what a fill copies (streamed ones)
  std::vector<TierStats> stats_;

  std::unique_ptr<Stream> cs_, xs_;                 // compute, copy
  std::unique_ptr<Event> ev_x_;                     // host waits for activations / logits
  std::vector<std::unique_ptr<Event>> ev_t0_, ev_t1_;  // per sub-layer timing (measure)
  std::vector<std::unique_ptr<Event>> ev_c0_, ev_c1_;  // per in-step copy timing (measure)
  std::unique_ptr<WeightRing> ring_;
  std::unique_ptr<CudaOpsBundle> bundle_;
  std::unique_ptr<kernels::Ops> dev_cpu_ops_;       // the emulated device's "kernels"
  std::unique_ptr<kernels::Ops> cpu_ops_;           // CPU sub-layers

  std::vector<DeviceBuffer> blocks_;
  std::vector<std::pair<std::string, uint64_t>> block_tags_;
  std::vector<HostBuffer> pinned_;
  std::vector<HostBuffer> registered_;             // register mode: page ranges of the mmap
  PinStats pin_;
  double load_s_ = 0;

  model::ModelWeights dev_w_;      // device views (streamed ones rebound per use, in stream order)
  // FFN slices (model::is_ffn_slice): their host views (down strided into the whole matrix) and device
  // views (contiguous), per sub-layer; unused for other sub-layers.
  std::vector<model::FfnSlice> host_slice_, dev_slice_;
  // The down columns of slices that run on the CPU in some tier, gathered once into contiguous host
  // memory: the CPU reads whole rows instead of half rows at a stride (session 10, qwen3-8b Q4_K 4 GiB
  // static: 0.40 instead of 0.44-0.49 ms per CPU slice, decode +17 %). Costs those bytes of host memory.
  std::vector<std::vector<uint8_t>> slice_down_copy_;
  // Per tier and sub-layer: part of an FFN whose slices are on the CPU and on the device (or all on the
  // CPU): run by run_slices, never inside a graph segment.
  std::vector<std::vector<uint8_t>> mixed_;
  model::Scratch d_s_, h_s_;       // device / pinned host activations
  int32_t* d_meta_ = nullptr;      // device: tokens, pos, seq, cell [n] then cell_pos, cell_seq [n_scan]
  int32_t* h_meta_ = nullptr;      // pinned host mirror
  std::vector<TensorView> d_k_, d_v_;  // per layer [kv_dim, n_cells] F16 on the device
  HostBuffer stage_;
  std::unique_ptr<Event> ev_stage_[2];
  std::vector<uint8_t> copied_;    // per in-step fill index: a copy was issued (measure)
  model::DebugHook hook_;
  std::vector<int32_t> host_cells_;

  // CUDA graphs of all-resident decode steps.
  struct GraphKey {
    size_t tier = 0;
    int32_t n = 0, bucket = 0;
    std::vector<int32_t> rows;
    size_t first = 0, end = 0;  // segment graphs: sub-layers [first, end); whole-step graphs: 0, 0
    bool operator==(const GraphKey& o) const {
      return tier == o.tier && n == o.n && bucket == o.bucket && rows == o.rows && first == o.first && end == o.end;
    }
  };
  Expected<int> find_or_capture(GraphKey key, const std::function<void()>& enqueue);
  std::vector<std::pair<GraphKey, int>> graphs_;   // key -> CudaOpsBundle graph id
  std::vector<uint8_t> graph_ok_;                  // per tier: eligible placement

  // Timeline recording.
  Timeline* tl_ = nullptr;
  double tl_origin_ms_ = 0;                        // host clock at ev_origin_
  std::unique_ptr<Event> ev_origin_;
  int32_t tl_step_ = 0;
  std::vector<std::unique_ptr<Event>> ev_p0_, ev_p1_;  // cross-step prefetch copies (timeline)
  struct PendingCopy {
    size_t idx;
    std::string label;
    uint64_t bytes;
    int32_t step, tier;
  };
  std::vector<PendingCopy> pending_;               // prefetches issued after the last recorded step
};

std::vector<TensorView*> Runner::host_mats(model::ModelWeights& hw, size_t i) {
  if (!model::is_ffn_slice(subs_[i])) return matrices_of(hw, subs_[i]);
  model::FfnSlice& v = host_slice_[i];
  return {&v.gate, &v.up, &v.down};
}

std::vector<TensorView*> Runner::dev_mats(size_t i) {
  if (!model::is_ffn_slice(subs_[i])) return matrices_of(dev_w_, subs_[i]);
  model::FfnSlice& v = dev_slice_[i];
  return {&v.gate, &v.up, &v.down};
}

Status Runner::choose_placements() {
  const size_t m = subs_.size();
  if (ps_.sublayers.size() != m)
    return make_error(ErrorCode::kInvalidArgument, "plan has %zu sub-layers but the model has %zu",
                      ps_.sublayers.size(), m);
  if (!ps_.gpu) return make_error(ErrorCode::kUnsupported, "the plan has no GPU: use the CPU runner");
  for (const plan::Plan& p : ps_.tiers) {
    std::vector<Placement> pl = p.placement;
    plan::Strategy s = p.strategy;
    if (o_.force_strategy) {
      for (const plan::StrategyEstimate& c : p.candidates)
        if (c.strategy == *o_.force_strategy && c.feasible && c.placement.size() == m) {
          pl = c.placement;
          s = c.strategy;
        }
    }
    std::vector<size_t> streamed;
    for (size_t i = 0; i < m; ++i) {
      const SubLayerKind k = subs_[i].kind;
      if (k != SubLayerKind::kEmbed && k != SubLayerKind::kAttention && k != SubLayerKind::kFfn &&
          k != SubLayerKind::kHead)
        return make_error(ErrorCode::kUnsupported, "the hybrid executor does not run %s sub-layers yet",
                          model::sublayer_kind_name(k));
      if (k == SubLayerKind::kEmbed && pl[i] != Placement::kCpu)
        return make_error(ErrorCode::kUnsupported, "embed placed on the device: not supported");
      if (k == SubLayerKind::kAttention && pl[i] == Placement::kCpu)
        return make_error(ErrorCode::kUnsupported, "%s placed on the CPU: the KV cache lives on the device",
                          subs_[i].label().c_str());
      if (pl[i] == Placement::kResident && !ps_.resident[i] && layout_[i].bytes > 0)
        return make_error(ErrorCode::kInternal, "%s is resident in tier %d but not in the shared resident set",
                          subs_[i].label().c_str(), p.tokens);
      if (pl[i] == Placement::kStreamed) {
        if (layout_[i].bytes > ps_.ring_slot_bytes || ps_.ring_slots < 2)
          return make_error(ErrorCode::kInternal, "%s (%llu bytes) is streamed but the ring slot holds %llu",
                            subs_[i].label().c_str(), static_cast<unsigned long long>(layout_[i].bytes),
                            static_cast<unsigned long long>(ps_.ring_slot_bytes));
        streamed.push_back(i);
      }
    }
    for (size_t i = 0; i < m; ++i)
      if (model::is_ffn_slice(subs_[i]) && subs_[i].slice == 0 && i + static_cast<size_t>(subs_[i].n_slices) > m)
        return make_error(ErrorCode::kInternal, "%s: its slices run past the list", subs_[i].label().c_str());
    mixed_.push_back(plan::split_layers(subs_, pl));
    bool all_resident = m >= 2 && subs_[0].kind == SubLayerKind::kEmbed && pl[0] == Placement::kCpu;
    for (size_t i = 1; i < m && all_resident; ++i) all_resident = pl[i] == Placement::kResident;
    graph_ok_.push_back(cuda_ && all_resident ? 1 : 0);
    placements_.push_back(std::move(pl));
    streamed_.push_back(std::move(streamed));
    stats_.push_back(blank_stats(p.tokens, s, p.predicted_ms));
    if (s != p.strategy) {
      for (const plan::StrategyEstimate& c : p.candidates)
        if (c.strategy == s) stats_.back().predicted_ms = c.step_ms;
    }
  }
  return Status::ok();
}

// Host memory (pageable, e.g. the mmap) -> device, through two pinned staging halves: the host
// fills one half while the copy engine drains the other.
Status Runner::upload(void* dst, const void* src, uint64_t bytes) {
  const uint64_t half = stage_.bytes / 2;
  char* stage = static_cast<char*>(stage_.ptr);
  for (uint64_t off = 0, c = 0; off < bytes; off += half, ++c) {
    const uint64_t n = std::min(half, bytes - off);
    const size_t part = c % 2;
    FERRY_RETURN_IF_ERROR(dev_->sync(*ev_stage_[part]));  // the copy that last read this half is done
    std::memcpy(stage + part * half, static_cast<const char*>(src) + off, n);
    FERRY_RETURN_IF_ERROR(dev_->copy_h2d(static_cast<char*>(dst) + off, stage + part * half, n, *xs_));
    FERRY_RETURN_IF_ERROR(dev_->record(*ev_stage_[part], *xs_));
  }
  return dev_->sync(*xs_);
}

Status Runner::upload_matrix(void* dst, const TensorView& src, ferry::Layout to) {
  if (to == src.layout && src.nb[1] == src.row_size()) return upload(dst, src.data, src.nbytes());
  const uint64_t half = stage_.bytes / 2;
  const uint64_t row = src.row_size();
  const int64_t rows_per = std::max<int64_t>(1, static_cast<int64_t>(half / row));
  FERRY_ASSERT(static_cast<uint64_t>(rows_per) * row <= half);
  char* stage = static_cast<char*>(stage_.ptr);
  const int64_t rows = src.nrows();
  std::vector<char> gathered;  // a strided source's rows, back to back, before the repack
  for (int64_t r0 = 0, c = 0; r0 < rows; r0 += rows_per, ++c) {
    const int64_t nr = std::min(rows_per, rows - r0);
    const size_t part = c % 2;
    FERRY_RETURN_IF_ERROR(dev_->sync(*ev_stage_[part]));
    write_rows(src, r0, nr, to, stage + part * half, &gathered);
    FERRY_RETURN_IF_ERROR(dev_->copy_h2d(static_cast<char*>(dst) + r0 * row, stage + part * half, nr * row, *xs_));
    FERRY_RETURN_IF_ERROR(dev_->record(*ev_stage_[part], *xs_));
  }
  return dev_->sync(*xs_);
}

Status Runner::init() {
  const double t_load = now_ms();
  cuda_ = dev_->kind() == DeviceKind::kCuda;
  dev_where_ = cuda_ ? Where::kDevice : Where::kHost;
  sz_ = sizes_for(spec_, subs_, ps_, o_, dev_->kind());
  const size_t m = subs_.size();

  // FFN slices: host views into the mmap, device views contiguous (bound to their memory below).
  host_slice_.assign(m, {});
  dev_slice_.assign(m, {});
  for (size_t i = 0; i < m; ++i) {
    const model::SubLayer& sl = subs_[i];
    if (!model::is_ffn_slice(sl)) continue;
    model::FfnSlice& h = host_slice_[i];
    h = model::ffn_slice_views(host_w_.layers[sl.layer], sl.ff_begin, sl.ff_end);
    h.first = sl.slice == 0;
    h.last = sl.slice == sl.n_slices - 1;
    model::FfnSlice& d = dev_slice_[i];
    d.first = h.first;
    d.last = h.last;
    for (auto [src, dst] : {std::pair{&h.gate, &d.gate}, {&h.up, &d.up}, {&h.down, &d.down}})
      *dst = TensorView::make(src->dtype, nullptr, src->ne[0], src->ne[1], 1, 1, dev_where_);
  }
  // Layouts from the bound host views (one source of truth for shapes and bytes).
  model::ModelWeights probe = host_w_;
  layout_.resize(m);
  for (size_t i = 0; i < m; ++i) layout_[i] = layout_of(host_mats(probe, i), cuda_ && o_.split_layout);
  FERRY_RETURN_IF_ERROR(choose_placements());
  slice_down_copy_.resize(m);
  for (size_t i = 0; i < m; ++i) {
    bool cpu = false;
    for (const auto& pl : placements_) cpu |= pl[i] == Placement::kCpu;
    TensorView& d = host_slice_[i].down;
    if (!cpu || !model::is_ffn_slice(subs_[i]) || d.nb[1] == d.row_size()) continue;
    slice_down_copy_[i].resize(d.nbytes());
    gather_rows(d, 0, d.nrows(), reinterpret_cast<char*>(slice_down_copy_[i].data()));
    d = TensorView::make(d.dtype, slice_down_copy_[i].data(), d.ne[0], d.ne[1]);
  }
  pieces_.assign(m, {});
  // Registration first: it decides the layout of streamed matrices, which resident uploads share.
  pin_.mode = PinMode::kCopy;
  if (o_.pin_mode == PinMode::kRegister) register_streamed();

  FERRY_ASSIGN_OR_RETURN(cs_, dev_->create_stream());
  FERRY_ASSIGN_OR_RETURN(xs_, dev_->create_stream());
  FERRY_ASSIGN_OR_RETURN(ev_x_, dev_->create_event(false));
  if (o_.measure) {
    for (size_t i = 0; i < m; ++i) {
      FERRY_ASSIGN_OR_RETURN(auto a, dev_->create_event(true));
      FERRY_ASSIGN_OR_RETURN(auto b, dev_->create_event(true));
      ev_t0_.push_back(std::move(a));
      ev_t1_.push_back(std::move(b));
    }
  }
  cpu_ops_ = kernels::make_cpu_ops(o_.cpu_threads);

  // ---- arena blocks, largest-lived first --------------------------------------------------------
  const uint64_t kvd = static_cast<uint64_t>(spec_.kv_dim()), cells = static_cast<uint64_t>(o_.n_cells);
  FERRY_ASSIGN_OR_RETURN(DeviceBuffer kv, take(2 * kvd * cells * 2 * spec_.n_layer, "kv"));
  for (int32_t il = 0; il < spec_.n_layer; ++il) {
    char* base = static_cast<char*>(kv.ptr) + 2 * kvd * cells * 2 * il;
    d_k_.push_back(TensorView::make(DType::F16, base, spec_.kv_dim(), o_.n_cells, 1, 1, dev_where_));
    d_v_.push_back(TensorView::make(DType::F16, base + kvd * cells * 2, spec_.kv_dim(), o_.n_cells, 1, 1, dev_where_));
  }
  dev_w_ = host_w_;
  std::vector<TensorView*> vecs = vectors_of(dev_w_);
  uint64_t vec_bytes = 0;
  for (TensorView* t : vecs) vec_bytes += align256(t->nbytes());
  FERRY_ASSIGN_OR_RETURN(DeviceBuffer vb, take(vec_bytes, "vectors"));
  std::vector<std::pair<TensorView*, char*>> uploads;  // (host view in dev_w_, device address)
  {
    uint64_t off = 0;
    for (TensorView* t : vecs) {
      uploads.emplace_back(t, static_cast<char*>(vb.ptr) + off);
      off += align256(t->nbytes());
    }
  }
  std::vector<char*> resident_base(m, nullptr);
  for (size_t i = 0; i < m; ++i) {
    if (!ps_.resident[i] || layout_[i].bytes == 0) continue;
    const std::string tag = subs_[i].label();
    FERRY_ASSIGN_OR_RETURN(DeviceBuffer rb, take(layout_[i].bytes, tag.c_str()));
    resident_base[i] = static_cast<char*>(rb.ptr);
  }
  if (ps_.ring_slots >= 2 && ps_.ring_slot_bytes > 0) {
    bool any = false;
    for (const auto& s : streamed_) any |= !s.empty();
    if (any) {
      FERRY_ASSIGN_OR_RETURN(ring_, WeightRing::create(*dev_, ps_.ring_slots, ps_.ring_slot_bytes));
      block_tags_.emplace_back("ring", align256(static_cast<uint64_t>(ps_.ring_slots) * ps_.ring_slot_bytes));
    }
  }
  FERRY_ASSIGN_OR_RETURN(DeviceBuffer sb, take(sz_.scratch, "activations"));
  d_s_ = model::make_scratch(spec_, o_.n_batch, sz_.n_out_dev, static_cast<float*>(sb.ptr), dev_where_);
  FERRY_ASSIGN_OR_RETURN(DeviceBuffer mb, take(sz_.meta, "batch meta"));
  d_meta_ = static_cast<int32_t*>(mb.ptr);
  if (cuda_) {
    FERRY_ASSIGN_OR_RETURN(bundle_, CudaOpsBundle::create(*dev_, *cs_, sz_.shape));
    block_tags_.emplace_back("cuda ops scratch + cuBLAS workspace", sz_.cuda_ops);
  } else {
    dev_cpu_ops_ = kernels::make_cpu_ops(o_.cpu_threads);
  }

  // ---- pinned host memory -------------------------------------------------------------------------
  const int32_t n_out_host = std::min(o_.n_batch, kHostHeadChunk);
  FERRY_ASSIGN_OR_RETURN(HostBuffer hs, take_pinned(model::scratch_floats(spec_, o_.n_batch, std::max(n_out_host, sz_.n_out_dev)) * sizeof(float)));
  h_s_ = model::make_scratch(spec_, o_.n_batch, std::max(n_out_host, sz_.n_out_dev), static_cast<float*>(hs.ptr));
  FERRY_ASSIGN_OR_RETURN(HostBuffer hm, take_pinned(sz_.meta));
  h_meta_ = static_cast<int32_t*>(hm.ptr);
  FERRY_ASSIGN_OR_RETURN(stage_, dev_->allocate_pinned(kStageBytes));
  for (auto& e : ev_stage_) {
    FERRY_ASSIGN_OR_RETURN(e, dev_->create_event(false));
  }

  // ---- uploads: vectors, resident matrices; zeroed KV (poisoned memory must never reach a kernel)
  Status st = dev_->memset(kv.ptr, 0, kv.bytes, *xs_);
  for (auto& [t, dst] : uploads) {
    if (st.is_ok()) st = upload(dst, t->data, t->nbytes());
    t->data = dst;
    t->where = dev_where_;
  }
  for (size_t i = 0; i < m && st.is_ok(); ++i) {
    if (!resident_base[i]) continue;
    model::ModelWeights hw = host_w_;
    std::vector<TensorView*> src = host_mats(hw, i);
    for (size_t k = 0; k < src.size() && st.is_ok(); ++k)
      st = upload_matrix(resident_base[i] + layout_[i].offset[k], *src[k], layout_[i].layout[k]);
    bind(i, resident_base[i]);
  }
  dev_->release_pinned(&stage_);
  FERRY_RETURN_IF_ERROR(st);

  if (pin_.mode == PinMode::kCopy) FERRY_RETURN_IF_ERROR(copy_streamed());
  FERRY_RETURN_IF_ERROR(dev_->synchronize());
  load_s_ = (now_ms() - t_load) / 1e3;
  return Status::ok();
}

std::vector<size_t> Runner::streamed_any() const {
  std::vector<uint8_t> seen(subs_.size(), 0);
  for (const auto& tier : streamed_)
    for (size_t i : tier) seen[i] = 1;
  std::vector<size_t> out;
  for (size_t i = 0; i < seen.size(); ++i)
    if (seen[i]) out.push_back(i);
  return out;
}

int32_t Runner::pin_threads(size_t items) const {
  const int32_t want = o_.pin_threads > 0 ? o_.pin_threads : std::max(1, cpu_info().physical_cores);
  return static_cast<int32_t>(std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(want), items)));
}

void Runner::register_streamed() {
  const double t0 = now_ms();
  const std::vector<size_t> items = streamed_any();
  const long ps = sysconf(_SC_PAGESIZE);
  const uintptr_t page = static_cast<uintptr_t>(ps > 0 ? ps : 4096);
  model::ModelWeights hw = host_w_;
  // Whole pages of every streamed matrix, merged where they overlap (a page shared by two matrices
  // can be registered once only) and, up to kRegisterChunk, where they touch. The gaps between
  // matrices (norm vectors, other tensors) are never registered, so no range crosses a hole between
  // two mappings (split files).
  struct Range {
    uintptr_t lo, hi;
  };
  for (size_t i : items)
    if (model::is_ffn_slice(subs_[i])) {
      // A slice's columns of ffn_down are not contiguous in the file: one copy per matrix cannot move them.
      pin_.mode = PinMode::kCopy;
      pin_.note = "FFN slices are streamed: their weights are copied into pinned memory, not registered in place";
      pin_.seconds = (now_ms() - t0) / 1e3;
      return;
    }
  std::vector<Range> spans;
  for (size_t i : items)
    for (const TensorView* t : matrices_of(hw, subs_[i])) {
      if (t->nbytes() == 0) continue;
      const uintptr_t a = reinterpret_cast<uintptr_t>(t->data);
      spans.push_back({a / page * page, (a + t->nbytes() + page - 1) / page * page});
    }
  std::sort(spans.begin(), spans.end(), [](const Range& a, const Range& b) { return a.lo < b.lo; });
  std::vector<Range> ranges;
  for (const Range& r : spans) {
    if (!ranges.empty() && (r.lo < ranges.back().hi ||
                            (r.lo == ranges.back().hi && ranges.back().hi - ranges.back().lo < kRegisterChunk)))
      ranges.back().hi = std::max(ranges.back().hi, r.hi);
    else
      ranges.push_back(r);
  }
  // Largest first, so the threads finish together.
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.hi - a.lo > b.hi - b.lo; });
  std::vector<HostBuffer> got(ranges.size());
  std::vector<double> took(ranges.size(), 0.0);
  pin_.threads = pin_threads(ranges.size());
  const Status st = parallel_items(ranges.size(), pin_.threads, [&](size_t r) -> Status {
    const double a = now_ms();
    FERRY_ASSIGN_OR_RETURN(got[r], dev_->register_host(reinterpret_cast<void*>(ranges[r].lo), ranges[r].hi - ranges[r].lo));
    took[r] = (now_ms() - a) / 1e3;
    return Status::ok();
  });
  for (double x : took) pin_.alloc_s += x;
  if (!st.is_ok()) {
    for (HostBuffer& h : got) dev_->unregister_host(&h);
    pin_.mode = PinMode::kCopy;
    pin_.note = "registering the model mmap failed (" + st.message() + "); streamed weights are copied instead";
    pin_.seconds = (now_ms() - t0) / 1e3;  // copy_streamed adds its own time
    pin_.alloc_s = 0;
    return;
  }
  pin_.mode = PinMode::kRegister;
  pin_.ranges = static_cast<int32_t>(got.size());
  for (const HostBuffer& h : got) pin_.bytes += h.bytes;
  registered_ = std::move(got);
  for (size_t i : items) {
    // The mmap is read-only and copied as it is: streamed matrices keep the file's (ggml) layout even
    // with split_layout; only resident ones (uploaded through staging) are repacked.
    std::vector<TensorView*> mats = matrices_of(hw, subs_[i]);
    layout_[i] = layout_of(mats, false);
    for (size_t k = 0; k < mats.size(); ++k)
      if (mats[k]->nbytes() > 0) pieces_[i].push_back({layout_[i].offset[k], mats[k]->data, mats[k]->nbytes()});
  }
  pin_.seconds = (now_ms() - t0) / 1e3;
}

Status Runner::copy_streamed() {
  const double t0 = now_ms();
  std::vector<size_t> items = streamed_any();
  // Largest first, so the threads finish together.
  std::stable_sort(items.begin(), items.end(), [&](size_t a, size_t b) { return layout_[a].bytes > layout_[b].bytes; });
  std::vector<HostBuffer> bufs(items.size());
  std::vector<double> alloc_s(items.size(), 0.0), copy_s(items.size(), 0.0);
  const int32_t threads = pin_threads(items.size());
  const Status st = parallel_items(items.size(), threads, [&](size_t j) -> Status {
    const size_t i = items[j];
    const double a = now_ms();
    FERRY_ASSIGN_OR_RETURN(bufs[j], dev_->allocate_pinned(std::max<uint64_t>(layout_[i].bytes, 1)));
    const double b = now_ms();
    model::ModelWeights hw = host_w_;
    std::vector<TensorView*> src = host_mats(hw, i);
    std::vector<char> tmp;
    for (size_t k = 0; k < src.size(); ++k)
      write_rows(*src[k], 0, src[k]->nrows(), layout_[i].layout[k],
                 static_cast<char*>(bufs[j].ptr) + layout_[i].offset[k], &tmp);
    alloc_s[j] = (b - a) / 1e3;
    copy_s[j] = (now_ms() - b) / 1e3;
    return Status::ok();
  });
  for (HostBuffer& h : bufs)
    if (h) pinned_.push_back(h);  // released by the destructor, also after an error
  FERRY_RETURN_IF_ERROR(st);
  for (size_t j = 0; j < items.size(); ++j) {
    const size_t i = items[j];
    pieces_[i] = {{0, bufs[j].ptr, layout_[i].bytes}};
    pin_.bytes += layout_[i].bytes;
    pin_.alloc_s += alloc_s[j];
    pin_.copy_s += copy_s[j];
  }
  pin_.mode = PinMode::kCopy;
  pin_.threads = threads;
  pin_.ranges = static_cast<int32_t>(items.size());
  pin_.seconds += (now_ms() - t0) / 1e3;
  return Status::ok();
}

Status Runner::in_step_events(size_t j, Event** t0, Event** t1) {
  while (ev_c0_.size() <= j) {
    FERRY_ASSIGN_OR_RETURN(auto a, dev_->create_event(true));
    FERRY_ASSIGN_OR_RETURN(auto b, dev_->create_event(true));
    ev_c0_.push_back(std::move(a));
    ev_c1_.push_back(std::move(b));
  }
  *t0 = ev_c0_[j].get();
  *t1 = ev_c1_[j].get();
  return Status::ok();
}

Status Runner::fill(size_t tier, size_t j, Event* t0, Event* t1, bool* copied_out, TierStats* st) {
  const std::vector<size_t>& S = streamed_[tier];
  if (j >= S.size()) return Status::ok();
  const size_t i = S[j];
  const int32_t k = static_cast<int32_t>(j % ring_->slots());
  bool copied = false;
  FERRY_RETURN_IF_ERROR(ring_->fill(k, static_cast<int32_t>(i), pieces_[i], *xs_, t0, t1, &copied));
  if (copied_out) *copied_out = copied;
  if (st) {
    if (copied) {
      ++st->copies;
      for (const WeightRing::Piece& p : pieces_[i]) st->copy_bytes += p.bytes;
    } else {
      ++st->prefetch_hits;
    }
  }
  return Status::ok();
}

Status Runner::device_sublayer(size_t i, const kernels::BatchMeta& db, const kernels::KvView& dkv, int32_t n,
                               const StepIo& in, float* logits) {
  const model::SubLayer& s = subs_[i];
  const model::ModelSpec* spec = &spec_;
  const model::ModelWeights* w = &dev_w_;
  const model::Scratch* ds = &d_s_;
  switch (s.kind) {
    case SubLayerKind::kAttention: {
      kernels::KvView kv = dkv;
      kv.k = d_k_[s.layer];
      kv.v = d_v_[s.layer];
      const int32_t il = s.layer;
      return on_device([=](kernels::Ops& ops) { model::forward_attention(ops, *spec, *w, il, db, kv, *ds, nullptr); });
    }
    case SubLayerKind::kFfn: {
      const int32_t il = s.layer;
      if (model::is_ffn_slice(s)) {
        // Read in stream order (a streamed slice's views are rebound on the emulated device's worker).
        const model::FfnSlice* sl = &dev_slice_[i];
        return on_device([=](kernels::Ops& ops) { model::forward_ffn_slice(ops, *spec, *w, il, *sl, n, *ds, nullptr); });
      }
      return on_device([=](kernels::Ops& ops) { model::forward_ffn(ops, *spec, *w, il, n, *ds, nullptr); });
    }
    case SubLayerKind::kHead: {
      const size_t V = static_cast<size_t>(spec_.n_vocab);
      for (int32_t r0 = 0; r0 < in.n_out; r0 += sz_.n_out_dev) {
        const int32_t nr = std::min(sz_.n_out_dev, in.n_out - r0);
        const int32_t* rows = in.out_rows + r0;
        FERRY_RETURN_IF_ERROR(
            on_device([=](kernels::Ops& ops) { model::forward_head(ops, *spec, *w, rows, nr, *ds, nullptr); }));
        FERRY_RETURN_IF_ERROR(dev_->copy_d2h(h_s_.logits.data, d_s_.logits.data, nr * V * sizeof(float), *cs_));
        FERRY_RETURN_IF_ERROR(dev_->record(*ev_x_, *cs_));
        FERRY_RETURN_IF_ERROR(dev_->sync(*ev_x_));
        std::memcpy(logits + r0 * V, h_s_.logits.data, nr * V * sizeof(float));
      }
      return Status::ok();
    }
    default:
      return make_error(ErrorCode::kUnsupported, "%s on the device", s.label().c_str());
  }
}

Status Runner::cpu_sublayer(size_t i, const kernels::BatchMeta& hb, const TensorView& htok, int32_t n,
                            const StepIo& in, float* logits) {
  const model::SubLayer& s = subs_[i];
  const model::DebugHook* hook = hook_ ? &hook_ : nullptr;
  switch (s.kind) {
    case SubLayerKind::kEmbed: model::forward_embed(*cpu_ops_, spec_, host_w_, htok, h_s_, hook); break;
    case SubLayerKind::kFfn:
      if (model::is_ffn_slice(s)) return make_error(ErrorCode::kInternal, "%s outside its slices' run", s.label().c_str());
      model::forward_ffn(*cpu_ops_, spec_, host_w_, s.layer, n, h_s_, hook);
      break;
    case SubLayerKind::kHead: {
      const size_t V = static_cast<size_t>(spec_.n_vocab);
      for (int32_t r0 = 0; r0 < in.n_out; r0 += h_s_.n_out_max) {
        const int32_t nr = std::min(h_s_.n_out_max, in.n_out - r0);
        model::forward_head(*cpu_ops_, spec_, host_w_, in.out_rows + r0, nr, h_s_, hook);
        std::memcpy(logits + r0 * V, h_s_.logits.data, nr * V * sizeof(float));
      }
      break;
    }
    default:
      (void)hb;
      return make_error(ErrorCode::kUnsupported, "%s on the CPU", s.label().c_str());
  }
  return Status::ok();
}

void Runner::set_timeline(Timeline* timeline) {
  tl_ = timeline;
  pending_.clear();
  tl_step_ = 0;
  if (!tl_) return;
  Status s = Status::ok();
  auto make = [&](std::vector<std::unique_ptr<Event>>& v, size_t n) {
    while (s.is_ok() && v.size() < n) {
      auto e = dev_->create_event(true);
      if (!e) {
        s = e.status();
        return;
      }
      v.push_back(std::move(*e));
    }
  };
  make(ev_t0_, subs_.size());
  make(ev_t1_, subs_.size());
  const size_t K = ring_ ? static_cast<size_t>(ring_->slots()) : 0;
  make(ev_p0_, K);
  make(ev_p1_, K);
  if (s.is_ok() && !ev_origin_) {
    auto e = dev_->create_event(true);
    if (e) ev_origin_ = std::move(*e);
    else s = e.status();
  }
  if (s.is_ok()) s = dev_->synchronize();
  if (s.is_ok()) s = dev_->record(*ev_origin_, *cs_);
  if (s.is_ok()) s = dev_->sync(*ev_origin_);
  if (!s.is_ok()) {
    tl_ = nullptr;  // recording is best effort: a device without timing events records nothing
    return;
  }
  tl_origin_ms_ = now_ms();
}

double Runner::tl_ms(Event& e) {
  auto ms = dev_->elapsed_ms(*ev_origin_, e);
  return ms ? *ms : -1.0;
}

void Runner::tl_span(Lane lane, double t0, double t1, const std::string& label, uint64_t bytes) {
  if (!tl_ || t0 < 0 || t1 < t0) return;
  Span sp;
  sp.lane = lane;
  sp.t0_ms = t0;
  sp.t1_ms = t1;
  sp.step = tl_step_;
  sp.tier = tl_->steps.empty() ? 0 : tl_->steps.back().tier;
  sp.label = label;
  sp.bytes = bytes;
  tl_->spans.push_back(std::move(sp));
}

Expected<int> Runner::find_or_capture(GraphKey key, const std::function<void()>& enqueue) {
  for (const auto& [k, gid] : graphs_)
    if (k == key) return gid;
  if (graphs_.size() >= 256) {  // bounded: start over (steps keep working, capture is ~ms)
    bundle_->drop_graphs();
    graphs_.clear();
  }
  FERRY_RETURN_IF_ERROR(bundle_->begin_capture());
  enqueue();
  FERRY_ASSIGN_OR_RETURN(int id, bundle_->end_capture());
  const size_t tier = key.tier;
  graphs_.emplace_back(std::move(key), id);
  ++stats_[tier].graph_captures;
  return id;
}

Status Runner::replay_segment(size_t ti, size_t first, size_t end, const kernels::BatchMeta& db,
                              const kernels::KvView& dkv, int32_t n, const StepIo& in, float* logits) {
  GraphKey key{ti, n, dkv.n_cells, {}, first, end};
  auto id = find_or_capture(key, [&] {
    for (size_t i = first; i < end; ++i) (void)device_sublayer(i, db, dkv, n, in, logits);
  });
  if (!id) {  // this device / driver cannot capture: enqueue one by one from now on
    bundle_->clear_status();
    o_.cuda_graphs = false;
    for (size_t i = first; i < end; ++i) FERRY_RETURN_IF_ERROR(device_sublayer(i, db, dkv, n, in, logits));
    return Status::ok();
  }
  ++stats_[ti].graph_replays;
  return bundle_->replay(*id);
}

Status Runner::run_graph(const StepIo& in, float* logits, size_t ti, bool* used) {
  *used = false;
  const int32_t n = in.n_tokens;
  if (!cuda_ || !o_.cuda_graphs || o_.measure || tl_ || !graph_ok_[ti] || n > o_.graph_max_tokens ||
      in.n_out < 1 || in.n_out > sz_.n_out_dev)
    return Status::ok();
  *used = true;
  // Scan a bucket of cells (<= 1/8 extra beyond 2048 cells) so one graph serves many steps; the padding
  // cells carry sequence -1 and position -1, which no query sees.
  const int32_t bucket = scan_bucket(in.n_cells_scan);
  kernels::BatchMeta db;
  kernels::KvView dkv;
  stage_meta(in, bucket, nullptr, nullptr, &db, &dkv);
  int32_t* h = h_meta_;

  // Embedding on the CPU (one row per token), then everything else from the graph.
  const TensorView htok = TensorView::make(DType::I32, h, n);
  model::forward_embed(*cpu_ops_, spec_, host_w_, htok, h_s_, hook_ ? &hook_ : nullptr);
  const size_t d_bytes = static_cast<size_t>(spec_.n_embd) * n * sizeof(float);
  FERRY_RETURN_IF_ERROR(dev_->copy_h2d(d_meta_, h, (4ull * n + 2ull * bucket) * sizeof(int32_t), *cs_));
  FERRY_RETURN_IF_ERROR(dev_->copy_h2d(d_s_.x.data, h_s_.x.data, d_bytes, *cs_));

  GraphKey key{ti, n, bucket, std::vector<int32_t>(in.out_rows, in.out_rows + in.n_out), 0, 0};
  auto captured = find_or_capture(std::move(key), [&] {
    const model::ModelSpec* spec = &spec_;
    const model::ModelWeights* w = &dev_w_;
    const model::Scratch* ds = &d_s_;
    kernels::Ops& ops = bundle_->ops();
    for (size_t i = 1; i < subs_.size(); ++i) {
      const model::SubLayer& sl = subs_[i];
      switch (sl.kind) {
        case SubLayerKind::kAttention: {
          kernels::KvView kv = dkv;
          kv.k = d_k_[sl.layer];
          kv.v = d_v_[sl.layer];
          model::forward_attention(ops, *spec, *w, sl.layer, db, kv, *ds, nullptr);
          break;
        }
        case SubLayerKind::kFfn:
          if (model::is_ffn_slice(sl))
            model::forward_ffn_slice(ops, *spec, *w, sl.layer, dev_slice_[i], n, *ds, nullptr);
          else
            model::forward_ffn(ops, *spec, *w, sl.layer, n, *ds, nullptr);
          break;
        case SubLayerKind::kHead: model::forward_head(ops, *spec, *w, in.out_rows, in.n_out, *ds, nullptr); break;
        default: break;
      }
    }
  });
  if (!captured) {
    bundle_->clear_status();
    o_.cuda_graphs = false;  // this device / driver cannot capture: run ops one by one from now on
    *used = false;
    return Status::ok();
  }
  const int id = *captured;
  FERRY_RETURN_IF_ERROR(bundle_->replay(id));
  const size_t V = static_cast<size_t>(spec_.n_vocab);
  FERRY_RETURN_IF_ERROR(dev_->copy_d2h(h_s_.logits.data, d_s_.logits.data, in.n_out * V * sizeof(float), *cs_));
  FERRY_RETURN_IF_ERROR(dev_->record(*ev_x_, *cs_));
  FERRY_RETURN_IF_ERROR(dev_->sync(*ev_x_));
  FERRY_RETURN_IF_ERROR(bundle_->status());
  std::memcpy(logits, h_s_.logits.data, in.n_out * V * sizeof(float));
  ++stats_[ti].graph_replays;
  return Status::ok();
}

Status Runner::run_slices(size_t ti, size_t first, size_t end, int32_t n, bool timed, size_t* j, size_t K,
                          const std::function<Status(size_t)>& fill_upto, const SliceTimes& times) {
  const std::vector<Placement>& pl = placements_[ti];
  const model::ModelSpec* spec = &spec_;
  const model::ModelWeights* w = &dev_w_;
  const model::Scratch* ds = &d_s_;
  const int32_t il = subs_[first].layer;
  const size_t d_bytes = static_cast<size_t>(spec_.n_embd) * n * sizeof(float);
  // The device norms the residual and sends the normed rows down.
  FERRY_RETURN_IF_ERROR(
      on_device([=](kernels::Ops& ops) { model::forward_ffn_norm(ops, *spec, *w, il, n, *ds, nullptr); }));
  FERRY_RETURN_IF_ERROR(dev_->copy_d2h(h_s_.xn.data, d_s_.xn.data, d_bytes, *cs_));
  FERRY_RETURN_IF_ERROR(dev_->record(*ev_x_, *cs_));
  // The device's slices are enqueued before the CPU starts, so both compute at once. Without post-norms
  // each adds its part to x; with them the parts sum into proj.
  const bool post = spec_.post_norms;
  bool proj_started = false;
  for (size_t i = first; i < end; ++i) {
    if (pl[i] == Placement::kCpu) continue;
    const model::FfnSlice* sl = &dev_slice_[i];
    const bool acc = !post || proj_started;
    FERRY_RETURN_IF_ERROR(device_work(ti, i, timed, j, K, fill_upto, [&] {
      return on_device([=](kernels::Ops& ops) {
        model::forward_ffn_part(ops, *spec, *sl, n, *ds, post ? ds->proj.rows(0, n) : ds->x.rows(0, n), acc);
      });
    }));
    proj_started = post;
  }
  // The CPU's slices on the normed rows, summed into the host's proj.
  const double w0 = now_ms();
  FERRY_RETURN_IF_ERROR(dev_->sync(*ev_x_));
  if (times.waits) times.waits->emplace_back(w0, now_ms());
  const TensorView hproj = h_s_.proj.rows(0, n);
  bool cpu_started = false;
  for (size_t i = first; i < end; ++i) {
    if (pl[i] != Placement::kCpu) continue;
    (*times.cpu_t0)[i] = now_ms();
    model::forward_ffn_part(*cpu_ops_, spec_, host_slice_[i], n, h_s_, hproj, cpu_started);
    (*times.cpu_t1)[i] = now_ms();
    cpu_started = true;
  }
  // Their sum goes up into the device's `up` buffer (in stream order the device's slices are done with
  // it) and is added; the post-norm and the residual add follow.
  const TensorView dpart = TensorView::make(DType::F32, d_s_.up.data, spec_.n_embd, n, 1, 1, dev_where_);
  FERRY_RETURN_IF_ERROR(dev_->copy_h2d(d_s_.up.data, h_s_.proj.data, d_bytes, *cs_));
  return on_device([=](kernels::Ops& ops) {
    model::forward_ffn_combine(ops, *spec, *w, il, n, *ds, dpart, proj_started, nullptr);
  });
}

// KV cells before this step as the cost model counts context: the newest position + 1 - the step's tokens.
double step_context(const StepIo& in) {
  int32_t last = 0;
  for (int32_t i = 0; i < in.n_tokens; ++i) last = std::max(last, in.pos[i] + 1);
  return std::max(0, last - in.n_tokens);
}

Status Runner::run(const StepIo& in, float* logits) {
  const double t_start = now_ms();
  const int32_t n = in.n_tokens;
  if (n <= 0 || n > o_.n_batch)
    return make_error(ErrorCode::kInvalidArgument, "step of %d tokens (batch holds %d)", n, o_.n_batch);
  if (in.n_cells_scan > o_.n_cells)
    return make_error(ErrorCode::kInvalidArgument, "step scans %d cells, the cache has %d", in.n_cells_scan, o_.n_cells);
  size_t ti = ps_.tiers.size() - 1;
  for (size_t t = 0; t < ps_.tiers.size(); ++t)
    if (ps_.tiers[t].tokens >= n) {
      ti = t;
      break;
    }
  const std::vector<Placement>& pl = placements_[ti];
  TierStats& st = stats_[ti];
  if (tl_ && tl_->full()) tl_ = nullptr;
  const bool rec = tl_ != nullptr;
  const bool timed = o_.measure || rec;
  if (rec) {
    StepMark mk;
    mk.step = tl_step_;
    mk.tier = ps_.tiers[ti].tokens;
    mk.n_tokens = n;
    mk.t0_ms = t_start - tl_origin_ms_;
    tl_->steps.push_back(mk);
  }

  {
    bool used = false;
    Status gs = run_graph(in, logits, ti, &used);
    if (used) {
      if (!gs.is_ok()) {
        (void)dev_->synchronize();
        return gs;
      }
      model::apply_logit_softcap(spec_, logits, static_cast<int64_t>(in.n_out) * spec_.n_vocab);
      ++st.steps;
      st.context_sum += step_context(in);
      st.wall_ms += now_ms() - t_start;
      return Status::ok();
    }
  }

  // Segment graphs: runs of resident device sub-layers replayed from CUDA graphs (the step scans a
  // bucket of cells then, as in run_graph; device and host views both see the padding cells).
  const bool seg_graphs = cuda_ && o_.cuda_graphs && !timed && n <= o_.graph_max_tokens;
  const int32_t scan = seg_graphs ? scan_bucket(in.n_cells_scan) : in.n_cells_scan;

  // Batch metadata: one pinned mirror, one upload.
  kernels::BatchMeta hb, db;
  kernels::KvView hkv, dkv;
  stage_meta(in, scan, &hb, &hkv, &db, &dkv);
  int32_t* h = h_meta_;
  const TensorView htok = TensorView::make(DType::I32, h, n);

  // Prefetches the previous step issued after its end: their spans are complete now (this step's
  // first acquires wait for them), resolved at this step's end.
  std::vector<PendingCopy> prev_pending;
  prev_pending.swap(pending_);

  Status s = dev_->copy_h2d(d_meta_, h, (4ull * n + 2ull * scan) * sizeof(int32_t), *cs_);
  const size_t K = ring_ ? static_cast<size_t>(ring_->slots()) : 0;
  const std::vector<size_t>& S = streamed_[ti];
  size_t issued = 0;  // fills issued for streamed_[ti][0 .. issued)
  auto fill_upto = [&](size_t end) -> Status {
    for (; issued < std::min(end, S.size()); ++issued) {
      Event* t0 = nullptr;
      Event* t1 = nullptr;
      if (timed) FERRY_RETURN_IF_ERROR(in_step_events(issued, &t0, &t1));
      bool copied = false;
      FERRY_RETURN_IF_ERROR(fill(ti, issued, t0, t1, &copied, &st));
      if (timed) {
        if (copied_.size() <= issued) copied_.resize(issued + 1);
        copied_[issued] = copied;
      }
    }
    return Status::ok();
  };
  if (s.is_ok() && ring_) s = fill_upto(K);

  const size_t d_bytes = static_cast<size_t>(spec_.n_embd) * n * sizeof(float);
  bool x_dev = false;  // the step starts on the host (token ids, embed)
  size_t j = 0;        // next streamed sub-layer
  std::vector<double> cpu_t0(subs_.size(), -1.0), cpu_t1(subs_.size(), -1.0);
  std::vector<std::pair<double, double>> waits;  // host blocked on device data (timeline)
  const std::vector<uint8_t>& mixed = mixed_[ti];
  for (size_t i = 0; i < subs_.size() && s.is_ok(); ++i) {
    if (mixed[i]) {  // the first of a layer's FFN slices, some on the CPU: all of them at once
      if (!x_dev) s = dev_->copy_h2d(d_s_.x.data, h_s_.x.data, d_bytes, *cs_);
      x_dev = true;
      const size_t e = i + static_cast<size_t>(subs_[i].n_slices);
      if (s.is_ok()) s = run_slices(ti, i, e, n, timed, &j, K, fill_upto, {&cpu_t0, &cpu_t1, rec ? &waits : nullptr});
      i = e - 1;
      continue;
    }
    const bool on_dev = pl[i] != Placement::kCpu;
    if (on_dev && !x_dev) {
      s = dev_->copy_h2d(d_s_.x.data, h_s_.x.data, d_bytes, *cs_);
      x_dev = true;
    } else if (!on_dev && x_dev) {
      s = dev_->copy_d2h(h_s_.x.data, d_s_.x.data, d_bytes, *cs_);
      if (s.is_ok()) s = dev_->record(*ev_x_, *cs_);
      const double w0 = now_ms();
      if (s.is_ok()) s = dev_->sync(*ev_x_);
      if (rec) waits.emplace_back(w0, now_ms());
      x_dev = false;
    }
    if (!s.is_ok()) break;
    if (!on_dev) {
      cpu_t0[i] = now_ms();
      s = cpu_sublayer(i, hb, htok, n, in, logits);
      cpu_t1[i] = now_ms();
      continue;
    }
    if (seg_graphs && pl[i] == Placement::kResident && subs_[i].kind != SubLayerKind::kHead) {
      size_t e = i;
      while (e < subs_.size() && pl[e] == Placement::kResident && subs_[e].kind != SubLayerKind::kHead && !mixed[e])
        ++e;
      if (e - i >= 2) {
        s = replay_segment(ti, i, e, db, dkv, n, in, logits);
        i = e - 1;  // the loop's ++i moves past the segment
        continue;
      }
    }
    s = device_work(ti, i, timed, &j, K, fill_upto, [&] { return device_sublayer(i, db, dkv, n, in, logits); });
  }
  const double w_end = now_ms();
  if (s.is_ok()) s = dev_->sync(*cs_);
  if (rec) waits.emplace_back(w_end, now_ms());
  if (s.is_ok() && cuda_) s = bundle_->status();
  if (!s.is_ok()) {
    (void)dev_->synchronize();
    if (ring_) ring_->forget();
    return s;
  }
  model::apply_logit_softcap(spec_, logits, static_cast<int64_t>(in.n_out) * spec_.n_vocab);

  // Measurements of this step (the copy stream may still run ahead: only in-step copies are timed).
  if (timed) {
    s = dev_->sync(*xs_);
    for (size_t i = 0; i < subs_.size() && s.is_ok(); ++i) {
      const bool on_cpu = cpu_t0[i] >= 0;
      const bool on_dev = pl[i] != Placement::kCpu;
      if (o_.measure) {
        if (on_cpu) {
          st.sub_ms[i] += cpu_t1[i] - cpu_t0[i];
        } else if (on_dev) {
          auto ms = dev_->elapsed_ms(*ev_t0_[i], *ev_t1_[i]);
          if (ms) st.sub_ms[i] += *ms;
        }
      }
      if (rec) {
        if (on_cpu) {
          tl_span(Lane::kCpu, cpu_t0[i] - tl_origin_ms_, cpu_t1[i] - tl_origin_ms_, subs_[i].label());
        } else if (on_dev) {
          tl_span(Lane::kGpu, tl_ms(*ev_t0_[i]), tl_ms(*ev_t1_[i]), subs_[i].label());
        }
      }
    }
    for (size_t c = 0; c < issued && c < ev_c0_.size() && c < copied_.size(); ++c) {
      if (!copied_[c]) continue;
      if (o_.measure) {
        auto ms = dev_->elapsed_ms(*ev_c0_[c], *ev_c1_[c]);
        if (ms) st.copy_ms += *ms;
      }
      if (rec)
        tl_span(Lane::kCopy, tl_ms(*ev_c0_[c]), tl_ms(*ev_c1_[c]), "copy " + subs_[S[c]].label(), layout_[S[c]].bytes);
    }
    if (rec) {
      for (const PendingCopy& p : prev_pending) {
        const int32_t keep = tl_step_;
        tl_step_ = p.step;
        tl_span(Lane::kCopy, tl_ms(*ev_p0_[p.idx]), tl_ms(*ev_p1_[p.idx]), p.label, p.bytes);
        tl_step_ = keep;
      }
      for (const auto& [a, b] : waits) tl_span(Lane::kHost, a - tl_origin_ms_, b - tl_origin_ms_, "wait");
    }
  }
  // Weights do not depend on data: start the next step's first copies now (assuming the same tier,
  // the common case in decode); the next step reuses them if its tier agrees.
  if (s.is_ok() && ring_ && !o_.measure) {
    for (size_t jj = 0; jj < std::min(K, S.size()) && s.is_ok(); ++jj) {
      const bool tl_copy = rec && jj < ev_p0_.size();
      bool copied = false;
      s = fill(ti, jj, tl_copy ? ev_p0_[jj].get() : nullptr, tl_copy ? ev_p1_[jj].get() : nullptr, &copied, nullptr);
      if (s.is_ok() && copied) {
        ++st.prefetch_copies;
        st.prefetch_bytes += layout_[S[jj]].bytes;
      }
      if (s.is_ok() && tl_copy && copied)
        pending_.push_back({jj, "prefetch " + subs_[S[jj]].label(), layout_[S[jj]].bytes, tl_step_,
                            ps_.tiers[ti].tokens});
    }
  }
  if (ti < ps_.tiers.size())
    for (size_t i = 0; i < subs_.size(); ++i) {
      const std::vector<double>& plan_ms = ps_.tiers[ti].sub_ms;
      if (cpu_t0[i] < 0 || i >= plan_ms.size() || plan_ms[i] < 0.02 || subs_[i].kind == SubLayerKind::kEmbed) continue;
      st.cpu_ms += cpu_t1[i] - cpu_t0[i];
      st.cpu_plan_ms += plan_ms[i];
      ++st.cpu_calls;
    }
  ++st.steps;
  st.context_sum += step_context(in);
  st.wall_ms += now_ms() - t_start;
  if (rec) {
    tl_->steps.back().t1_ms = now_ms() - tl_origin_ms_;
    ++tl_step_;
  }
  return s;
}

}  // namespace

uint64_t hybrid_extra_bytes(const model::ModelSpec& spec, const std::vector<model::SubLayer>& subs,
                            const plan::PlanSet& plan, const HybridOptions& options, DeviceKind kind) {
  const Sizes z = sizes_for(spec, subs, plan, options, kind);
  const uint64_t mine = z.scratch + z.meta + z.cuda_ops;
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
  auto r = std::make_unique<Runner>(spec, weights, list.empty() ? subs : list, plan, std::move(device), options);
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

Expected<std::unique_ptr<HybridRunner>> make_hybrid_runner(const model::ModelSpec& spec,
                                                           const model::ModelWeights& weights,
                                                           const std::vector<model::SubLayer>& subs,
                                                           const HybridSetup& setup) {
  DeviceKind kind;
  FERRY_ASSIGN_OR_RETURN(plan::PlannerOptions po, planner_options(setup, &kind));
  // Plan, then shrink the planner's budget by what the executor takes beyond the plan's accounting
  // (activation layout, metadata, CudaOps scratch) so every block fits the arena.
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
    const uint64_t need = hybrid_extra_bytes(spec, subs, ps, setup.options, kind);
    if (need <= extra) break;
    extra = need;
  }
  EmulatedOptions eo = setup.emulated;
  eo.budget = setup.vram_budget;
  std::unique_ptr<Device> dev;
  if (kind == DeviceKind::kCuda) {
    FERRY_ASSIGN_OR_RETURN(dev, make_cuda_device(setup.ordinal, setup.vram_budget));
  } else {
    FERRY_ASSIGN_OR_RETURN(dev, make_emulated_device(eo));
  }
  return HybridRunner::create(spec, weights, subs, ps, std::move(dev), setup.options);
}

std::optional<double> cpu_vs_profile(const std::vector<TierStats>& stats, int64_t min_calls) {
  double ms = 0, plan_ms = 0;
  int64_t calls = 0;
  for (const TierStats& t : stats) {
    ms += t.cpu_ms;
    plan_ms += t.cpu_plan_ms;
    calls += t.cpu_calls;
  }
  if (calls < min_calls || plan_ms <= 0) return std::nullopt;
  return ms / plan_ms;
}

double TierStats::predicted_at_steps(const plan::PlanSet& ps, size_t tier) const {
  if (steps == 0 || tier >= ps.tiers.size()) return predicted_ms;
  return plan::predicted_at(ps.tiers[tier], ps.eval_context, context_sum / steps);
}

std::string explain_text(const HybridRunner& r) {
  std::string out;
  char line[512];
  const plan::PlanSet& ps = r.plan();
  std::snprintf(line, sizeof line, "%-6s %-10s %6s %12s %12s %8s %7s %9s %6s %9s\n", "tier", "strategy", "steps",
                "predicted ms", "measured ms", "ratio", "copies", "copy MiB", "hits", "prefetch");
  out += line;
  for (size_t ti = 0; ti < r.stats().size(); ++ti) {
    const TierStats& t = r.stats()[ti];
    if (t.steps == 0) continue;
    const double meas = t.wall_ms / t.steps, pred = t.predicted_at_steps(ps, ti);
    std::snprintf(line, sizeof line, "%-6d %-10s %6lld %12.3f %12.3f %8.2f %7lld %9.1f %6lld %9lld\n", t.tokens,
                  plan::strategy_name(t.strategy), static_cast<long long>(t.steps), pred, meas,
                  pred > 0 ? meas / pred : 0.0, static_cast<long long>(t.copies),
                  t.copy_bytes / 1048576.0, static_cast<long long>(t.prefetch_hits),
                  static_cast<long long>(t.prefetch_copies));
    out += line;
  }
  bool any_sub = false;
  for (const TierStats& t : r.stats())
    for (double v : t.sub_ms) any_sub |= v > 0;
  if (!any_sub) return out;
  out += "\nper sub-layer, ms per step (device: compute-stream events; cpu: host clock), and the plan's time for it\n"
         "alone (cpu: no copies running; device: kernels without a graph, the copy not included)\n";
  for (size_t ti = 0; ti < r.stats().size(); ++ti) {
    const TierStats& t = r.stats()[ti];
    if (t.steps == 0) continue;
    std::snprintf(line, sizeof line, "tier %d: copies %.3f ms/step\n", t.tokens, t.copy_ms / t.steps);
    out += line;
    const std::vector<double>* pred = ti < ps.tiers.size() ? &ps.tiers[ti].sub_ms : nullptr;
    for (size_t i = 0; i < t.sub_ms.size(); ++i) {
      const double meas = t.sub_ms[i] / t.steps;
      const bool same_place = pred != nullptr && i < ps.tiers[ti].placement.size() &&
                              ps.tiers[ti].placement[i] == r.placements()[ti][i];  // not a forced strategy's
      if (same_place && i < pred->size() && (*pred)[i] > 0) {
        std::snprintf(line, sizeof line, "  %-14s %-9s %10.3f  plan %8.3f  %+5.0f %%\n", ps.sublayers[i].label.c_str(),
                      plan::placement_name(r.placements()[ti][i]), meas, (*pred)[i], (meas / (*pred)[i] - 1) * 100);
      } else {
        std::snprintf(line, sizeof line, "  %-14s %-9s %10.3f\n", ps.sublayers[i].label.c_str(),
                      plan::placement_name(r.placements()[ti][i]), meas);
      }
      out += line;
    }
  }
  return out;
}

}  // namespace ferry::exec
