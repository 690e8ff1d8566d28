// Pre-tokenizers of byte-level BPE vocabularies: the regex splits llama.cpp applies before BPE, chosen
// by tokenizer.ggml.pre. Each kind is a list of PCRE2 patterns applied in turn: every pattern splits
// every fragment left by the previous one into its matches and the unmatched gaps between them.
// The patterns are llama.cpp's, with \p{L}, \p{N}, \p{P} and \s widened to llama.cpp's own Unicode
// tables (see pretokenizer.cc), so the words are the same as llama.cpp's on every input.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace ferry::text {

enum class PreKind { kDefault, kGpt2, kLlama3, kQwen2, kSmollm, kGpt4o };
const char* pre_kind_name(PreKind kind);

// What a tokenizer.ggml.pre name means (llama.cpp's llama_vocab::impl::load): the regex family and
// the flags the name switches on.
struct PreInfo {
  PreKind kind = PreKind::kDefault;
  bool ignore_merges = false;  // a word that is itself a token skips BPE (llama3 family)
  bool add_bos = false;        // default of add_bos before tokenizer.ggml.add_bos_token overrides it
};
// nullopt for names we do not support. An empty name means "default", as in llama.cpp.
std::optional<PreInfo> pre_info_from_name(std::string_view name);

class PreTokenizer {
 public:
  static Expected<std::unique_ptr<PreTokenizer>> create(PreKind kind);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Splits `text` into words (UTF-8). Ill-formed UTF-8 is first decoded as llama.cpp does (bad bytes
  // become U+FFFD), so the words are always well-formed except for encoded surrogates.
  std::vector<std::string> split(std::string_view text) const;

  PreKind kind() const { return kind_; }

 private:
  PreTokenizer() = default;
  struct Regex;
  PreKind kind_ = PreKind::kDefault;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace ferry::text
