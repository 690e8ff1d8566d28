// The vocabulary shared by both tokenizers: token texts, scores and attributes, the special-token ids
// and end-of-generation set, derived from tokenizer.ggml.* exactly as llama.cpp's llama_vocab does
// (defaults per model, auto-detection of EOT/FIM/EOG tokens by their text), and the special-token
// partition of input text (llama.cpp's tokenizer_st_partition).
// VocabData is the plain input: read from a GGUF, or written by hand in tests.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "text/string_index.h"
#include "text/tokenizer.h"

namespace ferry::text {

// Token attribute bits (llama.cpp's llama_token_attr).
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
};

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t { kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4,
                                 kUnused = 5, kByte = 6 };

struct VocabData {
  std::string model;                  // tokenizer.ggml.model: "gpt2" (BPE) or "llama" (SentencePiece)
  std::string pre;                    // tokenizer.ggml.pre ("" when absent)
  std::vector<std::string> tokens;    // [n_vocab]
  std::vector<float> scores;          // [n_vocab] or empty (all 0)
  std::vector<int32_t> token_types;   // [n_vocab] or empty (all normal)
  std::vector<std::string> merges;    // BPE only: "left right", rank = index
  // Ids from tokenizer.ggml.*_token_id; -1 when the key is absent.
  int64_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, sep = -1, pad = -1, mask = -1;
  int64_t fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
};

// Reads the tokenizer.ggml.* keys; missing tokens list or wrong types are errors.
Expected<VocabData> read_vocab_data(const gguf::ModelFile& file);

// Builds the tokenizer the data asks for ("gpt2" + a supported pre, or "llama").
Expected<std::unique_ptr<Tokenizer>> make_tokenizer(VocabData data);

class Vocab {
 public:
  enum class Model { kBpe, kSpm };
  // Validates and indexes `data` (moved from). Follows llama.cpp's load order so that attributes and
  // special ids come out the same.
  static Expected<std::unique_ptr<Vocab>> build(VocabData&& data, Model model);

  int32_t size() const { return static_cast<int32_t>(text_.size()); }
  Token find(std::string_view text) const;  // -1 when absent
  const std::string& text(Token id) const { return text_[id]; }
  uint32_t attr(Token id) const { return attr_[id]; }
  float score(Token id) const { return score_[id]; }
  bool valid(Token id) const { return id >= 0 && id < size(); }
  const SpecialTokens& special() const { return special_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  bool is_eog(Token id) const { return valid(id) && eog_[id]; }

  // One piece of partitioned input: a special token (token >= 0) or raw text [offset, offset+length).
  struct Fragment {
    Token token = -1;
    size_t offset = 0, length = 0;
  };
  // Splits `text` at special-token texts, longest tokens first (ties in llama.cpp's order). Control and
  // unknown tokens take part only when parse_special; user-defined tokens always do.
  std::vector<Fragment> partition(std::string_view text, bool parse_special) const;

 private:
  Vocab() = default;
  struct Ids;  // every special id llama.cpp tracks (bos, eos, eot, eom, fim_*, ...), during build()
  void detect_specials_by_text(Ids& ids);
  void build_eog_set(const Ids& ids);
  void build_special_index();
  // Special tokens whose text occurs somewhere in `text` (and may take part), in partition order.
  std::vector<Token> specials_in(std::string_view text, bool parse_special) const;

  std::vector<std::string> text_;
  std::vector<float> score_;
  std::vector<uint32_t> attr_;
  StringIndex index_;  // text -> id, over text_
  SpecialTokens special_;
  bool add_space_prefix_ = false;
  std::vector<uint8_t> eog_;  // [n_vocab] 1 for end-of-generation tokens

  // Special tokens in llama.cpp's cache order (longest text first), their rank in it, and a byte trie
  // over their texts to find which of them occur in an input in one pass.
  std::vector<Token> special_order_;
  std::vector<int32_t> special_rank_;  // [n_vocab], -1 when not special
  struct TrieNode {
    std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
    Token token = -1;                               // special token ending here
  };
  std::vector<TrieNode> trie_;
};

}  // namespace ferry::text
