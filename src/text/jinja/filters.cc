// The built-in filters, with jinja2's semantics (filters.py), and `tojson` as Hugging Face defines it
// (json.dumps with ensure_ascii=False). `from_json` is an extension llama.cpp's templates use; jinja2 has
// no such filter.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <unordered_map>

#include "text/jinja/eval.h"
#include "text/jinja/filters.h"
#include "text/jinja/json.h"
#include "text/jinja/render.h"
#include "text/jinja/utf8.h"

namespace ferry::text::jinja {

namespace {

const Value kNone = Value::none();
const Value kUndef;
const Value kFalse(false);

using FilterFn = std::function<Value(Evaluator&, const Value&, CallArgs&)>;

// soft_str: what str() of the value is (undefined is "").
std::string s_of(const Value& v) { return py_str(v); }

// A string result that stays Markup when its input was.
Value same_kind(const Value& input, std::string s) {
  return input.is_markup() ? Value::markup(std::move(s)) : Value(std::move(s));
}

int64_t to_int_arg(const Value& v, const char* what) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  if (v.is_float()) return float_to_int(v.as_double());
  throw RenderError(std::string(what) + " must be an integer, not " + v.type_name());
}

// Dotted attribute path ("a.b", "0"), each part looked up item-first as jinja2's getitem does.
Value attr_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const std::optional<int64_t> index = decimal_index(part);
    v = get_item(v, index ? Value(*index) : Value(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

Value lower_if(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value(py_lower(v.str())) : v;
}

Value list_of(std::vector<Value> items) { return Value::list(std::move(items)); }

// int(str) as Python parses it: optional sign, digits with single underscores, surrounding whitespace.
bool parse_int(const std::string& text, int base, int64_t& out) {
  std::string s = py_strip(text, nullptr, true, true);
  size_t i = 0;
  bool neg = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  if (i >= s.size()) return false;
  std::string digits;
  for (; i < s.size(); ++i) {
    if (s[i] == '_' && !digits.empty() && i + 1 < s.size() && s[i + 1] != '_') continue;
    int d = s[i] >= '0' && s[i] <= '9'                     ? s[i] - '0'
            : (s[i] | 0x20) >= 'a' && (s[i] | 0x20) <= 'z' ? (s[i] | 0x20) - 'a' + 10
                                                           : 99;
    if (d >= base) return false;
    digits += s[i];
  }
  if (digits.empty()) return false;
  out = static_cast<int64_t>(std::strtoull(digits.c_str(), nullptr, base));
  if (neg) out = -out;
  return true;
}

bool parse_float(const std::string& text, double& out) {
  std::string s = py_strip(text, nullptr, true, true);
  std::string clean;
  for (char c : s)
    if (c != '_') clean += c;
  if (clean.empty()) return false;
  char* end = nullptr;
  out = std::strtod(clean.c_str(), &end);
  return end && *end == 0;
}

double round_to(double x, int64_t digits) {
  if (!std::isfinite(x)) return x;
  if (digits > 300) return x;
  char buf[512];
  if (digits >= 0) {
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(digits), x);
    return std::strtod(buf, nullptr);
  }
  double p = std::pow(10.0, static_cast<double>(-digits));
  double y = x / p;
  double r = std::nearbyint(y);  // ties to even, like Python
  return r * p;
}

JsonOptions json_options(const CallArgs& a) {
  JsonOptions o;
  o.ensure_ascii = arg(a, 0, "ensure_ascii", kFalse).truthy();
  const Value& indent = arg(a, 1, "indent", kNone);
  if (!indent.is_none() && !indent.is_undefined()) {
    o.indent = true;
    o.item_sep = ",";
    if (indent.is_string())
      o.indent_unit = indent.str();
    else
      o.indent_unit = spaces(to_int_arg(indent, "indent"), "tojson indent");
  }
  const Value& seps = arg(a, 2, "separators", kNone);
  if (seps.is_list()) {
    if (seps.list_ref().items.size() != 2) throw RenderError("separators must be a pair of strings");
    o.item_sep = s_of(seps.list_ref().items[0]);
    o.key_sep = s_of(seps.list_ref().items[1]);
  }
  o.sort_keys = arg(a, 3, "sort_keys", kFalse).truthy();
  return o;
}

std::string do_indent(std::string s, const Value& width, bool first, bool blank) {
  std::string unit = width.is_string() ? width.str() : spaces(to_int_arg(width, "width"), "indent width");
  s += "\n";
  std::vector<std::string> lines;  // str.splitlines on \n, \r\n and \r
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\n' && s[i] != '\r') continue;
    lines.push_back(s.substr(start, i - start));
    if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
    start = i + 1;
  }
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + unit : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : unit + lines[i]);
  }
  return first ? unit + rv : rv;
}

std::string jinja_title(const std::string& s) {
  // Words start after runs of whitespace, '-', '(', '{', '[' or '<'.
  std::string out;
  bool at_start = true;
  for (size_t p = 0; p < s.size();) {
    size_t b = p;
    uint32_t c = utf8_next(s, p);
    std::string ch = s.substr(b, p - b);
    bool sep = py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      out += ch;
      at_start = true;
    } else {
      out += at_start ? py_upper(ch) : py_lower(ch);
      at_start = false;
    }
  }
  return out;
}

// map / select / reject / selectattr / rejectattr.
std::vector<Value> select_items(Evaluator& ev, const Value& seq, CallArgs& a, bool attr_form, bool keep) {
  std::vector<Value> out;
  size_t first = 0;
  std::string attr;
  if (attr_form) {
    if (a.args.empty()) throw RenderError("Missing parameter for attribute name");
    attr = s_of(a.args[0]);
    first = 1;
  }
  std::string test;
  CallArgs test_args;
  if (a.args.size() > first) {
    test = s_of(a.args[first]);
    test_args.args.assign(a.args.begin() + static_cast<std::ptrdiff_t>(first) + 1, a.args.end());
    test_args.kwargs = a.kwargs;
  }
  if (!seq.truthy()) return out;  // jinja2 checks `if value:` before iterating (None selects nothing)
  for (const Value& item : iterate(seq)) {
    Value subject = attr_form ? attr_path(item, attr) : item;
    bool ok = test.empty() ? subject.truthy() : ev.apply_test(test, subject, test_args);
    if (ok == keep) out.push_back(item);
  }
  return out;
}

std::vector<Value> sorted_items(std::vector<Value> items, bool reverse, bool case_sensitive, const Value& attribute) {
  std::vector<std::string> attrs;
  if (attribute.is_string()) {
    std::string s = attribute.str();
    for (size_t p = 0;;) {
      size_t c = s.find(',', p);
      attrs.push_back(py_strip(s.substr(p, c == std::string::npos ? std::string::npos : c - p), nullptr, true, true));
      if (c == std::string::npos) break;
      p = c + 1;
    }
  } else if (attribute.is_int()) {
    attrs.push_back(std::to_string(attribute.as_int()));
  }
  auto key = [&](const Value& v) {
    if (attrs.empty()) return lower_if(v, case_sensitive);
    if (attrs.size() == 1) return lower_if(attr_path(v, attrs[0]), case_sensitive);
    std::vector<Value> parts;
    for (const std::string& at : attrs) parts.push_back(lower_if(attr_path(v, at), case_sensitive));
    return Value::list(std::move(parts), true);
  };
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& v : items) keyed.emplace_back(key(v), std::move(v));
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& x, const auto& y) {
    return reverse ? less(y.first, x.first) : less(x.first, y.first);
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return out;
}

const std::unordered_map<std::string, FilterFn>& table() {
  static const std::unordered_map<std::string, FilterFn> t = [] {
    std::unordered_map<std::string, FilterFn> m;
    m["abs"] = [](Evaluator&, const Value& v, CallArgs&) -> Value {
      if (v.is_float()) return Value(std::fabs(v.as_double()));
      if (v.is_number()) return v.as_int() < 0 ? negate(v) : Value(v.as_int());
      throw RenderError("bad operand type for abs(): '" + v.type_name() + "'");
    };
    m["attr"] = [](Evaluator&, const Value& v, CallArgs& a) -> Value {
      std::string name = s_of(arg(a, 0, "name", kUndef));
      if (v.is_object()) return v.object()->attr(name);
      if (v.is_dict() && v.dict_ref().namespace_) {
        const Value* x = v.dict_ref().find(std::string_view(name));
        return x ? *x : Value();
      }
      return get_method(v, name);
    };
    m["batch"] = [](Evaluator&, const Value& v, CallArgs& a) -> Value {
      int64_t n = to_int_arg(arg(a, 0, "linecount", kUndef), "linecount");
      if (n <= 0) throw RenderError("batch size must be positive");
      if (!arg(a, 1, "fill_with", kNone).is_none() && static_cast<uint64_t>(n) > kMaxBuiltItems)
        throw RenderError("batch size too large");
      const Value& fill = arg(a, 1, "fill_with", kNone);
      std::vector<Value> out, cur;
      for (Value& item : iterate(v)) {
        cur.push_back(std::move(item));
        if (static_cast<int64_t>(cur.size()) == n) out.push_back(list_of(std::move(cur))), cur.clear();
      }
      if (!cur.empty()) {
        if (!fill.is_none())
          while (static_cast<int64_t>(cur.size()) < n) cur.push_back(fill);
        out.push_back(list_of(std::move(cur)));
      }
      return list_of(std::move(out));
    };
    m["capitalize"] = [](Evaluator&, const Value& v, CallArgs&) { return same_kind(v, py_capitalize(s_of(v))); };
    m["center"] = [](Evaluator&, const Value& v, CallArgs& a) {
      CallArgs b;
      b.args.push_back(arg(a, 0, "width", Value(int64_t{80})));
      Value fn = get_method(v.is_string() ? v : Value(s_of(v)), "center");
      return fn.object()->call(b);
    };
    m["count"] = m["length"] = [](Evaluator&, const Value& v, CallArgs&) { return Value(length(v)); };
    m["default"] = m["d"] = [](Evaluator&, const Value& v, CallArgs& a) -> Value {
      bool boolean = arg(a, 1, "boolean", kFalse).truthy();
      if (v.is_undefined() || (boolean && !v.truthy())) return arg(a, 0, "default_value", Value(""));
      return v;
    };
    m["dictsort"] = [](Evaluator&, const Value& v, CallArgs& a) -> Value {
      if (!v.is_dict()) throw RenderError("You can only sort by either \"key\" or \"value\" of a mapping");
      bool cs = arg(a, 0, "case_sensitive", kFalse).truthy();
      std::string by = s_of(arg(a, 1, "by", Value("key")));
      bool rev = arg(a, 2, "reverse", kFalse).truthy();
      if (by != "key" && by != "value") throw RenderError("You can only sort by either \"key\" or \"value\"");
      int pos = by == "key" ? 0 : 1;
      std::vector<std::pair<Value, Value>> keyed;
      for (const auto& [k, val] : v.dict_ref().items)
        keyed.emplace_back(lower_if(pos == 0 ? k : val, cs), Value::list({k, val}, true));
      std::stable_sort(keyed.begin(), keyed.end(), [rev](const auto& x, const auto& y) {
        return rev ? less(y.first, x.first) : less(x.first, y.first);
      });
      std::vector<Value> out;
      for (auto& kv : keyed) out.push_back(std::move(kv.second));
      return list_of(std::move(out));
    };
    m["escape"] = m["e"] = [](Evaluator&, const Value& v, CallArgs&) {
      return v.is_markup() ? v : Value::markup(html_escape(s_of(v)));
    };
    m["forceescape"] = [](Evaluator&, const Value& v, CallArgs&) { return Value::markup(html_escape(s_of(v))); };
    m["first"] = [](Evaluator&, const Value& v, CallArgs&) -> Value {
      std::vector<Value> items = iterate(v);
      return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
    };
    m["last"] = [](Evaluator&, const Value& v, CallArgs&) -> Value {
      std::vector<Value> items = iterate(v);
      return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
    };
    m["float"] = [](Evaluator&, const Value& v, CallArgs& a) -> Value {
      if (v.is_number()) return Value(v.as_double());
      double f;
      if (v.is_string() && parse_float(v.str(), f)) return Value(f);
      return arg(a, 0, "default", Value(0.0));
    };
    m["format"] = [](Evaluator&, const Value& v, CallArgs& a) -> Value {
      if (!a.args.empty() && !a.kwargs.empty())
        throw RenderError("can't handle positional and keyword arguments at the same time");
      if (!a.kwargs.empty()) {
        Value d = Value::dict();
        for (const auto& [k, x] : a.kwargs) d.dict_ref().set(Value(k), x);
        return Value(percent_format(s_of(v), d));
      }
      return Value(percent_format(s_of(v), Value::list(a.args, true)));
    };
    m["from_json"] = [](Evaluator&, const Value& v, CallArgs&) -> Value {
      if (!v.is_string()) throw RenderError("from_json needs a string, not " + v.type_name());
      return from_json(v.str());
    };
    m["indent"] = [](Evaluator&, const Value& v, CallArgs& a) {
      return same_kind(v, do_indent(s_of(v), arg(a, 0, "width", Value(int64_t{4})), arg(a, 1, "first", kFalse).truthy(),
                                    arg(a, 2, "blank", kFalse).truthy()));
    };
    m["int"] = [](Evaluator&, const Value& v, CallArgs& a) -> Value {
      const Value& dflt = arg(a, 0, "default", Value(int64_t{0}));
      int base = static_cast<int>(to_int_arg(arg(a, 1, "base", Value(int64_t{10})), "base"));
      if (v.is_bool() || v.is_int()) return Value(v.as_int());
      if (v.is_float()) {
        return Value(float_to_int(v.as_double()));
      }
      if (v.is_string()) {
        int64_t i;
        if (parse_int(v.str(), base, i)) return Value(i);
        double f;
        if (parse_float(v.str(), f) && std::isfinite(f)) return Value(float_to_int(f));
      }
      return dflt;
    };
    m["items"] = [](Evaluator&, const Value& v, CallArgs&) -> Value {
      if (v.is_undefined()) return list_of({});
      if (!v.is_dict() || v.dict_ref().namespace_) throw RenderError("Can only get item pairs from a mapping.");
      std::vector<Value> out;
      for (const auto& [k, x] : v.dict_ref().items) out.push_back(Value::list({k, x}, true));
      return list_of(std::move(out));
    };
    m["join"] = [](Evaluator&, const Value& v, CallArgs& a) {
      std::string sep = s_of(arg(a, 0, "d", Value("")));
      const Value& attribute = arg(a, 1, "attribute", kNone);
      std::string out;
      bool first = true;
      for (const Value& item : iterate(v)) {
        if (!first) out += sep;
        first = false;
        out += s_of(attribute.is_none() ? item : attr_path(item, s_of(attribute)));
      }
      return Value(std::move(out));
    };
    m["list"] = [](Evaluator&, const Value& v, CallArgs&) { return list_of(iterate(v)); };
    m["lower"] = [](Evaluator&, const Value& v, CallArgs&) { return same_kind(v, py_lower(s_of(v))); };
    m["upper"] = [](Evaluator&, const Value& v, CallArgs&) { return same_kind(v, py_upper(s_of(v))); };
    m["title"] = [](Evaluator&, const Value& v, CallArgs&) { return Value(jinja_title(s_of(v))); };
    m["map"] = [](Evaluator& ev, const Value& v, CallArgs& a) {
      std::vector<Value> out;
      if (!v.truthy()) return list_of({});
      if (a.args.empty()) {
        const Value& attribute = arg(a, 99, "attribute", kUndef);
        if (attribute.is_undefined()) throw RenderError("map requires a filter name or attribute=");
        const Value& dflt = arg(a, 99, "default", kUndef);
        for (const Value& item : iterate(v)) {
          Value x = attr_path(item, s_of(attribute));
          out.push_back(x.is_undefined() && !dflt.is_undefined() ? dflt : x);
        }
        return list_of(std::move(out));
      }
      std::string name = s_of(a.args[0]);
      CallArgs rest;
      rest.args.assign(a.args.begin() + 1, a.args.end());
      rest.kwargs = a.kwargs;
      for (const Value& item : iterate(v)) {
        CallArgs r = rest;
        out.push_back(ev.apply_filter(name, item, r, 0));
      }
      return list_of(std::move(out));
    };
    m["max"] = m["min"] = nullptr;  // filled below (they differ by direction)
    m["replace"] = [](Evaluator&, const Value& v, CallArgs& a) {
      CallArgs b;
      b.args = {Value(s_of(arg(a, 0, "old", kUndef))), Value(s_of(arg(a, 1, "new", kUndef)))};
      const Value& count = arg(a, 2, "count", kNone);
      if (!count.is_none()) b.args.push_back(count);
      return get_method(Value(s_of(v)), "replace").object()->call(b);
    };
    m["reverse"] = [](Evaluator&, const Value& v, CallArgs&) -> Value {
      if (v.is_string()) {
        auto chars = utf8_chars(v.str());
        std::string out;
        for (auto it = chars.rbegin(); it != chars.rend(); ++it) out.append(*it);
        return Value(std::move(out));
      }
      std::vector<Value> items = iterate(v);
      std::reverse(items.begin(), items.end());
      return list_of(std::move(items));
    };
    m["round"] = [](Evaluator&, const Value& v, CallArgs& a) -> Value {
      int64_t precision = to_int_arg(arg(a, 0, "precision", Value(int64_t{0})), "precision");
      std::string method = s_of(arg(a, 1, "method", Value("common")));
      if (!v.is_number()) throw RenderError("type " + v.type_name() + " doesn't define __round__ method");
      if (method == "common") {
        if (!v.is_float()) return Value(v.as_int());
        return Value(round_to(v.as_double(), precision));
      }
      double p = std::pow(10.0, static_cast<double>(precision));
      double x = v.as_double() * p;
      if (method == "ceil") return Value(std::ceil(x) / p);
      if (method == "floor") return Value(std::floor(x) / p);
      throw RenderError("method must be common, ceil or floor");
    };
    m["safe"] = [](Evaluator&, const Value& v, CallArgs&) { return Value::markup(s_of(v)); };
    m["string"] = [](Evaluator&, const Value& v, CallArgs&) { return v.is_string() ? v : Value(s_of(v)); };
    m["select"] = [](Evaluator& ev, const Value& v, CallArgs& a) {
      return list_of(select_items(ev, v, a, false, true));
    };
    m["reject"] = [](Evaluator& ev, const Value& v, CallArgs& a) {
      return list_of(select_items(ev, v, a, false, false));
    };
    m["selectattr"] = [](Evaluator& ev, const Value& v, CallArgs& a) {
      return list_of(select_items(ev, v, a, true, true));
    };
    m["rejectattr"] = [](Evaluator& ev, const Value& v, CallArgs& a) {
      return list_of(select_items(ev, v, a, true, false));
    };
    m["slice"] = [](Evaluator&, const Value& v, CallArgs& a) {
      std::vector<Value> items = iterate(v);
      int64_t slices = to_int_arg(arg(a, 0, "slices", kUndef), "slices");
      if (slices <= 0) throw RenderError("slices must be positive");
      if (static_cast<uint64_t>(slices) > kMaxBuiltItems) throw RenderError("slices too many");
      const Value& fill = arg(a, 1, "fill_with", kNone);
      int64_t n = static_cast<int64_t>(items.size()), per = n / slices, extra = n % slices, offset = 0;
      std::vector<Value> out;
      for (int64_t i = 0; i < slices; ++i) {
        int64_t start = offset + i * per;
        if (i < extra) ++offset;
        int64_t end = offset + (i + 1) * per;
        std::vector<Value> part(items.begin() + start, items.begin() + end);
        if (!fill.is_none() && i >= extra) part.push_back(fill);
        out.push_back(list_of(std::move(part)));
      }
      return list_of(std::move(out));
    };
    m["sort"] = [](Evaluator&, const Value& v, CallArgs& a) {
      return list_of(sorted_items(iterate(v), arg(a, 0, "reverse", kFalse).truthy(),
                                  arg(a, 1, "case_sensitive", kFalse).truthy(), arg(a, 2, "attribute", kNone)));
    };
    m["sum"] = [](Evaluator&, const Value& v, CallArgs& a) {
      const Value& attribute = arg(a, 0, "attribute", kNone);
      Value total = arg(a, 1, "start", Value(int64_t{0}));
      for (const Value& item : iterate(v))
        total = add(total, attribute.is_none() ? item : attr_path(item, s_of(attribute)));
      return total;
    };
    m["tojson"] = [](Evaluator&, const Value& v, CallArgs& a) { return Value(to_json(v, json_options(a))); };
    m["trim"] = [](Evaluator&, const Value& v, CallArgs& a) {
      const Value& chars = arg(a, 0, "chars", kNone);
      std::string c = chars.is_none() ? std::string() : s_of(chars);
      return same_kind(v, py_strip(s_of(v), chars.is_none() ? nullptr : &c, true, true));
    };
    m["unique"] = [](Evaluator&, const Value& v, CallArgs& a) {
      bool cs = arg(a, 0, "case_sensitive", kFalse).truthy();
      const Value& attribute = arg(a, 1, "attribute", kNone);
      std::vector<Value> out, seen;
      for (const Value& item : iterate(v)) {
        Value key = lower_if(attribute.is_none() ? item : attr_path(item, s_of(attribute)), cs);
        bool dup = false;
        for (const Value& s : seen) dup = dup || equals(s, key);
        if (!dup) {
          seen.push_back(key);
          out.push_back(item);
        }
      }
      return list_of(std::move(out));
    };
    m["wordcount"] = [](Evaluator&, const Value& v, CallArgs&) {
      std::string s = s_of(v);
      int64_t n = 0;
      bool in_word = false;
      for (size_t p = 0; p < s.size();) {
        uint32_t c = utf8_next(s, p);
        bool w = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0xC0;
        if (w && !in_word) ++n;
        in_word = w;
      }
      return Value(n);
    };
    for (const char* name : {"max", "min"}) {
      const bool is_max = name[1] == 'a';
      m[name] = [is_max](Evaluator&, const Value& v, CallArgs& a) -> Value {
        bool cs = arg(a, 0, "case_sensitive", kFalse).truthy();
        const Value& attribute = arg(a, 1, "attribute", kNone);
        std::vector<Value> items = iterate(v);
        if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
        auto key = [&](const Value& x) {
          return lower_if(attribute.is_none() ? x : attr_path(x, s_of(attribute)), cs);
        };
        size_t best = 0;
        for (size_t i = 1; i < items.size(); ++i) {
          bool better = is_max ? less(key(items[best]), key(items[i])) : less(key(items[i]), key(items[best]));
          if (better) best = i;
        }
        return items[best];
      };
    }
    return m;
  }();
  return t;
}

}  // namespace

bool filter_exists(const std::string& name) { return table().count(name) != 0; }

Value Evaluator::apply_filter(const std::string& name, Value subject, CallArgs& args, int) {
  auto it = table().find(name);
  if (it == table().end()) throw RenderError("No filter named '" + name + "'.");
  return it->second(*this, subject, args);
}

}  // namespace ferry::text::jinja
