// Tokens -> syntax tree, with jinja2's grammar: statements for / if / set / macro / call / filter / with /
// break / continue / generation (Hugging Face's assistant-mask tag, rendered as its body), and expressions
// with Python's operators at jinja2's precedences (filters and tests bind tighter than arithmetic).
#pragma once

#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/lexer.h"

namespace ferry::text::jinja {

// Throws SyntaxError naming the line.
Body parse(const std::vector<Token>& tokens);

}  // namespace ferry::text::jinja
