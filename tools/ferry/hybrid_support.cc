// hybrid_support: --vram wiring for ferry run / bench (see hybrid_support.h).
#include "hybrid_support.h"

#include <cstdio>
#include <string>

#include "engine/step_runner.h"
#include "format/gguf.h"
#include "model/sublayer.h"
#include "plan/planner.h"
#include "profile_support.h"

namespace ferry::cli {

namespace {

// engine::StepRunner over an exec::HybridRunner (the two input structs carry the same fields).
class HybridStepRunner final : public engine::StepRunner {
 public:
  explicit HybridStepRunner(std::unique_ptr<exec::HybridRunner> r) : r_(std::move(r)) {}
  const char* name() const override { return r_->name(); }
  void set_debug_hook(model::DebugHook hook) override { r_->set_debug_hook(std::move(hook)); }
  Status run(const engine::StepInput& in, float* logits) override {
    exec::StepIo io;
    io.n_tokens = in.n_tokens;
    io.tokens = in.tokens;
    io.pos = in.pos;
    io.seq = in.seq;
    io.cell = in.cell;
    io.cell_pos = in.cell_pos;
    io.cell_seq = in.cell_seq;
    io.n_cells_scan = in.n_cells_scan;
    io.out_rows = in.out_rows;
    io.n_out = in.n_out;
    return r_->run(io, logits);
  }

 private:
  std::unique_ptr<exec::HybridRunner> r_;
};

std::string mib(uint64_t b) { return plan::format_bytes(b); }

}  // namespace

void add_hybrid_options(CLI::App& app, HybridArgs* a, bool with_explain) {
  app.add_option("--vram", a->vram_text,
                 "VRAM budget (bytes or K/M/G suffix, e.g. 2G): run the planner's hybrid CPU/GPU plan under it");
  app.add_option("--profile", a->profile_path, "hardware profile JSON for --vram (default: this machine's cached one)");
  app.add_option("--ring", a->ring_slots, "weight ring slots for --vram (K >= 2)")->check(CLI::Range(2, 64));
  if (with_explain) app.add_flag("--explain", a->explain, "with --vram: measured time per sub-layer and copy");
}

Status install_hybrid(const HybridArgs& a, engine::EngineOptions* opt, const std::shared_ptr<HybridState>& state) {
  if (a.vram_text.empty()) {
    if (opt->device == "cuda" || opt->device == "emulated")
      return make_error(ErrorCode::kInvalidArgument, "--device %s needs --vram SIZE (the budget it may use)",
                        opt->device.c_str());
    return Status::ok();
  }
  const std::optional<uint64_t> v = parse_size(a.vram_text);
  if (!v || *v == 0)
    return make_error(ErrorCode::kInvalidArgument, "--vram: cannot read size '%s' (bytes or K/M/G suffix, e.g. 2G)",
                      a.vram_text.c_str());
  std::string device = opt->device;
  if (device == "cpu") {
    std::string why;
    device = exec::cuda_available(&why) ? "cuda" : "emulated";
    if (device == "emulated")
      std::fprintf(stderr, "note: no usable CUDA GPU (%s): --vram runs on the emulated device\n", why.c_str());
  }
  if (device != "cuda" && device != "emulated")
    return make_error(ErrorCode::kInvalidArgument, "--vram needs --device cuda or emulated (got %s)", device.c_str());
  std::string origin;
  auto prof = load_or_measure_profile(a.profile_path, &origin);
  if (!prof) return prof.status();
  if (!prof->has_gpu())
    return make_error(ErrorCode::kInvalidArgument,
                      "the profile (%s) has no GPU: --vram needs a profile measured with a GPU (or --profile FILE)",
                      origin.c_str());
  state->active = true;
  state->budget = *v;
  state->device = device;
  state->profile_origin = origin;
  const int32_t threads = opt->n_threads;
  const int32_t n_seq = opt->n_seq_max;
  const int32_t ring = a.ring_slots;
  const bool measure = a.explain;
  plan::HardwareProfile profile = std::move(*prof);
  opt->runner_factory = [=](const model::ModelSpec& spec, const model::ModelWeights& w, const gguf::ModelFile& file,
                            int32_t n_ctx, int32_t n_batch) -> Expected<std::unique_ptr<engine::StepRunner>> {
    FERRY_ASSIGN_OR_RETURN(std::vector<model::SubLayer> subs, model::build_sublayers(spec, file));
    exec::HybridSetup s;
    s.vram_budget = state->budget;
    s.device = state->device;
    s.profile = profile;
    s.ring_slots = ring;
    s.options.n_cells = n_ctx;
    s.options.n_batch = n_batch;
    s.options.cpu_threads = threads;
    s.options.max_sequences = n_seq;
    s.options.measure = measure;
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<exec::HybridRunner> r, exec::make_hybrid_runner(spec, w, subs, s));
    state->runner = r.get();
    return std::unique_ptr<engine::StepRunner>(new HybridStepRunner(std::move(r)));
  };
  return Status::ok();
}

std::string hybrid_report_text(const HybridState& s, bool explain) {
  if (!s.active || !s.runner) return "";
  exec::HybridRunner& r = *s.runner;
  const plan::PlanSet& ps = r.plan();
  std::string out;
  char line[512];
  auto mi = r.device().memory_info();
  if (mi) {
    std::snprintf(line, sizeof line,
                  "device: %s (%s) | budget %s | arena peak %s | outside the arena (CUDA context, others) %s\n",
                  r.device().name().c_str(), s.device.c_str(), mib(s.budget).c_str(), mib(mi->arena_peak).c_str(),
                  mib(mi->outside_arena).c_str());
    out += line;
  }
  std::snprintf(line, sizeof line, "plan: resident %s of %s weights, ring %d x %s, KV %s | pinned streamed weights %s | load %.2f s | profile %s\n",
                mib(ps.weights_resident).c_str(), mib(ps.weights_total).c_str(), ps.ring_slots,
                mib(ps.ring_slot_bytes).c_str(), mib(ps.arena.kv).c_str(), mib(r.pinned_weight_bytes()).c_str(),
                r.load_seconds(), s.profile_origin.c_str());
  out += line;
  for (size_t t = 0; t < ps.tiers.size(); ++t) {
    const exec::TierStats& st = r.stats()[t];
    if (st.steps == 0) continue;
    int nc = 0, ns = 0, nr = 0;
    for (plan::Placement p : r.placements()[t]) {
      nc += p == plan::Placement::kCpu;
      ns += p == plan::Placement::kStreamed;
      nr += p == plan::Placement::kResident;
    }
    const double meas = st.wall_ms / st.steps;
    std::snprintf(line, sizeof line,
                  "tier %4d: %-10s resident %3d streamed %3d cpu %3d | predicted %.2f ms, measured %.2f ms (%+.0f %%) over %lld steps\n",
                  st.tokens, plan::strategy_name(st.strategy), nr, ns, nc, st.predicted_ms, meas,
                  st.predicted_ms > 0 ? (meas / st.predicted_ms - 1) * 100 : 0.0, static_cast<long long>(st.steps));
    out += line;
  }
  if (!r.stats().empty() && r.stats().front().steps > 0 && ps.limit_h_ms > 0) {
    const double meas = r.stats().front().wall_ms / r.stats().front().steps;
    std::snprintf(line, sizeof line,
                  "decode vs hybrid limit: (W-R)/H = %.2f ms -> %.0f %% of the limit; (W-R)/(C+P) = %.2f ms -> %.0f %%\n",
                  ps.limit_h_ms, 100 * ps.limit_h_ms / meas, ps.limit_cp_ms, 100 * ps.limit_cp_ms / meas);
    out += line;
  }
  if (explain) out += exec::explain_text(r);
  return out;
}

nlohmann::json hybrid_report_json(const HybridState& s) {
  nlohmann::json j;
  if (!s.active || !s.runner) return j;
  exec::HybridRunner& r = *s.runner;
  const plan::PlanSet& ps = r.plan();
  j["device"] = s.device;
  j["device_name"] = r.device().name();
  j["vram_budget"] = s.budget;
  auto mi = r.device().memory_info();
  if (mi) {
    j["arena_peak"] = mi->arena_peak;
    j["arena_capacity"] = mi->arena_capacity;
    j["outside_arena"] = mi->outside_arena;
  }
  j["weights_total"] = ps.weights_total;
  j["weights_resident"] = ps.weights_resident;
  j["limit_h_ms"] = ps.limit_h_ms;
  j["limit_cp_ms"] = ps.limit_cp_ms;
  j["pinned_weight_bytes"] = r.pinned_weight_bytes();
  j["load_s"] = r.load_seconds();
  j["tiers"] = nlohmann::json::array();
  for (size_t t = 0; t < ps.tiers.size(); ++t) {
    const exec::TierStats& st = r.stats()[t];
    nlohmann::json tj;
    tj["tokens"] = st.tokens;
    tj["strategy"] = plan::strategy_name(st.strategy);
    tj["predicted_ms"] = st.predicted_ms;
    tj["steps"] = st.steps;
    tj["measured_ms"] = st.steps ? st.wall_ms / st.steps : 0.0;
    tj["copies"] = st.copies;
    tj["copy_bytes"] = st.copy_bytes;
    tj["prefetch_hits"] = st.prefetch_hits;
    int nc = 0, ns = 0, nr = 0;
    for (plan::Placement p : r.placements()[t]) {
      nc += p == plan::Placement::kCpu;
      ns += p == plan::Placement::kStreamed;
      nr += p == plan::Placement::kResident;
    }
    tj["resident"] = nr;
    tj["streamed"] = ns;
    tj["cpu"] = nc;
    j["tiers"].push_back(tj);
  }
  return j;
}

}  // namespace ferry::cli
