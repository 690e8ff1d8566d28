// ferry synth's vocabularies (see model/synth.h): byte-level BPE with merges of common words first, or a
// SentencePiece-style one for gemma presets, with each family's special tokens and chat template.
#include "model/synth.h"

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <string>
#include <vector>

#include "model/synth_random.h"

namespace ferry::model {
namespace {

using synth_detail::fnv1a;
using synth_detail::Rng;
using V = SynthVocabStyle;

// ---- vocabulary -------------------------------------------------------------------------------
// Common English words and code keywords, most frequent first: their merges come first, so ordinary
// text tokenizes into whole words as with a trained vocabulary; random merges fill the rest.
constexpr const char* kWords =
    "the of and to in a is that for it as was with be by on not he this are or his from at which but have an "
    "they you were her she there been one all we their has would when if will more no out so what up said "
    "about other into than its time only could new them man some these then two first may any like now my "
    "such make over our even most me state after also made many did must before back see through way where "
    "get much go well your know should down work year because come people just say each those take day good "
    "how long little own very world still life us great old being never here under last same might another "
    "while found public house part against right both without between high place every small thing think "
    "large need home number hand water system world point form during however within given second once open "
    "ing tion ed er ly es ment ness able ation ity ive ous al ers est ies ings "
    "def return int void self import from class print true false none null const let var function struct "
    "static public private include define main argc argv string vector size for while if else elif try catch "
    "0 1 2 3 4 5 6 7 8 9 00 000 10 100 12 20 2024 "
    ". , ; : ! ? ( ) [ ] { } \" ' - _ = + * / < > == != -> :: // /* */ ## ...";

constexpr const char* kLlama3Specials[] = {
    "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
    "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"};
// Qwen2.5 added tokens; the bool marks the ones tokenizer.json flags "special" (CONTROL); the others
// are USER_DEFINED. Qwen3 appends the last four.
constexpr std::pair<const char*, bool> kQwenSpecials[] = {
    {"<|endoftext|>", true}, {"<|im_start|>", true}, {"<|im_end|>", true}, {"<|object_ref_start|>", true},
    {"<|object_ref_end|>", true}, {"<|box_start|>", true}, {"<|box_end|>", true}, {"<|quad_start|>", true},
    {"<|quad_end|>", true}, {"<|vision_start|>", true}, {"<|vision_end|>", true}, {"<|vision_pad|>", true},
    {"<|image_pad|>", true}, {"<|video_pad|>", true}, {"<tool_call>", false}, {"</tool_call>", false},
    {"<|fim_prefix|>", false}, {"<|fim_middle|>", false}, {"<|fim_suffix|>", false}, {"<|fim_pad|>", false},
    {"<|repo_name|>", false}, {"<|file_sep|>", false}, {"<tool_response>", false}, {"</tool_response>", false},
    {"<think>", false}, {"</think>", false}};

// o200k_harmony's special tokens from its first one (<|startoftext|>, id 199998 in the real vocabulary);
// the unnamed ones are <|reserved_ID|>.
constexpr std::pair<int, const char*> kHarmonySpecials[] = {
    {0, "<|startoftext|>"}, {1, "<|endoftext|>"}, {4, "<|return|>"}, {5, "<|constrain|>"}, {7, "<|channel|>"},
    {8, "<|start|>"},       {9, "<|end|>"},       {10, "<|message|>"}, {14, "<|call|>"}};
constexpr int kHarmonyFirstId = 199998;

constexpr const char* kLlama3Template =
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
constexpr const char* kChatmlTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
// A minimal harmony rendering (gpt-oss's real template is tested from llama.cpp's copy in tests/python).
constexpr const char* kHarmonyTemplate =
    "{% for message in messages %}{{ '<|start|>' + message['role'] + '<|message|>' + message['content'] + "
    "'<|end|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|start|>assistant' }}{% endif %}";
constexpr const char* kGemmaTemplate =
    "{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' else "
    "message['role'] %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}";

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// GPT-2's byte -> printable code point map (byte-level BPE writes every byte as one such character).
std::vector<std::string> byte_level_chars() {
  std::vector<std::string> out(256);
  uint32_t extra = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    append_utf8(out[b], printable ? b : extra++);
  }
  return out;
}

size_t utf8_len(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Grows a merge list to `n_merges` entries over base units. Each word is first encoded with the merges
// so far and its pieces are then merged left to right (so every listed word becomes one token); the
// rest are random merges of existing pieces, biased to short early ones, with the word-start marker
// only ever at the start of a piece.
struct MergeBuilder {
  std::vector<std::string> pieces;                  // all pieces, base units first
  std::vector<std::pair<std::string, std::string>> merges;
  std::unordered_set<std::string> known;
  std::unordered_map<std::string, size_t> rank;     // "left\x01right" -> merge index
  std::string marker;                               // "Ġ" or "▁"

  void add_base(const std::string& p) {
    if (known.insert(p).second) pieces.push_back(p);
  }
  void reserve(const std::string& text) { known.insert(text); }  // a special token's text: never merged into
  bool add_merge(const std::string& a, const std::string& b, bool ranked = true) {
    std::string ab = a + b;
    if (!known.insert(ab).second) return false;
    if (ranked) rank.emplace(a + '\x01' + b, merges.size());  // only encode() (word phase) needs ranks
    merges.emplace_back(a, b);
    pieces.push_back(std::move(ab));
    return true;
  }
  std::vector<std::string> encode(std::vector<std::string> sym) const {
    for (;;) {
      size_t best = SIZE_MAX, at = 0;
      for (size_t i = 0; i + 1 < sym.size(); ++i) {
        auto it = rank.find(sym[i] + '\x01' + sym[i + 1]);
        if (it != rank.end() && it->second < best) best = it->second, at = i;
      }
      if (best == SIZE_MAX) return sym;
      sym[at] += sym[at + 1];
      sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    }
  }
  void add_word(const std::vector<std::string>& units, size_t n_merges) {
    std::vector<std::string> sym = encode(units);
    for (size_t i = 1; i < sym.size() && merges.size() < n_merges; ++i) {
      add_merge(sym[0], sym[i]);
      sym[0] += sym[i];
    }
  }
  void fill_random(size_t n_merges, Rng& rng, size_t max_units) {
    int misses = 0;
    while (merges.size() < n_merges) {
      const size_t n = pieces.size();
      const bool skew = misses < 1000;  // prefer early pieces; fall back to uniform if they are used up
      auto pick = [&] {
        const double u = rng.uniform();
        return skew ? static_cast<size_t>(static_cast<double>(n) * u * u) : rng.below(n);
      };
      const std::string a = pieces[pick()];  // copies: add_merge may grow `pieces`
      const std::string b = pieces[pick()];
      const bool ok = b.compare(0, marker.size(), marker) != 0 && utf8_len(a) + utf8_len(b) <= max_units;
      if (ok && add_merge(a, b, /*ranked=*/false)) misses = 0;
      else ++misses;
    }
  }
};

// Word list as base units: with the word-start marker (most common), bare, and capitalized.
std::vector<std::vector<std::string>> word_units(const std::string& marker, bool byte_level,
                                                 const std::vector<std::string>& bytes) {
  std::vector<std::vector<std::string>> out;
  std::string w;
  auto units = [&](const std::string& text, bool with_marker) {
    std::vector<std::string> u;
    if (with_marker) u.push_back(marker);
    for (unsigned char c : text) u.push_back(byte_level ? bytes[c] : std::string(1, static_cast<char>(c)));
    return u;
  };
  for (const char* p = kWords;; ++p) {
    if (*p != ' ' && *p != '\0') {
      w += *p;
      continue;
    }
    if (!w.empty()) {
      out.push_back(units(w, true));
      out.push_back(units(w, false));
      if (std::islower(static_cast<unsigned char>(w[0]))) {
        std::string cap = w;
        cap[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(cap[0])));
        out.push_back(units(cap, true));
      }
      w.clear();
    }
    if (*p == '\0') break;
  }
  return out;
}

void build_merges(MergeBuilder& mb, size_t n_merges, uint64_t vocab_seed, bool byte_level,
                  const std::vector<std::string>& bytes) {
  for (const auto& u : word_units(mb.marker, byte_level, bytes)) {
    if (mb.merges.size() >= n_merges) break;
    mb.add_word(u, n_merges);
  }
  Rng rng(vocab_seed);
  mb.fill_random(n_merges, rng, 16);
}

SynthVocab bpe_vocab(const SynthPreset& p) {
  SynthVocab v;
  v.model = "gpt2";
  const auto n_vocab = static_cast<size_t>(p.n_vocab);
  // Specials (and Qwen's [PADn] rows) sit after the normal tokens, as in the real vocabularies.
  std::vector<std::pair<std::string, int32_t>> specials;  // text, token type
  size_t n_pad = 0;
  if (p.vocab == V::kLlama3) {
    v.pre = "llama-bpe";
    const size_t n_special = p.tiny ? 16 : 256;
    for (size_t i = 0; i < n_special; ++i) {
      if (i < std::size(kLlama3Specials)) specials.emplace_back(kLlama3Specials[i], 3);
      else specials.emplace_back("<|reserved_special_token_" + std::to_string(i - 8) + "|>", 3);
    }
    v.add_bos = true;
    v.chat_template = kLlama3Template;
  } else if (p.vocab == V::kGptOss) {
    v.pre = "gpt-4o";
    const size_t n_special = p.tiny ? 16 : n_vocab - kHarmonyFirstId;  // 199998 normal tokens, then 1090
    for (size_t i = 0; i < n_special; ++i) {
      std::string text = "<|reserved_" + std::to_string(kHarmonyFirstId + i) + "|>";
      for (const auto& [at, name] : kHarmonySpecials)
        if (static_cast<size_t>(at) == i) text = name;
      specials.emplace_back(text, 3);
    }
    v.chat_template = kHarmonyTemplate;
  } else {
    v.pre = "qwen2";
    const size_t n_special = p.vocab == V::kQwen3 ? 26 : 22;
    for (size_t i = 0; i < n_special; ++i) specials.emplace_back(kQwenSpecials[i].first, kQwenSpecials[i].second ? 3 : 4);
    n_pad = p.tiny ? 8 : n_vocab - 151643 - n_special;  // Qwen: 151643 normal tokens, padded to 151936
    v.chat_template = kChatmlTemplate;
  }
  const size_t n_normal = n_vocab - specials.size() - n_pad;
  FERRY_ASSERT(n_normal > 256 + 16);

  const std::vector<std::string> bytes = byte_level_chars();
  MergeBuilder mb;
  mb.marker = bytes[' '];
  for (const auto& b : bytes) mb.add_base(b);
  for (const auto& sp : specials) mb.reserve(sp.first);
  for (size_t i = 0; i < n_pad; ++i) mb.reserve("[PAD" + std::to_string(n_vocab - n_pad + i) + "]");
  build_merges(mb, n_normal - 256, fnv1a(p.name), true, bytes);

  v.tokens = mb.pieces;
  v.token_types.assign(v.tokens.size(), 1);
  for (const auto& [a, b] : mb.merges) v.merges.push_back(a + " " + b);
  const auto first_special = static_cast<int32_t>(v.tokens.size());
  for (const auto& [text, type] : specials) {
    v.tokens.push_back(text);
    v.token_types.push_back(type);
  }
  for (size_t i = 0; i < n_pad; ++i) {
    v.tokens.push_back("[PAD" + std::to_string(v.tokens.size()) + "]");
    v.token_types.push_back(5);
  }
  if (p.vocab == V::kLlama3) {
    v.bos = first_special;      // <|begin_of_text|>
    v.eos = first_special + 9;  // <|eot_id|> (instruct convention)
  } else if (p.vocab == V::kGptOss) {
    v.bos = first_special;      // <|startoftext|>
    v.eos = first_special + 4;  // <|return|>
    v.pad = first_special + 1;  // <|endoftext|>
  } else {
    v.bos = first_special;      // <|endoftext|>
    v.eos = first_special + 2;  // <|im_end|>
    v.pad = first_special;
  }
  return v;
}

SynthVocab spm_vocab(const SynthPreset& p) {
  SynthVocab v;
  v.model = "llama";
  v.pre = "default";
  // Gemma's layout: control tokens, byte-fallback tokens <0x00>..<0xFF>, then pieces.
  const char* control[] = {"<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"};
  for (const char* c : control) {
    v.tokens.emplace_back(c);
    v.token_types.push_back(std::string_view(c) == "<unk>" ? 2 : 3);
    v.scores.push_back(-1000.f);
  }
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    v.tokens.emplace_back(buf);
    v.token_types.push_back(6);
    v.scores.push_back(0.f);
  }
  MergeBuilder mb;
  for (const auto& t : v.tokens) mb.reserve(t);
  mb.marker = "\xE2\x96\x81";  // U+2581, SentencePiece's space
  mb.add_base(mb.marker);
  for (int c = 0x21; c <= 0x7E; ++c) mb.add_base(std::string(1, static_cast<char>(c)));
  const size_t n_base = mb.pieces.size();
  const size_t n_merges = static_cast<size_t>(p.n_vocab) - v.tokens.size() - n_base;
  build_merges(mb, n_merges, fnv1a(p.name), false, {});
  // Merged pieces first, scored by rank (SentencePiece merges the highest score first), then the
  // single characters with the lowest scores.
  for (size_t i = 0; i < mb.merges.size(); ++i) {
    v.tokens.push_back(mb.pieces[n_base + i]);
    v.token_types.push_back(1);
    v.scores.push_back(-static_cast<float>(i));
  }
  for (size_t i = 0; i < n_base; ++i) {
    v.tokens.push_back(mb.pieces[i]);
    v.token_types.push_back(1);
    v.scores.push_back(-static_cast<float>(mb.merges.size() + i));
  }
  v.bos = 2;
  v.eos = 1;
  v.unk = 3;
  v.pad = 0;
  v.add_bos = true;
  v.chat_template = kGemmaTemplate;
  return v;
}

}  // namespace

SynthVocab synth_vocab(const SynthPreset& preset) {
  return preset.vocab == V::kGemma ? spm_vocab(preset) : bpe_vocab(preset);
}

}  // namespace ferry::model
