// --route-skew (see synth_route_skew.h): which tensors change, and how.
#include "model/synth_route_skew.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <vector>

namespace ferry::model {

namespace {

// "blk.<layer>.<rest>" -> layer and rest; -1 for tensors outside the blocks.
int32_t layer_of(const std::string& name, std::string* rest) {
  if (name.rfind("blk.", 0) != 0) {
    *rest = name;
    return -1;
  }
  const size_t dot = name.find('.', 4);
  *rest = dot == std::string::npos ? std::string() : name.substr(dot + 1);
  return static_cast<int32_t>(std::strtol(name.c_str() + 4, nullptr, 10));
}

uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The RMS of the residual stream entering layer L's FFN, per dimension, on synth files (random weights of
// unit gain): measured through llama.cpp on qwen3-30b-a3b (6 layers) and tiny-qwen3moe: 0.24, 0.57,
// 0.99, 1.32, 1.59, 1.81 for layers 0-5.
double residual_rms(int32_t layer) { return std::sqrt(0.06 + 0.75 * std::max(0.0, layer - 0.6)); }

// Expert e's bias in layer L, over n_expert experts: ranks from a permutation seeded by (seed, layer).
std::vector<float> biases(const RouteSkew& k, int32_t layer, int64_t n_expert) {
  std::vector<int64_t> rank(static_cast<size_t>(n_expert));
  std::iota(rank.begin(), rank.end(), 0);
  uint64_t state = mix(k.seed ^ (0x5EEDull << 32) ^ static_cast<uint64_t>(layer));
  for (int64_t i = n_expert - 1; i > 0; --i) {  // Fisher-Yates
    state = mix(state);
    std::swap(rank[static_cast<size_t>(i)], rank[static_cast<size_t>(state % static_cast<uint64_t>(i + 1))]);
  }
  double mean_ln = 0;
  for (int64_t r = 1; r <= n_expert; ++r) mean_ln += std::log(static_cast<double>(r));
  mean_ln /= static_cast<double>(n_expert);
  std::vector<float> b(static_cast<size_t>(n_expert));
  for (int64_t e = 0; e < n_expert; ++e)
    b[static_cast<size_t>(e)] =
        static_cast<float>(k.s * (mean_ln - std::log(static_cast<double>(rank[static_cast<size_t>(e)] + 1))));
  return b;
}

// The embedding's standard deviation (synth.cc: token_embd ~ N(0, 2 / sqrt(d))) and its constant in
// dimension 0 (3 standard deviations).
double embed_sd(int64_t d) { return 2.0 / std::sqrt(static_cast<double>(d)); }
double channel(int64_t d) { return 3.0 * embed_sd(d); }

}  // namespace

int64_t route_feature_dims(int64_t n_embd) { return std::min<int64_t>(64, n_embd / 8); }

void route_skew_shape_rows(const RouteSkew& k, const std::string& name, int64_t ne0, int64_t n_rows, int64_t r0,
                           int64_t r1, float* v) {
  if (!k.on) return;
  std::string rest;
  const int32_t layer = layer_of(name, &rest);
  const int64_t d = k.n_embd, np = route_feature_dims(d);
  if (name == "token_embd.weight") {
    for (int64_t r = r0; r < r1; ++r) v[(r - r0) * ne0] = static_cast<float>(channel(d));
  } else if (rest == "ffn_gate_exps.weight" || rest == "ffn_up_exps.weight") {
    for (int64_t r = r0; r < r1; ++r) std::fill_n(v + (r - r0) * ne0, np + 1, 0.f);
  } else if (rest == "attn_output.bias" || rest == "ffn_down_exps.bias") {  // gpt-oss: no writes there either
    for (int64_t r = r0; r < r1; ++r) std::fill_n(v + (r - r0) * ne0, np + 1, 0.f);
  } else if (rest == "ffn_gate_inp.bias") {  // gpt-oss's router bias: popularity is the bias channel's
    std::fill_n(v, (r1 - r0) * ne0, 0.f);
  } else if ((rest == "ffn_norm.weight" || rest == "post_attention_norm.weight") && r0 == 0) {
    // (gpt-oss names the norm before its experts post_attention_norm; only MoE presets get here)
    const double rms = residual_rms(layer);
    v[0] = static_cast<float>(rms / channel(d));  // the channel reaches the router as ~1
    for (int64_t i = 1; i <= np; ++i) v[i] = static_cast<float>(rms / embed_sd(d));  // features as ~N(0, 1)
  } else if (rest == "ffn_gate_inp.weight") {
    // Row e: the bias, then the random weights of the features rescaled to a unit-spread logit (they were
    // drawn with standard deviation 1 / sqrt(d)), then zeros.
    const std::vector<float> b = biases(k, layer, n_rows);
    const float gain = static_cast<float>(std::sqrt(static_cast<double>(d) / static_cast<double>(np)));
    for (int64_t r = r0; r < r1; ++r) {
      float* row = v + (r - r0) * ne0;
      row[0] = b[static_cast<size_t>(r)];
      for (int64_t i = 1; i <= np; ++i) row[i] *= gain;
      std::fill(row + np + 1, row + ne0, 0.f);
    }
  }
}

bool route_skew_zero_row(const RouteSkew& k, const std::string& name, int64_t row) {
  if (!k.on) return false;
  std::string rest;
  (void)layer_of(name, &rest);
  const int64_t np = route_feature_dims(k.n_embd);
  if (rest == "attn_output.weight") return row <= np;
  if (rest == "ffn_down_exps.weight") return row % k.n_embd <= np;
  return false;
}

}  // namespace ferry::model
