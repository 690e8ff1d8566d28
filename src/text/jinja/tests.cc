// The built-in tests (`x is defined`, `x is string`, ...), with jinja2's semantics (tests.py).
#include <functional>
#include <unordered_map>

#include "text/jinja/eval.h"
#include "text/jinja/filters.h"
#include "text/jinja/render.h"

namespace ferry::text::jinja {

namespace {

const Value kUndef;
using TestFn = std::function<bool(Evaluator&, const Value&, CallArgs&)>;

Value other(const CallArgs& a) { return arg(a, 0, "other", kUndef); }

const std::unordered_map<std::string, TestFn>& table() {
  static const std::unordered_map<std::string, TestFn> t = [] {
    std::unordered_map<std::string, TestFn> m;
    m["defined"] = [](Evaluator&, const Value& v, CallArgs&) { return !v.is_undefined(); };
    m["undefined"] = [](Evaluator&, const Value& v, CallArgs&) { return v.is_undefined(); };
    m["none"] = [](Evaluator&, const Value& v, CallArgs&) { return v.is_none(); };
    m["boolean"] = [](Evaluator&, const Value& v, CallArgs&) { return v.is_bool(); };
    m["true"] = [](Evaluator&, const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); };
    m["false"] = [](Evaluator&, const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); };
    m["integer"] = [](Evaluator&, const Value& v, CallArgs&) { return v.is_int(); };
    m["float"] = [](Evaluator&, const Value& v, CallArgs&) { return v.is_float(); };
    m["number"] = [](Evaluator&, const Value& v, CallArgs&) { return v.is_number(); };
    m["string"] = [](Evaluator&, const Value& v, CallArgs&) { return v.is_string(); };
    m["mapping"] = [](Evaluator&, const Value& v, CallArgs&) { return v.is_dict() && !v.dict_ref().namespace_; };
    // Undefined is iterable (empty) and a sequence (it has a length and items) in jinja2's default Undefined.
    m["iterable"] = [](Evaluator&, const Value& v, CallArgs&) {
      return v.is_string() || v.is_list() || (v.is_dict() && !v.dict_ref().namespace_) || v.is_undefined();
    };
    m["sequence"] = m["iterable"];
    m["callable"] = [](Evaluator&, const Value& v, CallArgs&) { return v.is_object() && v.object()->callable(); };
    m["sameas"] = [](Evaluator&, const Value& v, CallArgs& a) {
      const Value& o = other(a);
      if (v.kind() != o.kind()) return false;
      switch (v.kind()) {
        case Kind::kNone:
        case Kind::kUndefined: return true;
        case Kind::kBool: return v.as_bool() == o.as_bool();
        case Kind::kInt: return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
        case Kind::kList: return v.list_ptr() == o.list_ptr();
        case Kind::kDict: return v.dict_ptr() == o.dict_ptr();
        case Kind::kObject: return v.object() == o.object();
        default: return false;
      }
    };
    m["escaped"] = [](Evaluator&, const Value&, CallArgs&) { return false; };
    m["in"] = [](Evaluator&, const Value& v, CallArgs& a) { return contains(arg(a, 0, "seq", kUndef), v); };
    m["divisibleby"] = [](Evaluator&, const Value& v, CallArgs& a) {
      return mod(v, arg(a, 0, "num", kUndef)).as_double() == 0.0;
    };
    m["even"] = [](Evaluator&, const Value& v, CallArgs&) { return mod(v, Value(int64_t{2})).as_double() == 0.0; };
    m["odd"] = [](Evaluator&, const Value& v, CallArgs&) { return mod(v, Value(int64_t{2})).as_double() == 1.0; };
    m["lower"] = [](Evaluator&, const Value& v, CallArgs&) {
      CallArgs none;
      return get_method(Value(py_str(v)), "islower").object()->call(none).truthy();
    };
    m["upper"] = [](Evaluator&, const Value& v, CallArgs&) {
      CallArgs none;
      return get_method(Value(py_str(v)), "isupper").object()->call(none).truthy();
    };
    m["eq"] = m["equalto"] = m["=="] = [](Evaluator&, const Value& v, CallArgs& a) { return equals(v, other(a)); };
    m["ne"] = m["!="] = [](Evaluator&, const Value& v, CallArgs& a) { return !equals(v, other(a)); };
    m["lt"] = m["lessthan"] = m["<"] = [](Evaluator&, const Value& v, CallArgs& a) { return less(v, other(a)); };
    m["gt"] = m["greaterthan"] = m[">"] = [](Evaluator&, const Value& v, CallArgs& a) { return less(other(a), v); };
    m["le"] =
        m["<="] = [](Evaluator&, const Value& v, CallArgs& a) { return less(v, other(a)) || equals(v, other(a)); };
    m["ge"] =
        m[">="] = [](Evaluator&, const Value& v, CallArgs& a) { return less(other(a), v) || equals(v, other(a)); };
    m["filter"] = [](Evaluator&, const Value& v, CallArgs&) { return v.is_string() && filter_exists(v.str()); };
    m["test"] = [](Evaluator&, const Value& v, CallArgs&) { return v.is_string() && test_exists(v.str()); };
    return m;
  }();
  return t;
}

}  // namespace

bool test_exists(const std::string& name) { return table().count(name) != 0; }

bool Evaluator::apply_test(const std::string& name, const Value& subject, CallArgs& args) {
  auto it = table().find(name);
  if (it == table().end()) throw RenderError("No test named '" + name + "'.");
  return it->second(*this, subject, args);
}

}  // namespace ferry::text::jinja
