// ferry's library entry point: open a model on any device, under any VRAM budget, and get a ready
// engine. runtime::open resolves the device (cpu, ref, cuda, or the emulated GPU), loads or measures
// the hardware profile, measures what the CUDA context costs, plans for the budget, builds the hybrid
// executor and loads the engine over it; the Runtime it returns owns the engine and reports what the
// executor did (plan per tier, measured times, device memory of the whole process). The `ferry` CLI and
// the server call it; so can any program (examples/generate.cc).
//
// The budget is the whole process: `vram_budget` caps every byte of device memory the process holds as
// nvidia-smi shows it. The CUDA context, the cuBLAS handle and the streams are measured when the model
// is opened, exec::kCudaGrowthReserve is set aside for what the driver allocates later (kernel modules,
// graphs), and the planner's arena gets the rest (runtime/budget.h). The emulated device models the same
// context (the profile's gpu.context_bytes, else exec::kDefaultCudaContextBytes), so its plans are the
// plans a GPU with that profile would run.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "engine/engine.h"
#include "engine/multimodal.h"
#include "exec/hybrid_runner.h"
#include "exec/timeline.h"
#include "plan/planner.h"
#include "runtime/budget.h"

namespace ferry::runtime {

// Executor and planner settings for studies; the defaults are what a user wants.
struct ExecutorOverrides {
  int32_t ring_slots = 0;                   // weight ring slots K (>= 2); 0 = the planner chooses
  std::optional<plan::Strategy> strategy;   // every tier with this strategy's placement where feasible
  int32_t ffn_slices = 1;                   // FFN slices: 1 = whole FFNs, 0 = the planner chooses, N = N
  bool cuda_graphs = true;                  // CUDA: replay all-resident decode steps from graphs
  bool split_layout = true;                 // CUDA: quantized matrices in the split layout (lossless)
  exec::PinMode pin = exec::PinMode::kAuto; // streamed weights: registered where the CPU reads them too, else copied
  bool measure = false;                     // time every sub-layer and copy (report_text(explain))
  uint64_t gemm_staging_bytes = plan::PlannerOptions::kGemmStagingAuto;  // prefill GEMMs' F16 staging
  uint64_t expert_cache_bytes = 0;          // mixture of experts: the hot-expert cache's share of the budget
};

struct OpenOptions {
  std::string model_path;
  // cpu | ref | ref-exact | cuda | emulated. "cpu" with a vram_budget means "the GPU": cuda when one is
  // usable, else the emulated device when profile_path names a GPU profile, else an error saying so.
  std::string device = "cpu";
  // Device memory the whole process may hold, in bytes (nullopt: no budget; on cuda the whole model
  // then goes on the GPU, in its free memory). 0 is an error that names the model's minimum.
  std::optional<uint64_t> vram_budget;
  int32_t n_threads = 0;   // CPU threads (0 = physical cores)
  // The CPU kernels' dispatch level (CpuOps on the cpu device and in hybrid plans, and the profile they
  // are priced with): "" or "auto" for the default, else scalar | avx2 | avx2-vnni | avx512 | amx
  // (kernels::resolve_cpu_isa); a level this CPU lacks is an error.
  std::string cpu_isa;
  int32_t n_ctx = 4096;    // KV cells shared by all sequences (0 = the model's training context)
  int32_t n_seq_max = 1;   // sequences live at once
  int32_t n_batch = 0;     // most tokens per step; 0 = 1024 with the whole model on a GPU, else 512
  // Hardware profile (JSON) the planner uses: empty = this machine's cached profile, measured now
  // (~30 s, once) when there is none and a GPU is present.
  std::string profile_path;
  bool cpu_huge_pages = true;  // device cpu: weights copied into transparent huge pages when possible
  ExecutorOverrides executor;
  // What open() has to say on the way (the device it fell back to, a profile being measured) and the
  // progress of a profile measurement (fraction done, what). Unset: silent.
  std::function<void(const std::string& note)> on_note;
  std::function<void(double fraction, const std::string& what)> on_progress;
};

// Device memory the process held, as read from the driver (exec/process_memory.h), or modelled.
struct ProcessMemory {
  uint64_t peak_bytes = 0;
  std::string source;  // "nvml-process", "nvml-device-delta", "cuda-free-delta" (read); "modelled"
                       // (emulated: context + arena); "none" (cpu / ref, or nothing could be read)
};

class Runtime {
 public:
  virtual ~Runtime() = default;

  virtual engine::Engine& engine() = 0;
  // The vision tower of a multimodal projector (an mmproj GGUF) for this model. With the hybrid executor
  // (cuda / emulated) images are encoded on its device under the same VRAM budget as the language
  // model, in the memory its resident weights leave for the time of the image (exec::HybridRunner::
  // encode_image); on cpu / ref, on the CPU. The encoder must not outlive the Runtime.
  virtual Expected<std::unique_ptr<engine::VisionEncoder>> open_vision(const std::string& mmproj_path) = 0;
  virtual const std::string& device() const = 0;  // as resolved: cpu, ref, ref-exact, cuda, emulated
  virtual kernels::CpuIsa cpu_isa() const = 0;      // the CPU kernels' level, as resolved
  virtual int32_t n_batch() const = 0;            // as resolved (the engine's; <= n_ctx)

  // The hybrid executor (cuda / emulated), or null (cpu / ref). Its plan(), stats() and placements()
  // are what the reports below print.
  virtual exec::HybridRunner* runner() = 0;
  // How the budget was split (cuda / emulated; zeros otherwise).
  virtual const ProcessBudget& budget() const = 0;
  // Where the profile came from (a path, or "quick profile (not saved)"); empty on cpu / ref.
  virtual const std::string& profile_origin() const = 0;

  // The peak device memory of the process since open (sampled after steps that can grow it, and now).
  virtual ProcessMemory vram_peak_process() = 0;
  // Clears the executor's per-tier measurements (e.g. after a warm-up).
  virtual void reset_stats() = 0;

  // Device memory, plan per tier, predicted vs measured step time, the hybrid limits reached; with
  // explain (and ExecutorOverrides::measure) per sub-layer times. Empty on cpu / ref.
  virtual std::string report_text(bool explain) = 0;
  // The same as JSON (an empty object on cpu / ref).
  virtual nlohmann::json report_json() = 0;
  // After a run: when the CPU sub-layers ran far from the profile's times (the profile was measured on
  // a busy machine, or the machine changed), a cached profile is moved aside (`<path>.suspect`) so the
  // next open measures a new one (a profile_path file is never touched). Returns the warning to show,
  // empty when the profile held.
  virtual std::string check_profile_after_run() = 0;
  // Records the spans of the next max_steps steps that `steps` runs into a timeline titled `title`
  // (cuda / emulated only; kInvalidArgument otherwise).
  virtual Expected<exec::Timeline> record_timeline(int32_t max_steps, const std::string& title,
                                                   const std::function<Status()>& steps) = 0;
};

// Opens `options.model_path` as described above. Errors: bad options or a budget below the model's
// minimum (kInvalidArgument / kOutOfMemory, with the numbers), no usable GPU for device cuda (kDevice),
// a missing or corrupt model or profile.
Expected<std::unique_ptr<Runtime>> open(const OpenOptions& options);

// "2G", "512M", "1.5G", "1024" (binary units: K = 1024; a trailing B or iB is allowed) -> bytes.
std::optional<uint64_t> parse_size(std::string_view text);

}  // namespace ferry::runtime
