// HybridRunnerImpl (internal to exec): the HybridRunner behind hybrid_runner.h. Its work is split by
// responsibility over several files, each defining the methods of one room:
//   hybrid_runner.cc    construction, the load (arena blocks, in order), placements per tier, the factories
//   hybrid_weights.cc   weights in residence: layouts, resident uploads, pinned / registered streamed weights
//   hybrid_schedule.cc  one step: tier, metadata, the ring's fills on the copy stream, sub-layers in order
//   hybrid_graphs.cc    CUDA graph capture and replay (whole decode steps, runs of resident sub-layers)
//   hybrid_slices.cc    FFN slices: their views, and a layer whose slices run on the CPU and the device at once
//   hybrid_moe.cc       mixture-of-experts layers: expert groups' views, a layer's router and groups wherever
//                       each is placed
//   hybrid_expert_cache.cc  the hot-expert cache: device slots for the CPU's most picked experts
//   hybrid_stats.cc     per-tier statistics, the timeline, explain_text
//   hybrid_vision.cc    an image through the vision tower in the arena the resident weights leave
//
// Load: allocate every arena block up front (KV, vectors, resident weights, ring, activations, metadata,
// CudaOps scratch) so a budget problem shows at load, not mid step; upload resident weights once through
// pinned staging; make streamed sub-layers' weights copyable asynchronously. Step: metadata up, then
// sub-layers in order; device work is enqueued on the compute stream (CUDA: kernels; emulated: host
// functions on its worker, so stream order and event waits are real), the copy stream stays up to K
// sub-layers ahead, and the host only blocks where data must cross to the CPU.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "exec/device.h"
#include "exec/device_cuda.h"
#include "exec/expert_cache.h"
#include "exec/hybrid_runner.h"
#include "exec/weight_ring.h"
#include "kernels/ops.h"
#include "model/forward.h"

namespace ferry::exec::detail {

inline uint64_t align256(uint64_t bytes) { return (bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }

inline double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Head rows per host chunk (as the all-on-one runner): bounded logits scratch for any vocabulary.
constexpr int32_t kHostHeadChunk = 32;
// Pinned staging for uploads at load (two halves alternate so memcpy and copy overlap).
constexpr uint64_t kUploadStageBytes = 32ull << 20;

// The weight matrices of a whole sub-layer (what residency and streaming move), in a fixed order.
std::vector<TensorView*> matrices_of(model::ModelWeights& w, const model::SubLayer& s);
// Norms, biases and rope factors present in the model: always on the device when a GPU is planned (the
// planner counts every vector as resident).
std::vector<TensorView*> vectors_of(model::ModelWeights& w);
// Copies the rows of `t` into dst back to back (a strided view, e.g. an FFN slice's columns of ffn_down,
// becomes a contiguous matrix); `rows` rows from r0.
void gather_rows(const TensorView& t, int64_t r0, int64_t rows, char* dst);
// Rows [r0, r0 + nr) of `src`, strided or not, into dst back to back in layout `to` (kSplit: repacked for
// the CUDA decode kernels). `gathered` holds a strided source's rows before a repack.
void write_rows(const TensorView& src, int64_t r0, int64_t nr, ferry::Layout to, char* dst,
                std::vector<char>* gathered);

// Offsets of a sub-layer's matrices inside a slot / pinned copy / resident block (256-aligned each,
// as the planner counts them).
struct SlotLayout {
  std::vector<uint64_t> offset;
  std::vector<ferry::Layout> layout;  // per matrix: kSplit when repacked for the CUDA decode kernels
  uint64_t bytes = 0;
};

// Device bytes the runner takes beyond the plan's weights, KV and ring.
struct RunnerSizes {
  int32_t n_out_dev = 1;      // head rows per device chunk
  uint64_t scratch = 0;       // device activations
  uint64_t meta = 0;          // device batch metadata
  uint64_t cuda_ops = 0;      // CudaOps scratch + cuBLAS workspace (CUDA only)
  uint64_t expert_cache = 0;  // the hot-expert cache's blocks (HybridOptions::expert_cache_bytes buys them)
  kernels::CudaScratchShape shape;
};
// `plan`'s options hold the GEMM staging the planner resolved (never kGemmStagingAuto).
RunnerSizes sizes_for(const model::ModelSpec& spec, const std::vector<model::SubLayer>& subs,
                      const plan::PlanSet& plan, const HybridOptions& o, DeviceKind kind);

class HybridRunnerImpl final : public HybridRunner {
 public:
  HybridRunnerImpl(const model::ModelSpec& spec, const model::ModelWeights& weights,
                   const std::vector<model::SubLayer>& subs, const plan::PlanSet& plan, std::unique_ptr<Device> device,
                   const HybridOptions& options);
  ~HybridRunnerImpl() override;

  Status init();  // the load (hybrid_runner.cc)

  // ---- HybridRunner --------------------------------------------------------------------------------
  Status run(const StepIo& in, float* logits) override;
  Expected<std::vector<float>> encode_image(const model::VisionSpec& spec, const model::VisionWeights& w,
                                            const model::VisionInput& in, VisionRun* run) override;
  void set_debug_hook(model::DebugHook hook) override { debug_hook_ = std::move(hook); }
  void set_timeline(Timeline* timeline) override;
  const char* name() const override { return on_cuda_ ? "hybrid-cuda" : "hybrid-emulated"; }
  const plan::PlanSet& plan() const override { return plan_; }
  Device& device() override { return *device_; }
  const std::vector<std::vector<plan::Placement>>& placements() const override { return placements_; }
  const std::vector<TierStats>& stats() const override { return tier_stats_; }
  void reset_stats() override;
  const std::vector<std::pair<std::string, uint64_t>>& arena_blocks() const override { return arena_tags_; }
  uint64_t pinned_weight_bytes() const override { return pin_stats_.bytes; }
  double load_seconds() const override { return load_seconds_; }
  double pin_seconds() const override { return pin_stats_.seconds; }
  const PinStats& pin_stats() const override { return pin_stats_; }
  const ExpertCacheGeometry& expert_cache_geometry() const override { return cache_geo_; }
  const ExpertCacheStats& expert_cache_stats() const override { return cache_.stats; }

 private:
  // A prefetch issued after a recorded step, whose span the next step resolves (timeline).
  struct PendingCopy {
    size_t slot;     // index into prefetch_*_events_
    std::string label;
    uint64_t bytes;
    int32_t step;    // the timeline step that issued it
  };
  // What one step carries from phase to phase (hybrid_schedule.cc).
  struct Step {
    const StepIo* in = nullptr;
    float* logits = nullptr;
    size_t tier = 0;                   // index into plan_.tiers
    int32_t n = 0;                     // tokens
    bool recording = false;            // into the timeline
    bool timed = false;                // events around sub-layers and copies (measure or recording)
    bool segment_graphs = false;       // runs of resident sub-layers replayed from CUDA graphs
    int32_t scan = 0;                  // KV cells scanned (a graph bucket when segment_graphs)
    kernels::BatchMeta host_batch, device_batch;
    kernels::KvView host_kv, device_kv;
    TensorView host_tokens;
    size_t ring_slots = 0;             // K (0: no ring)
    size_t fills_issued = 0;           // fills issued for streamed_by_tier_[tier][0 .. fills_issued)
    size_t next_streamed = 0;          // index into streamed_by_tier_[tier] of the next streamed sub-layer
    bool x_on_device = false;          // where the residual stream is (the step starts on the host)
    std::vector<double> cpu_start_ms, cpu_end_ms;    // per sub-layer on the CPU (host clock), else -1
    std::vector<std::pair<double, double>> host_waits;  // host blocked on device data (timeline)
    std::vector<PendingCopy> previous_prefetches;    // the previous step's prefetch spans (timeline)
  };

  // ---- load (hybrid_runner.cc) -------------------------------------------------------------------
  // Arena blocks whose contents the load uploads after the pinned staging exists.
  struct LoadBlocks {
    DeviceBuffer kv;
    std::vector<std::pair<TensorView*, char*>> vectors;  // (view in device_weights_, device address)
    std::vector<char*> resident_base;                    // per sub-layer: its resident block, or nullptr
  };
  // The pinned host copy of a vision tower's weights, one buffer per ring item (hybrid_vision.cc).
  struct VisionPinned {
    const void* key = nullptr;  // the first matrix's host address: which tower this is
    std::vector<HostBuffer> items;
    HostBuffer vectors;         // its norm / bias vectors, packed as on the device
    HostBuffer io;              // an image's inputs, then its embeddings (grown as images need)
  };
  TierStats blank_stats(int32_t tokens, plan::Strategy s, double predicted_ms) const;  // hybrid_stats.cc
  // An arena block, remembered for release and reports.
  Expected<DeviceBuffer> take(uint64_t bytes, const char* tag);
  Expected<HostBuffer> take_pinned(uint64_t bytes);
  // Per tier: the placement (the plan's, or the forced strategy's), streamed sub-layers, split FFNs,
  // graph eligibility, blank stats; errors for placements this executor cannot run.
  Status choose_placements();
  Status create_streams_and_events();
  // Every arena block, largest-lived first: KV, vectors, resident weights, ring, activations, batch
  // metadata, CudaOps scratch (CUDA) or the emulated device's ops.
  Status allocate_arena(LoadBlocks* blocks);
  // The resident weights' blocks (resident_blocks_, in sub-layer order) and the ring, as the load made
  // them; allocate_residents fills base[i] with sub-layer i's block (nullptr when it has none).
  Status allocate_residents(std::vector<char*>* base);
  Status make_ring();
  // Pinned host memory: activations, the metadata mirror, the upload staging.
  Status allocate_pinned();

  // ---- weights in residence (hybrid_weights.cc) --------------------------------------------------
  // slot_layouts_ from the host views (one source of truth for shapes and bytes).
  void make_slot_layouts();
  // Zeroed KV (poisoned memory must never reach a kernel), vectors and resident matrices; releases the
  // upload staging.
  Status upload_at_load(const LoadBlocks& blocks);
  std::vector<size_t> streamed_any() const;  // sub-layers streamed in some tier, ascending
  // Whether sub-layer i runs on the CPU in some tier (then the CPU reads its matrices from the mmap).
  bool cpu_any(size_t i) const;
  int32_t pin_threads(size_t items) const;
  // Page-locks the mmap ranges of these streamed sub-layers' matrices in place. Returns the items left
  // to copy: none, or all of them when the driver refused (the reason in pin_stats_.note) or one is an
  // FFN slice (its down columns are strided in the file).
  std::vector<size_t> register_streamed(const std::vector<size_t>& items);
  // One pinned buffer per streamed sub-layer of `items` in slot layout, filled by several threads.
  Status copy_streamed(const std::vector<size_t>& items);
  // The streamed sub-layers to register in place as options_.pin_mode says (kAuto: those the CPU also
  // computes); registers them and returns every streamed sub-layer left to copy_streamed.
  std::vector<size_t> register_as_asked();
  // Hands sub-layer i's pages of the model's mapping back to the page cache (madvise) once its weights
  // are on the device or in a pinned copy, unless the CPU computes it in some tier; returns the bytes.
  // Keeps host memory at about one copy of the weights (the mapping is read again only by a vision
  // run's restore_residents, which releases them once more).
  // hw: a copy of host_weights_ the caller holds (host_mats points into it).
  uint64_t release_mmap_pages(model::ModelWeights& hw, size_t i);
  // Host memory (pageable, e.g. the mmap) -> device through the two pinned staging halves.
  Status upload(void* dst, const void* src, uint64_t bytes);
  // A matrix, repacked on the way when `to` is kSplit (whole rows per staging half).
  Status upload_matrix(void* dst, const TensorView& src, ferry::Layout to);
  // The resident matrices of sub-layer i into their block at `base`, then bound there.
  Status upload_resident(size_t i, char* base);
  // The matrices of sub-layer i as host views (a slice's down strided) / as the device views to bind.
  std::vector<TensorView*> host_mats(model::ModelWeights& hw, size_t i);
  std::vector<TensorView*> device_mats(size_t i);
  // Points device_weights_'s matrices of sub-layer i at base (+ layout offsets).
  void bind(size_t i, char* base);

  // ---- vision (hybrid_vision.cc) -----------------------------------------------------------------
  // Hands the resident weights' blocks and the ring back to the arena (waiting for the device first);
  // restore_residents (at the next run()) allocates them again in the load's order and uploads the
  // weights. CUDA graphs, which hold their addresses, are dropped.
  Status release_residents();
  Status restore_residents();
  // The pinned copy of the tower's items and vectors for the tower `key` (made once, kept for later
  // images), and an io buffer of at least io_bytes.
  Status pin_vision(const void* key, const std::vector<std::vector<const TensorView*>>& items,
                    const std::vector<SlotLayout>& layouts, const std::vector<TensorView*>& vectors,
                    uint64_t io_bytes);

  // ---- FFN slices (hybrid_slices.cc) -------------------------------------------------------------
  // Host views into the mmap and unbound device views of every slice sub-layer.
  void make_slice_views();
  // The down columns of slices that run on the CPU in some tier, gathered into contiguous host memory.
  void gather_cpu_slice_downs();
  // The slices [first, end) of one layer's FFN, some of them on the CPU: the device norms the residual
  // and sends it down, its slices run while the CPU runs the others, the CPU's sum goes back up and is
  // added. x is on the device before and after.
  Status run_slices(Step& step, size_t first, size_t end);

  // ---- mixture of experts (hybrid_moe.cc) ---------------------------------------------------------
  // Host views (into the mmap's stacked tensors) and unbound device views of every expert group.
  void make_expert_group_views();
  // Points the device groups' bias columns at the layer's bias tables in the vectors block (after upload).
  void bind_expert_biases();
  // The MoE layer whose router is sub-layer `router` and whose groups are [router + 1, end): the router
  // where it is placed, the device's groups enqueued (summing into the device's proj) while the CPU runs
  // its groups (summing into the host's proj), the CPU's sum added on the device, then x += proj. The
  // residual ends on the device when any part of the layer ran there.
  // router_enqueued: a segment graph has enqueued the (resident) router already.
  Status run_moe_layer(Step& step, size_t router, size_t end, bool router_enqueued = false);
  // Whether an expert group of sub-layer i's layer before it runs on the device in this tier (then group i
  // accumulates into proj).
  bool moe_device_group_before(size_t tier, size_t i) const;
  // The sub-layers of the MoE layer that starts at router sub-layer `router`: one past its last group.
  size_t moe_layer_end(size_t router) const;

  // ---- the hot-expert cache (hybrid_expert_cache.cc) -----------------------------------------------
  // At load, after the ring: the cache's arena blocks (slots, the remapped routing), its pinned host
  // buffers and its views, when options_.expert_cache_bytes buys a slot and some tier computes experts
  // on the CPU.
  Status make_expert_cache();
  // The cache's block back to the arena (a vision encode), its slots emptied; restore_expert_cache takes
  // it again.
  void release_expert_cache();
  Status restore_expert_cache();
  // With the MoE layer's routing on the host (router sub-layer `router`, groups [router + 1, end)): writes
  // the CPU's routing (device groups' and cached experts as -1) into masked_ids_; with a cache, also counts
  // the CPU's picks and writes the slots' routing (the slot of each cached pick, else -1) into the pinned
  // staging. Returns the picks a slot holds (0 without a cache); *cpu_picks: the picks left to the CPU.
  int32_t route_through_cache(const Step& step, size_t router, size_t end, int32_t* cpu_picks);
  // The layer's cached picks on the device (its slots' routing up, then one moe_experts over the slots),
  // summing into the device's proj (accumulate: after the layer's device groups).
  Status run_cached_experts(Step& step, size_t router, bool accumulate);
  // After a step that counted picks: scores decay, and the experts that gained most are copied into
  // their layer's weakest slots on the copy stream (at most kPromoteBytesPerStep a step); the next step's
  // first cached experts wait for those copies.
  Status promote_experts(const Step& step);

  // ---- the step and the ring (hybrid_schedule.cc) -------------------------------------------------
  size_t tier_for(int32_t n_tokens) const;
  // Runs fn with the device Ops in compute-stream order (CUDA: enqueues its kernels now).
  Status on_device(std::function<void(kernels::Ops&)> fn);
  // Ints stage_meta writes for a step that scans `scan` cells.
  static uint64_t meta_ints(const StepIo& in, int32_t scan) {
    return 4ull * in.n_tokens + 2ull * scan + (in.mrope_pos != nullptr ? 4ull * in.n_tokens : 0);
  }
  // Writes the step's metadata into the pinned mirror host_meta_ (tokens, pos, seq, cell [n], then
  // cell_pos, cell_seq [scan], cells past the real scan padded with -1, then the M-RoPE positions [4 n]
  // when the step has them) and sets the host (when asked) and device views of it.
  void stage_meta(const StepIo& in, int32_t scan, kernels::BatchMeta* host_batch, kernels::KvView* host_kv,
                  kernels::BatchMeta* device_batch, kernels::KvView* device_kv);
  // Issues the copy of the j-th streamed sub-layer of `tier` into slot j % K; t0/t1 (optional) time it.
  Status fill(size_t tier, size_t j, Event* t0, Event* t1, bool* copied, TierStats* stats);
  // Issues the step's fills up to streamed index `end` (exclusive).
  Status fill_ring_upto(Step& step, size_t end);
  Status fill_events(size_t j, Event** t0, Event** t1);  // timing events of the step's j-th fill
  // The residual stream to the device / to the host (waiting for it) when it is not there.
  Status residual_to_device(Step& step);
  Status residual_to_host(Step& step);
  // The sub-layers of a step in order (whole-step graphs aside).
  Status run_sublayers(Step& step);
  // After the step's last sub-layer: the first fills of the next step (same tier assumed).
  Status prefetch_next_step(Step& step);
  Status device_sublayer(size_t i, const Step& step);
  Status cpu_sublayer(size_t i, const Step& step);
  // Sub-layer i's device work (`enqueue()`) on the compute stream. A streamed one first waits for its ring
  // slot and is bound to it, and frees the slot after, which the ring refills at once; with step.timed,
  // events around the work.
  template <typename Enqueue>
  Status device_work(Step& step, size_t i, const Enqueue& enqueue);

  // ---- CUDA graphs (hybrid_graphs.cc) ------------------------------------------------------------
  struct GraphKey {
    size_t tier = 0;
    int32_t n = 0, bucket = 0;
    std::vector<int32_t> rows;
    size_t first = 0, end = 0;  // segment graphs: sub-layers [first, end); whole-step graphs: 0, 0
    bool mrope = false;         // the step carries M-RoPE positions (rope_multi instead of the fused rope)
    bool operator==(const GraphKey& o) const {
      return tier == o.tier && n == o.n && bucket == o.bucket && rows == o.rows && first == o.first && end == o.end &&
             mrope == o.mrope;
    }
  };
  // KV cells a graph-replayed step scans: scan rounded up to a bucket (<= 1/8 extra past 2048 cells).
  int32_t scan_bucket(int32_t scan) const;
  Expected<int> find_or_capture(GraphKey key, const std::function<void()>& enqueue);
  // The decode fast path: every sub-layer after the embedding resident on the device, replayed from a
  // CUDA graph. Returns false in *used when this step is not eligible (nothing was done).
  Status run_whole_step_graph(const StepIo& in, float* logits, size_t tier, bool* used);
  // Replays (capturing on first use) the resident attention / FFN sub-layers [first, end) of a step.
  Status replay_segment(const Step& step, size_t first, size_t end);

  // ---- statistics and timeline (hybrid_stats.cc) -------------------------------------------------
  void begin_timeline_step(size_t tier, int32_t n_tokens, double start_ms);
  void end_timeline_step();
  double timeline_ms(Event& e);  // device event time on the timeline (ms from its origin), -1 if unknown
  void timeline_span(Lane lane, double t0, double t1, const std::string& label, uint64_t bytes = 0);
  // Per sub-layer and copy times of a finished step (measure) and its spans (timeline).
  Status record_step_times(const Step& step);
  // The CPU sub-layers' measured time against the plan's (TierStats::cpu_ms, cpu_plan_ms).
  void count_cpu_time(const Step& step);
  // One more step of `tier`: its context and wall time.
  void count_step(size_t tier, const StepIo& in, double start_ms);

  // ---- inputs ------------------------------------------------------------------------------------
  const model::ModelSpec& spec_;
  const model::ModelWeights& host_weights_;  // views of the mmap
  std::vector<model::SubLayer> sublayers_;
  plan::PlanSet plan_;
  std::unique_ptr<Device> device_;
  HybridOptions options_;
  bool on_cuda_ = false;
  Where device_where_ = Where::kDevice;  // views of device memory (emulated: host-addressable, kHost for CpuOps)
  RunnerSizes sizes_;

  // ---- placements per tier -----------------------------------------------------------------------
  std::vector<std::vector<plan::Placement>> placements_;  // per tier
  std::vector<std::vector<size_t>> streamed_by_tier_;     // per tier: streamed sub-layers in order
  // Per tier and sub-layer: part of an FFN whose slices are on the CPU and on the device (or all on the
  // CPU): run by run_slices, never inside a graph segment.
  std::vector<std::vector<uint8_t>> split_ffn_by_tier_;
  std::vector<uint8_t> whole_step_graph_ok_;              // per tier: all resident after the embedding (CUDA)
  std::vector<TierStats> tier_stats_;

  // ---- streams, events, ops ----------------------------------------------------------------------
  std::unique_ptr<Stream> compute_stream_, copy_stream_;
  std::unique_ptr<Event> handover_event_;                 // the host waits for activations / logits
  std::vector<std::unique_ptr<Event>> sublayer_start_events_, sublayer_end_events_;  // per sub-layer (timed)
  std::vector<std::unique_ptr<Event>> fill_start_events_, fill_end_events_;          // per in-step fill (timed)
  std::vector<uint8_t> fill_copied_;                      // per in-step fill: a copy was issued (timed)
  std::unique_ptr<WeightRing> ring_;
  std::unique_ptr<CudaOpsBundle> cuda_ops_;
  std::unique_ptr<kernels::Ops> emulated_ops_;            // the emulated device's "kernels"
  std::unique_ptr<kernels::Ops> cpu_ops_;                 // CPU sub-layers
  model::DebugHook debug_hook_;

  // ---- memory ------------------------------------------------------------------------------------
  std::vector<DeviceBuffer> arena_buffers_;
  std::vector<std::pair<std::string, uint64_t>> arena_tags_;
  std::vector<HostBuffer> pinned_buffers_;
  std::vector<HostBuffer> registered_ranges_;             // register mode: page ranges of the mmap
  PinStats pin_stats_;
  double load_seconds_ = 0;
  HostBuffer upload_stage_;                               // pinned staging for uploads at load (two halves)
  std::unique_ptr<Event> stage_half_free_[2];             // the copy that last read each half is done
  model::Scratch device_scratch_, host_scratch_;          // device / pinned host activations
  // device: tokens, pos, seq, cell [n], cell_pos, cell_seq [scan], then M-RoPE positions [4 n] when the step has them
  int32_t* device_meta_ = nullptr;
  int32_t* host_meta_ = nullptr;    // pinned host mirror
  std::vector<TensorView> kv_keys_, kv_values_;           // per layer [kv_dim, n_cells] F16 on the device

  // ---- weights -----------------------------------------------------------------------------------
  model::ModelWeights device_weights_;  // device views (streamed ones rebound per use, in stream order)
  std::vector<DeviceBuffer> resident_blocks_;             // per sub-layer: its resident block (or empty)
  bool residents_out_ = false;                            // released for the vision tower; run() restores them
  VisionPinned vision_pinned_;
  std::vector<SlotLayout> slot_layouts_;                  // per sub-layer
  std::vector<std::vector<WeightRing::Piece>> fill_pieces_;  // per sub-layer: what a fill copies (streamed)
  // FFN slices (model::is_ffn_slice): their host views (down strided into the whole matrix, or gathered)
  // and device views (contiguous), per sub-layer; unused for other sub-layers.
  std::vector<model::FfnSlice> host_slices_, device_slices_;
  // The down columns of slices that run on the CPU in some tier, gathered once into contiguous host
  // memory so the CPU reads whole rows instead of half rows at a stride. Costs those bytes of host memory.
  std::vector<std::vector<uint8_t>> cpu_slice_downs_;
  // Expert groups (SubLayerKind::kExperts): host views (slices of the mmap's stacked tensors, one contiguous
  // byte range each) and device views (bound to a resident block or a ring slot), per sub-layer.
  std::vector<kernels::ExpertGroup> host_groups_, device_groups_;
  std::vector<int32_t> masked_ids_;  // run_moe_layer: the routing with the device groups' experts as -1

  // ---- the hot-expert cache ----------------------------------------------------------------------
  ExpertCacheGeometry cache_geo_;                 // slots == 0: no cache
  ExpertCacheTable cache_;
  DeviceBuffer cache_block_;                      // per MoE layer: layer_bytes (expert_cache.h's regions)
  DeviceBuffer cache_ids_;                        // one step's slots routing [n_expert_used, n] (I32)
  HostBuffer cache_ids_host_;                     // pinned: per MoE layer, its step's slots routing
  HostBuffer cache_stage_;                        // pinned: the promotions' bytes on their way up
  std::unique_ptr<Event> cache_filled_;           // after the last promotions' copies (copy stream)
  bool cache_fill_pending_ = false;               // the compute stream has not waited for them yet
  bool cache_picked_ = false;                     // this step counted picks
  std::vector<int32_t> moe_index_;                // per model layer: its index among the MoE layers (-1)
  std::vector<kernels::ExpertGroup> cache_groups_;  // per MoE layer: its slots as a group of experts 0..slots
  std::vector<plan::Placement> expert_place_;     // route_through_cache: per expert of the layer, its group's placement

  // ---- CUDA graphs -------------------------------------------------------------------------------
  std::vector<std::pair<GraphKey, int>> graphs_;          // key -> CudaOpsBundle graph id

  // ---- timeline ----------------------------------------------------------------------------------
  Timeline* timeline_ = nullptr;
  double timeline_origin_ms_ = 0;                         // host clock at timeline_origin_event_
  std::unique_ptr<Event> timeline_origin_event_;
  int32_t timeline_step_ = 0;
  std::vector<std::unique_ptr<Event>> prefetch_start_events_, prefetch_end_events_;  // cross-step prefetches
  std::vector<PendingCopy> pending_prefetches_;           // prefetches issued after the last recorded step
};

template <typename Enqueue>
Status HybridRunnerImpl::device_work(Step& step, size_t i, const Enqueue& enqueue) {
  int32_t slot = -1;
  const size_t K = step.ring_slots;
  if (placements_[step.tier][i] == plan::Placement::kStreamed) {
    FERRY_ASSERT(step.next_streamed < streamed_by_tier_[step.tier].size() &&
                 streamed_by_tier_[step.tier][step.next_streamed] == i);
    slot = static_cast<int32_t>(step.next_streamed % K);
    FERRY_RETURN_IF_ERROR(ring_->acquire(slot, *compute_stream_));
    char* base = static_cast<char*>(ring_->slot_ptr(slot));
    // Rebinding happens in stream order (emulated: on the compute worker; CUDA: now, before the
    // kernels that read it are enqueued).
    FERRY_RETURN_IF_ERROR(on_device([this, i, base](kernels::Ops&) { bind(i, base); }));
  }
  if (step.timed) FERRY_RETURN_IF_ERROR(device_->record(*sublayer_start_events_[i], *compute_stream_));
  FERRY_RETURN_IF_ERROR(enqueue());
  if (step.timed) FERRY_RETURN_IF_ERROR(device_->record(*sublayer_end_events_[i], *compute_stream_));
  if (slot < 0) return Status::ok();
  FERRY_RETURN_IF_ERROR(ring_->release(slot, *compute_stream_));
  ++step.next_streamed;
  return fill_ring_upto(step, step.next_streamed + K);  // the freed slot takes the next streamed sub-layer at once
}

}  // namespace ferry::exec::detail
