// UTF-8 decoding/encoding, the GPT-2 byte mapping and Utf8Streamer (declared in tokenizer.h).
#include "text/unicode.h"

#include <array>

#include "text/tokenizer.h"

namespace ferry::text {

namespace {

// The 256-entry GPT-2 table, built at compile time (immutable, so not mutable global state).
constexpr std::array<uint16_t, 256> make_byte_table() {
  std::array<uint16_t, 256> t{};
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    t[b] = static_cast<uint16_t>(printable ? b : 256 + n++);
  }
  return t;
}
constexpr std::array<uint16_t, 256> kByteToCp = make_byte_table();

constexpr std::array<int16_t, 324> make_cp_table() {
  std::array<int16_t, 324> t{};
  for (auto& v : t) v = -1;
  for (int b = 0; b < 256; ++b) t[kByteToCp[b]] = static_cast<int16_t>(b);
  return t;
}
constexpr std::array<int16_t, 324> kCpToByte = make_cp_table();

bool is_cont(uint8_t c) { return (c & 0xC0) == 0x80; }

}  // namespace

size_t utf8_seq_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

std::vector<uint32_t> decode_utf8_lenient(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t c = p[i];
    if (c < 0x80) {
      out.push_back(c);
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < n && is_cont(p[i + 1])) {
      out.push_back(((c & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu));
      i += 2;
    } else if ((c & 0xF0) == 0xE0 && i + 2 < n && is_cont(p[i + 1]) && is_cont(p[i + 2])) {
      out.push_back(((c & 0x0Fu) << 12) | ((p[i + 1] & 0x3Fu) << 6) | (p[i + 2] & 0x3Fu));
      i += 3;
    } else if ((c & 0xF8) == 0xF0 && i + 3 < n && is_cont(p[i + 1]) && is_cont(p[i + 2]) && is_cont(p[i + 3])) {
      const uint32_t cp = ((c & 0x07u) << 18) | ((p[i + 1] & 0x3Fu) << 12) | ((p[i + 2] & 0x3Fu) << 6) |
                          (p[i + 3] & 0x3Fu);
      // llama.cpp would throw later when re-encoding such a value; we keep going with U+FFFD.
      out.push_back(cp <= 0x10FFFF ? cp : kReplacementChar);
      i += 4;
    } else {
      out.push_back(kReplacementChar);
      i += 1;
    }
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp <= 0x10FFFF) {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    append_utf8(out, kReplacementChar);
  }
}

namespace {

// Length of the well-formed sequence at p[0..n) (Unicode table 3-7), 0 if it is ill-formed, or -k when
// the k available bytes are a valid but incomplete prefix.
int well_formed_len(const uint8_t* p, size_t n) {
  Utf8Lead lead;
  if (!utf8_lead(p[0], &lead)) return 0;
  for (int k = 1; k < lead.len; ++k) {
    if (static_cast<size_t>(k) >= n) return -k;
    const uint8_t b = p[k];
    const bool ok = k == 1 ? (b >= lead.second_lo && b <= lead.second_hi) : is_cont(b);
    if (!ok) return 0;
  }
  return lead.len;
}

}  // namespace

bool utf8_lead(uint8_t c, Utf8Lead* lead) {
  *lead = Utf8Lead{};
  if (c < 0x80) return true;
  if (c >= 0xC2 && c <= 0xDF) {
    lead->len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    lead->len = 3;
    if (c == 0xE0) lead->second_lo = 0xA0;
    if (c == 0xED) lead->second_hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    lead->len = 4;
    if (c == 0xF0) lead->second_lo = 0x90;
    if (c == 0xF4) lead->second_hi = 0x8F;
  } else {
    return false;
  }
  return true;
}

bool is_valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    const int len = well_formed_len(p + i, s.size() - i);
    if (len <= 0) return false;
    i += static_cast<size_t>(len);
  }
  return true;
}

uint32_t byte_to_codepoint(uint8_t byte) { return kByteToCp[byte]; }

int codepoint_to_byte(uint32_t cp) { return cp < kCpToByte.size() ? kCpToByte[cp] : -1; }

void append_byte_as_unicode(std::string& out, uint8_t byte) { append_utf8(out, kByteToCp[byte]); }

// ---- Utf8Streamer ------------------------------------------------------------------------------
// Ill-formed bytes become U+FFFD (one per maximal ill-formed subpart, as the Unicode standard
// recommends); a valid but incomplete sequence at the end waits in pending_ for the next push.
std::string Utf8Streamer::push(std::string_view bytes) {
  pending_.append(bytes.data(), bytes.size());
  std::string out;
  const auto* p = reinterpret_cast<const uint8_t*>(pending_.data());
  const size_t n = pending_.size();
  size_t i = 0;
  while (i < n) {
    const int len = well_formed_len(p + i, n - i);
    if (len > 0) {
      out.append(pending_, i, static_cast<size_t>(len));
      i += static_cast<size_t>(len);
    } else if (len < 0) {
      break;  // incomplete tail: keep it
    } else {
      append_utf8(out, kReplacementChar);
      // Skip the maximal subpart: the lead plus the continuation bytes that were still valid.
      size_t skip = 1;
      while (i + skip < n && well_formed_len(p + i, skip + 1) < 0 && skip < 3) ++skip;
      i += skip;
    }
  }
  pending_.erase(0, i);
  return out;
}

std::string Utf8Streamer::flush() {
  std::string out;
  if (!pending_.empty()) append_utf8(out, kReplacementChar);
  pending_.clear();
  return out;
}

}  // namespace ferry::text
