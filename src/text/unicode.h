// UTF-8 helpers shared by the tokenizers: decoding that treats bad bytes exactly as llama.cpp does (so
// token ids match on any input), encoding, and the GPT-2 byte <-> printable-codepoint mapping used by
// byte-level BPE vocabularies (byte 0x20 ' ' is stored as U+0120 'Ġ', and so on).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::text {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Length of the UTF-8 sequence announced by a lead byte, from its top 4 bits (1 for ASCII and for
// continuation bytes, 2 for 0xC0-0xDF, 3 for 0xE0-0xEF, 4 for 0xF0-0xFF). No validation.
size_t utf8_seq_len(uint8_t lead);

// Decodes leniently, as llama.cpp's unicode_cpts_from_utf8: a sequence is taken from its lead byte if
// its continuation bytes are there (overlong forms and surrogates are accepted); anything else yields
// U+FFFD and skips one byte. Codepoints above 0x10FFFF (leads 0xF5-0xF7) are returned as U+FFFD.
std::vector<uint32_t> decode_utf8_lenient(std::string_view s);

// Appends the UTF-8 encoding of `cp` (surrogates are encoded as 3 bytes, like llama.cpp does);
// cp > 0x10FFFF is written as U+FFFD.
void append_utf8(std::string& out, uint32_t cp);

// True when `s` is well-formed UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
bool is_valid_utf8(std::string_view s);

// A lead byte of well-formed UTF-8 (Unicode table 3-7): the sequence's length and the range of its second
// byte (the later ones are 0x80-0xBF). ASCII: length 1. False for a byte that cannot start a sequence.
struct Utf8Lead {
  int len = 1;
  uint8_t second_lo = 0x80, second_hi = 0xBF;
};
bool utf8_lead(uint8_t c, Utf8Lead* lead);

// GPT-2 byte-level mapping: every byte has a printable codepoint. Bytes 0x21-0x7E, 0xA1-0xAC and
// 0xAE-0xFF map to themselves; the 68 others map to U+0100.. in byte order.
uint32_t byte_to_codepoint(uint8_t byte);
// Inverse of byte_to_codepoint; -1 when `cp` is not the image of a byte.
int codepoint_to_byte(uint32_t cp);
// UTF-8 of byte_to_codepoint(byte) appended to `out`.
void append_byte_as_unicode(std::string& out, uint8_t byte);

}  // namespace ferry::text
