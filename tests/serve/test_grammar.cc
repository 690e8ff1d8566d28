// GBNF grammars: Grammar::parse refuses bad grammars with one message naming the place; GrammarPrefix
// accepts exactly the prefixes of the grammar's texts (tables of texts, and every string over a small
// alphabet against a recursive matcher of the same rules); a grammar-constrained request on a tiny model
// writes only text of the grammar and ends where it must.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "serve/gbnf.h"
#include "serve/grammar_prefix.h"
#include "serve/scheduler.h"
#include "serve/tiny_engine.h"
#include "serve/token_constraint.h"

namespace ferry::serve {
namespace {

std::shared_ptr<const Grammar> compile(const std::string& text) {
  auto g = Grammar::parse(text);
  EXPECT_TRUE(g.has_value()) << text << "\n-> " << g.status().message();
  return g.has_value() ? *g : nullptr;
}

// Whether the grammar accepts `text` whole (every byte fits and the text may end there).
bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  GrammarPrefix p(g);
  return p.feed(text) && p.can_end();
}

// Whether `text` can still become a text of the grammar.
bool viable(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  GrammarPrefix p(g);
  return p.feed(text);
}

TEST(GrammarParse, BadGrammarsAreOneMessageNamingThePlace) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "no 'root' rule"},
      {"# only a comment\n", "no 'root' rule"},
      {"root ::= foo", "line 1, column 10: rule 'foo' is used but never defined"},
      {"root ::= root \"a\"", "rule 'root' is left recursive"},
      {"root ::= a\na ::= b? a \"x\"\nb ::= \"y\"", "rule 'a' is left recursive"},
      {"root ::= \"abc", "unterminated literal"},
      {"root ::= [a-", "unterminated character class"},
      {"root ::= [z-a]", "end before its start"},
      {"root ::= \"a\"{3,2}", "n < m"},
      {"root ::= \"a\"{20000}", "repetition count over"},
      {"root ::= \"a\"{x}", "expected a repetition count"},
      {"root ::= \"\\q\"", "unknown escape '\\q'"},
      {"root ::= \"\\x4\"", "expected 2 hexadecimal digits"},
      {"root ::= <think>", "token references"},
      {"root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice"},
      {"root ::= (\"a\"", "expected ')'"},
      {"root \"a\"", "expected '::=' after the rule name 'root'"},
      {"root ::= \"a\"\nx ::= \"b\" ]", "line 2, column 11: unexpected ']'"},
      {"root ::= \"a\" b ::= \"c\"", "expected a new line before the rule 'b'"},
      {std::string("root ::= \"\xff\""), "not UTF-8"},
      {"root ::= \"a\")", "unexpected ')'"},
  };
  for (const auto& [text, want] : cases) {
    auto g = Grammar::parse(text);
    ASSERT_FALSE(g.has_value()) << text;
    EXPECT_NE(g.status().message().find(want), std::string::npos) << text << "\n-> " << g.status().message();
    EXPECT_EQ(g.status().message().find('\n'), std::string::npos) << g.status().message();
  }
}

struct Case {
  std::string grammar;
  std::vector<std::string> accepted, rejected;
};

TEST(GrammarPrefix, AcceptsExactlyTheTextsOfTheGrammar) {
  const std::vector<Case> cases = {
      {"root ::= expr\nexpr ::= term ([-+*/] term)*\nterm ::= [0-9]+ | \"(\" expr \")\"",
       {"1+2", "(3*4)-5", "42", "((7))"},
       {"1+", "+1", "(1", "1++2", "", "()"}},
      {"root ::= \"a\"{2,4} \"b\"?", {"aa", "aab", "aaaa", "aaaab"}, {"a", "aaaaa", "ab", "aabb", "b"}},
      {"root ::= [xy]{2,}", {"xy", "xyxyx", "yy"}, {"x", "", "xz"}},
      {"root ::= \"z\"{,2} \"!\"", {"!", "z!", "zz!"}, {"zzz!", "z"}},
      {"root ::= \"q\"{3}", {"qqq"}, {"qq", "qqqq"}},
      {"root ::= \"1. \" move \" \" move \"\\n\" ([1-9] [0-9]? \". \" move \" \" move \"\\n\")+\n"
       "move ::= (pawn | nonpawn | castle) [+#]?\n"
       "nonpawn ::= [NBKQR] [a-h]? [1-8]? \"x\"? [a-h] [1-8]\n"
       "pawn ::= ([a-h] \"x\")? [a-h] [1-8] (\"=\" [NBKQR])?\n"
       "castle ::= \"O-O\" \"-O\"?\n",
       {"1. e4 e5\n2. Nf3 Nc6\n", "1. d4 d5\n12. O-O-O exd8=Q#\n"},
       {"1. e4 e5\n", "1. e9 e5\n2. a1 a2\n"}},
      {"root ::= (\"yes\" | \"no\" | [1-9] [0-9]{0,2} \" items\") \".\"", {"no.", "yes.", "7 items.", "120 items."},
       {"no", "1000 items.", "0 items."}},
      {"root ::= \"\\\"\" [^\"\\\\]* \"\\\"\" .", {"\"abc\"x", "\"\"\"", "\"a\"b"}, {"\"a\"", "\"a\"bc", "\"a\\\"b\"c"}},
      {"root ::= [α-ω]+ \"€\"", {"αβγ€", "ω€"}, {"a€", "€", "αβ"}},
      {"root ::= \"\\x41\\u00e9\\n\\t\\\\\"", {"Aé\n\t\\"}, {"A", "Ae\n\t\\"}},
      {"root ::= ( # a comment\n  \"a\" |\n  \"b\" ) # end\n\n", {"a", "b"}, {"ab", ""}},
      {"root ::= item+\nitem ::= [a-c] | \"-\" item", {"a", "--b", "a-c"}, {"-", "a-", "d"}},
      {"root ::= \"x\" | ", {"", "x"}, {"xx", "y"}},
      {"root ::= [^a-z]", {"A", "0", "é", "\xf0\x9f\x98\x80"}, {"a", "m", "", "AB"}},
      {"root ::= .{2}", {"ab", "é€"}, {"a", "abc"}},
      {"root   ::=   \"a\"   b\nb ::= [-a-]?  # dashes at the edges of the class\n", {"a", "a-", "aa"}, {"ab", "a--"}},
  };
  for (const Case& c : cases) {
    auto g = compile(c.grammar);
    ASSERT_NE(g, nullptr);
    for (const std::string& t : c.accepted) {
      EXPECT_TRUE(accepts(g, t)) << c.grammar << "\nshould accept '" << t << "'";
      for (size_t n = 0; n <= t.size(); ++n) EXPECT_TRUE(viable(g, t.substr(0, n))) << c.grammar << "\nprefix of '" << t << "'";
    }
    for (const std::string& t : c.rejected) EXPECT_FALSE(accepts(g, t)) << c.grammar << "\nshould reject '" << t << "'";
  }
}

TEST(GrammarPrefix, CompleteWhenNothingMayFollow) {
  auto g = compile("root ::= \"ab\" | \"abc\"");
  GrammarPrefix p(g);
  ASSERT_TRUE(p.feed("ab"));
  EXPECT_TRUE(p.can_end());
  EXPECT_FALSE(p.complete());  // "c" may still come
  ASSERT_TRUE(p.feed("c"));
  EXPECT_TRUE(p.complete());
  EXPECT_FALSE(p.feed("c"));

  auto more = compile("root ::= \"a\"+");
  GrammarPrefix q(more);
  ASSERT_TRUE(q.feed("aaa"));
  EXPECT_TRUE(q.can_end());
  EXPECT_FALSE(q.complete());

  // A character's first bytes are kept while some rule could read a character that starts with them.
  auto euro = compile("root ::= \"€\"");
  GrammarPrefix e(euro);
  EXPECT_TRUE(e.feed(static_cast<uint8_t>(0xE2)));
  EXPECT_FALSE(e.can_end());
  EXPECT_TRUE(e.feed(static_cast<uint8_t>(0x82)));
  EXPECT_TRUE(e.feed(static_cast<uint8_t>(0xAC)));
  EXPECT_TRUE(e.complete());
  GrammarPrefix f(euro);
  EXPECT_FALSE(f.feed(static_cast<uint8_t>(0xC3)));  // a 2-byte character cannot be U+20AC
  // A lead byte never stands for an ASCII character (E0 starts U+0800..U+0FFF, F0 U+10000..U+3FFFF).
  auto dot = compile("root ::= \".\" | [\\u0900-\\u0fff]");
  EXPECT_FALSE(GrammarPrefix(dot).feed(static_cast<uint8_t>(0xF0)));
  EXPECT_TRUE(GrammarPrefix(dot).feed(static_cast<uint8_t>(0xE0)));
  EXPECT_FALSE(GrammarPrefix(compile("root ::= \".\"")).feed(static_cast<uint8_t>(0xE0)));
}

// Nullable alternatives nested in a sequence reach one place by 2^n routes: each is expanded once.
TEST(GrammarPrefix, ManyRoutesToOnePlaceStayCheap) {
  std::string text = "root ::=";
  for (int i = 0; i < 40; ++i) text += " a";
  text += " \"!\"\na ::= b | c\nb ::= \"b\"?\nc ::= \"c\"?\n";
  auto g = compile(text);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(accepts(g, "!"));
  EXPECT_TRUE(accepts(g, "bcbcbbcc!"));
  EXPECT_FALSE(accepts(g, std::string(41, 'b') + "!"));
}

// The reference: the ends of every way the elements from `at` can read text[pos..] (memoized recursion;
// the grammar has no left recursion, so it terminates).
class Reference {
 public:
  Reference(const Grammar& g, const std::string& text) : g_(g), text_(text) {}
  bool accepts() {
    for (uint32_t alt : g_.alternatives(g_.root()))
      if (ends(alt, 0).count(text_.size())) return true;
    return false;
  }

 private:
  const std::set<size_t>& ends(uint32_t at, size_t pos) {
    const auto key = std::make_pair(at, pos);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    std::set<size_t> out;
    const Grammar::Element& e = g_.element(at);
    if (e.kind == Grammar::Element::Kind::kEnd) {
      out.insert(pos);
    } else if (e.kind == Grammar::Element::Kind::kChars) {
      if (pos < text_.size() && g_.matches(e.value, static_cast<uint8_t>(text_[pos]))) out = ends(at + 1, pos + 1);
    } else {
      for (uint32_t alt : g_.alternatives(e.value))
        for (size_t mid : std::set<size_t>(ends(alt, pos))) {
          const std::set<size_t>& rest = ends(at + 1, mid);
          out.insert(rest.begin(), rest.end());
        }
    }
    return memo_[key] = std::move(out);
  }
  const Grammar& g_;
  const std::string& text_;
  std::map<std::pair<uint32_t, size_t>, std::set<size_t>> memo_;
};

// Every short string over a small alphabet: GrammarPrefix accepts it whole exactly when the reference does,
// and keeps it as a prefix exactly when some enumerated string of the language starts with it.
TEST(GrammarPrefix, AgreesWithARecursiveMatcherOnEveryShortString) {
  struct Shape {
    std::string grammar, alphabet;
    size_t longest, prefix;  // strings enumerated; the longest prefix whose completions all fit in them
  };
  const std::vector<Shape> grammars = {
      {"root ::= e\ne ::= t (\"+\" t)*\nt ::= \"1\" | \"(\" e \")\"", "1+()", 8, 3},
      {"root ::= (\"a\" | \"ab\")* \"b\"{1,2}", "ab", 12, 6},
      {"root ::= x y\nx ::= \"a\"? \"b\"*\ny ::= (\"b\" \"a\")? | \"c\"", "abc", 9, 6},
      {"root ::= [ab]{2,3} (\"c\" root)?", "abc", 9, 6},
  };
  for (const auto& [text, alphabet, longest, prefix] : grammars) {
    auto g = compile(text);
    ASSERT_NE(g, nullptr);
    std::vector<std::string> all{""};
    for (size_t i = 0; i < all.size(); ++i)
      if (all[i].size() < longest)
        for (char c : alphabet) all.push_back(all[i] + c);
    std::set<std::string> language;
    for (const std::string& s : all)
      if (Reference(*g, s).accepts()) language.insert(s);
    int checked = 0;
    for (const std::string& s : all) {
      if (s.size() > 6) break;
      EXPECT_EQ(accepts(g, s), language.count(s) == 1) << text << "\n'" << s << "'";
      ++checked;
      if (s.size() > prefix) continue;
      const bool completes = std::any_of(language.begin(), language.end(), [&](const std::string& l) { return l.rfind(s, 0) == 0; });
      EXPECT_EQ(viable(g, s), completes) << text << "\nprefix '" << s << "'";
    }
    EXPECT_GT(checked, 100);
    EXPECT_FALSE(language.empty()) << text;
  }
}

// A grammar-constrained request on a tiny model (a byte-level vocabulary, random weights): whatever it
// samples, the reply is a text of the grammar, and the request ends with "stop" once nothing may follow.
TEST(GrammarConstraint, TinyModelWritesATextOfTheGrammar) {
  ferry::testing::TempDir dir;
  auto e = open_tiny_engine(dir);
  ASSERT_TRUE(e.has_value()) << e.status().message();
  auto grammar = compile("root ::= (\"yes\" | \"no\" | [1-9] [0-9]{0,2} \" items\") \".\"");
  SchedulerOptions so;
  so.n_parallel = 1;
  auto s = Scheduler::start(**e, so);
  ASSERT_TRUE(s.has_value()) << s.status().message();
  for (float temp : {0.f, 1.5f, 3.f}) {
    GenerationParams gp;
    gp.max_tokens = 40;
    gp.sampling.temp = temp;
    gp.sampling.seed = 11;
    gp.grammar = grammar;
    auto r = (*s)->submit({1, 2, 3, 4}, gp);
    ASSERT_TRUE(r.has_value()) << r.status().message();
    const RequestUpdate u = (*r)->wait_all();
    ASSERT_EQ(u.reason, FinishReason::kStop) << "temp " << temp << ": " << u.error.message() << " text '" << u.text << "'";
    EXPECT_TRUE(accepts(grammar, u.text)) << u.text;
  }
}

}  // namespace
}  // namespace ferry::serve
