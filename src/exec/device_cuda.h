// The CUDA side of exec, usable from code that includes no CUDA header and compiles without CUDA
// (every function then fails with "ferry was built without CUDA"). The CudaDevice itself is made by
// make_cuda_device (device.h); this adds device facts for the profiler and a CudaOps bundle whose
// scratch and cuBLAS workspace are arena blocks, so the whole backend stays inside the budget.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "exec/device.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"

namespace ferry::exec {

struct CudaDeviceInfo {
  std::string name;            // "NVIDIA H200"
  int compute_capability = 0;  // 90 for sm_90
  int sm_count = 0;
  uint64_t total_memory = 0;   // bytes
  uint64_t l2_bytes = 0;
  int driver_version = 0;      // 12080 = 12.8
  int runtime_version = 0;
};
Expected<CudaDeviceInfo> cuda_device_info(int ordinal);

// CudaOps on `stream` of a CUDA device, with its context, scratch (sized for `shape`) and cuBLAS
// workspace; the arena blocks go back when the bundle is destroyed (before the device and stream).
class CudaOpsBundle {
 public:
  static Expected<std::unique_ptr<CudaOpsBundle>> create(Device& device, Stream& stream,
                                                         const kernels::CudaScratchShape& shape,
                                                         const kernels::CudaOpsOptions& options = {});
  ~CudaOpsBundle();
  kernels::Ops& ops();
  // First CUDA / cuBLAS error an op hit since the last clear (ops become no-ops once it is set).
  // Errors of kernels that fail while running surface from Device::sync instead.
  Status status() const;
  void clear_status();

  // CUDA graphs of whole steps (a decode step is ~hundreds of small launches; a graph replays them with
  // one launch). Ops enqueued between begin_capture() and end_capture() are recorded, not run;
  // replay(id) runs them again on the bundle's stream with the same pointers and shapes (new contents).
  // Host values baked into launches (gather_rows indices, token counts) are frozen at capture time.
  Status begin_capture();
  Expected<int> end_capture();  // the graph's id
  Status replay(int id);
  void drop_graphs();

  struct Impl;

 private:
  explicit CudaOpsBundle(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::exec
