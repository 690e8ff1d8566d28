// Grammar::parse (gbnf.h): a recursive-descent reader of GBNF into rules of alternatives, then the checks
// (every rule defined, `root` present, no left recursion) and the flat element table GrammarPrefix walks.
#include "serve/gbnf.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "text/unicode.h"

namespace ferry::serve {

using Element = Grammar::Element;
using Kind = Grammar::Element::Kind;

class GrammarParser {
 public:
  explicit GrammarParser(std::string_view text) : t_(text) {}
  Expected<std::shared_ptr<const Grammar>> run();

 private:
  using Seq = std::vector<Element>;
  using Alts = std::vector<Seq>;

  bool eof() const { return pos_ >= t_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < t_.size() ? t_[pos_ + ahead] : '\0'; }
  bool fail(const std::string& msg);
  void skip_space(bool newlines);
  uint32_t rule_id(const std::string& name, size_t at);
  uint32_t new_rule(const std::string& owner);
  uint32_t char_set(Grammar::CharSet set);
  uint32_t single_char(uint32_t cp);
  bool parse_name(std::string* name);
  bool parse_char(uint32_t* cp, bool in_class);
  bool parse_rule();
  bool parse_alternatives(Alts& out, bool nested, const std::string& owner);
  bool parse_sequence(Seq& out, bool nested, const std::string& owner);
  bool parse_class(Seq& out);
  bool repeat(Seq& out, size_t item_start, uint32_t min, uint32_t max, const std::string& owner);
  bool grow(size_t n);
  bool check_left_recursion();

  std::string_view t_;
  size_t pos_ = 0;
  std::string error_;
  std::vector<Alts> rules_;
  std::vector<std::string> names_;
  std::vector<int64_t> defined_at_;  // -1: referenced only
  std::vector<size_t> used_at_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<Grammar::CharSet> sets_;
  std::map<uint32_t, uint32_t> single_;  // code point -> its one-character set
  size_t n_elements_ = 0;
  int nesting_ = 0;  // open parentheses
};

bool GrammarParser::fail(const std::string& msg) {
  if (!error_.empty()) return false;
  size_t line = 1, col = 1;
  for (size_t i = 0; i < std::min(pos_, t_.size()); ++i) {
    if (t_[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  error_ = "grammar: line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + msg;
  return false;
}

void GrammarParser::skip_space(bool newlines) {
  while (!eof()) {
    const char c = peek();
    if (c == ' ' || c == '\t') {
      ++pos_;
    } else if (c == '#') {
      while (!eof() && peek() != '\n' && peek() != '\r') ++pos_;
    } else if ((c == '\n' || c == '\r') && newlines) {
      ++pos_;
    } else {
      break;
    }
  }
}

uint32_t GrammarParser::rule_id(const std::string& name, size_t at) {
  const auto it = ids_.find(name);
  if (it != ids_.end()) return it->second;
  const auto id = static_cast<uint32_t>(rules_.size());
  ids_.emplace(name, id);
  rules_.emplace_back();
  names_.push_back(name);
  defined_at_.push_back(-1);
  used_at_.push_back(at);
  return id;
}

uint32_t GrammarParser::new_rule(const std::string& owner) {
  std::string name;
  for (int i = 1;; ++i) {
    name = owner + "-" + std::to_string(i);
    if (ids_.count(name) == 0) break;
  }
  const uint32_t id = rule_id(name, pos_);
  defined_at_[id] = static_cast<int64_t>(pos_);
  return id;
}

uint32_t GrammarParser::char_set(Grammar::CharSet set) {
  auto& r = set.ranges;
  std::sort(r.begin(), r.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (const auto& [lo, hi] : r) {
    if (!merged.empty() && lo <= merged.back().second + 1)
      merged.back().second = std::max(merged.back().second, hi);
    else
      merged.emplace_back(lo, hi);
  }
  r = std::move(merged);
  sets_.push_back(std::move(set));
  return static_cast<uint32_t>(sets_.size() - 1);
}

uint32_t GrammarParser::single_char(uint32_t cp) {
  const auto it = single_.find(cp);
  if (it != single_.end()) return it->second;
  Grammar::CharSet s;
  s.ranges.emplace_back(cp, cp);
  const uint32_t id = char_set(std::move(s));
  single_.emplace(cp, id);
  return id;
}

bool GrammarParser::parse_name(std::string* name) {
  const size_t start = pos_;
  while (!eof() && (std::isalnum(static_cast<unsigned char>(peek())) || peek() == '-' || peek() == '_')) ++pos_;
  if (pos_ == start) return fail(std::string("expected a rule name, found ") + (eof() ? "the end" : "'" + std::string(1, peek()) + "'"));
  *name = std::string(t_.substr(start, pos_ - start));
  return true;
}

// One character of a literal or class: an escape, or one UTF-8 encoded code point.
bool GrammarParser::parse_char(uint32_t* cp, bool in_class) {
  if (eof()) return fail(in_class ? "unterminated character class" : "unterminated literal");
  const auto c = static_cast<uint8_t>(peek());
  if (c == '\\') {
    const char e = peek(1);
    pos_ += 2;
    int hex = 0;
    switch (e) {
      case 'n': *cp = '\n'; return true;
      case 'r': *cp = '\r'; return true;
      case 't': *cp = '\t'; return true;
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': *cp = static_cast<uint8_t>(e); return true;
      case 'x': hex = 2; break;
      case 'u': hex = 4; break;
      case 'U': hex = 8; break;
      default: pos_ -= 2; return fail(std::string("unknown escape '\\") + e + "'");
    }
    uint32_t v = 0;
    for (int i = 0; i < hex; ++i, ++pos_) {
      const char h = peek();
      const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) return fail("expected " + std::to_string(hex) + " hexadecimal digits after '\\" + e + "'");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    if (v > 0x10FFFF) return fail("code point above U+10FFFF");
    *cp = v;
    return true;
  }
  text::Utf8Lead lead;
  if (!text::utf8_lead(c, &lead) || pos_ + static_cast<size_t>(lead.len) > t_.size()) return fail("the grammar is not UTF-8");
  uint32_t v = lead.len == 1 ? c : c & (0x7Fu >> lead.len);
  for (int i = 1; i < lead.len; ++i) {
    const auto b = static_cast<uint8_t>(t_[pos_ + static_cast<size_t>(i)]);
    if (b < (i == 1 ? lead.second_lo : 0x80) || b > (i == 1 ? lead.second_hi : 0xBF)) return fail("the grammar is not UTF-8");
    v = (v << 6) | (b & 0x3Fu);
  }
  pos_ += static_cast<size_t>(lead.len);
  *cp = v;
  return true;
}

bool GrammarParser::grow(size_t n) {
  n_elements_ += n;
  return n_elements_ <= Grammar::kMaxElements || fail("the grammar is too large (over " + std::to_string(Grammar::kMaxElements) + " elements once repetitions are expanded)");
}

bool GrammarParser::parse_rule() {
  const size_t start = pos_;
  std::string name;
  if (!parse_name(&name)) return false;
  skip_space(false);
  if (t_.substr(pos_, 3) != "::=") return fail("expected '::=' after the rule name '" + name + "'");
  pos_ += 3;
  skip_space(true);
  const uint32_t id = rule_id(name, start);
  if (defined_at_[id] >= 0) {
    pos_ = start;
    return fail("rule '" + name + "' is defined twice");
  }
  defined_at_[id] = static_cast<int64_t>(start);
  Alts alts;
  if (!parse_alternatives(alts, false, name)) return false;
  rules_[id] = std::move(alts);
  skip_space(false);
  if (!eof() && peek() != '\n' && peek() != '\r') return fail(std::string("unexpected '") + peek() + "'");
  return true;
}

bool GrammarParser::parse_alternatives(Alts& out, bool nested, const std::string& owner) {
  out.emplace_back();
  if (!parse_sequence(out.back(), nested, owner)) return false;
  while (peek() == '|') {
    ++pos_;
    skip_space(true);
    out.emplace_back();
    if (!parse_sequence(out.back(), nested, owner)) return false;
  }
  return true;
}

bool GrammarParser::parse_class(Seq& out) {
  ++pos_;  // '['
  Grammar::CharSet set;
  if (peek() == '^') {
    set.negated = true;
    ++pos_;
  }
  while (peek() != ']') {
    uint32_t lo = 0, hi = 0;
    if (!parse_char(&lo, true)) return false;
    hi = lo;
    if (peek() == '-' && peek(1) != ']' && pos_ + 1 < t_.size()) {
      ++pos_;
      if (!parse_char(&hi, true)) return false;
      if (hi < lo) return fail("character range with its end before its start");
    }
    set.ranges.emplace_back(lo, hi);
  }
  ++pos_;  // ']'
  if (!grow(1)) return false;
  out.push_back({Kind::kChars, char_set(std::move(set))});
  return true;
}

// Replaces out[item_start..] (one item) by `min` copies of it and up to `max - min` more (max = UINT32_MAX:
// any number), through generated rules.
bool GrammarParser::repeat(Seq& out, size_t item_start, uint32_t min, uint32_t max, const std::string& owner) {
  const Seq item(out.begin() + static_cast<std::ptrdiff_t>(item_start), out.end());
  out.resize(item_start);
  if (!grow(item.size() * (static_cast<size_t>(min) + (max == UINT32_MAX ? 1 : max - min)))) return false;
  for (uint32_t i = 0; i < min; ++i) out.insert(out.end(), item.begin(), item.end());
  if (max == UINT32_MAX) {  // R ::= item R | (nothing)
    const uint32_t r = new_rule(owner);
    Seq more = item;
    more.push_back({Kind::kRef, r});
    rules_[r] = {std::move(more), Seq{}};
    out.push_back({Kind::kRef, r});
  } else if (max > min) {  // R1 ::= item | (nothing); Rk ::= item R(k-1) | (nothing)
    uint32_t inner = 0;
    for (uint32_t k = 1; k <= max - min; ++k) {
      const uint32_t r = new_rule(owner);
      Seq seq = item;
      if (k > 1) seq.push_back({Kind::kRef, inner});
      rules_[r] = {std::move(seq), Seq{}};
      inner = r;
    }
    out.push_back({Kind::kRef, inner});
  }
  return true;
}

bool GrammarParser::parse_sequence(Seq& out, bool nested, const std::string& owner) {
  for (;;) {
    skip_space(nested);
    if (eof()) return true;
    const char c = peek();
    if (c == '|' || c == ')' || c == '\n' || c == '\r') return true;
    const size_t item_start = out.size();
    if (c == '"') {
      ++pos_;
      while (peek() != '"') {
        uint32_t cp = 0;
        if (!parse_char(&cp, false) || !grow(1)) return false;
        out.push_back({Kind::kChars, single_char(cp)});
      }
      ++pos_;
    } else if (c == '[') {
      if (!parse_class(out)) return false;
    } else if (c == '.') {
      ++pos_;
      if (!grow(1)) return false;
      Grammar::CharSet any;
      any.negated = true;
      out.push_back({Kind::kChars, char_set(std::move(any))});
    } else if (c == '(') {
      if (++nesting_ > Grammar::kMaxNesting) return fail("parentheses nested more than " + std::to_string(Grammar::kMaxNesting) + " deep");
      ++pos_;
      skip_space(true);
      Alts sub;
      if (!parse_alternatives(sub, true, owner)) return false;
      --nesting_;
      skip_space(true);
      if (peek() != ')') return fail("expected ')'");
      ++pos_;
      const uint32_t r = new_rule(owner);
      rules_[r] = std::move(sub);
      if (!grow(1)) return false;
      out.push_back({Kind::kRef, r});
    } else if (c == '<') {
      return fail("token references ('<...>') are not supported");
    } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') {
      const size_t at = pos_;
      std::string name;
      if (!parse_name(&name)) return false;
      skip_space(false);
      if (t_.substr(pos_, 3) == "::=") return fail("expected a new line before the rule '" + name + "'");
      if (!grow(1)) return false;
      out.push_back({Kind::kRef, rule_id(name, at)});
    } else {
      return fail(std::string("unexpected '") + c + "'");
    }
    skip_space(nested);
    // Repetition operators apply to the item just read.
    for (;;) {
      const char op = peek();
      if (op == '*' || op == '+' || op == '?') {
        ++pos_;
        if (!repeat(out, item_start, op == '+' ? 1 : 0, op == '?' ? 1 : UINT32_MAX, owner)) return false;
      } else if (op == '{') {
        ++pos_;
        auto number = [&](uint32_t* v) {
          const size_t s = pos_;
          uint64_t n = 0;
          while (std::isdigit(static_cast<unsigned char>(peek())) && n <= Grammar::kMaxRepeat) n = n * 10 + static_cast<uint64_t>(peek() - '0'), ++pos_;
          *v = static_cast<uint32_t>(n);
          return pos_ > s;
        };
        uint32_t lo = 0, hi = UINT32_MAX;
        skip_space(true);
        const bool has_lo = number(&lo);
        skip_space(true);
        if (peek() == ',') {
          ++pos_;
          skip_space(true);
          if (!number(&hi)) hi = UINT32_MAX;
        } else if (has_lo) {
          hi = lo;
        } else {
          return fail("expected a repetition count after '{'");
        }
        skip_space(true);
        if (peek() != '}') return fail("expected '}'");
        ++pos_;
        if (lo > Grammar::kMaxRepeat || (hi != UINT32_MAX && hi > Grammar::kMaxRepeat))
          return fail("repetition count over " + std::to_string(Grammar::kMaxRepeat));
        if (hi < lo) return fail("repetition {m,n} with n < m");
        if (!repeat(out, item_start, lo, hi, owner)) return false;
      } else {
        break;
      }
      skip_space(nested);
    }
  }
}

// Left recursion would make GrammarPrefix expand a rule into itself forever: refused, naming the rule.
bool GrammarParser::check_left_recursion() {
  const size_t n = rules_.size();
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Seq& alt : rules_[r]) {
        const bool all = std::all_of(alt.begin(), alt.end(), [&](const Element& e) { return e.kind == Kind::kRef && nullable[e.value]; });
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  // Edges r -> s where s can be the first thing r reads; a cycle is left recursion.
  std::vector<std::vector<uint32_t>> first(n);
  for (size_t r = 0; r < n; ++r)
    for (const Seq& alt : rules_[r])
      for (const Element& e : alt) {
        if (e.kind != Kind::kRef) break;
        first[r].push_back(e.value);
        if (!nullable[e.value]) break;
      }
  std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the path, 2 done
  for (size_t start = 0; start < n; ++start) {
    if (color[start] != 0) continue;
    std::vector<std::pair<uint32_t, size_t>> path{{static_cast<uint32_t>(start), 0}};
    color[start] = 1;
    while (!path.empty()) {
      auto& [r, next] = path.back();
      if (next == first[r].size()) {
        color[r] = 2;
        path.pop_back();
        continue;
      }
      const uint32_t s = first[r][next++];
      if (color[s] == 1) {
        pos_ = static_cast<size_t>(std::max<int64_t>(defined_at_[s], 0));
        return fail("rule '" + names_[s] + "' is left recursive (it can reach itself before reading a character)");
      }
      if (color[s] == 0) {
        color[s] = 1;
        path.emplace_back(s, 0);
      }
    }
  }
  return true;
}

Expected<std::shared_ptr<const Grammar>> GrammarParser::run() {
  skip_space(true);
  while (!eof()) {
    if (!parse_rule()) break;
    skip_space(true);
  }
  if (error_.empty()) {
    for (size_t r = 0; r < rules_.size(); ++r)
      if (defined_at_[r] < 0) {
        pos_ = used_at_[r];
        fail("rule '" + names_[r] + "' is used but never defined");
        break;
      }
  }
  if (error_.empty() && ids_.count("root") == 0) {
    pos_ = 0;
    fail("no 'root' rule");
  }
  if (error_.empty()) check_left_recursion();
  if (!error_.empty()) return make_error(ErrorCode::kInvalidArgument, "%s", error_.c_str());

  auto g = std::make_shared<Grammar>();
  g->root_ = ids_.at("root");
  g->names_ = std::move(names_);
  g->sets_ = std::move(sets_);
  g->rules_.resize(rules_.size());
  for (size_t r = 0; r < rules_.size(); ++r)
    for (const Seq& alt : rules_[r]) {
      g->rules_[r].push_back(static_cast<uint32_t>(g->elements_.size()));
      g->elements_.insert(g->elements_.end(), alt.begin(), alt.end());
      g->elements_.push_back({Kind::kEnd, 0});
    }
  return std::shared_ptr<const Grammar>(std::move(g));
}

Expected<std::shared_ptr<const Grammar>> Grammar::parse(std::string_view text) { return GrammarParser(text).run(); }

bool Grammar::matches(uint32_t set, uint32_t cp) const { return intersects(set, cp, cp); }

bool Grammar::intersects(uint32_t set, uint32_t lo, uint32_t hi) const {
  const CharSet& s = sets_[set];
  if (!s.negated) {
    for (const auto& [a, b] : s.ranges)
      if (a <= hi && lo <= b) return true;
    return false;
  }
  // The complement meets [lo, hi] unless the ranges cover all of it (they are sorted and merged).
  for (const auto& [a, b] : s.ranges) {
    if (a > lo) return true;
    if (b >= hi) return false;
    if (b >= lo) lo = b + 1;
  }
  return true;
}

}  // namespace ferry::serve
