// Values and their Python semantics: truthiness, hashing, equality, ordering and the arithmetic operators.
#include "text/jinja/value.h"

#include <algorithm>
#include <cmath>

#include "text/jinja/render.h"
#include "text/jinja/utf8.h"

namespace ferry::text::jinja {

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value::Value(bool b) : kind_(Kind::kBool), b_(b) {}
Value::Value(int64_t i) : kind_(Kind::kInt), i_(i) {}
Value::Value(double f) : kind_(Kind::kFloat), f_(f) {}
Value::Value(std::string s) : kind_(Kind::kString), s_(std::make_shared<const std::string>(std::move(s))) {}
Value::Value(ListPtr l) : kind_(Kind::kList), l_(std::move(l)) {}
Value::Value(DictPtr d) : kind_(Kind::kDict), d_(std::move(d)) {}
Value::Value(ObjectPtr o) : kind_(Kind::kObject), o_(std::move(o)) {}

Value Value::markup(std::string s) {
  Value v(std::move(s));
  v.b_ = true;
  return v;
}

namespace {
thread_local ContainerArena* g_arena = nullptr;
}  // namespace

ContainerArena::ContainerArena() : outer_(g_arena) { g_arena = this; }

ContainerArena::~ContainerArena() {
  g_arena = outer_;
  for (auto& w : lists_)
    if (auto l = w.lock()) l->items.clear();
  for (auto& w : dicts_)
    if (auto d = w.lock()) *d = DictObj();
}

Value Value::list(std::vector<Value> items, bool tuple) {
  auto l = std::make_shared<ListObj>();
  l->items = std::move(items);
  l->tuple = tuple;
  if (g_arena) g_arena->lists_.push_back(l);
  return Value(std::move(l));
}

Value Value::dict() {
  auto d = std::make_shared<DictObj>();
  if (g_arena) g_arena->dicts_.push_back(d);
  return Value(std::move(d));
}

double Value::as_double() const {
  switch (kind_) {
    case Kind::kBool: return b_ ? 1.0 : 0.0;
    case Kind::kInt: return static_cast<double>(i_);
    case Kind::kFloat: return f_;
    default: return 0.0;
  }
}

const std::string& Value::undefined_hint() const {
  static const std::string kEmpty;
  return kind_ == Kind::kUndefined && s_ ? *s_ : kEmpty;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return f_ != 0.0;
    case Kind::kString: return !s_->empty();
    case Kind::kList: return !l_->items.empty();
    case Kind::kDict: return d_->namespace_ || !d_->items.empty();
    case Kind::kObject: return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return l_->tuple ? "tuple" : "list";
    case Kind::kDict: return d_->namespace_ ? "Namespace" : "dict";
    case Kind::kObject: return o_->callable() ? "function" : "object";
  }
  return "object";
}

// ---- dict --------------------------------------------------------------------------------------------

std::string hash_key(const Value& key) {
  switch (key.kind()) {
    case Kind::kString: return "s:" + key.str();
    case Kind::kNone: return "N";
    case Kind::kBool:
    case Kind::kInt: return "n:" + std::to_string(key.as_int());
    case Kind::kFloat: {
      double f = key.as_double();
      if (std::isfinite(f) && f == std::floor(f) && std::fabs(f) < 9.2e18)
        return "n:" + std::to_string(static_cast<int64_t>(f));
      return "f:" + float_repr(f);
    }
    case Kind::kList:
      if (key.list_ref().tuple) {
        NestingGuard guard("while hashing");
        std::string k = "t:";
        for (const Value& v : key.list_ref().items) k += hash_key(v) + "\x1f";
        return k;
      }
      break;
    default: break;
  }
  throw RenderError("unhashable type: '" + key.type_name() + "'");
}

const Value* DictObj::find(const Value& key) const {
  if (!(key.is_string() || key.is_number() || key.is_none() || key.is_list())) return nullptr;
  auto it = index_.find(hash_key(key));
  return it == index_.end() ? nullptr : &items[it->second].second;
}

const Value* DictObj::find(std::string_view key) const {
  auto it = index_.find("s:" + std::string(key));
  return it == index_.end() ? nullptr : &items[it->second].second;
}

void DictObj::set(const Value& key, Value value) {
  std::string k = hash_key(key);
  auto it = index_.find(k);
  if (it != index_.end()) {
    items[it->second].second = std::move(value);
    return;
  }
  index_.emplace(std::move(k), items.size());
  items.emplace_back(key, std::move(value));
}

bool DictObj::erase(const Value& key) {
  auto it = index_.find(hash_key(key));
  if (it == index_.end()) return false;
  items.erase(items.begin() + static_cast<std::ptrdiff_t>(it->second));
  index_.clear();
  for (size_t i = 0; i < items.size(); ++i) index_.emplace(hash_key(items[i].first), i);
  return true;
}

// ---- objects -----------------------------------------------------------------------------------------

Value Object::attr(std::string_view name) const {
  return Value::undefined(quoted(repr()) + " has no attribute " + quoted(name));
}

Value Object::call(CallArgs&) const { throw RenderError("'" + repr() + "' is not callable"); }

namespace {
thread_local int g_nesting = 0;
constexpr int kMaxNesting = 512;
}  // namespace

NestingGuard::NestingGuard(const char* what) {
  if (++g_nesting > kMaxNesting) {
    --g_nesting;
    throw RenderError(std::string("maximum recursion depth exceeded ") + what);
  }
}

NestingGuard::~NestingGuard() { --g_nesting; }

int64_t float_to_int(double f) {
  if (!std::isfinite(f)) throw RenderError("cannot convert float infinity or NaN to integer");
  if (f >= 9223372036854775808.0 || f < -9223372036854775808.0) throw RenderError("integer overflow (beyond 64 bits)");
  return static_cast<int64_t>(f);
}

std::string quoted(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '\'';
  out.append(text);
  out += '\'';
  return out;
}

Value make_function(std::string name, Function::Fn fn) {
  return Value(std::make_shared<Function>(std::move(name), std::move(fn)));
}

// ---- comparison ----------------------------------------------------------------------------------------

bool equals(const Value& a, const Value& b) {
  NestingGuard guard("in comparison");
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return a.str() == b.str();
    case Kind::kList: {
      const auto& x = a.list_ref();
      const auto& y = b.list_ref();
      if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!equals(x.items[i], y.items[i])) return false;
      return true;
    }
    case Kind::kDict: {
      const auto& x = a.dict_ref();
      const auto& y = b.dict_ref();
      if (x.namespace_ || y.namespace_) return &x == &y;
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* o = y.find(k);
        if (!o || !equals(v, *o)) return false;
      }
      return true;
    }
    case Kind::kObject: return a.object() == b.object();
    default: return false;
  }
}

namespace {

[[noreturn]] void unsupported(const char* op, const Value& a, const Value& b) {
  throw RenderError(std::string("'") + op + "' not supported between instances of '" + a.type_name() + "' and '" +
                    b.type_name() + "'");
}

[[noreturn]] void bad_operands(const char* op, const Value& a, const Value& b) {
  throw RenderError(std::string("unsupported operand type(s) for ") + op + ": '" + a.type_name() + "' and '" +
                    b.type_name() + "'");
}

}  // namespace

bool less(const Value& a, const Value& b) {
  NestingGuard guard("in comparison");
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 byte order is code point order
  if (a.is_list() && b.is_list() && a.list_ref().tuple == b.list_ref().tuple) {
    const auto& x = a.list_ref().items;
    const auto& y = b.list_ref().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  unsupported("<", a, b);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kString:
      if (!item.is_string())
        throw RenderError("'in <string>' requires string as left operand, not " + item.type_name());
      return container.str().find(item.str()) != std::string::npos;
    case Kind::kList:
      for (const Value& v : container.list_ref().items)
        if (equals(v, item)) return true;
      return false;
    case Kind::kDict:
      if (item.is_list() && !item.list_ref().tuple) throw RenderError("unhashable type: 'list'");
      if (item.is_dict()) throw RenderError("unhashable type: 'dict'");
      return container.dict_ref().find(item) != nullptr;
    case Kind::kUndefined: return false;
    default: throw RenderError("argument of type '" + container.type_name() + "' is not iterable");
  }
}

// ---- arithmetic ----------------------------------------------------------------------------------------

void check_built_bytes(uint64_t bytes, const char* what) {
  if (bytes > kMaxBuiltBytes) throw RenderError(std::string(what) + " too long");
}

std::string spaces(int64_t n, const char* what) {
  if (n > 0) check_built_bytes(static_cast<uint64_t>(n), what);
  return std::string(static_cast<size_t>(std::max<int64_t>(n, 0)), ' ');
}

namespace {

Value repeat(const Value& seq, int64_t n) {
  // An empty sequence repeated stays empty (and is not looped over n times); the size checks divide
  // rather than multiply, so a huge n cannot wrap the product past the limit.
  if (seq.is_string()) {
    const std::string& s = seq.str();
    std::string out;
    if (n > 0 && !s.empty()) {
      if (static_cast<uint64_t>(n) > kMaxBuiltBytes / s.size()) throw RenderError("repeated string too long");
      out.reserve(s.size() * static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) out += s;
    }
    return seq.is_markup() ? Value::markup(std::move(out)) : Value(std::move(out));
  }
  const std::vector<Value>& items = seq.list_ref().items;
  std::vector<Value> out;
  if (n > 0 && !items.empty()) {
    if (static_cast<uint64_t>(n) > kMaxBuiltItems / items.size()) throw RenderError("repeated list too long");
    out.reserve(items.size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  }
  return Value::list(std::move(out), seq.list_ref().tuple);
}

bool is_intlike(const Value& v) { return v.is_int() || v.is_bool(); }

// Python's ints have no limit; these are 64-bit, so a result that does not fit is an error, not a wrap.
int64_t checked(bool overflow, int64_t r) {
  if (overflow) throw RenderError("integer overflow (beyond 64 bits)");
  return r;
}

}  // namespace

Value add(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return Value(a.as_double() + b.as_double());
    int64_t r;
    const bool overflow = __builtin_add_overflow(a.as_int(), b.as_int(), &r);
    return Value(checked(overflow, r));
  }
  if (a.is_string() && b.is_string()) {
    check_built_bytes(a.str().size() + b.str().size(), "concatenated string");
    if (a.is_markup() || b.is_markup())
      return Value::markup((a.is_markup() ? a.str() : html_escape(a.str())) +
                           (b.is_markup() ? b.str() : html_escape(b.str())));
    return Value(a.str() + b.str());
  }
  if (a.is_list() && b.is_list() && a.list_ref().tuple == b.list_ref().tuple) {
    if (a.list_ref().items.size() + b.list_ref().items.size() > kMaxBuiltItems)
      throw RenderError("concatenated list too long");
    std::vector<Value> out = a.list_ref().items;
    out.insert(out.end(), b.list_ref().items.begin(), b.list_ref().items.end());
    return Value::list(std::move(out), a.list_ref().tuple);
  }
  if (a.is_undefined() || b.is_undefined())
    throw RenderError((a.is_undefined() ? a : b).undefined_hint().empty()
                          ? std::string("undefined value in +")
                          : (a.is_undefined() ? a : b).undefined_hint());
  if (a.is_string() || b.is_string())
    throw RenderError("can only concatenate str (not \"" + (a.is_string() ? b : a).type_name() + "\") to str");
  bad_operands("+", a, b);
}

Value sub(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return Value(a.as_double() - b.as_double());
    int64_t r;
    const bool overflow = __builtin_sub_overflow(a.as_int(), b.as_int(), &r);
    return Value(checked(overflow, r));
  }
  bad_operands("-", a, b);
}

Value mul(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return Value(a.as_double() * b.as_double());
    int64_t r;
    const bool overflow = __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
    return Value(checked(overflow, r));
  }
  if ((a.is_string() || a.is_list()) && is_intlike(b)) return repeat(a, b.as_int());
  if ((b.is_string() || b.is_list()) && is_intlike(a)) return repeat(b, a.as_int());
  bad_operands("*", a, b);
}

Value truediv(const Value& a, const Value& b) {
  if (!(a.is_number() && b.is_number())) bad_operands("/", a, b);
  if (b.as_double() == 0.0) throw RenderError("division by zero");
  return Value(a.as_double() / b.as_double());
}

Value floordiv(const Value& a, const Value& b) {
  if (!(a.is_number() && b.is_number())) bad_operands("//", a, b);
  if (b.as_double() == 0.0) throw RenderError("integer division or modulo by zero");
  if (a.is_float() || b.is_float()) return Value(std::floor(a.as_double() / b.as_double()));
  int64_t x = a.as_int(), y = b.as_int();
  if (x == INT64_MIN && y == -1) checked(true, 0);
  int64_t q = x / y;
  if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
  return Value(q);
}

Value mod(const Value& a, const Value& b) {
  if (a.is_string()) {
    if (a.is_markup()) return Value::markup(percent_format(a.str(), b, true));
    return Value(percent_format(a.str(), b));
  }
  if (!(a.is_number() && b.is_number())) bad_operands("%", a, b);
  if (b.as_double() == 0.0) throw RenderError("integer division or modulo by zero");
  if (a.is_float() || b.is_float()) {
    double x = a.as_double(), y = b.as_double();
    double r = std::fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return Value(r);
  }
  int64_t x = a.as_int(), y = b.as_int();
  if (y == -1) return Value(int64_t{0});
  int64_t r = x % y;
  if (r != 0 && ((r < 0) != (y < 0))) r += y;
  return Value(r);
}

Value power(const Value& a, const Value& b) {
  if (!(a.is_number() && b.is_number())) bad_operands("** or pow()", a, b);
  if (is_intlike(a) && is_intlike(b) && b.as_int() >= 0) {
    int64_t r = 1, base = a.as_int();
    for (int64_t e = b.as_int(); e > 0; e >>= 1) {  // by squaring: 64 steps at most
      if ((e & 1) && __builtin_mul_overflow(r, base, &r)) checked(true, 0);
      if (e > 1 && __builtin_mul_overflow(base, base, &base)) checked(true, 0);
    }
    return Value(r);
  }
  return Value(std::pow(a.as_double(), b.as_double()));
}

Value negate(const Value& a) {
  if (a.is_float()) return Value(-a.as_double());
  if (a.is_number()) return Value(checked(a.as_int() == INT64_MIN, -a.as_int()));
  throw RenderError("bad operand type for unary -: '" + a.type_name() + "'");
}

// ---- iteration ----------------------------------------------------------------------------------------

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kList: return v.list_ref().items;
    case Kind::kDict: {
      if (v.dict_ref().namespace_) break;
      std::vector<Value> keys;
      keys.reserve(v.dict_ref().size());
      for (const auto& kv : v.dict_ref().items) keys.push_back(kv.first);
      return keys;
    }
    case Kind::kString: {
      std::vector<Value> chars;
      for (std::string_view c : utf8_chars(v.str())) chars.emplace_back(c);
      return chars;
    }
    case Kind::kUndefined: return {};
    default: break;
  }
  throw RenderError("'" + v.type_name() + "' object is not iterable");
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Kind::kString: return utf8_length(v.str());
    case Kind::kList: return static_cast<int64_t>(v.list_ref().items.size());
    case Kind::kDict:
      if (v.dict_ref().namespace_) break;
      return static_cast<int64_t>(v.dict_ref().size());
    case Kind::kUndefined: return 0;
    default: break;
  }
  throw RenderError("object of type '" + v.type_name() + "' has no len()");
}

}  // namespace ferry::text::jinja
