// JsonPrefix: whether a byte string can still become a JSON document that a schema (serve/json_schema.h)
// accepts, fed a byte at a time: the automaton behind JSON mode and structured outputs in `ferry serve`.
// The generation may only take tokens whose bytes keep the text such a prefix, and it ends when the
// top-level object closes (RFC 8259 syntax: strings take any well-formed UTF-8 except control characters,
// with the standard escapes; numbers follow the JSON grammar; an "integer" has no fraction or exponent).
// Whitespace between tokens is JSON's four characters, at most kMaxWhitespaceRun in a row (as llama.cpp's
// JSON grammar bounds it), so a model cannot fill its whole reply with blank lines.
// Where the schema allows several readings of the text so far (`anyOf`, enum members that share a prefix,
// property names), every reading is followed at once (a set of paths, each a stack of frames) until the
// bytes tell them apart. A copy is a few small vectors: a caller tries a token's bytes on a copy.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "serve/json_schema.h"

namespace ferry::serve {

class JsonPrefix {
 public:
  static constexpr int kMaxWhitespaceRun = 20;
  static constexpr size_t kMaxDepth = 64;
  static constexpr size_t kMaxPaths = 256;  // readings followed at once (beyond: the first ones)

  JsonPrefix() : JsonPrefix(JsonSchema::any_object()) {}  // any JSON object
  explicit JsonPrefix(std::shared_ptr<const JsonSchema> schema);

  // Feeds one byte; false when the text can no longer become a document the schema accepts (the
  // object is then not to be used further).
  bool feed(uint8_t c);
  // Feeds every byte; false at the first that does not fit.
  bool feed(std::string_view bytes) {
    for (char c : bytes)
      if (!feed(static_cast<uint8_t>(c))) return false;
    return true;
  }
  // True once the top-level object has closed (nothing may follow it).
  bool complete() const;
  // The reply may end here: only once the object has closed.
  bool can_end() const { return complete(); }

 private:
  enum class State : uint8_t {
    kValue,                                  // a value of `node` starts here (whitespace first allowed)
    kObjFirst, kObjKey, kObjColon, kObjAfter, kObjInKey, kObjInValue,  // an object (In*: a child runs)
    kArrFirst, kArrAfter, kArrInValue,       // an array
    kString, kEscape, kUnicode,              // a string (a value, or an object's open key)
    kNumber,                                 // a number (`num` says where)
    kLiteral,                                // the text `lit` (an enum member, a property name, true, ...)
  };
  // Where a number stands: after '-', after a leading 0, in the integer digits, after '.', in the fraction,
  // after 'e' / 'E', after the exponent's sign, in the exponent.
  enum class Num : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits };

  struct Frame {
    const SchemaNode* node = nullptr;
    State st = State::kValue;
    Num num = Num::kMinus;
    uint8_t utf8_left = 0, utf8_lo = 0x80, utf8_hi = 0xBF, hex_left = 0;
    int32_t pos = 0;              // kLiteral: bytes of `lit` matched; an object: its current property (-1: open key)
    const std::string* lit = nullptr;
    int64_t count = 0;            // an array: items so far; a string: characters; an integer: its digits' value
    uint64_t seen = 0;            // an object: properties so far
    bool negative = false;        // an integer: after '-'
    bool operator==(const Frame& o) const;
  };
  struct Path {
    std::vector<Frame> frames;
    int ws_run = 0;
    bool done = false;  // the top-level value has closed
    bool operator==(const Path& o) const { return done == o.done && ws_run == o.ws_run && frames == o.frames; }
  };

  void advance(Path p, uint8_t c, std::vector<Path>& out) const;
  void start_value(Path p, uint8_t c, std::vector<Path>& out) const;
  void start_key(Path p, std::vector<Path>& out) const;
  void number(Path p, uint8_t c, std::vector<Path>& out) const;
  void string_byte(Path p, uint8_t c, std::vector<Path>& out) const;
  // A bounded integer's digits so far (count, negative; `complete`: no more digits come) can still end in
  // its range.
  static bool integer_fits(const Frame& f, bool complete);
  static void value_done(Path& p);
  static bool whitespace(Path& p, uint8_t c);
  static bool is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

  std::shared_ptr<const JsonSchema> schema_;
  std::vector<Path> paths_;
};

}  // namespace ferry::serve
