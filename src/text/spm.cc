// SentencePiece-style tokenizer ("llama" tokenizer model, e.g. gemma), as llama.cpp's
// LLAMA_VOCAB_TYPE_SPM: spaces become U+2581, then adjacent symbols merge greedily by the score of the
// merged token (highest first, leftmost among equals); symbols that are not tokens fall back to byte
// tokens <0xXX>. With add_space_prefix, text that starts the input or follows a special token gets a
// leading space.
#include <queue>

#include "text/tokenizer_impl.h"
#include "text/unicode.h"

namespace ferry::text {

namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(std::unique_ptr<Vocab> vocab) : vocab_(std::move(vocab)) {
    for (int b = 0; b < 256; ++b) byte_token_[b] = lookup_byte_token(static_cast<uint8_t>(b));
  }

  std::vector<Token> encode(std::string_view text, bool add_special, bool parse_special) const override {
    std::vector<Token> out;
    const SpecialTokens& sp = vocab_->special();
    bool prev_special = true;  // the start of the input counts as "after a special token"
    if (add_special && sp.add_bos && sp.bos >= 0) out.push_back(sp.bos);
    std::string buf;
    for (const Vocab::Fragment& f : vocab_->partition(text, parse_special)) {
      if (f.token >= 0) {
        out.push_back(f.token);
        prev_special = true;
        continue;
      }
      buf.clear();
      if (vocab_->add_space_prefix() && prev_special) buf += kSpaceMark;
      for (char c : text.substr(f.offset, f.length)) {
        if (c == ' ') buf += kSpaceMark;
        else buf += c;
      }
      encode_raw(buf, out);
      prev_special = false;
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
    if (attr & kAttrNormal) {
      std::string out;
      for (size_t i = 0; i < t.size();) {
        if (t.compare(i, kSpaceMark.size(), kSpaceMark) == 0) {
          out += ' ';
          i += kSpaceMark.size();
        } else {
          out += t[i++];
        }
      }
      return out;
    }
    if (attr & kAttrByte) return byte_piece(t);
    return {};  // unused / undefined tokens render as nothing
  }

  int32_t vocab_size() const override { return vocab_->size(); }
  const SpecialTokens& special() const override { return vocab_->special(); }
  bool is_eog(Token id) const override { return vocab_->is_eog(id); }

 private:
  // <0xXX>, else the byte itself as a token (llama.cpp's byte_to_token), else unk (llama.cpp would throw).
  Token lookup_byte_token(uint8_t b) const {
    static const char* hex = "0123456789ABCDEF";
    const char name[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
    Token id = vocab_->find(std::string_view(name, 6));
    if (id < 0) id = vocab_->find(std::string_view(reinterpret_cast<const char*>(&b), 1));
    if (id < 0) id = vocab_->special().unk;
    return id;
  }

  struct Symbol {
    int32_t prev, next;
    uint32_t start, len;
  };
  struct Bigram {
    int32_t left, right;
    float score;
    uint32_t size;
  };
  struct Lower {  // priority: higher score first, then the leftmost pair
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
  };

  void encode_raw(const std::string& w, std::vector<Token>& out) const {
    // Symbols are UTF-8 characters by their lead byte (truncated at the end), ill-formed or not.
    std::vector<Symbol> sym;
    for (uint32_t off = 0; off < w.size();) {
      const uint32_t len = static_cast<uint32_t>(
          std::min<size_t>(utf8_seq_len(static_cast<uint8_t>(w[off])), w.size() - off));
      const int32_t i = static_cast<int32_t>(sym.size());
      sym.push_back({i - 1, off + len == w.size() ? -1 : i + 1, off, len});
      off += len;
    }
    std::priority_queue<Bigram, std::vector<Bigram>, Lower> queue;
    auto try_add = [&](int32_t l, int32_t r) {
      if (l < 0 || r < 0) return;
      const uint32_t size = sym[l].len + sym[r].len;
      const Token id = vocab_->find(std::string_view(w).substr(sym[l].start, size));
      if (id >= 0) queue.push({l, r, vocab_->score(id), size});
    };
    for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) try_add(i - 1, i);
    while (!queue.empty()) {
      const Bigram bg = queue.top();
      queue.pop();
      Symbol& l = sym[bg.left];
      Symbol& r = sym[bg.right];
      if (l.len == 0 || r.len == 0 || l.len + r.len != bg.size) continue;  // stale
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = bg.left;
      try_add(l.prev, bg.left);
      try_add(bg.left, l.next);
    }
    if (sym.empty()) return;
    for (int32_t i = 0; i != -1; i = sym[i].next) {
      const std::string_view piece = std::string_view(w).substr(sym[i].start, sym[i].len);
      const Token id = vocab_->find(piece);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      for (unsigned char c : piece)
        if (byte_token_[c] >= 0) out.push_back(byte_token_[c]);
    }
  }

  std::unique_ptr<Vocab> vocab_;
  Token byte_token_[256];
};

}  // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer(std::unique_ptr<Vocab> vocab) {
  return std::make_unique<SpmTokenizer>(std::move(vocab));
}

}  // namespace ferry::text
