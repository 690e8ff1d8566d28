// The values a Jinja template computes with, modelled on the Python objects jinja2 sees when Hugging Face
// renders a chat template: undefined, None, bool, int, float, str, list / tuple, dict (insertion-ordered),
// and objects (namespace(), the loop variable, macros, built-in functions, bound methods). Lists, dicts
// and objects are shared by reference, as in Python; strings are UTF-8 and are indexed, sliced and
// measured by code point. str() and repr() print as Python does (render.h has the float and string forms).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ferry::text::jinja {

// An error while rendering: a message without the line, which the evaluator adds.
class RenderError : public std::runtime_error {
 public:
  explicit RenderError(const std::string& what) : std::runtime_error(what) {}
};

// raise_exception(message) in a template: its message is reported as is.
class TemplateRaised : public std::runtime_error {
 public:
  explicit TemplateRaised(const std::string& what) : std::runtime_error(what) {}
};

class Value;
struct ListObj;
struct DictObj;
class Object;
using ListPtr = std::shared_ptr<ListObj>;
using DictPtr = std::shared_ptr<DictObj>;
using ObjectPtr = std::shared_ptr<Object>;

enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kObject };

// Arguments of a call: positional, then keyword in the order written.
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

class Value {
 public:
  Value() = default;  // undefined
  static Value undefined(std::string hint = {});
  static Value none();
  Value(bool b);                                        // NOLINT: implicit on purpose, like Python's literals
  Value(int64_t i);                                     // NOLINT
  Value(int i) : Value(static_cast<int64_t>(i)) {}      // NOLINT
  Value(double f);                                      // NOLINT
  Value(std::string s);                                 // NOLINT
  Value(std::string_view s) : Value(std::string(s)) {}  // NOLINT
  Value(const char* s) : Value(std::string(s)) {}       // NOLINT
  Value(ListPtr l);                                     // NOLINT
  Value(DictPtr d);                                     // NOLINT
  Value(ObjectPtr o);                                   // NOLINT
  // A "safe" string (jinja2's Markup, from |safe or |escape): adding a plain string to it, formatting into it
  // or passing strings to its methods HTML-escapes those strings first, as Markup does.
  static Value markup(std::string s);
  static Value list(std::vector<Value> items = {}, bool tuple = false);
  static Value dict();

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }  // bool is not an int here (Python's isinstance says so)
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_object() const { return kind_ == Kind::kObject; }
  bool is_markup() const { return kind_ == Kind::kString && b_; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }  // bool or int
  double as_double() const;                                                    // any number
  const std::string& str() const { return *s_; }                               // kString only
  const ListPtr& list_ptr() const { return l_; }
  const DictPtr& dict_ptr() const { return d_; }
  const ObjectPtr& object() const { return o_; }
  ListObj& list_ref() const { return *l_; }
  DictObj& dict_ref() const { return *d_; }
  // For undefined: what is missing, for the message of an error that uses it ("'x' is undefined").
  const std::string& undefined_hint() const;

  bool truthy() const;
  // Python's type name, for error messages: "str", "int", "dict", "undefined", ...
  std::string type_name() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;  // the string, or an undefined value's hint
  ListPtr l_;
  DictPtr d_;
  ObjectPtr o_;
};

struct ListObj {
  std::vector<Value> items;
  bool tuple = false;  // prints as (a, b) and cannot be changed
};

// A dict that keeps insertion order and hashes keys as Python does (1, 1.0 and True are one key).
struct DictObj {
  std::vector<std::pair<Value, Value>> items;
  bool namespace_ = false;  // namespace(): attributes are its items, and `set ns.attr` may change them

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(const Value& key, Value value);
  bool erase(const Value& key);
  size_t size() const { return items.size(); }

 private:
  std::unordered_map<std::string, size_t> index_;
};

// The key of a value in a dict's index ("s:text", "n:1", ...); throws RenderError for unhashable values.
std::string hash_key(const Value& key);

// Objects that are not data: macros, built-in functions, bound methods, the loop variable, cyclers.
class Object {
 public:
  virtual ~Object() = default;
  // The attribute `name`, or an undefined value when there is none.
  virtual Value attr(std::string_view name) const;
  virtual bool callable() const { return false; }
  virtual Value call(CallArgs& args) const;
  // What str() of the object prints.
  virtual std::string repr() const = 0;
};

// A callable implemented in C++ (built-in functions and bound methods).
class Function : public Object {
 public:
  using Fn = std::function<Value(CallArgs&)>;
  Function(std::string name, Fn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  bool callable() const override { return true; }
  Value call(CallArgs& args) const override { return fn_(args); }
  std::string repr() const override { return "<built-in function " + name_ + ">"; }

 private:
  std::string name_;
  Fn fn_;
};

Value make_function(std::string name, Function::Fn fn);

// Counts nesting in the recursive walks over values (repr, JSON, equality, ordering) and throws RenderError
// past 512 levels, so a list that contains itself or a very deep JSON input is an error, not a stack overflow.
class NestingGuard {
 public:
  explicit NestingGuard(const char* what);
  ~NestingGuard();
  NestingGuard(const NestingGuard&) = delete;
  NestingGuard& operator=(const NestingGuard&) = delete;
};

// While one lives on a thread, every list and dict created there is recorded, and its destructor empties those
// still alive: a template can make a container hold itself (l.append(l), ns.self = ns), a reference cycle that
// would otherwise never be freed. One per render; nothing created during a render outlives it.
class ContainerArena {
 public:
  ContainerArena();
  ~ContainerArena();
  ContainerArena(const ContainerArena&) = delete;
  ContainerArena& operator=(const ContainerArena&) = delete;

 private:
  friend class Value;
  std::vector<std::weak_ptr<ListObj>> lists_;
  std::vector<std::weak_ptr<DictObj>> dicts_;
  ContainerArena* outer_;
};

// int(f) for a float: truncated toward zero; RenderError when it is not finite or does not fit 64 bits.
int64_t float_to_int(double f);

// 'text' in single quotes, for messages.
std::string quoted(std::string_view text);

// The largest string (bytes) or list (items) a template may build from a count it computes ('-' * n, a
// width of n spaces): beyond it, RenderError "<what> too long" instead of an allocation the process cannot make.
// 64 MiB of text is far beyond any prompt a model's context holds; a million items beyond any message list.
inline constexpr uint64_t kMaxBuiltBytes = uint64_t{1} << 26;
inline constexpr uint64_t kMaxBuiltItems = uint64_t{1} << 20;
// Throws RenderError "<what> too long" when a string the template builds would exceed kMaxBuiltBytes.
void check_built_bytes(uint64_t bytes, const char* what);
// n spaces (none for n <= 0), within kMaxBuiltBytes.
std::string spaces(int64_t n, const char* what);

// Python semantics of the operators the templates use; each throws RenderError where Python raises.
bool equals(const Value& a, const Value& b);
bool less(const Value& a, const Value& b);                 // a < b
bool contains(const Value& container, const Value& item);  // item in container
Value add(const Value& a, const Value& b);
Value sub(const Value& a, const Value& b);
Value mul(const Value& a, const Value& b);
Value truediv(const Value& a, const Value& b);
Value floordiv(const Value& a, const Value& b);
Value mod(const Value& a, const Value& b);  // numbers, or printf-style formatting of a string
Value power(const Value& a, const Value& b);
Value negate(const Value& a);

// Iteration as a for loop sees it: a list's items, a dict's keys, a string's characters; undefined is
// empty. Throws for other values.
std::vector<Value> iterate(const Value& v);
// len(): strings in code points, lists, dicts; undefined is 0. Throws for other values.
int64_t length(const Value& v);

}  // namespace ferry::text::jinja
