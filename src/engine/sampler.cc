// Token sampling with llama.cpp's semantics (its common sampler chain):
// repetition penalty -> top-k -> top-p -> min-p -> temperature -> draw, each filter keeping at least one
// candidate. temp <= 0 is greedy: argmax after the penalty, lowest token id on ties.
// The draw uses our own uniform from a seeded mt19937_64, so runs are reproducible for a seed (they do
// not reproduce llama.cpp's random stream, which nothing relies on).
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/status.h"

namespace ferry::engine {

namespace {

// Order of candidates: higher logit first, lower id first on equal logits (deterministic ties).
bool better(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  if (a.first != b.first) return a.first > b.first;
  return a.second < b.second;
}

}  // namespace

Sampler::Sampler(const SamplerParams& params) : params_(params), rng_(params.seed) {}

void Sampler::reset() {
  recent_.clear();
  rng_.seed(params_.seed);
}

// repeat_last_n: 0 keeps no history (penalty off), < 0 keeps all of it, else the last N tokens.
void Sampler::accept(int32_t token) {
  if (params_.repeat_last_n == 0) return;
  recent_.push_back(token);
  if (params_.repeat_last_n > 0)
    while (static_cast<int32_t>(recent_.size()) > params_.repeat_last_n) recent_.pop_front();
}

int32_t Sampler::sample(const float* logits, int32_t n_vocab) {
  FERRY_ASSERT(n_vocab > 0);
  cand_.resize(static_cast<size_t>(n_vocab));
  for (int32_t i = 0; i < n_vocab; ++i) cand_[i] = {logits[i], i};

  // Repetition penalty, once per distinct recent token (llama.cpp: a positive logit is divided by the
  // penalty, a negative one multiplied, so both move towards "less likely").
  if (params_.repeat_penalty != 1.0f && !recent_.empty()) {
    std::vector<int32_t> seen(recent_.begin(), recent_.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int32_t t : seen) {
      if (t < 0 || t >= n_vocab) continue;
      float& l = cand_[t].first;
      l = l <= 0.0f ? l * params_.repeat_penalty : l / params_.repeat_penalty;
    }
  }

  if (params_.temp <= 0.0f) {
    // max_element returns the first maximum: the lowest id among equal logits.
    auto it = std::max_element(cand_.begin(), cand_.end(),
                               [](const auto& a, const auto& b) { return a.first < b.first; });
    return it->second;
  }

  // Top-k, then keep the survivors sorted (top-p and min-p walk them in order).
  size_t n = cand_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n) {
    n = static_cast<size_t>(params_.top_k);
    std::partial_sort(cand_.begin(), cand_.begin() + n, cand_.end(), better);
    cand_.resize(n);
  } else {
    std::sort(cand_.begin(), cand_.end(), better);
  }

  // Top-p: the shortest prefix whose probability mass reaches p (softmax at temperature 1, as
  // llama.cpp applies temperature after the filters).
  if (params_.top_p < 1.0f && n > 1) {
    const float max_l = cand_[0].first;
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(cand_[i].first - max_l));
    double cum = 0;
    for (size_t i = 0; i < n; ++i) {
      cum += std::exp(static_cast<double>(cand_[i].first - max_l)) / sum;
      if (cum >= params_.top_p) {
        n = i + 1;
        break;
      }
    }
    cand_.resize(n);
  }

  // Min-p: keep tokens with p >= min_p * p_max, i.e. logit >= max_logit + log(min_p).
  if (params_.min_p > 0.0f && n > 1) {
    const float threshold = cand_[0].first + std::log(params_.min_p);
    size_t keep = 1;
    while (keep < n && cand_[keep].first >= threshold) ++keep;
    n = keep;
    cand_.resize(n);
  }

  // Temperature, then draw from the softmax; the weights overwrite the (no longer needed) logits.
  const double max_l = cand_[0].first;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    cand_[i].first = static_cast<float>(std::exp((cand_[i].first - max_l) / params_.temp));
    sum += cand_[i].first;
  }
  if (!(sum > 0) || !std::isfinite(sum)) return cand_[0].second;  // all -inf: nothing to weigh
  // 53 random bits -> u in [0, 1).
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * sum;
  double cum = 0;
  for (size_t i = 0; i < n; ++i) {
    cum += cand_[i].first;
    if (u < cum) return cand_[i].second;
  }
  return cand_[n - 1].second;  // rounding: u landed on the very end of the mass
}

}  // namespace ferry::engine
