// CudaGpuProber: plan::GpuProber on a CudaDevice. Copies go between pinned (or malloc'd) host buffers and
// arena blocks on a stream of their own; matmuls are CudaOps::matmul on weights cycled through a pool
// larger than the L2 cache (each call reads device memory, as a real step does). Device-side timings
// (D2D, matmul) are CUDA events around work held back by a host gate until it is all enqueued, so they
// measure the GPU and not the launch rate (the cost model adds the launch overhead, measured apart).
// Host-side timings (H2D, D2H, launch) are wall clock from the first enqueue to the end of the work.
// Attention is CudaOps::attention over F16 KV caches cycled through a pool larger than the L2 cache too.
#include "exec/gpu_prober_cuda.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <future>
#include <memory>
#include <new>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "exec/device.h"
#include "exec/device_cuda.h"
#include "exec/process_memory.h"
#include "kernels/cuda/cuda_ops.h"
#include "tensor/quant.h"
#include "tensor/repack.h"
#include "tensor/tensor_view.h"

namespace ferry::exec {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
uint64_t arena_round(uint64_t bytes) { return (bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }

constexpr uint64_t kMaxArena = 4ull << 30;       // what the prober reserves at most (H200: 141 GB)
constexpr uint64_t kMinArena = 1ull << 30;
// Under a process cap (the first run of a VRAM budget measures its quick profile inside the budget):
// the least arena the probes fit in (copies shrink to an eighth of it, the weight and KV pools get the
// rest once the copy buffers are released). A cap that leaves less is ignored: such a budget is below
// the run's minimum, which the planner reports once the profile exists.
constexpr uint64_t kMinCappedArena = 512ull << 20;
constexpr uint64_t kWeightPoolBytes = 256ull << 20;  // at least this much (and 4x L2) of weights cycled
constexpr int64_t kShapeTokens = 1024;            // CudaOps scratch sized for the profiler's largest tier
constexpr int kGateBatch = 32;                    // matmuls enqueued behind one gate (far below the launch queue)

// The kernel driver's version ("550.54.15") from /proc, else the CUDA driver API version ("cuda 12.8").
std::string driver_version_string(int cuda_driver_version) {
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  if (f && std::getline(f, line)) {
    // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar ..." (open module: "... Open
    // Kernel Module for x86_64  550.54.15  Release Build ..."): the first token of digits and dots.
    const size_t k = line.find("Kernel Module");
    std::istringstream ss(k == std::string::npos ? line : line.substr(k));
    std::string tok;
    while (ss >> tok) {
      const bool digits_dots = !tok.empty() && std::all_of(tok.begin(), tok.end(), [](char c) {
        return (c >= '0' && c <= '9') || c == '.';
      });
      if (digits_dots && tok.find('.') != std::string::npos) return tok;
    }
  }
  return "cuda " + std::to_string(cuda_driver_version / 1000) + "." + std::to_string(cuda_driver_version % 1000 / 10);
}

// Holds a stream at a host function until open() (or destruction, so an error path never leaves the
// stream blocked): work enqueued behind it then runs back to back, whatever the launch rate. The hold
// gives up after kGateMaxWait: should an enqueue ever wait for the device (lazy module loading can
// synchronize the context; the warm-up calls load every kernel first), a gap in the timing beats a hang.
constexpr auto kGateMaxWait = std::chrono::milliseconds(500);
class Gate {
 public:
  Gate() : fut_(promise_.get_future().share()) {}
  ~Gate() { open(); }
  Status install(Device& dev, Stream& s) {
    std::shared_future<void> f = fut_;
    return dev.host_fn(s, [f] { f.wait_for(kGateMaxWait); });
  }
  void open() {
    if (!opened_) {
      opened_ = true;
      promise_.set_value();
    }
  }

 private:
  std::promise<void> promise_;
  std::shared_future<void> fut_;
  bool opened_ = false;
};

class CudaGpuProber final : public plan::GpuProber {
 public:
  CudaGpuProber(int ordinal, CudaDeviceInfo info, std::string driver, uint64_t process_cap)
      : ordinal_(ordinal), info_(std::move(info)), driver_(std::move(driver)), process_cap_(process_cap) {}

  ~CudaGpuProber() override {
    if (bg_thread_.joinable()) {
      bg_stop_ = true;
      bg_thread_.join();
    }
    bundle_.reset();  // before its stream and the device
    if (dev_) {
      (void)dev_->synchronize();  // errors here have nowhere to go
      for (DeviceBuffer* b : {&dev_a_, &dev_b_, &bg_dev_, &pool_, &x_, &out_, &tiny_, &kv_pool_, &attn_meta_, &attn_q_,
                               &attn_out_})
        dev_->release(b);
      for (HostBuffer* h : {&pin_, &bg_pin_}) dev_->release_pinned(h);
    }
    start_.reset();
    end_.reset();
    bg_ev_[0].reset();
    bg_ev_[1].reset();
    main_.reset();
    bg_.reset();
    dev_.reset();
  }

  std::string name() const override { return info_.name; }
  std::string driver() const override { return driver_; }
  uint64_t memory_bytes() const override { return info_.total_memory; }
  uint64_t copy_bytes_limit() override {
    if (!ensure()) return UINT64_MAX;  // the first timing call reports the error
    if (!capped_) return UINT64_MAX;
    return std::max<uint64_t>(16ull << 20, arena_bytes_ / 8 / (1ull << 20) * (1ull << 20));
  }
  uint64_t context_bytes() override {
    const Expected<ContextCost> c = measure_cuda_context(ordinal_);
    return c && c->source != MemorySource::kModelled ? c->bytes : 0;
  }

  Expected<double> time_h2d(uint64_t bytes, int reps) override {
    FERRY_RETURN_IF_ERROR(ensure());
    FERRY_RETURN_IF_ERROR(ensure_pinned(pin_, bytes));
    FERRY_RETURN_IF_ERROR(ensure_dev(dev_a_, bytes, "probe.copy"));
    return time_copies([&] { return dev_->copy_h2d(dev_a_.ptr, pin_.ptr, bytes, *main_); }, reps);
  }

  Expected<double> time_d2h(uint64_t bytes, int reps) override {
    FERRY_RETURN_IF_ERROR(ensure());
    FERRY_RETURN_IF_ERROR(ensure_pinned(pin_, bytes));
    FERRY_RETURN_IF_ERROR(ensure_dev(dev_a_, bytes, "probe.copy"));
    return time_copies([&] { return dev_->copy_d2h(pin_.ptr, dev_a_.ptr, bytes, *main_); }, reps);
  }

  Expected<double> time_h2d_pageable(uint64_t bytes, int reps) override {
    FERRY_RETURN_IF_ERROR(ensure());
    FERRY_RETURN_IF_ERROR(ensure_dev(dev_a_, bytes, "probe.copy"));
    std::unique_ptr<uint8_t[]> host(new (std::nothrow) uint8_t[bytes == 0 ? 1 : bytes]);
    if (!host) return make_error(ErrorCode::kOutOfMemory, "cannot allocate %llu bytes of host memory",
                                 static_cast<unsigned long long>(bytes));
    std::memset(host.get(), 1, bytes);  // fault the pages in: a copy from untouched memory measures the kernel
    return time_copies([&] { return dev_->copy_h2d(dev_a_.ptr, host.get(), bytes, *main_); }, reps);
  }

  Expected<double> time_d2d(uint64_t bytes, int reps) override {
    FERRY_RETURN_IF_ERROR(ensure());
    FERRY_RETURN_IF_ERROR(ensure_dev(dev_a_, bytes, "probe.copy"));
    FERRY_RETURN_IF_ERROR(ensure_dev(dev_b_, bytes, "probe.copy2"));
    FERRY_RETURN_IF_ERROR(dev_->copy_d2d(dev_b_.ptr, dev_a_.ptr, bytes, *main_));  // warm-up
    FERRY_RETURN_IF_ERROR(dev_->sync(*main_));
    return time_device(reps, [&](int) { return dev_->copy_d2d(dev_b_.ptr, dev_a_.ptr, bytes, *main_); });
  }

  Expected<double> time_matmul(DType t, int64_t rows, int64_t cols, int64_t tokens, int reps) override {
    if (rows <= 0 || cols <= 0 || tokens <= 0 || reps <= 0)
      return make_error(ErrorCode::kInvalidArgument, "time_matmul: bad shape %lld x %lld x %lld",
                        static_cast<long long>(rows), static_cast<long long>(cols), static_cast<long long>(tokens));
    if (!traits(t).weight_type || cols % traits(t).block_elems != 0)
      return make_error(ErrorCode::kInvalidArgument, "time_matmul: %s is not a weight type for rows of %lld",
                        dtype_name(t), static_cast<long long>(cols));
    FERRY_RETURN_IF_ERROR(ensure());
    FERRY_RETURN_IF_ERROR(ensure_weights(t, rows, cols));
    FERRY_RETURN_IF_ERROR(ensure_ops(rows, cols, tokens));
    FERRY_RETURN_IF_ERROR(ensure_activations(rows, cols, tokens));
    kernels::Ops& ops = bundle_->ops();
    const TensorView x = TensorView::make(DType::F32, x_.ptr, cols, tokens, 1, 1, Where::kDevice);
    const TensorView y = TensorView::make(DType::F32, out_.ptr, rows, tokens, 1, 1, Where::kDevice);
    // The layout the executor gives these weights on a CUDA device (split rows where the decode
    // kernels read them: Q4_0 / Q8_0 / Q6_K ...), so the probe times the kernels a model step runs.
    const Layout layout = split_layout_supported(t, cols) ? Layout::kSplit : Layout::kGgml;
    auto weight = [&](int i) {
      char* p = static_cast<char*>(pool_.ptr) + static_cast<uint64_t>(i % pool_slots_) * pool_stride_;
      TensorView w = TensorView::make(t, p, cols, rows, 1, 1, Where::kDevice);
      w.layout = layout;
      return w;
    };
    // Warm-up: lazy module loading, cuBLAS heuristics, the first touch of the scratch.
    ops.matmul(weight(0), x, y);
    FERRY_RETURN_IF_ERROR(dev_->sync(*main_));
    FERRY_RETURN_IF_ERROR(bundle_->status());
    Expected<double> s = time_device(reps, [&](int i) {
      ops.matmul(weight(next_slot_ + i), x, y);
      return Status::ok();
    });
    next_slot_ = (next_slot_ + reps) % pool_slots_;
    FERRY_RETURN_IF_ERROR(bundle_->status());
    return s;
  }

  Expected<double> time_attention(int n_head, int n_kv_head, int head_dim, int64_t n_cells, int64_t n_tokens,
                                  int reps) override {
    // head_dim % 8: K / V rows of kv_dim F16 values must be 16-byte aligned (CudaOps::attention).
    if (n_head <= 0 || n_kv_head <= 0 || n_head % n_kv_head != 0 || head_dim <= 0 || head_dim > 256 ||
        head_dim % 8 != 0 || n_cells <= 0 || n_cells > (int64_t{1} << 30) || n_tokens <= 0 || n_tokens > n_cells ||
        reps <= 0)
      return make_error(ErrorCode::kInvalidArgument,
                        "time_attention: bad shape (heads %d / %d, head_dim %d, %lld cells, %lld tokens)", n_head,
                        n_kv_head, head_dim, static_cast<long long>(n_cells), static_cast<long long>(n_tokens));
    FERRY_RETURN_IF_ERROR(ensure());
    FERRY_RETURN_IF_ERROR(ensure_ops(1, 4096, n_tokens, n_head, head_dim));
    const int64_t kv_dim = static_cast<int64_t>(n_kv_head) * head_dim;
    FERRY_RETURN_IF_ERROR(ensure_kv_pool(kv_dim, n_cells));
    FERRY_RETURN_IF_ERROR(ensure_attn_buffers(n_head, head_dim, n_cells, n_tokens));
    kernels::Ops& ops = bundle_->ops();
    char* meta = static_cast<char*>(attn_meta_.ptr);
    const TensorView q =
        TensorView::make(DType::F32, attn_q_.ptr, head_dim, n_head, n_tokens, 1, Where::kDevice);  // [D, nh, T]
    const TensorView out =
        TensorView::make(DType::F32, attn_out_.ptr, static_cast<int64_t>(head_dim) * n_head, n_tokens, 1, 1,
                         Where::kDevice);  // [D * nh, T]
    kernels::BatchMeta batch;
    batch.n_tokens = static_cast<int32_t>(n_tokens);
    batch.pos = TensorView::make(DType::I32, meta + attn_off_pos_, n_tokens, 1, 1, 1, Where::kDevice);
    batch.seq = TensorView::make(DType::I32, meta + attn_off_seq_, n_tokens, 1, 1, 1, Where::kDevice);
    kernels::AttnParams p;
    p.n_head = n_head;
    p.n_kv_head = n_kv_head;
    p.head_dim = head_dim;
    p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    // The cache of slot i: K [kv_dim, n_cells] and V [kv_dim, n_cells] F16, cell metadata shared (as the
    // layers of a real cache share it).
    auto kv = [&](int i) {
      char* base = static_cast<char*>(kv_pool_.ptr) + static_cast<uint64_t>(i % kv_slots_) * 2 * kv_stride_;
      kernels::KvView v;
      v.k = TensorView::make(DType::F16, base, kv_dim, n_cells, 1, 1, Where::kDevice);
      v.v = TensorView::make(DType::F16, base + kv_stride_, kv_dim, n_cells, 1, 1, Where::kDevice);
      v.cell_pos = TensorView::make(DType::I32, meta + attn_off_cell_pos_, n_cells, 1, 1, 1, Where::kDevice);
      v.cell_seq = TensorView::make(DType::I32, meta + attn_off_cell_seq_, n_cells, 1, 1, 1, Where::kDevice);
      v.n_cells = static_cast<int32_t>(n_cells);
      return v;
    };
    // Warm-up: lazy module loading, the first touch of the scratch.
    ops.attention(q, kv(0), batch, p, out);
    FERRY_RETURN_IF_ERROR(dev_->sync(*main_));
    FERRY_RETURN_IF_ERROR(bundle_->status());
    Expected<double> s = time_device(reps, [&](int i) {
      ops.attention(q, kv(next_kv_slot_ + i), batch, p, out);
      return Status::ok();
    });
    next_kv_slot_ = (next_kv_slot_ + reps) % kv_slots_;
    FERRY_RETURN_IF_ERROR(bundle_->status());
    return s;
  }

  Expected<double> launch_overhead_us() override {
    FERRY_RETURN_IF_ERROR(ensure());
    FERRY_RETURN_IF_ERROR(ensure_ops(1, 256, 1));
    FERRY_RETURN_IF_ERROR(ensure_dev(tiny_, 256 * sizeof(float), "probe.tiny"));
    FERRY_RETURN_IF_ERROR(dev_->memset(tiny_.ptr, 0, tiny_.bytes, *main_));
    kernels::Ops& ops = bundle_->ops();
    const TensorView v = TensorView::make(DType::F32, tiny_.ptr, 256, 1, 1, 1, Where::kDevice);
    for (int i = 0; i < 20; ++i) ops.scale(v, 1.0f, v);  // warm-up (module load)
    FERRY_RETURN_IF_ERROR(dev_->sync(*main_));
    // Back-to-back launches of a kernel that does nearly nothing: the rate the host can issue them.
    constexpr int kLaunches = 2000;
    const auto t0 = Clock::now();
    for (int i = 0; i < kLaunches; ++i) ops.scale(v, 1.0f, v);
    FERRY_RETURN_IF_ERROR(dev_->sync(*main_));
    const double s = since(t0);
    FERRY_RETURN_IF_ERROR(bundle_->status());
    return s / kLaunches * 1e6;
  }

  Status start_background_copies(bool h2d, uint64_t chunk_bytes) override {
    if (bg_thread_.joinable()) return make_error(ErrorCode::kInternal, "background copies already running");
    if (chunk_bytes == 0) return make_error(ErrorCode::kInvalidArgument, "background copies of 0 bytes");
    FERRY_RETURN_IF_ERROR(ensure());
    FERRY_RETURN_IF_ERROR(ensure_pinned(bg_pin_, chunk_bytes));
    FERRY_RETURN_IF_ERROR(ensure_dev(bg_dev_, chunk_bytes, "probe.background"));
    bg_stop_ = false;
    bg_status_ = Status::ok();
    bg_stats_ = CopyStats{};
    bg_thread_ = std::thread([this, h2d, chunk_bytes] { background_loop(h2d, chunk_bytes); });
    return Status::ok();
  }

  Expected<CopyStats> stop_background_copies() override {
    if (!bg_thread_.joinable()) return make_error(ErrorCode::kInternal, "no background copies running");
    bg_stop_ = true;
    bg_thread_.join();
    if (!bg_status_) return bg_status_;
    return bg_stats_;
  }

 private:
  // The device (an arena for the buffers below), a timed stream, a background copy stream, events.
  Status ensure() {
    if (dev_) return Status::ok();
    uint64_t budget = std::min<uint64_t>(kMaxArena, info_.total_memory / 2);
    if (process_cap_ > 0) {
      // Inside the cap: what the context (made now if it is not yet) leaves, less the growth reserve.
      FERRY_ASSIGN_OR_RETURN(const ContextCost cc, measure_cuda_context(ordinal_));
      const uint64_t held = cc.bytes + kCudaGrowthReserve;
      const uint64_t room = process_cap_ > held ? (process_cap_ - held) / kArenaAlign * kArenaAlign : 0;
      if (room >= kMinCappedArena && room < budget) {
        budget = room;
        capped_ = true;
      }
    }
    Expected<std::unique_ptr<Device>> d = make_cuda_device(ordinal_, budget);
    // Memory taken by other processes: ask for less, down to kMinArena.
    while (!d && d.status().code() == ErrorCode::kOutOfMemory && budget / 2 >= kMinArena) {
      budget /= 2;
      d = make_cuda_device(ordinal_, budget);
    }
    if (!d) return d.status();
    dev_ = std::move(*d);
    arena_bytes_ = budget;
    FERRY_ASSIGN_OR_RETURN(main_, dev_->create_stream());
    FERRY_ASSIGN_OR_RETURN(bg_, dev_->create_stream());
    FERRY_ASSIGN_OR_RETURN(start_, dev_->create_event(true));
    FERRY_ASSIGN_OR_RETURN(end_, dev_->create_event(true));
    FERRY_ASSIGN_OR_RETURN(bg_ev_[0], dev_->create_event(false));
    FERRY_ASSIGN_OR_RETURN(bg_ev_[1], dev_->create_event(false));
    return Status::ok();
  }

  // A capped arena holds the copy buffers or a pool, not both (the copy probes make them again).
  void release_copy_buffers_if_capped() {
    if (!capped_) return;
    for (DeviceBuffer* b : {&dev_a_, &dev_b_, &bg_dev_}) dev_->release(b);
  }

  Status ensure_dev(DeviceBuffer& b, uint64_t bytes, const char* tag) {
    if (b && b.bytes >= bytes) return Status::ok();
    dev_->release(&b);
    FERRY_ASSIGN_OR_RETURN(b, dev_->allocate(std::max<uint64_t>(bytes, 1), tag));
    return Status::ok();
  }

  Status ensure_pinned(HostBuffer& h, uint64_t bytes) {
    if (h && h.bytes >= bytes) return Status::ok();
    dev_->release_pinned(&h);
    FERRY_ASSIGN_OR_RETURN(h, dev_->allocate_pinned(std::max<uint64_t>(bytes, 1)));
    std::memset(h.ptr, 1, h.bytes);
    return Status::ok();
  }

  // One untimed copy, then `reps` back to back: wall seconds from the first enqueue to the end.
  template <typename Enqueue>
  Expected<double> time_copies(Enqueue enqueue, int reps) {
    FERRY_RETURN_IF_ERROR(enqueue());
    FERRY_RETURN_IF_ERROR(dev_->sync(*main_));
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) FERRY_RETURN_IF_ERROR(enqueue());
    FERRY_RETURN_IF_ERROR(dev_->sync(*main_));
    return since(t0);
  }

  // `reps` pieces of device work (enqueue(i)), held behind a gate in batches so they run back to back;
  // the device seconds between events around each batch, summed.
  template <typename Enqueue>
  Expected<double> time_device(int reps, Enqueue enqueue) {
    double seconds = 0;
    for (int done = 0; done < reps;) {
      const int n = std::min(kGateBatch, reps - done);
      {
        Gate gate;
        FERRY_RETURN_IF_ERROR(gate.install(*dev_, *main_));
        FERRY_RETURN_IF_ERROR(dev_->record(*start_, *main_));
        for (int i = 0; i < n; ++i) FERRY_RETURN_IF_ERROR(enqueue(done + i));
        FERRY_RETURN_IF_ERROR(dev_->record(*end_, *main_));
        gate.open();
      }
      FERRY_RETURN_IF_ERROR(dev_->sync(*end_));
      FERRY_ASSIGN_OR_RETURN(const float ms, dev_->elapsed_ms(*start_, *end_));
      seconds += ms * 1e-3;
      done += n;
    }
    return seconds;
  }

  // A pool of copies of one [rows, cols] weight matrix of type t, larger than 4x the L2 cache.
  Status ensure_weights(DType t, int64_t rows, int64_t cols) {
    if (pool_ && pool_dtype_ == t && pool_rows_ == rows && pool_cols_ == cols) return Status::ok();
    dev_->release(&pool_);
    release_copy_buffers_if_capped();
    const uint64_t matrix = row_bytes(t, cols) * static_cast<uint64_t>(rows);
    pool_stride_ = arena_round(matrix);
    const uint64_t target = std::max<uint64_t>(kWeightPoolBytes, 4 * info_.l2_bytes);
    pool_slots_ = static_cast<int>(std::clamp<uint64_t>((target + pool_stride_ - 1) / pool_stride_, 2, 64));
    FERRY_ASSIGN_OR_RETURN(pool_, dev_->allocate(pool_stride_ * pool_slots_, "probe.weights"));
    // 64 rows quantized from random values, repeated (the contents do not change these kernels' speed).
    FERRY_RETURN_IF_ERROR(ensure_pinned(pin_, matrix));
    const size_t rb = row_bytes(t, cols);
    const int64_t seed_rows = std::min<int64_t>(64, rows);
    std::mt19937 rng(42);
    std::normal_distribution<float> dist(0.f, 0.02f);
    std::vector<float> src(static_cast<size_t>(cols));
    uint8_t* host = static_cast<uint8_t*>(pin_.ptr);
    for (int64_t r = 0; r < seed_rows; ++r) {
      for (float& v : src) v = dist(rng);
      quantize_row(t, src.data(), host + static_cast<size_t>(r) * rb, cols);
    }
    if (split_layout_supported(t, cols)) {  // as the executor uploads them (time_matmul)
      std::vector<uint8_t> ggml(host, host + static_cast<size_t>(seed_rows) * rb);
      repack_to_split(t, cols, seed_rows, ggml.data(), host);
    }
    const size_t seed_bytes = static_cast<size_t>(seed_rows) * rb;
    for (size_t off = seed_bytes; off < matrix; off += seed_bytes)
      std::memcpy(host + off, host, std::min(seed_bytes, static_cast<size_t>(matrix) - off));
    FERRY_RETURN_IF_ERROR(dev_->copy_h2d(pool_.ptr, host, matrix, *main_));
    char* base = static_cast<char*>(pool_.ptr);
    for (int i = 1; i < pool_slots_; ++i)
      FERRY_RETURN_IF_ERROR(dev_->copy_d2d(base + static_cast<uint64_t>(i) * pool_stride_, base, matrix, *main_));
    FERRY_RETURN_IF_ERROR(dev_->sync(*main_));
    pool_dtype_ = t;
    pool_rows_ = rows;
    pool_cols_ = cols;
    next_slot_ = 0;
    return Status::ok();
  }

  // CudaOps with scratch for [rows, cols] x [cols, tokens] (at least the profiler's 1024 tokens, so the
  // token sweep does not rebuild it) and attention of n_head x head_dim, as the executor makes it
  // (default options).
  Status ensure_ops(int64_t rows, int64_t cols, int64_t tokens, int32_t n_head = 32, int32_t head_dim = 128) {
    if (bundle_ && shape_.max_n >= rows && shape_.max_k >= cols && shape_.max_tokens >= tokens &&
        shape_.n_head >= n_head && shape_.head_dim >= head_dim)
      return Status::ok();
    bundle_.reset();
    kernels::CudaScratchShape s;
    s.max_tokens = std::max({tokens, kShapeTokens, bundle_shape_tokens_});
    s.max_k = std::max<int64_t>({cols, 4096, shape_.max_k});
    s.max_n = std::max<int64_t>({rows, 4096, shape_.max_n});
    s.n_head = std::max({n_head, s.n_head, shape_.n_head});
    s.head_dim = std::max({head_dim, s.head_dim, shape_.head_dim});
    bundle_shape_tokens_ = s.max_tokens;
    FERRY_ASSIGN_OR_RETURN(bundle_, CudaOpsBundle::create(*dev_, *main_, s, kernels::with_experiments({})));
    shape_ = s;
    return Status::ok();
  }

  // x [cols, tokens] (small finite values) and out [rows, tokens], F32 on the device.
  Status ensure_activations(int64_t rows, int64_t cols, int64_t tokens) {
    const int64_t t = std::max(tokens, kShapeTokens);
    const uint64_t xb = static_cast<uint64_t>(cols * t) * sizeof(float);
    if (!x_ || x_.bytes < xb) {
      FERRY_RETURN_IF_ERROR(ensure_dev(x_, xb, "probe.x"));
      FERRY_RETURN_IF_ERROR(ensure_pinned(pin_, xb));
      float* h = static_cast<float*>(pin_.ptr);
      for (uint64_t i = 0; i < xb / sizeof(float); ++i)
        h[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
      FERRY_RETURN_IF_ERROR(dev_->copy_h2d(x_.ptr, h, xb, *main_));
      FERRY_RETURN_IF_ERROR(dev_->sync(*main_));
    }
    return ensure_dev(out_, static_cast<uint64_t>(rows * t) * sizeof(float), "probe.out");
  }

  // KV caches of n_cells cells of kv_dim F16 values (K then V per slot), as many slots as make the pool
  // larger than 4x the L2 cache (at least 2): each timed call reads its cache from device memory, as a
  // step does (its layers' caches together are far larger than L2; one 4K-cell llama3-8b cache, 16 MiB,
  // would stay in L2 if called back to back). Filled with 0x3c3c (~1.06 in F16) once.
  Status ensure_kv_pool(int64_t kv_dim, int64_t n_cells) {
    const uint64_t cache = static_cast<uint64_t>(kv_dim) * static_cast<uint64_t>(n_cells) * 2;
    const uint64_t stride = arena_round(cache);
    const uint64_t target = std::max<uint64_t>(kWeightPoolBytes, 4 * info_.l2_bytes);
    const uint64_t slots = std::max<uint64_t>(2, (target + 2 * stride - 1) / (2 * stride));
    if (!kv_pool_ || kv_pool_.bytes < slots * 2 * stride) {
      dev_->release(&kv_pool_);
      dev_->release(&pool_);  // the matmul weights (time_matmul makes them again if asked): arena room
      release_copy_buffers_if_capped();
      FERRY_ASSIGN_OR_RETURN(kv_pool_, dev_->allocate(slots * 2 * stride, "probe.kv"));
      FERRY_RETURN_IF_ERROR(dev_->memset(kv_pool_.ptr, 0x3c, kv_pool_.bytes, *main_));
      FERRY_RETURN_IF_ERROR(dev_->sync(*main_));
    }
    kv_stride_ = stride;
    kv_slots_ = static_cast<int>(std::min<uint64_t>(kv_pool_.bytes / (2 * stride), 1 << 20));
    next_kv_slot_ %= kv_slots_;
    return Status::ok();
  }

  // q [head_dim, n_head, tokens] = 0 and out [head_dim * n_head, tokens] F32; metadata (I32, one block):
  // cell_pos = 0..n_cells-1, cell_seq = 0, the tokens at the last positions n_cells - tokens .. n_cells - 1
  // of sequence 0.
  Status ensure_attn_buffers(int32_t n_head, int32_t head_dim, int64_t n_cells, int64_t n_tokens) {
    const uint64_t qb = static_cast<uint64_t>(head_dim) * static_cast<uint64_t>(n_head) *
                        static_cast<uint64_t>(n_tokens) * sizeof(float);
    FERRY_RETURN_IF_ERROR(ensure_dev(attn_q_, qb, "probe.attn_q"));
    FERRY_RETURN_IF_ERROR(ensure_dev(attn_out_, qb, "probe.attn_out"));
    FERRY_RETURN_IF_ERROR(dev_->memset(attn_q_.ptr, 0, qb, *main_));
    const uint64_t cells_b = arena_round(static_cast<uint64_t>(n_cells) * 4);
    const uint64_t tok_b = arena_round(static_cast<uint64_t>(n_tokens) * 4);
    attn_off_cell_pos_ = 0;
    attn_off_cell_seq_ = cells_b;
    attn_off_pos_ = 2 * cells_b;
    attn_off_seq_ = 2 * cells_b + tok_b;
    const uint64_t total = 2 * cells_b + 2 * tok_b;
    FERRY_RETURN_IF_ERROR(ensure_dev(attn_meta_, total, "probe.attn_meta"));
    FERRY_RETURN_IF_ERROR(ensure_pinned(pin_, total));
    char* h = static_cast<char*>(pin_.ptr);
    std::memset(h, 0, total);
    auto* cell_pos = reinterpret_cast<int32_t*>(h + attn_off_cell_pos_);
    auto* pos = reinterpret_cast<int32_t*>(h + attn_off_pos_);
    for (int64_t i = 0; i < n_cells; ++i) cell_pos[i] = static_cast<int32_t>(i);
    for (int64_t i = 0; i < n_tokens; ++i) pos[i] = static_cast<int32_t>(n_cells - n_tokens + i);
    FERRY_RETURN_IF_ERROR(dev_->copy_h2d(attn_meta_.ptr, h, total, *main_));
    return dev_->sync(*main_);  // before pin_ is reused
  }

  // Copies of bg_pin_ <-> bg_dev_ back to back on the background stream, two in flight, until bg_stop_.
  void background_loop(bool h2d, uint64_t chunk) {
    // Device calls need this thread's current device: memory_info() sets it (cudaSetDevice).
    Expected<MemoryInfo> mi = dev_->memory_info();
    if (!mi) {
      bg_status_ = mi.status();
      return;
    }
    const auto t0 = Clock::now();
    uint64_t n = 0;
    Status st;
    while (!bg_stop_.load(std::memory_order_relaxed)) {
      st = h2d ? dev_->copy_h2d(bg_dev_.ptr, bg_pin_.ptr, chunk, *bg_) : dev_->copy_d2h(bg_pin_.ptr, bg_dev_.ptr, chunk, *bg_);
      if (st) st = dev_->record(*bg_ev_[n % 2], *bg_);
      if (st && n >= 1) st = dev_->sync(*bg_ev_[(n - 1) % 2]);  // keep one copy queued behind the running one
      if (!st) break;
      ++n;
    }
    const Status s2 = dev_->sync(*bg_);
    if (!st) {
      bg_status_ = st;
    } else if (!s2) {
      bg_status_ = s2;
    }
    bg_stats_.seconds = since(t0);
    bg_stats_.bytes = static_cast<double>(n) * static_cast<double>(chunk);
  }

  const int ordinal_;
  const CudaDeviceInfo info_;
  const std::string driver_;
  const uint64_t process_cap_;  // device bytes the whole process may hold while probing; 0 = no cap
  bool capped_ = false;         // the arena was shrunk to fit process_cap_
  uint64_t arena_bytes_ = 0;    // the arena reserved for the probes

  std::unique_ptr<Device> dev_;
  std::unique_ptr<Stream> main_, bg_;
  std::unique_ptr<Event> start_, end_;
  std::unique_ptr<Event> bg_ev_[2];
  std::unique_ptr<CudaOpsBundle> bundle_;
  kernels::CudaScratchShape shape_{0, 0, 0, 0, 0};
  int64_t bundle_shape_tokens_ = 0;

  DeviceBuffer dev_a_, dev_b_, bg_dev_, pool_, x_, out_, tiny_;
  DeviceBuffer kv_pool_, attn_meta_, attn_q_, attn_out_;  // time_attention
  HostBuffer pin_, bg_pin_;

  DType pool_dtype_ = DType::F32;
  int64_t pool_rows_ = 0, pool_cols_ = 0;
  uint64_t pool_stride_ = 0;
  int pool_slots_ = 1;
  int next_slot_ = 0;
  uint64_t kv_stride_ = 0;  // bytes of one K (or V) cache in kv_pool_
  int kv_slots_ = 1;
  int next_kv_slot_ = 0;
  uint64_t attn_off_cell_pos_ = 0, attn_off_cell_seq_ = 0, attn_off_pos_ = 0, attn_off_seq_ = 0;  // in attn_meta_

  std::thread bg_thread_;
  std::atomic<bool> bg_stop_{false};
  Status bg_status_;
  CopyStats bg_stats_;
};

}  // namespace

Expected<std::unique_ptr<plan::GpuProber>> make_cuda_gpu_prober(int ordinal, uint64_t process_cap) {
  std::string why;
  if (!cuda_available(&why)) return make_error(ErrorCode::kDevice, "%s", why.c_str());
  FERRY_ASSIGN_OR_RETURN(CudaDeviceInfo info, cuda_device_info(ordinal));
  std::string driver = driver_version_string(info.driver_version);
  return std::unique_ptr<plan::GpuProber>(new CudaGpuProber(ordinal, std::move(info), std::move(driver), process_cap));
}

}  // namespace ferry::exec
