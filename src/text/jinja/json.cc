// JSON text <-> values, printed the way Python's json.dumps prints.
#include "text/jinja/json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "text/jinja/render.h"
#include "text/jinja/utf8.h"

namespace ferry::text::jinja {

namespace {

void append_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  char buf[16];
  for (size_t pos = 0; pos < s.size();) {
    size_t start = pos;
    uint32_t c = utf8_next(s, pos);
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
      if (c >= 0x10000) {
        uint32_t v = c - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      }
      out += buf;
    } else {
      out.append(s.substr(start, pos - start));
    }
  }
  out += '"';
}

std::string float_json(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f < 0 ? "-Infinity" : "Infinity";
  return float_repr(f);
}

// A dict key as json.dumps turns it into a string.
std::string key_string(const Value& k) {
  switch (k.kind()) {
    case Kind::kString: return k.str();
    case Kind::kNone: return "null";
    case Kind::kBool: return k.as_bool() ? "true" : "false";
    case Kind::kInt: return std::to_string(k.as_int());
    case Kind::kFloat: return float_json(k.as_double());
    default: throw RenderError("keys must be str, int, float, bool or None, not " + k.type_name());
  }
}

void dump(std::string& out, const Value& v, const JsonOptions& o, int depth) {
  NestingGuard guard("while encoding a JSON object (circular reference?)");
  auto newline = [&](int d) {
    out += '\n';
    for (int i = 0; i < d; ++i) out += o.indent_unit;
  };
  switch (v.kind()) {
    case Kind::kNone: out += "null"; return;
    case Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Kind::kInt: out += std::to_string(v.as_int()); return;
    case Kind::kFloat: out += float_json(v.as_double()); return;
    case Kind::kString: append_string(out, v.str(), o.ensure_ascii); return;
    case Kind::kList: {
      const auto& items = v.list_ref().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_sep;
        if (o.indent) newline(depth + 1);
        dump(out, items[i], o, depth + 1);
      }
      if (o.indent) newline(depth);
      out += ']';
      return;
    }
    case Kind::kDict: {
      if (v.dict_ref().namespace_) break;
      std::vector<std::pair<std::string, const Value*>> items;
      for (const auto& [k, val] : v.dict_ref().items) items.emplace_back(key_string(k), &val);
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_sep;
        if (o.indent) newline(depth + 1);
        append_string(out, items[i].first, o.ensure_ascii);
        out += o.key_sep;
        dump(out, *items[i].second, o, depth + 1);
      }
      if (o.indent) newline(depth);
      out += '}';
      return;
    }
    default: break;
  }
  throw RenderError("Object of type " + v.type_name() + " is not JSON serializable");
}

Value convert(const nlohmann::ordered_json& j) {
  NestingGuard guard("reading JSON nested too deeply");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(convert(e));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = Value::dict();
      for (auto it = j.begin(); it != j.end(); ++it) d.dict_ref().set(Value(it.key()), convert(it.value()));
      return d;
    }
    default: return Value::none();
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  dump(out, v, options, 0);
  return out;
}

Value from_json(std::string_view text) {
  try {
    return convert(nlohmann::ordered_json::parse(text));
  } catch (const nlohmann::ordered_json::exception& e) {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ..." -> from "parse error".
    if (size_t p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    throw RenderError("invalid JSON: " + what);
  }
}

}  // namespace ferry::text::jinja
