// WeightRing implementation: one arena block cut into slots, two events per slot.
#include "exec/weight_ring.h"

namespace ferry::exec {

Expected<std::unique_ptr<WeightRing>> WeightRing::create(Device& device, int32_t slots, uint64_t slot_bytes) {
  if (slots < 2) return make_error(ErrorCode::kInvalidArgument, "weight ring needs at least 2 slots (got %d)", slots);
  if (slot_bytes == 0) return make_error(ErrorCode::kInvalidArgument, "weight ring slots must not be empty");
  std::unique_ptr<WeightRing> r(new WeightRing(device, slot_bytes));
  FERRY_ASSIGN_OR_RETURN(r->block_, device.allocate(slot_bytes * static_cast<uint64_t>(slots), "ring"));
  r->slot_.resize(slots);
  for (Slot& s : r->slot_) {
    // No timing on these: they order work; the runner times copies with its own events.
    FERRY_ASSIGN_OR_RETURN(s.filled, device.create_event(false));
    FERRY_ASSIGN_OR_RETURN(s.freed, device.create_event(false));
  }
  return r;
}

WeightRing::~WeightRing() {
  slot_.clear();
  device_.release(&block_);
}

void* WeightRing::slot_ptr(int32_t k) const {
  FERRY_ASSERT(k >= 0 && k < slots());
  return static_cast<char*>(block_.ptr) + static_cast<uint64_t>(k) * slot_bytes_;
}

Status WeightRing::fill(int32_t k, int32_t item, const void* src, uint64_t bytes, Stream& copy, Event* t0, Event* t1,
                        bool* copied) {
  const Piece one{0, src, bytes};
  return fill(k, item, std::span<const Piece>(&one, 1), copy, t0, t1, copied);
}

Status WeightRing::fill(int32_t k, int32_t item, std::span<const Piece> pieces, Stream& copy, Event* t0, Event* t1,
                        bool* copied) {
  FERRY_ASSERT(k >= 0 && k < slots());
  if (copied) *copied = false;
  Slot& s = slot_[k];
  if (s.item == item) return Status::ok();
  for (const Piece& p : pieces)
    if (p.offset > slot_bytes_ || p.bytes > slot_bytes_ - p.offset)
      return make_error(ErrorCode::kInternal,
                        "weight ring: piece [%llu, +%llu) of item %d does not fit a slot of %llu bytes",
                        static_cast<unsigned long long>(p.offset), static_cast<unsigned long long>(p.bytes), item,
                        static_cast<unsigned long long>(slot_bytes_));
  s.item = -1;  // until the copy is enqueued, the slot holds nothing we can name
  FERRY_RETURN_IF_ERROR(device_.wait(copy, *s.freed));
  if (t0) FERRY_RETURN_IF_ERROR(device_.record(*t0, copy));
  for (const Piece& p : pieces)
    FERRY_RETURN_IF_ERROR(device_.copy_h2d(static_cast<char*>(slot_ptr(k)) + p.offset, p.src, p.bytes, copy));
  if (t1) FERRY_RETURN_IF_ERROR(device_.record(*t1, copy));
  FERRY_RETURN_IF_ERROR(device_.record(*s.filled, copy));
  s.item = item;
  if (copied) *copied = true;
  return Status::ok();
}

Status WeightRing::acquire(int32_t k, Stream& compute) {
  FERRY_ASSERT(k >= 0 && k < slots());
  return device_.wait(compute, *slot_[k].filled);
}

Status WeightRing::release(int32_t k, Stream& compute) {
  FERRY_ASSERT(k >= 0 && k < slots());
  return device_.record(*slot_[k].freed, compute);
}

void WeightRing::forget() {
  for (Slot& s : slot_) s.item = -1;
}

}  // namespace ferry::exec
