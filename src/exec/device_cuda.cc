// CudaDevice: Device on the CUDA runtime (built only with CUDA). Every CUDA call is checked and turned into
// a kDevice Status with the CUDA error string; a missing driver or GPU is "no usable CUDA GPU: <reason>",
// never a crash. The arena is one cudaMalloc of the whole budget made at creation.
#include <cuda_runtime.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <vector>

#include "exec/device.h"
#include "exec/device_arena.h"
#include "exec/device_cuda.h"
#include "exec/process_memory.h"
#include "kernels/cuda/cuda_ops.h"

namespace ferry::exec {
namespace {

// Room left outside the arena when no budget is given: the CUDA context's own allocations after
// creation, cuBLAS internals, CUDA graphs, other libraries.
constexpr uint64_t kDefaultHeadroom = 512ull << 20;
constexpr int kMinComputeCapability = 75;  // the PTX ferry ships is compute_75

// Bytes reserved by the live CudaDevices' arenas (measure_cuda_context counts what lies outside them).
std::atomic<uint64_t> g_arena_bytes{0};

Status cuda_status(cudaError_t e, const char* what) {
  return make_error(ErrorCode::kDevice, "CUDA error in %s: %s", what, cudaGetErrorString(e));
}

#define FERRY_CUDA_RETURN(expr)                                  \
  do {                                                           \
    const cudaError_t ferry_e_ = (expr);                         \
    if (ferry_e_ != cudaSuccess) return cuda_status(ferry_e_, #expr); \
  } while (0)

// Checks `ordinal` is a device ferry can run on; *name gets its name.
Status probe(int ordinal, std::string* name) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return make_error(ErrorCode::kDevice, "no usable CUDA GPU: %s", cudaGetErrorString(e));
  }
  if (n == 0) return make_error(ErrorCode::kDevice, "no usable CUDA GPU: no CUDA device found");
  if (ordinal < 0 || ordinal >= n) {
    return make_error(ErrorCode::kDevice, "no usable CUDA GPU: device %d requested, %d present", ordinal, n);
  }
  cudaDeviceProp prop{};
  e = cudaGetDeviceProperties(&prop, ordinal);
  if (e != cudaSuccess) return make_error(ErrorCode::kDevice, "no usable CUDA GPU: %s", cudaGetErrorString(e));
  if (name) *name = prop.name;
  const int cc = prop.major * 10 + prop.minor;
  if (cc < kMinComputeCapability) {
    return make_error(ErrorCode::kDevice, "no usable CUDA GPU: %s has compute capability %d.%d; ferry needs 7.5 or newer",
                      prop.name, prop.major, prop.minor);
  }
  return Status::ok();
}

class CudaStream final : public Stream {
 public:
  explicit CudaStream(cudaStream_t s) : s_(s) {}
  ~CudaStream() override { cudaStreamDestroy(s_); }
  void* native_handle() const override { return s_; }
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_;
};

class CudaEvent final : public Event {
 public:
  CudaEvent(cudaEvent_t e, bool timing) : e_(e), timing_(timing) {}
  ~CudaEvent() override { cudaEventDestroy(e_); }
  void* native_handle() const override { return e_; }
  cudaEvent_t get() const { return e_; }
  bool timing() const { return timing_; }

 private:
  cudaEvent_t e_;
  bool timing_;
};

cudaStream_t native(Stream& s) {
  auto* p = dynamic_cast<CudaStream*>(&s);
  FERRY_ASSERT_MSG(p != nullptr, "stream of another device passed to the CUDA device");
  return p->get();
}
CudaEvent& native(Event& e) {
  auto* p = dynamic_cast<CudaEvent*>(&e);
  FERRY_ASSERT_MSG(p != nullptr, "event of another device passed to the CUDA device");
  return *p;
}

void host_fn_trampoline(void* data) {
  std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(data));
  (*fn)();
}

class CudaDevice final : public Device {
 public:
  CudaDevice(int ordinal, std::string name, void* base, uint64_t capacity)
      : ordinal_(ordinal), name_(std::move(name)), base_(static_cast<char*>(base)), arena_(capacity, kArenaAlign) {}
  ~CudaDevice() override {
    cudaSetDevice(ordinal_);
    cudaDeviceSynchronize();
    for (auto& [p, n] : pinned_) cudaFreeHost(reinterpret_cast<void*>(p));
    for (auto& [p, n] : registered_) cudaHostUnregister(reinterpret_cast<void*>(p));
    cudaFree(base_);
    g_arena_bytes -= arena_.capacity();
  }

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  const std::string& name() const override { return name_; }
  int ordinal() const override { return ordinal_; }

  Expected<DeviceBuffer> allocate(uint64_t bytes, const char* tag) override {
    FERRY_ASSIGN_OR_RETURN(uint64_t off, arena_.allocate(bytes, tag));
    return DeviceBuffer{base_ + off, bytes, off};
  }
  void release(DeviceBuffer* buf) override {
    if (buf == nullptr || buf->ptr == nullptr) return;
    const bool ok = arena_.release(buf->offset);
    FERRY_ASSERT_MSG(ok, "release of a block that is not live in the CUDA arena");
    *buf = DeviceBuffer{};
  }
  Expected<HostBuffer> allocate_pinned(uint64_t bytes) override {
    FERRY_RETURN_IF_ERROR(use());
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocPortable);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return make_error(ErrorCode::kOutOfMemory, "cannot allocate %s of pinned host memory: %s",
                        format_bytes(bytes).c_str(), cudaGetErrorString(e));
    }
    std::lock_guard<std::mutex> lock(mu_);
    pinned_[reinterpret_cast<uintptr_t>(p)] = bytes;
    pinned_bytes_ += bytes;
    return HostBuffer{p, bytes};
  }
  void release_pinned(HostBuffer* buf) override {
    if (buf == nullptr || buf->ptr == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = pinned_.find(reinterpret_cast<uintptr_t>(buf->ptr));
      FERRY_ASSERT_MSG(it != pinned_.end(), "release_pinned of memory not allocated by this device");
      pinned_bytes_ -= it->second;
      pinned_.erase(it);
    }
    cudaFreeHost(buf->ptr);
    *buf = HostBuffer{};
  }
  Expected<HostBuffer> register_host(void* ptr, uint64_t bytes) override {
    if (ptr == nullptr || bytes == 0)
      return make_error(ErrorCode::kInvalidArgument, "register_host of an empty host range");
    FERRY_RETURN_IF_ERROR(use());
    // A read-only mapping (the model's mmap is PROT_READ) can only be pinned with
    // cudaHostRegisterReadOnly, which needs this attribute (else cudaErrorNotSupported).
    int supported = 0, read_only = 0;
    FERRY_CUDA_RETURN(cudaDeviceGetAttribute(&supported, cudaDevAttrHostRegisterSupported, ordinal_));
    FERRY_CUDA_RETURN(cudaDeviceGetAttribute(&read_only, cudaDevAttrHostRegisterReadOnlySupported, ordinal_));
    if (!supported || !read_only)
      return make_error(ErrorCode::kUnsupported, "%s cannot register %shost memory (driver / platform)", name_.c_str(),
                        supported ? "read-only " : "");
    const long ps = sysconf(_SC_PAGESIZE);
    const uintptr_t page = static_cast<uintptr_t>(ps > 0 ? ps : 4096);
    const uintptr_t lo = reinterpret_cast<uintptr_t>(ptr) / page * page;
    const uintptr_t hi = (reinterpret_cast<uintptr_t>(ptr) + bytes + page - 1) / page * page;
    void* p = reinterpret_cast<void*>(lo);
    const cudaError_t e = cudaHostRegister(p, hi - lo, cudaHostRegisterPortable | cudaHostRegisterReadOnly);
    if (e != cudaSuccess) {
      cudaGetLastError();  // keep the failure out of later launch checks
      return make_error(ErrorCode::kDevice, "cannot register %s of host memory at %p in place: %s",
                        format_bytes(hi - lo).c_str(), p, cudaGetErrorString(e));
    }
    std::lock_guard<std::mutex> lock(mu_);
    registered_[lo] = hi - lo;
    registered_bytes_ += hi - lo;
    return HostBuffer{p, hi - lo};
  }
  void unregister_host(HostBuffer* buf) override {
    if (buf == nullptr || buf->ptr == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = registered_.find(reinterpret_cast<uintptr_t>(buf->ptr));
      FERRY_ASSERT_MSG(it != registered_.end(), "unregister_host of a range not registered with this device");
      registered_bytes_ -= it->second;
      registered_.erase(it);
    }
    if (cudaHostUnregister(buf->ptr) != cudaSuccess) cudaGetLastError();
    *buf = HostBuffer{};
  }
  Expected<MemoryInfo> memory_info() override {
    FERRY_RETURN_IF_ERROR(use());
    size_t free_b = 0, total_b = 0;
    FERRY_CUDA_RETURN(cudaMemGetInfo(&free_b, &total_b));
    MemoryInfo m;
    m.device_total = total_b;
    m.device_free = free_b;
    m.arena_capacity = arena_.capacity();
    const uint64_t taken = total_b - free_b;
    m.outside_arena = taken > m.arena_capacity ? taken - m.arena_capacity : 0;
    m.arena_used = arena_.used();
    m.arena_peak = arena_.peak();
    m.arena_largest_free = arena_.largest_free();
    m.arena_blocks = arena_.blocks();
    std::lock_guard<std::mutex> lock(mu_);
    m.pinned_bytes = pinned_bytes_;
    m.registered_bytes = registered_bytes_;
    return m;
  }

  Expected<std::unique_ptr<Stream>> create_stream() override {
    FERRY_RETURN_IF_ERROR(use());
    cudaStream_t s = nullptr;
    FERRY_CUDA_RETURN(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return std::unique_ptr<Stream>(new CudaStream(s));
  }
  Expected<std::unique_ptr<Event>> create_event(bool timing) override {
    FERRY_RETURN_IF_ERROR(use());
    cudaEvent_t e = nullptr;
    FERRY_CUDA_RETURN(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
    return std::unique_ptr<Event>(new CudaEvent(e, timing));
  }
  Status record(Event& event, Stream& stream) override {
    FERRY_CUDA_RETURN(cudaEventRecord(native(event).get(), native(stream)));
    return Status::ok();
  }
  Status wait(Stream& stream, Event& event) override {
    FERRY_CUDA_RETURN(cudaStreamWaitEvent(native(stream), native(event).get(), 0));
    return Status::ok();
  }
  Expected<bool> query(Event& event) override {
    const cudaError_t e = cudaEventQuery(native(event).get());
    if (e == cudaSuccess) return true;
    if (e == cudaErrorNotReady) {
      cudaGetLastError();  // "not ready" is not an error; keep it out of later launch checks
      return false;
    }
    return cuda_status(e, "cudaEventQuery");
  }
  Status sync(Event& event) override {
    FERRY_CUDA_RETURN(cudaEventSynchronize(native(event).get()));
    return Status::ok();
  }
  Expected<float> elapsed_ms(Event& start, Event& end) override {
    if (!native(start).timing() || !native(end).timing()) {
      return make_error(ErrorCode::kInvalidArgument, "elapsed_ms: event created without timing");
    }
    float ms = 0.f;
    FERRY_CUDA_RETURN(cudaEventElapsedTime(&ms, native(start).get(), native(end).get()));
    return ms;
  }
  Status sync(Stream& stream) override {
    FERRY_CUDA_RETURN(cudaStreamSynchronize(native(stream)));
    return Status::ok();
  }
  Status synchronize() override {
    FERRY_RETURN_IF_ERROR(use());
    FERRY_CUDA_RETURN(cudaDeviceSynchronize());
    return Status::ok();
  }

  Status copy_h2d(void* dst, const void* src, uint64_t bytes, Stream& stream) override {
    if (bytes == 0) return Status::ok();
    FERRY_CUDA_RETURN(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, native(stream)));
    return Status::ok();
  }
  Status copy_d2h(void* dst, const void* src, uint64_t bytes, Stream& stream) override {
    if (bytes == 0) return Status::ok();
    FERRY_CUDA_RETURN(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, native(stream)));
    return Status::ok();
  }
  Status copy_d2d(void* dst, const void* src, uint64_t bytes, Stream& stream) override {
    if (bytes == 0) return Status::ok();
    FERRY_CUDA_RETURN(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, native(stream)));
    return Status::ok();
  }
  Status memset(void* dst, int value, uint64_t bytes, Stream& stream) override {
    if (bytes == 0) return Status::ok();
    FERRY_CUDA_RETURN(cudaMemsetAsync(dst, value, bytes, native(stream)));
    return Status::ok();
  }
  Status host_fn(Stream& stream, std::function<void()> fn) override {
    auto* heap = new std::function<void()>(std::move(fn));
    const cudaError_t e = cudaLaunchHostFunc(native(stream), host_fn_trampoline, heap);
    if (e != cudaSuccess) {
      delete heap;
      return cuda_status(e, "cudaLaunchHostFunc");
    }
    return Status::ok();
  }

 private:
  // The runtime's current device is per host thread: set it before calls that depend on it.
  Status use() const {
    FERRY_CUDA_RETURN(cudaSetDevice(ordinal_));
    return Status::ok();
  }

  const int ordinal_;
  const std::string name_;
  char* const base_;
  ArenaAllocator arena_;
  std::mutex mu_;
  std::map<uintptr_t, uint64_t> pinned_;
  uint64_t pinned_bytes_ = 0;
  std::map<uintptr_t, uint64_t> registered_;  // page range start -> bytes (register_host)
  uint64_t registered_bytes_ = 0;
};

}  // namespace

bool cuda_available(std::string* why) {
  const Status st = probe(0, nullptr);
  if (!st.is_ok() && why) *why = st.message();
  return st.is_ok();
}

Expected<std::unique_ptr<Device>> make_cuda_device(int ordinal, uint64_t budget) {
  std::string name;
  FERRY_RETURN_IF_ERROR(probe(ordinal, &name));
  FERRY_CUDA_RETURN(cudaSetDevice(ordinal));
  FERRY_CUDA_RETURN(cudaFree(nullptr));  // creates the context now, so memory info includes it
  size_t free_b = 0, total_b = 0;
  FERRY_CUDA_RETURN(cudaMemGetInfo(&free_b, &total_b));
  uint64_t cap = budget;
  if (cap == 0) {
    if (free_b <= kDefaultHeadroom) {
      return make_error(ErrorCode::kOutOfMemory, "%s: only %s free, nothing left for ferry", name.c_str(),
                        format_bytes(free_b).c_str());
    }
    cap = free_b - kDefaultHeadroom;
  } else if (cap > free_b) {
    return make_error(ErrorCode::kOutOfMemory, "VRAM budget %s exceeds the free memory of %s: %s free of %s",
                      format_bytes(cap).c_str(), name.c_str(), format_bytes(free_b).c_str(),
                      format_bytes(total_b).c_str());
  }
  cap = cap / kArenaAlign * kArenaAlign;
  void* base = nullptr;
  const cudaError_t e = cudaMalloc(&base, cap);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return make_error(ErrorCode::kOutOfMemory, "cannot reserve the %s arena on %s: %s", format_bytes(cap).c_str(),
                      name.c_str(), cudaGetErrorString(e));
  }
  g_arena_bytes += cap;
  return std::unique_ptr<Device>(new CudaDevice(ordinal, name, base, cap));
}

// ---- process memory (process_memory.h) -------------------------------------------------------------

uint64_t cuda_arena_bytes() { return g_arena_bytes.load(); }

std::string cuda_pci_bus_id(int ordinal) {
  char buf[64] = {};
  if (cudaDeviceGetPCIBusId(buf, sizeof buf, ordinal) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  return buf;
}

Expected<DeviceMemory> cuda_memory(int ordinal) {
  FERRY_CUDA_RETURN(cudaSetDevice(ordinal));
  size_t free_b = 0, total_b = 0;
  FERRY_CUDA_RETURN(cudaMemGetInfo(&free_b, &total_b));
  return DeviceMemory{free_b, total_b};
}

Expected<ContextCost> measure_cuda_context(int ordinal) {
  // The meter first: made before this process's context (when nothing made one earlier), its
  // device-wide baseline leaves the context in what it measures.
  ProcessMemoryMeter& meter = process_memory_meter(ordinal);
  FERRY_RETURN_IF_ERROR(probe(ordinal, nullptr));
  FERRY_CUDA_RETURN(cudaSetDevice(ordinal));
  FERRY_CUDA_RETURN(cudaFree(nullptr));  // the context
  // What the executor makes outside its arena: two streams, events, a cuBLAS handle (CudaContext also
  // sets the attention kernels' shared-memory limits, which loads their module). Destroyed after.
  struct Made {
    cudaStream_t streams[2] = {nullptr, nullptr};
    cudaEvent_t events[4] = {nullptr, nullptr, nullptr, nullptr};
    std::unique_ptr<kernels::CudaContext> ctx;
    ~Made() {
      ctx.reset();
      for (cudaEvent_t e : events)
        if (e) cudaEventDestroy(e);
      for (cudaStream_t s : streams)
        if (s) cudaStreamDestroy(s);
    }
  } made;
  for (cudaStream_t& s : made.streams) FERRY_CUDA_RETURN(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (cudaEvent_t& e : made.events) FERRY_CUDA_RETURN(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  kernels::CudaContextDesc desc;
  desc.device = ordinal;
  desc.stream = made.streams[0];
  FERRY_ASSIGN_OR_RETURN(made.ctx, kernels::CudaContext::create(desc));
  FERRY_CUDA_RETURN(cudaDeviceSynchronize());
  meter.calibrate();
  const std::optional<uint64_t> used = meter.read();
  ContextCost c;
  c.source = meter.source();
  const uint64_t arenas = cuda_arena_bytes();
  c.bytes = used && *used > arenas ? *used - arenas : 0;
  // A device-wide delta this small means the context was there before the meter (its baseline holds
  // it): no CUDA context of a recent driver is under 64 MiB. Use the documented figure.
  if (!used || (c.source == MemorySource::kNvmlDeviceDelta && c.bytes < (64ull << 20))) {
    c.bytes = kDefaultCudaContextBytes;
    c.source = MemorySource::kModelled;
  }
  size_t free_b = 0, total_b = 0;
  FERRY_CUDA_RETURN(cudaMemGetInfo(&free_b, &total_b));
  c.device_free = free_b;
  c.device_total = total_b;
  return c;
}

Expected<CudaDeviceInfo> cuda_device_info(int ordinal) {
  std::string name;
  FERRY_RETURN_IF_ERROR(probe(ordinal, &name));
  cudaDeviceProp prop{};
  FERRY_CUDA_RETURN(cudaGetDeviceProperties(&prop, ordinal));
  CudaDeviceInfo info;
  info.name = prop.name;
  info.compute_capability = prop.major * 10 + prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.total_memory = prop.totalGlobalMem;
  info.l2_bytes = static_cast<uint64_t>(prop.l2CacheSize);
  FERRY_CUDA_RETURN(cudaDriverGetVersion(&info.driver_version));
  FERRY_CUDA_RETURN(cudaRuntimeGetVersion(&info.runtime_version));
  return info;
}

// ---- CudaOpsBundle ---------------------------------------------------------------------------------

struct CudaOpsBundle::Impl {
  Device* device = nullptr;
  DeviceBuffer scratch;
  DeviceBuffer workspace;
  std::unique_ptr<kernels::CudaContext> ctx;
  std::unique_ptr<kernels::CudaOps> ops;
  std::vector<cudaGraphExec_t> graphs;
  ~Impl() {
    for (cudaGraphExec_t g : graphs)
      if (g) cudaGraphExecDestroy(g);
    ops.reset();
    ctx.reset();
    if (device) {
      device->release(&scratch);
      device->release(&workspace);
    }
  }
};

CudaOpsBundle::CudaOpsBundle(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaOpsBundle::~CudaOpsBundle() = default;

Expected<std::unique_ptr<CudaOpsBundle>> CudaOpsBundle::create(Device& device, Stream& stream,
                                                               const kernels::CudaScratchShape& shape,
                                                               const kernels::CudaOpsOptions& options) {
  if (device.kind() != DeviceKind::kCuda) {
    return make_error(ErrorCode::kInvalidArgument, "CudaOps needs a CUDA device, got '%s'",
                      device_kind_name(device.kind()));
  }
  auto impl = std::make_unique<Impl>();
  impl->device = &device;
  FERRY_ASSIGN_OR_RETURN(impl->scratch, device.allocate(kernels::CudaOps::scratch_bytes(shape), "cuda_ops.scratch"));
  FERRY_ASSIGN_OR_RETURN(impl->workspace, device.allocate(kernels::kCublasWorkspaceBytes, "cublas.workspace"));
  kernels::CudaContextDesc desc;
  desc.device = device.ordinal();
  desc.stream = static_cast<CUstream_st*>(stream.native_handle());
  desc.scratch = impl->scratch.ptr;
  desc.scratch_bytes = impl->scratch.bytes;
  desc.cublas_workspace = impl->workspace.ptr;
  desc.cublas_workspace_bytes = impl->workspace.bytes;
  FERRY_ASSIGN_OR_RETURN(impl->ctx, kernels::CudaContext::create(desc));
  impl->ops = std::make_unique<kernels::CudaOps>(*impl->ctx, options);
  return std::unique_ptr<CudaOpsBundle>(new CudaOpsBundle(std::move(impl)));
}

kernels::Ops& CudaOpsBundle::ops() { return *impl_->ops; }

Status CudaOpsBundle::begin_capture() {
  impl_->ops->reset_stash();
  FERRY_CUDA_RETURN(cudaStreamBeginCapture(impl_->ctx->stream(), cudaStreamCaptureModeThreadLocal));
  return Status::ok();
}

Expected<int> CudaOpsBundle::end_capture() {
  cudaGraph_t graph = nullptr;
  FERRY_CUDA_RETURN(cudaStreamEndCapture(impl_->ctx->stream(), &graph));
  if (!impl_->ctx->ok()) {  // a launch failed while capturing: the graph is incomplete
    cudaGraphDestroy(graph);
    return impl_->ctx->status();
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (e != cudaSuccess) return cuda_status(e, "cudaGraphInstantiate");
  impl_->graphs.push_back(exec);
  return static_cast<int>(impl_->graphs.size()) - 1;
}

Status CudaOpsBundle::replay(int id) {
  if (id < 0 || id >= static_cast<int>(impl_->graphs.size()) || impl_->graphs[id] == nullptr) {
    return make_error(ErrorCode::kInvalidArgument, "no CUDA graph %d", id);
  }
  FERRY_CUDA_RETURN(cudaGraphLaunch(impl_->graphs[id], impl_->ctx->stream()));
  impl_->ops->reset_stash();
  return Status::ok();
}

void CudaOpsBundle::drop_graphs() {
  for (cudaGraphExec_t& g : impl_->graphs) {
    if (g) cudaGraphExecDestroy(g);
    g = nullptr;
  }
  impl_->graphs.clear();
}
Status CudaOpsBundle::status() const { return impl_->ctx->status(); }
void CudaOpsBundle::clear_status() { impl_->ctx->clear_status(); }

}  // namespace ferry::exec
