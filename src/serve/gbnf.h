// Grammar: a GBNF grammar (llama.cpp's grammar format, the `grammar` field of llama-server's requests and
// `ferry run --grammar-file`) compiled into the rule table that GrammarPrefix walks while a reply is generated.
//   rule   ::= name "::=" alternatives          one per line; `root` is where the text starts
//   item   ::= "literal" | [chars] | [^chars] | . | name | ( alternatives )   then * + ? {m} {m,} {m,n} {,n}
// Literals and character classes take the escapes \n \r \t \\ \" \' \[ \] \- \^ \/ \xHH \uHHHH \UHHHHHHHH and
// any UTF-8 text; `.` is any character; `#` starts a comment. Newlines may appear inside parentheses and
// after `::=` or `|`. Not accepted (an error naming it): token references (`<...>`), rules that are never
// defined, left recursion (a rule that can reach itself before reading a character), no `root`, and sizes
// past the limits below.
// Repetitions become rules of their own: x* = R ::= x R | (nothing); x? = x | (nothing); x{m,n} = m copies
// of x, then n - m nested optional ones.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace ferry::serve {

class Grammar {
 public:
  // One step of a rule's alternative; every alternative ends with kEnd.
  struct Element {
    enum class Kind : uint8_t { kEnd, kRef, kChars } kind = Kind::kEnd;
    uint32_t value = 0;  // kRef: the rule; kChars: the character set
  };
  static constexpr size_t kMaxElements = 1u << 20;  // a grammar larger than this (after repetitions) is refused
  static constexpr uint32_t kMaxRepeat = 10000;     // the largest {m,n} bound
  static constexpr int kMaxNesting = 256;           // parentheses inside parentheses

  static Expected<std::shared_ptr<const Grammar>> parse(std::string_view text);

  uint32_t root() const { return root_; }
  const Element& element(uint32_t at) const { return elements_[at]; }
  // The first element of each alternative of `rule` (an empty alternative starts at its kEnd).
  const std::vector<uint32_t>& alternatives(uint32_t rule) const { return rules_[rule]; }
  // Whether the character set `set` holds code point cp / any code point of [lo, hi].
  bool matches(uint32_t set, uint32_t cp) const;
  bool intersects(uint32_t set, uint32_t lo, uint32_t hi) const;
  size_t n_rules() const { return rules_.size(); }
  const std::string& rule_name(uint32_t rule) const { return names_[rule]; }

 private:
  friend class GrammarParser;
  struct CharSet {
    std::vector<std::pair<uint32_t, uint32_t>> ranges;  // sorted, disjoint, not adjacent
    bool negated = false;
  };
  std::vector<Element> elements_;
  std::vector<std::vector<uint32_t>> rules_;
  std::vector<std::string> names_;  // generated rules: the defining rule's name with a suffix
  std::vector<CharSet> sets_;
  uint32_t root_ = 0;
};

}  // namespace ferry::serve
