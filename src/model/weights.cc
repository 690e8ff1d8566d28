// Weight binding: looks every tensor up by its GGUF name (llama.cpp's LLM_TENSOR_* spellings) and
// checks dtype and shape before anything computes with it. Norms and biases must be F32 (every
// converter writes 1-D tensors as F32, and Ops::rms_norm / add take F32); matrices any weight type.
#include "model/weights.h"

#include <cstdio>
#include <string>

#include "format/gguf.h"

namespace ferry::model {

namespace {

enum class Kind { kMatrix, kVector, kExperts };
enum class Need { kRequired, kOptional };

std::string shape_string(int n, const int64_t* ne) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) {
    if (i) s += ", ";
    s += std::to_string(ne[i]);
  }
  return s + "]";
}

class Binder {
 public:
  explicit Binder(const gguf::ModelFile& file) : file_(file) {}

  // Binds `name` with shape [ne0] (vector), [ne0, ne1] (matrix) or [ne0, ne1, ne2] (stacked experts).
  // Absent optional => empty view.
  Status bind(const std::string& name, Kind kind, int64_t ne0, int64_t ne1, Need need, TensorView* out,
              int64_t ne2 = 1) {
    *out = TensorView{};
    const gguf::TensorInfo* t = file_.find_tensor(name);
    if (t == nullptr) {
      if (need == Need::kOptional) return Status::ok();
      return make_error(ErrorCode::kNotFound, "missing tensor '%s' (expected shape %s)", name.c_str(),
                        expected_str(kind, ne0, ne1, ne2).c_str());
    }
    // Trailing dimensions of 1 are allowed (some writers store [d, 1]); the rest must match exactly.
    const int64_t want[4] = {ne0, kind == Kind::kVector ? 1 : ne1, kind == Kind::kExperts ? ne2 : 1, 1};
    for (int i = 0; i < 4; ++i) {
      if (t->ne[i] != want[i]) {
        const int n_found = t->n_dims > 0 ? t->n_dims : 1;
        return make_error(ErrorCode::kCorrupt, "tensor '%s': expected shape %s, found %s", name.c_str(),
                          expected_str(kind, ne0, ne1, ne2).c_str(), shape_string(n_found, t->ne).c_str());
      }
    }
    const DTypeTraits& tr = traits(t->dtype);
    if (kind == Kind::kVector && t->dtype != DType::F32)
      return make_error(ErrorCode::kUnsupported, "tensor '%s': type %s is not supported for a norm or bias (need F32)",
                        name.c_str(), tr.name);
    if (kind != Kind::kVector && !tr.weight_type)
      return make_error(ErrorCode::kUnsupported, "tensor '%s': type %s is not a supported weight type", name.c_str(),
                        tr.name);
    if (t->data == nullptr) return make_error(ErrorCode::kCorrupt, "tensor '%s': no data", name.c_str());
    *out = t->view();
    return Status::ok();
  }

 private:
  static std::string expected_str(Kind kind, int64_t ne0, int64_t ne1, int64_t ne2) {
    const int64_t ne[3] = {ne0, ne1, ne2};
    return shape_string(kind == Kind::kExperts ? 3 : kind == Kind::kMatrix ? 2 : 1, ne);
  }
  const gguf::ModelFile& file_;
};

std::string blk(int il, const char* suffix) { return "blk." + std::to_string(il) + "." + suffix; }

}  // namespace

Expected<ModelWeights> bind_weights(const ModelSpec& spec, const gguf::ModelFile& file) {
  Binder b(file);
  ModelWeights w;
  const int64_t d = spec.n_embd, qd = spec.q_dim(), kvd = spec.kv_dim(), hd = spec.head_dim, ff = spec.n_ff;
  const int64_t nv = spec.n_vocab;
  const Need bias_need = spec.qkv_bias ? Need::kRequired : Need::kOptional;

  FERRY_RETURN_IF_ERROR(b.bind("token_embd.weight", Kind::kMatrix, d, nv, Need::kRequired, &w.token_embd));
  FERRY_RETURN_IF_ERROR(b.bind("output_norm.weight", Kind::kVector, d, 1, Need::kRequired, &w.output_norm));
  if (spec.tied_output) {
    w.output = w.token_embd;
  } else {
    FERRY_RETURN_IF_ERROR(b.bind("output.weight", Kind::kMatrix, d, nv, Need::kRequired, &w.output));
  }
  FERRY_RETURN_IF_ERROR(b.bind("rope_freqs.weight", Kind::kVector, spec.n_rot / 2, 1,
                               spec.has_rope_freqs ? Need::kRequired : Need::kOptional, &w.rope_freqs));

  w.layers.resize(spec.n_layer);
  for (int il = 0; il < spec.n_layer; ++il) {
    LayerWeights& L = w.layers[il];
    FERRY_RETURN_IF_ERROR(b.bind(blk(il, "attn_norm.weight"), Kind::kVector, d, 1, Need::kRequired, &L.attn_norm));
    FERRY_RETURN_IF_ERROR(b.bind(blk(il, "attn_q.weight"), Kind::kMatrix, d, qd, Need::kRequired, &L.attn_q));
    FERRY_RETURN_IF_ERROR(b.bind(blk(il, "attn_k.weight"), Kind::kMatrix, d, kvd, Need::kRequired, &L.attn_k));
    FERRY_RETURN_IF_ERROR(b.bind(blk(il, "attn_v.weight"), Kind::kMatrix, d, kvd, Need::kRequired, &L.attn_v));
    FERRY_RETURN_IF_ERROR(b.bind(blk(il, "attn_output.weight"), Kind::kMatrix, qd, d, Need::kRequired, &L.attn_output));
    FERRY_RETURN_IF_ERROR(b.bind(blk(il, "attn_q.bias"), Kind::kVector, qd, 1, bias_need, &L.attn_q_bias));
    FERRY_RETURN_IF_ERROR(b.bind(blk(il, "attn_k.bias"), Kind::kVector, kvd, 1, bias_need, &L.attn_k_bias));
    FERRY_RETURN_IF_ERROR(b.bind(blk(il, "attn_v.bias"), Kind::kVector, kvd, 1, bias_need, &L.attn_v_bias));
    FERRY_RETURN_IF_ERROR(b.bind(blk(il, "attn_output.bias"), Kind::kVector, d, 1, Need::kOptional, &L.attn_output_bias));
    if (spec.qk_norm) {
      FERRY_RETURN_IF_ERROR(b.bind(blk(il, "attn_q_norm.weight"), Kind::kVector, hd, 1, Need::kRequired, &L.attn_q_norm));
      FERRY_RETURN_IF_ERROR(b.bind(blk(il, "attn_k_norm.weight"), Kind::kVector, hd, 1, Need::kRequired, &L.attn_k_norm));
    }
    if (spec.post_norms) {
      FERRY_RETURN_IF_ERROR(
          b.bind(blk(il, "post_attention_norm.weight"), Kind::kVector, d, 1, Need::kRequired, &L.post_attention_norm));
      FERRY_RETURN_IF_ERROR(b.bind(blk(il, "post_ffw_norm.weight"), Kind::kVector, d, 1, Need::kRequired, &L.post_ffw_norm));
    }
    // gpt-oss's norm before the experts is stored as post_attention_norm (llama.cpp's openai-moe graph).
    const char* ffn_norm_name = spec.arch == Arch::kGptOss ? "post_attention_norm.weight" : "ffn_norm.weight";
    FERRY_RETURN_IF_ERROR(b.bind(blk(il, ffn_norm_name), Kind::kVector, d, 1, Need::kRequired, &L.ffn_norm));
    if (spec.attn_sinks)
      FERRY_RETURN_IF_ERROR(
          b.bind(blk(il, "attn_sinks.weight"), Kind::kVector, spec.n_head, 1, Need::kRequired, &L.attn_sinks));
    if (spec.n_expert > 0) {
      const int64_t ne = spec.n_expert, ffe = spec.n_ff_expert;
      FERRY_RETURN_IF_ERROR(b.bind(blk(il, "ffn_gate_inp.weight"), Kind::kMatrix, d, ne, Need::kRequired, &L.ffn_gate_inp));
      FERRY_RETURN_IF_ERROR(
          b.bind(blk(il, "ffn_gate_exps.weight"), Kind::kExperts, d, ffe, Need::kRequired, &L.ffn_gate_exps, ne));
      FERRY_RETURN_IF_ERROR(
          b.bind(blk(il, "ffn_up_exps.weight"), Kind::kExperts, d, ffe, Need::kRequired, &L.ffn_up_exps, ne));
      FERRY_RETURN_IF_ERROR(
          b.bind(blk(il, "ffn_down_exps.weight"), Kind::kExperts, ffe, d, Need::kRequired, &L.ffn_down_exps, ne));
      if (spec.expert_biases) {  // gpt-oss; F32 like every bias
        FERRY_RETURN_IF_ERROR(
            b.bind(blk(il, "ffn_gate_inp.bias"), Kind::kVector, ne, 1, Need::kRequired, &L.ffn_gate_inp_bias));
        const struct {
          const char* name;
          int64_t rows;
          TensorView* out;
        } biases[] = {{"ffn_gate_exps.bias", ffe, &L.ffn_gate_exps_bias},
                      {"ffn_up_exps.bias", ffe, &L.ffn_up_exps_bias},
                      {"ffn_down_exps.bias", d, &L.ffn_down_exps_bias}};
        for (const auto& bias : biases) {
          FERRY_RETURN_IF_ERROR(b.bind(blk(il, bias.name), Kind::kMatrix, bias.rows, ne, Need::kRequired, bias.out));
          if (bias.out->dtype != DType::F32)
            return make_error(ErrorCode::kUnsupported, "tensor '%s': type %s is not supported for a bias (need F32)",
                              blk(il, bias.name).c_str(), dtype_name(bias.out->dtype));
        }
      }
      // Expert biases and shared experts belong to other MoE architectures; refuse rather than ignore them.
      for (const char* extra : {"ffn_gate_inp.bias", "ffn_gate_exps.bias", "ffn_up_exps.bias", "ffn_down_exps.bias",
                                "ffn_gate_shexp.weight", "exp_probs_b.bias"}) {
        if (spec.expert_biases && std::string(extra).find(".bias") != std::string::npos &&
            std::string(extra) != "exp_probs_b.bias")
          continue;
        if (file.find_tensor(blk(il, extra)) != nullptr)
          return make_error(ErrorCode::kUnsupported, "tensor '%s' is not supported for %s", blk(il, extra).c_str(),
                            arch_name(spec.arch));
      }
      continue;
    }
    FERRY_RETURN_IF_ERROR(b.bind(blk(il, "ffn_gate.weight"), Kind::kMatrix, d, ff, Need::kRequired, &L.ffn_gate));
    FERRY_RETURN_IF_ERROR(b.bind(blk(il, "ffn_up.weight"), Kind::kMatrix, d, ff, Need::kRequired, &L.ffn_up));
    FERRY_RETURN_IF_ERROR(b.bind(blk(il, "ffn_down.weight"), Kind::kMatrix, ff, d, Need::kRequired, &L.ffn_down));
    // FFN biases exist in a few llama-arch files; ferry does not apply them, so refuse rather than
    // silently compute something else.
    for (const char* bias : {"ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"}) {
      if (file.find_tensor(blk(il, bias)) != nullptr)
        return make_error(ErrorCode::kUnsupported, "tensor '%s' (FFN bias) is not supported", blk(il, bias).c_str());
    }
  }
  return w;
}

std::vector<TensorView*> all_views(ModelWeights& w) {
  std::vector<TensorView*> v = {&w.token_embd, &w.output_norm, &w.output, &w.rope_freqs};
  for (LayerWeights& L : w.layers)
    for (TensorView* t : {&L.attn_norm, &L.attn_q, &L.attn_k, &L.attn_v, &L.attn_output, &L.attn_q_bias,
                          &L.attn_k_bias, &L.attn_v_bias, &L.attn_output_bias, &L.attn_q_norm, &L.attn_k_norm,
                          &L.post_attention_norm, &L.ffn_norm, &L.ffn_gate, &L.ffn_up, &L.ffn_down, &L.post_ffw_norm,
                          &L.ffn_gate_inp, &L.ffn_gate_exps, &L.ffn_up_exps, &L.ffn_down_exps, &L.attn_sinks,
                          &L.ffn_gate_inp_bias, &L.ffn_gate_exps_bias, &L.ffn_up_exps_bias, &L.ffn_down_exps_bias})
      v.push_back(t);
  return v;
}

}  // namespace ferry::model
