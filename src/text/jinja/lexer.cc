// The tokenizer: data between tags, whitespace control at tag edges, then the tokens inside each tag.
#include "text/jinja/lexer.h"

#include <cstring>

#include "text/jinja/utf8.h"

namespace ferry::text::jinja {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || static_cast<uint8_t>(c) >= 0x80;
}
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Python's unicode-escape decoding of a string literal's body.
std::string unescape(std::string_view s, int line) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c != '\\' || i + 1 >= s.size()) {
      out += c;
      continue;
    }
    char e = s[++i];
    auto hex = [&](size_t n) -> uint32_t {
      uint32_t v = 0;
      for (size_t k = 1; k <= n; ++k) {
        if (i + k >= s.size()) throw SyntaxError(line, "truncated \\xXX escape");
        char h = s[i + k];
        int d = is_digit(h)              ? h - '0'
                : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                         : -1;
        if (d < 0) throw SyntaxError(line, "truncated escape in string");
        v = v * 16 + static_cast<uint32_t>(d);
      }
      i += n;
      return v;
    };
    switch (e) {
      case '\n': break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x': utf8_append(out, hex(2)); break;
      case 'u': utf8_append(out, hex(4)); break;
      case 'U': utf8_append(out, hex(8)); break;
      default:
        if (e >= '0' && e <= '7') {
          uint32_t v = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k)
            v = v * 8 + static_cast<uint32_t>(s[++i] - '0');
          utf8_append(out, v);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string_view source, const LexOptions& o) : opt_(o) {
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    const size_t n = src_.size();
    while (pos_ < n) {
      size_t k = find_opener(pos_);
      if (k == std::string::npos) {
        emit_data(src_.substr(pos_), line_);
        count_lines(pos_, n);
        pos_ = n;
        break;
      }
      const char kind = src_[k + 1];  // '{', '%' or '#'
      const char sign = k + 2 < n && (src_[k + 2] == '-' || src_[k + 2] == '+') ? src_[k + 2] : 0;
      size_t raw_end = kind == '%' ? match_raw_begin(k) : 0;
      std::string text = src_.substr(pos_, k - pos_);
      strip_before(text, sign, kind != '{');
      emit_data(std::move(text), line_);
      count_lines(pos_, k);
      line_starting_ = false;
      pos_ = k + 2 + (sign ? 1 : 0);
      if (raw_end) {
        count_lines(pos_, raw_end);
        pos_ = raw_end;
        lex_raw_body();
      } else if (kind == '#') {
        lex_comment();
      } else {
        lex_tag(kind == '%');
      }
    }
    Token eof;
    eof.type = Tok::kEof;
    eof.line = line_;
    out_.push_back(eof);
    return std::move(out_);
  }

 private:
  size_t find_opener(size_t from) const {
    for (size_t k = src_.find('{', from); k != std::string::npos; k = src_.find('{', k + 1))
      if (k + 1 < src_.size() && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
    return std::string::npos;
  }

  void count_lines(size_t a, size_t b) {
    for (size_t i = a; i < b; ++i)
      if (src_[i] == '\n') ++line_;
  }

  // Position after the whitespace (Python's \s, Unicode included) starting at p.
  size_t skip_space(size_t p) const {
    while (p < src_.size()) {
      size_t q = p;
      if (!py_isspace(utf8_next(src_, q))) break;
      p = q;
    }
    return p;
  }

  // "{% raw %}" at k (any -/+ markers): the position after it, else 0.
  size_t match_raw_begin(size_t k) const {
    size_t p = k + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    p = skip_space(p);
    if (src_.compare(p, 3, "raw") != 0) return 0;
    p = skip_space(p + 3);
    if (src_.compare(p, 3, "-%}") == 0) return skip_space(p + 3);
    if (src_.compare(p, 2, "%}") == 0) return p + 2;
    return 0;
  }

  // Whitespace control on the text before a tag: `-` strips all trailing whitespace; lstrip_blocks strips
  // the spaces between the line's start and a block or comment tag.
  void strip_before(std::string& text, char sign, bool block_or_comment) const {
    if (sign == '-') {
      text = py_strip(text, nullptr, false, true);
    } else if (sign != '+' && opt_.lstrip_blocks && block_or_comment) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && l_pos < text.size() &&
          py_strip(std::string_view(text).substr(l_pos), nullptr, true, false).empty())
        text.resize(l_pos);
    }
  }

  void emit_data(std::string text, int line) {
    if (text.empty()) return;
    Token t;
    t.type = Tok::kData;
    t.value = std::move(text);
    t.line = line;
    out_.push_back(std::move(t));
  }

  void emit(Tok type, std::string value, int line) {
    Token t;
    t.type = type;
    t.value = std::move(value);
    t.line = line;
    out_.push_back(std::move(t));
  }

  // After a tag's closing delimiter at p (length len) with its marker: the trim rules; sets pos_.
  void close_tag(size_t p, size_t len, char marker, bool trim_newline) {
    size_t end = p + len;
    if (marker == '-')
      end = skip_space(end);
    else if (marker != '+' && trim_newline && opt_.trim_blocks && end < src_.size() && src_[end] == '\n')
      ++end;
    count_lines(pos_, end);
    pos_ = end;
    line_starting_ = end > 0 && src_[end - 1] == '\n';
  }

  void lex_comment() {
    size_t e = src_.find("#}", pos_);
    if (e == std::string::npos) throw SyntaxError(line_, "Missing end of comment tag");
    char marker = e > pos_ && (src_[e - 1] == '-' || src_[e - 1] == '+') ? src_[e - 1] : 0;
    close_tag(e, 2, marker, true);
  }

  // The body of {% raw %} up to {% endraw %}, as data.
  void lex_raw_body() {
    for (size_t k = find_opener(pos_); k != std::string::npos; k = find_opener(k + 1)) {
      if (src_[k + 1] != '%') continue;
      size_t p = k + 2;
      char sign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p] : 0;
      if (sign) ++p;
      p = skip_space(p);
      if (src_.compare(p, 6, "endraw") != 0) continue;
      p = skip_space(p + 6);
      char marker = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) marker = src_[p++];
      if (src_.compare(p, 2, "%}") != 0) continue;
      std::string text = src_.substr(pos_, k - pos_);
      strip_before(text, sign, true);
      emit_data(std::move(text), line_);
      count_lines(pos_, k);
      pos_ = k;
      close_tag(p, 2, marker, true);
      return;
    }
    throw SyntaxError(line_, "Missing end of raw directive");
  }

  void lex_tag(bool block) {
    emit(block ? Tok::kBlockBegin : Tok::kVarBegin, "", line_);
    std::vector<char> balance;
    const size_t n = src_.size();
    while (true) {
      if (pos_ >= n)
        throw SyntaxError(
            line_, block ? "unexpected end of template, expected '%}'" : "unexpected end of template, expected '}}'");
      const char c = src_[pos_];
      if (balance.empty()) {
        const char* close = block ? "%}" : "}}";
        if (c == '-' && src_.compare(pos_ + 1, 2, close) == 0) {
          emit(block ? Tok::kBlockEnd : Tok::kVarEnd, "", line_);
          close_tag(pos_ + 1, 2, '-', block);
          return;
        }
        if (block && c == '+' && src_.compare(pos_ + 1, 2, close) == 0) {
          emit(Tok::kBlockEnd, "", line_);
          close_tag(pos_ + 1, 2, '+', block);
          return;
        }
        if (src_.compare(pos_, 2, close) == 0) {
          emit(block ? Tok::kBlockEnd : Tok::kVarEnd, "", line_);
          close_tag(pos_, 2, 0, block);
          return;
        }
      }
      size_t q = pos_;
      if (py_isspace(utf8_next(src_, q))) {
        size_t e = skip_space(pos_);
        count_lines(pos_, e);
        pos_ = e;
        continue;
      }
      if (is_digit(c) && lex_number()) continue;
      if (is_name_start(c)) {
        size_t e = pos_;
        while (e < n && is_name_char(src_[e])) ++e;
        emit(Tok::kName, src_.substr(pos_, e - pos_), line_);
        pos_ = e;
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t e = pos_ + 1;
        while (e < n && src_[e] != c) e += src_[e] == '\\' ? 2 : 1;
        if (e >= n) throw SyntaxError(line_, std::string("unexpected char '") + c + "'");
        Token t;
        t.type = Tok::kString;
        t.value = unescape(std::string_view(src_).substr(pos_ + 1, e - pos_ - 1), line_);
        t.line = line_;
        out_.push_back(std::move(t));
        count_lines(pos_, e + 1);
        pos_ = e + 1;
        continue;
      }
      static const char* const kOps2[] = {"//", "**", "==", "!=", "<=", ">="};
      std::string op;
      for (const char* o : kOps2)
        if (src_.compare(pos_, 2, o) == 0) op = o;
      if (op.empty() && std::strchr("+-/*%~[](){}<>=.:|,;", c) && c != 0) op = std::string(1, c);
      if (op.empty()) throw SyntaxError(line_, std::string("unexpected char '") + c + "'");
      if (op == "(" || op == "[" || op == "{") {
        balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
      } else if (op == ")" || op == "]" || op == "}") {
        if (balance.empty()) throw SyntaxError(line_, "unexpected '" + op + "'");
        if (balance.back() != op[0])
          throw SyntaxError(line_, "unexpected '" + op + "', expected '" + std::string(1, balance.back()) + "'");
        balance.pop_back();
      }
      emit(Tok::kOp, op, line_);
      pos_ += op.size();
    }
  }

  // An integer or float at pos_; false when there is none (a lone digit is always an integer).
  bool lex_number() {
    const size_t n = src_.size();
    auto digits = [&](size_t p) {  // (\d+_)*\d+ from p: end, or p when none
      size_t e = p;
      while (e < n && is_digit(src_[e])) {
        while (e < n && is_digit(src_[e])) ++e;
        if (e + 1 < n && src_[e] == '_' && is_digit(src_[e + 1])) ++e;
      }
      return e;
    };
    auto clean = [](std::string s) {
      std::string r;
      for (char ch : s)
        if (ch != '_') r += ch;
      return r;
    };
    const bool after_dot = pos_ > 0 && src_[pos_ - 1] == '.';
    size_t e = digits(pos_);
    if (!after_dot) {
      size_t f = e;
      bool frac = false;
      if (f + 1 < n && src_[f] == '.' && is_digit(src_[f + 1])) {
        f = digits(f + 1);
        frac = true;
      }
      size_t g = f;
      if (g < n && (src_[g] == 'e' || src_[g] == 'E')) {
        size_t h = g + 1;
        if (h < n && (src_[h] == '+' || src_[h] == '-')) ++h;
        if (h < n && is_digit(src_[h])) g = digits(h);
      }
      if (frac || g != f) {
        Token t;
        t.type = Tok::kFloat;
        t.value = src_.substr(pos_, g - pos_);
        t.float_value = std::strtod(clean(t.value).c_str(), nullptr);
        t.line = line_;
        out_.push_back(std::move(t));
        pos_ = g;
        return true;
      }
    }
    Token t;
    t.type = Tok::kInt;
    t.line = line_;
    if (src_[pos_] == '0' && pos_ + 1 < n && std::strchr("xXoObB", src_[pos_ + 1])) {
      int base = std::strchr("xX", src_[pos_ + 1]) ? 16 : std::strchr("oO", src_[pos_ + 1]) ? 8 : 2;
      size_t p = pos_ + 2;
      while (p < n && (std::isxdigit(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) ++p;
      t.value = src_.substr(pos_, p - pos_);
      t.int_value = std::strtoll(clean(t.value.substr(2)).c_str(), nullptr, base);
      pos_ = p;
    } else if (src_[pos_] == '0') {
      size_t p = pos_ + 1;
      while (p + 1 < n && src_[p] == '_' && src_[p + 1] == '0') p += 2;
      while (p < n && src_[p] == '0') ++p;
      t.value = src_.substr(pos_, p - pos_);
      pos_ = p;
    } else {
      t.value = src_.substr(pos_, e - pos_);
      t.int_value = std::strtoll(clean(t.value).c_str(), nullptr, 10);
      pos_ = e;
    }
    out_.push_back(std::move(t));
    return true;
  }

  std::string src_;
  LexOptions opt_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexOptions& options) { return Lexer(source, options).run(); }

}  // namespace ferry::text::jinja
