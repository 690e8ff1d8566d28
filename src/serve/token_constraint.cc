// TokenPieces, TokenConstraint::draw and PrefixConstraint (token_constraint.h).
#include "serve/token_constraint.h"

#include <algorithm>
#include <limits>

#include "base/status.h"

namespace ferry::serve {

TokenPieces::TokenPieces(const text::Tokenizer& tok, int32_t n_vocab, const std::vector<int32_t>& shown)
    : pieces_(static_cast<size_t>(n_vocab)), eog_(static_cast<size_t>(n_vocab), 0) {
  const int32_t n = std::min(n_vocab, tok.vocab_size());
  for (int32_t t = 0; t < n; ++t) {
    if (tok.is_eog(t))
      eog_[static_cast<size_t>(t)] = 1;
    else
      pieces_[static_cast<size_t>(t)] = tok.token_to_piece(t, std::find(shown.begin(), shown.end(), t) != shown.end());
  }
}

int32_t TokenConstraint::draw(engine::Sampler& sampler, const float* row, int32_t n_vocab) {
  const int32_t token = sampler.sample(row, n_vocab);
  if (try_accept(token)) return token;
  fitting_.assign(row, row + n_vocab);
  if (mask(fitting_.data(), n_vocab) == 0) return -1;
  const int32_t fitting = sampler.sample(fitting_.data(), n_vocab);
  const bool ok = try_accept(fitting);
  FERRY_ASSERT_MSG(ok, "TokenConstraint::draw: the sampler drew a masked token");
  return fitting;
}

template <class Prefix>
bool PrefixConstraint<Prefix>::fits(int32_t token) const {
  if (token < 0 || token >= pieces_->size()) return false;
  const std::string& p = pieces_->piece(token);
  if (p.empty()) return pieces_->eog(token) && text_.can_end();
  Prefix trial = text_;
  return trial.feed(p);
}

template <class Prefix>
bool PrefixConstraint<Prefix>::try_accept(int32_t token) {
  if (token < 0 || token >= pieces_->size()) return false;
  const std::string& p = pieces_->piece(token);
  if (p.empty()) return pieces_->eog(token) && text_.can_end();  // the reply ends here; the text stays
  Prefix trial = text_;
  if (!trial.feed(p)) return false;
  text_ = std::move(trial);
  return true;
}

template <class Prefix>
int32_t PrefixConstraint<Prefix>::mask(float* row, int32_t n_vocab) const {
  // Which bytes may come next, tried once each: a token whose first byte may not is out without a trial
  // of its own (most tokens, where the text expects structure), and a one-byte token is decided by it.
  bool first_fits[256];
  for (int b = 0; b < 256; ++b) {
    Prefix trial = text_;
    first_fits[b] = trial.feed(static_cast<uint8_t>(b));
  }
  const bool may_end = text_.can_end();
  int32_t n_fit = 0;
  for (int32_t t = 0; t < n_vocab; ++t) {
    bool fit = false;
    if (t < pieces_->size()) {
      const std::string& p = pieces_->piece(t);
      fit = p.empty() ? may_end && pieces_->eog(t)
                      : first_fits[static_cast<uint8_t>(p[0])] && (p.size() == 1 || fits(t));
    }
    if (fit)
      ++n_fit;
    else
      row[t] = -std::numeric_limits<float>::infinity();
  }
  return n_fit;
}

template class PrefixConstraint<JsonPrefix>;
template class PrefixConstraint<GrammarPrefix>;
template class PrefixConstraint<ToolCallPrefix>;

}  // namespace ferry::serve
