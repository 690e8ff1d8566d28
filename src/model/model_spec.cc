// ModelSpec::from_gguf: hyperparameters from GGUF metadata, read from the same keys (and with the same
// defaults) as llama.cpp's loader for each supported architecture (llama-model.cpp: load_hparams and
// the per-arch load_arch_hparams). Everything is validated here, so later code can trust the numbers:
// a missing required key, a per-layer array that varies, or a nonsense value is one clear error.
#include "model/model_spec.h"

#include <cmath>
#include <string>
#include <string_view>

#include "format/gguf.h"

namespace ferry::model {

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::kLlama: return "llama";
    case Arch::kQwen2: return "qwen2";
    case Arch::kQwen3: return "qwen3";
    case Arch::kGemma3: return "gemma3";
    case Arch::kQwen3Moe: return "qwen3moe";
    case Arch::kQwen2VL: return "qwen2vl";
    case Arch::kGptOss: return "gpt-oss";
  }
  return "unknown";
}

float ModelSpec::kq_scale() const {
  return attn_scale != 0.f ? attn_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

namespace {

// Reads `<arch>.<suffix>` keys with the file's error reporting, naming the key in every error.
class Keys {
 public:
  Keys(const gguf::ModelFile& file, std::string arch) : file_(file), arch_(std::move(arch)) {}

  std::string key(std::string_view suffix) const { return arch_ + "." + std::string(suffix); }
  bool has(std::string_view suffix) const { return file_.find(key(suffix)) != nullptr; }

  // An unsigned count. llama.cpp also accepts a per-layer array for some keys (get_key_or_arr);
  // ferry's layers are uniform, so an array must hold one value throughout.
  Expected<int64_t> count(std::string_view suffix, bool allow_array) const {
    const std::string k = key(suffix);
    const gguf::Value* v = file_.find(k);
    if (v == nullptr) return make_error(ErrorCode::kNotFound, "missing required metadata key '%s'", k.c_str());
    return count_value(k, *v, allow_array);
  }
  Expected<int64_t> count_or(std::string_view suffix, int64_t fallback, bool allow_array) const {
    const std::string k = key(suffix);
    const gguf::Value* v = file_.find(k);
    if (v == nullptr) return fallback;
    return count_value(k, *v, allow_array);
  }

  Expected<double> real(std::string_view suffix) const {
    const std::string k = key(suffix);
    const gguf::Value* v = file_.find(k);
    if (v == nullptr) return make_error(ErrorCode::kNotFound, "missing required metadata key '%s'", k.c_str());
    return real_value(k, *v);
  }
  Expected<double> real_or(std::string_view suffix, double fallback) const {
    const std::string k = key(suffix);
    const gguf::Value* v = file_.find(k);
    if (v == nullptr) return fallback;
    return real_value(k, *v);
  }

  Expected<std::string> string_or(std::string_view suffix, std::string fallback) const {
    const std::string k = key(suffix);
    const gguf::Value* v = file_.find(k);
    if (v == nullptr) return fallback;
    Expected<std::string> s = v->as_string();
    if (!s) return make_error(ErrorCode::kCorrupt, "metadata key '%s': %s", k.c_str(), s.status().message().c_str());
    return s;
  }

 private:
  static Expected<int64_t> count_value(const std::string& k, const gguf::Value& v, bool allow_array) {
    if (const gguf::Array* arr = v.as_array()) {
      if (!allow_array) return make_error(ErrorCode::kCorrupt, "metadata key '%s': expected an integer, got an array", k.c_str());
      if (arr->items.empty()) return make_error(ErrorCode::kCorrupt, "metadata key '%s': empty array", k.c_str());
      int64_t first = 0;
      for (size_t i = 0; i < arr->items.size(); ++i) {
        Expected<int64_t> x = arr->items[i].as_int();
        if (!x) return make_error(ErrorCode::kCorrupt, "metadata key '%s'[%zu]: %s", k.c_str(), i, x.status().message().c_str());
        if (i == 0) first = *x;
        if (*x != first)
          return make_error(ErrorCode::kUnsupported,
                            "metadata key '%s': per-layer values differ (%lld vs %lld); ferry needs uniform layers",
                            k.c_str(), static_cast<long long>(first), static_cast<long long>(*x));
      }
      return check_count(k, first);
    }
    Expected<int64_t> x = v.as_int();
    if (!x) return make_error(ErrorCode::kCorrupt, "metadata key '%s': %s", k.c_str(), x.status().message().c_str());
    return check_count(k, *x);
  }
  static Expected<int64_t> check_count(const std::string& k, int64_t x) {
    // Counts above 2^30 are nonsense for every hyperparameter and would overflow int32 products.
    if (x < 0 || x > (int64_t{1} << 30))
      return make_error(ErrorCode::kCorrupt, "metadata key '%s': value %lld out of range", k.c_str(),
                        static_cast<long long>(x));
    return x;
  }
  static Expected<double> real_value(const std::string& k, const gguf::Value& v) {
    Expected<double> x = v.as_float();
    if (!x) return make_error(ErrorCode::kCorrupt, "metadata key '%s': %s", k.c_str(), x.status().message().c_str());
    if (!std::isfinite(*x)) return make_error(ErrorCode::kCorrupt, "metadata key '%s': value is not finite", k.c_str());
    return x;
  }

  const gguf::ModelFile& file_;
  std::string arch_;
};

Expected<Arch> parse_arch(const std::string& name) {
  if (name == "llama") return Arch::kLlama;
  if (name == "qwen2") return Arch::kQwen2;
  if (name == "qwen3") return Arch::kQwen3;
  if (name == "gemma3") return Arch::kGemma3;
  if (name == "qwen3moe") return Arch::kQwen3Moe;
  if (name == "qwen2vl") return Arch::kQwen2VL;
  if (name == "gpt-oss") return Arch::kGptOss;
  return make_error(ErrorCode::kUnsupported, "unsupported architecture '%s'", name.c_str());
}

// Vocabulary size as llama.cpp derives it: the length of tokenizer.ggml.tokens (llama also accepts
// <arch>.vocab_size); the token_embd shape is checked against it when weights are bound.
Expected<int64_t> read_vocab(const gguf::ModelFile& file, const Keys& keys) {
  if (const gguf::Value* v = file.find("tokenizer.ggml.tokens")) {
    const gguf::Array* arr = v->as_array();
    if (arr == nullptr) return make_error(ErrorCode::kCorrupt, "metadata key 'tokenizer.ggml.tokens' is not an array");
    return static_cast<int64_t>(arr->items.size());
  }
  if (keys.has("vocab_size")) return keys.count("vocab_size", false);
  return make_error(ErrorCode::kNotFound, "missing required metadata key 'tokenizer.ggml.tokens'");
}

// RoPE scaling keys (llama.cpp: rope.scaling.type, rope.scaling.factor or the older rope.scale_linear).
// Linear scaling divides positions by the factor; "none" never scales; YaRN scales the angles by the
// factor and blends them back towards the unscaled ones over the low frequencies (ext_factor 1, the
// attention factor as llama.cpp's context computes it: get_mscale(factor) / (1 + 0.1 ln factor) times
// rope.scaling.attn_factor, in float). LongRoPE changes the rotation itself and is not implemented, so a
// file that needs it is refused rather than run wrong.
Status read_rope_scaling(const Keys& keys, ModelSpec* spec) {
  FERRY_ASSIGN_OR_RETURN(std::string type, keys.string_or("rope.scaling.type", "linear"));
  double factor = 0.0;
  if (keys.has("rope.scaling.factor")) {
    FERRY_ASSIGN_OR_RETURN(factor, keys.real("rope.scaling.factor"));
  } else {
    FERRY_ASSIGN_OR_RETURN(factor, keys.real_or("rope.scale_linear", 0.0));
  }
  if (factor < 0.0) return make_error(ErrorCode::kCorrupt, "%s is negative", keys.key("rope.scaling.factor").c_str());
  if (type == "none") {
    spec->rope_freq_scale = 1.f;
  } else if (type == "linear") {
    spec->rope_freq_scale = factor == 0.0 ? 1.f : static_cast<float>(1.0 / factor);
  } else if (type == "yarn") {
    spec->rope_freq_scale = factor == 0.0 ? 1.f : static_cast<float>(1.0 / factor);
    FERRY_ASSIGN_OR_RETURN(const double attn, keys.real_or("rope.scaling.attn_factor", 1.0));
    FERRY_ASSIGN_OR_RETURN(const int64_t orig, keys.count_or("rope.scaling.original_context_length", 0, false));
    const float f = 1.0f / spec->rope_freq_scale;
    float mscale = f <= 1.0f ? 1.0f : 0.1f * 1.0f * std::log(f) + 1.0f;
    mscale *= 1.0f / (1.0f + 0.1f * std::log(f));
    spec->rope_ext_factor = 1.0f;
    spec->rope_attn_factor = mscale * static_cast<float>(attn);
    spec->n_ctx_orig_yarn = static_cast<int32_t>(orig);  // 0: the training context (set by the caller)
  } else if (type == "longrope") {
    if (factor != 0.0 && factor != 1.0)
      return make_error(ErrorCode::kUnsupported, "RoPE scaling type '%s' (factor %g) is not supported", type.c_str(),
                        factor);
    spec->rope_freq_scale = 1.f;
  } else {
    return make_error(ErrorCode::kCorrupt, "unknown RoPE scaling type '%s' in %s", type.c_str(),
                      keys.key("rope.scaling.type").c_str());
  }
  return Status::ok();
}

// qwen2vl: rope.dimension_sections, up to 4 non-negative counts of rotated pairs (llama.cpp reads it
// with get_key_or_arr(..., 4, required)); missing ones are 0. Their sum must be positive and at most the
// head dimension (ggml asserts it); pairs past the sum wrap around to section 0.
Status read_rope_sections(const gguf::ModelFile& file, const Keys& keys, ModelSpec* spec) {
  const std::string k = keys.key("rope.dimension_sections");
  const gguf::Value* v = file.find(k);
  if (v == nullptr) return make_error(ErrorCode::kNotFound, "missing required metadata key '%s'", k.c_str());
  const gguf::Array* arr = v->as_array();
  if (arr == nullptr || arr->items.empty() || arr->items.size() > 4)
    return make_error(ErrorCode::kCorrupt, "metadata key '%s': expected an array of 1 to 4 integers", k.c_str());
  int64_t sum = 0;
  for (size_t i = 0; i < arr->items.size(); ++i) {
    Expected<int64_t> x = arr->items[i].as_int();
    if (!x || *x < 0 || *x > (int64_t{1} << 20))
      return make_error(ErrorCode::kCorrupt, "metadata key '%s'[%zu]: not a valid section size", k.c_str(), i);
    spec->rope_sections[i] = static_cast<int32_t>(*x);
    sum += *x;
  }
  if (sum <= 0 || sum > spec->head_dim)
    return make_error(ErrorCode::kCorrupt, "metadata key '%s': sections sum to %lld, need 1..%d (the head dimension)",
                      k.c_str(), static_cast<long long>(sum), spec->head_dim);
  return Status::ok();
}

// Sliding-window layout (llama.cpp load_swa_pattern; default n: gemma3 6, gpt-oss 2): either a per-layer
// bool array, or an integer n where layer il is local iff il % n < n - 1 (n == 0: every layer local).
Status read_swa_pattern(const gguf::ModelFile& file, const Keys& keys, ModelSpec* spec, int64_t default_period) {
  const std::string k = keys.key("attention.sliding_window_pattern");
  const gguf::Value* v = file.find(k);
  int64_t period = default_period;
  if (v != nullptr) {
    if (const gguf::Array* arr = v->as_array()) {
      if (static_cast<int64_t>(arr->items.size()) < spec->n_layer)
        return make_error(ErrorCode::kCorrupt, "metadata key '%s': %zu entries for %d layers", k.c_str(),
                          arr->items.size(), spec->n_layer);
      spec->swa_layers.assign(spec->n_layer, 0);
      for (int32_t il = 0; il < spec->n_layer; ++il) {
        const gguf::Value& item = arr->items[il];
        Expected<bool> b = item.as_bool();
        if (b) {
          spec->swa_layers[il] = *b ? 1 : 0;
          continue;
        }
        Expected<int64_t> x = item.as_int();
        if (!x) return make_error(ErrorCode::kCorrupt, "metadata key '%s'[%d]: expected bool", k.c_str(), il);
        spec->swa_layers[il] = *x != 0 ? 1 : 0;
      }
      spec->swa_period = 0;
      return Status::ok();
    }
    FERRY_ASSIGN_OR_RETURN(period, keys.count("attention.sliding_window_pattern", false));
  }
  if (period == 0) {
    spec->swa_layers.assign(spec->n_layer, 1);
    spec->swa_period = 0;
  } else {
    spec->swa_period = static_cast<int32_t>(period);
  }
  return Status::ok();
}

// Mixture-of-experts keys (llama.cpp: expert_count, expert_used_count, expert_feed_forward_length). qwen3moe
// and gpt-oss must have experts; llama with experts is Mixtral, whose experts are feed_forward_length wide; the other
// architectures have none. Both routers are softmax, top-k, weights renormalised (build_moe_ffn with
// norm_w = true and no weight scale for these two).
Status read_experts(const Keys& keys, ModelSpec* s) {
  FERRY_ASSIGN_OR_RETURN(const int64_t n_expert, keys.count_or("expert_count", 0, false));
  if (n_expert == 0) {
    if (s->arch == Arch::kQwen3Moe || s->arch == Arch::kGptOss)
      return make_error(ErrorCode::kCorrupt, "%s model without experts (%s is missing or 0)", arch_name(s->arch),
                        keys.key("expert_count").c_str());
    return Status::ok();
  }
  if (s->arch != Arch::kQwen3Moe && s->arch != Arch::kLlama && s->arch != Arch::kGptOss)
    return make_error(ErrorCode::kUnsupported, "mixture-of-experts %s models (%lld experts) are not supported",
                      arch_name(s->arch), static_cast<long long>(n_expert));
  FERRY_ASSIGN_OR_RETURN(const int64_t n_used, keys.count("expert_used_count", true));
  if (n_expert > 512) return make_error(ErrorCode::kCorrupt, "%s = %lld is too large", keys.key("expert_count").c_str(),
                                        static_cast<long long>(n_expert));
  if (n_used <= 0 || n_used > n_expert)
    return make_error(ErrorCode::kCorrupt, "invalid model hyperparameter: %s = %lld with %lld experts",
                      keys.key("expert_used_count").c_str(), static_cast<long long>(n_used),
                      static_cast<long long>(n_expert));
  FERRY_ASSIGN_OR_RETURN(const int64_t n_shared, keys.count_or("expert_shared_count", 0, false));
  if (n_shared > 0)
    return make_error(ErrorCode::kUnsupported, "%s = %lld: shared experts are not supported",
                      keys.key("expert_shared_count").c_str(), static_cast<long long>(n_shared));
  int64_t n_ff_expert = s->n_ff;
  if (s->arch == Arch::kQwen3Moe) {  // llama.cpp's default: n_ff / n_expert_used
    FERRY_ASSIGN_OR_RETURN(n_ff_expert, keys.count_or("expert_feed_forward_length", s->n_ff / n_used, true));
  } else if (s->arch == Arch::kGptOss) {  // required there
    FERRY_ASSIGN_OR_RETURN(n_ff_expert, keys.count("expert_feed_forward_length", true));
  }
  if (n_ff_expert <= 0)
    return make_error(ErrorCode::kCorrupt, "invalid model hyperparameter: expert feed-forward length %lld",
                      static_cast<long long>(n_ff_expert));
  s->n_expert = static_cast<int32_t>(n_expert);
  s->n_expert_used = static_cast<int32_t>(n_used);
  s->n_ff_expert = static_cast<int32_t>(n_ff_expert);
  // gpt-oss: softmax over the picked logits, no renormalisation (build_moe_ffn's SOFTMAX_WEIGHT, norm_w false).
  s->expert_weights_norm = s->arch != Arch::kGptOss;
  return Status::ok();
}

Status validate(const ModelSpec& s) {
  auto bad = [](const char* what, long long v) {
    return make_error(ErrorCode::kCorrupt, "invalid model hyperparameter: %s = %lld", what, v);
  };
  if (s.n_layer <= 0) return bad("block_count", s.n_layer);
  if (s.n_embd <= 0) return bad("embedding_length", s.n_embd);
  if (s.n_head <= 0) return bad("attention.head_count", s.n_head);
  if (s.n_kv_head <= 0) return bad("attention.head_count_kv", s.n_kv_head);
  if (s.n_head % s.n_kv_head != 0)
    return make_error(ErrorCode::kCorrupt, "invalid model hyperparameters: head_count %d is not a multiple of head_count_kv %d",
                      s.n_head, s.n_kv_head);
  if (s.head_dim <= 0) return bad("attention.key_length", s.head_dim);
  if (s.head_dim % 2 != 0) return bad("attention.key_length (must be even)", s.head_dim);
  if (s.n_rot <= 0 || s.n_rot > s.head_dim || s.n_rot % 2 != 0) return bad("rope.dimension_count", s.n_rot);
  if (s.n_ff <= 0 && s.n_expert == 0) return bad("feed_forward_length", s.n_ff);
  if (s.n_vocab <= 0) return bad("vocabulary size", s.n_vocab);
  if (s.n_ctx_train <= 0) return bad("context_length", s.n_ctx_train);
  if (!(s.rms_eps > 0.f) || s.rms_eps > 1.f)
    return make_error(ErrorCode::kCorrupt, "invalid model hyperparameter: layer_norm_rms_epsilon = %g", s.rms_eps);
  if (!(s.rope_base > 0.f) || !(s.rope_base_local > 0.f))
    return make_error(ErrorCode::kCorrupt, "invalid model hyperparameter: rope.freq_base = %g", s.rope_base);
  if (!(s.rope_freq_scale > 0.f) || !std::isfinite(s.rope_freq_scale))
    return make_error(ErrorCode::kCorrupt, "invalid model hyperparameter: rope scaling factor 1/%g", s.rope_freq_scale);
  if (s.sliding_window < 0) return bad("attention.sliding_window", s.sliding_window);
  // Products used for buffer sizes must fit comfortably in int32 element counts per row.
  if (static_cast<int64_t>(s.n_head) * s.head_dim > (int64_t{1} << 24)) return bad("head_count * key_length", s.n_head);
  return Status::ok();
}

}  // namespace

Expected<ModelSpec> ModelSpec::from_gguf(const gguf::ModelFile& file) {
  Expected<std::string> arch_str = file.get_string("general.architecture");
  if (!arch_str) {
    if (arch_str.status().code() == ErrorCode::kNotFound)
      return make_error(ErrorCode::kNotFound, "missing required metadata key 'general.architecture'");
    return arch_str.status();
  }
  FERRY_ASSIGN_OR_RETURN(Arch arch, parse_arch(*arch_str));
  const Keys keys(file, *arch_str);

  ModelSpec s;
  s.arch = arch;
  s.name = file.get_string_or("general.name", "");

  FERRY_ASSIGN_OR_RETURN(const int64_t n_layer, keys.count("block_count", false));
  FERRY_ASSIGN_OR_RETURN(const int64_t n_embd, keys.count("embedding_length", false));
  FERRY_ASSIGN_OR_RETURN(const int64_t n_ctx_train, keys.count("context_length", false));
  // qwen3moe has no dense FFN: feed_forward_length is informational there (llama.cpp reads it optionally).
  FERRY_ASSIGN_OR_RETURN(const int64_t n_ff, arch == Arch::kQwen3Moe || arch == Arch::kGptOss
                                                 ? keys.count_or("feed_forward_length", 0, true)
                                                 : keys.count("feed_forward_length", true));
  FERRY_ASSIGN_OR_RETURN(const int64_t n_head, keys.count("attention.head_count", true));
  // llama.cpp: head_count_kv defaults to head_count; key/value length to n_embd / n_head.
  FERRY_ASSIGN_OR_RETURN(const int64_t n_kv_head, keys.count_or("attention.head_count_kv", n_head, true));
  const int64_t head_dim_default = n_head > 0 ? n_embd / n_head : 0;
  FERRY_ASSIGN_OR_RETURN(const int64_t head_dim, keys.count_or("attention.key_length", head_dim_default, false));
  FERRY_ASSIGN_OR_RETURN(const int64_t head_dim_v, keys.count_or("attention.value_length", head_dim_default, false));
  FERRY_ASSIGN_OR_RETURN(const int64_t n_rot, keys.count_or("rope.dimension_count", head_dim, false));
  FERRY_ASSIGN_OR_RETURN(const double rms_eps, keys.real("attention.layer_norm_rms_epsilon"));
  FERRY_ASSIGN_OR_RETURN(const double rope_base, keys.real_or("rope.freq_base", 10000.0));
  FERRY_ASSIGN_OR_RETURN(const int64_t n_vocab, read_vocab(file, keys));

  s.n_layer = static_cast<int32_t>(n_layer);
  s.n_embd = static_cast<int32_t>(n_embd);
  s.n_ctx_train = static_cast<int32_t>(n_ctx_train);
  s.n_ff = static_cast<int32_t>(n_ff);
  s.n_head = static_cast<int32_t>(n_head);
  s.n_kv_head = static_cast<int32_t>(n_kv_head);
  s.head_dim = static_cast<int32_t>(head_dim);
  s.n_rot = static_cast<int32_t>(n_rot);
  s.n_vocab = static_cast<int32_t>(n_vocab);
  s.rms_eps = static_cast<float>(rms_eps);
  s.rope_base = static_cast<float>(rope_base);
  s.rope_base_local = s.rope_base;
  FERRY_RETURN_IF_ERROR(read_rope_scaling(keys, &s));
  if (s.n_ctx_orig_yarn == 0) s.n_ctx_orig_yarn = s.n_ctx_train;

  if (head_dim_v != head_dim)
    return make_error(ErrorCode::kUnsupported, "attention.value_length %lld differs from key_length %lld",
                      static_cast<long long>(head_dim_v), static_cast<long long>(head_dim));

  switch (arch) {
    case Arch::kLlama:
      s.rope_neox = false;
      break;
    case Arch::kQwen2:
      s.rope_neox = true;
      s.qkv_bias = true;
      break;
    case Arch::kQwen3:
      s.rope_neox = true;
      s.qk_norm = true;
      break;
    case Arch::kGemma3: {
      s.rope_neox = true;
      s.qk_norm = true;
      s.post_norms = true;
      s.gelu = true;
      s.embed_scale = std::sqrt(static_cast<float>(s.n_embd));  // ggml_scale(sqrtf(n_embd)), in float
      FERRY_ASSIGN_OR_RETURN(const int64_t window, keys.count_or("attention.sliding_window", 0, false));
      if (window > 0) {
        s.sliding_window = static_cast<int32_t>(window);
        FERRY_RETURN_IF_ERROR(read_swa_pattern(file, keys, &s, 6));
        // Local layers: base 10000 (or rope.freq_base_swa), never scaled.
        FERRY_ASSIGN_OR_RETURN(const double base_swa, keys.real_or("rope.freq_base_swa", 10000.0));
        s.rope_base_local = static_cast<float>(base_swa);
      }
      FERRY_ASSIGN_OR_RETURN(const double softcap, keys.real_or("final_logit_softcapping", 0.0));
      s.final_logit_softcap = static_cast<float>(softcap);
      // Gemma 3 27B (62 layers) scales by 1/sqrt(n_embd / n_head), every other size by 1/sqrt(head_dim)
      // (llama.cpp after gemma_pytorch's config).
      s.attn_scale = s.n_layer == 62 && s.n_head > 0
                         ? 1.0f / std::sqrt(static_cast<float>(s.n_embd / s.n_head))
                         : 1.0f / std::sqrt(static_cast<float>(s.head_dim));
      break;
    }
    case Arch::kQwen2VL:  // Qwen2-VL / Qwen2.5-VL text model: qwen2 with multimodal RoPE
      s.rope_neox = true;
      s.qkv_bias = true;
      FERRY_RETURN_IF_ERROR(read_rope_sections(file, keys, &s));
      break;
    case Arch::kQwen3Moe:
      s.rope_neox = true;
      s.qk_norm = true;
      break;
    case Arch::kGptOss: {  // llama.cpp's openai-moe
      s.rope_neox = true;
      s.qkv_bias = true;
      s.attn_sinks = true;
      s.expert_biases = true;
      s.expert_softmax_selected = true;
      s.swiglu_oai = true;
      FERRY_ASSIGN_OR_RETURN(const int64_t window, keys.count("attention.sliding_window", false));
      if (window > 0) {
        s.sliding_window = static_cast<int32_t>(window);
        FERRY_RETURN_IF_ERROR(read_swa_pattern(file, keys, &s, 2));  // even layers slide
        // Local layers: the global base unless rope.freq_base_swa says otherwise, scaled like the others.
        FERRY_ASSIGN_OR_RETURN(const double base_swa, keys.real_or("rope.freq_base_swa", rope_base));
        s.rope_base_local = static_cast<float>(base_swa);
      }
      s.attn_scale = 1.0f / std::sqrt(static_cast<float>(s.n_rot));  // build_attn's 1/sqrt(n_rot)
      break;
    }
  }
  s.rope_freq_scale_local = arch == Arch::kGemma3 ? 1.f : s.rope_freq_scale;
  FERRY_RETURN_IF_ERROR(read_experts(keys, &s));

  s.tied_output = file.find_tensor("output.weight") == nullptr;
  s.has_rope_freqs = file.find_tensor("rope_freqs.weight") != nullptr;

  FERRY_RETURN_IF_ERROR(validate(s));
  if (s.n_rot != s.head_dim)  // llama.cpp asserts this for llama, qwen2 and qwen3 too
    return make_error(ErrorCode::kUnsupported, "%s = %d differs from the head dimension %d (partial RoPE)",
                      keys.key("rope.dimension_count").c_str(), s.n_rot, s.head_dim);
  return s;
}

}  // namespace ferry::model
