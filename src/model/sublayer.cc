// Sub-layers: the list of placement units of a model (embed, per layer attention + FFN or MoE router +
// expert groups, head) bound to tensor names, dtypes and byte sizes, plus their cost functions.
// The list is built from an open GGUF (shapes and dtypes validated) or, for planning synthetic shapes,
// from a ModelSpec and a dtype per tensor name. Costs are per step: n new tokens, c cached tokens.
#include "model/sublayer.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "format/gguf.h"
#include "model/model_spec.h"

namespace ferry::model {

const char* sublayer_kind_name(SubLayerKind k) {
  switch (k) {
    case SubLayerKind::kEmbed: return "embed";
    case SubLayerKind::kAttention: return "attn";
    case SubLayerKind::kFfn: return "ffn";
    case SubLayerKind::kMoeRouter: return "router";
    case SubLayerKind::kExperts: return "experts";
    case SubLayerKind::kHead: return "head";
  }
  return "?";
}

namespace {

// A tensor the architecture needs: ggml shape [ne0, ne1, ne2] (1 for unused dims).
struct Want {
  std::string name;
  int n_dims = 1;
  int64_t ne[3] = {1, 1, 1};
  bool required = true;
  bool table = false;  // a 2-D F32 table read like vectors (per-expert biases): resolved as one row
};

Want vec(std::string name, int64_t n, bool required = true) {
  Want w;
  w.name = std::move(name);
  w.n_dims = 1;
  w.ne[0] = n;
  w.required = required;
  return w;
}
Want mat(std::string name, int64_t in, int64_t out) {
  Want w;
  w.name = std::move(name);
  w.n_dims = 2;
  w.ne[0] = in;
  w.ne[1] = out;
  return w;
}
// A per-expert bias table [n, n_expert] F32: placed like a norm vector (always on the device in a
// hybrid plan, a few MiB at most), since every expert group reads its columns wherever it runs.
Want table(std::string name, int64_t n, int64_t n_expert) {
  Want w = mat(std::move(name), n, n_expert);
  w.table = true;
  return w;
}
Want experts(std::string name, int64_t in, int64_t out, int64_t n_expert) {
  Want w = mat(std::move(name), in, out);
  w.n_dims = 3;
  w.ne[2] = n_expert;
  return w;
}

std::string shape_str(int n, const int64_t* ne) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

// Resolves a Want to a WeightRef: rows = ne1 * ne2 (out features, stacked experts), cols = ne0.
// Absent optional tensors give nullopt.
using Resolver = std::function<Expected<std::optional<WeightRef>>(const Want&)>;

Status check_dtype(const std::string& name, int n_dims, DType t) {
  const DTypeTraits& tr = traits(t);
  if (n_dims == 1 && t != DType::F32)
    return make_error(ErrorCode::kUnsupported, "tensor '%s': type %s is not supported for a norm or bias (need F32)",
                      name.c_str(), tr.name);
  if (n_dims > 1 && !tr.weight_type)
    return make_error(ErrorCode::kUnsupported, "tensor '%s': type %s is not a supported weight type", name.c_str(),
                      tr.name);
  return Status::ok();
}

Resolver file_resolver(const gguf::ModelFile& file) {
  return [&file](const Want& w) -> Expected<std::optional<WeightRef>> {
    const gguf::TensorInfo* t = file.find_tensor(w.name);
    if (t == nullptr) {
      if (!w.required) return std::optional<WeightRef>();
      return make_error(ErrorCode::kNotFound, "missing tensor '%s' (expected shape %s)", w.name.c_str(),
                        shape_str(w.n_dims, w.ne).c_str());
    }
    const int64_t want[4] = {w.ne[0], w.ne[1], w.ne[2], 1};
    for (int i = 0; i < 4; ++i) {
      if (t->ne[i] != want[i])
        return make_error(ErrorCode::kCorrupt, "tensor '%s': expected shape %s, found %s", w.name.c_str(),
                          shape_str(w.n_dims, w.ne).c_str(), shape_str(std::max(t->n_dims, 1), t->ne).c_str());
    }
    FERRY_RETURN_IF_ERROR(check_dtype(w.name, w.table ? 1 : w.n_dims, t->dtype));
    WeightRef r;
    r.name = w.name;
    r.dtype = t->dtype;
    r.rows = w.table ? 1 : w.ne[1] * w.ne[2];
    r.cols = w.table ? w.ne[0] * w.ne[1] * w.ne[2] : w.ne[0];
    r.bytes = t->nbytes;
    return std::optional<WeightRef>(r);
  };
}

Resolver type_resolver(const TensorTypeFn& type_of) {
  return [&type_of](const Want& w) -> Expected<std::optional<WeightRef>> {
    if (!w.required) return std::optional<WeightRef>();  // synthetic files carry only what the spec says
    const DType t = type_of(w.name, w.table ? 1 : w.n_dims);  // a table is F32 like the vectors
    FERRY_RETURN_IF_ERROR(check_dtype(w.name, w.table ? 1 : w.n_dims, t));
    const DTypeTraits& tr = traits(t);
    if (w.ne[0] % tr.block_elems != 0)
      return make_error(ErrorCode::kInvalidArgument, "tensor '%s': row of %lld elements is not a multiple of %s's block (%d)",
                        w.name.c_str(), static_cast<long long>(w.ne[0]), tr.name, tr.block_elems);
    WeightRef r;
    r.name = w.name;
    r.dtype = t;
    r.rows = w.table ? 1 : w.ne[1] * w.ne[2];
    r.cols = w.table ? w.ne[0] * w.ne[1] * w.ne[2] : w.ne[0];
    r.bytes = row_bytes(t, w.ne[0]) * static_cast<uint64_t>(w.ne[1] * w.ne[2]);
    return std::optional<WeightRef>(r);
  };
}

std::string blk(int il, const char* suffix) { return "blk." + std::to_string(il) + "." + suffix; }

class ListBuilder {
 public:
  explicit ListBuilder(Resolver resolve) : resolve_(std::move(resolve)) {}

  // Adds `w` to `s` if present; a required absent tensor is an error.
  Status add(SubLayer& s, const Want& w) {
    FERRY_ASSIGN_OR_RETURN(std::optional<WeightRef> r, resolve_(w));
    if (r) {
      s.weight_bytes += r->bytes;
      s.weights.push_back(std::move(*r));
    }
    return Status::ok();
  }
  Expected<std::optional<WeightRef>> get(const Want& w) { return resolve_(w); }

 private:
  Resolver resolve_;
};

Status validate_spec(const ModelSpec& s) {
  if (s.n_layer <= 0 || s.n_embd <= 0 || s.n_head <= 0 || s.n_kv_head <= 0 || s.head_dim <= 0 || s.n_vocab <= 0)
    return make_error(ErrorCode::kInvalidArgument,
                      "model spec incomplete (n_layer %d, n_embd %d, n_head %d, n_kv_head %d, head_dim %d, n_vocab %d)",
                      s.n_layer, s.n_embd, s.n_head, s.n_kv_head, s.head_dim, s.n_vocab);
  if (s.n_expert > 0) {
    if (s.n_expert_used <= 0 || s.n_expert_used > s.n_expert || s.n_ff_expert <= 0)
      return make_error(ErrorCode::kInvalidArgument, "MoE spec inconsistent (experts %d, used %d, ff %d)", s.n_expert,
                        s.n_expert_used, s.n_ff_expert);
  } else if (s.n_ff <= 0) {
    return make_error(ErrorCode::kInvalidArgument, "model spec has no FFN width");
  }
  return Status::ok();
}

Expected<std::vector<SubLayer>> build(const ModelSpec& spec, Resolver resolve, const SubLayerOptions& opt) {
  FERRY_RETURN_IF_ERROR(validate_spec(spec));
  if (opt.experts_per_group < 0)
    return make_error(ErrorCode::kInvalidArgument, "experts_per_group must be positive (or 0: automatic)");
  const int32_t per_group = opt.experts_per_group > 0
                                ? opt.experts_per_group
                                : std::max<int32_t>(1, (spec.n_expert + kAutoExpertGroups - 1) / kAutoExpertGroups);
  ListBuilder b(std::move(resolve));
  const int64_t d = spec.n_embd, qd = spec.q_dim(), kvd = spec.kv_dim(), hd = spec.head_dim;
  const int64_t nv = spec.n_vocab;
  std::vector<SubLayer> out;
  out.reserve(2 + static_cast<size_t>(spec.n_layer) * 2);

  SubLayer embed;
  embed.kind = SubLayerKind::kEmbed;
  FERRY_RETURN_IF_ERROR(b.add(embed, mat("token_embd.weight", d, nv)));
  out.push_back(embed);

  // rope_freqs (llama3) is read by every attention sub-layer; it is listed in each (64 floats).
  FERRY_ASSIGN_OR_RETURN(std::optional<WeightRef> rope_freqs,
                         b.get(vec("rope_freqs.weight", (spec.n_rot > 0 ? spec.n_rot : hd) / 2, spec.has_rope_freqs)));

  for (int il = 0; il < spec.n_layer; ++il) {
    SubLayer a;
    a.kind = SubLayerKind::kAttention;
    a.layer = il;
    FERRY_RETURN_IF_ERROR(b.add(a, vec(blk(il, "attn_norm.weight"), d)));
    FERRY_RETURN_IF_ERROR(b.add(a, mat(blk(il, "attn_q.weight"), d, qd)));
    FERRY_RETURN_IF_ERROR(b.add(a, mat(blk(il, "attn_k.weight"), d, kvd)));
    FERRY_RETURN_IF_ERROR(b.add(a, mat(blk(il, "attn_v.weight"), d, kvd)));
    FERRY_RETURN_IF_ERROR(b.add(a, mat(blk(il, "attn_output.weight"), qd, d)));
    FERRY_RETURN_IF_ERROR(b.add(a, vec(blk(il, "attn_q.bias"), qd, spec.qkv_bias)));
    FERRY_RETURN_IF_ERROR(b.add(a, vec(blk(il, "attn_k.bias"), kvd, spec.qkv_bias)));
    FERRY_RETURN_IF_ERROR(b.add(a, vec(blk(il, "attn_v.bias"), kvd, spec.qkv_bias)));
    FERRY_RETURN_IF_ERROR(b.add(a, vec(blk(il, "attn_output.bias"), d, false)));
    if (spec.qk_norm) {
      FERRY_RETURN_IF_ERROR(b.add(a, vec(blk(il, "attn_q_norm.weight"), hd)));
      FERRY_RETURN_IF_ERROR(b.add(a, vec(blk(il, "attn_k_norm.weight"), hd)));
    }
    if (spec.post_norms) FERRY_RETURN_IF_ERROR(b.add(a, vec(blk(il, "post_attention_norm.weight"), d)));
    if (spec.attn_sinks) FERRY_RETURN_IF_ERROR(b.add(a, vec(blk(il, "attn_sinks.weight"), spec.n_head)));
    if (rope_freqs) {
      a.weights.push_back(*rope_freqs);
      a.weight_bytes += rope_freqs->bytes;
    }
    out.push_back(std::move(a));

    if (spec.n_expert == 0) {
      SubLayer f;
      f.kind = SubLayerKind::kFfn;
      f.layer = il;
      FERRY_RETURN_IF_ERROR(b.add(f, vec(blk(il, "ffn_norm.weight"), d)));
      FERRY_RETURN_IF_ERROR(b.add(f, mat(blk(il, "ffn_gate.weight"), d, spec.n_ff)));
      FERRY_RETURN_IF_ERROR(b.add(f, mat(blk(il, "ffn_up.weight"), d, spec.n_ff)));
      FERRY_RETURN_IF_ERROR(b.add(f, mat(blk(il, "ffn_down.weight"), spec.n_ff, d)));
      if (spec.post_norms) FERRY_RETURN_IF_ERROR(b.add(f, vec(blk(il, "post_ffw_norm.weight"), d)));
      out.push_back(std::move(f));
      continue;
    }

    // MoE: the router (norm + gate logits) then the experts, split into groups so a plan can place
    // part of a layer's experts. Stacked tensors [in, out, n_expert]; a group holds a share of each.
    SubLayer r;
    r.kind = SubLayerKind::kMoeRouter;
    r.layer = il;
    // gpt-oss stores the norm before its experts as post_attention_norm.
    FERRY_RETURN_IF_ERROR(
        b.add(r, vec(blk(il, spec.arch == Arch::kGptOss ? "post_attention_norm.weight" : "ffn_norm.weight"), d)));
    FERRY_RETURN_IF_ERROR(b.add(r, mat(blk(il, "ffn_gate_inp.weight"), d, spec.n_expert)));
    if (spec.expert_biases) {
      // The router's bias, and the experts' bias tables: small, listed with the router as vectors (rows 1),
      // so a hybrid plan keeps them on the device with the norms and every group reads its columns there.
      FERRY_RETURN_IF_ERROR(b.add(r, vec(blk(il, "ffn_gate_inp.bias"), spec.n_expert)));
      FERRY_RETURN_IF_ERROR(b.add(r, table(blk(il, "ffn_gate_exps.bias"), spec.n_ff_expert, spec.n_expert)));
      FERRY_RETURN_IF_ERROR(b.add(r, table(blk(il, "ffn_up_exps.bias"), spec.n_ff_expert, spec.n_expert)));
      FERRY_RETURN_IF_ERROR(b.add(r, table(blk(il, "ffn_down_exps.bias"), d, spec.n_expert)));
    }
    out.push_back(std::move(r));
    const int64_t ne = spec.n_expert, ffe = spec.n_ff_expert;
    std::vector<WeightRef> stacked;
    for (const Want& w : {experts(blk(il, "ffn_gate_exps.weight"), d, ffe, ne),
                          experts(blk(il, "ffn_up_exps.weight"), d, ffe, ne),
                          experts(blk(il, "ffn_down_exps.weight"), ffe, d, ne)}) {
      FERRY_ASSIGN_OR_RETURN(std::optional<WeightRef> ref, b.get(w));
      stacked.push_back(*ref);  // required => present
    }
    for (int32_t e0 = 0; e0 < spec.n_expert; e0 += per_group) {
      const int32_t e1 = std::min<int32_t>(spec.n_expert, e0 + per_group);
      SubLayer g;
      g.kind = SubLayerKind::kExperts;
      g.layer = il;
      g.expert_begin = e0;
      g.expert_end = e1;
      for (const WeightRef& full : stacked) {
        WeightRef part = full;
        const int64_t per_expert_rows = full.rows / ne;
        part.rows = per_expert_rows * (e1 - e0);
        part.bytes = full.bytes / static_cast<uint64_t>(ne) * static_cast<uint64_t>(e1 - e0);
        g.weight_bytes += part.bytes;
        g.weights.push_back(std::move(part));
      }
      out.push_back(std::move(g));
    }
  }

  SubLayer head;
  head.kind = SubLayerKind::kHead;
  FERRY_RETURN_IF_ERROR(b.add(head, vec("output_norm.weight", d)));
  FERRY_RETURN_IF_ERROR(b.add(head, mat(spec.tied_output ? "token_embd.weight" : "output.weight", d, nv)));
  out.push_back(std::move(head));
  return out;
}

bool is_matrix(const WeightRef& w) { return w.rows > 1; }

// Expected share of a group of experts touched by n tokens (each token picks `used` of `total`).
double touched_share(const ModelSpec& spec, int64_t n) {
  const double p_one = static_cast<double>(spec.n_expert_used) / spec.n_expert;
  return 1.0 - std::pow(1.0 - p_one, static_cast<double>(n));
}

}  // namespace

double attended_cells(int64_t n, int64_t c, int64_t window) {
  const double nn = static_cast<double>(n), cc = static_cast<double>(c);
  if (window <= 0) return nn * cc + nn * (nn + 1) / 2;
  const int64_t k = std::clamp<int64_t>(window - c, 0, n);  // tokens still below the window
  const double kk = static_cast<double>(k);
  return kk * cc + kk * (kk + 1) / 2 + (nn - kk) * static_cast<double>(window);
}

Expected<std::vector<SubLayer>> build_sublayers(const ModelSpec& spec, const gguf::ModelFile& file,
                                                const SubLayerOptions& options) {
  return build(spec, file_resolver(file), options);
}

Expected<std::vector<SubLayer>> build_sublayers(const ModelSpec& spec, const TensorTypeFn& type_of,
                                                const SubLayerOptions& options) {
  return build(spec, type_resolver(type_of), options);
}

Expected<std::vector<SubLayer>> slice_ffn_sublayers(const ModelSpec& spec, const std::vector<SubLayer>& whole,
                                                    int32_t slices) {
  if (slices <= 1) return whole;
  if (spec.n_expert > 0) return make_error(ErrorCode::kUnsupported, "FFN slices of a mixture-of-experts model");
  std::vector<SubLayer> out;
  out.reserve(whole.size() + static_cast<size_t>(spec.n_layer) * (slices - 1));
  for (const SubLayer& f : whole) {
    if (f.kind != SubLayerKind::kFfn) {
      out.push_back(f);
      continue;
    }
    if (f.n_slices > 1) return make_error(ErrorCode::kInvalidArgument, "%s is already a slice", f.label().c_str());
    // Slice boundaries at whole blocks of every matrix's rows along n_ff (gate / up rows have no blocks
    // along n_ff; down's rows are n_ff long).
    int64_t block = 1;
    auto is_down = [](const WeightRef& w) { return w.name.find("ffn_down") != std::string::npos; };
    for (const WeightRef& w : f.weights)
      if (is_matrix(w) && is_down(w)) block = std::max<int64_t>(block, traits(w.dtype).block_elems);
    const int64_t units = spec.n_ff / block;
    if (units * block != spec.n_ff)
      return make_error(ErrorCode::kInvalidArgument, "blk.%d: n_ff %lld is not a multiple of its block (%lld)", f.layer,
                        static_cast<long long>(spec.n_ff), static_cast<long long>(block));
    const int64_t n = std::min<int64_t>(slices, units);
    for (int64_t j = 0; j < n; ++j) {
      SubLayer p;
      p.kind = SubLayerKind::kFfn;
      p.layer = f.layer;
      p.ff_begin = static_cast<int32_t>(units * j / n * block);
      p.ff_end = static_cast<int32_t>(units * (j + 1) / n * block);
      p.slice = static_cast<int32_t>(j);
      p.n_slices = static_cast<int32_t>(n);
      const int64_t width = p.ff_end - p.ff_begin;
      for (const WeightRef& w : f.weights) {
        WeightRef r = w;
        if (!is_matrix(w)) {
          const bool post = w.name.find("post_ffw_norm") != std::string::npos;
          if (post ? j != n - 1 : j != 0) continue;
        } else if (!is_down(w)) {  // gate / up: rows [ff_begin, ff_end)
          r.rows = width;
          r.bytes = row_bytes(w.dtype, w.cols) * static_cast<uint64_t>(width);
        } else {  // down: columns [ff_begin, ff_end) of every row
          r.cols = width;
          r.bytes = row_bytes(w.dtype, width) * static_cast<uint64_t>(w.rows);
        }
        p.weight_bytes += r.bytes;
        p.weights.push_back(std::move(r));
      }
      out.push_back(std::move(p));
    }
  }
  return out;
}

TensorTypeFn uniform_tensor_types(DType matrices) {
  return [matrices](const std::string&, int n_dims) { return n_dims == 1 ? DType::F32 : matrices; };
}

double SubLayer::flops(const ModelSpec& spec, int64_t n, int64_t c) const {
  double mm = 0;  // 2 * rows * cols per matrix per token
  for (const WeightRef& w : weights)
    if (is_matrix(w)) mm += 2.0 * static_cast<double>(w.rows) * static_cast<double>(w.cols);
  const double nn = static_cast<double>(n);
  switch (kind) {
    case SubLayerKind::kEmbed: return 0;  // a gather
    case SubLayerKind::kAttention: {
      // QK^T and AV: 2 * 2 * d_head flops per head per attended cell.
      const int64_t window = spec.is_swa_layer(layer) ? spec.sliding_window : 0;
      return mm * nn + 4.0 * spec.head_dim * spec.n_head * attended_cells(n, c, window);
    }
    case SubLayerKind::kExperts:
      // Each token runs n_expert_used of n_expert experts: the group's expected share.
      return mm * nn * spec.n_expert_used / spec.n_expert;
    default: return mm * nn;
  }
}

double SubLayer::weight_bytes_read(const ModelSpec& spec, int64_t n) const {
  switch (kind) {
    case SubLayerKind::kEmbed: {
      // Only the n gathered rows of the table.
      double b = 0;
      for (const WeightRef& w : weights) b += static_cast<double>(row_bytes(w.dtype, w.cols)) * static_cast<double>(n);
      return b;
    }
    case SubLayerKind::kExperts: return static_cast<double>(weight_bytes) * touched_share(spec, n);
    default: return static_cast<double>(weight_bytes);
  }
}

double SubLayer::activation_bytes(const ModelSpec& spec, int64_t n) const {
  const double x = 4.0 * spec.n_embd * static_cast<double>(n);  // [d, n] F32 hidden state
  switch (kind) {
    case SubLayerKind::kEmbed: return 4.0 * static_cast<double>(n) + x;         // ids in, hidden out
    case SubLayerKind::kHead: return x + 4.0 * spec.n_vocab * static_cast<double>(n);  // logits out
    default: return 2 * x;
  }
}

double SubLayer::kv_bytes_read(const ModelSpec& spec, int64_t n, int64_t c) const {
  if (kind != SubLayerKind::kAttention) return 0;
  int64_t cells = c + n;
  if (spec.is_swa_layer(layer)) cells = std::min<int64_t>(cells, spec.sliding_window + n);
  return static_cast<double>(cells) * spec.kv_dim() * 2.0 * 2.0;  // K and V, F16
}

uint64_t SubLayer::kv_bytes(const ModelSpec& spec, int64_t c) const {
  if (kind != SubLayerKind::kAttention) return 0;
  // Every layer holds all c cells (the cache's cells are shared by all layers, sliding window or not).
  return static_cast<uint64_t>(c) * static_cast<uint64_t>(spec.kv_dim()) * 2u * 2u;
}

std::string SubLayer::label() const {
  switch (kind) {
    case SubLayerKind::kEmbed: return "embed";
    case SubLayerKind::kHead: return "head";
    case SubLayerKind::kExperts:
      return "blk." + std::to_string(layer) + ".experts[" + std::to_string(expert_begin) + ":" +
             std::to_string(expert_end) + ")";
    case SubLayerKind::kFfn:
      if (n_slices > 1)
        return "blk." + std::to_string(layer) + ".ffn[" + std::to_string(ff_begin) + ":" + std::to_string(ff_end) + ")";
      return "blk." + std::to_string(layer) + ".ffn";
    default: return "blk." + std::to_string(layer) + "." + sublayer_kind_name(kind);
  }
}

}  // namespace ferry::model
