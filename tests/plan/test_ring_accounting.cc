// The simulation's fill accounting against the executor's: for hand-made plans of a tiny model (N
// FFNs streamed through K slots, the prompt tier streaming another set), the HybridRunner on the
// emulated device and plan::simulate_steps over the same steps agree exactly on the copies and hits
// of every tier (exec::TierStats: the end-of-step prefetch's copies are hits of the next step, not
// copies). Includes the qwen3-8b Q4_K 4 GiB pattern: 3 streamed with K = 2 (one copy + two hits per
// decode step, and one prefetch copy), K = 3 (all hits) and K = 4.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "exec/device.h"
#include "exec/hybrid_runner.h"
#include "format/gguf.h"
#include "model/model_spec.h"
#include "model/sublayer.h"
#include "model/tiny_model.h"
#include "model/weights.h"
#include "plan/planner.h"
#include "plan/profile.h"
#include "plan_fixtures.h"

namespace ferry::plan {
namespace {

constexpr int32_t kCells = 64;
constexpr int32_t kBatch = 16;
constexpr int32_t kPrompt = 13;  // one step of tier 16

struct Loaded {
  std::unique_ptr<gguf::ModelFile> file;
  model::ModelSpec spec;
  model::ModelWeights weights;
  std::vector<model::SubLayer> subs;
};

std::unique_ptr<Loaded> load(const testing::TempDir& dir) {
  testing::TinyModel m;
  m.n_layer = 8;
  const std::string path = dir.file("llama8.gguf");
  EXPECT_TRUE(write_tiny_model(m, path).is_ok());
  auto l = std::make_unique<Loaded>();
  auto f = gguf::ModelFile::open(path);
  if (!f) return nullptr;
  l->file = std::move(*f);
  l->spec = *model::ModelSpec::from_gguf(*l->file);
  l->weights = *model::bind_weights(l->spec, *l->file);
  l->subs = *model::build_sublayers(l->spec, *l->file);
  return l;
}

HardwareProfile host() {
  auto p = load_profile(fixtures::source_dir() + "/tests/data/profiles/h200-host.json");
  EXPECT_TRUE(p.has_value()) << p.status().message();
  return *p;
}

PlannerOptions options() {
  PlannerOptions o;
  o.vram_budget = 1ull << 30;
  o.context = kCells;
  o.batch = kBatch;
  o.cpu_threads = 1;
  o.prompt_tokens = kPrompt;
  o.gen_tokens = 8;
  o.workspace_bytes = 0;
  return o;
}

// Indices of the FFN sub-layers of layers `layers`.
std::vector<size_t> ffns(const std::vector<model::SubLayer>& subs, const std::vector<int32_t>& layers) {
  std::vector<size_t> out;
  for (size_t i = 0; i < subs.size(); ++i)
    if (subs[i].kind == model::SubLayerKind::kFfn &&
        std::find(layers.begin(), layers.end(), subs[i].layer) != layers.end())
      out.push_back(i);
  return out;
}

// A PlanSet from the planner's, re-placed by hand: tier 1 streams `decode`, every larger tier streams
// `prompt` (the other non-resident FFNs on the CPU), everything else resident; K slots.
PlanSet hand_plan(const Loaded& l, int32_t K, const std::vector<size_t>& decode, const std::vector<size_t>& prompt) {
  PlannerOptions o = options();
  o.ring_slots = K;
  auto planned = Planner(host(), o).plan(l.spec, l.subs);
  EXPECT_TRUE(planned.has_value()) << planned.status().message();
  PlanSet ps = *planned;
  std::set<size_t> moving(decode.begin(), decode.end());
  moving.insert(prompt.begin(), prompt.end());
  uint64_t slot = 0;
  for (size_t i : moving) slot = std::max(slot, ps.sublayers[i].bytes);
  ps.ring_slots = K;
  ps.ring_slot_bytes = std::max(ps.ring_slot_bytes, slot);
  const size_t m = l.subs.size();
  ps.resident.assign(m, false);
  for (size_t i = 0; i < m; ++i)
    ps.resident[i] = l.subs[i].kind != model::SubLayerKind::kEmbed && !moving.count(i);
  for (Plan& t : ps.tiers) {
    const std::vector<size_t>& streamed = t.tokens == 1 ? decode : prompt;
    t.strategy = Strategy::kDynamic;
    t.placement.assign(m, Placement::kResident);
    for (size_t i = 0; i < m; ++i) {
      if (l.subs[i].kind == model::SubLayerKind::kEmbed || moving.count(i)) t.placement[i] = Placement::kCpu;
      if (std::find(streamed.begin(), streamed.end(), i) != streamed.end()) t.placement[i] = Placement::kStreamed;
    }
  }
  return ps;
}

struct Counts {
  int64_t copies = 0, hits = 0, prefetch = 0;  // prefetch: end-of-step prefetch copies (TierStats::prefetch_copies)
  bool operator==(const Counts& o) const { return copies == o.copies && hits == o.hits && prefetch == o.prefetch; }
};

// Runs a prompt of kPrompt tokens (tier 16; skipped when decode_only) then `decode` steps of one
// token; returns the counts of tier 16 and tier 1.
std::pair<Counts, Counts> run_executor(const Loaded& l, const PlanSet& ps, int decode, bool decode_only) {
  exec::EmulatedOptions eo;
  eo.budget = 1ull << 30;
  eo.require_pinned = true;
  auto dev = exec::make_emulated_device(eo);
  EXPECT_TRUE(dev.has_value());
  exec::HybridOptions ho;
  ho.n_cells = kCells;
  ho.n_batch = kBatch;
  ho.cpu_threads = 1;
  auto r = exec::HybridRunner::create(l.spec, l.weights, l.subs, ps, std::move(*dev), ho);
  EXPECT_TRUE(r.has_value()) << r.status().message();
  if (!r) return {};
  std::vector<int32_t> cell_pos(kCells, -1), cell_seq(kCells, -1);
  std::vector<float> logits(static_cast<size_t>(kBatch) * l.spec.n_vocab);
  int32_t next = 0;
  auto step = [&](int32_t n) {
    std::vector<int32_t> toks(n), pos(n), seq(n, 0), cell(n);
    for (int32_t i = 0; i < n; ++i) {
      toks[i] = (37 * (next + i) + 5) % l.spec.n_vocab;
      pos[i] = cell[i] = next + i;
      cell_pos[next + i] = next + i;
      cell_seq[next + i] = 0;
    }
    next += n;
    int32_t row = n - 1;
    exec::StepIo io;
    io.n_tokens = n;
    io.tokens = toks.data();
    io.pos = pos.data();
    io.seq = seq.data();
    io.cell = cell.data();
    io.cell_pos = cell_pos.data();
    io.cell_seq = cell_seq.data();
    io.n_cells_scan = next;
    io.out_rows = &row;
    io.n_out = 1;
    Status st = (*r)->run(io, logits.data());
    EXPECT_TRUE(st.is_ok()) << st.message();
  };
  if (!decode_only) step(kPrompt);
  for (int d = 0; d < decode; ++d) step(1);
  Counts prompt_c, decode_c;
  for (const exec::TierStats& t : (*r)->stats()) {
    Counts& c = t.tokens == 1 ? decode_c : prompt_c;
    c.copies += t.copies;
    c.hits += t.prefetch_hits;
    c.prefetch += t.prefetch_copies;
  }
  return {prompt_c, decode_c};
}

std::pair<Counts, Counts> run_simulation(const Loaded& l, const PlanSet& ps, int decode, bool decode_only,
                                         std::vector<SimStepCounts>* per_step) {
  std::vector<std::vector<Placement>> pls;
  std::vector<int32_t> toks;
  if (!decode_only) {
    pls.push_back(ps.tiers.back().placement);
    toks.push_back(kPrompt);
  }
  for (int d = 0; d < decode; ++d) {
    pls.push_back(ps.tiers.front().placement);
    toks.push_back(1);
  }
  auto sim = simulate_steps(host(), options(), l.spec, l.subs, pls, toks, ps.ring_slots);
  EXPECT_TRUE(sim.has_value()) << sim.status().message();
  if (!sim) return {};
  Counts prompt_c, decode_c;
  for (size_t s = 0; s < toks.size(); ++s) {
    Counts& c = toks[s] == 1 ? decode_c : prompt_c;
    c.copies += sim->result.counts[s].copies;
    c.hits += sim->result.counts[s].hits;
    c.prefetch += sim->result.counts[s].prefetch_copies;
  }
  *per_step = sim->result.counts;
  return {prompt_c, decode_c};
}

TEST(RingAccounting, SimulationCountsWhatTheExecutorCounts) {
  testing::TempDir dir;
  auto l = load(dir);
  ASSERT_TRUE(l);
  struct Case {
    int32_t K;
    std::vector<int32_t> decode, prompt;  // layers whose FFN streams
  };
  const std::vector<Case> cases = {
      {2, {1, 3, 5}, {1, 2, 3, 5, 7}},  // the qwen3 4 GiB pattern: 3 streamed
      {3, {1, 3, 5}, {1, 2, 3, 5, 7}},
      {4, {1, 3, 5}, {1, 2, 3, 5, 7}},
      {2, {1, 2, 3, 4, 5, 6, 7}, {1, 2, 3, 4, 5, 6, 7}},
      {3, {0, 2, 4, 6}, {1, 3, 5, 7}},  // the prompt tier streams other sub-layers
      {4, {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}},  // one more than K: one copy a step
      {6, {0, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5, 6}},
      {2, {4}, {4}},
  };
  constexpr int kDecode = 5;
  for (const Case& c : cases) {
    for (bool decode_only : {false, true}) {
      const PlanSet ps = hand_plan(*l, c.K, ffns(l->subs, c.decode), ffns(l->subs, c.prompt));
      const std::string what = "K=" + std::to_string(c.K) + " decode streams " + std::to_string(c.decode.size()) +
                               (decode_only ? ", decode only" : ", after a prompt");
      std::vector<SimStepCounts> steps;
      const auto [ep, ed] = run_executor(*l, ps, kDecode, decode_only);
      const auto [sp, sd] = run_simulation(*l, ps, kDecode, decode_only, &steps);
      EXPECT_EQ(ep.copies, sp.copies) << what << ": prompt copies";
      EXPECT_EQ(ep.hits, sp.hits) << what << ": prompt hits";
      EXPECT_EQ(ed.copies, sd.copies) << what << ": decode copies";
      EXPECT_EQ(ed.hits, sd.hits) << what << ": decode hits";
      EXPECT_EQ(ep.prefetch, sp.prefetch) << what << ": prefetch after the prompt";
      // Every fill of every decode step is a copy or a hit (the executor really streamed).
      EXPECT_EQ(ed.copies + ed.hits, kDecode * static_cast<int64_t>(c.decode.size())) << what;
      // Steady decode step (the previous one prefetched): N <= K streamed copy nothing; else the first
      // K hit, the other N - K are copied in the step, and the prefetch copies back the first K whose
      // slots those overwrote (min(K, N - K)).
      const int64_t n = static_cast<int64_t>(c.decode.size()), k = c.K;
      const SimStepCounts& steady = steps[steps.size() - 2];  // the last step has no prefetch
      EXPECT_EQ(steady.hits, std::min(n, k)) << what;
      EXPECT_EQ(steady.copies, std::max<int64_t>(0, n - k)) << what;
      EXPECT_EQ(steady.prefetch_copies, std::min(k, std::max<int64_t>(0, n - k))) << what;
      // The executor also prefetches after the last step (it cannot know none follows); the simulation
      // has no next step to prefetch for, so the executor counts one steady prefetch more.
      EXPECT_EQ(ed.prefetch, sd.prefetch + steady.prefetch_copies) << what << ": decode prefetches";
    }
  }
}

// The qwen3-8b Q4_K 4 GiB figures of the GPU host (48 decode steps after a 2-chunk prompt): K = 2 with
// 3 streamed counted 50 copies + 94 hits, K = 3 2 copies + 142 hits. The simulation's steady step.
TEST(RingAccounting, ThreeStreamedSteadyStep) {
  std::vector<SimItem> step;
  for (int32_t i = 0; i < 8; ++i) step.push_back(SimItem{true, i % 3 == 1, 0, 0.1, i % 3 == 1 ? 1.0 : 0.0, i});
  SimParams p;
  p.ring_slots = 2;
  SimResult r = simulate({step, step, step}, p);
  EXPECT_EQ(r.counts[1].copies, 1);  // the third streamed sub-layer, into slot 0
  EXPECT_EQ(r.counts[1].hits, 2);    // the first two: one stayed, one the prefetch brought back
  EXPECT_EQ(r.counts[1].prefetch_copies, 1);
  EXPECT_DOUBLE_EQ(r.step_copy_s[2], 2.0);  // two real copies a step
  p.ring_slots = 3;
  r = simulate({step, step, step}, p);
  EXPECT_EQ(r.counts[1].copies, 0);
  EXPECT_EQ(r.counts[1].hits, 3);
  EXPECT_EQ(r.counts[1].prefetch_copies, 0);
  EXPECT_DOUBLE_EQ(r.step_copy_s[2], 0.0);
}

}  // namespace
}  // namespace ferry::plan
