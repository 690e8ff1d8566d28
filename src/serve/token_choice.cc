// TokenChooser (token_choice.h).
#include "serve/token_choice.h"

#include <algorithm>
#include <cmath>

namespace ferry::serve {

TokenChooser::TokenChooser(const GenerationParams& params, std::unique_ptr<TokenConstraint> constraint)
    : sampler_(params.sampling),
      presence_(params.presence_penalty),
      frequency_(params.frequency_penalty),
      top_logprobs_(params.top_logprobs),
      constraint_(std::move(constraint)),
      forced_(params.forced_tokens) {}

int32_t TokenChooser::choose(const float* logits, int32_t n_vocab, TokenLogprob* logprob) {
  const float* row = logits;
  if ((presence_ != 0.f || frequency_ != 0.f) && !generated_.empty()) {
    adjusted_.assign(logits, logits + n_vocab);
    for (const auto& [token, count] : generated_)
      if (token >= 0 && token < n_vocab) adjusted_[token] -= presence_ + frequency_ * static_cast<float>(count);
    row = adjusted_.data();
  }
  const bool forced = n_chosen_ < forced_.size() && forced_[n_chosen_] >= 0 && forced_[n_chosen_] < n_vocab;
  const bool constrained = constraint_ != nullptr && !constraint_failed_;
  int32_t token = -1;
  if (forced) {
    token = forced_[n_chosen_];
    if (constrained && !constraint_->try_accept(token)) constraint_failed_ = true;
  } else if (constrained) {
    token = constraint_->draw(sampler_, row, n_vocab);
    if (token < 0) {
      constraint_failed_ = true;  // nothing fits
      token = sampler_.sample(row, n_vocab);
    }
  } else {
    token = sampler_.sample(row, n_vocab);
  }
  ++n_chosen_;
  sampler_.accept(token);
  ++generated_[token];

  if (top_logprobs_ >= 0 && logprob != nullptr) {
    // log softmax of the model's logits: logit - max - log(sum exp(logit - max)).
    const float mx = *std::max_element(logits, logits + n_vocab);
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
    const float log_z = mx + static_cast<float>(std::log(sum));
    logprob->token = token;
    logprob->logprob = logits[token] - log_z;
    logprob->top.clear();
    if (top_logprobs_ > 0) {
      std::vector<int32_t> ids(static_cast<size_t>(n_vocab));
      for (int32_t i = 0; i < n_vocab; ++i) ids[i] = i;
      const int32_t k = std::min(top_logprobs_, n_vocab);
      std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [logits](int32_t a, int32_t b) {
        return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
      });
      for (int32_t i = 0; i < k; ++i) logprob->top.emplace_back(ids[i], logits[ids[i]] - log_z);
    }
  }
  return token;
}

}  // namespace ferry::serve
