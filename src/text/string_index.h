// StringIndex: an open-addressing hash index from strings to their position in a vector the caller
// keeps (token texts, BPE merges). Compared with std::unordered_map<std::string, int> it allocates
// nothing per key and probes one flat array, which keeps loading a 262k-token vocabulary fast.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::text {

class StringIndex {
 public:
  // Sizes the table for `n` keys (load factor <= 1/2). Clears it.
  void reset(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    slots_.assign(cap, 0);
    mask_ = cap - 1;
  }

  // Adds keys[id]. Returns -1 when added, or the id already holding an equal key (nothing changes).
  int32_t insert(const std::vector<std::string>& keys, int32_t id) {
    const std::string_view key = keys[static_cast<size_t>(id)];
    const uint64_t h = hash(key);
    for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
      const uint64_t s = slots_[i];
      if (s == 0) {
        slots_[i] = (h & kTagMask) | static_cast<uint64_t>(id + 1);
        return -1;
      }
      if (matches(keys, s, h, key)) return static_cast<int32_t>((s & kIdMask) - 1);
    }
  }

  int32_t find(const std::vector<std::string>& keys, std::string_view key) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash(key);
    for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
      const uint64_t s = slots_[i];
      if (s == 0) return -1;
      if (matches(keys, s, h, key)) return static_cast<int32_t>((s & kIdMask) - 1);
    }
  }

 private:
  static constexpr uint64_t kTagMask = 0xFFFFFFFF00000000ull;  // high hash bits, checked before the string
  static constexpr uint64_t kIdMask = 0x00000000FFFFFFFFull;   // id + 1 (0 = empty slot)
  static uint64_t hash(std::string_view s) { return std::hash<std::string_view>{}(s); }
  static bool matches(const std::vector<std::string>& keys, uint64_t slot, uint64_t h, std::string_view key) {
    return (slot & kTagMask) == (h & kTagMask) && keys[(slot & kIdMask) - 1] == key;
  }

  std::vector<uint64_t> slots_;
  uint64_t mask_ = 0;
};

}  // namespace ferry::text
