// Constrained generation: JSON mode and structured outputs (`response_format` "json_object" /
// "json_schema": the reply is one JSON object that the schema accepts, serve/json_prefix.h) and grammars
// (the `grammar` field, GBNF: serve/grammar_prefix.h) and forced tool calls (serve/tool_call_prefix.h). Each step the sampled token is checked against the
// text so far; a token whose bytes cannot continue it is not taken: the tokens that can are kept (the
// others' logits set to -inf) and the sampler draws again from them, which is the same as drawing from the
// model's distribution restricted to the fitting tokens (greedy: the best fitting token).
// End-of-generation tokens fit only where the text may end (a grammar that accepts it; never in JSON mode,
// whose reply ends when the object closes); other tokens without text never fit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "serve/grammar_prefix.h"
#include "serve/json_prefix.h"
#include "serve/tool_call_prefix.h"
#include "text/tokenizer.h"

namespace ferry::serve {

// The bytes of every token of a vocabulary, made once per model and shared by its requests.
class TokenPieces {
 public:
  // shown: special tokens that carry their text here (the reply shows it: Request's shown_special).
  TokenPieces(const text::Tokenizer& tok, int32_t n_vocab, const std::vector<int32_t>& shown = {});
  int32_t size() const { return static_cast<int32_t>(pieces_.size()); }
  // Empty for tokens that carry no text of their own: end-of-generation and control tokens.
  const std::string& piece(int32_t token) const { return pieces_[static_cast<size_t>(token)]; }
  bool eog(int32_t token) const { return eog_[static_cast<size_t>(token)] != 0; }

 private:
  std::vector<std::string> pieces_;
  std::vector<uint8_t> eog_;
};

// The reply's constraint, whichever automaton checks it.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Whether `token` may come next.
  virtual bool fits(int32_t token) const = 0;
  // Sets row[t] = -inf for every token t that does not fit; returns how many fit.
  virtual int32_t mask(float* row, int32_t n_vocab) const = 0;
  // Takes `token` into the text when it fits; false (the text unchanged) when it does not.
  virtual bool try_accept(int32_t token) = 0;
  // The text is whole and nothing may follow it: the reply ends.
  virtual bool complete() const = 0;
  // The next token: drawn by `sampler` from `row`, and if it does not fit, drawn again among the tokens
  // that do; taken into the text. -1 when no token fits (the text is then unchanged).
  int32_t draw(engine::Sampler& sampler, const float* row, int32_t n_vocab);

 private:
  std::vector<float> fitting_;  // scratch: the row with the tokens that do not fit at -inf
};

// A TokenConstraint over a byte automaton `Prefix` (JsonPrefix, GrammarPrefix): copyable, with
// feed(uint8_t) / feed(string_view), can_end() and complete().
template <class Prefix>
class PrefixConstraint final : public TokenConstraint {
 public:
  PrefixConstraint(std::shared_ptr<const TokenPieces> pieces, Prefix start)
      : pieces_(std::move(pieces)), text_(std::move(start)) {}
  bool fits(int32_t token) const override;
  int32_t mask(float* row, int32_t n_vocab) const override;
  bool try_accept(int32_t token) override;
  bool complete() const override { return text_.complete(); }

 private:
  std::shared_ptr<const TokenPieces> pieces_;
  Prefix text_;
};

extern template class PrefixConstraint<JsonPrefix>;
extern template class PrefixConstraint<GrammarPrefix>;
extern template class PrefixConstraint<ToolCallPrefix>;

inline std::unique_ptr<TokenConstraint> json_constraint(std::shared_ptr<const TokenPieces> pieces,
                                                        std::shared_ptr<const JsonSchema> schema) {
  return std::make_unique<PrefixConstraint<JsonPrefix>>(std::move(pieces), JsonPrefix(std::move(schema)));
}
inline std::unique_ptr<TokenConstraint> grammar_constraint(std::shared_ptr<const TokenPieces> pieces,
                                                           std::shared_ptr<const Grammar> grammar) {
  return std::make_unique<PrefixConstraint<GrammarPrefix>>(std::move(pieces), GrammarPrefix(std::move(grammar)));
}

inline std::unique_ptr<TokenConstraint> tool_call_constraint(std::shared_ptr<const TokenPieces> pieces,
                                                             std::shared_ptr<const ToolCallShape> shape) {
  return std::make_unique<PrefixConstraint<ToolCallPrefix>>(std::move(pieces), ToolCallPrefix(std::move(shape)));
}

}  // namespace ferry::serve
