// Pre-tokenizer splits per kind, including the character classes where PCRE2 alone would differ from
// llama.cpp (U+0085 and U+180E whitespace, Unicode 15 letters and digits).
#include <gtest/gtest.h>

#include "text/pretokenizer.h"

namespace ferry::text {
namespace {

using Words = std::vector<std::string>;

Words split(PreKind kind, std::string_view text) {
  auto pt = PreTokenizer::create(kind);
  EXPECT_TRUE(pt.has_value()) << pt.status().message();
  return pt.has_value() ? (*pt)->split(text) : Words{};
}

TEST(PreTokenizer, Names) {
  auto l3 = pre_info_from_name("llama-bpe");
  ASSERT_TRUE(l3);
  EXPECT_EQ(l3->kind, PreKind::kLlama3);
  EXPECT_TRUE(l3->ignore_merges);
  EXPECT_TRUE(l3->add_bos);
  EXPECT_EQ(pre_info_from_name("qwen2")->kind, PreKind::kQwen2);
  EXPECT_FALSE(pre_info_from_name("qwen2")->add_bos);
  EXPECT_EQ(pre_info_from_name("smollm")->kind, PreKind::kSmollm);
  EXPECT_EQ(pre_info_from_name("gpt-2")->kind, PreKind::kGpt2);
  EXPECT_EQ(pre_info_from_name("default")->kind, PreKind::kDefault);
  EXPECT_EQ(pre_info_from_name("")->kind, PreKind::kDefault);
  EXPECT_FALSE(pre_info_from_name("no-such-pre"));
}

TEST(PreTokenizer, Gpt2) {
  EXPECT_EQ(split(PreKind::kGpt2, "Hello world's 123  x"),
            (Words{"Hello", " world", "'s", " 123", " ", " x"}));
  EXPECT_EQ(split(PreKind::kGpt2, "I'M here"), (Words{"I", "'", "M", " here"}));  // case-sensitive
  EXPECT_EQ(split(PreKind::kGpt2, "a\tb"), (Words{"a", "\t", "b"}));
  EXPECT_EQ(split(PreKind::kGpt2, "end  "), (Words{"end", "  "}));
  EXPECT_EQ(split(PreKind::kGpt2, " !!?x"), (Words{" !!?", "x"}));
  EXPECT_TRUE(split(PreKind::kGpt2, "").empty());
}

TEST(PreTokenizer, Llama3) {
  EXPECT_EQ(split(PreKind::kLlama3, "12345"), (Words{"123", "45"}));
  EXPECT_EQ(split(PreKind::kLlama3, "Hello\n\nWorld"), (Words{"Hello", "\n\n", "World"}));
  EXPECT_EQ(split(PreKind::kLlama3, "I'M ok"), (Words{"I", "'M", " ok"}));
  EXPECT_EQ(split(PreKind::kLlama3, " ?!\n\nx"), (Words{" ?!\n\n", "x"}));
  EXPECT_EQ(split(PreKind::kLlama3, "a  \n  b"), (Words{"a", "  \n", " ", " b"}));
  EXPECT_EQ(split(PreKind::kLlama3, "\tx"), (Words{"\tx"}));
}

TEST(PreTokenizer, Qwen2AndSmollmSplitDigits) {
  EXPECT_EQ(split(PreKind::kQwen2, "x 12345"), (Words{"x", " ", "1", "2", "3", "4", "5"}));
  EXPECT_EQ(split(PreKind::kSmollm, " 12abc"), (Words{" ", "1", "2", "abc"}));
  EXPECT_EQ(split(PreKind::kSmollm, "v1.2"), (Words{"v", "1", ".", "2"}));
}

TEST(PreTokenizer, Default) {
  EXPECT_EQ(split(PreKind::kDefault, "a.b,,c 1234"), (Words{"a", ".", "b", ",,", "c", " ", "123", "4"}));
}

TEST(PreTokenizer, WhitespaceIsLlamaCppsSet) {
  // U+0085 (NEL) is whitespace for llama.cpp; U+180E is not (PCRE2's \s says the opposite for U+180E).
  EXPECT_EQ(split(PreKind::kGpt2, "a\xC2\x85\xC2\x85" "b"), (Words{"a", "\xC2\x85", "\xC2\x85", "b"}));
  EXPECT_EQ(split(PreKind::kGpt2, "a\xE1\xA0\x8E\xE1\xA0\x8E" "b"), (Words{"a", "\xE1\xA0\x8E\xE1\xA0\x8E", "b"}));
  EXPECT_EQ(split(PreKind::kLlama3, "x\xE3\x80\x80\xE3\x80\x80y"), (Words{"x", "\xE3\x80\x80", "\xE3\x80\x80y"}));
}

TEST(PreTokenizer, Unicode15Classes) {
  // U+11F04 KAWI LETTER A (Lo) and U+11F50 KAWI DIGIT ZERO (Nd) are Unicode 15.0.
  EXPECT_EQ(split(PreKind::kGpt2, "x\xF0\x91\xBC\x84y"), (Words{"x\xF0\x91\xBC\x84y"}));
  EXPECT_EQ(split(PreKind::kQwen2, "\xF0\x91\xBD\x90\xF0\x91\xBD\x91"),
            (Words{"\xF0\x91\xBD\x90", "\xF0\x91\xBD\x91"}));
}

TEST(PreTokenizer, InvalidUtf8BecomesReplacementCharacter) {
  EXPECT_EQ(split(PreKind::kGpt2, "a\xFF" "b"), (Words{"a", "\xEF\xBF\xBD", "b"}));
  EXPECT_EQ(split(PreKind::kLlama3, "\xC3"), (Words{"\xEF\xBF\xBD"}));
}

TEST(PreTokenizer, LongRuns) {
  const std::string spaces(200000, ' ');
  const Words w = split(PreKind::kLlama3, spaces + "x");
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].size(), spaces.size() - 1);
  EXPECT_EQ(w[1], " x");
  EXPECT_EQ(split(PreKind::kGpt2, std::string(100000, 'a')).size(), 1u);
}

}  // namespace
}  // namespace ferry::text
