// GrammarPrefix (grammar_prefix.h).
#include "serve/grammar_prefix.h"

#include <algorithm>

#include "text/unicode.h"

namespace ferry::serve {

using Kind = Grammar::Element::Kind;

namespace {

void dedupe(std::vector<std::vector<uint32_t>>& stacks, size_t cap) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  if (stacks.size() > cap) stacks.resize(cap);
}

}  // namespace

GrammarPrefix::GrammarPrefix(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  std::set<Stack> seen;
  for (uint32_t alt : grammar_->alternatives(grammar_->root())) {
    Stack s;
    if (grammar_->element(alt).kind != Kind::kEnd) s.push_back(alt);
    expand(s, stacks_, seen);
  }
  dedupe(stacks_, kMaxStacks);
}

// Adds the stacks `s` stands for once every rule reference on its top is replaced by its alternatives.
// Terminates: the grammar has no left recursion, so a chain of references reads a character or ends.
void GrammarPrefix::expand(Stack& s, std::vector<Stack>& out, std::set<Stack>& seen, size_t depth) const {
  if (s.size() > kMaxDepth || depth > kMaxDepth || seen.size() > kMaxStacks * 16 || !seen.insert(s).second) return;
  if (s.empty() || grammar_->element(s.back()).kind == Kind::kChars) {
    if (out.size() < kMaxStacks) out.push_back(s);
    return;
  }
  const uint32_t top = s.back();
  for (uint32_t alt : grammar_->alternatives(grammar_->element(top).value)) {
    Stack t(s.begin(), s.end() - 1);
    if (grammar_->element(top + 1).kind != Kind::kEnd) t.push_back(top + 1);
    if (grammar_->element(alt).kind != Kind::kEnd) t.push_back(alt);
    expand(t, out, seen, depth + 1);
  }
}

bool GrammarPrefix::accept(uint32_t cp) {
  std::vector<Stack> next;
  std::set<Stack> seen;
  for (const Stack& s : stacks_) {
    if (s.empty() || !grammar_->matches(grammar_->element(s.back()).value, cp)) continue;
    Stack t(s.begin(), s.end() - 1);
    if (grammar_->element(s.back() + 1).kind != Kind::kEnd) t.push_back(s.back() + 1);
    expand(t, next, seen);
  }
  dedupe(next, kMaxStacks);
  stacks_ = std::move(next);
  return !stacks_.empty();
}

bool GrammarPrefix::could_read(uint32_t lo, uint32_t hi) const {
  return std::any_of(stacks_.begin(), stacks_.end(), [&](const Stack& s) {
    return !s.empty() && grammar_->intersects(grammar_->element(s.back()).value, lo, hi);
  });
}

bool GrammarPrefix::feed(uint8_t c) {
  if (partial_left_ == 0) {
    text::Utf8Lead lead;
    if (!text::utf8_lead(c, &lead)) return false;
    if (lead.len == 1) return accept(c);
    partial_ = c & (0x7Fu >> lead.len);
    partial_left_ = lead.len - 1;
    next_lo_ = lead.second_lo;
    next_hi_ = lead.second_hi;
    // The code points this lead can start, its second byte's range included (no overlongs, no surrogates).
    const int shift = 6 * (partial_left_ - 1);
    const uint32_t lo = ((partial_ << 6) | (next_lo_ & 0x3Fu)) << shift;
    const uint32_t hi = (((partial_ << 6) | (next_hi_ & 0x3Fu)) << shift) | ((1u << shift) - 1);
    return could_read(lo, hi);
  } else {
    if (c < next_lo_ || c > next_hi_) return false;
    partial_ = (partial_ << 6) | (c & 0x3Fu);
    next_lo_ = 0x80;
    next_hi_ = 0xBF;
    if (--partial_left_ == 0) {
      const uint32_t cp = partial_;
      partial_ = 0;
      return accept(cp);
    }
  }
  const int shift = 6 * partial_left_;
  return could_read(partial_ << shift, ((partial_ + 1) << shift) - 1);
}

bool GrammarPrefix::can_end() const {
  return partial_left_ == 0 && std::any_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return s.empty(); });
}

bool GrammarPrefix::complete() const {
  return partial_left_ == 0 && !stacks_.empty() &&
         std::all_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return s.empty(); });
}

}  // namespace ferry::serve
