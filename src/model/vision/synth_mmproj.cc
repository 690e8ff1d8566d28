// synth_write_mmproj (see synth_mmproj.h).
#include "model/vision/synth_mmproj.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "format/gguf.h"

namespace ferry::model {

Expected<MmprojShape> mmproj_shape(const SynthPreset& p) {
  if (p.arch != Arch::kQwen2VL)
    return make_error(ErrorCode::kInvalidArgument, "preset '%s' has no vision tower (--mmproj-out needs a qwen2vl preset)",
                      p.name);
  if (p.tiny) return MmprojShape{4, 64, 4, 128, 14, 2, 560};
  return MmprojShape{32, 1280, 16, 3420, 14, 8, 560};  // Qwen2.5-VL-3B / 7B vision_config
}

Expected<SynthResult> synth_write_mmproj(const SynthOptions& opt, DType type, const std::string& path) {
  const SynthPreset* p = find_synth_preset(opt.preset);
  if (p == nullptr)
    return make_error(ErrorCode::kInvalidArgument, "unknown preset '%s' (see `ferry synth --list`)", opt.preset.c_str());
  FERRY_ASSIGN_OR_RETURN(const MmprojShape s, mmproj_shape(*p));
  const DTypeTraits* tr = dtype_traits(static_cast<uint32_t>(type));
  if (tr == nullptr || !tr->weight_type)
    return make_error(ErrorCode::kInvalidArgument, "type %s is not a weight type", tr ? tr->name : "?");

  const int64_t d = s.n_embd, ff = s.n_ff, ps = s.patch_size, m = 4 * d, proj = p->n_embd;
  std::vector<SynthRandom> ts;
  auto matrix = [&](std::string name, int64_t in, int64_t out) {
    const DType t = in % traits(type).block_elems == 0 ? type : DType::F16;
    ts.push_back({{std::move(name), t, {in, out}, type}, 0.f, 1.0f / std::sqrt(static_cast<float>(in))});
  };
  auto vec = [&](std::string name, int64_t n, bool norm) {
    ts.push_back({{std::move(name), DType::F32, {n}, DType::F32}, norm ? 1.f : 0.f, norm ? 0.1f : 0.05f});
  };
  const DType conv = type == DType::F32 ? DType::F32 : DType::F16;
  const float conv_sd = 1.0f / std::sqrt(static_cast<float>(3 * ps * ps));
  for (const char* name : {"v.patch_embd.weight", "v.patch_embd.weight.1"})
    ts.push_back({{name, conv, {ps, ps, 3, d}, conv}, 0.f, conv_sd});
  for (int32_t il = 0; il < s.n_layer; ++il) {
    const std::string b = "v.blk." + std::to_string(il) + ".";
    vec(b + "ln1.weight", d, true);
    for (const char* x : {"attn_q", "attn_k", "attn_v"}) {
      matrix(b + x + ".weight", d, d);
      vec(b + x + ".bias", d, false);
    }
    matrix(b + "attn_out.weight", d, d);
    vec(b + "attn_out.bias", d, false);
    vec(b + "ln2.weight", d, true);
    matrix(b + "ffn_gate.weight", d, ff);
    vec(b + "ffn_gate.bias", ff, false);
    matrix(b + "ffn_up.weight", d, ff);
    vec(b + "ffn_up.bias", ff, false);
    matrix(b + "ffn_down.weight", ff, d);
    vec(b + "ffn_down.bias", d, false);
  }
  vec("v.post_ln.weight", d, true);
  matrix("mm.0.weight", m, m);
  vec("mm.0.bias", m, false);
  matrix("mm.2.weight", m, proj);
  vec("mm.2.bias", proj, false);

  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<gguf::Writer> w, gguf::Writer::create(path));
  w->add_string("general.architecture", "clip");
  w->add_string("general.type", "mmproj");
  w->add_string("general.name", std::string("ferry synth ") + p->name + " mmproj");
  w->add_string("general.description", std::string("random weights, vision tower of ") + p->description +
                                            ", seed " + std::to_string(opt.seed));
  w->add_u32("general.file_type", type == DType::F32 ? 0 : type == DType::F16 ? 1 : 7);
  w->add_bool("clip.has_vision_encoder", true);
  w->add_string("clip.projector_type", "qwen2.5vl_merger");
  w->add_bool("clip.use_silu", true);
  w->add_u32("clip.vision.projection_dim", static_cast<uint32_t>(proj));
  w->add_u32("clip.vision.image_size", static_cast<uint32_t>(s.image_size));
  w->add_u32("clip.vision.patch_size", static_cast<uint32_t>(ps));
  w->add_u32("clip.vision.embedding_length", static_cast<uint32_t>(d));
  w->add_u32("clip.vision.feed_forward_length", static_cast<uint32_t>(ff));
  w->add_u32("clip.vision.block_count", static_cast<uint32_t>(s.n_layer));
  w->add_u32("clip.vision.attention.head_count", static_cast<uint32_t>(s.n_head));
  w->add_f32_array("clip.vision.image_mean", {0.48145466f, 0.4578275f, 0.40821073f});
  w->add_f32_array("clip.vision.image_std", {0.26862954f, 0.26130258f, 0.27577711f});
  w->add_u32("clip.vision.n_wa_pattern", static_cast<uint32_t>(s.n_wa_pattern));
  w->add_f32("clip.vision.attention.layer_norm_epsilon", 1e-6f);

  SynthResult res;
  SynthProgress prog;
  for (const SynthRandom& r : ts) {
    FERRY_RETURN_IF_ERROR(w->add_tensor_info(r.t.name, r.t.type, r.t.ne));
    int64_t n = 1;
    for (int64_t x : r.t.ne) n *= x;
    prog.bytes_total += row_bytes(r.t.type, n);
    res.n_params += n;
  }
  res.n_tensors = ts.size();
  res.data_bytes = prog.bytes_total;
  FERRY_RETURN_IF_ERROR(w->begin_data());
  FERRY_RETURN_IF_ERROR(synth_write_random(*w, ts, opt.seed ^ 0x6d6d70726f6aull, opt.n_threads > 0 ? opt.n_threads : 4,
                                           prog, opt));
  FERRY_RETURN_IF_ERROR(w->finish());
  if (type != DType::F16 && type != DType::F32 && ff % traits(type).block_elems != 0)
    res.notes.push_back("v.blk.*.ffn_down.weight: row length " + std::to_string(ff) + " is not a multiple of " +
                        std::to_string(traits(type).block_elems) + "; stored as F16");
  return res;
}

}  // namespace ferry::model
