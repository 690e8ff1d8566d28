// The forward pass of the supported architectures (llama, qwen2, qwen3, gemma3; qwen3moe and Mixtral's
// llama with experts), written once against Ops: one function per sub-layer kind (embed, attention
// block, FFN or mixture-of-experts block, head) over caller-owned scratch views. Architecture
// differences are ModelSpec flags (qkv_bias, qk_norm, post_norms, gelu, embed_scale, sliding window,
// n_expert), never copies of the code. Whoever runs a step (the all-on-one runner
// today, the hybrid executor later) calls these in order and may hand each call a different Ops.
//
// Intermediates are named as in llama.cpp's graph callbacks where one exists ("blk.7.attn_norm",
// "blk.7.ffn_inp", "blk.7.l_out", "result_norm", "result_output"); an optional DebugHook sees each
// one right after it is computed, so two backends can be diffed tensor by tensor.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "model/model_spec.h"
#include "model/weights.h"
#include "tensor/tensor_view.h"

namespace ferry::model {

// Called with each named intermediate; the view lives where the Ops computes and is valid only
// during the call. Views cover exactly the step's tokens ([features, n_tokens]).
using DebugHook = std::function<void(const std::string& name, const TensorView& t)>;

// Scratch activations for a step of up to n_max tokens, of which up to n_out_max want logits.
// All F32, contiguous, [features, tokens]; d = n_embd, qd = q_dim, kvd = kv_dim, ff = n_ff.
// Mixture of experts: E = n_expert, k = n_expert_used, ffe = n_ff_expert; gate / up are then
// max(ff, k * ffe) wide, and the moe_* buffers are empty for dense models.
struct Scratch {
  int32_t n_max = 0;
  int32_t n_out_max = 0;
  TensorView x;       // [d, n_max]    residual stream (input of every block, updated in place)
  TensorView xn;      // [d, n_max]    normed input of the current block
  TensorView q;       // [qd, n_max]   queries; viewed as [head_dim, n_head, n] for q-norm / RoPE
  TensorView k;       // [kvd, n_max]  keys of the new tokens; viewed as [head_dim, n_kv_head, n]
  TensorView v;       // [kvd, n_max]  values of the new tokens
  TensorView attn;    // [qd, n_max]   attention output (heads concatenated), before attn_output
  TensorView proj;    // [d, n_max]    block output before the residual add
  TensorView gate;    // [ff, n_max]   FFN gate, then act(gate) * up (MoE: [ffe, k, n] per routed expert)
  TensorView up;      // [ff, n_max]   FFN up (MoE: [ffe, k, n])
  TensorView moe_logits;   // [E, n_max]     router logits
  TensorView moe_ids;      // [k, n_max] I32 the experts each token runs, highest weight first
  TensorView moe_weights;  // [k, n_max]     their mixing weights
  TensorView moe_out;      // [d, k * n_max] each routed expert's output, before the weighted sum
  TensorView head_x;  // [d, n_out_max]        rows that want logits, then their final norm
  TensorView logits;  // [n_vocab, n_out_max]  output logits
};

// Floats needed by make_scratch for these sizes.
size_t scratch_floats(const ModelSpec& spec, int32_t n_max, int32_t n_out_max);
// Carves the scratch views out of one buffer of scratch_floats() floats (host or device memory).
Scratch make_scratch(const ModelSpec& spec, int32_t n_max, int32_t n_out_max, float* base,
                     Where where = Where::kHost);

// x[:, :n] = embed(tokens) * embed_scale. tokens: [n] I32 where the Ops computes.
void forward_embed(kernels::Ops& ops, const ModelSpec& spec, const ModelWeights& w, const TensorView& tokens,
                   const Scratch& s, const DebugHook* hook);

// x[:, :n] = embd ([n_embd, n] F32 where the Ops computes): a step whose inputs are embeddings rather than
// token ids (an image's tokens from the vision encoder).
void forward_embed_rows(kernels::Ops& ops, const ModelSpec& spec, const TensorView& embd, const Scratch& s,
                        const DebugHook* hook);

// A step of token rows and embedding rows mixed (requests with images batched with others): row r is
// embed(tokens[r]) where tokens[r] >= 0 and embd[:, r] where it is -1, each run of rows through
// forward_embed or forward_embed_rows' op, so every row gets the same bits it gets in a step of its
// kind alone. tokens [n] I32 and embd [n_embd, n] F32 where the Ops computes (only the -1 rows of embd
// are read).
void forward_embed_mixed(kernels::Ops& ops, const ModelSpec& spec, const ModelWeights& w, const TensorView& tokens,
                         const TensorView& embd, const Scratch& s, const DebugHook* hook);

// x += attention block of `layer` (norm, q/k/v, optional bias and q/k norms, RoPE, K/V into the
// cache cells of the batch, attention, output projection, optional post-norm). kv: that layer's cache.
void forward_attention(kernels::Ops& ops, const ModelSpec& spec, const ModelWeights& w, int32_t layer,
                       const kernels::BatchMeta& batch, const kernels::KvView& kv, const Scratch& s,
                       const DebugHook* hook);

// x += FFN block of `layer` (norm, gate/up, SwiGLU or GeGLU, down, optional post-norm); for a
// mixture-of-experts model, forward_moe.
void forward_ffn(kernels::Ops& ops, const ModelSpec& spec, const ModelWeights& w, int32_t layer,
                 int32_t n_tokens, const Scratch& s, const DebugHook* hook);

// x += mixture-of-experts block of `layer`, as llama.cpp's build_moe_ffn: xn = norm(x), router logits
// W_r xn, softmax, the top k experts and their (renormalised) weights, then per routed expert
// down(silu(gate(xn)) * up(xn)), summed with those weights in routing order. It is forward_moe_router,
// the experts of every slot (the ops of Ops::moe_experts one by one, each intermediate recorded), and
// forward_moe_end.
void forward_moe(kernels::Ops& ops, const ModelSpec& spec, const ModelWeights& w, int32_t layer,
                 int32_t n_tokens, const Scratch& s, const DebugHook* hook);

// The MoE block in parts, for an executor that places the router and groups of experts apart
// (model/sublayer.h: kMoeRouter, kExperts). Groups read s.xn, s.moe_ids and s.moe_weights; each adds
// its share, so the block is router, then the groups in any order and on any Ops (their partial sums
// added), then the end; it differs from forward_moe only in the order of the final sums.
//
// xn = norm(x), the router's logits, then each token's experts and weights (s.moe_ids, s.moe_weights).
void forward_moe_router(kernels::Ops& ops, const ModelSpec& spec, const ModelWeights& w, int32_t layer,
                        int32_t n_tokens, const Scratch& s, const DebugHook* hook);
// Experts [begin, end) of layer L as one group, views into its stacked tensors (same memory).
kernels::ExpertGroup expert_group_views(const ModelSpec& spec, const LayerWeights& L, int32_t begin, int32_t end);
// out (+)= the group's weighted share (Ops::moe_experts) from s.xn and the routing; uses s.gate, s.up and
// s.moe_out as scratch, so out must not be one of them.
void forward_moe_group(kernels::Ops& ops, const ModelSpec& spec, const kernels::ExpertGroup& group,
                       int32_t n_tokens, const Scratch& s, const TensorView& out, bool accumulate);
// The end of the block: x += proj where groups summed into proj (`proj_started`), plus `part` ([d, n], a
// sum of groups computed elsewhere; data == nullptr: none), added to proj first. `part` must not be
// s.proj or s.x.
void forward_moe_end(kernels::Ops& ops, const ModelSpec& spec, int32_t layer, int32_t n_tokens, const Scratch& s,
                     const TensorView& part, bool proj_started, const DebugHook* hook);

// One slice of a layer's FFN (model/sublayer.h, slice_ffn_sublayers): rows [f0, f1) of gate and up, the
// same columns of down. FFN(x) = x + sum over slices of down_s(act(gate_s(xn)) * up_s(xn)), xn = norm(x)
// of the residual before the first slice (gemma3: x + post_norm(sum)), so slices can run anywhere, in
// any order or at once, and differ from the whole FFN only in the order of the final sums.
struct FfnSlice {
  TensorView gate;  // [d, f1 - f0]
  TensorView up;    // [d, f1 - f0]
  TensorView down;  // [f1 - f0, d]; a view into the whole matrix has the whole row as its stride
  bool first = false;
  bool last = false;
};
// Views of rows / columns [f0, f1) of layer L's FFN matrices (same memory; down strided).
FfnSlice ffn_slice_views(const LayerWeights& L, int64_t f0, int64_t f1);

// A slice in a chain of slices run in order by one Ops: the first computes xn = norm(x); then its part
// goes into x (x += part), or with post-norms into proj (the first writes, later ones add, the last
// applies the post-norm and adds proj to x).
void forward_ffn_slice(kernels::Ops& ops, const ModelSpec& spec, const ModelWeights& w, int32_t layer,
                       const FfnSlice& slice, int32_t n_tokens, const Scratch& s, const DebugHook* hook);
// xn = norm(x): what the first slice computes, for an executor that runs the slices elsewhere.
void forward_ffn_norm(kernels::Ops& ops, const ModelSpec& spec, const ModelWeights& w, int32_t layer,
                      int32_t n_tokens, const Scratch& s, const DebugHook* hook);
// out (+)= the slice's part, from s.xn (already normed). Uses s.gate and s.up; out must not be one of them.
void forward_ffn_part(kernels::Ops& ops, const ModelSpec& spec, const FfnSlice& slice, int32_t n_tokens,
                      const Scratch& s, const TensorView& out, bool accumulate);
// The end of a layer whose slices ran on two Ops: part (the other Ops' sum, [d, n]) added to what the
// slices on this Ops left (x, or proj with post-norms, where `proj_started` says whether any did),
// then the post-norm and the residual add. `part` must not be s.proj or s.x.
void forward_ffn_combine(kernels::Ops& ops, const ModelSpec& spec, const ModelWeights& w, int32_t layer,
                         int32_t n_tokens, const Scratch& s, const TensorView& part, bool proj_started,
                         const DebugHook* hook);

// logits[:, i] = output(norm(x[:, rows[i]])) for i < n_rows. rows: host array of step rows.
// The final logit soft-cap (gemma3, when the file sets one) is applied on the host afterwards by
// apply_logit_softcap, so Ops needs no tanh.
void forward_head(kernels::Ops& ops, const ModelSpec& spec, const ModelWeights& w, const int32_t* rows,
                  int32_t n_rows, const Scratch& s, const DebugHook* hook);
void apply_logit_softcap(const ModelSpec& spec, float* logits, int64_t n);

// RoPE and attention parameters of a layer (base, scaling, window, scale), derived from the spec.
kernels::RopeParams layer_rope(const ModelSpec& spec, const ModelWeights& w, int32_t layer);
// (scale is 1 for gemma3, whose forward multiplies q by the attention scale first, as llama.cpp does.)
kernels::AttnParams layer_attn(const ModelSpec& spec, int32_t layer);

// A DebugHook that copies every host intermediate into a map (for tests and backend diffs).
struct Recorder {
  std::map<std::string, std::vector<float>> tensors;  // name -> values, ne0 fastest
  std::map<std::string, std::vector<int64_t>> shapes; // name -> ne[0..3]
  DebugHook hook();
};

}  // namespace ferry::model
