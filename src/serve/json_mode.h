// JSON mode and structured outputs (`response_format` "json_object" / "json_schema"): the reply is one JSON
// object (that the schema accepts). Each step the sampled token is checked against the text so far
// (JsonPrefix); a token whose bytes cannot continue it is not taken: the tokens that can are kept (the
// others' logits set to -inf) and the sampler draws again from them, which is the same as drawing from the
// model's distribution restricted to the fitting tokens (greedy: the best fitting token). The reply ends
// when the object closes.
// End-of-generation and other tokens without text never fit while the object is open.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "serve/json_prefix.h"
#include "text/tokenizer.h"

namespace ferry::serve {

// The bytes of every token of a vocabulary, made once per model and shared by its requests.
class TokenPieces {
 public:
  TokenPieces(const text::Tokenizer& tok, int32_t n_vocab);
  int32_t size() const { return static_cast<int32_t>(pieces_.size()); }
  // Empty for tokens that carry no text of their own: end-of-generation and control tokens.
  const std::string& piece(int32_t token) const { return pieces_[static_cast<size_t>(token)]; }

 private:
  std::vector<std::string> pieces_;
};

class JsonMode {
 public:
  JsonMode(std::shared_ptr<const TokenPieces> pieces, std::shared_ptr<const JsonSchema> schema)
      : pieces_(std::move(pieces)), text_(std::move(schema)) {}
  // Whether `token` may come next.
  bool fits(int32_t token) const;
  // Sets row[t] = -inf for every token t that does not fit; returns how many fit.
  int32_t mask(float* row, int32_t n_vocab) const;
  // Takes `token` into the text when it fits; false (the text unchanged) when it does not.
  bool try_accept(int32_t token);
  // The next token: drawn by `sampler` from `row`, and if it does not fit, drawn again among the tokens
  // that do; taken into the text. -1 when no token fits (the text is then unchanged).
  int32_t draw(engine::Sampler& sampler, const float* row, int32_t n_vocab);
  bool complete() const { return text_.complete(); }

 private:
  std::shared_ptr<const TokenPieces> pieces_;
  JsonPrefix text_;
  std::vector<float> fitting_;  // scratch: the row with the tokens that do not fit at -inf
};

}  // namespace ferry::serve
