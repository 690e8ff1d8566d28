ferry_module(text DEPS format base SOURCES
  text/unicode.cc
  text/pretokenizer.cc
  text/vocab.cc
  text/bpe.cc
  text/spm.cc
  text/tokenizer.cc
)
# PCRE2 (static, so the binary travels) for the pre-tokenizer regexes.
target_include_directories(ferry_text PRIVATE ${PCRE2_INCLUDE})
target_link_libraries(ferry_text PRIVATE ${PCRE2_STATIC})
