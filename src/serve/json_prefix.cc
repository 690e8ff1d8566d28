// JsonPrefix (json_prefix.h): a pushdown automaton over bytes. Containers are on stack_; every other
// piece of state is the few fields of the value being read.
#include "serve/json_prefix.h"

#include "text/unicode.h"

namespace ferry::serve {

namespace {

bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

bool JsonPrefix::whitespace(uint8_t c) {
  if (!is_ws(c)) return false;
  return ++ws_run_ <= kMaxWhitespaceRun;
}

bool JsonPrefix::end_value() {
  state_ = stack_.empty() ? State::kDone : State::kAfterValue;
  return true;
}

bool JsonPrefix::value_start(uint8_t c) {
  switch (c) {
    case '{':
    case '[':
      if (stack_.size() >= kMaxDepth) return false;
      stack_.push_back(static_cast<char>(c));
      state_ = c == '{' ? State::kObjectFirst : State::kArrayFirst;
      return true;
    case '"':
      string_is_key_ = false;
      state_ = State::kString;
      return true;
    case '-':
      num_ = Num::kMinus;
      state_ = State::kNumber;
      return true;
    case 't':
    case 'f':
    case 'n':
      literal_ = c == 't' ? "true" : c == 'f' ? "false" : "null";
      lit_pos_ = 1;
      state_ = State::kLiteral;
      return true;
    default:
      if (!is_digit(c)) return false;
      num_ = c == '0' ? Num::kZero : Num::kInt;
      state_ = State::kNumber;
      return true;
  }
}

bool JsonPrefix::after_value(uint8_t c) {
  const char top = stack_.back();
  if (c == ',') {
    state_ = top == '{' ? State::kObjectKey : State::kValue;
    return true;
  }
  if ((c == '}' && top == '{') || (c == ']' && top == '[')) {
    stack_.pop_back();
    return end_value();
  }
  return false;
}

bool JsonPrefix::number(uint8_t c) {
  switch (num_) {
    case Num::kMinus:
      if (!is_digit(c)) return false;
      num_ = c == '0' ? Num::kZero : Num::kInt;
      return true;
    case Num::kDot:
      if (!is_digit(c)) return false;
      num_ = Num::kFrac;
      return true;
    case Num::kExp:
      if (c == '+' || c == '-') {
        num_ = Num::kExpSign;
        return true;
      }
      if (!is_digit(c)) return false;
      num_ = Num::kExpDigits;
      return true;
    case Num::kExpSign:
      if (!is_digit(c)) return false;
      num_ = Num::kExpDigits;
      return true;
    case Num::kInt:
    case Num::kFrac:
    case Num::kExpDigits:
      if (is_digit(c)) return true;
      [[fallthrough]];
    case Num::kZero:
      if (c == '.' && (num_ == Num::kZero || num_ == Num::kInt)) {
        num_ = Num::kDot;
        return true;
      }
      if ((c == 'e' || c == 'E') && num_ != Num::kExpDigits) {
        num_ = Num::kExp;
        return true;
      }
      // The number is complete; c belongs to what follows it (numbers never stand at the top level).
      end_value();
      if (is_ws(c)) return whitespace(c);
      return after_value(c);
  }
  return false;
}

bool JsonPrefix::feed(uint8_t c) {
  const bool in_string = state_ == State::kString || state_ == State::kEscape || state_ == State::kUnicode;
  if (!in_string && state_ != State::kNumber && state_ != State::kLiteral) {
    if (is_ws(c)) return state_ != State::kDone && whitespace(c);
    ws_run_ = 0;
  }
  switch (state_) {
    case State::kStart:
      if (c != '{') return false;
      stack_.push_back('{');
      state_ = State::kObjectFirst;
      return true;
    case State::kObjectFirst:
      if (c == '}') {
        stack_.pop_back();
        return end_value();
      }
      [[fallthrough]];
    case State::kObjectKey:
      if (c != '"') return false;
      string_is_key_ = true;
      state_ = State::kString;
      return true;
    case State::kColon:
      if (c != ':') return false;
      state_ = State::kValue;
      return true;
    case State::kArrayFirst:
      if (c == ']') {
        stack_.pop_back();
        return end_value();
      }
      return value_start(c);
    case State::kValue:
      return value_start(c);
    case State::kAfterValue:
      return after_value(c);
    case State::kString:
      if (utf8_left_ > 0) {
        if (c < utf8_min_ || c > utf8_max_) return false;
        --utf8_left_;
        utf8_min_ = 0x80;
        utf8_max_ = 0xBF;
        return true;
      }
      if (c == '"') {
        if (string_is_key_) {
          state_ = State::kColon;
          return true;
        }
        return end_value();
      }
      if (c == '\\') {
        state_ = State::kEscape;
        return true;
      }
      if (c < 0x20) return false;  // control characters must be escaped
      {
        // Well-formed UTF-8 only: no overlong forms, no UTF-16 surrogates, nothing past U+10FFFF.
        text::Utf8Lead lead;
        if (!text::utf8_lead(c, &lead)) return false;
        utf8_left_ = static_cast<uint8_t>(lead.len - 1);
        utf8_min_ = lead.second_lo;
        utf8_max_ = lead.second_hi;
      }
      return true;
    case State::kEscape:
      if (c == 'u') {
        hex_left_ = 4;
        state_ = State::kUnicode;
        return true;
      }
      if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' && c != 'r' && c != 't') return false;
      state_ = State::kString;
      return true;
    case State::kUnicode:
      if (!is_hex(c)) return false;
      if (--hex_left_ == 0) state_ = State::kString;
      return true;
    case State::kNumber:
      return number(c);
    case State::kLiteral:
      if (c != static_cast<uint8_t>(literal_[lit_pos_])) return false;
      if (literal_[++lit_pos_] == '\0') return end_value();
      return true;
    case State::kDone:
      return false;
  }
  return false;
}

}  // namespace ferry::serve
