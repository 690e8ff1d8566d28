// runtime::open, the library entry point, on the CPU and on the emulated GPU (no GPU needed): the budget
// is the whole process, so the planner and the arena get the budget less the modelled CUDA context and
// the growth reserve; a budget below the minimum (or 0) says how much is needed and how much of it is
// the context; device resolution and its one-line errors; the modelled process memory; and the same
// logits as the all-CPU engine; a weight type this machine's profile lacks is measured into it once.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/engine.h"
#include "exec/device.h"
#include "exec/process_memory.h"
#include "model/tiny_model.h"
#include "plan/profile.h"
#include "runtime/budget.h"
#include "runtime/profile_source.h"
#include "runtime/runtime.h"

namespace ferry {
namespace {

using testing::TempDir;
using testing::TinyModel;

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kOutside = exec::kDefaultCudaContextBytes + exec::kCudaGrowthReserve;

std::string profile_path() { return std::string(FERRY_SOURCE_DIR) + "/tests/data/profiles/h200-host-measured.json"; }

struct Fixture {
  TempDir dir;
  std::string model;
  Fixture() {
    TinyModel m;
    m.n_layer = 4;
    m.wtype = DType::Q8_0;
    model = dir.file("tiny.gguf");
    const Status st = testing::write_tiny_model(m, model);
    EXPECT_TRUE(st.is_ok()) << st.message();
  }
  runtime::OpenOptions emulated(uint64_t budget) const {
    runtime::OpenOptions o;
    o.model_path = model;
    o.device = "emulated";
    o.vram_budget = budget;
    o.profile_path = profile_path();
    o.n_ctx = 64;
    o.n_batch = 16;
    o.n_threads = 2;
    return o;
  }
};

TEST(Budget, SplitTakesContextAndReserveFirst) {
  const runtime::ProcessBudget b = runtime::split_budget(2048 * kMiB, 500 * kMiB, "nvml-process", 96 * kMiB);
  EXPECT_EQ(b.arena, (2048 - 500 - 96) * kMiB);
  EXPECT_EQ(b.outside_arena(), 596 * kMiB);
  EXPECT_EQ(runtime::split_budget(500 * kMiB, 500 * kMiB, "x", 96 * kMiB).arena, 0u);
}

TEST(Budget, ModelledContextFromProfileElseDefault) {
  auto p = plan::load_profile(profile_path());
  ASSERT_TRUE(p.has_value()) << p.status().message();
  runtime::ProcessBudget b = runtime::modelled_budget(1ull << 30, *p);
  EXPECT_EQ(b.context_bytes, exec::kDefaultCudaContextBytes);
  EXPECT_EQ(b.context_source, "default");
  p->gpu->context_bytes = 300 * kMiB;
  b = runtime::modelled_budget(1ull << 30, *p);
  EXPECT_EQ(b.context_bytes, 300 * kMiB);
  EXPECT_EQ(b.context_source, "profile");
  EXPECT_EQ(b.arena, (1ull << 30) - 300 * kMiB - exec::kCudaGrowthReserve);
}

TEST(Budget, ProfileKeepsContextBytes) {
  auto p = plan::load_profile(profile_path());
  ASSERT_TRUE(p.has_value());
  p->gpu->context_bytes = 123 * kMiB;
  auto back = plan::parse_profile(plan::profile_to_json(*p));
  ASSERT_TRUE(back.has_value()) << back.status().message();
  EXPECT_EQ(back->gpu->context_bytes, 123 * kMiB);
}

TEST(Budget, TooSmallMessageCountsTheContext) {
  const runtime::ProcessBudget b = runtime::split_budget(600 * kMiB, 512 * kMiB, "nvml-process", 96 * kMiB);
  const Status st = runtime::budget_too_small(b, 100 * kMiB, "tiny", 64, 16);
  EXPECT_EQ(st.code(), ErrorCode::kOutOfMemory);
  EXPECT_NE(st.message().find("VRAM budget 600 MiB is too small"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("needs at least 708 MiB (of which 608 MiB for the CUDA context: 512 MiB measured "
                              "(nvml-process) + 96 MiB reserved"),
            std::string::npos)
      << st.message();
  const Status zero = runtime::budget_too_small(runtime::split_budget(0, 512 * kMiB, "default", 96 * kMiB),
                                                100 * kMiB, "tiny", 64, 16);
  EXPECT_EQ(zero.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(zero.message().find("must be > 0"), std::string::npos) << zero.message();
  EXPECT_NE(zero.message().find("needs at least 708 MiB"), std::string::npos) << zero.message();
}

TEST(Runtime, EmulatedPlannerGetsBudgetMinusContext) {
  Fixture f;
  const uint64_t budget = kOutside + 40 * kMiB;
  auto rt = runtime::open(f.emulated(budget));
  ASSERT_TRUE(rt.has_value()) << rt.status().message();
  EXPECT_EQ((*rt)->device(), "emulated");
  const runtime::ProcessBudget& b = (*rt)->budget();
  EXPECT_EQ(b.budget, budget);
  EXPECT_EQ(b.context_bytes, exec::kDefaultCudaContextBytes);
  EXPECT_EQ(b.context_source, "default");
  EXPECT_EQ(b.arena, 40 * kMiB);
  exec::HybridRunner* r = (*rt)->runner();
  ASSERT_NE(r, nullptr);
  // What the planner was given: the arena, less the executor's own blocks beyond the plan's accounting.
  EXPECT_LE(r->plan().options.vram_budget, 40 * kMiB);
  EXPECT_GT(r->plan().options.vram_budget, 32 * kMiB);
  auto mi = r->device().memory_info();
  ASSERT_TRUE(mi.has_value());
  EXPECT_EQ(mi->arena_capacity, 40 * kMiB);
  EXPECT_EQ(mi->outside_arena, exec::kDefaultCudaContextBytes);  // the modelled context
  // The process as a GPU would hold it: the context and the whole arena (reserved at start).
  const runtime::ProcessMemory pm = (*rt)->vram_peak_process();
  EXPECT_EQ(pm.source, "modelled");
  EXPECT_EQ(pm.peak_bytes, exec::kDefaultCudaContextBytes + 40 * kMiB);
  EXPECT_LE(pm.peak_bytes, budget);
  const nlohmann::json j = (*rt)->report_json();
  EXPECT_EQ(j.value("vram_budget", uint64_t{0}), budget);
  EXPECT_EQ(j.value("context_bytes", uint64_t{0}), exec::kDefaultCudaContextBytes);
  EXPECT_EQ(j.value("vram_peak_process_source", std::string()), "modelled");
}

TEST(Runtime, EmulatedBudgetTooSmallNamesTheMinimum) {
  Fixture f;
  auto small = runtime::open(f.emulated(kOutside + 4096));  // the tiny model needs more than 4 KiB
  ASSERT_FALSE(small.has_value());
  EXPECT_EQ(small.status().code(), ErrorCode::kOutOfMemory);
  EXPECT_NE(small.status().message().find("is too small"), std::string::npos) << small.status().message();
  EXPECT_NE(small.status().message().find("(of which 608 MiB for the CUDA context: 512 MiB modelled (default)"),
            std::string::npos)
      << small.status().message();
  // Below the context alone: the same message (no arena at all).
  auto tiny = runtime::open(f.emulated(100 * kMiB));
  ASSERT_FALSE(tiny.has_value());
  EXPECT_NE(tiny.status().message().find("needs at least"), std::string::npos) << tiny.status().message();
  auto zero = runtime::open(f.emulated(0));
  ASSERT_FALSE(zero.has_value());
  EXPECT_EQ(zero.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(zero.status().message().find("must be > 0"), std::string::npos) << zero.status().message();
  EXPECT_NE(zero.status().message().find("needs at least"), std::string::npos) << zero.status().message();
}

TEST(Runtime, EmulatedLogitsEqualCpu) {
  Fixture f;
  runtime::OpenOptions cpu_opt = f.emulated(0);
  cpu_opt.device = "cpu";
  cpu_opt.vram_budget.reset();
  cpu_opt.profile_path.clear();
  auto cpu = runtime::open(cpu_opt);
  ASSERT_TRUE(cpu.has_value()) << cpu.status().message();
  EXPECT_EQ((*cpu)->runner(), nullptr);
  EXPECT_EQ((*cpu)->vram_peak_process().source, "none");
  EXPECT_TRUE((*cpu)->report_json().empty());
  auto emu = runtime::open(f.emulated(kOutside + 40 * kMiB));
  ASSERT_TRUE(emu.has_value()) << emu.status().message();
  engine::Batch b;
  for (int i = 0; i < 12; ++i) b.add(5 + 7 * i, i, 0, i == 11);
  std::vector<float> a, e;
  ASSERT_TRUE((*cpu)->engine().step(b, &a).is_ok());
  ASSERT_TRUE((*emu)->engine().step(b, &e).is_ok());
  ASSERT_EQ(a.size(), e.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], e[i], 1e-3f * (1 + std::abs(a[i]))) << i;
}

TEST(Runtime, DeviceResolution) {
  Fixture f;
  runtime::OpenOptions o = f.emulated(0);
  o.vram_budget.reset();
  auto no_budget = runtime::open(o);  // the emulated device stands for a GPU of the budget's size
  ASSERT_FALSE(no_budget.has_value());
  EXPECT_NE(no_budget.status().message().find("needs a VRAM budget"), std::string::npos);
  o.device = "tpu";
  auto unknown = runtime::open(o);
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.status().code(), ErrorCode::kInvalidArgument);
  o.device = "ref";
  o.vram_budget = 1ull << 30;
  EXPECT_FALSE(runtime::open(o).has_value());
  // A budget on "cpu" means the GPU; without one (and without a GPU profile) one error says what to do.
  if (exec::cuda_available(nullptr)) GTEST_SKIP() << "this machine has a GPU";
  o.device = "cpu";
  o.profile_path.clear();
  auto no_gpu = runtime::open(o);
  ASSERT_FALSE(no_gpu.has_value());
  EXPECT_EQ(no_gpu.status().code(), ErrorCode::kInvalidArgument);
  const std::string& m = no_gpu.status().message();
  EXPECT_NE(m.find("drop --vram"), std::string::npos) << m;
  EXPECT_NE(m.find("--device emulated --profile FILE"), std::string::npos) << m;
  EXPECT_EQ(m.find("no usable CUDA GPU"), std::string::npos) << m;  // the driver's words, once, not twice
  // With a GPU profile, "cpu" + a budget falls back to the emulated device, with a note.
  o.profile_path = profile_path();
  o.vram_budget = kOutside + 40 * kMiB;
  std::vector<std::string> notes;
  o.on_note = [&](const std::string& n) { notes.push_back(n); };
  auto fallback = runtime::open(o);
  ASSERT_TRUE(fallback.has_value()) << fallback.status().message();
  EXPECT_EQ((*fallback)->device(), "emulated");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("emulated device"), std::string::npos) << notes[0];
}

TEST(Runtime, EngineLoadPointsCudaToRuntime) {
  Fixture f;
  engine::EngineOptions o;
  o.model_path = f.model;
  o.device = "cuda";
  auto e = engine::Engine::load(o);
  ASSERT_FALSE(e.has_value());
  EXPECT_NE(e.status().message().find("runtime::open"), std::string::npos) << e.status().message();
}

// A model's weight type the cached profile lacks (MXFP4) gets its CPU curves measured and saved into the
// profile's file; a second open finds them; a profile that is not this machine's cache stays as it is.
TEST(Runtime, MissingWeightTypeMeasuredIntoTheCachedProfile) {
  auto loaded = plan::load_profile(profile_path());
  ASSERT_TRUE(loaded.has_value()) << loaded.status().message();
  plan::HardwareProfile p = *loaded;
  // This machine's two threads, so the measurement is quick.
  p.cpu.threads = 2;
  p.cpu.mem_bw = {{1, 10.0}, {2, 18.0}};
  std::vector<plan::ThroughputCurve> curves;
  for (plan::ThroughputCurve c : p.cpu.matmul)
    if (c.threads == 16 && c.dtype != DType::MXFP4) {
      c.threads = 2;
      curves.push_back(c);
    }
  ASSERT_FALSE(curves.empty());
  p.cpu.matmul = curves;
  TempDir dir;
  const std::string path = dir.file("profile.json");
  ASSERT_TRUE(plan::save_profile(p, path).is_ok());

  plan::HardwareProfile other = p;
  auto none = runtime::measure_missing_cpu_types(&other, {DType::MXFP4}, /*cached=*/false, path);
  ASSERT_TRUE(none.has_value()) << none.status().message();
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(other.cpu.matmul.size(), curves.size());

  auto added = runtime::measure_missing_cpu_types(&p, {DType::Q4_0, DType::MXFP4}, /*cached=*/true, path);
  ASSERT_TRUE(added.has_value()) << added.status().message();
  ASSERT_EQ(added->size(), 1u);
  EXPECT_EQ((*added)[0], DType::MXFP4);
  auto saved = plan::load_profile(path);
  ASSERT_TRUE(saved.has_value()) << saved.status().message();
  bool has = false;
  for (const plan::ThroughputCurve& c : saved->cpu.matmul)
    if (c.dtype == DType::MXFP4) {
      has = true;
      EXPECT_EQ(c.threads, 2);
      for (double g : c.gflops) EXPECT_GT(g, 0);
    }
  EXPECT_TRUE(has);
  auto again = runtime::measure_missing_cpu_types(&*saved, {DType::MXFP4}, true, path);
  ASSERT_TRUE(again.has_value());
  EXPECT_TRUE(again->empty());
}

TEST(Runtime, ParseSize) {
  EXPECT_EQ(runtime::parse_size("2G"), 2ull << 30);
  EXPECT_EQ(runtime::parse_size("512MiB"), 512ull << 20);
  EXPECT_EQ(runtime::parse_size("0"), 0u);
  EXPECT_FALSE(runtime::parse_size("lots").has_value());
  EXPECT_FALSE(runtime::parse_size("2X").has_value());
}

}  // namespace
}  // namespace ferry
