// JSON mode: JsonPrefix accepts exactly the prefixes of JSON objects (checked against tables of valid
// and invalid texts, and against nlohmann::json on every prefix of valid documents); the JSON constraint masks the
// tokens that do not fit; a JSON-mode request on a tiny model writes only a prefix of an object and ends
// when it closes.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "serve/json_prefix.h"
#include "serve/scheduler.h"
#include "serve/tiny_engine.h"
#include "serve/token_constraint.h"

namespace ferry::serve {
namespace {

// Feeds the whole text: -1 when it all fits, else the index of the first byte that does not.
int first_misfit(const std::string& text, JsonPrefix* p = nullptr) {
  JsonPrefix local;
  JsonPrefix& j = p != nullptr ? *p : local;
  for (size_t i = 0; i < text.size(); ++i)
    if (!j.feed(static_cast<uint8_t>(text[i]))) return static_cast<int>(i);
  return -1;
}

bool complete(const std::string& text) {
  JsonPrefix j;
  return first_misfit(text, &j) < 0 && j.complete();
}

TEST(JsonPrefix, CompleteObjects) {
  const std::vector<std::string> docs = {
      "{}",
      " \n{ }",
      R"({"a":1})",
      R"({"a": -0.5e+10, "b": [true, false, null, 0, 12, 3.25, 1E5, -7], "c": {"d": []}})",
      R"({"s": "q\"\\\/\b\f\n\r\t\u00e9\uD83D\uDE00 caf\u00E9"})",
      "{\"utf8\": \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}",
      R"({"":""})",
      R"({"a":[[[[]]]],"b":[{},{"x":[1,{"y":null}]}]})",
  };
  for (const std::string& d : docs) {
    EXPECT_TRUE(complete(d)) << d;
    EXPECT_TRUE(nlohmann::json::accept(d)) << d;  // the table itself is valid JSON
    // Every proper prefix fits and is not complete.
    for (size_t n = 0; n < d.size(); ++n) {
      JsonPrefix j;
      EXPECT_LT(first_misfit(d.substr(0, n), &j), 0) << d.substr(0, n);
      EXPECT_FALSE(j.complete()) << d.substr(0, n);
    }
  }
}

TEST(JsonPrefix, RejectsWhereJsonDoes) {
  // text, index of the first byte that cannot continue an object
  const std::vector<std::pair<std::string, int>> cases = {
      {"{a:1}", 1},                    // keys are strings
      {R"({"a" 1})", 5},
      {R"({"a":})", 5},
      {R"({"a":1,})", 7},              // no trailing comma
      {R"({"a":[1,]})", 8},
      {R"({"a":01})", 6},              // no leading zeros
      {R"({"a":-})", 6},
      {R"({"a":1.})", 7},
      {R"({"a":1e})", 7},
      {R"({"a":.5})", 5},
      {R"({"a":+1})", 5},
      {R"({"a":tru})", 8},
      {R"({"a":nul1})", 8},
      {R"({"a":"\x"})", 7},           // unknown escape
      {R"({"a":"\u12G4"})", 10},
      {"{\"a\":\"\x01\"}", 6},         // raw control character
      {"{\"a\":\"\xc0\xaf\"}", 6},     // overlong UTF-8
      {"{\"a\":\"\xed\xa0\x80\"}", 7},  // a UTF-16 surrogate in UTF-8
      {"{\"a\":\"\xe2\x82\"}", 8},     // a sequence cut short by the quote
      {"{\"a\":\"\xff\"}", 6},
      {R"({"a":1])", 6},               // mismatched closer
      {R"({"a":[1})", 7},
      {"{}x", 2},
  };
  for (const auto& [text, at] : cases) {
    EXPECT_EQ(first_misfit(text), at) << text;
    EXPECT_FALSE(nlohmann::json::accept(text)) << text;
  }
  // Valid JSON that JSON mode does not take: the top level is one object, and nothing follows it.
  for (const auto& [text, at] : std::vector<std::pair<std::string, int>>{{"[]", 0}, {"\"a\"", 0}, {"1", 0}, {"{} ", 2}})
    EXPECT_EQ(first_misfit(text), at) << text;
}

TEST(JsonPrefix, BoundsWhitespaceRunsAndDepth) {
  const std::string ws(JsonPrefix::kMaxWhitespaceRun, ' ');
  EXPECT_LT(first_misfit("{" + ws + "\"a\"" + ws + ":" + ws + "1" + ws + "}"), 0);
  EXPECT_EQ(first_misfit("{" + ws + " "), 1 + JsonPrefix::kMaxWhitespaceRun);
  EXPECT_EQ(first_misfit(R"({"a":1)" + ws + " "), 6 + JsonPrefix::kMaxWhitespaceRun);
  EXPECT_LT(first_misfit("{\"a\":\"" + ws + ws + "\"}"), 0);  // inside a string, spaces are text
  const std::string deep = "{\"a\":" + std::string(JsonPrefix::kMaxDepth - 1, '[');
  EXPECT_LT(first_misfit(deep), 0);
  EXPECT_EQ(first_misfit(deep + "["), static_cast<int>(deep.size()));
}

// Every prefix of each document either fits (and nlohmann reports only "unexpected end of input" for it)
// or, for the whole document, completes: an independent check of the automaton on many shapes.
TEST(JsonPrefix, AgreesWithNlohmannOnPrefixes) {
  nlohmann::json doc = {{"name", "Ada \"L\" \u00e9"}, {"n", {1, -2.5, 3e-7, 0}}, {"ok", true},
                        {"nested", {{"x", nullptr}, {"y", nlohmann::json::array()}}}};
  for (const std::string& text : {doc.dump(), doc.dump(2)}) {
    for (size_t n = 1; n < text.size(); ++n) {
      const std::string p = text.substr(0, n);
      EXPECT_LT(first_misfit(p), 0) << p;
      try {
        const nlohmann::json parsed = nlohmann::json::parse(p);
        ADD_FAILURE() << "nlohmann parsed a proper prefix: " << p << " as " << parsed.dump();
      } catch (const nlohmann::json::parse_error& e) {
        EXPECT_EQ(e.byte, p.size() + 1) << p << ": " << e.what();  // the end of the input, not a bad byte
      }
    }
    EXPECT_TRUE(complete(text));
  }
}

// Random objects: every one is accepted whole, compact and indented; and every mutation of one (a byte
// replaced, inserted or removed) that the automaton takes as a complete document, nlohmann parses as an
// object too (soundness), and one that nlohmann parses as an object (ending at its '}') the automaton takes
// (completeness).
TEST(JsonPrefix, RandomDocumentsAndMutations) {
  std::mt19937 rng(7);
  std::function<nlohmann::json(int)> value = [&](int depth) -> nlohmann::json {
    switch (rng() % (depth > 3 ? 5 : 7)) {
      case 0: return nullptr;
      case 1: return rng() % 2 == 0;
      case 2: return static_cast<int>(rng() % 2001) - 1000;
      case 3: return std::ldexp(static_cast<double>(rng() % 100000), -static_cast<int>(rng() % 20)) - 3.5;
      case 4: {
        static const char* const words[] = {"a", "b c", "q\"uote", "back\\slash", "tab\t", "\u00e9t\u00e9", "\n", ""};
        return std::string(words[rng() % 8]);  // nlohmann escapes it when dumping
      }
      case 5: {
        nlohmann::json a = nlohmann::json::array();
        for (int i = rng() % 4; i > 0; --i) a.push_back(value(depth + 1));
        return a;
      }
      default: {
        nlohmann::json o = nlohmann::json::object();
        for (int i = rng() % 4; i > 0; --i) o["k" + std::to_string(rng() % 10)] = value(depth + 1);
        return o;
      }
    }
  };
  const std::string alphabet = "{}[]\":,0123456789-+.eE \ntruefalsn\\x\x01\xc3\xa9";
  int complete_mutants = 0;
  for (int d = 0; d < 200; ++d) {
    nlohmann::json doc = nlohmann::json::object();
    for (int i = 1 + rng() % 4; i > 0; --i) doc["p" + std::to_string(i)] = value(1);
    for (const std::string& text : {doc.dump(), doc.dump(1)}) {
      ASSERT_TRUE(complete(text)) << text;
      for (int m = 0; m < 50; ++m) {
        std::string t = text;
        const size_t at = rng() % t.size();
        const char c = alphabet[rng() % alphabet.size()];
        switch (rng() % 3) {
          case 0: t[at] = c; break;
          case 1: t.insert(t.begin() + static_cast<std::ptrdiff_t>(at), c); break;
          default: t.erase(at, 1); break;
        }
        if (complete(t)) {
          ++complete_mutants;
          try {
            EXPECT_TRUE(nlohmann::json::parse(t).is_object()) << t;
          } catch (const nlohmann::json::out_of_range&) {
            // A number past double's range (JSON sets no limit; nlohmann does): valid text.
          } catch (const nlohmann::json::parse_error& e) {
            ADD_FAILURE() << t << ": " << e.what();
          }
        } else if (nlohmann::json::accept(t) && nlohmann::json::parse(t).is_object() && t.back() == '}') {
          ADD_FAILURE() << "an object nlohmann parses was refused: " << t;  // completeness
        }
      }
    }
  }
  EXPECT_GT(complete_mutants, 100);  // the property was exercised
}

// A schema: where its documents may go, byte by byte.
int first_misfit_of(const char* schema, const std::string& text, bool* done = nullptr) {
  auto s = JsonSchema::compile(nlohmann::json::parse(schema));
  EXPECT_TRUE(s.has_value()) << s.status().message();
  if (!s) return -2;
  JsonPrefix j(*s);
  const int at = first_misfit(text, &j);
  if (done != nullptr) *done = j.complete();
  return at;
}

const char* const kPerson = R"({
  "$defs": {"Pet": {"type": "object", "properties": {"kind": {"enum": ["cat", "dog"]}, "age": {"type": "integer"}},
                    "required": ["kind"], "additionalProperties": false}},
  "type": "object",
  "properties": {
    "name": {"type": "string", "description": "full name"},
    "age": {"type": "integer"},
    "height": {"type": "number"},
    "ok": {"type": "boolean"},
    "nick": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
    "pets": {"type": "array", "items": {"$ref": "#/$defs/Pet"}},
    "code": {"enum": [1, 10, "x"]}
  },
  "required": ["name", "age"],
  "additionalProperties": false
})";

TEST(JsonSchema, DocumentsTheSchemaAccepts) {
  const std::vector<std::string> docs = {
      R"({"name": "Ada", "age": 36})",
      R"({"age": 36, "name": "Ada"})",  // any order
      R"({"name":"A","age":-1,"height":1.5e2,"ok":false,"nick":null,"tags":["a","b"],"pets":[{"kind":"dog","age":3},{"kind":"cat"}],"code":10})",
      R"({"name": "A", "age": 0, "nick": "Al", "code": 1, "pets": []})",
      R"({"name": "A", "age": 0, "code": "x"})",
  };
  for (const std::string& d : docs) {
    bool done = false;
    EXPECT_EQ(first_misfit_of(kPerson, d, &done), -1) << d;
    EXPECT_TRUE(done) << d;
  }
}

TEST(JsonSchema, RejectsWhereTheSchemaDoes) {
  const std::vector<std::pair<std::string, int>> cases = {
      {R"({"name": "A"})", 12},                  // "age" is required: no '}' yet
      {R"({"name": "A", "x": 1})", 15},          // no other keys
      {R"({"name": "A", "name": "B"})", 16},      // a key at most once ("nick" is the only one left with 'n')
      {R"({"age": 1.5})", 9},                    // an integer has no fraction
      {R"({"age": 1e3})", 9},
      {R"({"age": "1"})", 8},
      {R"({"ok": 1})", 7},
      {R"({"nick": 5})", 9},
      {R"({"tags": []})", 10},                   // minItems 1
      {R"({"tags": ["a", "b", "c"]})", 18},      // maxItems 2
      {R"({"tags": [1]})", 10},
      {R"({"pets": [{"age": 1}]})", 19},         // a pet's kind is required
      {R"({"pets": [{"kind": "cow"}]})", 21},
      {R"({"code": 2})", 9},
      {R"({"code": 100})", 11},
      {R"({"name": "A", "age": 1, "age": 2})", 25},
  };
  for (const auto& [text, at] : cases) EXPECT_EQ(first_misfit_of(kPerson, text), at) << text;
}

// String lengths in characters (an escape or a multi-byte character is one) and integer ranges, decided
// at the first byte no text of the range can start with: a prefix stays while some value it can become fits.
TEST(JsonSchema, StringLengthsAndIntegerRanges) {
  const char* schema = R"({"type": "object", "properties": {
      "s": {"type": "string", "minLength": 2, "maxLength": 3},
      "i": {"type": "integer", "minimum": 10, "maximum": 200},
      "n": {"type": "integer", "minimum": -50, "exclusiveMaximum": -9},
      "p": {"type": "integer", "exclusiveMinimum": 0}}})";
  for (const std::string d : {R"({"s": "ab"})", R"({"s": "é\n"})", R"({"s": "abc"})", R"({"i": 10})", R"({"i": 150})",
                              R"({"i": 200})", R"({"i": 29})", R"({"n": -10})", R"({"n": -50})", R"({"n": -23})",
                              R"({"p": 1})", R"({"p": 123456789012})"}) {
    bool done = false;
    EXPECT_EQ(first_misfit_of(schema, d, &done), -1) << d;
    EXPECT_TRUE(done) << d;
  }
  const std::vector<std::pair<std::string, int>> cases = {
      {R"({"s": "a"})", 8},       // too short: no closing quote yet
      {R"({"s": "abcd"})", 10},   // too long: no fourth character
      {R"({"s": "ab\nc"})", 11},
      {R"({"i": 9})", 7},         // 9 cannot grow into 10..200 without passing them: 9 is complete, and 90.. fit
      {R"({"i": 0})", 6},         // nothing starts with 0
      {R"({"i": -5})", 6},
      {R"({"i": 201})", 8},       // 201 is over, and so is every integer it could grow into
      {R"({"i": 2001})", 9},
      {R"({"i": 1000})", 9},
      {R"({"n": -5})", 8},        // -5 .. -59: only -50 .. -59 could, and -5 itself is out
      {R"({"n": -51})", 8},
      {R"({"n": 0})", 6},
      {R"({"n": 7})", 6},
      {R"({"p": 0})", 6},
      {R"({"p": -1})", 6},
  };
  for (const auto& [text, at] : cases) EXPECT_EQ(first_misfit_of(schema, text), at) << text;
}

TEST(JsonSchema, CompileErrorsNameTheKeyword) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {R"({"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}})", "properties.a: 'pattern' is not supported"},
      {R"({"type": "string"})", "top level must be an object"},
      {R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/Nope"}}})", "does not name a definition"},
      {R"({"type": "object", "properties": {"a": {"type": "strnig"}}})", "'strnig' is not a JSON Schema type"},
      {R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})", "not in properties"},
      {R"({"type": "object", "properties": {"a": {"type": "array", "minItems": 3, "maxItems": 2}}})", "maxItems below minItems"},
      {R"({"type": "object", "properties": {"a": {"allOf": [{}, {}]}}})", "exactly one schema"},
      {R"({"type": "object", "properties": {"a": {"type": "number", "minimum": 0}}})", "of a \"number\" is not supported"},
      {R"({"type": "object", "properties": {"a": {"maximum": 3}}})", "'maximum' without \"type\": \"integer\""},
      {R"({"type": "object", "properties": {"a": {"type": "integer", "minimum": 5, "maximum": 4}}})", "admits no integer"},
      {R"({"type": "object", "properties": {"a": {"type": "string", "minLength": -1}}})", "minLength: must be a non-negative"},
      {R"({"type": "object", "properties": {"a": {"type": "string", "minLength": 3, "maxLength": 2}}})", "maxLength below minLength"},
  };
  for (const auto& [schema, want] : cases) {
    auto s = JsonSchema::compile(nlohmann::json::parse(schema));
    ASSERT_FALSE(s.has_value()) << schema;
    EXPECT_NE(s.status().message().find(want), std::string::npos) << schema << ": " << s.status().message();
  }
  // Recursion through a reference compiles, and nests.
  const char* tree = R"({"$ref": "#/$defs/Node", "$defs": {"Node": {"type": "object",
      "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
      "required": ["v"]}}})";
  bool done = false;
  EXPECT_EQ(first_misfit_of(tree, R"({"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}, {"v": 4}]})", &done), -1);
  EXPECT_TRUE(done);
}

// A JSON-mode request on a tiny model (a byte-level vocabulary of 300 tokens, random weights): its text
// is a prefix of an object at every step, tokens without text (end of text) are never chosen, and a reply
// that ends with "stop" parses as an object.
TEST(JsonMode, TinyModelWritesAnObjectPrefix) {
  ferry::testing::TempDir dir;
  auto e = open_tiny_engine(dir);
  ASSERT_TRUE(e.has_value()) << e.status().message();
  auto pieces = std::make_shared<TokenPieces>((*e)->tokenizer(), (*e)->spec().n_vocab);
  {
    auto jm = json_constraint(pieces, JsonSchema::any_object());
    std::vector<float> row(static_cast<size_t>(pieces->size()), 0.f);
    const int32_t n_fit = jm->mask(row.data(), pieces->size());
    EXPECT_GE(n_fit, 5);  // '{' and the four whitespace bytes at least
    EXPECT_LT(n_fit, 20);
    for (int32_t t = 0; t < pieces->size(); ++t) EXPECT_EQ(std::isfinite(row[t]), jm->fits(t)) << t;
  }
  SchedulerOptions so;
  so.n_parallel = 1;
  auto s = Scheduler::start(**e, so);
  ASSERT_TRUE(s.has_value()) << s.status().message();
  for (float temp : {0.f, 1.5f}) {
    GenerationParams g;
    g.max_tokens = 120;
    g.sampling.temp = temp;
    g.sampling.seed = 3;
    g.json_schema = JsonSchema::any_object();
    auto r = (*s)->submit({1, 2, 3, 4}, g);
    ASSERT_TRUE(r.has_value()) << r.status().message();
    const RequestUpdate u = (*r)->wait_all();
    ASSERT_NE(u.reason, FinishReason::kError) << u.error.message();
    EXPECT_LT(first_misfit(u.text), 0) << u.text;
    if (u.reason == FinishReason::kStop) {
      EXPECT_TRUE(complete(u.text)) << u.text;
      EXPECT_TRUE(nlohmann::json::parse(u.text).is_object()) << u.text;
    } else {
      EXPECT_EQ(u.reason, FinishReason::kLength);
      EXPECT_EQ(u.completion_tokens, 120);
    }
  }
}

}  // namespace
}  // namespace ferry::serve
