// Expert routing of mixture-of-experts layers, as llama.cpp's build_moe_ffn computes it on the CPU
// (ggml's soft_max, argsort top-k, get_rows, sum_rows, clamp and div), for one token's router logits.
// Host code, header-only: the Ops defaults, RefOps, CpuOps and the tests share it, so every backend
// picks the same experts from the same logits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace ferry::kernels {

// How a router turns its logits into the mixing weights of the experts it picks.
enum class MoeGating : uint8_t {
  kSoftmax,          // p = softmax(logits) over every expert; the n_used largest p; w = those p (qwen3moe, mixtral)
  kSoftmaxSelected,  // the n_used largest logits; w = softmax over those n_used logits (gpt-oss)
};

struct MoeRoute {
  int32_t n_used = 0;       // experts per token (expert_used_count)
  MoeGating gating = MoeGating::kSoftmax;
  bool normalize = false;   // w /= max(sum(w), kMoeMinWeightSum) after picking (qwen3moe, mixtral)
};

// The smallest weight sum the normalisation divides by: ggml_clamp to the smallest normal F16.
inline constexpr float kMoeMinWeightSum = 6.103515625e-5f;

// ggml_soft_max of one row: e_i = expf(x_i - max) in float, summed in double; y_i = e_i * float(1 / sum).
inline void softmax_row_ggml(const float* x, int64_t n, float* y) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    y[i] = std::exp(x[i] - mx);
    sum += static_cast<double>(y[i]);
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}

// ids[0..k): the indices of the k largest values of v, largest first; equal values: lower index first.
inline void top_k_desc(const float* v, int32_t n, int32_t k, int32_t* ids) {
  for (int32_t j = 0; j < k; ++j) {
    int32_t best = -1;
    for (int32_t e = 0; e < n; ++e) {
      bool taken = false;
      for (int32_t i = 0; i < j && !taken; ++i) taken = ids[i] == e;
      if (!taken && (best < 0 || v[e] > v[best])) best = e;
    }
    ids[j] = best;
  }
}

// One token: logits [n_expert] -> ids [r.n_used] (highest weight first) and weights [r.n_used].
// scratch: n_expert floats.
inline void route_token(const float* logits, int32_t n_expert, const MoeRoute& r, float* scratch, int32_t* ids,
                        float* w) {
  const int32_t k = r.n_used;
  if (r.gating == MoeGating::kSoftmax) {
    softmax_row_ggml(logits, n_expert, scratch);
    top_k_desc(scratch, n_expert, k, ids);
    for (int32_t j = 0; j < k; ++j) w[j] = scratch[ids[j]];
  } else {
    top_k_desc(logits, n_expert, k, ids);
    for (int32_t j = 0; j < k; ++j) scratch[j] = logits[ids[j]];
    softmax_row_ggml(scratch, k, w);
  }
  if (r.normalize) {
    double sum = 0.0;  // ggml_sum_rows
    for (int32_t j = 0; j < k; ++j) sum += static_cast<double>(w[j]);
    const float s = std::max(static_cast<float>(sum), kMoeMinWeightSum);
    for (int32_t j = 0; j < k; ++j) w[j] = w[j] / s;
  }
}

}  // namespace ferry::kernels
