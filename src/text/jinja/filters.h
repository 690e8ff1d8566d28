// Names of the built-in filters and tests, so that the parser can refuse an unknown one when the template is
// compiled, as jinja2 does (filters.cc, tests.cc).
#pragma once

#include <string>

namespace ferry::text::jinja {

bool filter_exists(const std::string& name);
bool test_exists(const std::string& name);

}  // namespace ferry::text::jinja
