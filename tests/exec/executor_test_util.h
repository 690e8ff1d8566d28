// Helpers of the executor tests (test_executor*.cc): tiny models written to a temporary directory, a
// hybrid setup on the emulated device, scripted steps replayed on any runner, and the all-CPU runner's
// logits with the executor's tolerance.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/step_runner.h"
#include "exec/hybrid_runner.h"
#include "format/gguf.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/model_spec.h"
#include "model/sublayer.h"
#include "model/tiny_model.h"
#include "model/weights.h"
#include "plan/profile.h"

namespace ferry::exec_test {

using testing::TempDir;
using testing::TinyModel;

constexpr int32_t kCells = 64;
constexpr int32_t kBatch = 16;

inline TinyModel tiny(const std::string& arch, DType wtype = DType::F32) {
  TinyModel m;
  m.arch = arch;
  m.n_layer = 4;
  m.wtype = wtype;
  if (arch == "qwen2") m.tied = true;
  if (arch == "qwen3") m.head_dim = 32;
  if (arch == "gemma3") {
    m.n_layer = 6;
    m.n_kv_head = 1;
    m.head_dim = 32;
    m.sliding_window = 4;
    m.tied = true;
  }
  return m;
}

struct Loaded {
  std::unique_ptr<gguf::ModelFile> file;
  model::ModelSpec spec;
  model::ModelWeights weights;
  std::vector<model::SubLayer> subs;
};

// Opens a GGUF file with its spec, weights and sub-layers (expert groups of `options`).
inline std::unique_ptr<Loaded> load_file(const std::string& path, const model::SubLayerOptions& options = {}) {
  auto l = std::make_unique<Loaded>();
  auto f = gguf::ModelFile::open(path);
  EXPECT_TRUE(f.has_value()) << f.status().message();
  if (!f) return nullptr;
  l->file = std::move(*f);
  auto spec = model::ModelSpec::from_gguf(*l->file);
  EXPECT_TRUE(spec.has_value()) << spec.status().message();
  if (!spec) return nullptr;
  l->spec = *spec;
  auto w = model::bind_weights(l->spec, *l->file);
  EXPECT_TRUE(w.has_value()) << w.status().message();
  if (!w) return nullptr;
  l->weights = *w;
  auto subs = model::build_sublayers(l->spec, *l->file, options);
  EXPECT_TRUE(subs.has_value()) << subs.status().message();
  if (!subs) return nullptr;
  l->subs = *subs;
  return l;
}

inline std::unique_ptr<Loaded> load(const TempDir& dir, const TinyModel& m) {
  const std::string path = dir.file(m.arch + ".gguf");
  Status st = write_tiny_model(m, path);
  EXPECT_TRUE(st.is_ok()) << st.message();
  return load_file(path);
}

inline plan::HardwareProfile h200_profile() {
  auto p = plan::load_profile(std::string(FERRY_SOURCE_DIR) + "/tests/data/profiles/h200-host.json");
  EXPECT_TRUE(p.has_value()) << p.status().message();
  return p ? *p : plan::HardwareProfile{};
}

inline exec::HybridSetup setup_for(uint64_t budget, std::optional<plan::Strategy> force) {
  exec::HybridSetup s;
  s.vram_budget = budget;
  s.device = "emulated";
  s.profile = h200_profile();
  s.options.n_cells = kCells;
  s.options.n_batch = kBatch;
  s.options.cpu_threads = 1;
  s.options.force_strategy = force;
  s.prompt_tokens = 12;
  s.gen_tokens = 8;
  s.emulated.require_pinned = true;
  s.emulated.poison = true;
  s.emulated.copy_gbps = 2.0;
  return s;
}

// One sequence: a prompt of `prompt` tokens in one step (all rows want logits), then `decode` steps.
// Steps are replayed identically on any runner through `run`.
struct Script {
  std::vector<std::vector<int32_t>> steps;  // token ids per step
};
inline Script script(int prompt, int decode) {
  Script s;
  std::vector<int32_t> p;
  for (int i = 0; i < prompt; ++i) p.push_back((37 * i + 5) % 290);
  s.steps.push_back(p);
  for (int d = 0; d < decode; ++d) s.steps.push_back({(53 * d + 17) % 290});
  return s;
}

template <typename RunFn>
std::vector<float> replay(const Script& sc, int32_t n_vocab, RunFn run) {
  std::vector<int32_t> cell_pos(kCells, -1), cell_seq(kCells, -1);
  std::vector<float> all;
  int32_t next = 0;
  for (const auto& toks : sc.steps) {
    const int32_t n = static_cast<int32_t>(toks.size());
    std::vector<int32_t> pos(n), seq(n, 0), cell(n), rows(n);
    for (int32_t i = 0; i < n; ++i) {
      pos[i] = next + i;
      cell[i] = next + i;
      rows[i] = i;
      cell_pos[next + i] = next + i;
      cell_seq[next + i] = 0;
    }
    next += n;
    exec::StepIo io;
    io.n_tokens = n;
    io.tokens = toks.data();
    io.pos = pos.data();
    io.seq = seq.data();
    io.cell = cell.data();
    io.cell_pos = cell_pos.data();
    io.cell_seq = cell_seq.data();
    io.n_cells_scan = next;
    io.out_rows = rows.data();
    io.n_out = n;
    std::vector<float> out(static_cast<size_t>(n) * n_vocab);
    Status st = run(io, out.data());
    EXPECT_TRUE(st.is_ok()) << st.message();
    all.insert(all.end(), out.begin(), out.end());
  }
  return all;
}

// The engine's view of a step the executor tests replay (the ops runner computes the reference).
inline engine::StepInput step_input(const exec::StepIo& io) {
  engine::StepInput in;
  in.n_tokens = io.n_tokens;
  in.tokens = io.tokens;
  in.pos = io.pos;
  in.seq = io.seq;
  in.cell = io.cell;
  in.cell_pos = io.cell_pos;
  in.cell_seq = io.cell_seq;
  in.n_cells_scan = io.n_cells_scan;
  in.out_rows = io.out_rows;
  in.n_out = io.n_out;
  in.embd = io.embd;
  in.mrope_pos = io.mrope_pos;
  return in;
}

inline std::vector<float> cpu_logits(const Loaded& l, const Script& sc) {
  auto r = engine::make_ops_runner(l.spec, l.weights, kernels::make_cpu_ops(1), kCells, kBatch);
  EXPECT_TRUE(r.has_value()) << r.status().message();
  return replay(sc, l.spec.n_vocab, [&](const exec::StepIo& io, float* out) { return (*r)->run(step_input(io), out); });
}

// The planner's plan at 1 GiB, a base for plans a test edits (its tiers, options and arena figures); empty
// tiers (and a failure) when it cannot be made.
inline plan::PlanSet plan_for_editing(const Loaded& l) {
  auto runner = exec::make_hybrid_runner(l.spec, l.weights, l.subs, setup_for(1ull << 30, std::nullopt));
  EXPECT_TRUE(runner.has_value()) << runner.status().message();
  return runner.has_value() ? (*runner)->plan() : plan::PlanSet{};
}

// The matrices of the largest sub-layer but the embedding, each 256-aligned as the runner lays them out: a
// ring slot that takes any streamed sub-layer of an edited plan.
inline uint64_t largest_sublayer_bytes(const std::vector<model::SubLayer>& subs) {
  uint64_t largest = 0;
  for (const model::SubLayer& s : subs) {
    uint64_t bytes = 0;
    for (const model::WeightRef& w : s.weights)
      if (w.rows > 1) bytes += (w.bytes + 255) / 256 * 256;
    if (s.kind != model::SubLayerKind::kEmbed) largest = std::max(largest, bytes);
  }
  return largest;
}

inline void expect_close(const std::vector<float>& ref, const std::vector<float>& got, const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  double max_ref = 0, max_diff = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << " at " << i;
    max_ref = std::max(max_ref, static_cast<double>(std::fabs(ref[i])));
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(ref[i] - got[i])));
  }
  EXPECT_LE(max_diff, 1e-3 * std::max(1.0, max_ref)) << what << ": max |diff| " << max_diff << ", max |ref| " << max_ref;
}

// The strategies every budget is run with: the planner's choice, then each one forced.
inline const std::vector<std::optional<plan::Strategy>>& all_strategies() {
  static const std::vector<std::optional<plan::Strategy>> v = {std::nullopt, plan::Strategy::kGpuStream,
                                                               plan::Strategy::kStatic, plan::Strategy::kDynamic};
  return v;
}

// A hybrid runner at `budget` (strategy `force`) replaying `sc`: its logits within tolerance of `ref`, its
// arena within the budget. nullptr (and a failure) when it cannot be built.
inline std::unique_ptr<exec::HybridRunner> checked_runner(const Loaded& l, const Script& sc, const std::vector<float>& ref,
                                                          uint64_t budget, std::optional<plan::Strategy> force,
                                                          const std::string& what) {
  auto runner = exec::make_hybrid_runner(l.spec, l.weights, l.subs, setup_for(budget, force));
  EXPECT_TRUE(runner.has_value()) << what << ": " << runner.status().message();
  if (!runner.has_value()) return nullptr;
  exec::HybridRunner& r = **runner;
  expect_close(ref, replay(sc, l.spec.n_vocab, [&](const exec::StepIo& io, float* out) { return r.run(io, out); }), what);
  auto mi = r.device().memory_info();
  EXPECT_TRUE(mi.has_value()) << what;
  if (mi.has_value()) {
    EXPECT_LE(mi->arena_capacity, budget) << what;
    EXPECT_LE(mi->arena_peak, budget) << what;
  }
  return std::move(*runner);
}

}  // namespace ferry::exec_test
