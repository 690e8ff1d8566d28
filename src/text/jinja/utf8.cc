// Code points, whitespace and case of UTF-8 strings as Python's str sees them.
#include "text/jinja/utf8.h"

#include "text/jinja/value.h"

namespace ferry::text::jinja {

namespace {

size_t seq_len(std::string_view s, size_t pos) {
  const auto b = static_cast<uint8_t>(s[pos]);
  size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 1;
  if (pos + n > s.size()) return 1;
  for (size_t i = 1; i < n; ++i)
    if ((static_cast<uint8_t>(s[pos + i]) & 0xC0) != 0x80) return 1;
  return n;
}

// Simple one-to-one case pairs: (upper, lower) ranges with a constant offset.
uint32_t to_upper(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;   // Latin-1
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;  // Greek
  if (c >= 0x430 && c <= 0x44F) return c - 32;                // Cyrillic
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

uint32_t to_lower(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

bool is_cased(uint32_t c) { return to_upper(c) != c || to_lower(c) != c; }

template <typename F>
std::string map_cps(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    size_t start = pos;
    uint32_t cp = utf8_next(s, pos);
    uint32_t m = f(cp);
    if (m == cp)
      out.append(s.substr(start, pos - start));
    else
      utf8_append(out, m);
  }
  return out;
}

}  // namespace

std::vector<std::string_view> utf8_chars(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    size_t n = seq_len(s, pos);
    out.push_back(s.substr(pos, n));
    pos += n;
  }
  return out;
}

int64_t utf8_length(std::string_view s) {
  int64_t n = 0;
  for (size_t pos = 0; pos < s.size(); pos += seq_len(s, pos)) ++n;
  return n;
}

uint32_t utf8_next(std::string_view s, size_t& pos) {
  size_t n = seq_len(s, pos);
  const auto b0 = static_cast<uint8_t>(s[pos]);
  uint32_t cp = b0;
  if (n == 2) cp = b0 & 0x1F;
  if (n == 3) cp = b0 & 0x0F;
  if (n == 4) cp = b0 & 0x07;
  for (size_t i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<uint8_t>(s[pos + i]) & 0x3F);
  pos += n;
  return cp;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool py_isspace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<uint32_t> set;
  if (chars)
    for (size_t p = 0; p < chars->size();) set.push_back(utf8_next(*chars, p));
  auto strip_it = [&](uint32_t cp) {
    if (!chars) return py_isspace(cp);
    for (uint32_t c : set)
      if (c == cp) return true;
    return false;
  };
  // Code point boundaries, so that the right end can be walked backwards.
  std::vector<size_t> starts;
  for (size_t p = 0; p < s.size(); p += seq_len(s, p)) starts.push_back(p);
  starts.push_back(s.size());
  size_t a = 0, b = starts.size() - 1;  // [starts[a], starts[b])
  auto cp_at = [&](size_t i) {
    size_t p = starts[i];
    return utf8_next(s, p);
  };
  if (left)
    while (a < b && strip_it(cp_at(a))) ++a;
  if (right)
    while (b > a && strip_it(cp_at(b - 1))) --b;
  return std::string(s.substr(starts[a], starts[b] - starts[a]));
}

std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) throw RenderError("empty separator");
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t f = s.find(*sep, pos);
      if (f == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, f - pos));
      pos = f + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  size_t pos = 0;
  auto skip_space = [&]() {
    while (pos < s.size()) {
      size_t p = pos;
      if (!py_isspace(utf8_next(s, p))) break;
      pos = p;
    }
  };
  skip_space();
  while (pos < s.size()) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      out.emplace_back(s.substr(pos));
      return out;
    }
    size_t start = pos;
    while (pos < s.size()) {
      size_t p = pos;
      if (py_isspace(utf8_next(s, p))) break;
      pos = p;
    }
    out.emplace_back(s.substr(start, pos - start));
    skip_space();
  }
  return out;
}

std::vector<std::string> py_rsplit(std::string_view s, const std::string* sep, int64_t maxsplit) {
  if (maxsplit < 0) return py_split(s, sep, maxsplit);
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) throw RenderError("empty separator");
    size_t end = s.size();
    while (static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t f = s.rfind(*sep, end - sep->size());
      if (f == std::string_view::npos) break;
      out.emplace_back(s.substr(f + sep->size(), end - f - sep->size()));
      end = f;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    // Whitespace: walk code points from the right.
    std::vector<std::string_view> cps = utf8_chars(s);
    auto space = [&](size_t i) {
      size_t p = 0;
      return py_isspace(utf8_next(cps[i], p));
    };
    size_t i = cps.size();
    auto offset = [&](size_t k) { return static_cast<size_t>(cps[k].data() - s.data()); };
    while (i > 0 && space(i - 1)) --i;
    while (i > 0) {
      if (static_cast<int64_t>(out.size()) >= maxsplit) {
        out.emplace_back(s.substr(0, offset(i - 1) + cps[i - 1].size()));
        break;
      }
      size_t end = i;
      while (i > 0 && !space(i - 1)) --i;
      size_t a = i < cps.size() ? offset(i) : s.size();
      size_t b = end < cps.size() ? offset(end) : s.size();
      out.emplace_back(s.substr(a, b - a));
      while (i > 0 && space(i - 1)) --i;
    }
  }
  return {out.rbegin(), out.rend()};
}

std::string py_upper(std::string_view s) { return map_cps(s, to_upper); }
std::string py_lower(std::string_view s) { return map_cps(s, to_lower); }

std::string py_title(std::string_view s) {
  bool prev_cased = false;
  return map_cps(s, [&](uint32_t c) {
    uint32_t r = prev_cased ? to_lower(c) : to_upper(c);
    prev_cased = is_cased(c);
    return r;
  });
}

std::string py_capitalize(std::string_view s) {
  bool first = true;
  return map_cps(s, [&](uint32_t c) {
    uint32_t r = first ? to_upper(c) : to_lower(c);
    first = false;
    return r;
  });
}

}  // namespace ferry::text::jinja
