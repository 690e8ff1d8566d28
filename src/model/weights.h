// ModelWeights: every tensor of a model bound by its GGUF name to a host view over the mmap.
// Binding validates dtype and exact shape, so the forward never checks them again; a missing tensor
// or a wrong shape is one error line naming the tensor, the expected and the found shape.
// Shapes are ggml order [ne0, ne1]: a linear layer's weight is [in, out]; a layer's stacked experts are
// [in, out, n_expert]. Optional tensors that a file lacks have data == nullptr (see present()).
#pragma once

#include <vector>

#include "base/status.h"
#include "model/model_spec.h"
#include "tensor/tensor_view.h"

namespace ferry::gguf {
class ModelFile;
}

namespace ferry::model {

inline bool present(const TensorView& t) { return t.data != nullptr; }

// d = n_embd, qd = n_head * head_dim, kvd = n_kv_head * head_dim, hd = head_dim, ff = n_ff,
// E = n_expert, ffe = n_ff_expert. A layer has the dense FFN (ffn_gate / up / down) or, in a
// mixture-of-experts model, the router and the stacked experts (ffn_gate_inp, ffn_*_exps).
struct LayerWeights {
  TensorView attn_norm;       // [d] F32
  TensorView attn_q;          // [d, qd]   weight type
  TensorView attn_k;          // [d, kvd]  weight type
  TensorView attn_v;          // [d, kvd]  weight type
  TensorView attn_output;     // [qd, d]   weight type
  TensorView attn_q_bias;     // [qd] F32   qwen2 (required), llama (optional)
  TensorView attn_k_bias;     // [kvd] F32  qwen2 (required), llama (optional)
  TensorView attn_v_bias;     // [kvd] F32  qwen2 (required), llama (optional)
  TensorView attn_output_bias;// [d] F32    optional (llama)
  TensorView attn_q_norm;     // [hd] F32   qwen3, gemma3
  TensorView attn_k_norm;     // [hd] F32   qwen3, gemma3
  TensorView post_attention_norm;  // [d] F32  gemma3 (gpt-oss names its FFN norm so: bound to ffn_norm)
  TensorView ffn_norm;        // [d] F32
  TensorView ffn_gate;        // [d, ff]   weight type
  TensorView ffn_up;          // [d, ff]   weight type
  TensorView ffn_down;        // [ff, d]   weight type
  TensorView ffn_gate_inp;    // [d, E]          weight type (the router; F32 in converted files)
  TensorView ffn_gate_exps;   // [d, ffe, E]     weight type
  TensorView ffn_up_exps;     // [d, ffe, E]     weight type
  TensorView ffn_down_exps;   // [ffe, d, E]     weight type
  TensorView post_ffw_norm;   // [d] F32   gemma3
  // gpt-oss: attention sinks, the router's bias and the experts' biases.
  TensorView attn_sinks;      // [n_head] F32
  TensorView ffn_gate_inp_bias;   // [E] F32
  TensorView ffn_gate_exps_bias;  // [ffe, E] F32
  TensorView ffn_up_exps_bias;    // [ffe, E] F32
  TensorView ffn_down_exps_bias;  // [d, E] F32
};

struct ModelWeights {
  TensorView token_embd;      // [d, n_vocab] weight type
  TensorView output_norm;     // [d] F32
  TensorView output;          // [d, n_vocab] weight type; == token_embd when tied
  TensorView rope_freqs;      // [n_rot / 2] F32, llama3 frequency divisors; optional
  std::vector<LayerWeights> layers;  // [n_layer]
};

// Binds and validates every tensor the spec's architecture needs.
Expected<ModelWeights> bind_weights(const ModelSpec& spec, const gguf::ModelFile& file);

// Every view of w (absent ones included: data == nullptr), for code that moves weights as a whole.
std::vector<TensorView*> all_views(ModelWeights& w);

}  // namespace ferry::model
