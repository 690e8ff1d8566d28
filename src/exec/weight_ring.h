// WeightRing: K >= 2 device slots that the copy stream fills with streamed sub-layers' weights ahead of
// the compute stream (docs/ARCHITECTURE.md §1, §3). Each slot carries two events: `filled` (recorded on the copy
// stream after its copy) and `freed` (recorded on the compute stream after the last kernel that read
// it). A fill waits for `freed`, a consumer waits for `filled`, so copies run as far ahead as the ring
// allows and never overwrite weights still in use. Slots remember which item they hold, so a prefetch
// issued at the end of one step is reused by the next instead of copied twice.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "exec/device.h"

namespace ferry::exec {

class WeightRing {
 public:
  // Allocates slots * slot_bytes from the device arena as one block tagged "ring".
  static Expected<std::unique_ptr<WeightRing>> create(Device& device, int32_t slots, uint64_t slot_bytes);
  ~WeightRing();
  WeightRing(const WeightRing&) = delete;
  WeightRing& operator=(const WeightRing&) = delete;

  int32_t slots() const { return static_cast<int32_t>(slot_.size()); }
  uint64_t slot_bytes() const { return slot_bytes_; }
  void* slot_ptr(int32_t k) const;
  int32_t holds(int32_t k) const { return slot_[k].item; }  // item id in (or on its way to) slot k; -1 none

  // Slot k gets item `item` (bytes from host memory src, pinned for an async copy) unless it already
  // holds it. The copy is ordered after the slot's last consumer. t0 / t1: optional timing events
  // recorded around the copy. *copied says whether a copy was issued.
  Status fill(int32_t k, int32_t item, const void* src, uint64_t bytes, Stream& copy, Event* t0 = nullptr,
              Event* t1 = nullptr, bool* copied = nullptr);
  // The same with the item in pieces (one copy each, in order; t0 / t1 around all of them): a
  // sub-layer copied straight from a registered mmap, whose matrices are not contiguous there.
  struct Piece {
    uint64_t offset = 0;        // inside the slot
    const void* src = nullptr;  // host memory (pinned or registered for an async copy)
    uint64_t bytes = 0;
  };
  Status fill(int32_t k, int32_t item, std::span<const Piece> pieces, Stream& copy, Event* t0 = nullptr,
              Event* t1 = nullptr, bool* copied = nullptr);
  // Later work of `compute` waits until slot k's fill completed.
  Status acquire(int32_t k, Stream& compute);
  // Work enqueued on `compute` so far is slot k's last consumer.
  Status release(int32_t k, Stream& compute);
  // Forget what the slots hold (after an error: the next fill copies again).
  void forget();

 private:
  struct Slot {
    std::unique_ptr<Event> filled;
    std::unique_ptr<Event> freed;
    int32_t item = -1;
  };
  WeightRing(Device& device, uint64_t slot_bytes) : device_(device), slot_bytes_(slot_bytes) {}

  Device& device_;
  uint64_t slot_bytes_ = 0;
  DeviceBuffer block_;
  std::vector<Slot> slot_;
};

}  // namespace ferry::exec
