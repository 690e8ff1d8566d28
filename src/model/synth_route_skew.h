// Router weights of `ferry synth`'s mixture-of-experts presets, with `--route-skew S` for skewed expert
// popularity. Random routers reading the whole hidden state do not route uniformly: attention mixes the
// context into every token, so the normed hidden states share a large common part (measured on
// qwen3-30b-a3b-shaped files: 24 % of their energy at layer 0, 82 % at layer 5) and its projection picks
// the same few experts for every token (the 10 % most popular experts took 43-88 % of the picks). So the
// presets' routers read reserved residual dimensions instead:
//   - dimensions 1..n_p (n_p = min(64, d / 8)) hold the token embedding's own random values: the router's
//     random part reads only them, so routing is a random function of the token (the same token always
//     picks the same experts, as trained routers largely do), near-uniform over the experts;
//   - dimension 0 holds a constant `c` in every embedding: router row e's weight there is expert e's
//     logit bias b_r = S * (mean ln r' - ln r) for its popularity rank r (a random order per layer), so
//     an expert's share of the picks falls off like a Zipf law whose exponent grows with S.
// No block writes these dimensions (rows 0..n_p of attn_output and of every expert's down projection are
// zero) and no expert reads them (columns 0..n_p of the gate / up experts are zero); attention reads them
// like any other. The FFN norm's weights there bring them to unit scale at the router's input (dividing by
// the residual's RMS at that layer as measured on these files); an error in that estimate changes the
// router's softmax temperature, not which experts it picks (both parts scale alike). Locality from token
// to token is what repeated tokens give; it is not shaped otherwise.
#pragma once

#include <cstdint>
#include <string>

namespace ferry::model {

struct RouteSkew {
  bool on = false;     // the preset has experts
  double s = 0;        // the bias scale S (0: near-uniform)
  int64_t n_embd = 0;  // d
  uint64_t seed = 0;   // the file's seed: popularity ranks differ per seed and layer
};

// Reserved residual dimensions of the router's token features (1..n), after the bias channel (0).
int64_t route_feature_dims(int64_t n_embd);

// Adjusts the F32 values of rows [r0, r1) (each ne0 long) of tensor `name` (n_rows rows in all) before
// quantization: token embeddings, the experts' gate / up, the FFN norm and the router (gpt-oss: also the
// attention output's and the experts' down biases, zero on the reserved dimensions, and the router's bias,
// zero). Other tensors are left as they are.
void route_skew_shape_rows(const RouteSkew& skew, const std::string& name, int64_t ne0, int64_t n_rows, int64_t r0,
                           int64_t r1, float* values);

// True for the rows written as zeros (of any type): rows 0..n_p of attn_output and of every expert's down.
bool route_skew_zero_row(const RouteSkew& skew, const std::string& name, int64_t row);

}  // namespace ferry::model
