// ferry inspect: what a GGUF file holds — metadata (long arrays abbreviated), tensors (name, type,
// shape, bytes), totals by dtype, the architecture's hyperparameters when ferry supports it, and the
// sub-layer table (kind, layer, bytes) the planner places; a mixture-of-experts layer is a router and its
// experts in groups of 8 (--per-expert: one row per expert), each with its bytes. --json prints the same as
// one JSON object.
// Only the file is read (no weights are touched beyond the table), so it is fast on any size.
#include <cinttypes>
#include <cstdio>
#include <exception>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli.h"
#include "format/gguf.h"
#include "model/model_spec.h"
#include "model/vision/vision_model.h"
#include "model/sublayer.h"
#include "tensor/dtype.h"

namespace {

using nlohmann::json;
using ferry::gguf::Value;
using ferry::gguf::ValueType;

constexpr size_t kMaxArrayItems = 8;  // arrays longer than this are abbreviated

json value_to_json(const Value& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.v)) return *u;
  if (const auto* i = std::get_if<int64_t>(&v.v)) return *i;
  if (const auto* d = std::get_if<double>(&v.v)) return *d;
  if (const auto* b = std::get_if<bool>(&v.v)) return *b;
  if (const auto* s = std::get_if<std::string>(&v.v)) return *s;
  if (const auto* a = v.as_array()) {
    json items = json::array();
    for (size_t k = 0; k < a->items.size() && k < kMaxArrayItems; ++k) items.push_back(value_to_json(a->items[k]));
    if (a->items.size() <= kMaxArrayItems) return items;
    // Abbreviated: the element type, the count and the first items.
    return json{{"array_of", ferry::gguf::value_type_name(a->elem_type)}, {"count", a->items.size()},
                {"first", items}};
  }
  return nullptr;
}

std::string shape_string(const ferry::gguf::TensorInfo& t) {
  std::string s = "[";
  for (int32_t d = 0; d < t.n_dims; ++d) {
    if (d) s += ", ";
    s += std::to_string(t.ne[d]);
  }
  return s + "]";
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

json spec_to_json(const ferry::model::ModelSpec& s) {
  return json{{"arch", ferry::model::arch_name(s.arch)},
              {"name", s.name},
              {"n_layer", s.n_layer},
              {"n_embd", s.n_embd},
              {"n_head", s.n_head},
              {"n_kv_head", s.n_kv_head},
              {"head_dim", s.head_dim},
              {"n_ff", s.n_ff},
              {"n_vocab", s.n_vocab},
              {"n_ctx_train", s.n_ctx_train},
              {"rms_eps", s.rms_eps},
              {"rope_base", s.rope_base},
              {"rope_neox", s.rope_neox},
              {"sliding_window", s.sliding_window},
              {"tied_output", s.tied_output},
              {"n_expert", s.n_expert},
              {"n_expert_used", s.n_expert_used},
              {"n_ff_expert", s.n_ff_expert}};
}

ferry::model::SubLayerOptions sublayer_options(bool per_expert) {
  ferry::model::SubLayerOptions o;
  if (per_expert) o.experts_per_group = 1;
  return o;
}

// Bytes of one expert (its gate, up and down) of a layer, from the first expert group of `subs`.
uint64_t expert_bytes(const std::vector<ferry::model::SubLayer>& subs) {
  for (const auto& sl : subs)
    if (sl.kind == ferry::model::SubLayerKind::kExperts)
      return sl.weight_bytes / static_cast<uint64_t>(sl.expert_end - sl.expert_begin);
  return 0;
}

// The planner's unit table: one row per sub-layer, in execution order.
void print_sublayers(const ferry::model::ModelSpec& spec, const ferry::gguf::ModelFile& f, bool per_expert) {
  auto subs = ferry::model::build_sublayers(spec, f, sublayer_options(per_expert));
  if (!subs) {
    std::printf("\nsub-layers: %s\n", subs.status().message().c_str());
    return;
  }
  std::printf("\nsub-layers (%zu):\n", subs->size());
  std::printf("  %-20s %-8s %6s %8s %14s\n", "label", "kind", "layer", "weights", "bytes");
  uint64_t total = 0;
  for (const auto& sl : *subs) {
    std::printf("  %-20s %-8s %6d %8zu %14" PRIu64 " (%s)\n", sl.label().c_str(),
                ferry::model::sublayer_kind_name(sl.kind), sl.layer, sl.weights.size(), sl.weight_bytes,
                human_bytes(static_cast<double>(sl.weight_bytes)).c_str());
    total += sl.weight_bytes;
  }
  std::printf("  %-20s %-8s %6s %8s %14" PRIu64 " (%s)\n", "sum", "", "", "", total,
              human_bytes(static_cast<double>(total)).c_str());
  if (spec.tied_output) std::printf("  (tied output: token_embd.weight is counted in both embed and head)\n");
  if (spec.n_expert > 0) {
    const uint64_t e = expert_bytes(*subs);
    std::printf("  (experts: %d per layer, %s each; a token runs %d of them: %s of expert weights per layer)\n",
                spec.n_expert, human_bytes(static_cast<double>(e)).c_str(), spec.n_expert_used,
                human_bytes(static_cast<double>(e) * spec.n_expert_used).c_str());
  }
}

int inspect(const std::string& path, bool as_json, bool per_expert) {
  auto opened = ferry::gguf::ModelFile::open(path);
  if (!opened) return ferry::cli::report(opened.status());
  const ferry::gguf::ModelFile& f = **opened;

  // Totals by dtype, in dtype-id order.
  struct Total {
    int64_t count = 0;
    uint64_t bytes = 0;
  };
  std::map<uint32_t, Total> totals;
  uint64_t total_bytes = 0;
  for (const auto& t : f.tensors()) {
    Total& tot = totals[static_cast<uint32_t>(t.dtype)];
    ++tot.count;
    tot.bytes += t.nbytes;
    total_bytes += t.nbytes;
  }
  auto spec = ferry::model::ModelSpec::from_gguf(f);

  if (as_json) {
    json j;
    j["path"] = f.path();
    j["version"] = f.version();
    j["n_splits"] = f.n_splits();
    j["file_bytes"] = f.file_bytes();
    j["alignment"] = f.alignment();
    json md = json::object();
    for (const auto& [key, value] : f.metadata()) md[key] = value_to_json(value);
    j["metadata"] = md;
    json tensors = json::array();
    for (const auto& t : f.tensors()) {
      json shape = json::array();
      for (int32_t d = 0; d < t.n_dims; ++d) shape.push_back(t.ne[d]);
      tensors.push_back(json{{"name", t.name}, {"type", ferry::dtype_name(t.dtype)}, {"shape", shape},
                             {"bytes", t.nbytes}, {"offset", t.file_offset}, {"split", t.split}});
    }
    j["tensors"] = tensors;
    json by_type = json::object();
    for (const auto& [id, tot] : totals)
      by_type[ferry::dtype_name(static_cast<ferry::DType>(id))] = json{{"tensors", tot.count}, {"bytes", tot.bytes}};
    j["totals"] = json{{"tensors", f.tensors().size()}, {"bytes", total_bytes}, {"by_type", by_type}};
    if (spec) {
      j["spec"] = spec_to_json(*spec);
      auto subs = ferry::model::build_sublayers(*spec, f, sublayer_options(per_expert));
      if (subs) {
        if (spec->n_expert > 0) j["spec"]["expert_bytes"] = expert_bytes(*subs);
        json table = json::array();
        for (const auto& sl : *subs) {
          json row{{"label", sl.label()}, {"kind", ferry::model::sublayer_kind_name(sl.kind)}, {"layer", sl.layer},
                   {"bytes", sl.weight_bytes}, {"n_weights", sl.weights.size()}};
          if (sl.kind == ferry::model::SubLayerKind::kExperts)
            row["experts"] = json::array({sl.expert_begin, sl.expert_end});
          table.push_back(row);
        }
        j["sublayers"] = table;
      } else {
        j["sublayers_error"] = subs.status().message();
      }
    } else {
      j["spec_error"] = spec.status().message();
    }
    std::printf("%s\n", j.dump(1, ' ', false, json::error_handler_t::replace).c_str());
    return 0;
  }

  std::printf("file: %s\n", f.path().c_str());
  std::printf("  GGUF v%u, %u split(s), %s, alignment %zu\n", f.version(), f.n_splits(),
              human_bytes(static_cast<double>(f.file_bytes())).c_str(), f.alignment());
  std::printf("\nmetadata (%zu keys):\n", f.metadata().size());
  for (const auto& [key, value] : f.metadata())
    std::printf("  %-44s %-6s %s\n", key.c_str(), ferry::gguf::value_type_name(value.type),
                value.to_string(kMaxArrayItems).c_str());

  std::printf("\ntensors (%zu):\n", f.tensors().size());
  std::printf("  %-40s %-6s %-22s %12s\n", "name", "type", "shape", "bytes");
  for (const auto& t : f.tensors())
    std::printf("  %-40s %-6s %-22s %12zu\n", t.name.c_str(), ferry::dtype_name(t.dtype), shape_string(t).c_str(),
                t.nbytes);

  std::printf("\ntotals by type:\n");
  for (const auto& [id, tot] : totals)
    std::printf("  %-6s %5" PRId64 " tensors %14" PRIu64 " bytes (%s)\n", ferry::dtype_name(static_cast<ferry::DType>(id)),
                tot.count, tot.bytes, human_bytes(static_cast<double>(tot.bytes)).c_str());
  std::printf("  %-6s %5zu tensors %14" PRIu64 " bytes (%s)\n", "all", f.tensors().size(), total_bytes,
              human_bytes(static_cast<double>(total_bytes)).c_str());

  if (spec) {
    const auto& s = *spec;
    std::printf("\nmodel: %s (%s), %d layers, d=%d, heads %d/%d kv, head dim %d, ffn %d, vocab %d, ctx %d%s\n",
                s.name.c_str(), ferry::model::arch_name(s.arch), s.n_layer, s.n_embd, s.n_head, s.n_kv_head,
                s.head_dim, s.n_ff, s.n_vocab, s.n_ctx_train, s.tied_output ? ", tied output" : "");
    if (s.n_expert > 0)
      std::printf("  mixture of experts: %d experts of width %d per layer, %d per token\n", s.n_expert, s.n_ff_expert,
                  s.n_expert_used);
    print_sublayers(s, f, per_expert);
  } else if (auto vision = ferry::model::VisionSpec::from_gguf(f); vision) {
    const auto& v = *vision;
    std::printf("\nvision tower (mmproj, %s): %d blocks, d=%d, heads %d, ffn %d, patch %d px, full attention every "
                "%d blocks, output width %d; use with `ferry run --mmproj`\n",
                v.projector.c_str(), v.n_layer, v.n_embd, v.n_head, v.n_ff, v.patch_size, v.n_wa_pattern, v.proj_dim);
  } else {
    std::printf("\nmodel: not runnable by ferry: %s\n", spec.status().message().c_str());
  }
  return 0;
}

}  // namespace

int cmd_inspect(int argc, char** argv) {
  std::string path;
  bool as_json = false;
  CLI::App app{"Print a GGUF file's metadata, tensors and sub-layers.", "ferry inspect"};
  app.add_option("file", path, "GGUF file")->required();
  app.add_flag("--json", as_json, "print one JSON object");
  bool per_expert = false;
  app.add_flag("--per-expert", per_expert, "mixture of experts: one sub-layer row per expert (default: groups of 8)");
  int code = 0;
  if (!ferry::cli::parse(app, argc, argv, &code)) return code;
  try {
    return inspect(path, as_json, per_expert);
  } catch (const std::exception& e) {
    return ferry::cli::fail(std::string("unexpected failure: ") + e.what());
  }
}
