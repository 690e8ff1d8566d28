// GrammarPrefix: whether a byte string can still become (or already is) a text the GBNF grammar
// (serve/gbnf.h) accepts from its `root` rule, fed a byte at a time: the automaton behind the `grammar`
// field of `ferry serve` requests and `ferry run --grammar-file`.
// The state is the set of places the grammar may be at: stacks of element positions (the top is the next
// character set to read, the ones below are where each enclosing rule continues), expanded through rule
// references until every top is a character set; an empty stack means the text may end here. A code point
// moves every stack whose top holds it. A multi-byte UTF-8 character is decided when its last byte comes;
// until then its bytes are kept if some stack could still read a code point that starts with them.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string_view>
#include <vector>

#include "serve/gbnf.h"

namespace ferry::serve {

class GrammarPrefix {
 public:
  static constexpr size_t kMaxStacks = 1024;  // readings followed at once (beyond: the first ones)
  static constexpr size_t kMaxDepth = 1024;   // nested rules on one stack, or references followed in a row
                                              // before a character (beyond: that reading is dropped)

  explicit GrammarPrefix(std::shared_ptr<const Grammar> grammar);

  // Feeds one byte; false when no text the grammar accepts starts with the bytes so far (the object is
  // then not to be used further).
  bool feed(uint8_t c);
  bool feed(std::string_view bytes) {
    for (char c : bytes)
      if (!feed(static_cast<uint8_t>(c))) return false;
    return true;
  }
  // The grammar accepts the text as it is (it may end here).
  bool can_end() const;
  // It accepts the text and nothing may follow it.
  bool complete() const;

 private:
  using Stack = std::vector<uint32_t>;
  // `seen`: the stacks already expanded this step (a grammar's nullable alternatives can reach one stack by
  // exponentially many routes; each is expanded once).
  void expand(Stack& s, std::vector<Stack>& out, std::set<Stack>& seen, size_t depth = 0) const;
  bool accept(uint32_t cp);
  bool could_read(uint32_t lo, uint32_t hi) const;

  std::shared_ptr<const Grammar> grammar_;
  std::vector<Stack> stacks_;
  uint32_t partial_ = 0;   // a UTF-8 character's bits so far
  int partial_left_ = 0;   // its continuation bytes still to come
  uint8_t next_lo_ = 0x80, next_hi_ = 0xBF;
};

}  // namespace ferry::serve
