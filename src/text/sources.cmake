ferry_module(text DEPS format base SOURCES
  text/unicode.cc
  text/pretokenizer.cc
  text/vocab.cc
  text/bpe.cc
  text/spm.cc
  text/tokenizer.cc
  text/chat_template.cc
  text/jinja/utf8.cc
  text/jinja/value.cc
  text/jinja/render.cc
  text/jinja/json.cc
  text/jinja/lexer.cc
  text/jinja/parser.cc
  text/jinja/parser_expr.cc
  text/jinja/eval_stmt.cc
  text/jinja/eval_expr.cc
  text/jinja/methods.cc
  text/jinja/filters.cc
  text/jinja/tests.cc
  text/jinja/template.cc
)
# PCRE2 (static, so the binary travels) for the pre-tokenizer regexes.
target_include_directories(ferry_text PRIVATE ${PCRE2_INCLUDE})
target_link_libraries(ferry_text PRIVATE ${PCRE2_STATIC})
