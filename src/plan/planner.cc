// Planner: the shared resident set and ring (plan/resident_choice.h: candidates scored by the scenario,
// the robust choice, growth into the budget), then per tier the three strategies (plan/tier_strategies.h)
// evaluated by simulation (plan/placement_pricer.h, plan/simulate.h) and the fastest kept. This file runs
// those phases (Planner::plan_once), the choices between whole and sliced FFNs (plan) and between GEMM
// stagings (plan_staging), and assembles the PlanSet. docs/PLANNER.md describes the method.
//
// Rules the executor can rely on:
//  - The KV cache for the planned context lives in VRAM, so attention always runs on the GPU: a
//    non-resident attention sub-layer is streamed, in every strategy.
//  - Norm and bias vectors of every sub-layer are resident (tiny; a streamed sub-layer moves only
//    its matrices). The embedding is a row gather on the CPU in every strategy.
//  - Sub-layers whose matrices exceed a ring slot never stream (they are resident or on the CPU).
//  - The ring (K slots of ring_slot_bytes) exists when ring_slots > 0; slot size is chosen among
//    {no ring, largest attention, largest layer sub-layer} and K among the planner's depths (or the
//    user's K), whichever plans best; the slots' bytes come off the resident set. "Best": the lowest
//    scenario time, except that within copy_window of it a candidate is charged copy_risk per ms of
//    weight copies its decode step makes (the robust choice, docs/PLANNER.md).
#include "plan/planner.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "plan/cost_model.h"
#include "plan/placement_pricer.h"
#include "plan/resident_choice.h"
#include "plan/simulate.h"
#include "plan/tier_strategies.h"

namespace ferry::plan {

using model::ModelSpec;
using model::SubLayer;
using detail::Candidate;
using detail::PlacementPricer;
using detail::RingVariant;

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::kGpuStream: return "gpu-stream";
    case Strategy::kStatic: return "static";
    case Strategy::kDynamic: return "dynamic";
  }
  return "?";
}

const char* placement_name(Placement p) {
  switch (p) {
    case Placement::kResident: return "resident";
    case Placement::kStreamed: return "streamed";
    case Placement::kCpu: return "cpu";
  }
  return "?";
}

std::vector<uint8_t> split_layers(const std::vector<SubLayer>& subs, const std::vector<Placement>& placement) {
  std::vector<uint8_t> out(subs.size(), 0);
  for (size_t i = 0; i < subs.size() && i < placement.size(); ++i) {
    if (!model::is_ffn_slice(subs[i]) || subs[i].slice != 0) continue;
    const size_t e = std::min({subs.size(), placement.size(), i + static_cast<size_t>(subs[i].n_slices)});
    bool cpu = false;
    for (size_t k = i; k < e; ++k) cpu |= placement[k] == Placement::kCpu;
    for (size_t k = i; k < e && cpu; ++k) out[k] = 1;
  }
  return out;
}

std::vector<int32_t> token_tiers(int32_t batch) {
  std::vector<int32_t> t;
  for (int64_t n = 1; n < batch; n *= 2) t.push_back(static_cast<int32_t>(n));
  t.push_back(std::max<int32_t>(1, batch));
  return t;
}

const Plan& PlanSet::plan_for(int32_t n_tokens) const {
  FERRY_ASSERT(!tiers.empty());
  for (const Plan& p : tiers)
    if (p.tokens >= n_tokens) return p;
  return tiers.back();
}

Planner::Planner(const HardwareProfile& profile, PlannerOptions options) : profile_(profile), options_(options) {}

namespace {

Status check_options(const std::vector<SubLayer>& subs, const PlannerOptions& o) {
  if (subs.empty()) return make_error(ErrorCode::kInvalidArgument, "model has no sub-layers");
  if (o.context < 1) return make_error(ErrorCode::kInvalidArgument, "context must be >= 1 (got %d)", o.context);
  if (o.batch < 1 || o.batch > (1 << 20))
    return make_error(ErrorCode::kInvalidArgument, "batch must be in [1, 1048576] (got %d)", o.batch);
  if (o.ring_slots != 0 && (o.ring_slots < 2 || o.ring_slots > 64))
    return make_error(ErrorCode::kInvalidArgument, "ring slots must be 0 (the planner chooses) or 2..64 (got %d)",
                      o.ring_slots);
  if (o.max_sequences < 1) return make_error(ErrorCode::kInvalidArgument, "max_sequences must be >= 1");
  return Status::ok();
}

// No GPU: one all-CPU plan per tier; the budget does not apply.
PlanSet plan_without_gpu(const PlacementPricer& pricer) {
  const size_t m = pricer.size();
  PlanSet ps;
  ps.resident.assign(m, false);
  for (int32_t n : pricer.tiers()) {
    Plan p;
    p.tokens = n;
    StrategyEstimate cpu_only;
    cpu_only.strategy = Strategy::kStatic;
    cpu_only.feasible = true;
    cpu_only.placement.assign(m, Placement::kCpu);
    for (size_t i = 0; i < m; ++i) {
      cpu_only.cpu_ms += pricer.costs(i, n, pricer.eval_context()).cpu_s * 1e3;
      cpu_only.n_cpu += pricer.matrix_bytes()[i] > 0 && !pricer.is_embed(i);
    }
    cpu_only.step_ms = cpu_only.cpu_ms;
    StrategyEstimate gpu_stream, dynamic;
    gpu_stream.strategy = Strategy::kGpuStream;
    gpu_stream.why_not = "no GPU";
    dynamic.strategy = Strategy::kDynamic;
    dynamic.why_not = "no GPU";
    p.candidates = {gpu_stream, cpu_only, dynamic};
    detail::choose_strategy(p);
    p.predicted_ms_low = 0;
    for (size_t i = 0; i < m; ++i) p.predicted_ms_low += pricer.costs(i, n, 0).cpu_s * 1e3;
    p.sub_ms = pricer.sub_ms(p.placement, n);
    ps.tiers.push_back(std::move(p));
  }
  double ttft = 0;
  for (int32_t done = 0, P = pricer.prompt_tokens(); done < P;) {
    const int32_t n = std::min(P - done, pricer.tiers().back());
    for (size_t i = 0; i < m; ++i) ttft += pricer.costs(i, n, done).cpu_s * 1e3;
    done += n;
  }
  ps.ttft_ms = ttft;
  ps.decode_tok_s = 1e3 / ps.tiers.front().predicted_ms;
  ps.scenario_ms = ttft + pricer.options().gen_tokens * ps.tiers.front().predicted_ms;
  ps.notes.push_back("no GPU in the profile: every sub-layer runs on the CPU (the VRAM budget does not apply)");
  return ps;
}

// The budget against the GPU's memory: an error when it is more, a note when the CUDA context would not
// fit beside it.
Status check_budget(const HardwareProfile& profile, const PlannerOptions& o, std::vector<std::string>* notes) {
  const uint64_t gpu_mem = profile.gpu->memory_bytes;
  if (o.vram_budget > gpu_mem)
    return make_error(ErrorCode::kInvalidArgument, "VRAM budget %s is more than the %s of %s",
                      format_bytes(o.vram_budget).c_str(), format_bytes(gpu_mem).c_str(), profile.gpu->name.c_str());
  if (o.vram_budget + o.cuda_context_bytes > gpu_mem)
    notes->push_back("budget + CUDA context (~" + format_bytes(o.cuda_context_bytes) + ") exceed the GPU's " +
                     format_bytes(gpu_mem) + ": the arena may not get the whole budget");
  return Status::ok();
}

// No candidate fits: the error names the smallest variant's minimum and what it is made of.
Status below_minimum(const PlacementPricer& pricer, const RingVariant& smallest) {
  const PlannerOptions& o = pricer.options();
  const RingVariant& v = smallest;
  return make_error(ErrorCode::kOutOfMemory,
                    "VRAM budget %s is below the minimum %s for %s at context %d (KV cache %s, scratch %s, "
                    "cuBLAS workspace %s, norms %s, %s); raise --vram or lower -c",
                    format_bytes(o.vram_budget).c_str(), format_bytes(v.min_budget()).c_str(),
                    pricer.spec().name.empty() ? "this model" : pricer.spec().name.c_str(), o.context,
                    format_bytes(pricer.kv_bytes()).c_str(), format_bytes(pricer.scratch_bytes()).c_str(),
                    format_bytes(o.workspace_bytes).c_str(), format_bytes(pricer.vectors_total()).c_str(),
                    v.slot_bytes > 0 ? ("ring " + std::to_string(v.slots) + " x " + format_bytes(v.slot_bytes)).c_str()
                                     : ("resident attention " + format_bytes(v.must_bytes)).c_str());
}

// The PlanSet of the chosen candidate: its arena, every tier's plan (with the context-0 prediction and
// the per-sub-layer times) and the scenario.
PlanSet plan_of_candidate(const PlacementPricer& pricer, Candidate& cand) {
  const PlannerOptions& o = pricer.options();
  PlanSet ps;
  const RingVariant& v = *cand.variant;
  ps.resident = cand.resident;
  ps.ring_slots = v.slots;
  ps.ring_slot_bytes = v.slot_bytes;
  VramBreakdown a;
  a.kv = pricer.kv_bytes();
  a.scratch = pricer.scratch_bytes();
  a.workspace = o.workspace_bytes;
  a.ring = static_cast<uint64_t>(v.slots) * v.slot_bytes;
  a.weights = pricer.vectors_total();
  for (size_t i = 0; i < ps.resident.size(); ++i)
    if (ps.resident[i]) a.weights += pricer.matrix_bytes()[i];
  a.total = a.weights + a.kv + a.ring + a.scratch + a.workspace;
  FERRY_ASSERT(a.total == cand.need && a.total <= o.vram_budget);
  ps.arena = a;
  for (int32_t n : pricer.tiers()) {
    Plan p = detail::tier_plan(pricer, cand, n);
    p.vram = a;
    // The chosen placement at context 0, scaled by predicted_ms's ratio to the plain simulation at
    // eval_context (predicted_ms may carry the copy-risk charge). Only for the chosen candidate.
    p.predicted_ms_low = p.predicted_ms;
    if (pricer.eval_context() > 0) {
      const double hi = pricer.step_s(p.placement, n, pricer.eval_context(), v.slots);
      const double lo = pricer.step_s(p.placement, n, 0, v.slots);
      if (hi > 0) p.predicted_ms_low = p.predicted_ms * lo / hi;
    }
    p.sub_ms = pricer.sub_ms(p.placement, n);
    ps.tiers.push_back(std::move(p));
  }
  ps.ttft_ms = cand.ttft_ms;
  ps.decode_tok_s = 1e3 / ps.tiers.front().predicted_ms;
  ps.scenario_ms = cand.objective;
  ps.first_decode_extra_ms = cand.first_decode_extra_ms;
  return ps;
}

// The best plan of each ring depth tried (K = 0, no ring, left out).
std::vector<RingChoice> ring_choices(const std::map<int32_t, const Candidate*>& by_depth, const PlannerOptions& o) {
  std::vector<RingChoice> out;
  for (const auto& [k, c] : by_depth) {
    if (k == 0) continue;
    RingChoice rc;
    rc.slots = k;
    rc.scenario_ms = c->objective;
    rc.decode_ms = (c->objective - c->ttft_ms - c->first_decode_extra_ms) / std::max(1, o.gen_tokens);
    out.push_back(rc);
  }
  return out;
}

// With a GPU: the phases of resident_choice.h, then the chosen candidate's PlanSet with notes on how it
// was chosen.
Expected<PlanSet> plan_with_gpu(const PlacementPricer& pricer, const HardwareProfile& profile) {
  const PlannerOptions& o = pricer.options();
  std::vector<std::string> notes;
  FERRY_RETURN_IF_ERROR(check_budget(profile, o, &notes));
  const std::vector<RingVariant> variants = detail::ring_variants(pricer);
  std::vector<Candidate> candidates = detail::resident_candidates(pricer, variants);
  detail::score_candidates(pricer, candidates);
  const detail::FastestCandidates fastest = detail::fastest_candidates(candidates);
  if (!fastest.overall) return below_minimum(pricer, detail::smallest_variant(variants));
  Candidate* picked = detail::robust_choice(pricer, candidates, fastest.overall);
  std::optional<Candidate> grown = detail::grow_into_budget(pricer, *picked);
  Candidate& chosen = grown ? *grown : *picked;

  PlanSet ps = plan_of_candidate(pricer, chosen);
  ps.ring_auto = o.ring_slots == 0;
  if (grown) {
    char note[200];
    std::snprintf(note, sizeof note,
                  "grown into the budget's rest: %s more resident at the same decode strategy (%s -> %s)",
                  format_bytes(grown->need - picked->need).c_str(), format_bytes(picked->need).c_str(),
                  format_bytes(grown->need).c_str());
    notes.push_back(note);
  }
  if (picked != fastest.overall) {
    const Candidate& f = *fastest.overall;
    char note[320];
    std::snprintf(note, sizeof note,
                  "robust choice: K=%d (%.2f ms of copies a step, scenario %.0f ms) over K=%d (%.2f ms, "
                  "%.0f ms, %.1f%% faster): copies least certain; %.0f%% ties: shallower K",
                  picked->variant->slots, detail::decode_copy_ms(pricer, *picked), picked->objective,
                  f.variant->slots, detail::decode_copy_ms(pricer, *fastest.overall), f.objective,
                  (1 - f.objective / picked->objective) * 100, o.score_tie * 100);
    notes.push_back(note);
  }
  ps.ring_choices = ring_choices(fastest.by_depth, o);
  ps.notes = std::move(notes);
  ps.min_budget = detail::smallest_variant(variants).min_budget();
  ps.gpu = true;
  ps.gpu_name = profile.gpu->name;
  return ps;
}

// What every plan states about its inputs and sub-layers, and the weights it reads per decode step.
void describe_inputs(PlanSet& ps, const PlacementPricer& pricer, const HardwareProfile& profile) {
  const ModelSpec& spec = pricer.spec();
  const PlannerOptions& o = pricer.options();
  ps.model = spec.name;
  ps.n_layer = spec.n_layer;
  ps.options = o;
  ps.eval_context = pricer.eval_context();
  ps.cpu_threads = pricer.cost_model().cpu_threads();
  ps.profile_source = profile.source;
  ps.profile_fingerprint = profile.machine.fingerprint();
  ps.cuda_context_bytes = ps.gpu ? o.cuda_context_bytes : 0;
  for (size_t i = 0; i < pricer.size(); ++i) {
    const SubLayer& sub = pricer.sublayer(i);
    SubLayerSummary s;
    s.label = sub.label();
    s.kind = sub.kind;
    s.layer = sub.layer;
    s.slice = sub.n_slices > 1 ? sub.slice : -1;
    s.bytes = pricer.matrix_bytes()[i];
    s.vector_bytes = pricer.vector_bytes()[i];
    s.streamable = ps.ring_slots > 0 && !pricer.is_embed(i) && s.bytes > 0 && s.bytes <= ps.ring_slot_bytes;
    ps.sublayers.push_back(std::move(s));
    if (pricer.is_embed(i)) continue;
    ps.weights_total += pricer.matrix_bytes()[i];
    if (ps.resident[i]) ps.weights_resident += pricer.matrix_bytes()[i];
  }
}

// Bytes of sub-layer i a one-token step reads: all of a dense sub-layer's, the routed share of an expert
// group's (SubLayer::weight_bytes_read), in the pricer's (aligned) matrix bytes.
double decode_bytes(const PlacementPricer& pricer, size_t i) {
  const model::SubLayer& sub = pricer.sublayer(i);
  const double all = static_cast<double>(pricer.matrix_bytes()[i]);
  if (sub.kind != model::SubLayerKind::kExperts || sub.weight_bytes == 0) return all;
  return all * sub.weight_bytes_read(pricer.spec(), 1) / static_cast<double>(sub.weight_bytes);
}

// The decode ceilings: (W - R) / H, (W - R) / (C + P), and the serial one (PlanSet::limit_serial_ms), with W - R
// the bytes a token reads outside the device (a mixture of experts' routed share only).
void decode_limits(PlanSet& ps, const PlacementPricer& pricer) {
  const CostModel& cm = pricer.cost_model();
  double rest = 0;
  for (size_t i = 0; i < ps.resident.size() && i < pricer.matrix_bytes().size(); ++i)
    if (!ps.resident[i] && !pricer.is_embed(i)) rest += decode_bytes(pricer, i);
  ps.limit_h_ms = rest / (cm.host_combined_gbs() * 1e9) * 1e3;
  ps.limit_cp_ms = rest / ((cm.host_bw_gbs() + cm.link_gbs()) * 1e9) * 1e3;
  ps.limit_serial_ms = ps.limit_h_ms;
  if (ps.tiers.empty() || cm.host_combined_gbs() <= 0) return;
  const Plan& d = ps.tiers.front();  // tier 1: decode
  double cpu_bytes = 0, gpu_ms = 0;
  for (size_t i = 0; i < d.placement.size(); ++i)
    if (d.placement[i] == Placement::kCpu && !pricer.is_embed(i)) cpu_bytes += decode_bytes(pricer, i);
  // The GPU's compute that cannot overlap the CPU: all of it but the device slices of FFNs split
  // between the two (SimItem::group), which run beside the CPU's slices.
  for (const SimItem& it : pricer.items(d.placement, 1, pricer.eval_context()))
    if (it.on_gpu && it.group < 0) gpu_ms += it.compute_s * 1e3;
  ps.limit_serial_ms = std::max(ps.limit_h_ms, cpu_bytes / (cm.host_combined_gbs() * 1e9) * 1e3 + gpu_ms);
}

}  // namespace

Expected<PlanSet> Planner::plan(const ModelSpec& spec, const std::vector<SubLayer>& subs) const {
  const int32_t want = options_.ffn_slices;
  if (want < 0 || want > 64)
    return make_error(ErrorCode::kInvalidArgument, "FFN slices must be 0 (the planner chooses) or 1..64 (got %d)", want);
  bool sliceable = spec.n_expert == 0 && want != 1;
  for (const SubLayer& s : subs) sliceable &= s.n_slices <= 1;  // a list already cut is planned as it is
  auto tag = [](Expected<PlanSet> ps, int32_t slices) {
    if (ps) ps->ffn_slices = slices;
    return ps;
  };
  if (!sliceable) return tag(plan_staging(spec, subs, options_), 1);
  const int32_t n = want == PlannerOptions::kFfnSlicesAuto ? PlannerOptions::kFfnSlicesTry : want;
  FERRY_ASSIGN_OR_RETURN(std::vector<SubLayer> cut, model::slice_ffn_sublayers(spec, subs, n));
  if (want != PlannerOptions::kFfnSlicesAuto) return tag(plan_staging(spec, cut, options_), n);
  Expected<PlanSet> whole = tag(plan_staging(spec, subs, options_), 1);
  // Nothing to gain without a GPU or with every weight resident.
  if (whole && (!whole->gpu || whole->weights_resident >= whole->weights_total)) return whole;
  if (!whole && whole.status().code() != ErrorCode::kOutOfMemory) return whole;
  Expected<PlanSet> sliced = tag(plan_staging(spec, cut, options_), n);
  if (!sliced) return whole ? std::move(whole) : std::move(sliced);
  if (!whole) return sliced;
  // The smaller budget that works is still the whole FFNs' where the slices need more (their minimum
  // holds the ring of the largest attention either way).
  const uint64_t min_budget = std::min(whole->min_budget, sliced->min_budget);
  whole->min_budget = sliced->min_budget = min_budget;
  // The same robust rule as between the candidates of one list: within copy_window of the faster
  // scenario, each pays copy_risk per ms of its decode step's weight copies. Sliced lists stream
  // more often (their smaller slots fit the ring), and hidden copies are the least certain part of a
  // prediction (bench/RESULTS.md has the measurements).
  auto decode_copies_ms = [](const PlanSet& ps) {
    const Plan& d = ps.tiers.front();
    for (const StrategyEstimate& e : d.candidates)
      if (e.feasible && e.strategy == d.strategy) return e.copy_ms;
    return 0.0;
  };
  const PlanSet& fast = sliced->scenario_ms < whole->scenario_ms ? *sliced : *whole;
  auto score = [&](const PlanSet& ps) {
    if (ps.scenario_ms > fast.scenario_ms * (1 + options_.copy_window)) return ps.scenario_ms * 2;  // out of the window
    return ps.scenario_ms + options_.gen_tokens * options_.copy_risk * decode_copies_ms(ps);
  };
  if (score(*sliced) < score(*whole)) return sliced;
  return whole;
}

Expected<PlanSet> Planner::plan_staging(const ModelSpec& spec, const std::vector<SubLayer>& subs,
                                        const PlannerOptions& o) const {
  if (o.gemm_staging_bytes != PlannerOptions::kGemmStagingAuto) return plan_once(spec, subs, o);
  PlannerOptions whole_o = o, small_o = o;
  whole_o.gemm_staging_bytes = 0;
  small_o.gemm_staging_bytes = PlannerOptions::kGemmStagingSmall;
  Expected<PlanSet> whole = plan_once(spec, subs, whole_o);
  // Nothing to gain: no GPU, no quantized matrix (no staging at all), or every weight already resident.
  // The minimum budget is still the small staging's: every variant's fixed part holds the staging.
  const detail::GemmShapes g = detail::gemm_shapes(subs);
  if (!g.quantized) return whole;
  if (whole && (!whole->gpu || whole->weights_resident >= whole->weights_total)) {
    const uint64_t saved = detail::gemm_staging_need(g, 0) - detail::gemm_staging_need(g, small_o.gemm_staging_bytes);
    whole->min_budget = whole->min_budget > saved ? whole->min_budget - saved : 0;
    return whole;
  }
  if (!whole && whole.status().code() != ErrorCode::kOutOfMemory) return whole;
  Expected<PlanSet> small = plan_once(spec, subs, small_o);
  if (!small) return whole ? std::move(whole) : std::move(small);
  if (!whole) return small;  // only the small staging fits the budget
  // The smallest budget with a plan is the small staging's (it is what this planner would use there).
  whole->min_budget = std::min(whole->min_budget, small->min_budget);
  // The cost model does not see all of the smaller GEMMs' prefill cost (more, smaller dequantize + GEMM
  // pairs), so the small staging must buy a clearly faster decode step with more weights on the GPU.
  const bool more_weights =
      small->arena.weights + small->arena.ring > whole->arena.weights + whole->arena.ring;
  if (more_weights && !small->tiers.empty() && !whole->tiers.empty() &&
      small->tiers.front().predicted_ms < 0.97 * whole->tiers.front().predicted_ms)
    return small;
  return whole;
}

Expected<PlanSet> Planner::plan_once(const ModelSpec& spec, const std::vector<SubLayer>& subs,
                                     const PlannerOptions& o) const {
  FERRY_RETURN_IF_ERROR(check_options(subs, o));
  FERRY_RETURN_IF_ERROR(validate_profile(profile_));
  const CostModel cm = detail::make_cost_model(profile_, o);
  const PlacementPricer pricer(cm, spec, subs, o);
  PlanSet ps;
  if (cm.has_gpu()) {
    FERRY_ASSIGN_OR_RETURN(ps, plan_with_gpu(pricer, profile_));
  } else {
    ps = plan_without_gpu(pricer);
  }
  describe_inputs(ps, pricer, profile_);
  decode_limits(ps, pricer);
  for (std::string& n : cm.notes_for(subs)) ps.notes.push_back(std::move(n));
  if (profile_.source == "estimated") ps.notes.push_back("profile is estimated, not measured: run `ferry profile`");
  return ps;
}

double predicted_at(const Plan& p, int32_t eval_context, double c) {
  if (eval_context <= 0) return p.predicted_ms;
  return p.predicted_ms_low + (p.predicted_ms - p.predicted_ms_low) * c / eval_context;
}

Expected<double> predict_step_ms(const HardwareProfile& profile, const PlannerOptions& options, const ModelSpec& spec,
                                 const std::vector<SubLayer>& subs, const std::vector<Placement>& placement,
                                 int32_t tokens, int32_t ring_slots) {
  FERRY_RETURN_IF_ERROR(validate_profile(profile));
  if (placement.size() != subs.size())
    return make_error(ErrorCode::kInvalidArgument, "placement has %zu entries for %zu sub-layers", placement.size(),
                      subs.size());
  if (tokens < 1 || ring_slots < 1) return make_error(ErrorCode::kInvalidArgument, "tokens and ring slots must be >= 1");
  const CostModel cm = detail::make_cost_model(profile, options);
  for (Placement p : placement)
    if (p != Placement::kCpu && !cm.has_gpu())
      return make_error(ErrorCode::kInvalidArgument, "the profile has no GPU: every sub-layer must be on the CPU");
  const PlacementPricer pricer(cm, spec, subs, options);
  return pricer.step_s(placement, tokens, pricer.eval_context(), ring_slots) * 1e3;
}

Expected<StepsSimulation> simulate_steps(const HardwareProfile& profile, const PlannerOptions& options,
                                         const ModelSpec& spec, const std::vector<SubLayer>& subs,
                                         const std::vector<std::vector<Placement>>& placements,
                                         const std::vector<int32_t>& tokens, int32_t ring_slots) {
  FERRY_RETURN_IF_ERROR(validate_profile(profile));
  if (placements.size() != tokens.size())
    return make_error(ErrorCode::kInvalidArgument, "%zu placements for %zu token counts", placements.size(),
                      tokens.size());
  if (ring_slots < 1) return make_error(ErrorCode::kInvalidArgument, "ring slots must be >= 1");
  const CostModel cm = detail::make_cost_model(profile, options);
  const PlacementPricer pricer(cm, spec, subs, options);
  StepsSimulation out;
  for (size_t s = 0; s < placements.size(); ++s) {
    if (placements[s].size() != subs.size())
      return make_error(ErrorCode::kInvalidArgument, "step %zu: placement has %zu entries for %zu sub-layers", s,
                        placements[s].size(), subs.size());
    if (tokens[s] < 1) return make_error(ErrorCode::kInvalidArgument, "step %zu: tokens must be >= 1", s);
    for (Placement p : placements[s])
      if (p != Placement::kCpu && !cm.has_gpu())
        return make_error(ErrorCode::kInvalidArgument, "the profile has no GPU: every sub-layer must be on the CPU");
    out.items.push_back(pricer.items(placements[s], tokens[s], pricer.eval_context()));
  }
  out.result = simulate(out.items, pricer.sim_params(ring_slots));
  return out;
}

std::string format_bytes(uint64_t bytes) {
  char b[32];
  const double x = static_cast<double>(bytes);
  if (x >= 1024.0 * 1024 * 1024) std::snprintf(b, sizeof b, "%.2f GiB", x / (1024.0 * 1024 * 1024));
  else if (x >= 1024.0 * 1024) std::snprintf(b, sizeof b, "%.0f MiB", x / (1024.0 * 1024));
  else if (x >= 1024.0) std::snprintf(b, sizeof b, "%.0f KiB", x / 1024.0);
  else std::snprintf(b, sizeof b, "%llu B", static_cast<unsigned long long>(bytes));
  return b;
}

}  // namespace ferry::plan
