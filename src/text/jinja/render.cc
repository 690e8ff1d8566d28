// str(), repr() and string formatting with Python's output.
#include "text/jinja/render.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "text/jinja/utf8.h"

namespace ferry::text::jinja {

std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-d.ddde+XX"
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  int exp = std::atoi(sci.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (sci[i] != '.') digits += sci[i];
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits[0];
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    return out + eb;
  }
  if (exp < 0) return out + "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  size_t int_digits = static_cast<size_t>(exp) + 1;
  if (digits.size() <= int_digits) return out + digits + std::string(int_digits - digits.size(), '0') + ".0";
  return out + digits.substr(0, int_digits) + "." + digits.substr(int_digits);
}

namespace {

bool printable(uint32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  if (c <= 0xA0 || c == 0xAD) return false;
  if (c == 0x1680 || c == 0x180E || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F)) return false;
  if ((c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF) return false;
  if ((c >= 0xD800 && c <= 0xF8FF) || (c >= 0xFFF0 && c <= 0xFFFB) || c >= 0xF0000) return false;
  return true;
}

void append_repr(std::string& out, const Value& v);

void append_seq(std::string& out, const ListObj& l) {
  out += l.tuple ? '(' : '[';
  for (size_t i = 0; i < l.items.size(); ++i) {
    if (i) out += ", ";
    append_repr(out, l.items[i]);
  }
  if (l.tuple && l.items.size() == 1) out += ',';
  out += l.tuple ? ')' : ']';
}

void append_dict(std::string& out, const DictObj& d) {
  out += '{';
  bool first = true;
  for (const auto& [k, v] : d.items) {
    if (!first) out += ", ";
    first = false;
    append_repr(out, k);
    out += ": ";
    append_repr(out, v);
  }
  out += '}';
}

void append_repr(std::string& out, const Value& v) {
  NestingGuard guard("while getting the repr of an object");
  switch (v.kind()) {
    case Kind::kUndefined: out += "Undefined"; return;
    case Kind::kString: out += string_repr(v.str()); return;
    default: out += py_str(v); return;
  }
}

}  // namespace

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string string_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t pos = 0; pos < s.size();) {
    size_t start = pos;
    uint32_t c = utf8_next(s, pos);
    char buf[16];
    if (c == static_cast<uint32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!printable(c)) {
      if (c < 0x100)
        std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      else if (c < 0x10000)
        std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      else
        std::snprintf(buf, sizeof(buf), "\\U%08x", c);
      out += buf;
    } else {
      out.append(s.substr(start, pos - start));
    }
  }
  out += quote;
  return out;
}

std::string py_str(const Value& v) {
  NestingGuard guard("while getting the repr of an object");
  switch (v.kind()) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return v.as_bool() ? "True" : "False";
    case Kind::kInt: return std::to_string(v.as_int());
    case Kind::kFloat: return float_repr(v.as_double());
    case Kind::kString: return v.str();
    case Kind::kList: {
      std::string out;
      append_seq(out, v.list_ref());
      return out;
    }
    case Kind::kDict: {
      std::string out;
      if (v.dict_ref().namespace_) out += "<Namespace ";
      append_dict(out, v.dict_ref());
      if (v.dict_ref().namespace_) out += ">";
      return out;
    }
    case Kind::kObject: return v.object()->repr();
  }
  return "";
}

std::string py_repr(const Value& v) {
  std::string out;
  append_repr(out, v);
  return out;
}

// ---- format specs --------------------------------------------------------------------------------------

namespace {

struct Spec {
  char fill = ' ';
  char align = 0;  // '<', '>', '^', '='
  char sign = '-';
  bool alt = false;
  bool zero = false;
  int width = -1;
  int precision = -1;
  char type = 0;
};

// A width or precision of a format: its digits at s[i..], i moved past them. Bounded, so a hostile
// template neither overflows the int nor asks for gigabytes of padding.
constexpr int kMaxFormatCount = 1 << 20;
int format_count(std::string_view s, size_t& i) {
  int n = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
    n = n * 10 + (s[i] - '0');
    if (n > kMaxFormatCount) throw RenderError("format width or precision over " + std::to_string(kMaxFormatCount));
  }
  return n;
}

Spec parse_spec(std::string_view s) {
  Spec sp;
  size_t i = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (s.size() >= 2 && is_align(s[1])) {
    sp.fill = s[0];
    sp.align = s[1];
    i = 2;
  } else if (!s.empty() && is_align(s[0])) {
    sp.align = s[0];
    i = 1;
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) sp.sign = s[i++];
  if (i < s.size() && s[i] == '#') sp.alt = true, ++i;
  if (i < s.size() && s[i] == '0') sp.zero = true, ++i;
  if (i < s.size() && s[i] >= '0' && s[i] <= '9') sp.width = format_count(s, i);
  if (i < s.size() && (s[i] == ',' || s[i] == '_')) ++i;  // grouping: not applied
  if (i < s.size() && s[i] == '.') {
    ++i;
    sp.precision = format_count(s, i);
  }
  if (i < s.size()) sp.type = s[i++];
  if (i != s.size()) throw RenderError("Invalid format specifier '" + std::string(s) + "'");
  return sp;
}

std::string pad(std::string body, const Spec& sp, bool numeric) {
  int64_t n = utf8_length(body);
  if (sp.width < 0 || n >= sp.width) return body;
  size_t fill_n = static_cast<size_t>(sp.width - n);
  char align = sp.align ? sp.align : (sp.zero && numeric ? '=' : numeric ? '>' : '<');
  char fill = sp.align ? sp.fill : (sp.zero && numeric ? '0' : sp.fill);
  if (align == '<') return body + std::string(fill_n, fill);
  if (align == '>') return std::string(fill_n, fill) + body;
  if (align == '^') return std::string(fill_n / 2, fill) + body + std::string(fill_n - fill_n / 2, fill);
  size_t sign_len = !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ') ? 1 : 0;
  return body.substr(0, sign_len) + std::string(fill_n, fill) + body.substr(sign_len);
}

std::string with_sign(std::string digits, bool neg, char sign) {
  if (neg) return "-" + digits;
  if (sign == '+') return "+" + digits;
  if (sign == ' ') return " " + digits;
  return digits;
}

std::string format_float(double f, char type, int precision, char sign) {
  char buf[512];
  bool neg = std::signbit(f) && !std::isnan(f);
  double a = std::fabs(f);
  std::string body;
  if (type == 0) {
    body = precision < 0 ? float_repr(a) : (std::snprintf(buf, sizeof(buf), "%.*g", precision, a), buf);
  } else if (type == '%') {
    std::snprintf(buf, sizeof(buf), "%.*f", precision < 0 ? 6 : precision, a * 100);
    body = std::string(buf) + "%";
  } else {
    char f_[8] = {'%', '.', '*', type, 0};
    std::snprintf(buf, sizeof(buf), f_, precision < 0 ? 6 : precision, a);
    body = buf;
  }
  return with_sign(body, neg, sign);
}

std::string format_int(int64_t i, char type, bool alt, char sign) {
  bool neg = i < 0;
  uint64_t u = neg ? 0 - static_cast<uint64_t>(i) : static_cast<uint64_t>(i);
  char buf[80];
  const char* prefix = "";
  switch (type) {
    case 'x':
      std::snprintf(buf, sizeof(buf), "%llx", static_cast<unsigned long long>(u));
      prefix = "0x";
      break;
    case 'X':
      std::snprintf(buf, sizeof(buf), "%llX", static_cast<unsigned long long>(u));
      prefix = "0X";
      break;
    case 'o':
      std::snprintf(buf, sizeof(buf), "%llo", static_cast<unsigned long long>(u));
      prefix = "0o";
      break;
    case 'b': {
      std::string b;
      do b.insert(b.begin(), static_cast<char>('0' + (u & 1)));
      while (u >>= 1);
      std::snprintf(buf, sizeof(buf), "%s", b.c_str());
      prefix = "0b";
      break;
    }
    default: std::snprintf(buf, sizeof(buf), "%llu", static_cast<unsigned long long>(u)); break;
  }
  return with_sign((alt ? std::string(prefix) : std::string()) + buf, neg, sign);
}

std::string format_value(const Value& v, std::string_view spec_text) {
  if (spec_text.empty()) return py_str(v);
  Spec sp = parse_spec(spec_text);
  if (v.is_string() || v.is_undefined() || v.is_none() || v.is_list() || v.is_dict()) {
    if (sp.type && sp.type != 's')
      throw RenderError(std::string("Unknown format code '") + sp.type + "' for object of type '" + v.type_name() +
                        "'");
    std::string s = py_str(v);
    if (sp.precision >= 0) {
      auto cps = utf8_chars(s);
      if (static_cast<size_t>(sp.precision) < cps.size())
        s = std::string(s.data(), static_cast<size_t>(cps[static_cast<size_t>(sp.precision)].data() - s.data()));
    }
    return pad(s, sp, false);
  }
  if ((v.is_int() || v.is_bool()) && (sp.type == 0 || std::strchr("dxXobnc", sp.type))) {
    if (v.is_bool() && sp.type == 0) return pad(py_str(v), sp, false);
    if (sp.type == 'c') {
      std::string s;
      utf8_append(s, static_cast<uint32_t>(v.as_int()));
      return pad(s, sp, false);
    }
    return pad(format_int(v.as_int(), sp.type, sp.alt, sp.sign), sp, true);
  }
  if (v.is_number()) {
    if (sp.type && !std::strchr("eEfFgG%", sp.type))
      throw RenderError(std::string("Unknown format code '") + sp.type + "' for object of type 'float'");
    return pad(format_float(v.as_double(), sp.type, sp.precision, sp.sign), sp, true);
  }
  return pad(py_str(v), sp, false);
}

}  // namespace

std::string percent_format(const std::string& fmt, const Value& args, bool escape) {
  std::vector<Value> positional;
  const DictObj* mapping = nullptr;
  if (args.is_list() && args.list_ref().tuple) {
    positional = args.list_ref().items;
  } else {
    positional.push_back(args);  // a dict is both the mapping of %(name)s and the one argument of %s
    if (args.is_dict()) mapping = &args.dict_ref();
  }
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) throw RenderError("incomplete format");
    const Value* arg = nullptr;
    if (fmt[i] == '(') {
      size_t close = fmt.find(')', i);
      if (close == std::string::npos || !mapping) throw RenderError("format requires a mapping");
      arg = mapping->find(std::string_view(fmt).substr(i + 1, close - i - 1));
      if (!arg) throw RenderError("KeyError: " + fmt.substr(i + 1, close - i - 1));
      i = close + 1;
    }
    Spec sp;
    sp.align = '>';
    for (; i < fmt.size() && std::strchr("-+ #0", fmt[i]); ++i) {
      if (fmt[i] == '-') sp.align = '<';
      if (fmt[i] == '+' || fmt[i] == ' ') sp.sign = fmt[i];
      if (fmt[i] == '#') sp.alt = true;
      if (fmt[i] == '0') sp.zero = true;
    }
    if (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') sp.width = format_count(fmt, i);
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      sp.precision = format_count(fmt, i);
    }
    if (i >= fmt.size()) throw RenderError("incomplete format");
    const char conv = fmt[i];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (!arg) {
      if (next >= positional.size()) throw RenderError("not enough arguments for format string");
      arg = &positional[next++];
    }
    if (sp.zero && sp.align == '>') sp.align = '=', sp.fill = '0';
    std::string body;
    switch (conv) {
      case 's':
        body = py_str(*arg);
        if (escape && !arg->is_markup()) body = html_escape(body);
        if (sp.precision >= 0) body = body.substr(0, static_cast<size_t>(sp.precision));
        break;
      case 'r':
      case 'a': body = escape ? html_escape(py_repr(*arg)) : py_repr(*arg); break;
      case 'd':
      case 'i':
      case 'u':
        if (!arg->is_number()) throw RenderError("%d format: a real number is required, not " + arg->type_name());
        body = format_int(arg->is_float() ? float_to_int(arg->as_double()) : arg->as_int(), 'd', false, sp.sign);
        break;
      case 'x':
      case 'X':
      case 'o': body = format_int(arg->as_int(), conv, sp.alt, sp.sign); break;
      case 'c': utf8_append(body, static_cast<uint32_t>(arg->as_int())); break;
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G':
        if (!arg->is_number()) throw RenderError("must be real number, not " + arg->type_name());
        body = format_float(arg->as_double(), conv, sp.precision, sp.sign);
        break;
      default: throw RenderError(std::string("unsupported format character '") + conv + "'");
    }
    sp.align = sp.align == '=' ? '=' : sp.align;
    out += pad(body, sp, conv != 's' && conv != 'r');
  }
  if (!mapping && next < positional.size()) throw RenderError("not all arguments converted during string formatting");
  return out;
}

std::optional<int64_t> decimal_index(std::string_view s) {
  if (s.empty()) return std::nullopt;
  int64_t n = 0;
  for (char c : s) {
    if (c < '0' || c > '9' || n > (INT64_MAX - (c - '0')) / 10) return std::nullopt;
    n = n * 10 + (c - '0');
  }
  return n;
}

std::string str_format(const std::string& fmt, const CallArgs& args, bool escape) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      throw RenderError("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) throw RenderError("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    std::string spec, conv;
    if (size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      conv = field.substr(bang + 1);
      field.resize(bang);
    }
    const Value* v = nullptr;
    const std::optional<int64_t> index = decimal_index(field);
    if (field.empty() || index) {
      size_t idx = field.empty() ? auto_index++ : static_cast<size_t>(*index);
      if (idx >= args.args.size()) throw RenderError("Replacement index " + std::to_string(idx) + " out of range");
      v = &args.args[idx];
    } else {
      for (const auto& [k, kv] : args.kwargs)
        if (k == field) v = &kv;
      if (!v) throw RenderError("KeyError: '" + field + "'");
    }
    std::string piece = conv == "r" ? format_value(Value(py_repr(*v)), spec) : format_value(*v, spec);
    out += escape && !v->is_markup() ? html_escape(piece) : piece;
  }
  return out;
}

}  // namespace ferry::text::jinja
