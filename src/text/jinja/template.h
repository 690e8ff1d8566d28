// A parsed Jinja template and its render entry point (chat_template.h is the API the rest of ferry uses).
// Globals are jinja2's (range, namespace, dict, cycler, joiner) and Hugging Face's chat-template ones
// (raise_exception, strftime_now).
#pragma once

#include <ctime>
#include <string>
#include <string_view>
#include <unordered_map>

#include "text/jinja/ast.h"

namespace ferry::text::jinja {

class Template {
 public:
  // Throws SyntaxError (also for a filter or test that does not exist, as jinja2 refuses those when it
  // compiles a template).
  static Template parse(std::string_view source);

  // Throws LocatedError for an error while rendering, TemplateRaised for raise_exception(). Thread-safe.
  std::string render(std::unordered_map<std::string, Value> vars, const std::tm& now) const;

 private:
  Body body_;
};

}  // namespace ferry::text::jinja
