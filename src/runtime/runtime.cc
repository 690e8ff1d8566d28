// runtime::open (runtime.h): device resolution, the profile, the process budget's split, the hybrid
// executor behind the engine's runner factory, and the Runtime that reports on it.
#include "runtime/runtime.h"

#include <cctype>
#include <cmath>
#include <utility>
#include <vector>

#include "exec/device.h"
#include "exec/process_memory.h"
#include "format/gguf.h"
#include "model/model_spec.h"
#include "model/sublayer.h"
#include "plan/cost_model.h"
#include "plan/profile_check.h"
#include "runtime/hybrid_step_runner.h"
#include "runtime/profile_source.h"
#include "runtime/report.h"

namespace ferry::runtime {

namespace {

// The whole model on the GPU (device cuda, no budget) needs at least this much free memory for its arena,
// and leaves kWholeModelMargin free beyond the growth reserve: with no budget the arena takes the free
// memory, so a driver allocation past the reserve would fail (a launch that cannot load its kernel)
// instead of only passing a budget.
constexpr uint64_t kMinWholeModelArena = 256ull << 20;
constexpr uint64_t kWholeModelMargin = 256ull << 20;

void note(const OpenOptions& o, const std::string& text) {
  if (o.on_note) o.on_note(text);
}

// "no usable CUDA GPU: <reason>" -> "<reason>".
std::string gpu_reason(const std::string& why) {
  const std::string prefix = "no usable CUDA GPU: ";
  return why.compare(0, prefix.size(), prefix) == 0 ? why.substr(prefix.size()) : why;
}

// The device the options name, checked: cuda needs a usable GPU; a budget needs cuda or emulated, and
// "cpu" with a budget becomes the GPU (or the emulated one, given a GPU profile).
Expected<std::string> resolve_device(const OpenOptions& o) {
  const std::string& d = o.device;
  if (d != "cpu" && d != "ref" && d != "ref-exact" && d != "cuda" && d != "emulated")
    return make_error(ErrorCode::kInvalidArgument, "unknown device '%s' (expected cpu, ref, ref-exact, cuda or emulated)",
                      d.c_str());
  std::string why;
  if (!o.vram_budget) {
    if (d == "emulated")
      return make_error(ErrorCode::kInvalidArgument,
                        "the emulated device needs a VRAM budget (--vram SIZE): it stands for a GPU of that size");
    if (d == "cuda" && !exec::cuda_available(&why))
      return make_error(ErrorCode::kDevice, "device cuda: no usable CUDA GPU (%s); use --device cpu",
                        gpu_reason(why).c_str());
    return d;
  }
  if (d == "ref" || d == "ref-exact")
    return make_error(ErrorCode::kInvalidArgument, "a VRAM budget needs device cuda or emulated (got %s)", d.c_str());
  const bool gpu = exec::cuda_available(&why);
  if (d == "cuda" && !gpu)
    return make_error(ErrorCode::kDevice,
                      "device cuda: no usable CUDA GPU (%s); drop --vram to run on the CPU, or plan for a GPU with "
                      "--device emulated --profile FILE",
                      gpu_reason(why).c_str());
  if (d != "cpu") return d;
  if (gpu) return std::string("cuda");
  if (!o.profile_path.empty()) {
    note(o, "no usable CUDA GPU (" + gpu_reason(why) + "): the budget runs on the emulated device with the GPU of " +
                o.profile_path);
    return std::string("emulated");
  }
  return make_error(ErrorCode::kInvalidArgument,
                    "%s--vram needs a CUDA GPU and none is usable here (%s): drop --vram to run on the CPU, or emulate "
                    "a GPU with --device emulated --profile FILE (a profile measured on a GPU machine)",
                    *o.vram_budget == 0 ? "the VRAM budget must be > 0, and " : "", gpu_reason(why).c_str());
}

// The whole model on the GPU: every matrix resident, with KV cache and scratch, inside `arena`;
// otherwise an error suggesting a budget (the hybrid executor).
Status check_whole_model(uint64_t arena, const exec::HybridRunner& r) {
  const plan::PlanSet& ps = r.plan();
  const uint64_t vectors = ps.arena.weights - ps.weights_resident;
  const uint64_t need = ps.weights_total + vectors + ps.arena.kv + ps.arena.scratch + ps.arena.workspace;
  if (need > arena)
    return make_error(ErrorCode::kOutOfMemory,
                      "the model does not fit in the GPU's free memory: it needs %s (weights %s, KV cache %s, "
                      "scratch %s) but %s is usable; use --vram SIZE to run it with the hybrid CPU/GPU "
                      "executor, or a smaller context (-c)",
                      plan::format_bytes(need).c_str(), plan::format_bytes(ps.weights_total + vectors).c_str(),
                      plan::format_bytes(ps.arena.kv).c_str(),
                      plan::format_bytes(ps.arena.scratch + ps.arena.workspace).c_str(),
                      plan::format_bytes(arena).c_str());
  return Status::ok();
}

class RuntimeImpl final : public Runtime {
 public:
  engine::Engine& engine() override { return *engine_; }
  Expected<std::unique_ptr<engine::VisionEncoder>> open_vision(const std::string& mmproj_path) override {
    FERRY_ASSIGN_OR_RETURN(auto enc, engine::VisionEncoder::open(mmproj_path, engine_->spec(), n_threads_));
    if (exec::HybridRunner* r = state_.runner) {
      std::shared_ptr<PeakSampler> peak = peak_;
      enc->set_backend([r, peak](const model::VisionSpec& spec, const model::VisionWeights& w,
                                 const model::VisionInput& in, std::string* where,
                                 std::string* why) -> Expected<std::vector<float>> {
        exec::VisionRun run;
        Expected<std::vector<float>> out = r->encode_image(spec, w, in, &run);
        *where = run.where;
        *why = run.note;
        if (peak) (void)peak->peak();  // the encoder's kernels may have grown the process
        return out;
      });
    }
    return enc;
  }
  const std::string& device() const override { return device_; }
  int32_t n_batch() const override { return engine_->options().n_batch; }
  exec::HybridRunner* runner() override { return state_.runner; }
  const ProcessBudget& budget() const override { return state_.budget; }
  const std::string& profile_origin() const override { return state_.profile_origin; }
  kernels::CpuIsa cpu_isa() const override { return state_.cpu_isa; }

  ProcessMemory vram_peak_process() override {
    if (!peak_) return ProcessMemory{0, "none"};
    return peak_->peak();
  }
  void reset_stats() override {
    if (state_.runner) state_.runner->reset_stats();
  }
  std::string report_text(bool explain) override {
    if (!state_.runner) return "";
    return hybrid_report_text(state_, vram_peak_process(), explain);
  }
  nlohmann::json report_json() override {
    if (!state_.runner) return nlohmann::json::object();
    return hybrid_report_json(state_, vram_peak_process());
  }
  std::string check_profile_after_run() override {
    if (!state_.runner) return "";
    return runtime::check_profile_after_run(state_.runner->stats(), state_.profile_origin, state_.profile_cached,
                                           state_.weight_types, state_.cpu_isa);
  }
  Expected<exec::Timeline> record_timeline(int32_t max_steps, const std::string& title,
                                           const std::function<Status()>& steps) override {
    return runtime::record_timeline(state_, max_steps, title, steps);
  }

  std::string device_;
  int32_t n_threads_ = 0;
  HybridState state_;                    // runner: set by the engine's runner factory
  std::shared_ptr<PeakSampler> peak_;    // cuda / emulated
  bool whole_model_ = false;             // cuda without a budget: every sub-layer on the GPU
  // Last member: destroyed first (the runner it owns is what state_ and peak_ point at).
  std::unique_ptr<engine::Engine> engine_;
};

// The runner factory of a GPU run: plan for the arena, build the executor, and turn a plan that does not
// fit into the process-level minimum-budget error.
engine::RunnerFactory hybrid_factory(RuntimeImpl* rt, const OpenOptions& o, plan::HardwareProfile profile) {
  const ExecutorOverrides ex = o.executor;
  const int32_t threads = o.n_threads, n_seq = o.n_seq_max;
  const bool batch_given = o.n_batch > 0;
  const NoteFn on_note = o.on_note;
  return [rt, ex, threads, n_seq, batch_given, on_note, profile = std::move(profile)](
             const model::ModelSpec& spec, const model::ModelWeights& w, const gguf::ModelFile& file, int32_t n_ctx,
             int32_t* n_batch_io) mutable -> Expected<std::unique_ptr<engine::StepRunner>> {
    const int32_t n_batch = *n_batch_io;
    FERRY_ASSIGN_OR_RETURN(std::vector<model::SubLayer> subs, model::build_sublayers(spec, file));
    rt->state_.weight_types = plan::matmul_weight_types(subs);
    // A weight type this machine's profile lacks (gpt-oss's MXFP4): its CPU curves measured now, once.
    const Expected<std::vector<DType>> added = measure_missing_cpu_types(
        &profile, rt->state_.weight_types, rt->state_.profile_cached, rt->state_.profile_origin, rt->state_.cpu_isa);
    if (on_note && !added)
      on_note("warning: could not measure the CPU kernels of this model's weight types: " + added.status().message());
    if (on_note && added && !added->empty()) {
      std::string names;
      for (DType t : *added) names += (names.empty() ? "" : ", ") + std::string(dtype_name(t));
      on_note("measured the CPU kernels of " + names + " (this model's, not in the profile yet) into " +
              rt->state_.profile_origin);
    }
    const ProcessBudget& b = rt->state_.budget;
    exec::HybridSetup s;
    s.vram_budget = b.arena;
    s.device = rt->device_;
    s.profile = profile;
    s.ring_slots = ex.ring_slots;
    s.options.n_cells = n_ctx;
    s.options.n_batch = n_batch;
    s.options.cpu_threads = threads;
    s.options.cpu_isa = rt->state_.cpu_isa;
    s.options.max_sequences = n_seq;
    s.options.measure = ex.measure;
    s.options.pin_mode = ex.pin;
    s.options.cuda_graphs = ex.cuda_graphs;
    s.options.split_layout = ex.split_layout;
    s.options.force_strategy = ex.strategy;
    s.options.gemm_staging_bytes = ex.gemm_staging_bytes;
    s.options.ffn_slices = ex.ffn_slices;
    s.options.expert_cache_bytes = ex.expert_cache_bytes;
    // The emulated GPU reports the context it stands for as memory outside its arena.
    if (rt->device_ == "emulated") s.emulated.outside_arena = b.context_bytes;
    // Whole model: with room for all weights the planner's resident set holds every matrix it gains
    // from, and gpu-stream runs any other one on the GPU too (never the CPU).
    if (rt->whole_model_) s.options.force_strategy = plan::Strategy::kGpuStream;
    // A mixture of experts under a budget streams every routed expert group once per prefill chunk: with
    // the default chunk the planner also tries chunks twice as long and keeps them where they predict a
    // faster prefill at (nearly) the same decode step (exec::HybridSetup::batch_max).
    if (!rt->whole_model_ && !batch_given && spec.n_expert > 0) s.batch_max = std::min(2 * n_batch, n_ctx);
    Expected<std::unique_ptr<exec::HybridRunner>> r =
        b.arena > 0 ? exec::make_hybrid_runner(spec, w, subs, s)
                    : Expected<std::unique_ptr<exec::HybridRunner>>(make_error(ErrorCode::kOutOfMemory, "no arena"));
    if (!r) {
      if (r.status().code() != ErrorCode::kOutOfMemory) return r.status();
      if (rt->whole_model_)
        return make_error(ErrorCode::kOutOfMemory,
                          "the model does not fit in the GPU's free memory (%s usable): %s; use --vram SIZE to run it "
                          "with the hybrid CPU/GPU executor, or a smaller context (-c)",
                          plan::format_bytes(b.arena).c_str(), r.status().message().c_str());
      Expected<uint64_t> min_arena = exec::hybrid_min_budget(spec, subs, s);
      if (min_arena && b.arena < *min_arena) return budget_too_small(b, *min_arena, spec.name, n_ctx, n_batch);
      return r.status();
    }
    if (rt->whole_model_) FERRY_RETURN_IF_ERROR(check_whole_model(b.arena, **r));
    rt->state_.runner = r->get();
    *n_batch_io = (*r)->plan().options.batch;
    return std::unique_ptr<engine::StepRunner>(
        new HybridStepRunner(std::move(*r), rt->whole_model_ ? "gpu-resident" : "", rt->peak_));
  };
}

// Profile, context and budget of a GPU run (device cuda or emulated), and its runner factory.
Status prepare_hybrid(RuntimeImpl* rt, const OpenOptions& o, engine::EngineOptions* eo) {
  const bool cuda = rt->device_ == "cuda";
  // The meter before anything makes this process's CUDA context (the profile's GPU probe may).
  if (cuda) (void)exec::process_memory_meter(0);
  HybridState& st = rt->state_;
  st.device = rt->device_;
  // A budget's first run measures its quick profile inside the budget too.
  const uint64_t probe_cap = cuda && !rt->whole_model_ && o.vram_budget ? *o.vram_budget : 0;
  FERRY_ASSIGN_OR_RETURN(plan::HardwareProfile profile,
                         load_gpu_profile(o.profile_path, &st.profile_origin, &st.profile_cached, o.on_note,
                                          o.on_progress, st.cpu_isa, probe_cap));
  st.link_gbs = plan::CostModel(profile, o.n_threads).link_gbs();
  const uint64_t reserve = exec::kCudaGrowthReserve;
  if (cuda) {
    FERRY_ASSIGN_OR_RETURN(exec::ContextCost cc, exec::measure_cuda_context(0));
    const std::string source = exec::memory_source_name(cc.source);
    if (rt->whole_model_) {
      const uint64_t keep = reserve + kWholeModelMargin;
      const uint64_t arena = cc.device_free > keep ? cc.device_free - keep : 0;
      if (arena < kMinWholeModelArena)
        return make_error(ErrorCode::kOutOfMemory, "--device cuda: only %s of GPU memory is free",
                          plan::format_bytes(cc.device_free).c_str());
      st.budget = split_budget(arena + cc.bytes + keep, cc.bytes, source, keep);
    } else {
      const uint64_t budget = *o.vram_budget;
      if (budget > cc.device_free + cc.bytes)
        return make_error(ErrorCode::kOutOfMemory,
                          "VRAM budget %s exceeds what the GPU can give this process: %s free besides the %s its "
                          "CUDA context holds (%s in all)",
                          plan::format_bytes(budget).c_str(), plan::format_bytes(cc.device_free).c_str(),
                          plan::format_bytes(cc.bytes).c_str(), plan::format_bytes(cc.device_total).c_str());
      st.budget = split_budget(budget, cc.bytes, source, reserve);
    }
    rt->peak_ = PeakSampler::for_cuda(0);
  } else {
    st.budget = modelled_budget(*o.vram_budget, profile);
    rt->peak_ = PeakSampler::modelled(st.budget.context_bytes);
  }
  eo->runner_factory = hybrid_factory(rt, o, std::move(profile));
  return Status::ok();
}

}  // namespace

Expected<std::unique_ptr<Runtime>> open(const OpenOptions& o) {
  if (o.n_batch < 0) return make_error(ErrorCode::kInvalidArgument, "n_batch must be >= 0 (got %d)", o.n_batch);
  auto rt = std::make_unique<RuntimeImpl>();
  FERRY_ASSIGN_OR_RETURN(rt->state_.cpu_isa, kernels::resolve_cpu_isa(o.cpu_isa));
  FERRY_ASSIGN_OR_RETURN(rt->device_, resolve_device(o));
  rt->n_threads_ = o.n_threads;
  rt->whole_model_ = rt->device_ == "cuda" && !o.vram_budget;
  engine::EngineOptions eo;
  eo.model_path = o.model_path;
  eo.n_ctx = o.n_ctx;
  eo.n_threads = o.n_threads;
  eo.n_seq_max = o.n_seq_max;
  eo.device = rt->device_;
  eo.cpu_huge_pages = o.cpu_huge_pages;
  eo.cpu_isa = kernels::cpu_isa_name(rt->state_.cpu_isa);
  // Default chunk: 1024 tokens with the whole model on the GPU (larger prefill GEMMs run faster there;
  // bench/RESULTS.md), 512 otherwise (the hybrid executor's tiers stop at 512, where activations are budget;
  // a mixture of experts may get 1024 from its plan: hybrid_factory).
  eo.n_batch = o.n_batch > 0 ? o.n_batch : rt->whole_model_ ? 1024 : 512;
  if (rt->device_ == "cuda" || rt->device_ == "emulated") {
    FERRY_RETURN_IF_ERROR(prepare_hybrid(rt.get(), o, &eo));
  }
  FERRY_ASSIGN_OR_RETURN(rt->engine_, engine::Engine::load(eo));
  if (rt->whole_model_ && rt->state_.runner) {
    const plan::PlanSet& ps = rt->state_.runner->plan();
    if (ps.weights_resident < ps.weights_total)
      note(o, plan::format_bytes(ps.weights_resident) + " of " + plan::format_bytes(ps.weights_total) +
                  " weights resident, the rest streams to the GPU each step (planner's choice)");
  }
  return std::unique_ptr<Runtime>(std::move(rt));
}

std::optional<uint64_t> parse_size(std::string_view text) {
  if (text.empty()) return std::nullopt;
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return std::nullopt;
  double value;
  try {
    value = std::stod(std::string(text.substr(0, i)));
  } catch (...) {
    return std::nullopt;
  }
  std::string suffix(text.substr(i));
  if (!suffix.empty() && (suffix.back() == 'B' || suffix.back() == 'b')) suffix.pop_back();
  if (suffix.size() == 2 && (suffix[1] == 'i' || suffix[1] == 'I')) suffix.pop_back();  // GiB
  double mult = 1;
  if (suffix.size() == 1) {
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
      case 'K': mult = 1024.0; break;
      case 'M': mult = 1024.0 * 1024; break;
      case 'G': mult = 1024.0 * 1024 * 1024; break;
      case 'T': mult = 1024.0 * 1024 * 1024 * 1024; break;
      default: return std::nullopt;
    }
  } else if (!suffix.empty()) {
    return std::nullopt;
  }
  const double bytes = value * mult;
  if (!std::isfinite(bytes) || bytes < 0 || bytes > 1.8e19) return std::nullopt;
  return static_cast<uint64_t>(bytes);
}

}  // namespace ferry::runtime
