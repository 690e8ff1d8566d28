// Device: what the executor drives to hold weights and move data on an accelerator (docs/ARCHITECTURE.md §3, §5).
// All device memory comes from one budget-capped arena reserved when the device is made; an allocation
// past the budget is a kOutOfMemory Status with the numbers. Work is ordered by streams (FIFO each) and
// synchronized by events, as in CUDA: a wait captures the event's latest record at the time of the call.
// Implementations: CudaDevice (device_cuda.h) and EmulatedDevice (device_emulated.h, host memory, a
// worker thread per stream) so the executor can be tested without a GPU. No CUDA header here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/status.h"

namespace ferry::exec {

enum class DeviceKind : uint8_t { kCuda, kEmulated };
const char* device_kind_name(DeviceKind kind);  // "cuda", "emulated"

// Alignment of every arena block (cuBLAS, 16-byte vector loads and cp.async all want far less).
inline constexpr uint64_t kArenaAlign = 256;

// A block of device memory from the arena. Plain data: hand it back with Device::release.
struct DeviceBuffer {
  void* ptr = nullptr;   // device address (emulated: a host address inside the arena)
  uint64_t bytes = 0;    // size asked for
  uint64_t offset = 0;   // offset of the block inside the arena
  explicit operator bool() const { return ptr != nullptr; }
};

// Page-locked host memory (the only host memory async copies overlap with compute from).
struct HostBuffer {
  void* ptr = nullptr;
  uint64_t bytes = 0;
  explicit operator bool() const { return ptr != nullptr; }
};

struct MemoryInfo {
  uint64_t device_total = 0;       // physical memory of the device (emulated: the option)
  uint64_t device_free = 0;        // free on the device now, the arena's reservation excluded
  uint64_t outside_arena = 0;      // device memory used outside the arena: the CUDA context, cuBLAS,
                                   // other processes (= total - free - arena_capacity)
  uint64_t arena_capacity = 0;     // the budget, reserved at creation
  uint64_t arena_used = 0;         // bytes in live blocks (rounded up to kArenaAlign)
  uint64_t arena_peak = 0;         // high-water mark of arena_used
  uint64_t arena_largest_free = 0; // largest block an allocation could get now
  uint64_t arena_blocks = 0;       // live blocks
  uint64_t pinned_bytes = 0;       // page-locked host memory allocated through this device
  uint64_t registered_bytes = 0;   // existing host memory page-locked in place (register_host), whole pages
};

// An in-order queue of device work. Destroy streams and events before their device.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual void* native_handle() const = 0;  // cudaStream_t for CUDA, nullptr when emulated
};

// A marker in a stream's work. Never recorded = complete.
class Event {
 public:
  virtual ~Event() = default;
  virtual void* native_handle() const = 0;  // cudaEvent_t for CUDA, nullptr when emulated
};

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceKind kind() const = 0;
  virtual const std::string& name() const = 0;  // "NVIDIA H200", "emulated"
  virtual int ordinal() const = 0;

  // ---- memory ----------------------------------------------------------------------------------
  // A block of the arena (tag names it in errors and dumps: "blk.7.ffn_up", "kv", "scratch").
  // Past the budget: kOutOfMemory naming the size, the tag, the use and the largest free block.
  virtual Expected<DeviceBuffer> allocate(uint64_t bytes, const char* tag) = 0;
  virtual void release(DeviceBuffer* buf) = 0;  // resets *buf; releasing an empty buffer is a no-op
  virtual Expected<HostBuffer> allocate_pinned(uint64_t bytes) = 0;
  virtual void release_pinned(HostBuffer* buf) = 0;
  // Page-locks existing host memory in place (e.g. the read-only mmap of a model file) so copies from
  // it are asynchronous like copies from allocate_pinned memory. The range is widened to whole pages;
  // the HostBuffer returned is that page range (hand it back with unregister_host before the memory
  // goes). Registered ranges must not overlap. The memory is registered read-only for the device
  // (CUDA: cudaHostRegisterReadOnly | cudaHostRegisterPortable), so PROT_READ mappings work. Errors
  // (driver or OS refuses: read-only registration unsupported, RLIMIT_MEMLOCK, an overlapping range)
  // are a Status; callers fall back to copying into allocate_pinned memory. Default: kUnsupported.
  virtual Expected<HostBuffer> register_host(void* ptr, uint64_t bytes);
  virtual void unregister_host(HostBuffer* buf);  // resets *buf; an empty buffer is a no-op
  virtual Expected<MemoryInfo> memory_info() = 0;

  // ---- streams and events ----------------------------------------------------------------------
  virtual Expected<std::unique_ptr<Stream>> create_stream() = 0;
  // timing = false makes record/wait cheaper on CUDA; elapsed_ms then fails.
  virtual Expected<std::unique_ptr<Event>> create_event(bool timing = true) = 0;
  virtual Status record(Event& event, Stream& stream) = 0;  // event completes when prior work of stream has
  virtual Status wait(Stream& stream, Event& event) = 0;    // later work of stream waits for event's last record
  virtual Expected<bool> query(Event& event) = 0;           // true when the last record completed
  virtual Status sync(Event& event) = 0;                    // host blocks until the last record completed
  virtual Expected<float> elapsed_ms(Event& start, Event& end) = 0;  // both recorded and complete
  virtual Status sync(Stream& stream) = 0;                  // host blocks until stream is idle
  virtual Status synchronize() = 0;                         // host blocks until every stream is idle

  // ---- async work on a stream ------------------------------------------------------------------
  // dst/src are device addresses inside live arena blocks or host addresses; host memory should be
  // pinned for the copy to be asynchronous (pageable memory works but the host may block).
  virtual Status copy_h2d(void* dst, const void* src, uint64_t bytes, Stream& stream) = 0;
  virtual Status copy_d2h(void* dst, const void* src, uint64_t bytes, Stream& stream) = 0;
  virtual Status copy_d2d(void* dst, const void* src, uint64_t bytes, Stream& stream) = 0;
  virtual Status memset(void* dst, int value, uint64_t bytes, Stream& stream) = 0;
  // Runs fn on a host thread once prior work of stream is done; later work of stream waits for fn.
  // fn must not call into the Device (CUDA forbids CUDA calls from such callbacks).
  virtual Status host_fn(Stream& stream, std::function<void()> fn) = 0;
};

// ---- factories -------------------------------------------------------------------------------------

// True when a CUDA GPU ferry can use is present (driver, device, compute capability >= 7.5); otherwise
// false with the reason in *why (may be null). Always false in a build without CUDA.
bool cuda_available(std::string* why);

// The CUDA device `ordinal` with an arena of `budget` bytes reserved now (0: all free memory but a
// headroom for the CUDA context and libraries). Errors: kDevice "no usable CUDA GPU: <reason>",
// kOutOfMemory when the budget exceeds the free memory.
Expected<std::unique_ptr<Device>> make_cuda_device(int ordinal, uint64_t budget);

struct EmulatedOptions {
  uint64_t budget = 1ull << 30;      // arena bytes (host virtual memory, touched only where written)
  uint64_t device_total = 0;         // reported device memory; 0 = budget
  double copy_gbps = 0;              // throttle copies to this many GB/s (0 = memcpy speed), to make
                                     // copy/compute overlap and missing waits visible in tests
  bool require_pinned = false;       // a copy touching non-pinned host memory is an error (memory
                                     // from allocate_pinned or inside one register_host range is pinned)
  bool refuse_register = false;      // register_host fails (kDevice), as a driver that cannot pin would
  bool poison = true;                // fill new blocks with 0xff (NaN in F32/F16/BF16), as a GPU leaves
                                     // fresh memory undefined
  uint64_t outside_arena = 0;        // modelled device memory outside the arena (the CUDA context a real
                                     // GPU holds), reported by memory_info(); never allocated
  std::string name = "emulated";
};
Expected<std::unique_ptr<Device>> make_emulated_device(const EmulatedOptions& options);

// "cuda" | "emulated": the device of that kind (emulated ignores ordinal). Other names: kInvalidArgument.
Expected<std::unique_ptr<Device>> make_device(const std::string& kind, int ordinal, uint64_t budget);

}  // namespace ferry::exec
