// ArenaAllocator: the bookkeeping of a device arena, as offsets into [0, capacity). The device reserves
// the memory once (cudaMalloc of the whole budget, or host virtual memory when emulated) and hands out
// blocks through this; no other path allocates device memory, so the budget is a hard cap.
// Best fit over a free list kept sorted by offset, neighbours merged on release. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "base/status.h"

namespace ferry::exec {

class ArenaAllocator {
 public:
  ArenaAllocator(uint64_t capacity, uint64_t align);

  // Offset of a block of at least `bytes` (rounded up to the alignment; 0 bytes -> one unit).
  // Past the budget: kOutOfMemory with the size, the tag, the use and the largest free block.
  Expected<uint64_t> allocate(uint64_t bytes, const char* tag);
  // Returns false if `offset` is not the start of a live block (the block is left alone).
  bool release(uint64_t offset);
  // True when [offset, offset + bytes) lies inside one live block.
  bool contains(uint64_t offset, uint64_t bytes) const;

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const;
  uint64_t peak() const;
  uint64_t largest_free() const;
  uint64_t blocks() const;
  // "scratch 64.0 MiB @ 0x0; kv 512.0 MiB @ ..." (for error messages and debugging).
  std::string describe() const;

 private:
  struct Block {
    uint64_t size;
    std::string tag;
  };
  uint64_t largest_free_locked() const;

  const uint64_t capacity_;
  const uint64_t align_;
  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> free_;  // offset -> size, disjoint, never adjacent
  std::map<uint64_t, Block> live_;     // offset -> block
  uint64_t used_ = 0;
  uint64_t peak_ = 0;
};

// "117.0 MiB" style size for messages.
std::string format_bytes(uint64_t bytes);

}  // namespace ferry::exec
