// SubLayer: the unit of placement. The planner decides where each one runs; its cost functions
// (FLOPs and bytes as functions of new tokens n and context c) are what the cost model consumes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"

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
  std::vector<WeightRef> weights;
  uint64_t weight_bytes = 0;   // sum of weights[].bytes

  // Cost at n new tokens with c cached (context) tokens per sequence.
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
}  // namespace ferry::model
