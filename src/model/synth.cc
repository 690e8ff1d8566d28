// ferry synth (see synth.h): preset table, tensor list, vocabulary, metadata and the streamed writer.
// Values: weights ~N(0, 1/sqrt(fan_in)) so every matmul keeps unit scale and pre-norm residual streams
// grow only ~sqrt(layers); token_embd / output ~N(0, 2/sqrt(d)) so logits have a spread like a real
// model's (clear argmax, no overflow); norms 1 + N(0, 0.1) (gemma's stored +1 included); biases
// N(0, 0.05). Each row chunk draws from its own RNG stream seeded by (seed, tensor name, chunk), so
// the bytes do not depend on the thread count.
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

#include "format/gguf.h"
#include "model/synth_route_skew.h"
#include "tensor/quant.h"

namespace ferry::model {
namespace {

// ---- presets ----------------------------------------------------------------------------------
// Real presets carry the published config.json values; tiny ones keep each architecture's features
// (GQA, q/k norms, biases, tied heads, sliding windows, rope scaling) at d=256 so every weight row is a
// multiple of 256 (k-quant super-block) and the F32 file stays under 10 MB.
using V = SynthVocabStyle;
const std::vector<SynthPreset> kPresets = {
    // name, description, arch, tiny, layers, d, heads, kv, head_dim, ff, vocab, ctx, eps, rope base,
    // rope base swa, linear factor, llama3 factor, swa window, tied, qkv bias, head_dim keys, vocab
    {"tiny-llama", "Llama 3.2 style (GQA, llama3 rope_freqs), untied head", Arch::kLlama, true, 2, 256, 4, 2, 64,
     512, 1024, 4096, 1e-5f, 500000.f, 0.f, 0.f, 32.f, 0, false, false, false, V::kLlama3},
    {"tiny-qwen2", "Qwen2.5 style (q/k/v biases), tied head", Arch::kQwen2, true, 2, 256, 4, 2, 64, 512, 1024,
     4096, 1e-6f, 1000000.f, 0.f, 0.f, 0.f, 0, true, true, false, V::kQwen2},
    {"tiny-qwen3", "Qwen3 style (q/k norms, q width 2*d), untied head", Arch::kQwen3, true, 2, 256, 4, 1, 128,
     512, 1024, 4096, 1e-6f, 1000000.f, 0.f, 0.f, 0.f, 0, false, false, true, V::kQwen3},
    {"tiny-gemma3", "Gemma 3 style (5 local + 1 global layer, window 32, linear rope x8), tied", Arch::kGemma3,
     true, 6, 256, 4, 1, 64, 256, 512, 32768, 1e-6f, 1000000.f, 10000.f, 8.f, 0.f, 32, true, false, true,
     V::kGemma},
    {"tiny-qwen2.5-vl", "Qwen2.5-VL style text model (M-RoPE sections, q/k/v biases), untied; its mmproj: "
     "`--mmproj-out`", Arch::kQwen2VL, true, 2, 256, 4, 2, 64, 512, 1024, 4096, 1e-6f, 1000000.f, 0.f, 0.f, 0.f, 0,
     false, true, false, V::kQwen2},
    {"llama3-8b", "Meta-Llama-3-8B", Arch::kLlama, false, 32, 4096, 32, 8, 128, 14336, 128256, 8192, 1e-5f,
     500000.f, 0.f, 0.f, 0.f, 0, false, false, false, V::kLlama3},
    {"minitron-8b", "Mistral-NeMo-Minitron-8B (FFN 11520 = 45 x 256)", Arch::kLlama, false, 40,
     4096, 32, 8, 128, 11520, 131072, 8192, 1e-5f, 1000000.f, 0.f, 0.f, 0.f, 0, false, false, true, V::kLlama3},
    {"qwen3-4b", "Qwen3-4B (tied head)", Arch::kQwen3, false, 36, 2560, 32, 8, 128, 9728, 151936, 40960, 1e-6f,
     1000000.f, 0.f, 0.f, 0.f, 0, true, false, true, V::kQwen3},
    {"qwen3-8b", "Qwen3-8B", Arch::kQwen3, false, 36, 4096, 32, 8, 128, 12288, 151936, 40960, 1e-6f, 1000000.f,
     0.f, 0.f, 0.f, 0, false, false, true, V::kQwen3},
    {"gemma3-4b", "gemma-3-4b (text part, tied head)", Arch::kGemma3, false, 34, 2560, 8, 4, 256, 10240, 262144,
     131072, 1e-6f, 1000000.f, 10000.f, 8.f, 0.f, 1024, true, false, true, V::kGemma},
    // Mixtures of experts: ..., vocab style, experts, used per token, expert FFN width.
    {"tiny-qwen3moe", "Qwen3-MoE style (16 experts, top 4, q/k norms), untied head", Arch::kQwen3Moe, true, 2, 256,
     4, 1, 128, 512, 1024, 4096, 1e-6f, 1000000.f, 0.f, 0.f, 0.f, 0, false, false, true, V::kQwen3, 16, 4, 256},
    {"tiny-mixtral", "Mixtral style (llama with 8 experts, top 2, GQA), untied head", Arch::kLlama, true, 2, 256, 4,
     2, 64, 256, 1024, 4096, 1e-5f, 1000000.f, 0.f, 0.f, 0.f, 0, false, false, false, V::kLlama3, 8, 2, 256},
    {"qwen3-30b-a3b", "Qwen3-30B-A3B (128 experts, 8 per token)", Arch::kQwen3Moe, false, 48, 2048, 32, 4, 128, 6144,
     151936, 40960, 1e-6f, 1000000.f, 0.f, 0.f, 0.f, 0, false, false, true, V::kQwen3, 128, 8, 768},
    {"qwen3-235b-a22b", "Qwen3-235B-A22B (128 experts, 8 per token)", Arch::kQwen3Moe, false, 94, 4096, 64, 4, 128,
     12288, 151936, 40960, 1e-6f, 1000000.f, 0.f, 0.f, 0.f, 0, false, false, true, V::kQwen3, 128, 8, 1536},
    {"mixtral-8x7b", "Mixtral-8x7B-v0.1 (8 experts, 2 per token; byte-level BPE vocab of its size)", Arch::kLlama,
     false, 32, 4096, 32, 8, 128, 14336, 32000, 32768, 1e-5f, 1000000.f, 0.f, 0.f, 0.f, 0, false, false, false,
     V::kLlama3, 8, 2, 14336},
    {"qwen2.5-vl-7b", "Qwen2.5-VL-7B-Instruct / Cosmos-Reason1-7B (text model; mmproj: `--mmproj-out`)",
     Arch::kQwen2VL, false, 28, 3584, 28, 4, 128, 18944, 152064, 128000, 1e-6f, 1000000.f, 0.f, 0.f, 0.f, 0, false,
     true, false, V::kQwen2},
    {"qwen2.5-vl-3b", "Qwen2.5-VL-3B-Instruct (text model, tied head; mmproj: `--mmproj-out`)", Arch::kQwen2VL, false,
     36, 2048, 16, 2, 128, 11008, 151936, 128000, 1e-6f, 1000000.f, 0.f, 0.f, 0.f, 0, true, true, false, V::kQwen2},
};

// llama-quantize's fallback for a row length that is not a multiple of the type's block
// (llama-quant.cpp, tensor_type_fallback): a 32-element type of similar size, else F16.
DType fallback_type(DType t, int64_t ncols) {
  DType r = t;
  switch (t) {
    case DType::Q2_K:
    case DType::Q3_K: r = DType::Q4_0; break;
    case DType::Q4_K: r = DType::Q5_0; break;
    case DType::Q5_K: r = DType::Q5_1; break;
    case DType::Q6_K: r = DType::Q8_0; break;
    default: break;
  }
  if (ncols % traits(r).block_elems != 0) r = DType::F16;
  return r;
}

// llama_ftype of a file whose 2-D weights are mostly `t` (general.file_type).
uint32_t file_type_of(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q4_0: return 2;
    case DType::Q4_1: return 3;
    case DType::Q8_0: return 7;
    case DType::Q5_0: return 8;
    case DType::Q5_1: return 9;
    case DType::Q2_K: return 10;
    case DType::Q3_K: return 11;  // Q3_K_S: all Q3_K
    case DType::Q4_K: return 14;  // Q4_K_S
    case DType::Q5_K: return 16;  // Q5_K_S
    case DType::Q6_K: return 18;
    case DType::BF16: return 32;
    default: return 0;
  }
}

// ---- random numbers -----------------------------------------------------------------------------
uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

// xoshiro256**: fast, and the same sequence on every platform.
struct Rng {
  uint64_t s[4];
  explicit Rng(uint64_t seed) {
    for (auto& x : s) x = splitmix64(seed);
  }
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t next() {
    const uint64_t r = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
  }
  // Unit-variance approximately normal value: the sum of four 16-bit uniforms (Irwin-Hall, bounded at
  // +-3.46). Integer arithmetic plus one multiply: no libm, so identical bytes on every machine.
  float normal() {
    const uint64_t r = next();
    const int64_t sum = static_cast<int64_t>((r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48));
    return static_cast<float>(sum - 131070) * (1.0f / 37837.23f);  // mean 2*65535, sd 65536/sqrt(3)
  }
  uint64_t below(uint64_t n) { return next() % n; }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
};

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

constexpr const char* kLlama3Template =
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
constexpr const char* kChatmlTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
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

// ---- metadata -----------------------------------------------------------------------------------
void write_metadata(gguf::Writer& w, const SynthPreset& p, int32_t n_layer, DType type, uint64_t seed,
                    double route_skew) {
  const std::string a = arch_name(p.arch);
  w.add_string("general.architecture", a);
  w.add_string("general.type", "model");
  w.add_string("general.name", std::string("ferry synth ") + p.name);
  char skew[64] = "";
  if (route_skew > 0) std::snprintf(skew, sizeof(skew), ", route skew %g", route_skew);
  w.add_string("general.description", std::string("random weights, shapes of ") + p.description +
                                          ", seed " + std::to_string(seed) + skew);
  w.add_u32(a + ".context_length", static_cast<uint32_t>(p.n_ctx_train));
  w.add_u32(a + ".embedding_length", static_cast<uint32_t>(p.n_embd));
  w.add_u32(a + ".block_count", static_cast<uint32_t>(n_layer));
  w.add_u32(a + ".feed_forward_length", static_cast<uint32_t>(p.n_ff));
  w.add_u32(a + ".attention.head_count", static_cast<uint32_t>(p.n_head));
  w.add_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(p.n_kv_head));
  w.add_f32(a + ".rope.freq_base", p.rope_base);
  if (p.rope_base_swa > 0) w.add_f32(a + ".rope.freq_base_swa", p.rope_base_swa);
  if (p.rope_linear_factor > 0) {
    w.add_string(a + ".rope.scaling.type", "linear");
    w.add_f32(a + ".rope.scaling.factor", p.rope_linear_factor);
  }
  w.add_f32(a + ".attention.layer_norm_rms_epsilon", p.rms_eps);
  if (p.head_dim_keys) {
    w.add_u32(a + ".attention.key_length", static_cast<uint32_t>(p.head_dim));
    w.add_u32(a + ".attention.value_length", static_cast<uint32_t>(p.head_dim));
  }
  if (p.sliding_window > 0) w.add_u32(a + ".attention.sliding_window", static_cast<uint32_t>(p.sliding_window));
  if (p.n_expert > 0) {
    w.add_u32(a + ".expert_count", static_cast<uint32_t>(p.n_expert));
    w.add_u32(a + ".expert_used_count", static_cast<uint32_t>(p.n_expert_used));
    if (p.arch == Arch::kQwen3Moe) w.add_u32(a + ".expert_feed_forward_length", static_cast<uint32_t>(p.n_ff_expert));
  }
  if (p.arch == Arch::kQwen2VL) {  // mrope_section padded to 4, as the converter writes it
    const std::vector<int32_t> sections = synth_rope_sections(p);
    w.add_i32_array(a + ".rope.dimension_sections", sections);
  }
  if (p.arch == Arch::kLlama) {  // LlamaModel.set_gguf_parameters adds these two
    w.add_u32(a + ".vocab_size", static_cast<uint32_t>(p.n_vocab));
    w.add_u32(a + ".rope.dimension_count", static_cast<uint32_t>(p.head_dim));
  }
  w.add_u32("general.file_type", file_type_of(type));

  const SynthVocab v = synth_vocab(p);
  w.add_string("tokenizer.ggml.model", v.model);
  w.add_string("tokenizer.ggml.pre", v.pre);
  w.add_string_array("tokenizer.ggml.tokens", v.tokens);
  if (!v.scores.empty()) w.add_f32_array("tokenizer.ggml.scores", v.scores);
  w.add_i32_array("tokenizer.ggml.token_type", v.token_types);
  if (!v.merges.empty()) w.add_string_array("tokenizer.ggml.merges", v.merges);
  if (v.bos >= 0) w.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(v.bos));
  if (v.eos >= 0) w.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(v.eos));
  if (v.unk >= 0) w.add_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(v.unk));
  if (v.pad >= 0) w.add_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(v.pad));
  w.add_bool("tokenizer.ggml.add_bos_token", v.add_bos);
  if (v.model == "llama") {
    w.add_bool("tokenizer.ggml.add_sep_token", false);
    w.add_bool("tokenizer.ggml.add_eos_token", false);
    w.add_bool("tokenizer.ggml.add_space_prefix", false);
  }
  w.add_string("tokenizer.chat_template", v.chat_template);
  w.add_u32("general.quantization_version", 2);
}

// ---- values -------------------------------------------------------------------------------------
enum class Fill { kWeight, kEmbed, kNorm, kBias, kRopeFreqs, kRouter };

struct Job {
  SynthTensor t;
  Fill fill;
  float stddev;
};

// Llama 3 rope scaling factors per frequency pair (convert_hf_to_gguf's generate_extra_tensors):
// low_freq_factor 1, high_freq_factor 4, original context 8192.
std::vector<float> llama3_rope_factors(const SynthPreset& p) {
  const double base = p.rope_base, factor = p.llama3_rope_factor, low = 1.0, high = 4.0, old_ctx = 8192.0;
  std::vector<float> out;
  for (int i = 0; i < p.head_dim; i += 2) {
    const double freq = 1.0 / std::pow(base, static_cast<double>(i) / p.head_dim);
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < old_ctx / high) out.push_back(1.f);
    else if (wavelen > old_ctx / low) out.push_back(static_cast<float>(factor));
    else {
      const double smooth = (old_ctx / wavelen - low) / (high - low);
      out.push_back(static_cast<float>(1.0 / ((1 - smooth) / factor + smooth)));
    }
  }
  return out;
}

std::vector<Job> make_jobs(const SynthPreset& p, DType type, int32_t n_layer) {
  std::vector<Job> jobs;
  const int64_t d = p.n_embd, q = int64_t{p.n_head} * p.head_dim, kv = int64_t{p.n_kv_head} * p.head_dim;
  auto weight = [&](std::string name, int64_t in, int64_t out, Fill fill = Fill::kWeight, int64_t n_expert = 0) {
    const DType t = in % traits(type).block_elems == 0 ? type : fallback_type(type, in);
    const float sd = fill == Fill::kEmbed ? 2.0f / std::sqrt(static_cast<float>(in)) : 1.0f / std::sqrt(static_cast<float>(in));
    std::vector<int64_t> ne = {in, out};
    if (n_expert > 0) ne.push_back(n_expert);
    jobs.push_back({{std::move(name), t, ne, type}, fill, sd});
  };
  auto vec = [&](std::string name, int64_t n, Fill fill) {
    jobs.push_back({{std::move(name), DType::F32, {n}, DType::F32}, fill, fill == Fill::kBias ? 0.05f : 0.1f});
  };
  weight("token_embd.weight", d, p.n_vocab, Fill::kEmbed);
  if (p.llama3_rope_factor > 0) vec("rope_freqs.weight", p.head_dim / 2, Fill::kRopeFreqs);
  for (int32_t i = 0; i < n_layer; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    vec(b + "attn_norm.weight", d, Fill::kNorm);
    weight(b + "attn_q.weight", d, q);
    weight(b + "attn_k.weight", d, kv);
    weight(b + "attn_v.weight", d, kv);
    if (p.qkv_bias) {
      vec(b + "attn_q.bias", q, Fill::kBias);
      vec(b + "attn_k.bias", kv, Fill::kBias);
      vec(b + "attn_v.bias", kv, Fill::kBias);
    }
    if (p.arch == Arch::kQwen3 || p.arch == Arch::kQwen3Moe || p.arch == Arch::kGemma3) {
      vec(b + "attn_q_norm.weight", p.head_dim, Fill::kNorm);
      vec(b + "attn_k_norm.weight", p.head_dim, Fill::kNorm);
    }
    weight(b + "attn_output.weight", q, d);
    if (p.arch == Arch::kGemma3) vec(b + "post_attention_norm.weight", d, Fill::kNorm);
    vec(b + "ffn_norm.weight", d, Fill::kNorm);
    if (p.n_expert > 0) {
      const float sd = 1.0f / std::sqrt(static_cast<float>(d));
      jobs.push_back({{b + "ffn_gate_inp.weight", DType::F32, {d, p.n_expert}, DType::F32}, Fill::kRouter, sd});
      weight(b + "ffn_gate_exps.weight", d, p.n_ff_expert, Fill::kWeight, p.n_expert);
      weight(b + "ffn_up_exps.weight", d, p.n_ff_expert, Fill::kWeight, p.n_expert);
      weight(b + "ffn_down_exps.weight", p.n_ff_expert, d, Fill::kWeight, p.n_expert);
      continue;
    }
    weight(b + "ffn_gate.weight", d, p.n_ff);
    weight(b + "ffn_up.weight", d, p.n_ff);
    weight(b + "ffn_down.weight", p.n_ff, d);
    if (p.arch == Arch::kGemma3) vec(b + "post_ffw_norm.weight", d, Fill::kNorm);
  }
  vec("output_norm.weight", d, Fill::kNorm);
  if (!p.tied_output) weight("output.weight", d, p.n_vocab, Fill::kEmbed);
  return jobs;
}

// Rows per chunk: ~1M values, so a chunk is a few MB whatever the row length.
int64_t rows_per_chunk(int64_t row_len) { return std::max<int64_t>(1, (int64_t{1} << 20) / row_len); }

int64_t rows_of(const SynthTensor& t) {
  int64_t rows = 1;  // rows of every expert, for stacked experts
  for (size_t i = 1; i < t.ne.size(); ++i) rows *= t.ne[i];
  return rows;
}

// Fills and converts rows [r0, r1) of a tensor into `out` (the chunk's bytes in the tensor's type).
void make_chunk(const Job& job, uint64_t seed, const RouteSkew& skew, int64_t chunk, int64_t r0, int64_t r1,
                std::vector<float>& scratch, std::vector<uint8_t>& out) {
  const int64_t ne0 = job.t.ne[0];
  const int64_t n = (r1 - r0) * ne0;
  scratch.resize(static_cast<size_t>(n));
  uint64_t s = seed ^ fnv1a(job.t.name);
  s = splitmix64(s) ^ (static_cast<uint64_t>(chunk) * 0xD1B54A32D192ED03ull);
  Rng rng(s);
  const float base = job.fill == Fill::kNorm ? 1.f : 0.f;
  for (int64_t i = 0; i < n; ++i) scratch[static_cast<size_t>(i)] = base + job.stddev * rng.normal();
  route_skew_shape_rows(skew, job.t.name, ne0, rows_of(job.t), r0, r1, scratch.data());
  out.resize(row_bytes(job.t.type, n));
  quantize_row(job.t.type, scratch.data(), out.data(), n);
}

// Writes rows [r0, r1) of a tensor from `bytes`, with the rows --route-skew zeroes set to zero (an all-zero
// row is a zero row in every type). `patch` is scratch for a copy when `bytes` must stay unchanged.
Status write_rows(gguf::Writer& w, const Job& job, const RouteSkew& skew, int64_t r0, int64_t r1, const uint8_t* bytes,
                  std::vector<uint8_t>& patch) {
  const size_t row = row_bytes(job.t.type, job.t.ne[0]);
  const size_t n = row * static_cast<size_t>(r1 - r0);
  bool copied = false;
  for (int64_t r = r0; r < r1; ++r) {
    if (!route_skew_zero_row(skew, job.t.name, r)) continue;
    if (!copied) {
      patch.assign(bytes, bytes + n);
      copied = true;
    }
    std::fill_n(patch.begin() + static_cast<std::ptrdiff_t>(row * static_cast<size_t>(r - r0)), row, uint8_t{0});
  }
  return w.write_tensor_data(copied ? patch.data() : bytes, n);
}

uint64_t tensor_bytes(const SynthTensor& t) {
  int64_t n = 1;
  for (int64_t x : t.ne) n *= x;
  return row_bytes(t.type, n);
}

// Generates and writes one tensor: windows of chunks are made in parallel, then written in order.
Status write_tensor(gguf::Writer& w, const Job& job, uint64_t seed, const RouteSkew& skew, int n_threads,
                    SynthProgress& prog, const SynthOptions& opt) {
  const int64_t ne0 = job.t.ne[0];
  const int64_t rows = rows_of(job.t);
  const int64_t rpc = rows_per_chunk(ne0);
  const int64_t n_chunks = (rows + rpc - 1) / rpc;
  constexpr int64_t kPool = 2;
  std::vector<uint8_t> patch;
  // Router rows each carry their expert's bias: never repeated from a pool.
  const bool poolable = job.fill != Fill::kRouter;
  if (opt.fast && n_chunks > kPool && poolable) {
    std::vector<std::vector<uint8_t>> pool(kPool);
    std::atomic<int64_t> next{0};
    auto worker = [&] {
      std::vector<float> scratch;
      for (int64_t c; (c = next.fetch_add(1)) < kPool;)
        make_chunk(job, seed, skew, c, c * rpc, (c + 1) * rpc, scratch, pool[c]);
    };
    std::vector<std::thread> threads;
    for (int64_t i = 1; i < std::min<int64_t>(n_threads, kPool); ++i) threads.emplace_back(worker);
    worker();
    for (auto& t : threads) t.join();
    const size_t row = row_bytes(job.t.type, ne0);
    for (int64_t c = 0; c < n_chunks; ++c) {
      const int64_t r1 = std::min(rows, (c + 1) * rpc);
      const size_t bytes = row * static_cast<size_t>(r1 - c * rpc);
      FERRY_RETURN_IF_ERROR(write_rows(w, job, skew, c * rpc, r1, pool[c % kPool].data(), patch));
      prog.bytes_done += bytes;
      if (opt.on_progress && c % 64 == 63) opt.on_progress(prog);
    }
    if (opt.on_progress) opt.on_progress(prog);
    return Status::ok();
  }
  const int64_t window = std::max<int64_t>(1, 2 * int64_t{n_threads});
  std::vector<std::vector<uint8_t>> outs(static_cast<size_t>(window));
  for (int64_t c0 = 0; c0 < n_chunks; c0 += window) {
    const int64_t c1 = std::min(n_chunks, c0 + window);
    std::atomic<int64_t> next{c0};
    auto worker = [&] {
      std::vector<float> scratch;
      for (int64_t c; (c = next.fetch_add(1)) < c1;)
        make_chunk(job, seed, skew, c, c * rpc, std::min(rows, (c + 1) * rpc), scratch, outs[static_cast<size_t>(c - c0)]);
    };
    const int64_t n_workers = std::min<int64_t>(n_threads, c1 - c0);
    std::vector<std::thread> threads;
    for (int64_t i = 1; i < n_workers; ++i) threads.emplace_back(worker);
    worker();
    for (auto& t : threads) t.join();
    for (int64_t c = c0; c < c1; ++c) {
      const auto& buf = outs[static_cast<size_t>(c - c0)];
      FERRY_RETURN_IF_ERROR(write_rows(w, job, skew, c * rpc, std::min(rows, (c + 1) * rpc), buf.data(), patch));
      prog.bytes_done += buf.size();
      if (opt.on_progress) opt.on_progress(prog);
    }
  }
  return Status::ok();
}

}  // namespace

const std::vector<SynthPreset>& synth_presets() { return kPresets; }

const SynthPreset* find_synth_preset(std::string_view name) {
  for (const auto& p : kPresets)
    if (name == p.name) return &p;
  return nullptr;
}

Expected<std::vector<SynthTensor>> synth_tensors(const SynthPreset& preset, DType type, int32_t n_layer) {
  const DTypeTraits* tr = dtype_traits(static_cast<uint32_t>(type));
  if (tr == nullptr || !tr->weight_type)
    return make_error(ErrorCode::kInvalidArgument, "type %s is not a weight type (use one of F32 F16 BF16 Q8_0 "
                      "Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K)", tr ? tr->name : "?");
  if (n_layer < 0) return make_error(ErrorCode::kInvalidArgument, "--layers must be positive, got %d", n_layer);
  std::vector<SynthTensor> out;
  for (Job& j : make_jobs(preset, type, n_layer == 0 ? preset.n_layer : n_layer)) out.push_back(std::move(j.t));
  return out;
}

std::vector<int32_t> synth_rope_sections(const SynthPreset& preset) {
  if (preset.arch != Arch::kQwen2VL) return {0, 0, 0, 0};
  // Qwen2.5-VL: mrope_section [16, 24, 24] for 128-wide heads; the same proportions for other widths.
  const int32_t hd = preset.head_dim;
  return {hd / 8, 3 * hd / 16, 3 * hd / 16, 0};
}

Status synth_write_random(gguf::Writer& w, const std::vector<SynthRandom>& tensors, uint64_t seed, int n_threads,
                          SynthProgress& prog, const SynthOptions& opt) {
  for (const SynthRandom& r : tensors) {
    prog.tensor = r.t.name.c_str();
    const Job job{r.t, r.mean == 1.f ? Fill::kNorm : Fill::kWeight, r.stddev};
    FERRY_RETURN_IF_ERROR(write_tensor(w, job, seed, RouteSkew{}, std::clamp(n_threads, 1, 256), prog, opt));
  }
  return Status::ok();
}

SynthVocab synth_vocab(const SynthPreset& preset) {
  return preset.vocab == V::kGemma ? spm_vocab(preset) : bpe_vocab(preset);
}

Expected<SynthResult> synth_write(const SynthOptions& opt) {
  const SynthPreset* p = find_synth_preset(opt.preset);
  if (p == nullptr)
    return make_error(ErrorCode::kInvalidArgument, "unknown preset '%s' (see `ferry synth --list`)", opt.preset.c_str());
  FERRY_ASSIGN_OR_RETURN(std::vector<SynthTensor> tensors, synth_tensors(*p, opt.type, opt.n_layer));
  const int32_t n_layer = opt.n_layer == 0 ? p->n_layer : opt.n_layer;
  std::vector<Job> jobs = make_jobs(*p, opt.type, n_layer);

  SynthResult res;
  res.n_tensors = jobs.size();
  // Fallback notes, one per tensor kind ("blk.*.ffn_down.weight").
  for (const Job& j : jobs) {
    if (j.t.type == j.t.requested || j.t.ne.size() < 2) continue;
    std::string kind = j.t.name;
    if (kind.rfind("blk.", 0) == 0) kind = "blk.*" + kind.substr(kind.find('.', 4));
    char line[256];
    std::snprintf(line, sizeof(line), "%s: row length %" PRId64 " is not a multiple of %d (%s); stored as %s, as "
                  "llama-quantize does", kind.c_str(), j.t.ne[0], traits(j.t.requested).block_elems,
                  dtype_name(j.t.requested), dtype_name(j.t.type));
    if (std::find(res.notes.begin(), res.notes.end(), line) == res.notes.end()) res.notes.emplace_back(line);
  }

  if (opt.route_skew != 0 && p->n_expert == 0)
    return make_error(ErrorCode::kInvalidArgument, "--route-skew needs a mixture-of-experts preset ('%s' has no experts)",
                      p->name);
  if (!(opt.route_skew >= 0 && opt.route_skew <= 8))
    return make_error(ErrorCode::kInvalidArgument, "--route-skew must be in [0, 8], got %g", opt.route_skew);
  RouteSkew skew;
  skew.on = p->n_expert > 0;
  skew.s = opt.route_skew;
  skew.n_embd = p->n_embd;
  skew.seed = opt.seed;

  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<gguf::Writer> w, gguf::Writer::create(opt.path));
  write_metadata(*w, *p, n_layer, opt.type, opt.seed, opt.route_skew);
  SynthProgress prog;
  for (const Job& j : jobs) {
    FERRY_RETURN_IF_ERROR(w->add_tensor_info(j.t.name, j.t.type, j.t.ne));
    prog.bytes_total += tensor_bytes(j.t);
    int64_t n = 1;
    for (int64_t x : j.t.ne) n *= x;
    res.n_params += n;
  }
  res.data_bytes = prog.bytes_total;
  FERRY_RETURN_IF_ERROR(w->begin_data());

  int n_threads = opt.n_threads > 0 ? opt.n_threads : static_cast<int>(std::thread::hardware_concurrency());
  n_threads = std::clamp(n_threads, 1, 256);
  for (const Job& j : jobs) {
    prog.tensor = j.t.name.c_str();
    if (j.fill == Fill::kRopeFreqs) {
      const std::vector<float> f = llama3_rope_factors(*p);
      FERRY_RETURN_IF_ERROR(w->write_tensor_data(f.data(), f.size() * sizeof(float)));
      prog.bytes_done += f.size() * sizeof(float);
      continue;
    }
    FERRY_RETURN_IF_ERROR(write_tensor(*w, j, opt.seed, skew, n_threads, prog, opt));
  }
  FERRY_RETURN_IF_ERROR(w->finish());
  return res;
}

}  // namespace ferry::model
