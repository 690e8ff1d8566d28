// Python's view of a UTF-8 string: code points (for len, indexing and slicing), Unicode whitespace (for
// strip and split), and case mapping. Case mapping covers ASCII, Latin-1, Greek and Cyrillic; other
// scripts keep their characters (the templates only change the case of role names and keywords).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::text::jinja {

// The string cut into code points (a stray continuation or truncated sequence is one unit per byte).
std::vector<std::string_view> utf8_chars(std::string_view s);
int64_t utf8_length(std::string_view s);
// Decodes the code point at s[pos] and advances pos (a bad byte decodes as itself and advances by one).
uint32_t utf8_next(std::string_view s, size_t& pos);
void utf8_append(std::string& out, uint32_t cp);

bool py_isspace(uint32_t cp);
// str.strip / lstrip / rstrip: `chars` null strips whitespace, else the code points of *chars.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);
// str.split(sep, maxsplit): sep null splits on runs of whitespace and drops empty parts.
std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, const std::string* sep, int64_t maxsplit);

std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);
std::string py_capitalize(std::string_view s);

}  // namespace ferry::text::jinja
