// Device memory the whole process holds, as nvidia-smi shows it, and what a CUDA context costs before
// the arena is reserved. A VRAM budget caps the process, not only the arena: the arena gets the budget
// less the context (measured here at start) less kCudaGrowthReserve for what the driver allocates later.
//
// Readings, best first (MemorySource):
//   nvml-process       NVML's used memory of this pid (what nvidia-smi's process table shows), through
//                      dlopen("libnvidia-ml.so.1"): no link-time dependency;
//   nvml-device-delta  NVML's device-wide used memory less its value when the meter was made (a container
//                      whose pid namespace hides this pid from NVML; other processes' changes count too);
//   cuda-free-delta    without NVML: kDefaultCudaContextBytes plus the drop of cudaMemGetInfo's free memory
//                      since the context was measured.
// The meter of a GPU is made once per process (process_memory_meter), as early as possible: before this
// process creates its CUDA context, so the device-wide baseline does not include it.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "base/status.h"

namespace ferry::exec {

// What the CUDA context, the cuBLAS handle, streams and events take is measured at start; this is the
// figure used where it cannot be measured (the emulated device without a profile that records it, and
// the cuda-free-delta reading). An H200 under CUDA 13 held 0.58-0.61 GiB outside the arena in total.
inline constexpr uint64_t kDefaultCudaContextBytes = 512ull << 20;
// Set aside inside every budget, outside the arena, for device memory the driver allocates after start:
// kernel modules loaded at their first launch (CUDA's lazy loading: ferry's kernels and the cuBLAS GEMM
// kernels a prefill picks), CUDA graph executables (at most 256 live, see HybridRunner), and cuBLAS's
// per-handle state. The executor's own buffers (KV, ring, scratch, cuBLAS workspace) are arena blocks.
inline constexpr uint64_t kCudaGrowthReserve = 96ull << 20;

enum class MemorySource : uint8_t { kNone, kNvmlProcess, kNvmlDeviceDelta, kCudaFreeDelta, kModelled };
// "none", "nvml-process", "nvml-device-delta", "cuda-free-delta", "modelled"
const char* memory_source_name(MemorySource source);

class ProcessMemoryMeter {
 public:
  explicit ProcessMemoryMeter(int ordinal);

  // Device memory this process holds now (nullopt: no way to read it yet), and how it was read.
  std::optional<uint64_t> read();
  MemorySource source();
  // Called once the process's CUDA context exists (measure_cuda_context does): picks the reading
  // (this pid in NVML's list, else the device delta, else cudaMemGetInfo) and, without NVML, takes
  // cudaMemGetInfo's free memory as the baseline.
  void calibrate();

 private:
  std::mutex mu_;
  const int ordinal_;
  void* nvml_device_ = nullptr;       // nvmlDevice_t, null without NVML
  std::optional<uint64_t> device_used_at_start_;  // NVML device-wide used memory when made
  bool calibrated_ = false;
  MemorySource source_ = MemorySource::kNone;
  uint64_t free_at_calibration_ = 0;  // cuda-free-delta's baseline
};

// The process-wide meter of GPU `ordinal` (made on first use).
ProcessMemoryMeter& process_memory_meter(int ordinal);

// The CUDA context's cost, measured: device memory this process holds outside ferry's arenas once the
// context, a cuBLAS handle, two streams and a few events exist (the handle, streams and events are made
// for the measurement and destroyed after it; the executor makes the same again).
struct ContextCost {
  uint64_t bytes = 0;
  MemorySource source = MemorySource::kNone;
  uint64_t device_free = 0;   // cudaMemGetInfo after the measurement
  uint64_t device_total = 0;
};
// Creates the context of `ordinal` when it does not exist yet. Without CUDA (or GPU): kDevice.
Expected<ContextCost> measure_cuda_context(int ordinal);

// Bytes of the CUDA arenas this process holds now (every live CudaDevice's reservation); 0 without CUDA.
uint64_t cuda_arena_bytes();

// Free and total device memory of `ordinal` (cudaMemGetInfo; creates the context). Without CUDA: kDevice.
struct DeviceMemory {
  uint64_t free = 0, total = 0;
};
Expected<DeviceMemory> cuda_memory(int ordinal);
// The PCI bus id of CUDA device `ordinal` ("0000:3B:00.0"), which NVML looks devices up by; "" if unknown.
std::string cuda_pci_bus_id(int ordinal);

}  // namespace ferry::exec
