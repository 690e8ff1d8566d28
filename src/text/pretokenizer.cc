// Regex pre-tokenization with PCRE2 (UTF mode, JIT when available).
//
// llama.cpp splits with its own code (hand-written matchers for the gpt2 / llama3 / qwen2 patterns, and
// std::regex over a "collapsed" text for the others), driven by its own Unicode tables (Unicode 15).
// The matchers follow the regex semantics, so the only differences from running the same patterns in
// PCRE2 come from the character classes. We found them by comparing, for every codepoint
// U+0000..U+10FFFF, PCRE2 10.42 (Debian 12, Unicode 14) against llama.cpp's tables:
//   - \s: PCRE2 matches U+180E (MONGOLIAN VOWEL SEPARATOR), llama.cpp does not;
//   - \p{L}, \p{N}, \p{P}: llama.cpp has the Unicode 15.0 additions listed below, PCRE2 10.42 not;
//   - nothing else (no codepoint is in a PCRE2 class but not in llama.cpp's).
// So the patterns spell \s as llama.cpp's exact whitespace list and widen the three categories with
// the missing ranges (redundant, and harmless, with a PCRE2 built on Unicode 15 or later).
#include "text/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstring>

#include "text/unicode.h"

namespace ferry::text {

namespace {

// Unicode 15.0 letters, numbers and punctuation (llama.cpp has them, PCRE2 10.42 does not).
constexpr const char* kExtraL =
    "\\x{1123F}-\\x{11240}\\x{11F02}\\x{11F04}-\\x{11F10}\\x{11F12}-\\x{11F33}\\x{1342F}"
    "\\x{13441}-\\x{13446}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}\\x{1E030}-\\x{1E06D}"
    "\\x{1E4D0}-\\x{1E4EB}\\x{2B739}\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}";
constexpr const char* kExtraN = "\\x{11F50}-\\x{11F59}\\x{1D2C0}-\\x{1D2D3}\\x{1E4F0}-\\x{1E4F9}";
constexpr const char* kExtraP = "\\x{11B00}-\\x{11B09}\\x{11F43}-\\x{11F4F}";
// llama.cpp's unicode_set_whitespace, exactly.
constexpr const char* kWs =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

// llama.cpp's patterns (llama-vocab.cpp, llm_tokenizer_bpe) with the classes written as placeholders
// {L} {N} {P} {WS}, always inside [...]: \p{L} -> [{L}], \s -> [{WS}], \S -> [^{WS}],
// [^\s\p{L}\p{N}] -> [^{WS}{L}{N}].
constexpr const char* kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?[{L}]+| ?[{N}]+| ?[^{WS}{L}{N}]+|[{WS}]+(?![^{WS}])";
constexpr const char* kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n{L}{N}]?[{L}]+|[{N}]{1,3}"
    "| ?[^{WS}{L}{N}]+[\\r\\n]*|[{WS}]*[\\r\\n]+|[{WS}]+(?![^{WS}])|[{WS}]+";
constexpr const char* kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n{L}{N}]?[{L}]+|[{N}]"
    "| ?[^{WS}{L}{N}]+[\\r\\n]*|[{WS}]*[\\r\\n]+|[{WS}]+(?![^{WS}])|[{WS}]+";

// GPT-4o / o200k (gpt-oss, llama4): llama.cpp's form of tokenizer.json's pattern, cased words spelt with
// lookaheads: (?=[{L}])[^a-z] is a letter that is not ASCII lowercase (ASCII uppercase or any other
// letter), (?=[{L}])[^A-Z] one that is not ASCII uppercase. llama.cpp runs it through std::regex over its
// collapsed text, where every non-ASCII letter is one "letter" byte: the same sets as here.
constexpr const char* kGpt4o =
    "[^\\r\\n{L}{N}]?((?=[{L}])([^a-z]))*((?=[{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
    "|[^\\r\\n{L}{N}]?((?=[{L}])([^a-z]))+((?=[{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
    "|[{N}]{1,3}| ?[^{WS}{L}{N}]+[\\r\\n/]*|[{WS}]*[\\r\\n]+|[{WS}]+(?![^{WS}])|[{WS}]+";

std::vector<const char*> patterns_for(PreKind kind) {
  switch (kind) {
    case PreKind::kGpt2: return {kGpt2};
    case PreKind::kLlama3: return {kLlama3};
    case PreKind::kQwen2: return {kQwen2};
    case PreKind::kGpt4o: return {kGpt4o};
    case PreKind::kSmollm: return {"[{N}]", kGpt2};
    case PreKind::kDefault: return {"[{P}$+<=>^~|]+", kGpt2, "[{N}]+", "[0-9][0-9][0-9]"};
  }
  return {};
}

std::string expand(const char* tmpl) {
  std::string out;
  for (const char* p = tmpl; *p; ++p) {
    if (!std::strncmp(p, "{L}", 3)) {
      out += "\\p{L}";
      out += kExtraL;
      p += 2;
    } else if (!std::strncmp(p, "{N}", 3)) {
      out += "\\p{N}";
      out += kExtraN;
      p += 2;
    } else if (!std::strncmp(p, "{P}", 3)) {
      out += "\\p{P}";
      out += kExtraP;
      p += 2;
    } else if (!std::strncmp(p, "{WS}", 4)) {
      out += kWs;
      p += 3;
    } else {
      out += *p;
    }
  }
  return out;
}

struct NameInfo {
  const char* name;
  PreInfo info;
};

// tokenizer.ggml.pre names whose pre-tokenization is one of ours (llama.cpp's llama_vocab::impl::load).
// "gpt2" is our alias of llama.cpp's "gpt-2".
constexpr NameInfo kNames[] = {
    {"default", {PreKind::kDefault, false, false}},
    {"llama3", {PreKind::kLlama3, true, true}},
    {"llama-v3", {PreKind::kLlama3, true, true}},
    {"llama-bpe", {PreKind::kLlama3, true, true}},
    {"falcon3", {PreKind::kLlama3, true, true}},
    {"pixtral", {PreKind::kLlama3, true, true}},
    {"dbrx", {PreKind::kLlama3, false, false}},
    {"smaug-bpe", {PreKind::kLlama3, false, false}},
    {"qwen2", {PreKind::kQwen2, false, false}},
    {"deepseek-r1-qwen", {PreKind::kQwen2, false, false}},
    {"stablelm2", {PreKind::kQwen2, false, false}},
    {"megrez", {PreKind::kQwen2, false, false}},
    {"smollm", {PreKind::kSmollm, false, false}},
    {"starcoder", {PreKind::kSmollm, false, false}},
    {"refact", {PreKind::kSmollm, false, false}},
    {"command-r", {PreKind::kSmollm, false, false}},
    {"codeshell", {PreKind::kSmollm, false, false}},
    {"exaone", {PreKind::kSmollm, false, false}},
    {"gpt-4o", {PreKind::kGpt4o, false, false}},  // gpt-oss (o200k)
    {"llama4", {PreKind::kGpt4o, false, false}},
    {"gpt-2", {PreKind::kGpt2, false, false}},
    {"gpt2", {PreKind::kGpt2, false, false}},
    {"phi-2", {PreKind::kGpt2, false, false}},
    {"mpt", {PreKind::kGpt2, false, false}},
    {"olmo", {PreKind::kGpt2, false, false}},
    {"jais", {PreKind::kGpt2, false, false}},
};

}  // namespace

const char* pre_kind_name(PreKind kind) {
  switch (kind) {
    case PreKind::kDefault: return "default";
    case PreKind::kGpt2: return "gpt2";
    case PreKind::kLlama3: return "llama3";
    case PreKind::kQwen2: return "qwen2";
    case PreKind::kSmollm: return "smollm";
    case PreKind::kGpt4o: return "gpt-4o";
  }
  return "?";
}

std::optional<PreInfo> pre_info_from_name(std::string_view name) {
  if (name.empty()) return PreInfo{};
  for (const auto& n : kNames)
    if (name == n.name) return n.info;
  return std::nullopt;
}

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::~PreTokenizer() = default;

Expected<std::unique_ptr<PreTokenizer>> PreTokenizer::create(PreKind kind) {
  std::unique_ptr<PreTokenizer> pt(new PreTokenizer());
  pt->kind_ = kind;
  for (const char* tmpl : patterns_for(kind)) {
    const std::string pattern = expand(tmpl);
    int err = 0;
    PCRE2_SIZE err_off = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
    if (!code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return make_error(ErrorCode::kInternal, "pre-tokenizer %s: regex error at %zu: %s", pre_kind_name(kind),
                        static_cast<size_t>(err_off), reinterpret_cast<const char*>(msg));
    }
    // JIT is an optimisation only: when unavailable pcre2_match interprets the pattern.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    auto re = std::make_unique<Regex>();
    re->code = code;
    pt->regexes_.push_back(std::move(re));
  }
  return pt;
}

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string> words;
  if (text.empty()) return words;

  // Codepoints as llama.cpp sees them, and a well-formed UTF-8 subject for PCRE2 in which a surrogate
  // (only possible from ill-formed input) stands in as U+E000: both are "other" in every class used.
  const std::vector<uint32_t> cps = decode_utf8_lenient(text);
  const size_t n = cps.size();
  std::string subject;
  subject.reserve(text.size() + 8);
  std::vector<size_t> cp_off(n + 1);           // byte offset of each codepoint in `subject`
  for (size_t i = 0; i < n; ++i) {
    cp_off[i] = subject.size();
    const uint32_t c = cps[i];
    append_utf8(subject, (c >= 0xD800 && c <= 0xDFFF) ? 0xE000 : c);
  }
  cp_off[n] = subject.size();
  std::vector<uint32_t> byte_to_cp(subject.size() + 1, 0);  // valid at codepoint boundaries
  for (size_t i = 0; i <= n; ++i) byte_to_cp[cp_off[i]] = static_cast<uint32_t>(i);

  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);

  // Fragments as [begin, end) in codepoints.
  std::vector<std::pair<uint32_t, uint32_t>> frags = {{0u, static_cast<uint32_t>(n)}};
  std::vector<std::pair<uint32_t, uint32_t>> next;
  for (const auto& re : regexes_) {
    next.clear();
    for (const auto& [fb, fe] : frags) {
      const size_t base = cp_off[fb];
      const size_t len = cp_off[fe] - base;
      const auto* subj = reinterpret_cast<PCRE2_SPTR>(subject.data() + base);
      size_t last = 0;   // end of the previous match, bytes from `base`
      size_t start = 0;  // where the next search begins
      while (start < len) {
        // The JIT runs on its default 32 KiB stack; if a pathological input exhausts it, the
        // interpreter (heap-backed) takes over for that match.
        int rc = pcre2_match(re->code, subj, len, start, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
          rc = pcre2_match(re->code, subj, len, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
        if (rc < 0) break;  // no further match (or a hard limit): the rest is one gap
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t ms = ov[0], me = ov[1];
        if (me == ms) {  // none of our patterns matches empty; guard anyway
          start = ms + utf8_seq_len(static_cast<uint8_t>(subject[base + ms]));
          continue;
        }
        if (ms > last) next.emplace_back(byte_to_cp[base + last], byte_to_cp[base + ms]);
        next.emplace_back(byte_to_cp[base + ms], byte_to_cp[base + me]);
        last = start = me;
      }
      if (last < len) next.emplace_back(byte_to_cp[base + last], fe);
    }
    frags.swap(next);
  }

  pcre2_match_data_free(md);

  words.reserve(frags.size());
  for (const auto& [b, e] : frags) {
    std::string w;
    for (uint32_t i = b; i < e; ++i) append_utf8(w, cps[i]);
    words.push_back(std::move(w));
  }
  return words;
}

}  // namespace ferry::text
