// Vocab: indexing, llama.cpp-compatible special-token resolution, EOG set and special-token partition.
#include "text/vocab.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "format/gguf.h"

namespace ferry::text {

namespace {

// Texts llama.cpp recognises (llama_vocab::impl::load). A token found this way is also made a control
// token, which changes how it is partitioned and rendered.
const char* const kEotTexts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                 "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                                 "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                                 "<end_of_utterance>"};
const char* const kEomTexts[] = {"<|eom_id|>"};
const char* const kFimPreTexts[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                                    "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>",
                                    "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"};
const char* const kFimSufTexts[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                                    "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>", "<SUF>",
                                    "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"};
const char* const kFimMidTexts[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                                    "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>",
                                    "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"};
const char* const kFimPadTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
const char* const kFimRepTexts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
const char* const kFimSepTexts[] = {"<|file_sep|>"};
const char* const kEogTexts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
                                 "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
                                 "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>",
                                 "<turn|>", "<|tool_response>",
                                 "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "[e~["};
const char* const kAlwaysRenderTexts[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};

uint32_t attr_from_type(int32_t type) {
  switch (static_cast<TokenType>(type)) {
    case TokenType::kNormal: return kAttrNormal;
    case TokenType::kUnknown: return kAttrUnknown;
    case TokenType::kControl: return kAttrControl;
    case TokenType::kUserDefined: return kAttrUserDefined;
    case TokenType::kUnused: return kAttrUnused;
    case TokenType::kByte: return kAttrByte;
    default: return kAttrUndefined;
  }
}

}  // namespace

struct Vocab::Ids {
  int64_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, sep = -1, pad = -1, mask = -1;
  int64_t fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;
};

Token Vocab::find(std::string_view text) const {
  return index_.find(text_, text);
}

Expected<std::unique_ptr<Vocab>> Vocab::build(VocabData&& data, Model model) {
  const size_t n = data.tokens.size();
  if (n == 0) return make_error(ErrorCode::kCorrupt, "tokenizer.ggml.tokens is empty");
  if (n > static_cast<size_t>(INT32_MAX)) return make_error(ErrorCode::kCorrupt, "vocabulary too large");
  if (!data.scores.empty() && data.scores.size() < n)
    return make_error(ErrorCode::kCorrupt, "tokenizer.ggml.scores has %zu entries for %zu tokens",
                      data.scores.size(), n);
  if (!data.token_types.empty() && data.token_types.size() < n)
    return make_error(ErrorCode::kCorrupt, "tokenizer.ggml.token_type has %zu entries for %zu tokens",
                      data.token_types.size(), n);

  std::unique_ptr<Vocab> v(new Vocab());
  v->text_ = std::move(data.tokens);
  v->score_.assign(n, 0.0f);
  v->attr_.assign(n, kAttrNormal);
  v->index_.reset(n);
  for (size_t i = 0; i < n; ++i) {
    std::string& t = v->text_[i];
    if (t.empty()) t = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp
    const int32_t dup = v->index_.insert(v->text_, static_cast<int32_t>(i));
    if (dup >= 0) return make_error(ErrorCode::kCorrupt, "token text of id %zu repeats id %d", i, dup);
    if (!data.scores.empty()) v->score_[i] = data.scores[i];
    if (!data.token_types.empty()) v->attr_[i] = attr_from_type(data.token_types[i]);
  }

  // Defaults of llama.cpp per model, then the metadata keys (a default outside the vocabulary is
  // dropped; a key outside it is ignored).
  Ids ids;
  if (model == Model::kSpm) {
    ids.bos = 1, ids.eos = 2, ids.unk = 0;
  } else {
    ids.bos = 11, ids.eos = 11;
  }
  const std::pair<int64_t*, int64_t> keyed[] = {
      {&ids.bos, data.bos},         {&ids.eos, data.eos},         {&ids.eot, data.eot},
      {&ids.eom, data.eom},         {&ids.unk, data.unk},         {&ids.sep, data.sep},
      {&ids.pad, data.pad},         {&ids.mask, data.mask},       {&ids.fim_pre, data.fim_pre},
      {&ids.fim_suf, data.fim_suf}, {&ids.fim_mid, data.fim_mid}, {&ids.fim_pad, data.fim_pad},
      {&ids.fim_rep, data.fim_rep}, {&ids.fim_sep, data.fim_sep},
  };
  for (const auto& [id, key] : keyed) {
    if (*id >= static_cast<int64_t>(n)) *id = -1;
    if (key >= 0 && key < static_cast<int64_t>(n)) *id = key;
  }

  v->add_space_prefix_ = data.add_space_prefix.value_or(model == Model::kSpm);
  SpecialTokens& sp = v->special_;
  sp.add_bos = data.add_bos.value_or(model == Model::kSpm);  // BPE: caller folds the pre default in
  sp.add_eos = data.add_eos.value_or(false);

  v->detect_specials_by_text(ids);
  // Control tokens named "...unused..." are unused (llama.cpp): they stay special for partitioning.
  for (size_t i = 0; i < n; ++i)
    if ((v->attr_[i] & kAttrControl) && v->text_[i].find("unused") != std::string::npos) v->attr_[i] |= kAttrUnused;
  v->build_eog_set(ids);
  v->build_special_index();

  sp.bos = static_cast<Token>(ids.bos);
  sp.eos = static_cast<Token>(ids.eos);
  sp.eot = static_cast<Token>(ids.eot);
  sp.pad = static_cast<Token>(ids.pad);
  sp.unk = static_cast<Token>(ids.unk);
  return v;
}

// llama.cpp finds these roles by walking its std::unordered_map<std::string, id> of all tokens (filled
// in id order) and keeps the first match per role, so when a vocabulary holds two candidates for one
// role (SmolLM2 and Qwen have both "<|im_end|>" and "<|endoftext|>") the winner depends on the map's
// iteration order. Only in that case do we build the same map (same insertions, same libstdc++ hash)
// to read that order; otherwise a lookup per candidate text is enough and loading stays fast.
void Vocab::detect_specials_by_text(Ids& ids) {
  struct Role {
    int64_t* id;
    const char* const* texts;
    size_t count;
    std::vector<Token> found;  // candidates present in the vocabulary
  };
  Role roles[] = {
      {&ids.eot, kEotTexts, std::size(kEotTexts), {}},
      {&ids.eom, kEomTexts, std::size(kEomTexts), {}},
      {&ids.fim_pre, kFimPreTexts, std::size(kFimPreTexts), {}},
      {&ids.fim_suf, kFimSufTexts, std::size(kFimSufTexts), {}},
      {&ids.fim_mid, kFimMidTexts, std::size(kFimMidTexts), {}},
      {&ids.fim_pad, kFimPadTexts, std::size(kFimPadTexts), {}},
      {&ids.fim_rep, kFimRepTexts, std::size(kFimRepTexts), {}},
      {&ids.fim_sep, kFimSepTexts, std::size(kFimSepTexts), {}},
  };
  bool ambiguous = false;
  for (Role& role : roles) {
    if (*role.id >= 0) continue;
    for (size_t k = 0; k < role.count; ++k) {
      const Token id = find(role.texts[k]);
      if (id >= 0) role.found.push_back(id);
    }
    ambiguous |= role.found.size() > 1;
  }
  std::vector<int32_t> order;  // [n_vocab] position in llama.cpp's map iteration, when needed
  if (ambiguous) {
    std::unordered_map<std::string, Token> map;
    for (size_t i = 0; i < text_.size(); ++i) map[text_[i]] = static_cast<Token>(i);
    order.assign(text_.size(), 0);
    int32_t pos = 0;
    for (const auto& kv : map) order[kv.second] = pos++;
  }
  for (Role& role : roles) {
    if (role.found.empty()) continue;
    Token best = role.found[0];
    for (Token id : role.found)
      if (ambiguous ? order[id] < order[best] : id < best) best = id;
    *role.id = best;
    attr_[best] |= kAttrControl;
  }
}

void Vocab::build_eog_set(const Ids& ids) {
  const size_t n = text_.size();
  eog_.assign(n, 0);
  for (int64_t id : {ids.fim_pad, ids.fim_rep, ids.fim_sep})
    if (id >= 0) eog_[id] = 1;
  for (const char* t : kEogTexts) {
    const Token id = find(t);
    if (id < 0) continue;
    eog_[id] = 1;
    attr_[id] |= kAttrControl;
  }
  // gpt-oss: these render always (llama.cpp sets them user-defined).
  for (const char* t : kAlwaysRenderTexts) {
    const Token id = find(t);
    if (id >= 0) attr_[id] = kAttrUserDefined;
  }
  for (int64_t id : {ids.eos, ids.eot, ids.eom})
    if (id >= 0) eog_[id] = 1;

  // o200k_harmony / solar-open: "<|end|>" is not EOG when "<|return|>"+"<|call|>" or "<|calls|>"+"<|flush|>"
  // are; gemma4/plamo: "</s>" is a normal token when "<|tool_response>"/"<|plamo:eos|>" are EOG.
  auto eog_text = [&](const char* t) {
    const Token id = find(t);
    return id >= 0 && eog_[id] ? id : -1;
  };
  const Token end_id = eog_text("<|end|>");
  const bool has_call = eog_text("<|call|>") >= 0 || eog_text("<|calls|>") >= 0;
  if (end_id >= 0 && ((eog_text("<|return|>") >= 0 && has_call) || (has_call && eog_text("<|flush|>") >= 0))) {
    eog_[end_id] = 0;
    attr_[end_id] = kAttrUserDefined;
  }
  const Token s_id = eog_text("</s>");
  if (s_id >= 0 && (eog_text("<|tool_response>") >= 0 || eog_text("<|plamo:eos|>") >= 0)) {
    eog_[s_id] = 0;
    attr_[s_id] = kAttrNormal;
  }
}

void Vocab::build_special_index() {
  const size_t n = text_.size();
  special_order_.clear();
  for (size_t i = 0; i < n; ++i)
    if (attr_[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) special_order_.push_back(static_cast<Token>(i));
  // Same input order and the same (unstable) std::sort call as llama.cpp, so tokens of equal length
  // end up in the same order and overlapping matches resolve the same way.
  std::sort(special_order_.begin(), special_order_.end(),
            [&](const Token a, const Token b) { return text_[a].size() > text_[b].size(); });
  special_rank_.assign(n, -1);
  trie_.assign(1, TrieNode{});
  for (size_t r = 0; r < special_order_.size(); ++r) {
    const Token id = special_order_[r];
    special_rank_[id] = static_cast<int32_t>(r);
    int32_t node = 0;
    for (unsigned char c : text_[id]) {
      auto& next = trie_[node].next;
      auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(c, int32_t{-1}));
      if (it != next.end() && it->first == c) {
        node = it->second;
      } else {
        const int32_t child = static_cast<int32_t>(trie_.size());
        next.insert(it, {c, child});
        trie_.emplace_back();  // invalidates `next`; not used after this
        node = child;
      }
    }
    trie_[node].token = id;
  }
}

std::vector<Token> Vocab::specials_in(std::string_view text, bool parse_special) const {
  std::vector<int32_t> ranks;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size(); ++i) {
    int32_t node = 0;
    for (size_t j = i; j < text.size(); ++j) {
      const auto& next = trie_[node].next;
      auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(p[j], int32_t{-1}));
      if (it == next.end() || it->first != p[j]) break;
      node = it->second;
      const Token tok = trie_[node].token;
      if (tok >= 0 && (parse_special || !(attr_[tok] & (kAttrControl | kAttrUnknown))))
        ranks.push_back(special_rank_[tok]);
    }
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::vector<Token> out;
  out.reserve(ranks.size());
  for (int32_t r : ranks) out.push_back(special_order_[r]);
  return out;
}

std::vector<Vocab::Fragment> Vocab::partition(std::string_view text, bool parse_special) const {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({-1, 0, text.size()});
  std::vector<Fragment> next;
  // For each special token in order, split every raw fragment at each of its occurrences.
  for (const Token tok : specials_in(text, parse_special)) {
    const std::string& st = text_[tok];
    next.clear();
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t pos = f.offset;
      const size_t end = f.offset + f.length;
      const std::string_view window = text.substr(0, end);
      while (pos < end) {
        const size_t m = window.find(st, pos);
        if (m == std::string_view::npos) {
          next.push_back({-1, pos, end - pos});
          break;
        }
        if (m > pos) next.push_back({-1, pos, m - pos});
        next.push_back({tok, 0, 0});
        pos = m + st.size();
      }
    }
    frags.swap(next);
  }
  return frags;
}

// ---- reading tokenizer.ggml.* ------------------------------------------------------------------

namespace {

Expected<const gguf::Array*> get_array(const gguf::ModelFile& f, const char* key, bool required) {
  const gguf::Value* v = f.find(key);
  if (!v) {
    if (required) return make_error(ErrorCode::kNotFound, "%s is missing", key);
    return static_cast<const gguf::Array*>(nullptr);
  }
  const gguf::Array* a = v->as_array();
  if (!a) return make_error(ErrorCode::kCorrupt, "%s is a %s, not an array", key, gguf::value_type_name(v->type));
  return a;
}

Status read_strings(const gguf::ModelFile& f, const char* key, bool required, std::vector<std::string>* out) {
  FERRY_ASSIGN_OR_RETURN(const gguf::Array* a, get_array(f, key, required));
  if (!a) return Status::ok();
  if (a->elem_type != gguf::ValueType::kString)
    return make_error(ErrorCode::kCorrupt, "%s holds %s, not strings", key, gguf::value_type_name(a->elem_type));
  out->reserve(a->items.size());
  for (const gguf::Value& item : a->items) {
    FERRY_ASSIGN_OR_RETURN(std::string s, item.as_string());
    out->push_back(std::move(s));
  }
  return Status::ok();
}

}  // namespace

Expected<VocabData> read_vocab_data(const gguf::ModelFile& f) {
  VocabData d;
  if (!f.find("tokenizer.ggml.model"))
    return make_error(ErrorCode::kNotFound, "%s has no tokenizer (tokenizer.ggml.model is missing)",
                      f.path().c_str());
  FERRY_ASSIGN_OR_RETURN(d.model, f.get_string("tokenizer.ggml.model"));
  d.pre = f.get_string_or("tokenizer.ggml.pre", "");
  FERRY_RETURN_IF_ERROR(read_strings(f, "tokenizer.ggml.tokens", true, &d.tokens));
  FERRY_RETURN_IF_ERROR(read_strings(f, "tokenizer.ggml.merges", false, &d.merges));

  FERRY_ASSIGN_OR_RETURN(const gguf::Array* scores, get_array(f, "tokenizer.ggml.scores", false));
  if (scores) {
    if (scores->elem_type != gguf::ValueType::kFloat32 && scores->elem_type != gguf::ValueType::kInt32)
      return make_error(ErrorCode::kCorrupt, "tokenizer.ggml.scores holds %s",
                        gguf::value_type_name(scores->elem_type));
    d.scores.reserve(scores->items.size());
    for (const gguf::Value& item : scores->items) {
      FERRY_ASSIGN_OR_RETURN(double s, item.as_float());
      d.scores.push_back(static_cast<float>(s));
    }
  }
  FERRY_ASSIGN_OR_RETURN(const gguf::Array* types, get_array(f, "tokenizer.ggml.token_type", false));
  if (types) {
    if (types->elem_type != gguf::ValueType::kInt32)
      return make_error(ErrorCode::kCorrupt, "tokenizer.ggml.token_type holds %s",
                        gguf::value_type_name(types->elem_type));
    d.token_types.reserve(types->items.size());
    for (const gguf::Value& item : types->items) {
      FERRY_ASSIGN_OR_RETURN(int64_t t, item.as_int());
      d.token_types.push_back(static_cast<int32_t>(t));
    }
  }

  const std::pair<const char*, int64_t*> ids[] = {
      {"tokenizer.ggml.bos_token_id", &d.bos},         {"tokenizer.ggml.eos_token_id", &d.eos},
      {"tokenizer.ggml.eot_token_id", &d.eot},         {"tokenizer.ggml.eom_token_id", &d.eom},
      {"tokenizer.ggml.unknown_token_id", &d.unk},     {"tokenizer.ggml.seperator_token_id", &d.sep},
      {"tokenizer.ggml.padding_token_id", &d.pad},     {"tokenizer.ggml.mask_token_id", &d.mask},
      {"tokenizer.ggml.fim_pre_token_id", &d.fim_pre}, {"tokenizer.ggml.fim_suf_token_id", &d.fim_suf},
      {"tokenizer.ggml.fim_mid_token_id", &d.fim_mid}, {"tokenizer.ggml.fim_pad_token_id", &d.fim_pad},
      {"tokenizer.ggml.fim_rep_token_id", &d.fim_rep}, {"tokenizer.ggml.fim_sep_token_id", &d.fim_sep},
      // Deprecated names, read after the new ones as llama.cpp does (so they win when both exist).
      {"tokenizer.ggml.prefix_token_id", &d.fim_pre},  {"tokenizer.ggml.suffix_token_id", &d.fim_suf},
      {"tokenizer.ggml.middle_token_id", &d.fim_mid},
  };
  for (const auto& [key, dst] : ids) {
    const gguf::Value* v = f.find(key);
    if (!v) continue;
    FERRY_ASSIGN_OR_RETURN(int64_t id, v->as_int());
    if (id >= 0) *dst = id;
  }
  const std::pair<const char*, std::optional<bool>*> flags[] = {
      {"tokenizer.ggml.add_bos_token", &d.add_bos},
      {"tokenizer.ggml.add_eos_token", &d.add_eos},
      {"tokenizer.ggml.add_space_prefix", &d.add_space_prefix},
  };
  for (const auto& [key, dst] : flags) {
    const gguf::Value* v = f.find(key);
    if (!v) continue;
    FERRY_ASSIGN_OR_RETURN(bool b, v->as_bool());
    *dst = b;
  }
  return d;
}

}  // namespace ferry::text
