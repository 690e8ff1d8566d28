// Methods of str, list and dict that templates call (message.content.strip(), tool.get('x'), ...), with
// Python's semantics; positions are in code points. Lists and dicts may be changed (append, pop, update):
// jinja2's immutable sandbox, which Hugging Face uses, refuses that, llama.cpp's interpreter allows it.
#include <algorithm>

#include "text/jinja/eval.h"
#include "text/jinja/render.h"
#include "text/jinja/utf8.h"

namespace ferry::text::jinja {

namespace {

const Value kNone = Value::none();
const Value kUndef;

const std::string* opt_str(const Value& v, const char* what) {
  if (v.is_none() || v.is_undefined()) return nullptr;
  if (!v.is_string()) throw RenderError(std::string(what) + " must be str or None, not " + v.type_name());
  return &v.str();
}

std::string need_str(const Value& v, const char* what) {
  if (!v.is_string()) throw RenderError(std::string(what) + " must be str, not " + v.type_name());
  return v.str();
}

int64_t opt_int(const Value& v, int64_t dflt) {
  if (v.is_none() || v.is_undefined()) return dflt;
  if (!(v.is_int() || v.is_bool()))
    throw RenderError("'" + v.type_name() + "' object cannot be interpreted as an integer");
  return v.as_int();
}

Value str_list(std::vector<std::string> parts, bool markup = false) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (std::string& p : parts) out.push_back(markup ? Value::markup(std::move(p)) : Value(std::move(p)));
  return Value::list(std::move(out));
}

// Byte offset of code point index i (clamped like a slice bound) in s.
size_t cp_offset(const std::string& s, int64_t i) {
  int64_t n = utf8_length(s);
  if (i < 0) i = std::max<int64_t>(i + n, 0);
  if (i >= n) return s.size();
  if (static_cast<int64_t>(s.size()) == n) return static_cast<size_t>(i);
  return static_cast<size_t>(utf8_chars(s)[static_cast<size_t>(i)].data() - s.data());
}

int64_t cp_index(const std::string& s, size_t byte_off) { return utf8_length(std::string_view(s).substr(0, byte_off)); }

// The [start, end) window of str methods that take them, as byte offsets.
void window(const std::string& s, const CallArgs& a, size_t first, size_t& lo, size_t& hi) {
  const Value& st = arg(a, first, "start", kNone);
  const Value& en = arg(a, first + 1, "end", kNone);
  lo = st.is_none() ? 0 : cp_offset(s, opt_int(st, 0));
  hi = en.is_none() ? s.size() : cp_offset(s, opt_int(en, 0));
}

bool affix_match(const std::string& s, const Value& affix, const CallArgs& a, bool prefix) {
  size_t lo, hi;
  window(s, a, 1, lo, hi);
  if (hi < lo) return false;
  std::string_view w = std::string_view(s).substr(lo, hi - lo);
  auto one = [&](const Value& v) {
    const std::string x = need_str(v, prefix ? "startswith arg" : "endswith arg");
    if (x.size() > w.size()) return false;
    return prefix ? w.substr(0, x.size()) == x : w.substr(w.size() - x.size()) == x;
  };
  if (affix.is_list() && affix.list_ref().tuple) {
    for (const Value& v : affix.list_ref().items)
      if (one(v)) return true;
    return false;
  }
  return one(affix);
}

std::string replace_all(const std::string& s, const std::string& old, const std::string& rep, int64_t count) {
  std::string out;
  if (old.empty()) {
    auto chars = utf8_chars(s);
    int64_t done = 0;
    for (size_t i = 0; i <= chars.size(); ++i) {
      if (count < 0 || done < count) {
        out += rep;
        ++done;
      }
      if (i < chars.size()) out.append(chars[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t f = s.find(old, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += rep;
    pos = f + old.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

bool all_cps(const std::string& s, bool (*pred)(uint32_t)) {
  if (s.empty()) return false;
  for (size_t p = 0; p < s.size();)
    if (!pred(utf8_next(s, p))) return false;
  return true;
}

std::string pad_to(const std::string& s, int64_t width, const std::string& fill, char how) {
  int64_t n = utf8_length(s);
  if (n >= width) return s;
  auto rep = [&](int64_t k) {
    std::string r;
    for (int64_t i = 0; i < k; ++i) r += fill;
    return r;
  };
  int64_t total = width - n;
  check_built_bytes(static_cast<uint64_t>(total) * std::max<uint64_t>(fill.size(), 1), "padded string");
  if (how == '<') return s + rep(total);
  if (how == '>') return rep(total) + s;
  int64_t left = total / 2 + (total & width & 1);
  return rep(left) + s + rep(total - left);
}

Value string_method(const Value& self, const std::string& name) {
  const std::string s = self.str();
  const bool mk = self.is_markup();
  // A Markup string's methods escape their string arguments and return Markup.
  auto out = [mk](std::string r) { return mk ? Value::markup(std::move(r)) : Value(std::move(r)); };
  auto esc = [mk](const Value& v) {
    return mk && v.is_string() && !v.is_markup() ? Value::markup(html_escape(v.str())) : v;
  };
  auto fn = [&](auto body) { return make_function("str." + name, body); };
  if (name == "startswith" || name == "endswith") {
    bool prefix = name == "startswith";
    return fn([s, prefix](CallArgs& a) { return Value(affix_match(s, arg(a, 0, "prefix", kUndef), a, prefix)); });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool l = name != "rstrip", r = name != "lstrip";
    return fn([s, l, r, out, esc](CallArgs& a) {
      Value chars = esc(arg(a, 0, "chars", kNone));
      return out(py_strip(s, opt_str(chars, "chars"), l, r));
    });
  }
  if (name == "split" || name == "rsplit") {
    bool right = name == "rsplit";
    return fn([s, right, mk, esc](CallArgs& a) {
      Value sep_v = esc(arg(a, 0, "sep", kNone));
      const std::string* sep = opt_str(sep_v, "sep");
      int64_t maxsplit = opt_int(arg(a, 1, "maxsplit", kNone), -1);
      return str_list(right ? py_rsplit(s, sep, maxsplit) : py_split(s, sep, maxsplit), mk);
    });
  }
  if (name == "splitlines") {
    return fn([s](CallArgs& a) {
      bool keep = arg(a, 0, "keepends", Value(false)).truthy();
      std::vector<std::string> parts;
      size_t start = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '\n' && s[i] != '\r') continue;
        size_t end = i;
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        parts.push_back(s.substr(start, (keep ? i + 1 : end) - start));
        start = i + 1;
      }
      if (start < s.size()) parts.push_back(s.substr(start));
      return str_list(std::move(parts));
    });
  }
  if (name == "upper") return fn([s, out](CallArgs&) { return out(py_upper(s)); });
  if (name == "lower") return fn([s, out](CallArgs&) { return out(py_lower(s)); });
  if (name == "title") return fn([s, out](CallArgs&) { return out(py_title(s)); });
  if (name == "capitalize") return fn([s, out](CallArgs&) { return out(py_capitalize(s)); });
  if (name == "replace") {
    return fn([s, out, esc](CallArgs& a) {
      return out(replace_all(s, need_str(esc(arg(a, 0, "old", kUndef)), "replace() argument 1"),
                             need_str(esc(arg(a, 1, "new", kUndef)), "replace() argument 2"),
                             opt_int(arg(a, 2, "count", kNone), -1)));
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    bool right = name[0] == 'r';
    bool raise = name.find("index") != std::string::npos;
    return fn([s, right, raise](CallArgs& a) {
      std::string sub = need_str(arg(a, 0, "sub", kUndef), "must be str");
      size_t lo, hi;
      window(s, a, 1, lo, hi);
      size_t f = std::string::npos;
      if (hi >= lo && hi - lo >= sub.size()) {
        std::string_view w = std::string_view(s).substr(lo, hi - lo);
        f = right ? w.rfind(sub) : w.find(sub);
      }
      if (f == std::string::npos) {
        if (raise) throw RenderError("substring not found");
        return Value(int64_t{-1});
      }
      return Value(cp_index(s, lo + f));
    });
  }
  if (name == "count") {
    return fn([s](CallArgs& a) {
      std::string sub = need_str(arg(a, 0, "sub", kUndef), "must be str");
      if (sub.empty()) return Value(utf8_length(s) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value(n);
    });
  }
  if (name == "join") {
    return fn([s, out, esc](CallArgs& a) {
      std::string r;
      bool first = true;
      for (const Value& v : iterate(arg(a, 0, "iterable", kUndef))) {
        if (!v.is_string()) throw RenderError("sequence item: expected str instance, " + v.type_name() + " found");
        if (!first) r += s;
        first = false;
        r += esc(v).str();
      }
      return out(std::move(r));
    });
  }
  if (name == "format") return fn([s, mk, out](CallArgs& a) { return out(str_format(s, a, mk)); });
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal")
    return fn([s](CallArgs&) { return Value(all_cps(s, [](uint32_t c) { return c >= '0' && c <= '9'; })); });
  if (name == "isalpha")
    return fn([s](CallArgs&) {
      return Value(
          all_cps(s, [](uint32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0xC0; }));
    });
  if (name == "isalnum")
    return fn([s](CallArgs&) {
      return Value(all_cps(s, [](uint32_t c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
      }));
    });
  if (name == "isspace") return fn([s](CallArgs&) { return Value(all_cps(s, py_isspace)); });
  if (name == "islower") return fn([s](CallArgs&) { return Value(py_lower(s) == s && py_upper(s) != s); });
  if (name == "isupper") return fn([s](CallArgs&) { return Value(py_upper(s) == s && py_lower(s) != s); });
  if (name == "zfill") {
    return fn([s](CallArgs& a) {
      int64_t width = opt_int(arg(a, 0, "width", kUndef), 0);
      int64_t n = utf8_length(s);
      if (n >= width) return Value(s);
      check_built_bytes(static_cast<uint64_t>(width - n), "zero-filled string");
      size_t sign = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
      return Value(s.substr(0, sign) + std::string(static_cast<size_t>(width - n), '0') + s.substr(sign));
    });
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    char how = name == "center" ? '^' : name == "ljust" ? '<' : '>';
    return fn([s, how](CallArgs& a) {
      const Value& f = arg(a, 1, "fillchar", Value(" "));
      return Value(pad_to(s, opt_int(arg(a, 0, "width", kUndef), 0), need_str(f, "fillchar"), how));
    });
  }
  if (name == "partition" || name == "rpartition") {
    bool right = name[0] == 'r';
    return fn([s, right](CallArgs& a) {
      std::string sep = need_str(arg(a, 0, "sep", kUndef), "sep");
      if (sep.empty()) throw RenderError("empty separator");
      size_t f = right ? s.rfind(sep) : s.find(sep);
      if (f == std::string::npos)
        return right ? Value::list({Value(""), Value(""), Value(s)}, true)
                     : Value::list({Value(s), Value(""), Value("")}, true);
      return Value::list({Value(s.substr(0, f)), Value(sep), Value(s.substr(f + sep.size()))}, true);
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    bool prefix = name == "removeprefix";
    return fn([s, prefix](CallArgs& a) {
      std::string x = need_str(arg(a, 0, "affix", kUndef), "argument");
      if (prefix && s.compare(0, x.size(), x) == 0) return Value(s.substr(x.size()));
      if (!prefix && s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0)
        return Value(s.substr(0, s.size() - x.size()));
      return Value(s);
    });
  }
  return Value();
}

Value list_method(const Value& self, const std::string& name) {
  ListPtr l = self.list_ptr();
  auto fn = [&](auto body) { return make_function("list." + name, body); };
  if (name == "index") {
    return fn([l](CallArgs& a) {
      const Value& x = arg(a, 0, "value", kUndef);
      for (size_t i = 0; i < l->items.size(); ++i)
        if (equals(l->items[i], x)) return Value(static_cast<int64_t>(i));
      throw RenderError(py_repr(x) + " is not in list");
    });
  }
  if (name == "count") {
    return fn([l](CallArgs& a) {
      int64_t n = 0;
      for (const Value& v : l->items) n += equals(v, arg(a, 0, "value", kUndef));
      return Value(n);
    });
  }
  if (l->tuple) return Value();
  if (name == "append")
    return fn([l](CallArgs& a) {
      l->items.push_back(arg(a, 0, "object", kUndef));
      return Value::none();
    });
  if (name == "extend") {
    return fn([l](CallArgs& a) {
      for (Value& v : iterate(arg(a, 0, "iterable", kUndef))) l->items.push_back(std::move(v));
      return Value::none();
    });
  }
  if (name == "insert") {
    return fn([l](CallArgs& a) {
      int64_t n = static_cast<int64_t>(l->items.size()), i = opt_int(arg(a, 0, "index", kUndef), 0);
      if (i < 0) i = std::max<int64_t>(i + n, 0);
      i = std::min(i, n);
      l->items.insert(l->items.begin() + i, arg(a, 1, "object", kUndef));
      return Value::none();
    });
  }
  if (name == "pop") {
    return fn([l](CallArgs& a) {
      int64_t n = static_cast<int64_t>(l->items.size()), i = opt_int(arg(a, 0, "index", kNone), -1);
      if (n == 0) throw RenderError("pop from empty list");
      if (i < 0) i += n;
      if (i < 0 || i >= n) throw RenderError("pop index out of range");
      Value v = l->items[static_cast<size_t>(i)];
      l->items.erase(l->items.begin() + i);
      return v;
    });
  }
  if (name == "remove") {
    return fn([l](CallArgs& a) {
      for (auto it = l->items.begin(); it != l->items.end(); ++it)
        if (equals(*it, arg(a, 0, "value", kUndef))) {
          l->items.erase(it);
          return Value::none();
        }
      throw RenderError("list.remove(x): x not in list");
    });
  }
  if (name == "reverse")
    return fn([l](CallArgs&) {
      std::reverse(l->items.begin(), l->items.end());
      return Value::none();
    });
  if (name == "sort") {
    return fn([l](CallArgs& a) {
      bool rev = arg(a, 99, "reverse", Value(false)).truthy();
      std::stable_sort(l->items.begin(), l->items.end(),
                       [rev](const Value& x, const Value& y) { return rev ? less(y, x) : less(x, y); });
      return Value::none();
    });
  }
  if (name == "copy") return fn([l](CallArgs&) { return Value::list(l->items); });
  if (name == "clear")
    return fn([l](CallArgs&) {
      l->items.clear();
      return Value::none();
    });
  return Value();
}

Value dict_method(const Value& self, const std::string& name) {
  DictPtr d = self.dict_ptr();
  auto fn = [&](auto body) { return make_function("dict." + name, body); };
  if (name == "get") {
    return fn([d](CallArgs& a) {
      const Value* v = d->find(arg(a, 0, "key", kUndef));
      return v ? *v : arg(a, 1, "default", kNone);
    });
  }
  if (name == "items") {
    return fn([d](CallArgs&) {
      std::vector<Value> out;
      for (const auto& [k, v] : d->items) out.push_back(Value::list({k, v}, true));
      return Value::list(std::move(out));
    });
  }
  if (name == "keys" || name == "values") {
    bool keys = name == "keys";
    return fn([d, keys](CallArgs&) {
      std::vector<Value> out;
      for (const auto& [k, v] : d->items) out.push_back(keys ? k : v);
      return Value::list(std::move(out));
    });
  }
  if (name == "pop") {
    return fn([d](CallArgs& a) {
      const Value& key = arg(a, 0, "key", kUndef);
      if (const Value* v = d->find(key)) {
        Value out = *v;
        d->erase(key);
        return out;
      }
      if (a.args.size() > 1) return a.args[1];
      throw RenderError("KeyError: " + py_repr(key));
    });
  }
  if (name == "setdefault") {
    return fn([d](CallArgs& a) {
      const Value& key = arg(a, 0, "key", kUndef);
      if (const Value* v = d->find(key)) return *v;
      Value dflt = arg(a, 1, "default", kNone);
      d->set(key, dflt);
      return dflt;
    });
  }
  if (name == "update") {
    return fn([d](CallArgs& a) {
      if (!a.args.empty()) {
        if (!a.args[0].is_dict()) throw RenderError("dict.update() needs a mapping");
        for (const auto& [k, v] : a.args[0].dict_ref().items) d->set(k, v);
      }
      for (const auto& [k, v] : a.kwargs) d->set(Value(k), v);
      return Value::none();
    });
  }
  if (name == "copy") {
    return fn([d](CallArgs&) {
      Value c = Value::dict();
      for (const auto& [k, v] : d->items) c.dict_ref().set(k, v);
      return c;
    });
  }
  if (name == "clear")
    return fn([d](CallArgs&) {
      *d = DictObj();
      return Value::none();
    });
  return Value();
}

}  // namespace

Value get_method(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::kString: return string_method(obj, name);
    case Kind::kList: return list_method(obj, name);
    case Kind::kDict: return obj.dict_ref().namespace_ ? Value() : dict_method(obj, name);
    default: return Value();
  }
}

}  // namespace ferry::text::jinja
