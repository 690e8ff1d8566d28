// TokenChooser: the next token of one request from its logits row: OpenAI's presence / frequency
// penalties over the tokens generated so far, then the engine's Sampler (penalty, top-k, top-p, min-p,
// temperature, seeded draw; greedy at temperature 0), and, when asked, the log-probabilities of the
// chosen token and the best alternatives under the model's distribution (softmax of the raw logits).
// Under a constraint (JSON mode, a grammar: serve/token_constraint.h) only tokens that continue the reply
// as it allows are taken.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "engine/sampler.h"
#include "serve/token_constraint.h"
#include "serve/request.h"

namespace ferry::serve {

class TokenChooser {
 public:
  // constraint: JSON mode's or the grammar's state for this request (null: none).
  explicit TokenChooser(const GenerationParams& params, std::unique_ptr<TokenConstraint> constraint = nullptr);

  // Records a prompt token (the Sampler's repetition penalty looks back over it).
  void accept_prompt(int32_t token) { sampler_.accept(token); }
  // Picks the next token from logits [n_vocab] and records it; fills *logprob when logprobs were asked
  // for (logprob may be null otherwise).
  int32_t choose(const float* logits, int32_t n_vocab, TokenLogprob* logprob);
  bool wants_logprobs() const { return top_logprobs_ >= 0; }
  // The constraint's text is whole and nothing may follow (the JSON object has closed; the grammar
  // admits no more).
  bool constraint_complete() const { return constraint_ != nullptr && constraint_->complete(); }
  // No token of the vocabulary could continue the constrained text (the last choice is unconstrained).
  bool constraint_failed() const { return constraint_failed_; }

 private:
  engine::Sampler sampler_;
  float presence_, frequency_;
  int32_t top_logprobs_;
  std::unordered_map<int32_t, int32_t> generated_;  // token -> times generated
  std::vector<float> adjusted_;                     // scratch: logits after the penalties
  std::unique_ptr<TokenConstraint> constraint_;
  bool constraint_failed_ = false;
  std::vector<int32_t> forced_;                     // GenerationParams::forced_tokens
  size_t n_chosen_ = 0;
};

}  // namespace ferry::serve
