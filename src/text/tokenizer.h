// Tokenizers built from a GGUF vocabulary (tokenizer.ggml.*): byte-level BPE ("gpt2" model, with the
// pre-tokenizer named by tokenizer.ggml.pre: llama3 / qwen2 / smollm / gpt2 / default) and
// SentencePiece-style ("llama" model, e.g. gemma). Token ids match llama.cpp's for the same file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace ferry::gguf {
class ModelFile;
}

namespace ferry::text {

using Token = int32_t;

struct SpecialTokens {
  Token bos = -1, eos = -1, eot = -1, pad = -1, unk = -1;
  bool add_bos = false;  // tokenizer.ggml.add_bos_token
  bool add_eos = false;  // tokenizer.ggml.add_eos_token
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Builds the right tokenizer for the file; unknown tokenizer model or pre-tokenizer is an error.
  static Expected<std::unique_ptr<Tokenizer>> from_gguf(const gguf::ModelFile& file);

  // Text -> ids. add_special: prepend BOS (and append EOS) as the vocabulary's flags say.
  // parse_special: text like "<|im_start|>" becomes the special token (as llama.cpp's parse_special).
  virtual std::vector<Token> encode(std::string_view text, bool add_special, bool parse_special) const = 0;
  // The raw bytes of one token (special/control tokens render as their text only if `render_special`).
  virtual std::string token_to_piece(Token id, bool render_special) const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual const SpecialTokens& special() const = 0;
  // True for end-of-generation tokens (eos, eot, and vocab entries marked as such).
  virtual bool is_eog(Token id) const = 0;
};

// Streams detokenized text as valid UTF-8: bytes of an incomplete multi-byte sequence are held back
// until the sequence completes (or flushed as U+FFFD at the end).
class Utf8Streamer {
 public:
  std::string push(std::string_view bytes);  // returns the complete-UTF-8 prefix now available
  std::string flush();
 private:
  std::string pending_;
};

}  // namespace ferry::text
