// HybridRunner with images on the emulated device (tiny Qwen2.5-VL pair from ferry synth): encode_image
// gives model::encode_image's embeddings on CpuOps bit for bit, inside the budget the language model
// leaves (or on the CPU, saying so, where the tower does not fit); and a prompt with text, image rows
// (M-RoPE positions) and decode steps, with an image encoded between its first step and the rest (so
// the resident weights leave and come back mid-sequence, the KV cache staying), gives the all-CPU
// runner's logits at the minimum budget, a middle one and one that holds everything. The device
// requires pinned memory for copies, poisons fresh blocks with NaN and throttles copies.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/step_runner.h"
#include "exec/hybrid_runner.h"
#include "exec/executor_test_util.h"
#include "format/gguf.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/model_spec.h"
#include "model/sublayer.h"
#include "model/synth.h"
#include "model/tiny_model.h"
#include "model/vision/synth_mmproj.h"
#include "model/vision/vision_forward.h"
#include "model/vision/vision_input.h"
#include "model/vision/vision_model.h"
#include "model/weights.h"
#include "plan/profile.h"

namespace ferry {
namespace {

constexpr int32_t kCells = 256;
constexpr int32_t kBatch = 64;

struct Pair {
  testing::TempDir dir;
  std::unique_ptr<gguf::ModelFile> lm_file, mm_file;
  model::ModelSpec spec;
  model::ModelWeights weights;
  std::vector<model::SubLayer> subs;
  model::VisionSpec vspec;
  model::VisionWeights vweights;
};

std::unique_ptr<Pair> load_pair() {
  auto p = std::make_unique<Pair>();
  model::SynthOptions o;
  o.preset = "tiny-qwen2.5-vl";
  o.type = DType::F32;
  o.path = p->dir.file("lm.gguf");
  o.n_threads = 2;
  EXPECT_TRUE(model::synth_write(o).has_value());
  EXPECT_TRUE(model::synth_write_mmproj(o, DType::F16, p->dir.file("mmproj.gguf")).has_value());
  auto lm = gguf::ModelFile::open(o.path);
  auto mm = gguf::ModelFile::open(p->dir.file("mmproj.gguf"));
  if (!lm || !mm) {
    ADD_FAILURE() << "cannot open the synthetic pair";
    return nullptr;
  }
  p->lm_file = std::move(*lm);
  p->mm_file = std::move(*mm);
  auto spec = model::ModelSpec::from_gguf(*p->lm_file);
  auto w = spec ? model::bind_weights(*spec, *p->lm_file) : Expected<model::ModelWeights>(spec.status());
  auto subs = spec ? model::build_sublayers(*spec, *p->lm_file) : Expected<std::vector<model::SubLayer>>(spec.status());
  auto vspec = model::VisionSpec::from_gguf(*p->mm_file);
  auto vw = vspec ? model::bind_vision_weights(*vspec, *p->mm_file) : Expected<model::VisionWeights>(vspec.status());
  if (!spec || !w || !subs || !vspec || !vw) {
    ADD_FAILURE() << "cannot bind the synthetic pair";
    return nullptr;
  }
  p->spec = *spec;
  p->weights = std::move(*w);
  p->subs = std::move(*subs);
  p->vspec = *vspec;
  p->vweights = std::move(*vw);
  return p;
}

image::RgbImage test_image(int w, int h) {
  image::RgbImage img;
  img.width = w;
  img.height = h;
  img.rgb.resize(img.bytes());
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = static_cast<uint8_t>((i * 37 + i / 97) & 0xFF);
  return img;
}

exec::HybridSetup setup_for(uint64_t budget) {
  exec::HybridSetup s;
  s.vram_budget = budget;
  s.device = "emulated";
  auto prof = plan::load_profile(std::string(FERRY_SOURCE_DIR) + "/tests/data/profiles/h200-host.json");
  EXPECT_TRUE(prof.has_value()) << prof.status().message();
  if (prof) s.profile = *prof;
  s.options.n_cells = kCells;
  s.options.n_batch = kBatch;
  s.options.cpu_threads = 1;
  s.prompt_tokens = 40;
  s.gen_tokens = 8;
  s.emulated.require_pinned = true;
  s.emulated.poison = true;
  s.emulated.copy_gbps = 2.0;
  return s;
}

// One step of a multimodal sequence: token ids or embedding rows, with M-RoPE positions.
struct MmStep {
  std::vector<int32_t> tokens;    // -1 for embedding rows
  std::vector<float> embd;        // [n_embd, n] or empty
  std::vector<int32_t> mrope;     // [4 n] section-major
};

// Text (5 tokens), the image's rows in chunks of kBatch, then 4 decode tokens: positions as
// engine::multimodal_prompt gives them.
std::vector<MmStep> sequence(const std::vector<float>& embd, int32_t gw, int32_t gh, int32_t n_embd) {
  std::vector<MmStep> steps;
  auto text_step = [](std::vector<int32_t> ids, int32_t t0) {
    MmStep s;
    s.tokens = std::move(ids);
    const int32_t n = static_cast<int32_t>(s.tokens.size());
    for (int st = 0; st < 4; ++st)
      for (int32_t i = 0; i < n; ++i) s.mrope.push_back(t0 + i);
    return s;
  };
  steps.push_back(text_step({11, 3, 250, 7, 99}, 0));
  const int32_t t_img = 5, n_img = gw * gh;
  for (int32_t r0 = 0; r0 < n_img; r0 += kBatch) {
    const int32_t n = std::min(kBatch, n_img - r0);
    MmStep s;
    s.tokens.assign(n, -1);
    s.embd.assign(embd.begin() + static_cast<size_t>(r0) * n_embd, embd.begin() + static_cast<size_t>(r0 + n) * n_embd);
    std::vector<int32_t> pt, ph, pw, pe;
    for (int32_t r = r0; r < r0 + n; ++r) {
      pt.push_back(t_img);
      ph.push_back(t_img + r / gw);
      pw.push_back(t_img + r % gw);
      pe.push_back(0);
    }
    for (const auto* v : {&pt, &ph, &pw, &pe}) s.mrope.insert(s.mrope.end(), v->begin(), v->end());
    steps.push_back(std::move(s));
  }
  const int32_t t_next = t_img + std::max(gw, gh);
  for (int d = 0; d < 4; ++d) steps.push_back(text_step({(53 * d + 17) % 290}, t_next + d));
  return steps;
}

// Runs the steps through `run`, calling `between` after the first step; every row wants logits.
template <typename RunFn, typename Between>
std::vector<float> replay(const std::vector<MmStep>& steps, int32_t n_vocab, RunFn run, Between between) {
  std::vector<int32_t> cell_pos(kCells, -1), cell_seq(kCells, -1);
  std::vector<float> all;
  int32_t next = 0;
  for (size_t k = 0; k < steps.size(); ++k) {
    const MmStep& s = steps[k];
    const int32_t n = static_cast<int32_t>(s.tokens.size());
    std::vector<int32_t> pos(n), seq(n, 0), cell(n), rows(n);
    for (int32_t i = 0; i < n; ++i) {
      pos[i] = cell[i] = next + i;
      rows[i] = i;
      cell_pos[next + i] = next + i;
      cell_seq[next + i] = 0;
    }
    next += n;
    exec::StepIo io;
    io.n_tokens = n;
    io.tokens = s.tokens.data();
    io.pos = pos.data();
    io.seq = seq.data();
    io.cell = cell.data();
    io.cell_pos = cell_pos.data();
    io.cell_seq = cell_seq.data();
    io.n_cells_scan = next;
    io.out_rows = rows.data();
    io.n_out = n;
    io.embd = s.embd.empty() ? nullptr : s.embd.data();
    io.mrope_pos = s.mrope.data();
    std::vector<float> out(static_cast<size_t>(n) * n_vocab);
    const Status st = run(io, out.data());
    EXPECT_TRUE(st.is_ok()) << st.message();
    all.insert(all.end(), out.begin(), out.end());
    if (k == 0) between();
  }
  return all;
}

std::vector<float> cpu_logits(const Pair& p, const std::vector<MmStep>& steps) {
  auto r = engine::make_ops_runner(p.spec, p.weights, kernels::make_cpu_ops(1), kCells, kBatch);
  EXPECT_TRUE(r.has_value()) << r.status().message();
  return replay(
      steps, p.spec.n_vocab,
      [&](const exec::StepIo& io, float* out) { return (*r)->run(exec_test::step_input(io), out); },
      [] {});
}

void expect_close(const std::vector<float>& ref, const std::vector<float>& got, const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  double max_ref = 0, max_diff = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << " at " << i;
    max_ref = std::max(max_ref, static_cast<double>(std::fabs(ref[i])));
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(ref[i] - got[i])));
  }
  EXPECT_LE(max_diff, 1e-3 * std::max(1.0, max_ref)) << what << ": max |diff| " << max_diff << ", max |ref| " << max_ref;
}

TEST(ExecutorVision, EncodeAndImageStepsMatchCpuAtEveryBudget) {
  auto p = load_pair();
  ASSERT_TRUE(p);
  auto in = model::prepare_vision_input(p->vspec, test_image(300, 200));
  ASSERT_TRUE(in.has_value()) << in.status().message();
  auto cpu = kernels::make_cpu_ops(1);
  auto ref_embd = model::encode_image(*cpu, p->vspec, p->vweights, *in);
  ASSERT_TRUE(ref_embd.has_value()) << ref_embd.status().message();
  const std::vector<MmStep> steps = sequence(*ref_embd, in->grid_w, in->grid_h, p->spec.n_embd);
  const std::vector<float> ref = cpu_logits(*p, steps);

  auto min = exec::hybrid_min_budget(p->spec, p->subs, setup_for(0));
  ASSERT_TRUE(min.has_value()) << min.status().message();
  uint64_t all_weights = 0;
  for (const auto& s : p->subs) all_weights += s.weight_bytes;
  const uint64_t tower = model::vision_buffer_bytes(p->vspec, in->n_patches, static_cast<int64_t>(in->windows.size()) - 1);
  int on_device = 0;
  for (uint64_t budget : {*min, *min + all_weights / 3, *min + 2 * all_weights + 4 * tower}) {
    const std::string what = "budget " + std::to_string(budget);
    auto runner = exec::make_hybrid_runner(p->spec, p->weights, p->subs, setup_for(budget));
    ASSERT_TRUE(runner.has_value()) << what << ": " << runner.status().message();
    exec::HybridRunner& r = **runner;
    const std::vector<float> got = replay(
        steps, p->spec.n_vocab, [&](const exec::StepIo& io, float* out) { return r.run(io, out); },
        [&] {  // an image between the first step and the rest, as a chat turn would bring it
          exec::VisionRun run;
          auto embd = r.encode_image(p->vspec, p->vweights, *in, &run);
          ASSERT_TRUE(embd.has_value()) << what << ": " << embd.status().message();
          EXPECT_EQ(*embd, *ref_embd) << what << " (encoded on " << run.where << ")";
          if (run.where == "emulated") {
            ++on_device;
            EXPECT_GT(run.copied_bytes, 0u);
            EXPECT_TRUE(run.note.empty());
          } else {
            EXPECT_EQ(run.where, "cpu");
            EXPECT_FALSE(run.note.empty());
          }
        });
    expect_close(ref, got, what);
    auto mi = r.device().memory_info();
    ASSERT_TRUE(mi.has_value());
    EXPECT_LE(mi->arena_peak, budget) << what;
  }
  EXPECT_GT(on_device, 0);  // the largest budget holds the tower beside the KV cache
}

// A tower whose activations do not fit beside the language model's KV cache and scratch runs on the CPU,
// with the same embeddings; a later image that fits runs on the device again.
TEST(ExecutorVision, TooLargeForTheBudgetRunsOnTheCpu) {
  auto p = load_pair();
  ASSERT_TRUE(p);
  auto big = model::prepare_vision_input(p->vspec, test_image(1120, 896));
  auto small = model::prepare_vision_input(p->vspec, test_image(112, 112));
  ASSERT_TRUE(big.has_value() && small.has_value());
  const uint64_t big_bytes =
      model::vision_buffer_bytes(p->vspec, big->n_patches, static_cast<int64_t>(big->windows.size()) - 1);
  auto min = exec::hybrid_min_budget(p->spec, p->subs, setup_for(0));
  ASSERT_TRUE(min.has_value());
  auto runner = exec::make_hybrid_runner(p->spec, p->weights, p->subs, setup_for(*min + big_bytes / 4));
  ASSERT_TRUE(runner.has_value()) << runner.status().message();
  auto cpu = kernels::make_cpu_ops(1);
  for (const model::VisionInput* in : {&*big, &*small}) {
    exec::VisionRun run;
    auto got = (*runner)->encode_image(p->vspec, p->vweights, *in, &run);
    ASSERT_TRUE(got.has_value()) << got.status().message();
    auto want = model::encode_image(*cpu, p->vspec, p->vweights, *in);
    ASSERT_TRUE(want.has_value());
    EXPECT_EQ(*got, *want) << run.where;
    EXPECT_EQ(run.where, in == &*big ? "cpu" : "emulated") << run.note;
  }
}

}  // namespace
}  // namespace ferry
