// libFuzzer target for GBNF grammars (serve/gbnf.h, serve/grammar_prefix.h): the input up to its first NUL
// byte is a grammar, the rest (if any) a text fed to the grammar's automaton byte by byte until it refuses
// one. Any crash, leak, hang or UB report is a failure: a hostile grammar must end in an error, a hostile
// text in a refused byte. Built only with -DFERRY_FUZZ=ON; scripts/fuzz_smoke.sh runs it with
// tests/fuzz/gbnf.dict.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "serve/gbnf.h"
#include "serve/grammar_prefix.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  auto grammar = ferry::serve::Grammar::parse(input.substr(0, nul));
  if (!grammar) return 0;
  ferry::serve::GrammarPrefix text(*grammar);
  (void)text.can_end();
  if (nul == std::string_view::npos) return 0;
  for (char c : input.substr(nul + 1)) {
    if (!text.feed(static_cast<uint8_t>(c))) break;
    (void)text.can_end();
    (void)text.complete();
  }
  return 0;
}
