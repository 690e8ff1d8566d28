// ArenaAllocator: best-fit offsets inside a reserved range (see device_arena.h).
#include "exec/device_arena.h"

#include <cstdio>

namespace ferry::exec {

std::string format_bytes(uint64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (bytes >= (1ull << 30)) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", b / (1ull << 30));
  } else if (bytes >= (1ull << 20)) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", b / (1ull << 20));
  } else if (bytes >= (1ull << 10)) {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", b / (1ull << 10));
  } else {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  }
  return buf;
}

ArenaAllocator::ArenaAllocator(uint64_t capacity, uint64_t align)
    : capacity_(capacity / align * align), align_(align) {
  FERRY_ASSERT(align > 0 && (align & (align - 1)) == 0);
  if (capacity_ > 0) free_[0] = capacity_;
}

Expected<uint64_t> ArenaAllocator::allocate(uint64_t bytes, const char* tag) {
  const char* name = tag ? tag : "";
  if (bytes > capacity_) {
    std::lock_guard<std::mutex> lock(mu_);
    return make_error(ErrorCode::kOutOfMemory,
                      "device arena: cannot allocate %s for '%s': larger than the whole budget of %s "
                      "(%s in use)",
                      format_bytes(bytes).c_str(), name, format_bytes(capacity_).c_str(),
                      format_bytes(used_).c_str());
  }
  const uint64_t need = bytes == 0 ? align_ : (bytes + align_ - 1) / align_ * align_;
  std::lock_guard<std::mutex> lock(mu_);
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second >= need && (best == free_.end() || it->second < best->second)) best = it;
  }
  if (best == free_.end()) {
    return make_error(ErrorCode::kOutOfMemory,
                      "device arena: cannot allocate %s for '%s': %s of the %s budget in use in %zu "
                      "blocks, %s free, largest free block %s",
                      format_bytes(bytes).c_str(), name, format_bytes(used_).c_str(),
                      format_bytes(capacity_).c_str(), live_.size(), format_bytes(capacity_ - used_).c_str(),
                      format_bytes(largest_free_locked()).c_str());
  }
  const uint64_t offset = best->first;
  const uint64_t rest = best->second - need;
  free_.erase(best);
  if (rest > 0) free_[offset + need] = rest;
  live_[offset] = Block{need, name};
  used_ += need;
  if (used_ > peak_) peak_ = used_;
  return offset;
}

bool ArenaAllocator::release(uint64_t offset) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(offset);
  if (it == live_.end()) return false;
  uint64_t start = offset;
  uint64_t size = it->second.size;
  used_ -= size;
  live_.erase(it);
  // Merge with the free neighbours.
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = size;
  return true;
}

bool ArenaAllocator::contains(uint64_t offset, uint64_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.upper_bound(offset);
  if (it == live_.begin()) return false;
  --it;
  return offset >= it->first && offset + bytes <= it->first + it->second.size && offset + bytes >= offset;
}

uint64_t ArenaAllocator::used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

uint64_t ArenaAllocator::peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

uint64_t ArenaAllocator::largest_free() const {
  std::lock_guard<std::mutex> lock(mu_);
  return largest_free_locked();
}

uint64_t ArenaAllocator::largest_free_locked() const {
  uint64_t best = 0;
  for (const auto& [off, size] : free_) best = size > best ? size : best;
  return best;
}

uint64_t ArenaAllocator::blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_.size();
}

std::string ArenaAllocator::describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  char buf[96];
  for (const auto& [off, b] : live_) {
    std::snprintf(buf, sizeof(buf), " @ %#llx", static_cast<unsigned long long>(off));
    if (!out.empty()) out += "; ";
    out += b.tag + " " + format_bytes(b.size) + buf;
  }
  return out;
}

}  // namespace ferry::exec
