// JsonPrefix: whether a byte string can still become one JSON object (RFC 8259), fed a byte at a time,
// for JSON mode (`response_format: {"type": "json_object"}`): the generation may only take tokens whose
// bytes keep the text a prefix of a valid object, and ends when the object closes.
// Strings take any UTF-8 bytes except control characters, with the standard escapes; numbers follow
// the JSON grammar exactly. Whitespace between tokens is JSON's four characters, at most
// kMaxWhitespaceRun in a row (as llama.cpp's JSON grammar bounds it), so a model cannot fill its whole
// reply with blank lines. A copy is cheap (a small string holds the nesting), which is how a caller
// tries a token's bytes without committing them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ferry::serve {

class JsonPrefix {
 public:
  static constexpr int kMaxWhitespaceRun = 20;
  static constexpr size_t kMaxDepth = 64;

  // Feeds one byte; false (and the state unchanged for no further use) when the text can no longer
  // become a JSON object.
  bool feed(uint8_t c);
  // Feeds every byte; false at the first that does not fit.
  bool feed(std::string_view bytes) {
    for (char c : bytes)
      if (!feed(static_cast<uint8_t>(c))) return false;
    return true;
  }
  // True once the top-level object has closed (nothing may follow it).
  bool complete() const { return state_ == State::kDone; }

 private:
  enum class State : uint8_t {
    kStart,          // before the top-level '{'
    kObjectFirst,    // after '{': a key or '}'
    kObjectKey,      // after ',' in an object: a key
    kColon,          // after a key
    kValue,          // after ':' or '[' or ',' in an array: a value (kArrayFirst allows ']')
    kArrayFirst,     // after '[': a value or ']'
    kAfterValue,     // after a value: ',' or the container's closer
    kString,         // inside a string
    kEscape,         // after '\' in a string
    kUnicode,        // inside \uXXXX (hex_left_ digits to go)
    kNumber,         // inside a number (num_ says where)
    kLiteral,        // inside true / false / null (literal_ and lit_pos_)
    kDone,
  };
  // Where a number stands: after '-', after a leading 0, in the integer digits, after '.', in the
  // fraction, after 'e' / 'E', after the exponent's sign, in the exponent.
  enum class Num : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits };

  bool value_start(uint8_t c);
  bool end_value();           // a scalar or container finished: back to the container around it
  bool after_value(uint8_t c);
  bool number(uint8_t c);
  bool whitespace(uint8_t c);  // c is JSON whitespace and the run is within bounds
  static bool is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

  State state_ = State::kStart;
  bool string_is_key_ = false;
  Num num_ = Num::kMinus;
  const char* literal_ = nullptr;
  uint8_t lit_pos_ = 0;
  uint8_t hex_left_ = 0;
  uint8_t utf8_left_ = 0;     // continuation bytes still due in a string's UTF-8 sequence
  uint8_t utf8_min_ = 0x80;   // the range the next continuation byte must lie in (overlong / surrogate checks)
  uint8_t utf8_max_ = 0xBF;
  int ws_run_ = 0;
  std::string stack_;         // '{' or '[' per open container
};

}  // namespace ferry::serve
