// Deterministic random numbers for ferry synth: the same sequence on every platform (internal to
// src/model: synth.cc, synth_vocab.cc).
#pragma once

#include <cstdint>
#include <string_view>

namespace ferry::model::synth_detail {

inline uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

// xoshiro256**: fast, and the same sequence on every platform.
struct Rng {
  uint64_t s[4];
  explicit Rng(uint64_t seed) {
    for (auto& x : s) x = splitmix64(seed);
  }
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t next() {
    const uint64_t r = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
  }
  // Unit-variance approximately normal value: the sum of four 16-bit uniforms (Irwin-Hall, bounded at
  // +-3.46). Integer arithmetic plus one multiply: no libm, so identical bytes on every machine.
  float normal() {
    const uint64_t r = next();
    const int64_t sum = static_cast<int64_t>((r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48));
    return static_cast<float>(sum - 131070) * (1.0f / 37837.23f);  // mean 2*65535, sd 65536/sqrt(3)
  }
  uint64_t below(uint64_t n) { return next() % n; }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
};

}  // namespace ferry::model::synth_detail
