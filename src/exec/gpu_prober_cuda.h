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
// process_cap > 0: the device memory the whole process may hold meanwhile (a VRAM budget whose first run
// measures the quick profile): the arena shrinks to what the CUDA context leaves, and the copies to an
// eighth of it (GpuProber::copy_bytes_limit).
Expected<std::unique_ptr<plan::GpuProber>> make_cuda_gpu_prober(int ordinal = 0, uint64_t process_cap = 0);

}  // namespace ferry::exec
