// Expressions: names, literals, operators, attribute / item / slice lookup and calls.
#include <cmath>

#include "text/jinja/eval.h"
#include "text/jinja/render.h"
#include "text/jinja/utf8.h"

namespace ferry::text::jinja {

namespace {

[[noreturn]] void undefined_error(const Value& v, const std::string& what) {
  const std::string& hint = v.undefined_hint();
  throw RenderError(hint.empty() ? what : hint);
}

std::string object_name(const Value& v) {
  switch (v.kind()) {
    case Kind::kNone: return "None";
    case Kind::kString: return "str object";
    case Kind::kList: return v.list_ref().tuple ? "tuple object" : "list object";
    case Kind::kDict: return "dict object";
    case Kind::kObject: return v.object()->repr();
    default: return v.type_name() + " object";
  }
}

Value no_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(quoted(object_name(obj)) + " has no attribute " + quoted(name));
}

// Python's slice.indices for a sequence of length n.
void slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step, int64_t& a, int64_t& b,
                   int64_t& st) {
  auto as_index = [](const Value& v, const char* what) {
    if (!(v.is_int() || v.is_bool())) throw RenderError(std::string("slice ") + what + " must be an integer or None");
    return v.as_int();
  };
  st = step.is_none() || step.is_undefined() ? 1 : as_index(step, "step");
  if (st == 0) throw RenderError("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (v.is_none() || v.is_undefined()) return dflt;
    int64_t i = as_index(v, "index");
    if (i < 0) i += n;
    if (st > 0) return std::min(std::max<int64_t>(i, 0), n);
    return std::min(std::max<int64_t>(i, -1), n - 1);
  };
  a = clamp(start, st > 0 ? 0 : n - 1);
  b = clamp(stop, st > 0 ? n : -1);
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::kUndefined: undefined_error(obj, "'" + name + "' is undefined");
    case Kind::kDict: {
      if (!obj.dict_ref().namespace_) {
        Value m = get_method(obj, name);
        if (!m.is_undefined()) return m;
      }
      if (const Value* v = obj.dict_ref().find(std::string_view(name))) return *v;
      return no_attribute(obj, name);
    }
    case Kind::kString:
    case Kind::kList: {
      Value m = get_method(obj, name);
      return m.is_undefined() ? no_attribute(obj, name) : m;
    }
    case Kind::kObject: return obj.object()->attr(name);
    default: return no_attribute(obj, name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Kind::kUndefined: undefined_error(obj, "undefined value has no item");
    case Kind::kDict:
      if (key.is_list() && !key.list_ref().tuple) throw RenderError("unhashable type: 'list'");
      if (key.is_dict()) throw RenderError("unhashable type: 'dict'");
      if (const Value* v = obj.dict_ref().find(key)) return *v;
      if (key.is_string() && !obj.dict_ref().namespace_) {
        Value m = get_method(obj, key.str());
        if (!m.is_undefined()) return m;
      }
      return key.is_string() ? no_attribute(obj, key.str())
                             : Value::undefined("'dict object' has no attribute " + py_repr(key));
    case Kind::kList:
    case Kind::kString: {
      if (key.is_int() || key.is_bool()) {
        int64_t n = length(obj), i = key.as_int();
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined(object_name(obj) + " has no element " + py_str(key));
        if (obj.is_list()) return obj.list_ref().items[static_cast<size_t>(i)];
        std::string ch = static_cast<int64_t>(obj.str().size()) == n
                             ? obj.str().substr(static_cast<size_t>(i), 1)
                             : std::string(utf8_chars(obj.str())[static_cast<size_t>(i)]);
        return obj.is_markup() ? Value::markup(std::move(ch)) : Value(std::move(ch));
      }
      if (key.is_string()) {
        Value m = get_method(obj, key.str());
        return m.is_undefined() ? no_attribute(obj, key.str()) : m;
      }
      return Value::undefined(object_name(obj) + " has no element " + py_repr(key));
    }
    case Kind::kObject:
      if (key.is_string()) return obj.object()->attr(key.str());
      return Value::undefined(quoted(object_name(obj)) + " has no element " + py_repr(key));
    default: return Value::undefined(quoted(object_name(obj)) + " has no attribute " + py_repr(key));
  }
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) undefined_error(obj, "undefined value has no item");
  if (!obj.is_string() && !obj.is_list()) throw RenderError("'" + obj.type_name() + "' object is not subscriptable");
  int64_t n = length(obj), a, b, st;
  slice_indices(n, start, stop, step, a, b, st);
  if (obj.is_list()) {
    std::vector<Value> out;
    for (int64_t i = a; st > 0 ? i < b : i > b; i += st) out.push_back(obj.list_ref().items[static_cast<size_t>(i)]);
    return Value::list(std::move(out), obj.list_ref().tuple);
  }
  const bool ascii = static_cast<int64_t>(obj.str().size()) == n;
  std::vector<std::string_view> chars;
  if (!ascii) chars = utf8_chars(obj.str());
  auto wrap = [&](std::string s) { return obj.is_markup() ? Value::markup(std::move(s)) : Value(std::move(s)); };
  if (ascii && st == 1)
    return wrap(obj.str().substr(static_cast<size_t>(a), static_cast<size_t>(std::max<int64_t>(b - a, 0))));
  std::string out;
  for (int64_t i = a; st > 0 ? i < b : i > b; i += st) {
    if (ascii)
      out += obj.str()[static_cast<size_t>(i)];
    else
      out.append(chars[static_cast<size_t>(i)]);
  }
  return wrap(std::move(out));
}

CallArgs Evaluator::eval_args(const Expr& e, Scope* scope, size_t first) {
  CallArgs a;
  for (size_t i = first; i < e.items.size(); ++i) a.args.push_back(eval(*e.items[i], scope));
  for (const auto& [k, v] : e.kwargs) a.kwargs.emplace_back(k, eval(*v, scope));
  if (e.dyn_args)
    for (Value& v : iterate(eval(*e.dyn_args, scope))) a.args.push_back(std::move(v));
  if (e.dyn_kwargs) {
    Value d = eval(*e.dyn_kwargs, scope);
    if (!d.is_dict()) throw RenderError("argument after ** must be a mapping, not " + d.type_name());
    for (const auto& [k, v] : d.dict_ref().items) {
      if (!k.is_string()) throw RenderError("keywords must be strings");
      a.kwargs.emplace_back(k.str(), v);
    }
  }
  return a;
}

Value Evaluator::eval_call(const Expr& e, Scope* scope) {
  Value fn = e.a->kind == ExprKind::kAttr ? get_attr(eval(*e.a->a, scope), e.a->name) : eval(*e.a, scope);
  CallArgs args = eval_args(e, scope);
  if (fn.is_object() && fn.object()->callable()) return fn.object()->call(args);
  if (fn.is_undefined()) undefined_error(fn, "undefined value is not callable");
  throw RenderError("'" + fn.type_name() + "' object is not callable");
}

Value Evaluator::eval(const Expr& e, Scope* scope) {
  switch (e.kind) {
    case ExprKind::kConst: return e.value;
    case ExprKind::kName: {
      if (const Value* v = scope->find(e.name)) return *v;
      return Value::undefined("'" + e.name + "' is undefined");
    }
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.items.size());
      for (const ExprPtr& i : e.items) items.push_back(eval(*i, scope));
      return Value::list(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      Value d = Value::dict();
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        Value k = eval(*e.items[i], scope);
        d.dict_ref().set(k, eval(*e.items[i + 1], scope));
      }
      return d;
    }
    case ExprKind::kAttr: return get_attr(eval(*e.a, scope), e.name);
    case ExprKind::kItem: return get_item(eval(*e.a, scope), eval(*e.b, scope));
    case ExprKind::kSlice: {
      if (!e.a) throw RenderError("a slice outside of a subscript");
      Value obj = eval(*e.a, scope);
      Value parts[3];
      for (int i = 0; i < 3; ++i) parts[i] = e.items[i] ? eval(*e.items[i], scope) : Value::none();
      return get_slice(obj, parts[0], parts[1], parts[2]);
    }
    case ExprKind::kCall: return eval_call(e, scope);
    case ExprKind::kFilter: {
      Value subject = eval(*e.a, scope);
      CallArgs args = eval_args(e, scope);
      return apply_filter(e.name, std::move(subject), args, e.line);
    }
    case ExprKind::kTest: {
      Value subject = eval(*e.a, scope);
      CallArgs args = eval_args(e, scope);
      return Value(apply_test(e.name, subject, args));
    }
    case ExprKind::kNot: return Value(!eval(*e.a, scope).truthy());
    case ExprKind::kNeg: {
      Value v = eval(*e.a, scope);
      if (v.is_undefined()) undefined_error(v, "undefined value in unary -");
      return negate(v);
    }
    case ExprKind::kPos: {
      Value v = eval(*e.a, scope);
      if (!v.is_number()) throw RenderError("bad operand type for unary +: '" + v.type_name() + "'");
      return v.is_bool() ? Value(v.as_int()) : v;
    }
    case ExprKind::kBinary: {
      const std::string& op = e.name;
      if (op == "and") {
        Value l = eval(*e.a, scope);
        return l.truthy() ? eval(*e.b, scope) : l;
      }
      if (op == "or") {
        Value l = eval(*e.a, scope);
        return l.truthy() ? l : eval(*e.b, scope);
      }
      Value l = eval(*e.a, scope), r = eval(*e.b, scope);
      if (l.is_undefined()) undefined_error(l, "undefined value in '" + op + "'");
      if (r.is_undefined()) undefined_error(r, "undefined value in '" + op + "'");
      if (op == "+") return add(l, r);
      if (op == "-") return sub(l, r);
      if (op == "*") return mul(l, r);
      if (op == "/") return truediv(l, r);
      if (op == "//") return floordiv(l, r);
      if (op == "%") return mod(l, r);
      return power(l, r);
    }
    case ExprKind::kConcat: {
      std::string out;
      for (const ExprPtr& i : e.items) {
        std::string part = py_str(eval(*i, scope));
        check_built_bytes(out.size() + part.size(), "concatenated string");
        out += part;
      }
      return Value(std::move(out));
    }
    case ExprKind::kCompare: {
      Value left = eval(*e.a, scope);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.items[i], scope);
        const std::string& op = e.ops[i];
        bool ok;
        if (op == "==")
          ok = equals(left, right);
        else if (op == "!=")
          ok = !equals(left, right);
        else if (op == "<")
          ok = less(left, right);
        else if (op == ">")
          ok = less(right, left);
        else if (op == "<=")
          ok = less(left, right) || equals(left, right);
        else if (op == ">=")
          ok = less(right, left) || equals(left, right);
        else if (op == "in")
          ok = contains(right, left);
        else
          ok = !contains(right, left);
        if (!ok) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case ExprKind::kCond:
      if (eval(*e.a, scope).truthy()) return eval(*e.b, scope);
      return e.c ? eval(*e.c, scope)
                 : Value::undefined("the inline if-expression evaluated to false and no else section was defined");
  }
  return Value();
}

Value arg(const CallArgs& a, size_t i, const char* name, const Value& fallback) {
  if (i < a.args.size()) return a.args[i];
  for (const auto& [k, v] : a.kwargs)
    if (k == name) return v;
  return fallback;
}

bool sort_less(const Value& a, const Value& b, bool case_sensitive) {
  if (!case_sensitive && a.is_string() && b.is_string()) return py_lower(a.str()) < py_lower(b.str());
  return less(a, b);
}

}  // namespace ferry::text::jinja
