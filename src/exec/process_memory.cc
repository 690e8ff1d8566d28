// ProcessMemoryMeter: NVML through dlopen (no NVML header or link dependency), with the cudaMemGetInfo
// fallback of process_memory.h. The CUDA parts (measure_cuda_context, cuda_memory, ...) are in
// device_cuda.cc, stubs in device.cc.
#include "exec/process_memory.h"

#include <dlfcn.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <vector>

namespace ferry::exec {
namespace {

// The few NVML entry points used, with the layouts of nvml.h (stable since driver r470).
using NvmlReturn = int;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlInsufficientSize = 7;
constexpr unsigned long long kNvmlValueNotAvailable = ~0ull;
using NvmlDevice = void*;
struct NvmlMemory {
  unsigned long long total, free, used;
};
struct NvmlProcessInfo {  // nvmlProcessInfo_t of the _v2 / _v3 calls
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

struct Nvml {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*by_pci)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*by_index)(unsigned int, NvmlDevice*) = nullptr;
  NvmlReturn (*memory)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*processes)(NvmlDevice, unsigned int*, NvmlProcessInfo*) = nullptr;
  bool ok = false;

  Nvml() {
    void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) return;  // no driver (or not Linux's NVML): the fallbacks apply
    auto sym = [h](const char* name) { return dlsym(h, name); };
    init = reinterpret_cast<decltype(init)>(sym("nvmlInit_v2"));
    by_pci = reinterpret_cast<decltype(by_pci)>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
    by_index = reinterpret_cast<decltype(by_index)>(sym("nvmlDeviceGetHandleByIndex_v2"));
    memory = reinterpret_cast<decltype(memory)>(sym("nvmlDeviceGetMemoryInfo"));
    processes = reinterpret_cast<decltype(processes)>(sym("nvmlDeviceGetComputeRunningProcesses_v3"));
    if (processes == nullptr)
      processes = reinterpret_cast<decltype(processes)>(sym("nvmlDeviceGetComputeRunningProcesses_v2"));
    ok = init != nullptr && by_index != nullptr && memory != nullptr && init() == kNvmlSuccess;
    // The library stays loaded for the life of the process (NVML is never shut down).
  }

  NvmlDevice device(int ordinal) const {
    if (!ok) return nullptr;
    NvmlDevice d = nullptr;
    const std::string bus = cuda_pci_bus_id(ordinal);  // CUDA's ordinals need not be NVML's indices
    if (!bus.empty() && by_pci != nullptr && by_pci(bus.c_str(), &d) == kNvmlSuccess) return d;
    if (bus.empty() && by_index(static_cast<unsigned int>(ordinal), &d) == kNvmlSuccess) return d;
    return nullptr;
  }

  std::optional<uint64_t> device_used(NvmlDevice d) const {
    NvmlMemory m{};
    if (d == nullptr || memory(d, &m) != kNvmlSuccess) return std::nullopt;
    return m.used;
  }

  // This pid's used memory in the device's list of compute processes; nullopt when it is not listed
  // (no context yet, or a pid namespace NVML does not see into) or NVML does not say.
  std::optional<uint64_t> process_used(NvmlDevice d) const {
    if (d == nullptr || processes == nullptr) return std::nullopt;
    std::vector<NvmlProcessInfo> infos(16);
    for (int attempt = 0; attempt < 4; ++attempt) {
      unsigned int n = static_cast<unsigned int>(infos.size());
      const NvmlReturn r = processes(d, &n, infos.data());
      if (r == kNvmlInsufficientSize) {
        infos.resize(static_cast<size_t>(n) + 16);
        continue;
      }
      if (r != kNvmlSuccess) return std::nullopt;
      const unsigned int me = static_cast<unsigned int>(getpid());
      for (unsigned int i = 0; i < n && i < infos.size(); ++i)
        if (infos[i].pid == me && infos[i].used_gpu_memory != kNvmlValueNotAvailable)
          return infos[i].used_gpu_memory;
      return std::nullopt;
    }
    return std::nullopt;
  }
};

const Nvml& nvml() {
  static const Nvml n;
  return n;
}

}  // namespace

const char* memory_source_name(MemorySource source) {
  switch (source) {
    case MemorySource::kNone: return "none";
    case MemorySource::kNvmlProcess: return "nvml-process";
    case MemorySource::kNvmlDeviceDelta: return "nvml-device-delta";
    case MemorySource::kCudaFreeDelta: return "cuda-free-delta";
    case MemorySource::kModelled: return "modelled";
  }
  return "none";
}

ProcessMemoryMeter::ProcessMemoryMeter(int ordinal) : ordinal_(ordinal) {
  nvml_device_ = nvml().device(ordinal);
  device_used_at_start_ = nvml().device_used(nvml_device_);
  if (device_used_at_start_) source_ = MemorySource::kNvmlDeviceDelta;
}

void ProcessMemoryMeter::calibrate() {
  std::lock_guard<std::mutex> lock(mu_);
  if (calibrated_) return;
  calibrated_ = true;
  if (nvml().process_used(nvml_device_)) {
    source_ = MemorySource::kNvmlProcess;
  } else if (device_used_at_start_) {
    source_ = MemorySource::kNvmlDeviceDelta;
  } else if (Expected<DeviceMemory> m = cuda_memory(ordinal_)) {
    source_ = MemorySource::kCudaFreeDelta;
    free_at_calibration_ = m->free;
  } else {
    source_ = MemorySource::kNone;
  }
}

MemorySource ProcessMemoryMeter::source() {
  std::lock_guard<std::mutex> lock(mu_);
  return source_;
}

std::optional<uint64_t> ProcessMemoryMeter::read() {
  std::lock_guard<std::mutex> lock(mu_);
  switch (source_) {
    case MemorySource::kNvmlProcess: {
      // Listed once the context exists; not listed before it (then it holds nothing).
      const std::optional<uint64_t> v = nvml().process_used(nvml_device_);
      return v ? *v : 0;
    }
    case MemorySource::kNvmlDeviceDelta: {
      const std::optional<uint64_t> v = nvml().device_used(nvml_device_);
      if (!v) return std::nullopt;
      return *v > *device_used_at_start_ ? *v - *device_used_at_start_ : 0;
    }
    case MemorySource::kCudaFreeDelta: {
      Expected<DeviceMemory> m = cuda_memory(ordinal_);
      if (!m) return std::nullopt;
      return kDefaultCudaContextBytes + (free_at_calibration_ > m->free ? free_at_calibration_ - m->free : 0);
    }
    case MemorySource::kModelled:
    case MemorySource::kNone: break;
  }
  return std::nullopt;
}

ProcessMemoryMeter& process_memory_meter(int ordinal) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<ProcessMemoryMeter>> meters;
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<ProcessMemoryMeter>& m = meters[ordinal];
  if (!m) m = std::make_unique<ProcessMemoryMeter>(ordinal);
  return *m;
}

}  // namespace ferry::exec
