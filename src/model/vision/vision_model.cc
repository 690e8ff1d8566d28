// VisionSpec::from_gguf and bind_vision_weights: the keys and tensor names llama.cpp's clip loader reads
// for Qwen2.5-VL (tools/mtmd/clip.cpp, clip-impl.h), with its defaults, and every value checked before use.
#include "model/vision/vision_model.h"

#include <cmath>
#include <string>

#include "format/gguf.h"

namespace ferry::model {

namespace {

Expected<int64_t> count(const gguf::ModelFile& f, const std::string& key, int64_t fallback, bool required) {
  const gguf::Value* v = f.find(key);
  if (v == nullptr) {
    if (required) return make_error(ErrorCode::kNotFound, "mmproj: missing required metadata key '%s'", key.c_str());
    return fallback;
  }
  Expected<int64_t> x = v->as_int();
  if (!x) return make_error(ErrorCode::kCorrupt, "mmproj: metadata key '%s': %s", key.c_str(), x.status().message().c_str());
  if (*x < 0 || *x > (int64_t{1} << 24))
    return make_error(ErrorCode::kCorrupt, "mmproj: metadata key '%s': value %lld out of range", key.c_str(),
                      static_cast<long long>(*x));
  return x;
}

Status read_triple(const gguf::ModelFile& f, const std::string& key, float out[3]) {
  const gguf::Value* v = f.find(key);
  if (v == nullptr) return make_error(ErrorCode::kNotFound, "mmproj: missing required metadata key '%s'", key.c_str());
  const gguf::Array* arr = v->as_array();
  if (arr == nullptr || arr->items.size() < 3)
    return make_error(ErrorCode::kCorrupt, "mmproj: metadata key '%s': expected an array of 3 numbers", key.c_str());
  for (int i = 0; i < 3; ++i) {
    Expected<double> x = arr->items[static_cast<size_t>(i)].as_float();
    if (!x || !std::isfinite(*x))
      return make_error(ErrorCode::kCorrupt, "mmproj: metadata key '%s'[%d] is not a finite number", key.c_str(), i);
    out[i] = static_cast<float>(*x);
  }
  return Status::ok();
}

std::string shape_string(const int64_t* ne, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

// Binds `name` with exactly the shape `want` (trailing 1s implied). kVector: F32; matrices: a weight
// type; `conv`: F16 or F32 (llama.cpp's im2col takes those).
enum class Kind { kVector, kMatrix, kConv };
Status bind(const gguf::ModelFile& f, const std::string& name, Kind kind, std::vector<int64_t> want, bool required,
            TensorView* out) {
  *out = TensorView{};
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (t == nullptr) {
    if (!required) return Status::ok();
    return make_error(ErrorCode::kNotFound, "mmproj: missing tensor '%s' (expected shape %s)", name.c_str(),
                      shape_string(want.data(), static_cast<int>(want.size())).c_str());
  }
  want.resize(4, 1);
  for (int i = 0; i < 4; ++i)
    if (t->ne[i] != want[static_cast<size_t>(i)])
      return make_error(ErrorCode::kCorrupt, "mmproj: tensor '%s': expected shape %s, found %s", name.c_str(),
                        shape_string(want.data(), 4).c_str(), shape_string(t->ne, 4).c_str());
  const bool ok = kind == Kind::kVector   ? t->dtype == DType::F32
                  : kind == Kind::kConv   ? (t->dtype == DType::F16 || t->dtype == DType::F32)
                                          : traits(t->dtype).weight_type;
  if (!ok)
    return make_error(ErrorCode::kUnsupported, "mmproj: tensor '%s': type %s is not supported here", name.c_str(),
                      traits(t->dtype).name);
  if (t->data == nullptr) return make_error(ErrorCode::kCorrupt, "mmproj: tensor '%s': no data", name.c_str());
  *out = t->view();
  return Status::ok();
}

std::string blk(int il, const char* suffix) { return "v.blk." + std::to_string(il) + "." + suffix; }

}  // namespace

Expected<VisionSpec> VisionSpec::from_gguf(const gguf::ModelFile& f) {
  VisionSpec s;
  s.projector = f.get_string_or("clip.projector_type", "");
  if (s.projector.empty()) s.projector = f.get_string_or("clip.vision.projector_type", "");
  if (s.projector.empty())
    return make_error(ErrorCode::kCorrupt, "%s is not a multimodal projector (no clip.projector_type)", f.path().c_str());
  if (s.projector != "qwen2.5vl_merger")
    return make_error(ErrorCode::kUnsupported,
                      "mmproj projector '%s' is not supported (ferry runs Qwen2.5-VL's 'qwen2.5vl_merger')",
                      s.projector.c_str());
  if (!f.get_bool_or("clip.has_vision_encoder", false))
    return make_error(ErrorCode::kCorrupt, "mmproj %s has no vision encoder (clip.has_vision_encoder)", f.path().c_str());

  FERRY_ASSIGN_OR_RETURN(const int64_t n_embd, count(f, "clip.vision.embedding_length", 0, true));
  FERRY_ASSIGN_OR_RETURN(const int64_t n_head, count(f, "clip.vision.attention.head_count", 0, true));
  FERRY_ASSIGN_OR_RETURN(const int64_t n_head_kv, count(f, "clip.vision.attention.head_count_kv", n_head, false));
  FERRY_ASSIGN_OR_RETURN(const int64_t n_ff, count(f, "clip.vision.feed_forward_length", 0, true));
  FERRY_ASSIGN_OR_RETURN(const int64_t n_layer, count(f, "clip.vision.block_count", 0, true));
  FERRY_ASSIGN_OR_RETURN(const int64_t proj, count(f, "clip.vision.projection_dim", 0, true));
  FERRY_ASSIGN_OR_RETURN(const int64_t patch, count(f, "clip.vision.patch_size", 0, true));
  FERRY_ASSIGN_OR_RETURN(const int64_t merge, count(f, "clip.vision.spatial_merge_size", 2, false));
  FERRY_ASSIGN_OR_RETURN(const int64_t wa, count(f, "clip.vision.n_wa_pattern", 0, true));
  const int64_t hd_default = n_head > 0 ? n_embd / n_head : 0;
  FERRY_ASSIGN_OR_RETURN(const int64_t head_dim, count(f, "clip.vision.attention.head_dim", hd_default, false));
  Expected<double> eps = f.get_float("clip.vision.attention.layer_norm_epsilon");
  if (!eps) return make_error(ErrorCode::kNotFound, "mmproj: missing clip.vision.attention.layer_norm_epsilon");
  FERRY_RETURN_IF_ERROR(read_triple(f, "clip.vision.image_mean", s.image_mean));
  FERRY_RETURN_IF_ERROR(read_triple(f, "clip.vision.image_std", s.image_std));
  if (!f.get_bool_or("clip.use_silu", false))
    return make_error(ErrorCode::kUnsupported, "mmproj: the qwen2.5vl_merger FFN must be SwiGLU (clip.use_silu)");

  auto bad = [](const char* what, long long v) {
    return make_error(ErrorCode::kCorrupt, "mmproj: invalid hyperparameter %s = %lld", what, v);
  };
  if (n_layer <= 0) return bad("block_count", n_layer);
  if (n_head <= 0 || n_embd <= 0 || n_embd % n_head != 0) return bad("attention.head_count", n_head);
  if (n_head_kv != n_head) return bad("attention.head_count_kv (must equal head_count)", n_head_kv);
  if (head_dim != n_embd / n_head || head_dim % 4 != 0) return bad("attention.head_dim", head_dim);
  if (n_ff <= 0) return bad("feed_forward_length", n_ff);
  if (proj <= 0) return bad("projection_dim", proj);
  if (patch <= 0 || patch > 64) return bad("patch_size", patch);
  if (merge != 2) return bad("spatial_merge_size (the 2x2 merger needs 2)", merge);
  if (!(*eps > 0.0) || *eps > 1.0) return bad("attention.layer_norm_epsilon", 0);
  for (int i = 0; i < 3; ++i)
    if (!(s.image_std[i] != 0.f)) return bad("image_std (zero)", i);

  s.n_layer = static_cast<int32_t>(n_layer);
  s.n_embd = static_cast<int32_t>(n_embd);
  s.n_head = static_cast<int32_t>(n_head);
  s.head_dim = static_cast<int32_t>(head_dim);
  s.n_ff = static_cast<int32_t>(n_ff);
  s.proj_dim = static_cast<int32_t>(proj);
  s.patch_size = static_cast<int32_t>(patch);
  s.n_merge = static_cast<int32_t>(merge);
  s.n_wa_pattern = static_cast<int32_t>(wa);
  s.eps = static_cast<float>(*eps);
  if (s.window_tokens() < 1) return bad("patch_size (windows of 112 px need patches of at most 56 px)", patch);
  return s;
}

Status check_vision_pairing(const VisionSpec& vision, const ModelSpec& lm) {
  if (lm.arch != Arch::kQwen2VL)
    return make_error(ErrorCode::kInvalidArgument,
                      "the mmproj (%s) feeds a qwen2vl language model, but the model is %s", vision.projector.c_str(),
                      arch_name(lm.arch));
  if (vision.proj_dim != lm.n_embd)
    return make_error(ErrorCode::kInvalidArgument,
                      "the mmproj projects to %d features but the model's embedding width is %d (not a matching pair)",
                      vision.proj_dim, lm.n_embd);
  return Status::ok();
}

Expected<VisionWeights> bind_vision_weights(const VisionSpec& s, const gguf::ModelFile& f) {
  VisionWeights w;
  const int64_t d = s.n_embd, ff = s.n_ff, p = s.patch_size, m = 4 * d;
  FERRY_RETURN_IF_ERROR(bind(f, "v.patch_embd.weight", Kind::kConv, {p, p, 3, d}, true, &w.patch0));
  FERRY_RETURN_IF_ERROR(bind(f, "v.patch_embd.weight.1", Kind::kConv, {p, p, 3, d}, true, &w.patch1));
  if (f.find_tensor("v.patch_embd.bias") != nullptr || f.find_tensor("v.pre_ln.weight") != nullptr ||
      f.find_tensor("v.class_embd") != nullptr)
    return make_error(ErrorCode::kUnsupported,
                      "mmproj: a patch bias, pre-norm or class embedding is not part of Qwen2.5-VL's vision tower");
  for (TensorView* t : {&w.patch0, &w.patch1}) *t = TensorView::make(t->dtype, t->data, 3 * p * p, d);
  FERRY_RETURN_IF_ERROR(bind(f, "v.post_ln.weight", Kind::kVector, {d}, true, &w.post_ln));
  FERRY_RETURN_IF_ERROR(bind(f, "v.post_ln.bias", Kind::kVector, {d}, false, &w.post_ln_b));
  FERRY_RETURN_IF_ERROR(bind(f, "mm.0.weight", Kind::kMatrix, {m, m}, true, &w.mm0));
  FERRY_RETURN_IF_ERROR(bind(f, "mm.0.bias", Kind::kVector, {m}, true, &w.mm0_b));
  FERRY_RETURN_IF_ERROR(bind(f, "mm.2.weight", Kind::kMatrix, {m, s.proj_dim}, true, &w.mm2));
  FERRY_RETURN_IF_ERROR(bind(f, "mm.2.bias", Kind::kVector, {s.proj_dim}, true, &w.mm2_b));
  w.layers.resize(static_cast<size_t>(s.n_layer));
  for (int il = 0; il < s.n_layer; ++il) {
    VisionLayerWeights& L = w.layers[static_cast<size_t>(il)];
    FERRY_RETURN_IF_ERROR(bind(f, blk(il, "ln1.weight"), Kind::kVector, {d}, true, &L.ln1));
    FERRY_RETURN_IF_ERROR(bind(f, blk(il, "ln1.bias"), Kind::kVector, {d}, false, &L.ln1_b));
    FERRY_RETURN_IF_ERROR(bind(f, blk(il, "ln2.weight"), Kind::kVector, {d}, true, &L.ln2));
    FERRY_RETURN_IF_ERROR(bind(f, blk(il, "ln2.bias"), Kind::kVector, {d}, false, &L.ln2_b));
    FERRY_RETURN_IF_ERROR(bind(f, blk(il, "attn_q.weight"), Kind::kMatrix, {d, d}, true, &L.q));
    FERRY_RETURN_IF_ERROR(bind(f, blk(il, "attn_k.weight"), Kind::kMatrix, {d, d}, true, &L.k));
    FERRY_RETURN_IF_ERROR(bind(f, blk(il, "attn_v.weight"), Kind::kMatrix, {d, d}, true, &L.v));
    FERRY_RETURN_IF_ERROR(bind(f, blk(il, "attn_q.bias"), Kind::kVector, {d}, true, &L.q_b));
    FERRY_RETURN_IF_ERROR(bind(f, blk(il, "attn_k.bias"), Kind::kVector, {d}, true, &L.k_b));
    FERRY_RETURN_IF_ERROR(bind(f, blk(il, "attn_v.bias"), Kind::kVector, {d}, true, &L.v_b));
    FERRY_RETURN_IF_ERROR(bind(f, blk(il, "attn_out.weight"), Kind::kMatrix, {d, d}, true, &L.out));
    FERRY_RETURN_IF_ERROR(bind(f, blk(il, "attn_out.bias"), Kind::kVector, {d}, false, &L.out_b));
    // Older conversions stored up and down swapped (llama.cpp swaps them back when ffn_down has d
    // columns); the shapes decide which is which.
    std::string up = "ffn_up", down = "ffn_down";
    if (const gguf::TensorInfo* t = f.find_tensor(blk(il, "ffn_down.weight")); t != nullptr && t->ne[0] == d && d != ff)
      std::swap(up, down);
    FERRY_RETURN_IF_ERROR(bind(f, blk(il, (up + ".weight").c_str()), Kind::kMatrix, {d, ff}, true, &L.up));
    FERRY_RETURN_IF_ERROR(bind(f, blk(il, (up + ".bias").c_str()), Kind::kVector, {ff}, false, &L.up_b));
    FERRY_RETURN_IF_ERROR(bind(f, blk(il, "ffn_gate.weight"), Kind::kMatrix, {d, ff}, true, &L.gate));
    FERRY_RETURN_IF_ERROR(bind(f, blk(il, "ffn_gate.bias"), Kind::kVector, {ff}, false, &L.gate_b));
    FERRY_RETURN_IF_ERROR(bind(f, blk(il, (down + ".weight").c_str()), Kind::kMatrix, {ff, d}, true, &L.down));
    FERRY_RETURN_IF_ERROR(bind(f, blk(il, (down + ".bias").c_str()), Kind::kVector, {d}, false, &L.down_b));
  }
  return w;
}

}  // namespace ferry::model
