// Token sampling: greedy, temperature, top-k, top-p, min-p, repetition penalty, seeded RNG.
// Order of the chain (as llama.cpp's common defaults): penalties -> top-k -> top-p -> min-p ->
// temperature -> draw. temp <= 0 means greedy (argmax, lowest id on ties).
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <vector>

namespace ferry::engine {

struct SamplerParams {
  float temp = 0.8f;
  int32_t top_k = 40;          // <= 0: off
  float top_p = 0.95f;         // >= 1: off
  float min_p = 0.05f;         // <= 0: off
  float repeat_penalty = 1.0f; // 1: off
  int32_t repeat_last_n = 64;
  uint64_t seed = 0xFE77;
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& params);
  // Picks a token from logits [n_vocab].
  int32_t sample(const float* logits, int32_t n_vocab);
  // Records a token (prompt or generated) for the repetition penalty.
  void accept(int32_t token);
  void reset();

 private:
  SamplerParams params_;
  std::mt19937_64 rng_;
  std::deque<int32_t> recent_;
  std::vector<std::pair<float, int32_t>> cand_;  // scratch, reused
};

}  // namespace ferry::engine
