// JsonPrefix (json_prefix.h): a set of paths through the schema graph, each a stack of frames. A byte
// moves every path (advance), dropping the ones it does not fit and branching where the schema allows
// several readings; paths that end up equal are merged.
#include "serve/json_prefix.h"

#include <algorithm>

#include "text/unicode.h"

namespace ferry::serve {

namespace {

bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// The values of an `any` node, as nodes of their own (shared by every schema).
struct AnyNodes {
  SchemaNode any, object, array, string, number, t, f, null;
  AnyNodes() {
    object.kind = SchemaNode::Kind::kObject;
    object.open = true;
    object.any_value = &any;
    array.kind = SchemaNode::Kind::kArray;
    array.items = &any;
    string.kind = SchemaNode::Kind::kString;
    number.kind = SchemaNode::Kind::kNumber;
    SchemaNode* lits[] = {&t, &f, &null};
    const char* texts[] = {"true", "false", "null"};
    for (int i = 0; i < 3; ++i) {
      lits[i]->kind = SchemaNode::Kind::kLiteral;
      lits[i]->text = texts[i];
    }
  }
};
const AnyNodes& any_nodes() {
  static const AnyNodes nodes;
  return nodes;
}

}  // namespace

bool JsonPrefix::Frame::operator==(const Frame& o) const {
  return node == o.node && st == o.st && num == o.num && utf8_left == o.utf8_left && utf8_lo == o.utf8_lo &&
         utf8_hi == o.utf8_hi && hex_left == o.hex_left && pos == o.pos && lit == o.lit && count == o.count &&
         seen == o.seen && negative == o.negative;
}

JsonPrefix::JsonPrefix(std::shared_ptr<const JsonSchema> schema) : schema_(std::move(schema)) {
  Path p;
  p.frames.push_back(Frame{});
  p.frames.back().node = schema_->root();
  paths_.push_back(std::move(p));
}

bool JsonPrefix::complete() const {
  return std::any_of(paths_.begin(), paths_.end(), [](const Path& p) { return p.done; });
}

bool JsonPrefix::feed(uint8_t c) {
  std::vector<Path> next;
  for (Path& p : paths_) advance(std::move(p), c, next);
  if (next.empty()) return false;
  // Merge equal paths (readings that came back together), keep at most kMaxPaths.
  if (next.size() > 1) {
    size_t kept = 0;
    for (size_t i = 0; i < next.size() && kept < kMaxPaths; ++i) {
      const auto end = next.begin() + static_cast<std::ptrdiff_t>(kept);
      if (std::find(next.begin(), end, next[i]) != end) continue;
      if (kept != i) next[kept] = std::move(next[i]);  // not onto itself: a self-move empties a vector
      ++kept;
    }
    next.resize(kept);
  }
  paths_ = std::move(next);
  return true;
}

bool JsonPrefix::whitespace(Path& p, uint8_t c) { return is_ws(c) && ++p.ws_run <= kMaxWhitespaceRun; }

// The top frame's value is complete: pop it and move its parent on (or end the document).
void JsonPrefix::value_done(Path& p) {
  p.frames.pop_back();
  if (p.frames.empty()) {
    p.done = true;
    return;
  }
  Frame& parent = p.frames.back();
  switch (parent.st) {
    case State::kObjInKey:
      parent.st = State::kObjColon;
      break;
    case State::kObjInValue:
      if (parent.pos >= 0) parent.seen |= uint64_t{1} << parent.pos;
      parent.st = State::kObjAfter;
      break;
    case State::kArrInValue:
      ++parent.count;
      parent.st = State::kArrAfter;
      break;
    default:
      break;
  }
}

// An object's key starts (its opening quote was read): a generic string for an open object, else one
// path per property not yet seen, each matching that property's name.
void JsonPrefix::start_key(Path p, std::vector<Path>& out) const {
  if (p.frames.size() >= kMaxDepth) return;
  Frame& obj = p.frames.back();
  obj.st = State::kObjInKey;
  if (obj.node->open) {
    obj.pos = -1;
    Frame key;
    key.node = &any_nodes().string;
    key.st = State::kString;
    p.frames.push_back(key);
    out.push_back(std::move(p));
    return;
  }
  const SchemaNode& n = *obj.node;
  for (size_t i = 0; i < n.keys.size(); ++i) {
    if (obj.seen >> i & 1) continue;
    Path q = p;
    q.frames.back().pos = static_cast<int32_t>(i);
    Frame key;
    key.st = State::kLiteral;
    key.lit = &n.keys[i];
    key.pos = 1;  // after the quote
    q.frames.push_back(key);
    out.push_back(std::move(q));
  }
}

// The top frame (state kValue) starts its value with byte c (not whitespace).
void JsonPrefix::start_value(Path p, uint8_t c, std::vector<Path>& out) const {
  Frame& f = p.frames.back();
  const SchemaNode& n = *f.node;
  switch (n.kind) {
    case SchemaNode::Kind::kUnion:
      for (const SchemaNode* alt : n.alts) {
        Path q = p;
        q.frames.back().node = alt;
        start_value(std::move(q), c, out);
      }
      return;
    case SchemaNode::Kind::kAny: {
      const AnyNodes& a = any_nodes();
      const SchemaNode* to = c == '{' ? &a.object : c == '[' ? &a.array : c == '"' ? &a.string
                             : (c == '-' || is_digit(c)) ? &a.number : c == 't' ? &a.t : c == 'f' ? &a.f
                             : c == 'n' ? &a.null : nullptr;
      if (to == nullptr) return;
      f.node = to;
      start_value(std::move(p), c, out);
      return;
    }
    case SchemaNode::Kind::kObject:
      if (c != '{') return;
      f.st = State::kObjFirst;
      out.push_back(std::move(p));
      return;
    case SchemaNode::Kind::kArray:
      if (c != '[') return;
      f.st = State::kArrFirst;
      out.push_back(std::move(p));
      return;
    case SchemaNode::Kind::kString:
      if (c != '"') return;
      f.st = State::kString;
      out.push_back(std::move(p));
      return;
    case SchemaNode::Kind::kInteger:
    case SchemaNode::Kind::kNumber:
      if (c != '-' && !is_digit(c)) return;
      f.st = State::kNumber;
      f.num = c == '-' ? Num::kMinus : c == '0' ? Num::kZero : Num::kInt;
      f.negative = c == '-';
      f.count = c == '-' ? 0 : c - '0';
      if (n.kind == SchemaNode::Kind::kInteger && n.bounded() && !integer_fits(f, false)) return;
      out.push_back(std::move(p));
      return;
    case SchemaNode::Kind::kLiteral:
      if (n.text.empty() || c != static_cast<uint8_t>(n.text[0])) return;
      f.st = State::kLiteral;
      f.lit = &n.text;
      f.pos = 1;
      if (n.text.size() == 1) value_done(p);
      out.push_back(std::move(p));
      return;
  }
}

// Whether digits can still be appended to the integer's (none after a leading 0, at most 18 in all), and
// whether some value they can make is in [min_value, max_value]: after d with k more digits, the magnitudes
// d * 10^k .. d * 10^k + 10^k - 1 (d alone when complete); after a bare '-', every negative magnitude.
bool JsonPrefix::integer_fits(const Frame& f, bool complete) {
  const SchemaNode& n = *f.node;
  const __int128 lo = n.min_value, hi = n.max_value;
  if (f.num == Num::kMinus) return !complete && lo <= 0;  // "-0" is 0; "-1".. are below
  const __int128 d = f.count;
  auto meets = [&](__int128 a, __int128 b) {  // magnitudes [a, b] with the sign
    return f.negative ? (-b <= hi && -a >= lo) : (a <= hi && b >= lo);
  };
  if (meets(d, d)) return true;
  if (complete || d == 0) return false;
  __int128 span = 1;
  for (int digits = 1; d * span * 10 < static_cast<__int128>(1e18); ++digits) {
    span *= 10;
    if (meets(d * span, d * span + span - 1)) return true;
  }
  return false;
}

void JsonPrefix::number(Path p, uint8_t c, std::vector<Path>& out) const {
  Frame& f = p.frames.back();
  const bool integer = f.node->kind == SchemaNode::Kind::kInteger;
  const bool bounded = integer && f.node->bounded();
  auto to = [&](Num n) {
    if (bounded && is_digit(c)) {
      if (f.count >= INT64_MAX / 10 - 9) return;  // beyond any int64 bound
      f.count = f.count * 10 + (c - '0');
      f.num = n;
      if (!integer_fits(f, false)) return;
    }
    f.num = n;
    out.push_back(std::move(p));
  };
  switch (f.num) {
    case Num::kMinus:
      if (is_digit(c)) to(c == '0' ? Num::kZero : Num::kInt);
      return;
    case Num::kDot:
      if (is_digit(c)) to(Num::kFrac);
      return;
    case Num::kExp:
      if (c == '+' || c == '-') to(Num::kExpSign);
      else if (is_digit(c)) to(Num::kExpDigits);
      return;
    case Num::kExpSign:
      if (is_digit(c)) to(Num::kExpDigits);
      return;
    case Num::kInt:
    case Num::kFrac:
    case Num::kExpDigits:
      if (is_digit(c)) return to(f.num);
      [[fallthrough]];
    case Num::kZero:
      if (!integer && c == '.' && (f.num == Num::kZero || f.num == Num::kInt)) return to(Num::kDot);
      if (!integer && (c == 'e' || c == 'E') && f.num != Num::kExpDigits) return to(Num::kExp);
      // The number is complete; c belongs to what follows it.
      if (bounded && !integer_fits(f, true)) return;
      value_done(p);
      advance(std::move(p), c, out);
      return;
  }
}

void JsonPrefix::string_byte(Path p, uint8_t c, std::vector<Path>& out) const {
  Frame& f = p.frames.back();
  switch (f.st) {
    case State::kEscape:
      if (c == 'u') {
        f.hex_left = 4;
        f.st = State::kUnicode;
      } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
        f.st = State::kString;
      } else {
        return;
      }
      out.push_back(std::move(p));
      return;
    case State::kUnicode:
      if (!is_hex(c)) return;
      if (--f.hex_left == 0) f.st = State::kString;
      out.push_back(std::move(p));
      return;
    default:
      break;
  }
  const SchemaNode& n = *f.node;
  if (f.utf8_left > 0) {
    if (c < f.utf8_lo || c > f.utf8_hi) return;
    --f.utf8_left;
    f.utf8_lo = 0x80;
    f.utf8_hi = 0xBF;
  } else if (c == '"') {
    if (f.count < n.min_length) return;
    value_done(p);
  } else if (c < 0x20) {
    return;  // control characters must be escaped
  } else if (f.count >= n.max_length) {
    return;  // a character more than maxLength allows
  } else if (c == '\\') {
    ++f.count;
    f.st = State::kEscape;
  } else {
    ++f.count;
    // Well-formed UTF-8 only: no overlong forms, no UTF-16 surrogates, nothing past U+10FFFF.
    text::Utf8Lead lead;
    if (!text::utf8_lead(c, &lead)) return;
    f.utf8_left = static_cast<uint8_t>(lead.len - 1);
    f.utf8_lo = lead.second_lo;
    f.utf8_hi = lead.second_hi;
  }
  out.push_back(std::move(p));
}

void JsonPrefix::advance(Path p, uint8_t c, std::vector<Path>& out) const {
  if (p.done) return;  // nothing follows the top-level value
  Frame& f = p.frames.back();
  switch (f.st) {
    case State::kString:
    case State::kEscape:
    case State::kUnicode:
      return string_byte(std::move(p), c, out);
    case State::kNumber:
      return number(std::move(p), c, out);
    case State::kLiteral:
      if (c != static_cast<uint8_t>((*f.lit)[static_cast<size_t>(f.pos)])) return;
      if (static_cast<size_t>(++f.pos) == f.lit->size()) value_done(p);
      out.push_back(std::move(p));
      return;
    case State::kObjInKey:
    case State::kObjInValue:
    case State::kArrInValue:
      return;  // a child frame is on top, never this one
    default:
      break;
  }
  // Structural states: whitespace (bounded), else a byte of the structure.
  if (is_ws(c)) {
    if (whitespace(p, c)) out.push_back(std::move(p));
    return;
  }
  p.ws_run = 0;
  const SchemaNode& n = *f.node;
  const bool required_seen = (n.required & ~f.seen) == 0;
  switch (f.st) {
    case State::kValue:
      return start_value(std::move(p), c, out);
    case State::kObjFirst:
      if (c == '}' && required_seen) {
        value_done(p);
        out.push_back(std::move(p));
      } else if (c == '"') {
        start_key(std::move(p), out);
      }
      return;
    case State::kObjKey:
      if (c == '"') start_key(std::move(p), out);
      return;
    case State::kObjColon: {
      if (c != ':' || p.frames.size() >= kMaxDepth) return;
      f.st = State::kObjInValue;
      Frame v;
      v.node = f.pos >= 0 ? n.values[static_cast<size_t>(f.pos)] : n.any_value;
      p.frames.push_back(v);
      out.push_back(std::move(p));
      return;
    }
    case State::kObjAfter: {
      const bool key_left = n.open || n.keys.size() >= 64 || f.seen + 1 < (uint64_t{1} << n.keys.size());
      if (c == ',' && key_left) {
        f.st = State::kObjKey;
        out.push_back(std::move(p));
      } else if (c == '}' && required_seen) {
        value_done(p);
        out.push_back(std::move(p));
      }
      return;
    }
    case State::kArrFirst:
      if (c == ']') {
        if (n.min_items == 0) {
          value_done(p);
          out.push_back(std::move(p));
        }
        return;
      }
      if (n.max_items == 0 || p.frames.size() >= kMaxDepth) return;
      f.st = State::kArrInValue;
      {
        Frame item;
        item.node = n.items;
        p.frames.push_back(item);
      }
      return start_value(std::move(p), c, out);
    case State::kArrAfter:
      if (c == ',' && f.count < n.max_items && p.frames.size() < kMaxDepth) {
        f.st = State::kArrInValue;
        Frame item;
        item.node = n.items;
        p.frames.push_back(item);
        out.push_back(std::move(p));
      } else if (c == ']' && f.count >= n.min_items) {
        value_done(p);
        out.push_back(std::move(p));
      }
      return;
    default:
      return;
  }
}

}  // namespace ferry::serve
