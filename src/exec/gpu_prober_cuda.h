// The CUDA GpuProber: what `ferry profile` measures on a GPU (plan/gpu_prober.h), timed on a CudaDevice
// with the kernels ferry runs (CudaOps through a CudaOpsBundle) and real copies from pinned memory.
// Plain C++ over the Device interface, so it compiles in every build; without CUDA (or without a usable
// GPU) the factory returns kDevice "no usable CUDA GPU: <reason>".
#pragma once

#include <memory>

#include "base/status.h"
#include "plan/gpu_prober.h"

namespace ferry::exec {

// A prober of CUDA device `ordinal`. Cheap: it only reads the device's properties; the device, its
// arena and the pinned buffers are made on the first timing call and freed with the prober.
Expected<std::unique_ptr<plan::GpuProber>> make_cuda_gpu_prober(int ordinal = 0);

}  // namespace ferry::exec
