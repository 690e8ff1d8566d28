// TokenChooser: the next token of one request from its logits row: OpenAI's presence / frequency
// penalties over the tokens generated so far, then the engine's Sampler (penalty, top-k, top-p, min-p,
// temperature, seeded draw; greedy at temperature 0), and, when asked, the log-probabilities of the
// chosen token and the best alternatives under the model's distribution (softmax of the raw logits).
// In JSON mode (serve/json_mode.h) only tokens that continue the reply's JSON object are taken.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "engine/sampler.h"
#include "serve/json_mode.h"
#include "serve/request.h"

namespace ferry::serve {

class TokenChooser {
 public:
  // json: JSON mode's state for this request (null: no constraint).
  explicit TokenChooser(const GenerationParams& params, std::unique_ptr<JsonMode> json = nullptr);

  // Records a prompt token (the Sampler's repetition penalty looks back over it).
  void accept_prompt(int32_t token) { sampler_.accept(token); }
  // Picks the next token from logits [n_vocab] and records it; fills *logprob when logprobs were asked
  // for (logprob may be null otherwise).
  int32_t choose(const float* logits, int32_t n_vocab, TokenLogprob* logprob);
  bool wants_logprobs() const { return top_logprobs_ >= 0; }
  // JSON mode: the object has closed (the reply is complete).
  bool json_complete() const { return json_ != nullptr && json_->complete(); }
  // JSON mode: no token of the vocabulary could continue the object (the last choice is unconstrained).
  bool json_failed() const { return json_failed_; }

 private:
  engine::Sampler sampler_;
  float presence_, frequency_;
  int32_t top_logprobs_;
  std::unordered_map<int32_t, int32_t> generated_;  // token -> times generated
  std::vector<float> adjusted_;                     // scratch: logits after the penalties
  std::unique_ptr<JsonMode> json_;
  bool json_failed_ = false;
  std::vector<int32_t> forced_;                     // GenerationParams::forced_tokens
  size_t n_chosen_ = 0;
};

}  // namespace ferry::serve
