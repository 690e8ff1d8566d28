// hybrid_support: --vram wiring for ferry run / bench, the runner factory shared with --device cuda,
// the reports and the timeline recording (see hybrid_support.h).
#include "hybrid_support.h"

#include <unistd.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "engine/step_runner.h"
#include "format/gguf.h"
#include "model/sublayer.h"
#include "plan/cost_model.h"
#include "plan/planner.h"
#include "profile_support.h"

namespace ferry::cli {

namespace {

// engine::StepRunner over an exec::HybridRunner (the two input structs carry the same fields).
class HybridStepRunner final : public engine::StepRunner {
 public:
  HybridStepRunner(std::unique_ptr<exec::HybridRunner> r, std::string name) : r_(std::move(r)), name_(std::move(name)) {}
  const char* name() const override { return name_.empty() ? r_->name() : name_.c_str(); }
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
  std::string name_;
};

std::string mib(uint64_t b) { return plan::format_bytes(b); }

// Sub-layers per placement in a tier.
struct PlacementCounts {
  int resident = 0, streamed = 0, cpu = 0;
};
PlacementCounts count_placements(const std::vector<plan::Placement>& ps) {
  PlacementCounts c;
  for (plan::Placement p : ps) {
    c.cpu += p == plan::Placement::kCpu;
    c.streamed += p == plan::Placement::kStreamed;
    c.resident += p == plan::Placement::kResident;
  }
  return c;
}

}  // namespace

void add_hybrid_options(CLI::App& app, HybridArgs* a, bool bench) {
  app.add_option("--vram", a->vram_text,
                 "VRAM budget (bytes or K/M/G suffix, e.g. 2G): run the planner's hybrid CPU/GPU plan under it");
  app.add_option("--profile", a->profile_path, "hardware profile JSON for --vram (default: this machine's cached one)");
  app.add_option("--ring", a->ring_slots, "weight ring slots for --vram (K >= 2)")->check(CLI::Range(2, 64));
  app.add_option("--ffn-slices", a->ffn_slices,
                 "with --vram: cut each FFN into N slices placed one by one, a layer's CPU and GPU slices computed at "
                 "once (default 1: whole FFNs; 0: the planner chooses 1 or 2)")
      ->check(CLI::Range(0, 64));
  app.add_option("--strategy", a->strategy,
                 "with --vram: run every tier with this strategy's placement where it is feasible (studies; default: the "
                 "planner's pick per tier)")
      ->check(CLI::IsMember({"gpu-stream", "static", "dynamic"}));
  app.add_option("--cuda-graphs", a->cuda_graphs, "CUDA: replay all-resident decode steps from graphs (1) or not (0)")
      ->check(CLI::Range(0, 1));
  app.add_option("--split-layout", a->split_layout,
                 "CUDA: store Q4_0/Q8_0/Q6_K/... matrices in the split layout the fast decode kernels read (1) or as in the file (0)")
      ->check(CLI::Range(0, 1));
  app.add_option("--pin", a->pin,
                 "with --vram: streamed weights are copied once into pinned memory (copy) or the model's mmap is "
                 "page-locked in place (register; falls back to copy if the driver refuses)")
      ->check(CLI::IsMember({"copy", "register"}));
  if (!bench) return;
  app.add_flag("--explain", a->explain, "with --vram: measured time per sub-layer and copy");
  app.add_option("--timeline", a->timeline_path,
                 "GPU/emulated device: write an SVG of one prefill chunk and the first decode steps (copy stream, "
                 "GPU compute, CPU workers, host waits) to this file");
}

Expected<plan::HardwareProfile> load_gpu_profile(const std::string& path, const char* what, std::string* origin,
                                                 bool* cached) {
  auto prof = load_or_measure_profile(path, origin, cached);
  if (!prof) return prof.status();
  if (!prof->has_gpu())
    return make_error(ErrorCode::kInvalidArgument,
                      "the profile (%s) has no GPU: %s needs a profile measured with a GPU (or --profile FILE)",
                      origin->c_str(), what);
  return std::move(*prof);
}

void install_runner_factory(const HybridArgs& a, engine::EngineOptions* opt, const std::shared_ptr<HybridState>& state,
                            RunnerConfig cfg) {
  state->active = true;
  state->budget = cfg.budget;
  state->device = cfg.device;
  state->profile_origin = cfg.profile_origin;
  state->profile_cached = cfg.profile_cached;
  state->link_gbs = plan::CostModel(cfg.profile, opt->n_threads).link_gbs();
  const int32_t threads = opt->n_threads;
  const int32_t n_seq = opt->n_seq_max;
  const int32_t ring = a.ring_slots;
  const int32_t ffn_slices = a.ffn_slices;
  const bool graphs = a.cuda_graphs != 0, split = a.split_layout != 0;
  const exec::PinMode pin = a.pin == "register" ? exec::PinMode::kRegister : exec::PinMode::kCopy;
  const bool measure = a.explain;
  auto c = std::make_shared<const RunnerConfig>(std::move(cfg));
  opt->runner_factory = [=](const model::ModelSpec& spec, const model::ModelWeights& w, const gguf::ModelFile& file,
                            int32_t n_ctx, int32_t n_batch) -> Expected<std::unique_ptr<engine::StepRunner>> {
    FERRY_ASSIGN_OR_RETURN(std::vector<model::SubLayer> subs, model::build_sublayers(spec, file));
    state->weight_types = plan::matmul_weight_types(subs);
    exec::HybridSetup s;
    s.vram_budget = c->budget;
    s.device = c->device;
    s.profile = c->profile;
    s.ring_slots = ring;
    s.options.n_cells = n_ctx;
    s.options.n_batch = n_batch;
    s.options.cpu_threads = threads;
    s.options.max_sequences = n_seq;
    s.options.measure = measure;
    s.options.pin_mode = pin;
    s.options.cuda_graphs = graphs;
    s.options.split_layout = split;
    s.options.force_strategy = c->force_strategy;
    s.options.gemm_staging_bytes = c->gemm_staging_bytes;
    s.options.ffn_slices = ffn_slices;
    auto r = exec::make_hybrid_runner(spec, w, subs, s);
    if (c->check) FERRY_RETURN_IF_ERROR(c->check(r ? Status::ok() : r.status(), r ? r->get() : nullptr));
    if (!r) return r.status();
    state->runner = r->get();
    return std::unique_ptr<engine::StepRunner>(new HybridStepRunner(std::move(*r), c->name));
  };
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
  RunnerConfig cfg;
  FERRY_ASSIGN_OR_RETURN(cfg.profile,
                         load_gpu_profile(a.profile_path, "--vram", &cfg.profile_origin, &cfg.profile_cached));
  cfg.budget = *v;
  cfg.device = device;
  // The prefill GEMMs' F16 staging: the planner's choice unless FERRY_GEMM_STAGING_MB says (bench/RESULTS.md,
  // session 9).
  cfg.gemm_staging_bytes = gemm_staging_bytes_from_env();
  if (a.strategy == "gpu-stream") cfg.force_strategy = plan::Strategy::kGpuStream;
  if (a.strategy == "static") cfg.force_strategy = plan::Strategy::kStatic;
  if (a.strategy == "dynamic") cfg.force_strategy = plan::Strategy::kDynamic;
  install_runner_factory(a, opt, state, std::move(cfg));
  return Status::ok();
}

LimitFractions limit_fractions(const HybridState& s) {
  LimitFractions f;
  if (!s.active || !s.runner) return f;
  const exec::HybridRunner& r = *s.runner;
  const plan::PlanSet& ps = r.plan();
  f.limit_h_ms = ps.limit_h_ms;
  f.limit_cp_ms = ps.limit_cp_ms;
  f.limit_serial_ms = ps.limit_serial_ms;
  const double rest = static_cast<double>(ps.weights_total - ps.weights_resident);
  if (s.link_gbs > 0) f.limit_p_ms = rest / (s.link_gbs * 1e9) * 1e3;
  const std::vector<exec::TierStats>& st = r.stats();
  for (const exec::TierStats& t : st) {
    if (t.steps == 0) continue;
    if (t.tokens == 1) f.decode_ms = t.wall_ms / t.steps;
    if (t.tokens > 1 && t.tokens >= f.prefill_tier) {
      f.prefill_tier = t.tokens;
      f.prefill_ms = t.wall_ms / t.steps;
    }
  }
  if (rest <= 0) return f;  // nothing streams or runs on the CPU: no hybrid limit
  if (f.decode_ms > 0 && f.limit_h_ms > 0) f.decode_h = f.limit_h_ms / f.decode_ms;
  if (f.decode_ms > 0 && f.limit_cp_ms > 0) f.decode_cp = f.limit_cp_ms / f.decode_ms;
  if (f.decode_ms > 0 && f.limit_serial_ms > 0) f.decode_serial = f.limit_serial_ms / f.decode_ms;
  if (f.prefill_ms > 0 && f.limit_p_ms > 0) f.prefill_p = f.limit_p_ms / f.prefill_ms;
  return f;
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
  std::snprintf(line, sizeof line, "plan: resident %s of %s weights%s, ring %d x %s, KV %s | pinned streamed weights %s | load %.2f s | profile %s\n",
                mib(ps.weights_resident).c_str(), mib(ps.weights_total).c_str(),
                ps.ffn_slices > 1 ? (", FFNs in " + std::to_string(ps.ffn_slices) + " slices").c_str() : "", ps.ring_slots,
                mib(ps.ring_slot_bytes).c_str(), mib(ps.arena.kv).c_str(), mib(r.pinned_weight_bytes()).c_str(),
                r.load_seconds(), s.profile_origin.c_str());
  out += line;
  const exec::PinStats& pin = r.pin_stats();
  if (pin.bytes > 0 || !pin.note.empty()) {
    const bool reg = pin.mode == exec::PinMode::kRegister;
    char work[96];
    if (reg)
      std::snprintf(work, sizeof work, "register %.2f thread-s", pin.alloc_s);
    else
      std::snprintf(work, sizeof work, "alloc %.2f + copy %.2f thread-s", pin.alloc_s, pin.copy_s);
    std::snprintf(line, sizeof line, "pin: %s %s in %d %s, %.2f s (%d threads; %s)\n", exec::pin_mode_name(pin.mode),
                  mib(pin.bytes).c_str(), pin.ranges, reg ? "registered ranges" : "pinned buffers", pin.seconds,
                  pin.threads, work);
    out += line;
    if (!pin.note.empty()) out += "pin: note: " + pin.note + "\n";
  }
  for (size_t t = 0; t < ps.tiers.size(); ++t) {
    const exec::TierStats& st = r.stats()[t];
    if (st.steps == 0) continue;
    const PlacementCounts n = count_placements(r.placements()[t]);
    const double meas = st.wall_ms / st.steps, pred = st.predicted_at_steps(ps, t);
    std::snprintf(line, sizeof line,
                  "tier %4d: %-10s resident %3d streamed %3d cpu %3d | predicted %.2f ms, measured %.2f ms (%+.0f %%) "
                  "over %lld steps at mean context %.0f\n",
                  st.tokens, plan::strategy_name(st.strategy), n.resident, n.streamed, n.cpu, pred, meas,
                  pred > 0 ? (meas / pred - 1) * 100 : 0.0, static_cast<long long>(st.steps),
                  st.context_sum / st.steps);
    out += line;
  }
  if (const std::optional<double> cv = exec::cpu_vs_profile(r.stats())) {
    const bool off = *cv < kProfileFastRatio || *cv > kProfileSlowRatio;
    std::snprintf(line, sizeof line, "profile check: the CPU sub-layers took %.2fx the profile's time for them alone%s\n",
                  *cv, off ? " -> the profile does not describe this machine now" : " (copies beside them: 1-1.6x)");
    out += line;
  }
  const LimitFractions f = limit_fractions(s);
  if (f.decode_h) {
    std::snprintf(line, sizeof line,
                  "decode vs hybrid limit: (W-R)/H = %.2f ms -> %.0f %% of the limit; (W-R)/(C+P) = %.2f ms -> %.0f %%; "
                  "serial (CPU bytes / H + GPU compute) = %.2f ms -> %.0f %% (measured %.2f ms/step)\n",
                  f.limit_h_ms, 100 * *f.decode_h, f.limit_cp_ms, 100 * f.decode_cp.value_or(0), f.limit_serial_ms,
                  100 * f.decode_serial.value_or(0), f.decode_ms);
    out += line;
  }
  if (f.prefill_p) {
    std::snprintf(line, sizeof line,
                  "prefill vs hybrid limit: (W-R)/P = %.2f ms per chunk -> %.0f %% of the limit (tier %d, measured %.2f "
                  "ms/chunk)\n",
                  f.limit_p_ms, 100 * *f.prefill_p, f.prefill_tier, f.prefill_ms);
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
  if (const std::optional<double> cv = exec::cpu_vs_profile(r.stats())) j["cpu_vs_profile"] = *cv;
  j["ffn_slices"] = ps.ffn_slices;
  j["weights_total"] = ps.weights_total;
  j["weights_resident"] = ps.weights_resident;
  j["limit_h_ms"] = ps.limit_h_ms;
  j["limit_cp_ms"] = ps.limit_cp_ms;
  j["limit_serial_ms"] = ps.limit_serial_ms;
  j["pinned_weight_bytes"] = r.pinned_weight_bytes();
  j["load_s"] = r.load_seconds();
  const exec::PinStats& pin = r.pin_stats();
  j["pin_s"] = r.pin_seconds();
  j["pin"] = {{"mode", exec::pin_mode_name(pin.mode)}, {"seconds", pin.seconds}, {"alloc_s", pin.alloc_s},
              {"copy_s", pin.copy_s}, {"threads", pin.threads}, {"ranges", pin.ranges}, {"bytes", pin.bytes},
              {"note", pin.note}};
  j["tiers"] = nlohmann::json::array();
  for (size_t t = 0; t < ps.tiers.size(); ++t) {
    const exec::TierStats& st = r.stats()[t];
    nlohmann::json tj;
    tj["tokens"] = st.tokens;
    tj["strategy"] = plan::strategy_name(st.strategy);
    // predicted_ms: at the measured steps' mean context (what measured_ms is compared with);
    // predicted_eval_ms: the plan's figure at its eval context.
    tj["predicted_ms"] = st.predicted_at_steps(ps, t);
    tj["predicted_eval_ms"] = st.predicted_ms;
    tj["mean_context"] = st.steps ? st.context_sum / st.steps : 0.0;
    tj["steps"] = st.steps;
    tj["measured_ms"] = st.steps ? st.wall_ms / st.steps : 0.0;
    tj["copies"] = st.copies;
    tj["copy_bytes"] = st.copy_bytes;
    tj["copy_ms"] = st.copy_ms;  // in-step copies, measured with --explain only (0 otherwise)
    tj["prefetch_hits"] = st.prefetch_hits;
    tj["prefetch_copies"] = st.prefetch_copies;  // end-of-step prefetches (not in copies)
    tj["prefetch_bytes"] = st.prefetch_bytes;
    tj["graph_replays"] = st.graph_replays;
    tj["graph_captures"] = st.graph_captures;
    const PlacementCounts n = count_placements(r.placements()[t]);
    tj["resident"] = n.resident;
    tj["streamed"] = n.streamed;
    tj["cpu"] = n.cpu;
    j["tiers"].push_back(tj);
  }
  const LimitFractions f = limit_fractions(s);
  j["limit_p_ms"] = f.limit_p_ms;
  auto opt = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  j["limit_fraction"] = {{"decode_h", opt(f.decode_h)},
                         {"decode_cp", opt(f.decode_cp)},
                         {"decode_serial", opt(f.decode_serial)},
                         {"prefill_p", opt(f.prefill_p)},
                         {"decode_ms", f.decode_ms},
                         {"prefill_ms", f.prefill_ms},
                         {"prefill_tier", f.prefill_tier}};
  return j;
}

Expected<exec::Timeline> record_timeline(const HybridState& s, int32_t max_steps, const std::string& title,
                                         const std::function<Status()>& steps) {
  if (!s.active || !s.runner)
    return make_error(ErrorCode::kInvalidArgument, "--timeline needs a GPU or emulated device");
  exec::HybridRunner& r = *s.runner;
  exec::Timeline t;
  t.max_steps = max_steps;
  r.set_timeline(&t);
  const Status st = steps();
  r.set_timeline(nullptr);
  FERRY_RETURN_IF_ERROR(st);
  // Title: what ran, under which budget, with which plan per recorded tier.
  const plan::PlanSet& ps = r.plan();
  t.title = title + " | " + r.name() + " | budget " + mib(s.budget) + " | resident " + mib(ps.weights_resident) +
            " of " + mib(ps.weights_total);
  std::vector<int32_t> seen;
  for (const exec::StepMark& m : t.steps) {
    bool dup = false;
    for (int32_t v : seen) dup |= v == m.tier;
    if (dup) continue;
    seen.push_back(m.tier);
    for (size_t ti = 0; ti < r.stats().size(); ++ti)
      if (const exec::TierStats& ts = r.stats()[ti]; ts.tokens == m.tier) {
        const PlacementCounts n = count_placements(r.placements()[ti]);
        char buf[160];
        std::snprintf(buf, sizeof buf, " | tier %d: %s (%d resident, %d streamed, %d cpu)", m.tier,
                      plan::strategy_name(ts.strategy), n.resident, n.streamed, n.cpu);
        t.title += buf;
        break;
      }
  }
  return t;
}

bool check_profile_after_run(const HybridState& s) {
  if (!s.active || !s.runner) return false;
  const std::optional<double> cv = exec::cpu_vs_profile(s.runner->stats());
  if (!cv || !plan::cpu_time_off(*cv)) return false;
  plan::ProfileRecheck r;
  r.cpu_vs_profile = *cv;
  r.weight_types = s.weight_types;
  r.profile_path = s.profile_origin;
  r.cached = s.profile_cached;
  plan::ProfileOptions opt;
  if (isatty(STDERR_FILENO)) opt.progress = progress_bar("profile check");
  const Expected<std::string> said = plan::recheck_profile_after_run(r, host_kernels(), opt);
  if (said) std::fprintf(stderr, "ferry: %s\n", said->c_str());
  else std::fprintf(stderr, "ferry: warning: profile check: %s\n", said.status().message().c_str());
  return true;
}

}  // namespace ferry::cli
