// UTF-8 decoding/encoding as llama.cpp does it, the GPT-2 byte mapping, and Utf8Streamer.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "text/tokenizer.h"
#include "text/unicode.h"

namespace ferry::text {
namespace {

TEST(ByteMapping, IsABijectionOntoPrintableCodepoints) {
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = byte_to_codepoint(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second) << b;
    EXPECT_EQ(codepoint_to_byte(cp), b);
    EXPECT_GT(cp, 0x20u);
    EXPECT_NE(cp, 0x7Fu);
  }
  EXPECT_EQ(codepoint_to_byte(0x41), 0x41);
  EXPECT_EQ(codepoint_to_byte(0x0144), -1);  // first codepoint past the 68 remapped bytes
  EXPECT_EQ(codepoint_to_byte(0x4E00), -1);
}

TEST(ByteMapping, KnownValues) {
  EXPECT_EQ(byte_to_codepoint(' '), 0x0120u);   // 'Ġ'
  EXPECT_EQ(byte_to_codepoint('\n'), 0x010Au);  // 'Ċ'
  EXPECT_EQ(byte_to_codepoint('\t'), 0x0109u);  // 'ĉ'
  EXPECT_EQ(byte_to_codepoint(0x00), 0x0100u);
  EXPECT_EQ(byte_to_codepoint(0x7F), 0x0121u);
  EXPECT_EQ(byte_to_codepoint(0xAD), 0x0143u);
  EXPECT_EQ(byte_to_codepoint('a'), static_cast<uint32_t>('a'));
  EXPECT_EQ(byte_to_codepoint(0xE9), 0xE9u);
  std::string s;
  append_byte_as_unicode(s, ' ');
  EXPECT_EQ(s, "\xC4\xA0");
}

TEST(Utf8, LenientDecodeMatchesLlamaCpp) {
  EXPECT_EQ(decode_utf8_lenient("a\xC3\xA9\xE4\xBD\xA0\xF0\x9F\x98\x80"),
            (std::vector<uint32_t>{'a', 0xE9, 0x4F60, 0x1F600}));
  // Bad bytes are one U+FFFD each and decoding resumes at the next byte.
  EXPECT_EQ(decode_utf8_lenient("\xFF" "a\x80"), (std::vector<uint32_t>{0xFFFD, 'a', 0xFFFD}));
  EXPECT_EQ(decode_utf8_lenient("\xE2\x82" "A"), (std::vector<uint32_t>{0xFFFD, 0xFFFD, 'A'}));
  EXPECT_EQ(decode_utf8_lenient("\xC3"), (std::vector<uint32_t>{0xFFFD}));
  // llama.cpp accepts overlong forms and surrogates as they decode.
  EXPECT_EQ(decode_utf8_lenient("\xC0\xAF"), (std::vector<uint32_t>{0x2F}));
  EXPECT_EQ(decode_utf8_lenient("\xED\xA0\x80"), (std::vector<uint32_t>{0xD800}));
  EXPECT_EQ(decode_utf8_lenient("\xF4\x90\x80\x80"), (std::vector<uint32_t>{0xFFFD}));  // > U+10FFFF
  EXPECT_TRUE(decode_utf8_lenient("").empty());
}

TEST(Utf8, EncodeAndValidate) {
  for (uint32_t cp : {0x0u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFFu, 0x10000u, 0x10FFFFu}) {
    std::string s;
    append_utf8(s, cp);
    EXPECT_TRUE(is_valid_utf8(s)) << cp;
    EXPECT_EQ(decode_utf8_lenient(s), std::vector<uint32_t>{cp});
  }
  std::string big;
  append_utf8(big, 0x110000);
  EXPECT_EQ(big, "\xEF\xBF\xBD");
  EXPECT_FALSE(is_valid_utf8("\xC0\xAF"));
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));
  EXPECT_FALSE(is_valid_utf8("\xE2\x82"));
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_EQ(utf8_seq_len(0x41), 1u);
  EXPECT_EQ(utf8_seq_len(0x80), 1u);
  EXPECT_EQ(utf8_seq_len(0xC3), 2u);
  EXPECT_EQ(utf8_seq_len(0xE4), 3u);
  EXPECT_EQ(utf8_seq_len(0xF0), 4u);
}

TEST(Utf8Streamer, HoldsBackSplitMultibyteSequences) {
  Utf8Streamer s;
  EXPECT_EQ(s.push("caf"), "caf");
  EXPECT_EQ(s.push("\xC3"), "");
  EXPECT_EQ(s.push("\xA9!"), "\xC3\xA9!");
  const std::string emoji = "\xF0\x9F\x98\x80";
  for (size_t i = 0; i + 1 < emoji.size(); ++i) EXPECT_EQ(s.push(emoji.substr(i, 1)), "");
  EXPECT_EQ(s.push(emoji.substr(3)), emoji);
  EXPECT_EQ(s.push("\xE4\xBD"), "");
  EXPECT_EQ(s.push("\xA0\xE5"), "\xE4\xBD\xA0");
  EXPECT_EQ(s.push("\xA5\xBD"), "\xE5\xA5\xBD");
  EXPECT_EQ(s.flush(), "");
}

TEST(Utf8Streamer, InvalidBytesBecomeReplacementCharacters) {
  const std::string r = "\xEF\xBF\xBD";
  Utf8Streamer s;
  EXPECT_EQ(s.push("\xFF"), r);
  EXPECT_EQ(s.push("a\x80" "b"), "a" + r + "b");
  EXPECT_EQ(s.push("\xE2\x82" "A"), r + "A");          // maximal subpart E2 82 -> one U+FFFD
  EXPECT_EQ(s.push("\xED\xA0\x80"), r + r + r);        // surrogate: ED is ill-formed with A0
  EXPECT_EQ(s.push("\xC0\xAF"), r + r);                // overlong
  EXPECT_EQ(s.push("\xF0\x9F"), "");
  EXPECT_EQ(s.push("x"), r + "x");                     // the pending prefix is broken by 'x'
  EXPECT_EQ(s.push("\xE2\x82"), "");
  EXPECT_EQ(s.flush(), r);                             // incomplete at the end
  EXPECT_EQ(s.flush(), "");
}

TEST(Utf8Streamer, OutputIsAlwaysValidAndLosesNothingValid) {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::string in;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      switch (rng() % 4) {
        case 0: in += static_cast<char>(rng() % 256); break;
        case 1: in += "\xC3\xA9"; break;
        case 2: in += "\xF0\x9F\x98\x80"; break;
        default: in += static_cast<char>('a' + rng() % 26); break;
      }
    }
    Utf8Streamer s;
    std::string out;
    for (size_t i = 0; i < in.size();) {
      const size_t k = std::min<size_t>(in.size() - i, 1 + rng() % 5);
      out += s.push(in.substr(i, k));
      i += k;
    }
    out += s.flush();
    EXPECT_TRUE(is_valid_utf8(out));
    if (is_valid_utf8(in)) EXPECT_EQ(out, in);
  }
}

}  // namespace
}  // namespace ferry::text
