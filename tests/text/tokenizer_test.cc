// Tokenizers on tiny hand-built vocabularies: byte-level BPE (merge order, ignore_merges, byte
// fallback, special tokens, BOS/EOS flags, EOG, pieces) and SentencePiece (score-ordered merges, byte
// fallback, space prefix, pieces); the special-token partition; errors; loading from a GGUF file.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>

#include "format/gguf.h"
#include "text/tokenizer.h"
#include "text/unicode.h"
#include "text/vocab.h"

namespace ferry::text {
namespace {

const std::string kG = "\xC4\xA0";  // 'Ġ', the byte-level image of ' '

// 256 byte tokens (in byte order, so id == byte), merged tokens, then specials.
VocabData tiny_bpe(const std::string& pre) {
  VocabData d;
  d.model = "gpt2";
  d.pre = pre;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_byte_as_unicode(s, static_cast<uint8_t>(b));
    d.tokens.push_back(s);
  }
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"l", "l"}, {"h", "e"}, {"he", "ll"}, {"hell", "o"}, {kG, "w"}, {"o", "r"}, {kG + "w", "or"},
      {"l", "d"}, {kG + "wor", "ld"}, {"a", "a"}, {"x", "y"} /* "xy" is no token */, {"1", "2"},
  };
  for (const auto& [a, b] : merges) {
    d.merges.push_back(a + " " + b);
    if (a + b != "xy") d.tokens.push_back(a + b);
  }
  d.tokens.push_back(kG + "zz");  // reachable only through ignore_merges
  d.token_types.assign(d.tokens.size(), 1);
  for (const char* s : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    d.tokens.push_back(s);
    d.token_types.push_back(3);
  }
  d.tokens.push_back("<tool>");
  d.token_types.push_back(4);
  return d;
}

std::unique_ptr<Tokenizer> make(VocabData d) {
  auto t = make_tokenizer(std::move(d));
  EXPECT_TRUE(t.has_value()) << t.status().message();
  return t.has_value() ? std::move(*t) : nullptr;
}

Token id_of(const VocabData& d, const std::string& text) {
  for (size_t i = 0; i < d.tokens.size(); ++i)
    if (d.tokens[i] == text) return static_cast<Token>(i);
  ADD_FAILURE() << "no token " << text;
  return -1;
}

std::string decode(const Tokenizer& t, const std::vector<Token>& ids, bool special = false) {
  std::string s;
  for (Token id : ids) s += t.token_to_piece(id, special);
  return s;
}

TEST(Bpe, MergesByRank) {
  const VocabData d = tiny_bpe("gpt-2");
  auto t = make(d);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("hello world", false, false), (std::vector<Token>{id_of(d, "hello"), id_of(d, kG + "world")}));
  EXPECT_EQ(t->encode("hello  world", false, false),
            (std::vector<Token>{id_of(d, "hello"), ' ', id_of(d, kG + "world")}));
  // Equal ranks: the leftmost pair first.
  EXPECT_EQ(t->encode("aaa", false, false), (std::vector<Token>{id_of(d, "aa"), 'a'}));
  // A merge whose result is not a token falls back to single-byte tokens.
  EXPECT_EQ(t->encode("xy", false, false), (std::vector<Token>{'x', 'y'}));
  // Non-ASCII: every UTF-8 byte is a token of its own here.
  EXPECT_EQ(t->encode("\xC3\xA9", false, false), (std::vector<Token>{0xC3, 0xA9}));
  EXPECT_EQ(decode(*t, t->encode("hello  world\n\xC3\xA9!", false, false)), "hello  world\n\xC3\xA9!");
}

TEST(Bpe, IgnoreMergesForLlama3) {
  VocabData d = tiny_bpe("llama-bpe");
  auto l3 = make(d);
  auto g2 = make(tiny_bpe("gpt-2"));
  ASSERT_TRUE(l3 && g2);
  EXPECT_EQ(l3->encode(" zz", false, false), (std::vector<Token>{id_of(d, kG + "zz")}));
  EXPECT_EQ(g2->encode(" zz", false, false), (std::vector<Token>{' ', 'z', 'z'}));
}

TEST(Bpe, DigitsPerPreTokenizer) {
  VocabData d = tiny_bpe("gpt-2");
  const Token t12 = id_of(d, "12");
  EXPECT_EQ(make(tiny_bpe("gpt-2"))->encode("123", false, false), (std::vector<Token>{t12, '3'}));
  EXPECT_EQ(make(tiny_bpe("smollm"))->encode("123", false, false), (std::vector<Token>{'1', '2', '3'}));
  EXPECT_EQ(make(tiny_bpe("qwen2"))->encode("123", false, false), (std::vector<Token>{'1', '2', '3'}));
  EXPECT_EQ(make(tiny_bpe("llama3"))->encode("1212", false, false), (std::vector<Token>{t12, '1', '2'}));
}

TEST(Bpe, SpecialTokens) {
  const VocabData d = tiny_bpe("gpt-2");
  auto t = make(d);
  ASSERT_TRUE(t);
  const Token start = id_of(d, "<|im_start|>"), end = id_of(d, "<|im_end|>"), tool = id_of(d, "<tool>");
  EXPECT_EQ(t->encode("<|im_start|>hello<|im_end|>", false, true),
            (std::vector<Token>{start, id_of(d, "hello"), end}));
  // Without parse_special the text is plain text...
  const auto plain = t->encode("<|im_start|>hello", false, false);
  EXPECT_EQ(plain.front(), '<');
  EXPECT_EQ(std::count(plain.begin(), plain.end(), start), 0);
  // ...but user-defined tokens are always matched.
  EXPECT_EQ(t->encode("a<tool>b", false, false), (std::vector<Token>{'a', tool, 'b'}));
  // Pieces: control tokens only when rendering specials; user-defined always.
  EXPECT_EQ(t->token_to_piece(start, false), "");
  EXPECT_EQ(t->token_to_piece(start, true), "<|im_start|>");
  EXPECT_EQ(t->token_to_piece(tool, false), "<tool>");
  EXPECT_EQ(t->token_to_piece(id_of(d, kG + "world"), false), " world");
  EXPECT_EQ(t->token_to_piece(-1, true), "");
  EXPECT_EQ(t->token_to_piece(t->vocab_size(), true), "");
}

TEST(Bpe, BosEosAndEog) {
  VocabData d = tiny_bpe("gpt-2");
  const Token eot = id_of(d, "<|endoftext|>"), end = id_of(d, "<|im_end|>"), start = id_of(d, "<|im_start|>");
  auto plain = make(d);
  EXPECT_FALSE(plain->special().add_bos);       // gpt-2: no BOS unless the file says so
  EXPECT_EQ(plain->special().bos, 11);          // llama.cpp's BPE default id, inside this vocabulary
  EXPECT_EQ(plain->encode("a", true, true), (std::vector<Token>{'a'}));
  EXPECT_TRUE(make(tiny_bpe("llama-bpe"))->special().add_bos);  // the llama3 family adds BOS

  d.bos = start;
  d.eos = end;
  d.add_bos = true;
  d.add_eos = true;
  auto t = make(d);
  EXPECT_EQ(t->encode("a", true, true), (std::vector<Token>{start, 'a', end}));
  EXPECT_EQ(t->encode("a", false, true), (std::vector<Token>{'a'}));
  EXPECT_TRUE(t->is_eog(end));
  EXPECT_TRUE(t->is_eog(eot));  // "<|endoftext|>" is EOG by its text, as in llama.cpp
  EXPECT_FALSE(t->is_eog(start));
  EXPECT_FALSE(t->is_eog('a'));
  EXPECT_FALSE(t->is_eog(-1));
  EXPECT_EQ(t->special().eot, eot);  // the only EOT-looking text here
}

// ---- SentencePiece -------------------------------------------------------------------------------

const std::string kSp = "\xE2\x96\x81";  // U+2581

VocabData tiny_spm(bool space_prefix) {
  VocabData d;
  d.model = "llama";
  auto add = [&](const std::string& s, float score, int type) {
    d.tokens.push_back(s);
    d.scores.push_back(score);
    d.token_types.push_back(type);
  };
  add("<unk>", 0, 2);
  add("<s>", 0, 3);
  add("</s>", 0, 3);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    add(buf, 0, 6);
  }
  for (const char* c : {"h", "e", "l", "o", "w", "r", "d"}) add(c, -1, 1);
  add(kSp, -1, 1);
  add("ll", -2, 1);
  add("he", -3, 1);
  add(kSp + "he", -4, 1);
  add("llo", -5, 1);
  add("hello", -6, 1);
  add(kSp + "hello", -7, 1);
  add("<start>", 0, 4);  // user-defined
  d.add_space_prefix = space_prefix;
  return d;
}

TEST(Spm, MergesByScoreWithSpacePrefix) {
  const VocabData d = tiny_spm(true);
  auto t = make(d);
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->special().add_bos);  // SentencePiece default
  EXPECT_EQ(t->special().bos, 1);
  EXPECT_EQ(t->special().eos, 2);
  EXPECT_EQ(t->special().unk, 0);
  // ll(-2) first, then he(-3), then ▁he(-4), llo(-5), and ▁he+llo = ▁hello.
  EXPECT_EQ(t->encode("hello", false, false), (std::vector<Token>{id_of(d, kSp + "hello")}));
  EXPECT_EQ(t->encode("hello", true, false), (std::vector<Token>{1, id_of(d, kSp + "hello")}));
  EXPECT_EQ(t->token_to_piece(id_of(d, kSp + "hello"), false), " hello");
}

TEST(Spm, NoSpacePrefixAndByteFallback) {
  const VocabData d = tiny_spm(false);
  auto t = make(d);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("hello", false, false), (std::vector<Token>{id_of(d, "hello")}));
  // 'é' is not a piece: its UTF-8 bytes as <0xC3> <0xA9>; '!' likewise.
  const Token c3 = id_of(d, "<0xC3>"), a9 = id_of(d, "<0xA9>"), bang = id_of(d, "<0x21>");
  EXPECT_EQ(t->encode("\xC3\xA9!", false, false), (std::vector<Token>{c3, a9, bang}));
  EXPECT_EQ(t->encode("hello hello", false, false),
            (std::vector<Token>{id_of(d, "hello"), id_of(d, kSp + "hello")}));
  EXPECT_EQ(decode(*t, t->encode("hello \xC3\xA9 world!", false, false)), "hello \xC3\xA9 world!");
  EXPECT_EQ(t->token_to_piece(c3, false), "\xC3");
}

TEST(Spm, SpecialTokensAndPrefixAfterThem) {
  const VocabData d = tiny_spm(true);
  auto t = make(d);
  ASSERT_TRUE(t);
  const Token start = id_of(d, "<start>"), hello = id_of(d, kSp + "hello");
  // A fragment after a special token gets the space prefix too (llama.cpp).
  EXPECT_EQ(t->encode("<s>hello", false, true), (std::vector<Token>{1, hello}));
  EXPECT_EQ(t->encode("<start>hello", false, false), (std::vector<Token>{start, hello}));
  EXPECT_TRUE(t->is_eog(2));
  EXPECT_EQ(t->token_to_piece(1, false), "");
  EXPECT_EQ(t->token_to_piece(1, true), "<s>");
  EXPECT_EQ(t->token_to_piece(start, false), "<start>");
}

// ---- Vocab ---------------------------------------------------------------------------------------

TEST(Vocab, PartitionTakesLongerSpecialsFirst) {
  VocabData d;
  d.model = "gpt2";
  d.tokens = {"a", "b", "c", "d", "ab", "bcd"};
  d.token_types = {1, 1, 1, 1, 4, 4};
  auto v = Vocab::build(std::move(d), Vocab::Model::kBpe);
  ASSERT_TRUE(v.has_value());
  // "bcd" (longer) claims its text before "ab" is looked for, as in llama.cpp: not leftmost-longest.
  const auto f = (*v)->partition("abcd", false);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].token, -1);
  EXPECT_EQ(f[0].offset, 0u);
  EXPECT_EQ(f[0].length, 1u);
  EXPECT_EQ(f[1].token, 5);
  EXPECT_TRUE((*v)->partition("", true).empty());
}

TEST(Vocab, EmptyTextsAndDefaults) {
  VocabData d;
  d.model = "llama";
  d.tokens = {"x", "", "y"};
  auto v = Vocab::build(std::move(d), Vocab::Model::kSpm);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ((*v)->text(1), "[EMPTY_1]");
  EXPECT_EQ((*v)->special().bos, 1);
  EXPECT_EQ((*v)->special().eos, 2);
  VocabData small;
  small.model = "gpt2";
  small.tokens = {"a", "b"};
  auto s = Vocab::build(std::move(small), Vocab::Model::kBpe);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ((*s)->special().bos, -1);  // the default 11 is outside the vocabulary
}

TEST(Tokenizer, Errors) {
  VocabData d = tiny_bpe("no-such-pre");
  auto r = make_tokenizer(d);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(r.status().message().find("no-such-pre"), std::string::npos);

  d = tiny_bpe("gpt-2");
  d.model = "bert";
  EXPECT_EQ(make_tokenizer(d).status().code(), ErrorCode::kUnsupported);

  d = tiny_bpe("gpt-2");
  d.merges.clear();
  EXPECT_EQ(make_tokenizer(d).status().code(), ErrorCode::kCorrupt);

  d = tiny_bpe("gpt-2");
  d.tokens.push_back("hello");
  d.token_types.push_back(1);
  EXPECT_EQ(make_tokenizer(d).status().code(), ErrorCode::kCorrupt);  // repeated text

  VocabData empty;
  empty.model = "llama";
  EXPECT_EQ(make_tokenizer(empty).status().code(), ErrorCode::kCorrupt);

  VocabData short_scores = tiny_spm(false);
  short_scores.scores.resize(3);
  EXPECT_EQ(make_tokenizer(short_scores).status().code(), ErrorCode::kCorrupt);
}

// ---- from a GGUF file ----------------------------------------------------------------------------

class TempFile {
 public:
  TempFile() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ferry_text_XXXXXX").string();
    const int fd = ::mkstemp(tmpl.data());
    if (fd >= 0) ::close(fd);
    path_ = tmpl;
  }
  ~TempFile() { std::filesystem::remove(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(Tokenizer, FromGguf) {
  const VocabData d = tiny_bpe("qwen2");
  TempFile f;
  {
    auto w = gguf::Writer::create(f.path());
    ASSERT_TRUE(w.has_value()) << w.status().message();
    (*w)->add_string("general.architecture", "qwen2");
    (*w)->add_string("tokenizer.ggml.model", d.model);
    (*w)->add_string("tokenizer.ggml.pre", d.pre);
    (*w)->add_string_array("tokenizer.ggml.tokens", d.tokens);
    (*w)->add_i32_array("tokenizer.ggml.token_type", d.token_types);
    (*w)->add_string_array("tokenizer.ggml.merges", d.merges);
    (*w)->add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(id_of(d, "<|im_start|>")));
    (*w)->add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(id_of(d, "<|im_end|>")));
    (*w)->add_bool("tokenizer.ggml.add_bos_token", true);
    ASSERT_TRUE((*w)->begin_data().is_ok());
    ASSERT_TRUE((*w)->finish().is_ok());
  }
  auto mf = gguf::ModelFile::open(f.path());
  ASSERT_TRUE(mf.has_value()) << mf.status().message();
  auto t = Tokenizer::from_gguf(**mf);
  ASSERT_TRUE(t.has_value()) << t.status().message();
  EXPECT_EQ((*t)->vocab_size(), static_cast<int32_t>(d.tokens.size()));
  EXPECT_EQ((*t)->encode("hello world", true, true),
            (std::vector<Token>{id_of(d, "<|im_start|>"), id_of(d, "hello"), id_of(d, kG + "world")}));
  EXPECT_TRUE((*t)->is_eog(id_of(d, "<|im_end|>")));
}

TEST(Tokenizer, FromGgufWithoutVocabulary) {
  TempFile f;
  {
    auto w = gguf::Writer::create(f.path());
    ASSERT_TRUE(w.has_value());
    (*w)->add_string("general.architecture", "llama");
    ASSERT_TRUE((*w)->begin_data().is_ok());
    ASSERT_TRUE((*w)->finish().is_ok());
  }
  auto mf = gguf::ModelFile::open(f.path());
  ASSERT_TRUE(mf.has_value());
  auto t = Tokenizer::from_gguf(**mf);
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.status().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace ferry::text
