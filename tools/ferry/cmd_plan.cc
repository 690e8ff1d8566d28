// ferry plan: the execution plan for a VRAM budget — per token tier the strategy (gpu-stream, static,
// dynamic), where every sub-layer runs, the VRAM breakdown, predicted TTFT / tok/s and why the
// runner-up lost. The model is a GGUF file (-m) or, without a file, a synth preset (--preset, --type)
// so real-size shapes can be planned anywhere. The profile is --profile FILE, else this machine's
// cached profile, else a quick profile measured now.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include "cli.h"
#include "format/gguf.h"
#include "model/model_spec.h"
#include "model/sublayer.h"
#include "model/synth.h"
#include "plan/planner.h"
#include "profile_support.h"
#include "runtime/budget.h"

namespace {

using namespace ferry;

// The spec a synth preset's file would give (shapes and the flags that add tensors); enough to plan.
model::ModelSpec spec_from_preset(const model::SynthPreset& p) {
  model::ModelSpec s;
  s.arch = p.arch;
  s.name = p.name;
  s.n_layer = p.n_layer;
  s.n_embd = p.n_embd;
  s.n_head = p.n_head;
  s.n_kv_head = p.n_kv_head;
  s.head_dim = p.head_dim;
  s.n_rot = p.head_dim;
  s.n_ff = p.n_ff;
  s.n_vocab = p.n_vocab;
  s.n_ctx_train = p.n_ctx_train;
  s.rms_eps = p.rms_eps;
  s.rope_base = p.rope_base;
  s.tied_output = p.tied_output;
  s.qkv_bias = p.qkv_bias;
  s.has_rope_freqs = p.llama3_rope_factor > 0;
  s.sliding_window = p.sliding_window;
  // Experts as ModelSpec::from_gguf reads them from the keys synth writes (qwen3moe's width defaults to
  // n_ff / n_expert_used there).
  s.n_expert = p.n_expert;
  s.n_expert_used = p.n_expert_used;
  s.n_ff_expert = p.n_ff_expert > 0 || p.n_expert == 0 ? p.n_ff_expert : p.n_ff / std::max(1, p.n_expert_used);
  s.expert_weights_norm = p.n_expert > 0 && p.arch != model::Arch::kGptOss;
  switch (p.arch) {
    case model::Arch::kQwen3:
    case model::Arch::kQwen3Moe: s.qk_norm = true; break;
    case model::Arch::kGptOss:
      s.qkv_bias = true;
      s.attn_sinks = true;
      s.expert_biases = true;
      s.expert_softmax_selected = true;
      s.swiglu_oai = true;
      s.swa_period = p.sliding_window > 0 ? 2 : 0;
      break;
    case model::Arch::kGemma3:
      s.qk_norm = true;
      s.post_norms = true;
      s.gelu = true;
      s.swa_period = p.sliding_window > 0 ? 6 : 0;
      break;
    default: break;
  }
  return s;
}

struct Model {
  model::ModelSpec spec;
  std::vector<model::SubLayer> subs;
  std::unique_ptr<gguf::ModelFile> file;  // keeps the mmap alive (sub-layers hold names only)
};

Expected<Model> load_model(const std::string& path, const std::string& preset, const std::string& type) {
  Model m;
  if (!preset.empty()) {
    const model::SynthPreset* p = model::find_synth_preset(preset);
    if (!p) return make_error(ErrorCode::kInvalidArgument, "unknown preset '%s' (see `ferry synth --list`)", preset.c_str());
    const std::optional<DType> t = dtype_from_name(type);
    if (!t) return make_error(ErrorCode::kInvalidArgument, "unknown type '%s'", type.c_str());
    FERRY_ASSIGN_OR_RETURN(std::vector<model::SynthTensor> tensors, model::synth_tensors(*p, *t));
    std::map<std::string, DType> types;
    for (const auto& st : tensors) types[st.name] = st.type;
    m.spec = spec_from_preset(*p);
    m.spec.name = std::string(p->name) + " " + dtype_name(*t);
    auto type_of = [&types, t](const std::string& name, int n_dims) {
      auto it = types.find(name);
      return it != types.end() ? it->second : (n_dims == 1 ? DType::F32 : *t);
    };
    FERRY_ASSIGN_OR_RETURN(m.subs, model::build_sublayers(m.spec, type_of));
    return m;
  }
  FERRY_ASSIGN_OR_RETURN(m.file, gguf::ModelFile::open(path));
  FERRY_ASSIGN_OR_RETURN(m.spec, model::ModelSpec::from_gguf(*m.file));
  if (m.spec.name.empty()) {
    const size_t slash = path.rfind('/');
    m.spec.name = slash == std::string::npos ? path : path.substr(slash + 1);
  }
  FERRY_ASSIGN_OR_RETURN(m.subs, model::build_sublayers(m.spec, *m.file));
  return m;
}

}  // namespace

int cmd_plan(int argc, char** argv) {
  CLI::App app{"Show the execution plan of a model for a VRAM budget", "ferry plan"};
  std::string model_path, preset, type = "F16", vram_text, profile_path;
  int ctx = 4096, batch = 1024, threads = 0, prompt = 1024, ring = 0, ffn_slices = 1;
  bool json = false;
  app.add_option("-m,--model", model_path, "GGUF model file");
  app.add_option("--preset", preset, "plan a synth preset's shapes instead of a file (e.g. minitron-8b)");
  app.add_option("--type", type, "weight type of --preset (GGUF name, e.g. F16, Q4_K)")->capture_default_str();
  app.add_option("--vram", vram_text, "VRAM budget of the whole process (CUDA context included): bytes or K/M/G suffix (binary units), e.g. 2G");
  app.add_option("-c,--ctx-size", ctx, "planned context: the KV cache holds this many tokens")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("-b,--batch-size", batch, "largest token tier (tokens per step)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("-t,--threads", threads, "CPU threads (default: the profile's)")->check(CLI::Range(1, 4096));
  app.add_option("--prompt-tokens", prompt, "prompt length TTFT is predicted for")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--ring", ring, "weight ring slots K >= 2 (default: the planner chooses K)")->check(CLI::Range(2, 64));
  app.add_option("--ffn-slices", ffn_slices,
                 "cut each FFN into N slices placed one by one (default 1: whole FFNs; 0: the planner chooses 1 or 2)")
      ->check(CLI::Range(0, 64));
  app.add_option("--profile", profile_path, "hardware profile JSON (default: this machine's cached profile)");
  app.add_flag("--json", json, "print the plan as JSON");
  int rc = 0;
  if (!cli::parse(app, argc, argv, &rc)) return rc;
  if (model_path.empty() == preset.empty())
    return cli::usage_error("give a model file (-m FILE) or a preset (--preset NAME), one of them");

  uint64_t vram = 0;
  if (!vram_text.empty()) {
    const std::optional<uint64_t> v = cli::parse_size(vram_text);
    if (!v) return cli::usage_error("--vram: cannot read size '" + vram_text + "' (bytes or K/M/G suffix, e.g. 2G)");
    vram = *v;
  }

  Expected<Model> m = load_model(model_path, preset, type);
  if (!m) return cli::report(m.status());
  std::string origin;
  Expected<plan::HardwareProfile> prof = cli::load_or_measure_profile(profile_path, &origin);
  if (!prof) return cli::report(prof.status());
  if (prof->has_gpu() && vram_text.empty())
    return cli::usage_error("--vram SIZE is required (the profile has a GPU: " + prof->gpu->name + ")");

  // The budget is the whole process: the planner gets what the CUDA context (the profile's, or the
  // default) and the growth reserve leave, as `ferry run --vram` on that GPU would give it.
  const runtime::ProcessBudget split = runtime::modelled_budget(vram, *prof);
  plan::PlannerOptions o;
  o.vram_budget = prof->has_gpu() ? split.arena : vram;
  o.cuda_context_bytes = split.outside_arena();
  o.context = ctx;
  o.batch = batch;
  o.cpu_threads = threads;
  o.prompt_tokens = prompt;
  o.ring_slots = ring;  // 0: the planner searches K
  o.ffn_slices = ffn_slices;  // 0: whole FFNs or slices, the planner's choice
  o.gemm_staging_bytes = cli::gemm_staging_bytes_from_env();
  Expected<plan::PlanSet> ps = plan::Planner(*prof, o).plan(m->spec, m->subs);
  if (!ps) return cli::report(ps.status());
  if (json) {
    std::printf("%s", plan::plan_to_json(*ps).c_str());
  } else {
    std::printf("profile: %s (%s%s%s)\n", origin.c_str(), prof->source.c_str(),
                prof->mode.empty() ? "" : ", ", prof->mode.c_str());
    if (prof->has_gpu())
      std::printf("budget: %s = CUDA context %s (%s) + reserve %s + arena %s (what the plan below gets)\n",
                  plan::format_bytes(split.budget).c_str(), plan::format_bytes(split.context_bytes).c_str(),
                  split.context_source.c_str(), plan::format_bytes(split.growth_reserve).c_str(),
                  plan::format_bytes(split.arena).c_str());
    std::printf("%s", plan::plan_to_text(*ps).c_str());
  }
  return 0;
}
