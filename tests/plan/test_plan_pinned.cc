// Pinned plans: the whole PlanSet (every field the planner decides, at full precision) of a few model /
// profile / budget cases, compared with the copy stored in tests/plan/data/pinned_plans/. A refactor of
// the planner must leave these identical; a deliberate change of the planner's choices updates them.
//
// On a mismatch (or a missing file) the test writes what it planned to <name>.actual.json in the
// working directory and says where; after checking the difference, copy that file over the stored one.
// Numbers compare to a relative 1e-9 (libm may differ in the last bits between machines); strings,
// integers, booleans and the structure compare exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "plan/planner.h"
#include "plan_fixtures.h"

namespace ferry::plan {
namespace {

using json = nlohmann::ordered_json;
constexpr uint64_t GiB = 1ull << 30;

std::string placement_string(const std::vector<Placement>& pl) {
  std::string s;
  for (Placement p : pl) s += p == Placement::kResident ? 'R' : p == Placement::kStreamed ? 'S' : 'C';
  return s;
}

json vram(const VramBreakdown& v) {
  return json{{"weights", v.weights}, {"kv", v.kv},           {"ring", v.ring},
              {"scratch", v.scratch}, {"workspace", v.workspace}, {"total", v.total}};
}

// Everything in a PlanSet that the planner computes (options echo what was asked, so only the resolved
// GEMM staging and FFN slices are kept).
json pin(const PlanSet& ps) {
  json j;
  j["model"] = ps.model;
  j["n_layer"] = ps.n_layer;
  j["gemm_staging_bytes"] = ps.options.gemm_staging_bytes;
  j["eval_context"] = ps.eval_context;
  j["cpu_threads"] = ps.cpu_threads;
  j["gpu"] = ps.gpu;
  j["gpu_name"] = ps.gpu_name;
  j["ffn_slices"] = ps.ffn_slices;
  j["ring_slots"] = ps.ring_slots;
  j["ring_auto"] = ps.ring_auto;
  j["ring_slot_bytes"] = ps.ring_slot_bytes;
  json depths = json::array();
  for (const RingChoice& c : ps.ring_choices)
    depths.push_back(json{{"slots", c.slots}, {"scenario_ms", c.scenario_ms}, {"decode_ms", c.decode_ms}});
  j["ring_choices"] = depths;
  j["min_budget"] = ps.min_budget;
  j["arena"] = vram(ps.arena);
  j["cuda_context_bytes"] = ps.cuda_context_bytes;
  std::string resident;
  for (bool r : ps.resident) resident += r ? '1' : '0';
  j["resident"] = resident;
  json subs = json::array();
  for (const SubLayerSummary& s : ps.sublayers)
    subs.push_back(json{{"label", s.label}, {"kind", static_cast<int>(s.kind)}, {"layer", s.layer},
                        {"slice", s.slice}, {"bytes", s.bytes}, {"vector_bytes", s.vector_bytes},
                        {"streamable", s.streamable}});
  j["sublayers"] = subs;
  j["ttft_ms"] = ps.ttft_ms;
  j["decode_tok_s"] = ps.decode_tok_s;
  j["scenario_ms"] = ps.scenario_ms;
  j["first_decode_extra_ms"] = ps.first_decode_extra_ms;
  j["weights_total"] = ps.weights_total;
  j["weights_resident"] = ps.weights_resident;
  j["limit_h_ms"] = ps.limit_h_ms;
  j["limit_cp_ms"] = ps.limit_cp_ms;
  j["limit_serial_ms"] = ps.limit_serial_ms;
  j["notes"] = ps.notes;
  json tiers = json::array();
  for (const Plan& p : ps.tiers) {
    json t;
    t["tokens"] = p.tokens;
    t["strategy"] = strategy_name(p.strategy);
    t["predicted_ms"] = p.predicted_ms;
    t["predicted_ms_low"] = p.predicted_ms_low;
    t["placement"] = placement_string(p.placement);
    t["sub_ms"] = p.sub_ms;
    t["vram"] = vram(p.vram);
    json cands = json::array();
    for (const StrategyEstimate& e : p.candidates)
      cands.push_back(json{{"strategy", strategy_name(e.strategy)}, {"feasible", e.feasible},
                           {"why_not", e.why_not}, {"step_ms", e.step_ms}, {"cpu_ms", e.cpu_ms},
                           {"gpu_ms", e.gpu_ms}, {"copy_ms", e.copy_ms}, {"xfer_ms", e.xfer_ms},
                           {"placement", placement_string(e.placement)}, {"n_cpu", e.n_cpu},
                           {"n_streamed", e.n_streamed}});
    t["candidates"] = cands;
    t["runner_up"] = p.runner_up;
    t["why_runner_up_lost"] = p.why_runner_up_lost;
    tiers.push_back(t);
  }
  j["tiers"] = tiers;
  return j;
}

// First difference between two JSON values (empty: equal within the tolerance), with its path.
std::string first_difference(const json& want, const json& got, const std::string& path) {
  if (want.is_number() && got.is_number() && (want.is_number_float() || got.is_number_float())) {
    const double a = want.get<double>(), b = got.get<double>();
    if (std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b)) + 1e-12) return "";
    std::ostringstream os;
    os.precision(17);
    os << path << ": stored " << a << ", planned " << b;
    return os.str();
  }
  if (want.is_number() && got.is_number())  // integers (signed and unsigned parse differently)
    return want.dump() == got.dump() ? "" : path + ": stored " + want.dump() + ", planned " + got.dump();
  if (want.type() != got.type()) return path + ": stored " + want.dump() + ", planned " + got.dump();
  if (want.is_object()) {
    if (want.size() != got.size()) return path + ": stored has " + std::to_string(want.size()) + " keys, planned " +
                                          std::to_string(got.size());
    for (auto it = want.begin(); it != want.end(); ++it) {
      if (!got.contains(it.key())) return path + "." + it.key() + ": missing";
      std::string d = first_difference(it.value(), got.at(it.key()), path + "." + it.key());
      if (!d.empty()) return d;
    }
    return "";
  }
  if (want.is_array()) {
    if (want.size() != got.size())
      return path + ": stored " + std::to_string(want.size()) + " items, planned " + std::to_string(got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      std::string d = first_difference(want[i], got[i], path + "[" + std::to_string(i) + "]");
      if (!d.empty()) return d;
    }
    return "";
  }
  return want == got ? "" : path + ": stored " + want.dump() + ", planned " + got.dump();
}

void expect_pinned(const std::string& name, const json& planned) {
  const std::string stored_path = fixtures::source_dir() + "/tests/plan/data/pinned_plans/" + name + ".json";
  std::ifstream in(stored_path);
  std::string diff;
  if (!in) {
    diff = "no stored plan at " + stored_path;
  } else {
    const json stored = json::parse(in, nullptr, /*allow_exceptions=*/false);
    diff = stored.is_discarded() ? stored_path + " is not JSON" : first_difference(stored, planned, name);
  }
  if (diff.empty()) return;
  const std::string actual = (std::filesystem::current_path() / (name + ".actual.json")).string();
  std::ofstream(actual) << planned.dump(1) << "\n";
  ADD_FAILURE() << diff << "\n(the plan made now is in " << actual << ")";
}

struct Case {
  model::ModelSpec spec;
  std::vector<model::SubLayer> subs;
};
Case make_case(const model::ModelSpec& spec, DType type) {
  Case c{spec, {}};
  c.subs = *model::build_sublayers(c.spec, model::uniform_tensor_types(type));
  return c;
}

void pin_plan(const std::string& name, const HardwareProfile& hw, const Case& c, const PlannerOptions& o) {
  auto ps = Planner(hw, o).plan(c.spec, c.subs);
  if (!ps) {
    expect_pinned(name, json{{"error", ps.status().message()}, {"code", static_cast<int>(ps.status().code())}});
    return;
  }
  expect_pinned(name, pin(*ps));
}

PlannerOptions options(uint64_t budget, int32_t context, int32_t batch = 1024) {
  PlannerOptions o;
  o.vram_budget = budget;
  o.context = context;
  o.batch = batch;
  return o;
}

HardwareProfile stored(const char* file) { return fixtures::stored_profile(std::string("tests/data/profiles/") + file); }

TEST(PinnedPlans, MinitronF16OnTheGpuHost) {
  pin_plan("minitron-f16-2g", stored("h200-host.json"), make_case(fixtures::minitron_8b(), DType::F16),
           options(2 * GiB, 4096));
}

// Grows the chosen set into the rest of the budget (PlanSet::notes says so).
TEST(PinnedPlans, MinitronF16GrownIntoTheBudget) {
  PlannerOptions o = options(2 * GiB, 4224, 512);
  o.prompt_tokens = 4096;
  pin_plan("minitron-f16-2g-4k-grown", stored("h200-host-s6.json"), make_case(fixtures::minitron_8b(), DType::F16), o);
}

// FFN slices (two per FFN), the GEMM staging chosen by the planner.
TEST(PinnedPlans, Qwen3Q4KSlicedStagingAuto) {
  PlannerOptions o = options(4 * GiB, 4224, 512);
  o.ffn_slices = 2;
  pin_plan("qwen3-q4k-4g-sliced", stored("h200-host-s6.json"), make_case(fixtures::qwen3_8b(), DType::Q4_K), o);
}

// A user's ring depth on a balanced synthetic machine (dynamic strategy at decode).
TEST(PinnedPlans, Qwen3Q4KBalancedUserRing) {
  fixtures::SynthHw hw;
  hw.cpu_bw = 60;
  hw.link = 50;
  PlannerOptions o = options(2 * GiB, 4096);
  o.ring_slots = 3;
  pin_plan("qwen3-q4k-2g-synth-k3", fixtures::synth_profile(hw), make_case(fixtures::qwen3_8b(), DType::Q4_K), o);
}

TEST(PinnedPlans, WholeModelFits) {
  pin_plan("qwen3-q4k-16g", stored("h200-host.json"), make_case(fixtures::qwen3_8b(), DType::Q4_K),
           options(16 * GiB, 4096));
}

TEST(PinnedPlans, NoGpu) {
  fixtures::SynthHw hw;
  hw.gpu = false;
  pin_plan("qwen3-q4k-cpu", fixtures::synth_profile(hw), make_case(fixtures::qwen3_8b(), DType::Q4_K),
           options(0, 2048, 512));
}

TEST(PinnedPlans, Moe) {
  model::ModelSpec s = fixtures::qwen3_8b();
  s.arch = model::Arch::kQwen3Moe;
  s.name = "moe";
  s.n_layer = 8;
  s.n_ff = 0;
  s.n_expert = 32;
  s.n_expert_used = 4;
  s.n_ff_expert = 1024;
  pin_plan("moe-q4k-1536m", stored("h200-host.json"), make_case(s, DType::Q4_K), options(1536ull << 20, 4096));
}

TEST(PinnedPlans, BelowTheMinimum) {
  pin_plan("minitron-f16-256m-error", stored("h200-host.json"), make_case(fixtures::minitron_8b(), DType::F16),
           options(256ull << 20, 4096));
}

}  // namespace
}  // namespace ferry::plan
