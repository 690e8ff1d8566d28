// Byte-level BPE ("gpt2" tokenizer model): special-token partition, regex pre-tokenization, GPT-2 byte
// mapping, then merges by rank (lowest rank first, leftmost first among equals), as llama.cpp's
// llm_tokenizer_bpe_session. A final symbol that is not a token falls back to its single bytes.
#include <queue>

#include "text/string_index.h"
#include "text/tokenizer_impl.h"
#include "text/unicode.h"

namespace ferry::text {

namespace {

class BpeTokenizer final : public Tokenizer {
 public:
  BpeTokenizer(std::unique_ptr<Vocab> vocab, std::unique_ptr<PreTokenizer> pre, PreInfo info)
      : vocab_(std::move(vocab)), pre_(std::move(pre)), info_(info) {}

  // Merge "left right" -> rank. llama.cpp splits each merge at the first space after its first byte
  // and keeps the first rank of a repeated pair; indexing the merge texts, first one kept, is the same.
  void set_merges(std::vector<std::string> merges) {
    merges_ = std::move(merges);
    ranks_.reset(merges_.size());
    for (size_t i = 0; i < merges_.size(); ++i)
      if (merges_[i].find(' ', 1) != std::string::npos) ranks_.insert(merges_, static_cast<int32_t>(i));
  }

  std::vector<Token> encode(std::string_view text, bool add_special, bool parse_special) const override {
    std::vector<Token> out;
    const SpecialTokens& sp = vocab_->special();
    if (add_special && sp.add_bos && sp.bos >= 0) out.push_back(sp.bos);
    for (const Vocab::Fragment& f : vocab_->partition(text, parse_special)) {
      if (f.token >= 0) {
        out.push_back(f.token);
      } else {
        encode_raw(text.substr(f.offset, f.length), out);
      }
    }
    if (add_special && sp.add_eos && sp.eos >= 0) out.push_back(sp.eos);
    return out;
  }

  std::string token_to_piece(Token id, bool render_special) const override {
    if (!vocab_->valid(id)) return {};
    const uint32_t attr = vocab_->attr(id);
    const std::string& t = vocab_->text(id);
    if (attr & (kAttrUnknown | kAttrControl)) return render_special ? t : std::string();
    if (attr & kAttrUserDefined) return t;
    if (attr & kAttrNormal) return decode_bytes(t);
    if (attr & kAttrByte) return byte_piece(t);
    return {};  // unused / undefined tokens render as nothing
  }

  int32_t vocab_size() const override { return vocab_->size(); }
  const SpecialTokens& special() const override { return vocab_->special(); }
  bool is_eog(Token id) const override { return vocab_->is_eog(id); }

 private:
  // Token text (printable codepoints) -> raw bytes. A codepoint that is no byte's image is written
  // the way llama.cpp's llama_decode_text does, so pieces stay identical.
  static std::string decode_bytes(const std::string& text) {
    std::string out;
    for (uint32_t cp : decode_utf8_lenient(text)) {
      const int b = codepoint_to_byte(cp);
      if (b >= 0) {
        out += static_cast<char>(b);
      } else {
        std::string utf8;
        append_utf8(utf8, cp);
        out += "[UNK_BYTE_0x";
        static const char* hex = "0123456789abcdef";
        for (unsigned char c : utf8) {
          out += hex[c >> 4];
          out += hex[c & 15];
        }
        out += text + "]";
      }
    }
    return out;
  }

  int32_t rank(std::string_view left, std::string_view right, std::string& key) const {
    key.assign(left);
    key += ' ';
    key.append(right);
    return ranks_.find(merges_, key);
  }

  void encode_raw(std::string_view text, std::vector<Token>& out) const {
    std::string enc, key;
    for (const std::string& word : pre_->split(text)) {
      enc.clear();
      for (unsigned char c : word) append_byte_as_unicode(enc, c);
      if (info_.ignore_merges) {
        const Token id = vocab_->find(enc);
        if (id >= 0) {
          out.push_back(id);
          continue;
        }
      }
      merge_word(enc, key, out);
    }
  }

  struct Symbol {
    int32_t prev, next;
    uint32_t start, len;
  };
  struct Bigram {
    int32_t left, right, rank;
    uint32_t size;
  };
  struct Later {  // priority: lower rank first, then the leftmost pair
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
  };

  void merge_word(const std::string& w, std::string& key, std::vector<Token>& out) const {
    std::vector<Symbol> sym;
    for (uint32_t off = 0; off < w.size();) {
      const uint32_t len = static_cast<uint32_t>(
          std::min<size_t>(utf8_seq_len(static_cast<uint8_t>(w[off])), w.size() - off));
      const int32_t i = static_cast<int32_t>(sym.size());
      sym.push_back({i - 1, off + len == w.size() ? -1 : i + 1, off, len});
      off += len;
    }
    std::priority_queue<Bigram, std::vector<Bigram>, Later> queue;
    auto try_add = [&](int32_t l, int32_t r) {
      if (l < 0 || r < 0) return;
      const Symbol& a = sym[l];
      const Symbol& b = sym[r];
      const std::string_view sw(w);
      const int32_t rk = rank(sw.substr(a.start, a.len), sw.substr(b.start, b.len), key);
      if (rk >= 0) queue.push({l, r, rk, a.len + b.len});
    };
    for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) try_add(i - 1, i);
    while (!queue.empty()) {
      const Bigram bg = queue.top();
      queue.pop();
      Symbol& l = sym[bg.left];
      Symbol& r = sym[bg.right];
      // Stale entry: one side was merged since (sizes only grow, or drop to 0 when absorbed).
      if (l.len == 0 || r.len == 0 || l.len + r.len != bg.size) continue;
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = bg.left;
      try_add(l.prev, bg.left);
      try_add(bg.left, l.next);
    }
    for (const Symbol& s : sym) {
      if (s.len == 0) continue;
      const std::string_view piece = std::string_view(w).substr(s.start, s.len);
      const Token id = vocab_->find(piece);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      // Not a token: llama.cpp tries each byte of the symbol's text as a one-byte token.
      for (char c : piece) {
        const Token b = vocab_->find(std::string_view(&c, 1));
        if (b >= 0) out.push_back(b);
      }
    }
  }

  std::unique_ptr<Vocab> vocab_;
  std::unique_ptr<PreTokenizer> pre_;
  PreInfo info_;
  std::vector<std::string> merges_;  // "left right"; the index is the rank
  StringIndex ranks_;                // over merges_
};

}  // namespace

Expected<std::unique_ptr<Tokenizer>> make_bpe_tokenizer(std::unique_ptr<Vocab> vocab,
                                                        std::vector<std::string> merges, PreInfo pre) {
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<PreTokenizer> pt, PreTokenizer::create(pre.kind));
  auto tok = std::make_unique<BpeTokenizer>(std::move(vocab), std::move(pt), pre);
  tok->set_merges(std::move(merges));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace ferry::text
