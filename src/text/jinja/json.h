// JSON in and out of template values. to_json prints as Python's json.dumps does (the `tojson` filter of
// Hugging Face's chat-template environment): separators, indent, sort_keys and ensure_ascii as its keyword
// arguments, floats as repr, keys in insertion order. from_json reads JSON text into values, keeping key order.
#pragma once

#include <string>
#include <string_view>

#include "text/jinja/value.h"

namespace ferry::text::jinja {

struct JsonOptions {
  bool indent = false;  // indent given (an int n means n spaces, a string is used as is)
  std::string indent_unit;
  std::string item_sep = ", ";  // json.dumps' defaults: ", " without indent, "," with one
  std::string key_sep = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};

// Throws RenderError for what json.dumps refuses (undefined, functions, namespaces, non-string-able keys).
std::string to_json(const Value& v, const JsonOptions& options = {});
// Throws RenderError naming the problem on malformed JSON.
Value from_json(std::string_view text);

}  // namespace ferry::text::jinja
