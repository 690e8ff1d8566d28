// Fixtures for planner tests: the real-model shapes the issues plan for (minitron-8b, qwen3-8b) as
// ModelSpecs without files, and synthetic hardware profiles with chosen CPU / link / GPU speeds.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "model/model_spec.h"
#include "model/sublayer.h"
#include "model/synth.h"
#include "plan/profile.h"

namespace ferry::plan::fixtures {

// Mistral-NeMo-Minitron-8B: hidden 4096, 40 layers, 32 heads, 8 KV heads, head dim 128, FFN 11520,
// vocab 131072, separate output head.
inline model::ModelSpec minitron_8b() {
  model::ModelSpec s;
  s.arch = model::Arch::kLlama;
  s.name = "minitron-8b";
  s.n_layer = 40;
  s.n_embd = 4096;
  s.n_head = 32;
  s.n_kv_head = 8;
  s.head_dim = 128;
  s.n_rot = 128;
  s.n_ff = 11520;
  s.n_vocab = 131072;
  s.n_ctx_train = 4096;
  return s;
}

// Qwen3-8B: hidden 4096, 36 layers, 32 heads, 8 KV heads, head dim 128, FFN 12288, vocab 151936,
// q/k norms, separate output head.
inline model::ModelSpec qwen3_8b() {
  model::ModelSpec s;
  s.arch = model::Arch::kQwen3;
  s.name = "qwen3-8b";
  s.n_layer = 36;
  s.n_embd = 4096;
  s.n_head = 32;
  s.n_kv_head = 8;
  s.head_dim = 128;
  s.n_rot = 128;
  s.n_ff = 12288;
  s.n_vocab = 151936;
  s.n_ctx_train = 40960;
  s.qk_norm = true;
  s.rope_neox = true;
  return s;
}

// Roofline curve: rate(n) = 1 / (1 / (n * bw * 2 / bytes_per_weight) + 1 / peak), GFLOP/s.
inline ThroughputCurve roofline_curve(DType t, int32_t threads, double bw_gbs, double peak_gflops) {
  ThroughputCurve c;
  c.dtype = t;
  c.threads = threads;
  c.rows = c.cols = 4096;
  const DTypeTraits& tr = traits(t);
  const double bpw = static_cast<double>(tr.block_bytes) / tr.block_elems;
  for (int32_t n = 1; n <= 1024; n *= 2) {
    c.tokens.push_back(n);
    c.gflops.push_back(1.0 / (1.0 / (n * bw_gbs * 2.0 / bpw) + 1.0 / peak_gflops));
  }
  return c;
}

struct SynthHw {
  double cpu_bw = 80;          // GB/s host memory (CPU kernels reach 80 % of it)
  double cpu_peak = 1000;      // GFLOP/s at large token counts
  double link = 25;            // GB/s pinned H2D
  double cpu_share = 1.0;      // CPU speed kept while copying
  double copy_share = 1.0;     // copy speed kept while the CPU computes
  double gpu_bw = 3000;        // GB/s device memory
  double gpu_peak = 300000;    // GFLOP/s
  bool gpu = true;
};

inline HardwareProfile synth_profile(const SynthHw& hw) {
  HardwareProfile p;
  p.source = "estimated";
  p.machine.cpu_model = "synthetic";
  p.machine.cores = 16;
  p.machine.simd = "avx512";
  p.cpu.kernels = "cpu";
  p.cpu.threads = 16;
  p.cpu.call_overhead_us = 3;
  p.cpu.mem_bw = {{16, hw.cpu_bw}};
  for (DType t : {DType::F16, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::F32})
    p.cpu.matmul.push_back(roofline_curve(t, 16, 0.8 * hw.cpu_bw, hw.cpu_peak));
  if (hw.gpu) {
    p.machine.gpu_name = "synthetic GPU";
    p.machine.gpu_driver = "0";
    LinkProfile l;
    l.h2d_gbs = hw.link;
    l.d2h_gbs = hw.link;
    l.h2d_busy_gbs = hw.link * hw.copy_share;
    l.d2h_busy_gbs = hw.link * hw.copy_share;
    l.cpu_share_while_copying = hw.cpu_share;
    l.host_combined_gbs = 0.8 * hw.cpu_bw * hw.cpu_share + hw.link * hw.copy_share;
    l.latency_us = 10;
    p.link = l;
    GpuProfile g;
    g.name = "synthetic GPU";
    g.memory_bytes = 80ull << 30;
    g.mem_bw_gbs = hw.gpu_bw;
    g.launch_us = 4;
    for (DType t : {DType::F16, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::F32})
      g.matmul.push_back(roofline_curve(t, 0, 0.8 * hw.gpu_bw, hw.gpu_peak));
    p.gpu = g;
  }
  return p;
}

inline std::string source_dir() { return FERRY_SOURCE_DIR; }

// A model's sub-layers with the shapes and weight types `ferry synth --preset P --type T` writes (what
// the GPU host measured), for spec one of the fixtures above.
struct SynthModel {
  model::ModelSpec spec;
  std::vector<model::SubLayer> subs;
};
inline SynthModel synth_model(const model::ModelSpec& spec, const char* preset, DType t) {
  SynthModel m{spec, {}};
  const model::SynthPreset* p = model::find_synth_preset(preset);
  EXPECT_NE(p, nullptr) << preset;
  if (p == nullptr) return m;
  auto tensors = model::synth_tensors(*p, t);
  EXPECT_TRUE(tensors.has_value());
  if (!tensors) return m;
  std::map<std::string, DType> types;
  for (const auto& st : *tensors) types[st.name] = st.type;
  auto type_of = [&types, t](const std::string& name, int n_dims) {
    auto it = types.find(name);
    return it != types.end() ? it->second : (n_dims == 1 ? DType::F32 : t);
  };
  auto subs = model::build_sublayers(m.spec, type_of);
  EXPECT_TRUE(subs.has_value()) << subs.status().message();
  if (subs) m.subs = *subs;
  return m;
}

// A measured profile stored in the source tree (path relative to it).
inline HardwareProfile stored_profile(const std::string& rel_path) {
  auto r = load_profile(source_dir() + "/" + rel_path);
  EXPECT_TRUE(r.has_value()) << r.status().message();
  return r ? *r : HardwareProfile{};
}

}  // namespace ferry::plan::fixtures
