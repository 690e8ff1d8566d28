// SubLayer: the unit of placement. The planner decides where each one runs; its cost functions
// (FLOPs and bytes as functions of new tokens n and context c) are what the cost model consumes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace ferry::gguf {
class ModelFile;
}

namespace ferry::model {

struct ModelSpec;

enum class SubLayerKind : uint8_t { kEmbed, kAttention, kFfn, kMoeRouter, kExperts, kHead };
const char* sublayer_kind_name(SubLayerKind k);  // "embed", "attn", "ffn", "router", "experts", "head"

struct WeightRef {
  std::string name;   // GGUF tensor name, e.g. "blk.7.attn_q.weight"
  DType dtype = DType::F32;
  int64_t rows = 0;   // out features (ne[1]); 1 for vectors
  int64_t cols = 0;   // in features (ne[0])
  uint64_t bytes = 0;
};

struct SubLayer {
  SubLayerKind kind = SubLayerKind::kAttention;
  int32_t layer = -1;          // -1 for embed / head
  int32_t expert_begin = 0;    // experts group [begin, end) for kExperts
  int32_t expert_end = 0;
  // FFN slices (slice_ffn_sublayers): this sub-layer holds rows [ff_begin, ff_end) of ffn_gate / ffn_up
  // and the same columns of ffn_down; ff_end == 0: the whole FFN. Slices of one layer read the same
  // input (the FFN norm of the residual before the first slice) and their outputs are summed, so an
  // executor may run them on different devices at the same time.
  int32_t ff_begin = 0;
  int32_t ff_end = 0;
  int32_t slice = 0;           // index among the layer's slices
  int32_t n_slices = 1;
  std::vector<WeightRef> weights;
  uint64_t weight_bytes = 0;   // sum of weights[].bytes

  // Cost at n new tokens with c cached (context) tokens per sequence. For the head, n is the number
  // of tokens that produce logits (1 per sequence in a prefill chunk).
  double flops(const ModelSpec& spec, int64_t n, int64_t c) const;
  // Bytes of weights read per step (all of them for dense sub-layers; the used share for experts).
  double weight_bytes_read(const ModelSpec& spec, int64_t n) const;
  // Activation bytes entering + leaving (what crosses CPU<->GPU if neighbours are elsewhere).
  double activation_bytes(const ModelSpec& spec, int64_t n) const;
  // KV cache bytes read (attention only): c * kv_dim * 2 (K and V) * 2 bytes (F16).
  double kv_bytes_read(const ModelSpec& spec, int64_t n, int64_t c) const;
  // KV cache bytes this sub-layer owns for a context of c tokens (attention only).
  uint64_t kv_bytes(const ModelSpec& spec, int64_t c) const;
  std::string label() const;  // "blk.7.attn", "head", ...
};

// The sub-layer list of a model in execution order: embed, (attn, ffn) x n_layer, head.
// Binds weight refs from the file's tensor table (validated: dtype, shapes).
// MoE layers (n_expert > 0) give (attn, router, experts group...) instead of (attn, ffn).
struct SubLayerOptions {
  // Experts per kExperts sub-layer (the last group may be smaller). 0: a layer's experts in
  // kAutoExpertGroups groups — enough for the planner to split a layer between the CPU and the GPU, few
  // enough that planning a 48- or 94-layer model stays quick (its search grows with the sub-layer count).
  int32_t experts_per_group = 0;
};
inline constexpr int32_t kAutoExpertGroups = 4;
Expected<std::vector<SubLayer>> build_sublayers(const ModelSpec& spec, const gguf::ModelFile& file,
                                                const SubLayerOptions& options = {});

// `whole` (a dense model's list) with every FFN cut into up to `slices` slices along its hidden width
// (n_ff), at multiples of the FFN matrices' quantization blocks (fewer slices where n_ff has too few
// blocks); slices <= 1 returns the list unchanged. Weight refs keep their tensor names with the sliced
// rows / cols / bytes; the FFN norm goes with the first slice, gemma3's post-FFN norm with the last.
Expected<std::vector<SubLayer>> slice_ffn_sublayers(const ModelSpec& spec, const std::vector<SubLayer>& whole,
                                                    int32_t slices);
inline bool is_ffn_slice(const SubLayer& s) { return s.kind == SubLayerKind::kFfn && s.n_slices > 1; }

// The same list without a file, for planning synthetic shapes: `type_of(name, n_dims)` gives the
// dtype of each tensor the architecture has (n_dims 1 for norms / biases, 2 for matrices, 3 for
// stacked experts). Optional tensors are present as the spec's flags say (qkv_bias, qk_norm, ...).
using TensorTypeFn = std::function<DType(const std::string& name, int n_dims)>;
Expected<std::vector<SubLayer>> build_sublayers(const ModelSpec& spec, const TensorTypeFn& type_of,
                                                const SubLayerOptions& options = {});
// Matrices (and stacked experts) in `matrices`, vectors in F32: what `ferry synth --type T` writes
// when every row length is a multiple of T's block.
TensorTypeFn uniform_tensor_types(DType matrices);

// Sum over the n tokens of a chunk of the cells each one attends to: token i (0-based) sees c + i + 1
// cells, capped by the sliding window (window <= 0: none). What SubLayer::flops counts for attention.
double attended_cells(int64_t n, int64_t c, int64_t window);
}  // namespace ferry::model
