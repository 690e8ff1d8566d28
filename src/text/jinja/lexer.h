// Template source -> tokens, as jinja2's lexer cuts it with the settings Hugging Face renders chat
// templates with: trim_blocks (the first newline after a block or comment tag is dropped), lstrip_blocks
// (spaces and tabs before a block or comment tag at the start of a line are dropped), `-` / `+` markers
// beside tag delimiters, `{% raw %}`, newlines normalized to \n and one trailing newline of the source
// dropped (keep_trailing_newline off).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::text::jinja {

enum class Tok : uint8_t {
  kData,        // text outside tags
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // value: the unescaped text
  kInt,
  kFloat,
  kOp,  // value: the operator, e.g. "==", "(", "|"
  kEof,
};

struct Token {
  Tok type = Tok::kEof;
  std::string value;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
};

// A syntax error at a line of the template.
class SyntaxError : public std::runtime_error {
 public:
  SyntaxError(int line, const std::string& what) : std::runtime_error(what), line_(line) {}
  int line() const { return line_; }

 private:
  int line_;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Throws SyntaxError.
std::vector<Token> tokenize(std::string_view source, const LexOptions& options = {});

}  // namespace ferry::text::jinja
