// Device factories shared by every build; the CUDA ones are stubs when ferry is built without CUDA
// (device_cuda.cc defines them otherwise).
#include "exec/device.h"

#include "exec/device_cuda.h"
#include "exec/device_emulated.h"
#include "exec/process_memory.h"

namespace ferry::exec {

const char* device_kind_name(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCuda: return "cuda";
    case DeviceKind::kEmulated: return "emulated";
  }
  return "unknown";
}

Expected<HostBuffer> Device::register_host(void*, uint64_t) {
  return make_error(ErrorCode::kUnsupported, "%s devices cannot register host memory", device_kind_name(kind()));
}

void Device::unregister_host(HostBuffer* buf) {
  if (buf) *buf = HostBuffer{};
}

Expected<std::unique_ptr<Device>> make_emulated_device(const EmulatedOptions& options) {
  FERRY_ASSIGN_OR_RETURN(auto dev, EmulatedDevice::create(options));
  return std::unique_ptr<Device>(std::move(dev));
}

Expected<std::unique_ptr<Device>> make_device(const std::string& kind, int ordinal, uint64_t budget) {
  if (kind == "cuda") return make_cuda_device(ordinal, budget);
  if (kind == "emulated") {
    EmulatedOptions opt;
    // No budget: a large reservation of address space; pages are committed only when written.
    opt.budget = budget ? budget : (8ull << 30);
    return make_emulated_device(opt);
  }
  return make_error(ErrorCode::kInvalidArgument, "unknown device '%s' (expected cuda or emulated)", kind.c_str());
}

#if !defined(FERRY_HAVE_CUDA)
bool cuda_available(std::string* why) {
  if (why) *why = "ferry was built without CUDA";
  return false;
}

Expected<std::unique_ptr<Device>> make_cuda_device(int, uint64_t) {
  return make_error(ErrorCode::kDevice, "no usable CUDA GPU: ferry was built without CUDA");
}

Expected<CudaDeviceInfo> cuda_device_info(int) {
  return make_error(ErrorCode::kDevice, "no usable CUDA GPU: ferry was built without CUDA");
}

struct CudaOpsBundle::Impl {};
CudaOpsBundle::CudaOpsBundle(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaOpsBundle::~CudaOpsBundle() = default;
Expected<std::unique_ptr<CudaOpsBundle>> CudaOpsBundle::create(Device&, Stream&, const kernels::CudaScratchShape&,
                                                               const kernels::CudaOpsOptions&) {
  return make_error(ErrorCode::kDevice, "no usable CUDA GPU: ferry was built without CUDA");
}
// Unreachable: no bundle can be created in this build.
kernels::Ops& CudaOpsBundle::ops() { FERRY_ASSERT_MSG(false, "built without CUDA"); }
Status CudaOpsBundle::status() const { return make_error(ErrorCode::kDevice, "ferry was built without CUDA"); }
void CudaOpsBundle::clear_status() {}
Status CudaOpsBundle::begin_capture() { return make_error(ErrorCode::kDevice, "ferry was built without CUDA"); }
Expected<int> CudaOpsBundle::end_capture() { return make_error(ErrorCode::kDevice, "ferry was built without CUDA"); }
Status CudaOpsBundle::replay(int) { return make_error(ErrorCode::kDevice, "ferry was built without CUDA"); }
void CudaOpsBundle::drop_graphs() {}

uint64_t cuda_arena_bytes() { return 0; }
std::string cuda_pci_bus_id(int) { return ""; }
Expected<DeviceMemory> cuda_memory(int) {
  return make_error(ErrorCode::kDevice, "no usable CUDA GPU: ferry was built without CUDA");
}
Expected<ContextCost> measure_cuda_context(int) {
  return make_error(ErrorCode::kDevice, "no usable CUDA GPU: ferry was built without CUDA");
}
#endif

}  // namespace ferry::exec
