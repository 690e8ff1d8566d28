// EmulatedDevice: the Device interface on host memory, so the executor's streaming, waits and budget
// logic run in CI without a GPU. The arena is host virtual memory reserved once (pages are committed
// only where written); each stream is a worker thread executing its queue in order (copies are memcpy,
// optionally throttled to a link speed); events follow CUDA's semantics (a wait captures the latest
// record). Misuse CUDA would leave undefined — a device pointer outside a live arena block, a host
// pointer inside the arena, a non-pinned host buffer when required — is an error Status here.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "exec/device.h"

namespace ferry::exec {

struct EmulatedState;

class EmulatedDevice final : public Device {
 public:
  static Expected<std::unique_ptr<EmulatedDevice>> create(const EmulatedOptions& options);
  ~EmulatedDevice() override;

  DeviceKind kind() const override { return DeviceKind::kEmulated; }
  const std::string& name() const override;
  int ordinal() const override { return 0; }

  Expected<DeviceBuffer> allocate(uint64_t bytes, const char* tag) override;
  void release(DeviceBuffer* buf) override;
  Expected<HostBuffer> allocate_pinned(uint64_t bytes) override;
  void release_pinned(HostBuffer* buf) override;
  Expected<HostBuffer> register_host(void* ptr, uint64_t bytes) override;
  void unregister_host(HostBuffer* buf) override;
  Expected<MemoryInfo> memory_info() override;

  Expected<std::unique_ptr<Stream>> create_stream() override;
  Expected<std::unique_ptr<Event>> create_event(bool timing = true) override;
  Status record(Event& event, Stream& stream) override;
  Status wait(Stream& stream, Event& event) override;
  Expected<bool> query(Event& event) override;
  Status sync(Event& event) override;
  Expected<float> elapsed_ms(Event& start, Event& end) override;
  Status sync(Stream& stream) override;
  Status synchronize() override;

  Status copy_h2d(void* dst, const void* src, uint64_t bytes, Stream& stream) override;
  Status copy_d2h(void* dst, const void* src, uint64_t bytes, Stream& stream) override;
  Status copy_d2d(void* dst, const void* src, uint64_t bytes, Stream& stream) override;
  Status memset(void* dst, int value, uint64_t bytes, Stream& stream) override;
  Status host_fn(Stream& stream, std::function<void()> fn) override;

  // Test introspection: bytes moved so far by kind (counted when the copy executes).
  uint64_t bytes_h2d() const;
  uint64_t bytes_d2h() const;
  uint64_t bytes_d2d() const;
  // Test introspection: [p, p + bytes) lies inside one live register_host range; successful calls so far.
  bool is_registered(const void* p, uint64_t bytes) const;
  int64_t register_calls() const;

 private:
  explicit EmulatedDevice(std::shared_ptr<EmulatedState> state);
  Status check_device(const void* p, uint64_t bytes, const char* what) const;
  Status check_host(const void* p, uint64_t bytes, const char* what) const;
  Status copy(void* dst, const void* src, uint64_t bytes, Stream& stream, int kind);

  std::shared_ptr<EmulatedState> state_;
};

}  // namespace ferry::exec
