// Values as text, the way Python prints them: str() for template output, repr() inside containers, float
// repr (shortest round-trip digits, exponent below 1e-4 and from 1e16 on), and the two string formatting
// operators templates use: printf-style `fmt % args` and str.format.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "text/jinja/value.h"

namespace ferry::text::jinja {

std::string float_repr(double f);
std::string string_repr(std::string_view s);
std::string py_str(const Value& v);   // what {{ v }} prints: undefined is "", None is "None", ...
std::string py_repr(const Value& v);  // repr(v): strings quoted

// "fmt % args": args a tuple of values, a dict for %(name)s, or one value. escape: fmt is a Markup string, so
// what %s and %r insert is HTML-escaped unless it is Markup itself.
std::string percent_format(const std::string& fmt, const Value& args, bool escape = false);
// fmt.format(*args, **kwargs), with the same `escape`.
std::string str_format(const std::string& fmt, const CallArgs& args, bool escape = false);
// A decimal index written in a template ("0", "12"): its value, or nothing when s is not all digits or is
// past int64 (such a field is then a name, as Python's str.format and jinja2's attribute paths read it).
std::optional<int64_t> decimal_index(std::string_view s);
// & < > " ' as HTML entities, as markupsafe.escape writes them.
std::string html_escape(std::string_view s);

}  // namespace ferry::text::jinja
