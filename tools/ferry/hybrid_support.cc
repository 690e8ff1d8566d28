// GPU flags of ferry run / bench -> runtime::OpenOptions (see hybrid_support.h).
#include "hybrid_support.h"

#include <cstdio>
#include <string>

#include "profile_support.h"

namespace ferry::cli {

void add_hybrid_options(CLI::App& app, HybridArgs* a, bool bench) {
  app.add_option("--vram", a->vram_text,
                 "VRAM budget of the whole process (bytes or K/M/G suffix, e.g. 2G; CUDA context included): run the "
                 "planner's hybrid CPU/GPU plan under it");
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
                 "with --vram: streamed weights are copied once into pinned memory (copy), or the model's mmap is "
                 "page-locked in place (register; falls back to copy if the driver refuses), or (auto) those the "
                 "CPU also computes are registered and the rest copied, so host memory holds one copy of the weights")
      ->check(CLI::IsMember({"auto", "copy", "register"}));
  app.add_option("--expert-cache", a->expert_cache,
                 "with --vram, mixture-of-experts models: this much of the budget (e.g. 512M) holds the experts the "
                 "plan leaves to the CPU that the router picks most, copied in as the routing changes (default 0: none; "
                 "--explain reports its hit rate)");
  if (!bench) return;
  app.add_flag("--explain", a->explain, "with --vram: measured time per sub-layer and copy");
  app.add_option("--timeline", a->timeline_path,
                 "GPU/emulated device: write an SVG of one prefill chunk and the first decode steps (copy stream, "
                 "GPU compute, CPU workers, host waits) to this file");
}

Status fill_open_options(const HybridArgs& a, runtime::OpenOptions* o) {
  if (!a.vram_text.empty()) {
    const std::optional<uint64_t> v = runtime::parse_size(a.vram_text);
    if (!v)
      return make_error(ErrorCode::kInvalidArgument, "--vram: cannot read size '%s' (bytes or K/M/G suffix, e.g. 2G)",
                        a.vram_text.c_str());
    o->vram_budget = *v;  // 0 included: runtime::open answers with the model's minimum
  }
  o->profile_path = a.profile_path;
  runtime::ExecutorOverrides& ex = o->executor;
  if (!a.expert_cache.empty()) {
    const std::optional<uint64_t> c = runtime::parse_size(a.expert_cache);
    if (!c)
      return make_error(ErrorCode::kInvalidArgument,
                        "--expert-cache: cannot read size '%s' (bytes or K/M/G suffix, e.g. 512M)", a.expert_cache.c_str());
    if (a.vram_text.empty() && *c > 0)
      return make_error(ErrorCode::kInvalidArgument, "--expert-cache needs a VRAM budget (--vram SIZE)");
    ex.expert_cache_bytes = *c;
  }
  ex.ring_slots = a.ring_slots;
  ex.ffn_slices = a.ffn_slices;
  ex.cuda_graphs = a.cuda_graphs != 0;
  ex.split_layout = a.split_layout != 0;
  ex.pin = a.pin == "register" ? exec::PinMode::kRegister : a.pin == "copy" ? exec::PinMode::kCopy : exec::PinMode::kAuto;
  ex.measure = a.explain;
  if (a.strategy == "gpu-stream") ex.strategy = plan::Strategy::kGpuStream;
  if (a.strategy == "static") ex.strategy = plan::Strategy::kStatic;
  if (a.strategy == "dynamic") ex.strategy = plan::Strategy::kDynamic;
  // The prefill GEMMs' F16 staging: the planner's choice unless FERRY_GEMM_STAGING_MB says.
  ex.gemm_staging_bytes = gemm_staging_bytes_from_env();
  o->on_note = [](const std::string& text) { std::fprintf(stderr, "ferry: %s\n", text.c_str()); };
  o->on_progress = progress_bar("profile");
  return Status::ok();
}

bool wants_gpu(const HybridArgs& a, const std::string& device) {
  return !a.vram_text.empty() || device == "cuda" || device == "emulated";
}

void warn_profile_after_run(runtime::Runtime& rt) {
  const std::string w = rt.check_profile_after_run();
  if (!w.empty()) std::fprintf(stderr, "ferry: warning: %s\n", w.c_str());
}

}  // namespace ferry::cli
