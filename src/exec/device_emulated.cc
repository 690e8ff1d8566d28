// EmulatedDevice: host implementation of Device (see device_emulated.h).
// Threads: one worker per stream runs that stream's queue in order; the caller's thread only validates
// and enqueues, so every error is reported synchronously and queued work cannot fail.
#include "exec/device_emulated.h"

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "exec/device_arena.h"

namespace ferry::exec {
namespace {

using Clock = std::chrono::steady_clock;

// One stream: a FIFO of closures run by its own thread.
class Worker {
 public:
  Worker() : thread_([this] { run(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void submit(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(fn));
    }
    cv_.notify_all();
  }
  void wait_idle() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [this] { return queue_.empty() && !busy_; });
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      std::function<void()> fn = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      fn();
      lock.lock();
      busy_ = false;
      if (queue_.empty()) idle_cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members above exist
};

// An event: records are numbered; a record completes when its stream reaches it.
struct EventState {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0;   // records submitted
  uint64_t completed = 0;  // highest record number completed
  Clock::time_point when;  // time the highest completed record completed
  bool timing = true;

  void complete(uint64_t gen) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (gen > completed) {
        completed = gen;
        when = Clock::now();
      }
    }
    cv.notify_all();
  }
  void wait_for(uint64_t gen) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return completed >= gen; });
  }
};

class EmuStream final : public Stream {
 public:
  explicit EmuStream(std::shared_ptr<Worker> w) : worker(std::move(w)) {}
  void* native_handle() const override { return nullptr; }
  std::shared_ptr<Worker> worker;
};

class EmuEvent final : public Event {
 public:
  EmuEvent() : state(std::make_shared<EventState>()) {}
  void* native_handle() const override { return nullptr; }
  std::shared_ptr<EventState> state;
};

EmuStream* as_emu(Stream& s) {
  auto* p = dynamic_cast<EmuStream*>(&s);
  FERRY_ASSERT_MSG(p != nullptr, "stream of another device passed to the emulated device");
  return p;
}
EmuEvent* as_emu(Event& e) {
  auto* p = dynamic_cast<EmuEvent*>(&e);
  FERRY_ASSERT_MSG(p != nullptr, "event of another device passed to the emulated device");
  return p;
}

enum CopyKind { kH2D = 0, kD2H = 1, kD2D = 2 };

}  // namespace

struct EmulatedState {
  EmulatedOptions options;
  uint8_t* base = nullptr;
  uint64_t capacity = 0;
  std::unique_ptr<ArenaAllocator> arena;

  std::mutex mu;                              // guards pinned, registered and workers
  std::map<uintptr_t, uint64_t> pinned;       // address -> bytes
  uint64_t pinned_bytes = 0;
  std::map<uintptr_t, uint64_t> registered;   // page-aligned address -> bytes (register_host)
  uint64_t registered_bytes = 0;
  int64_t register_calls = 0;
  std::vector<std::weak_ptr<Worker>> workers;

  std::atomic<uint64_t> moved[3] = {0, 0, 0};

  ~EmulatedState() {
    if (base) munmap(base, capacity);
    for (auto& [p, n] : pinned) std::free(reinterpret_cast<void*>(p));
  }
  bool in_arena(const void* p) const {
    auto a = reinterpret_cast<uintptr_t>(p);
    auto b = reinterpret_cast<uintptr_t>(base);
    return a >= b && a < b + capacity;
  }
  // [p, p + bytes) inside one range of `ranges` (caller holds mu).
  static bool inside(const std::map<uintptr_t, uint64_t>& ranges, const void* p, uint64_t bytes) {
    auto a = reinterpret_cast<uintptr_t>(p);
    auto it = ranges.upper_bound(a);
    if (it == ranges.begin()) return false;
    --it;
    return a >= it->first && a + bytes <= it->first + it->second;
  }
  // Any byte of [a, a + bytes) inside a range of `ranges` (caller holds mu).
  static bool overlaps(const std::map<uintptr_t, uint64_t>& ranges, uintptr_t a, uint64_t bytes) {
    auto it = ranges.lower_bound(a + bytes);  // first range starting at or past the end
    if (it == ranges.begin()) return false;
    --it;
    return it->first + it->second > a;
  }
  bool is_pinned(const void* p, uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mu);
    return inside(pinned, p, bytes) || inside(registered, p, bytes);
  }
  // Sleeps so that `bytes` take at least bytes / copy_gbps since `start`.
  void throttle(uint64_t bytes, Clock::time_point start) const {
    if (options.copy_gbps <= 0) return;
    const auto target = start + std::chrono::duration<double>(static_cast<double>(bytes) / (options.copy_gbps * 1e9));
    std::this_thread::sleep_until(target);
  }
};

Expected<std::unique_ptr<EmulatedDevice>> EmulatedDevice::create(const EmulatedOptions& options) {
  auto state = std::make_shared<EmulatedState>();
  state->options = options;
  const uint64_t cap = options.budget / kArenaAlign * kArenaAlign;
  if (cap == 0) return make_error(ErrorCode::kInvalidArgument, "emulated device: budget must be at least %llu bytes",
                                  static_cast<unsigned long long>(kArenaAlign));
  void* p = mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return make_error(ErrorCode::kOutOfMemory, "emulated device: cannot reserve %s of host address space: %s",
                      format_bytes(cap).c_str(), std::strerror(errno));
  }
  state->base = static_cast<uint8_t*>(p);
  state->capacity = cap;
  state->arena = std::make_unique<ArenaAllocator>(cap, kArenaAlign);
  return std::unique_ptr<EmulatedDevice>(new EmulatedDevice(std::move(state)));
}

EmulatedDevice::EmulatedDevice(std::shared_ptr<EmulatedState> state) : state_(std::move(state)) {}

EmulatedDevice::~EmulatedDevice() { (void)synchronize(); }

const std::string& EmulatedDevice::name() const { return state_->options.name; }

// ---- memory ----------------------------------------------------------------------------------------

Expected<DeviceBuffer> EmulatedDevice::allocate(uint64_t bytes, const char* tag) {
  FERRY_ASSIGN_OR_RETURN(uint64_t off, state_->arena->allocate(bytes, tag));
  DeviceBuffer buf{state_->base + off, bytes, off};
  // Fresh device memory is garbage on a GPU; all-ones bytes are NaN in F32, F16 and BF16, so reading
  // memory nobody wrote shows up in tests.
  if (state_->options.poison) std::memset(buf.ptr, 0xff, bytes);
  return buf;
}

void EmulatedDevice::release(DeviceBuffer* buf) {
  if (buf == nullptr || buf->ptr == nullptr) return;
  const bool ok = state_->arena->release(buf->offset);
  FERRY_ASSERT_MSG(ok, "release of a block that is not live in the emulated arena");
  *buf = DeviceBuffer{};
}

Expected<HostBuffer> EmulatedDevice::allocate_pinned(uint64_t bytes) {
  const uint64_t rounded = (bytes + 4095) / 4096 * 4096;
  void* p = std::aligned_alloc(4096, rounded == 0 ? 4096 : rounded);
  if (p == nullptr) {
    return make_error(ErrorCode::kOutOfMemory, "emulated device: cannot allocate %s of pinned host memory",
                      format_bytes(bytes).c_str());
  }
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->pinned[reinterpret_cast<uintptr_t>(p)] = bytes;
  state_->pinned_bytes += bytes;
  return HostBuffer{p, bytes};
}

void EmulatedDevice::release_pinned(HostBuffer* buf) {
  if (buf == nullptr || buf->ptr == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto it = state_->pinned.find(reinterpret_cast<uintptr_t>(buf->ptr));
    FERRY_ASSERT_MSG(it != state_->pinned.end(), "release_pinned of memory not allocated by this device");
    state_->pinned_bytes -= it->second;
    state_->pinned.erase(it);
  }
  std::free(buf->ptr);
  *buf = HostBuffer{};
}

Expected<HostBuffer> EmulatedDevice::register_host(void* ptr, uint64_t bytes) {
  if (ptr == nullptr || bytes == 0)
    return make_error(ErrorCode::kInvalidArgument, "emulated device: register_host of an empty range");
  if (state_->options.refuse_register)
    return make_error(ErrorCode::kDevice, "emulated device: register_host refused (refuse_register)");
  // Whole pages, as CUDA pins them.
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096);
  const uintptr_t lo = reinterpret_cast<uintptr_t>(ptr) / page * page;
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(ptr) + bytes + page - 1) / page * page;
  if (state_->in_arena(reinterpret_cast<void*>(lo)) || state_->in_arena(reinterpret_cast<void*>(hi - 1)))
    return make_error(ErrorCode::kInvalidArgument, "emulated device: register_host of device memory %p", ptr);
  std::lock_guard<std::mutex> lock(state_->mu);
  if (EmulatedState::overlaps(state_->registered, lo, hi - lo) || EmulatedState::overlaps(state_->pinned, lo, hi - lo))
    return make_error(ErrorCode::kInvalidArgument,
                      "emulated device: register_host [%p, +%llu) overlaps memory that is already pinned", ptr,
                      static_cast<unsigned long long>(bytes));
  state_->registered[lo] = hi - lo;
  state_->registered_bytes += hi - lo;
  ++state_->register_calls;
  return HostBuffer{reinterpret_cast<void*>(lo), hi - lo};
}

void EmulatedDevice::unregister_host(HostBuffer* buf) {
  if (buf == nullptr || buf->ptr == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto it = state_->registered.find(reinterpret_cast<uintptr_t>(buf->ptr));
    FERRY_ASSERT_MSG(it != state_->registered.end(), "unregister_host of a range not registered with this device");
    state_->registered_bytes -= it->second;
    state_->registered.erase(it);
  }
  *buf = HostBuffer{};
}

bool EmulatedDevice::is_registered(const void* p, uint64_t bytes) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return EmulatedState::inside(state_->registered, p, bytes);
}

int64_t EmulatedDevice::register_calls() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->register_calls;
}

Expected<MemoryInfo> EmulatedDevice::memory_info() {
  MemoryInfo m;
  const ArenaAllocator& a = *state_->arena;
  m.device_total = state_->options.device_total ? state_->options.device_total : state_->capacity;
  m.arena_capacity = a.capacity();
  m.outside_arena = state_->options.outside_arena;
  const uint64_t taken = m.arena_capacity + m.outside_arena;
  m.device_free = m.device_total > taken ? m.device_total - taken : 0;
  m.arena_used = a.used();
  m.arena_peak = a.peak();
  m.arena_largest_free = a.largest_free();
  m.arena_blocks = a.blocks();
  std::lock_guard<std::mutex> lock(state_->mu);
  m.pinned_bytes = state_->pinned_bytes;
  m.registered_bytes = state_->registered_bytes;
  return m;
}

// ---- streams and events ----------------------------------------------------------------------------

Expected<std::unique_ptr<Stream>> EmulatedDevice::create_stream() {
  auto w = std::make_shared<Worker>();
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    std::erase_if(state_->workers, [](const std::weak_ptr<Worker>& x) { return x.expired(); });
    state_->workers.push_back(w);
  }
  return std::unique_ptr<Stream>(new EmuStream(std::move(w)));
}

Expected<std::unique_ptr<Event>> EmulatedDevice::create_event(bool timing) {
  auto e = std::make_unique<EmuEvent>();
  e->state->timing = timing;
  return std::unique_ptr<Event>(std::move(e));
}

Status EmulatedDevice::record(Event& event, Stream& stream) {
  std::shared_ptr<EventState> ev = as_emu(event)->state;
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(ev->mu);
    gen = ++ev->recorded;
  }
  as_emu(stream)->worker->submit([ev, gen] { ev->complete(gen); });
  return Status::ok();
}

Status EmulatedDevice::wait(Stream& stream, Event& event) {
  std::shared_ptr<EventState> ev = as_emu(event)->state;
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(ev->mu);
    gen = ev->recorded;  // CUDA: the wait refers to the most recent record, if any
  }
  if (gen == 0) return Status::ok();
  as_emu(stream)->worker->submit([ev, gen] { ev->wait_for(gen); });
  return Status::ok();
}

Expected<bool> EmulatedDevice::query(Event& event) {
  EventState& ev = *as_emu(event)->state;
  std::lock_guard<std::mutex> lock(ev.mu);
  return ev.completed >= ev.recorded;
}

Status EmulatedDevice::sync(Event& event) {
  EventState& ev = *as_emu(event)->state;
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(ev.mu);
    gen = ev.recorded;
  }
  ev.wait_for(gen);
  return Status::ok();
}

Expected<float> EmulatedDevice::elapsed_ms(Event& start, Event& end) {
  EventState& a = *as_emu(start)->state;
  EventState& b = *as_emu(end)->state;
  Clock::time_point ta, tb;
  {
    std::lock_guard<std::mutex> lock(a.mu);
    if (!a.timing) return make_error(ErrorCode::kInvalidArgument, "elapsed_ms: start event created without timing");
    if (a.recorded == 0 || a.completed < a.recorded)
      return make_error(ErrorCode::kInvalidArgument, "elapsed_ms: start event not recorded or not complete");
    ta = a.when;
  }
  {
    std::lock_guard<std::mutex> lock(b.mu);
    if (!b.timing) return make_error(ErrorCode::kInvalidArgument, "elapsed_ms: end event created without timing");
    if (b.recorded == 0 || b.completed < b.recorded)
      return make_error(ErrorCode::kInvalidArgument, "elapsed_ms: end event not recorded or not complete");
    tb = b.when;
  }
  return static_cast<float>(std::chrono::duration<double, std::milli>(tb - ta).count());
}

Status EmulatedDevice::sync(Stream& stream) {
  as_emu(stream)->worker->wait_idle();
  return Status::ok();
}

Status EmulatedDevice::synchronize() {
  std::vector<std::shared_ptr<Worker>> live;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    for (auto& w : state_->workers)
      if (auto s = w.lock()) live.push_back(std::move(s));
  }
  for (auto& w : live) w->wait_idle();
  return Status::ok();
}

// ---- async work ------------------------------------------------------------------------------------

Status EmulatedDevice::check_device(const void* p, uint64_t bytes, const char* what) const {
  if (!state_->in_arena(p)) {
    return make_error(ErrorCode::kInvalidArgument, "emulated device: %s %p is not a device address", what, p);
  }
  const uint64_t off = static_cast<uint64_t>(static_cast<const uint8_t*>(p) - state_->base);
  if (!state_->arena->contains(off, bytes)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "emulated device: %s [%p, +%llu) is not inside one live arena block", what, p,
                      static_cast<unsigned long long>(bytes));
  }
  return Status::ok();
}

Status EmulatedDevice::check_host(const void* p, uint64_t bytes, const char* what) const {
  if (state_->in_arena(p)) {
    return make_error(ErrorCode::kInvalidArgument, "emulated device: %s %p is a device address, host expected",
                      what, p);
  }
  if (state_->options.require_pinned && !state_->is_pinned(p, bytes)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "emulated device: %s [%p, +%llu) is not pinned host memory (require_pinned)", what, p,
                      static_cast<unsigned long long>(bytes));
  }
  return Status::ok();
}

Status EmulatedDevice::copy(void* dst, const void* src, uint64_t bytes, Stream& stream, int kind) {
  if (bytes == 0) return Status::ok();
  if (kind == kH2D) {
    FERRY_RETURN_IF_ERROR(check_device(dst, bytes, "copy_h2d destination"));
    FERRY_RETURN_IF_ERROR(check_host(src, bytes, "copy_h2d source"));
  } else if (kind == kD2H) {
    FERRY_RETURN_IF_ERROR(check_host(dst, bytes, "copy_d2h destination"));
    FERRY_RETURN_IF_ERROR(check_device(src, bytes, "copy_d2h source"));
  } else {
    FERRY_RETURN_IF_ERROR(check_device(dst, bytes, "copy_d2d destination"));
    FERRY_RETURN_IF_ERROR(check_device(src, bytes, "copy_d2d source"));
  }
  std::shared_ptr<EmulatedState> st = state_;
  as_emu(stream)->worker->submit([st, dst, src, bytes, kind] {
    const auto start = Clock::now();
    std::memmove(dst, src, bytes);
    st->throttle(bytes, start);
    st->moved[kind].fetch_add(bytes, std::memory_order_relaxed);
  });
  return Status::ok();
}

Status EmulatedDevice::copy_h2d(void* dst, const void* src, uint64_t bytes, Stream& stream) {
  return copy(dst, src, bytes, stream, kH2D);
}
Status EmulatedDevice::copy_d2h(void* dst, const void* src, uint64_t bytes, Stream& stream) {
  return copy(dst, src, bytes, stream, kD2H);
}
Status EmulatedDevice::copy_d2d(void* dst, const void* src, uint64_t bytes, Stream& stream) {
  return copy(dst, src, bytes, stream, kD2D);
}

Status EmulatedDevice::memset(void* dst, int value, uint64_t bytes, Stream& stream) {
  if (bytes == 0) return Status::ok();
  FERRY_RETURN_IF_ERROR(check_device(dst, bytes, "memset destination"));
  as_emu(stream)->worker->submit([dst, value, bytes] { std::memset(dst, value, bytes); });
  return Status::ok();
}

Status EmulatedDevice::host_fn(Stream& stream, std::function<void()> fn) {
  as_emu(stream)->worker->submit(std::move(fn));
  return Status::ok();
}

uint64_t EmulatedDevice::bytes_h2d() const { return state_->moved[kH2D].load(); }
uint64_t EmulatedDevice::bytes_d2h() const { return state_->moved[kD2H].load(); }
uint64_t EmulatedDevice::bytes_d2d() const { return state_->moved[kD2D].load(); }

}  // namespace ferry::exec
