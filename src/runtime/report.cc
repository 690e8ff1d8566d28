// The executor's reports (report.h): text, JSON, limit fractions and timeline recording.
#include "runtime/report.h"

#include <cstdio>
#include <string>
#include <vector>

#include "plan/planner.h"
#include "plan/profile_check.h"
#include "runtime/profile_source.h"

namespace ferry::runtime {

namespace {

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

LimitFractions limit_fractions(const HybridState& s) {
  LimitFractions f;
  if (!s.runner) return f;
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

std::string hybrid_report_text(const HybridState& s, const ProcessMemory& process, bool explain) {
  if (!s.runner) return "";
  exec::HybridRunner& r = *s.runner;
  const plan::PlanSet& ps = r.plan();
  std::string out;
  char line[768];
  const ProcessBudget& b = s.budget;
  auto mi = r.device().memory_info();
  if (mi) {
    std::snprintf(line, sizeof line,
                  "device: %s (%s) | budget %s = CUDA context %s (%s) + reserve %s + arena %s | arena peak %s | "
                  "process peak %s (%s)\n",
                  r.device().name().c_str(), s.device.c_str(), mib(b.budget).c_str(), mib(b.context_bytes).c_str(),
                  b.context_source.c_str(), mib(b.growth_reserve).c_str(), mib(mi->arena_capacity).c_str(),
                  mib(mi->arena_peak).c_str(), mib(process.peak_bytes).c_str(), process.source.c_str());
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
    std::snprintf(line, sizeof line,
                  "pin (%s): %s registered in place in %d ranges, %s copied into %d pinned buffers; %.2f s (%d threads; "
                  "alloc/register %.2f + copy %.2f thread-s)\n",
                  exec::pin_mode_name(pin.mode), mib(pin.registered_bytes).c_str(), pin.registered_ranges,
                  mib(pin.bytes - pin.registered_bytes).c_str(), pin.ranges - pin.registered_ranges, pin.seconds,
                  pin.threads, pin.alloc_s, pin.copy_s);
    out += line;
    if (!pin.note.empty()) out += "pin: note: " + pin.note + "\n";
  }
  if (pin.released_bytes > 0) {
    std::snprintf(line, sizeof line, "host: %s of the model's mapping handed back to the page cache after load "
                  "(resident weights, and streamed ones copied into pinned memory that the CPU never computes)\n",
                  mib(pin.released_bytes).c_str());
    out += line;
  }
  const exec::ExpertCacheGeometry& cg = r.expert_cache_geometry();
  if (cg.slots > 0) {
    const exec::ExpertCacheStats& cs = r.expert_cache_stats();
    std::snprintf(line, sizeof line,
                  "expert cache: %d experts a layer x %d layers (%s) | hit rate %.1f %% (%lld of %lld CPU-placed picks "
                  "on the device) | %lld promotions (%s copied)\n",
                  cg.slots, cg.n_layers, mib(cg.bytes()).c_str(), 100.0 * cs.hit_rate(),
                  static_cast<long long>(cs.hits), static_cast<long long>(cs.lookups),
                  static_cast<long long>(cs.promotions), mib(cs.promoted_bytes).c_str());
    out += line;
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
    const bool off = plan::cpu_time_off(*cv);
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

nlohmann::json hybrid_report_json(const HybridState& s, const ProcessMemory& process) {
  nlohmann::json j = nlohmann::json::object();
  if (!s.runner) return j;
  exec::HybridRunner& r = *s.runner;
  const plan::PlanSet& ps = r.plan();
  j["device"] = s.device;
  j["device_name"] = r.device().name();
  // The budget is the whole process: context (measured or modelled) + growth reserve + arena.
  j["vram_budget"] = s.budget.budget;
  j["context_bytes"] = s.budget.context_bytes;
  j["context_source"] = s.budget.context_source;
  j["growth_reserve"] = s.budget.growth_reserve;
  j["vram_peak_process_bytes"] = process.peak_bytes;
  j["vram_peak_process_source"] = process.source;
  auto mi = r.device().memory_info();
  if (mi) {
    j["arena_peak"] = mi->arena_peak;
    j["arena_capacity"] = mi->arena_capacity;
    j["outside_arena"] = mi->outside_arena;  // device memory in use outside the arena (total - free - arena)
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
              {"registered_ranges", pin.registered_ranges}, {"registered_bytes", pin.registered_bytes},
              {"released_bytes", pin.released_bytes}, {"note", pin.note}};
  if (r.expert_cache_geometry().slots > 0) {
    const exec::ExpertCacheGeometry& cg = r.expert_cache_geometry();
    const exec::ExpertCacheStats& cs = r.expert_cache_stats();
    j["expert_cache"] = {{"slots_per_layer", cg.slots}, {"layers", cg.n_layers}, {"bytes", cg.bytes()},
                         {"lookups", cs.lookups}, {"hits", cs.hits}, {"hit_rate", cs.hit_rate()},
                         {"promotions", cs.promotions}, {"promoted_bytes", cs.promoted_bytes}};
  }
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
  if (!s.runner)
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
  t.title = title + " | " + r.name() + " | budget " + mib(s.budget.budget) + " | resident " + mib(ps.weights_resident) +
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

}  // namespace ferry::runtime
