// Helpers for the GPU tests and benchmarks of CudaOps: one CUDA device + stream + CudaOps per process,
// host tensors, device copies of them (arena blocks freed with the owner), random data and error metrics.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "exec/device.h"
#include "kernels/cuda/cuda_ops.h"
#include "tensor/tensor_view.h"

namespace ferry::cudatest {

struct Env {
  std::unique_ptr<exec::Device> dev;
  std::unique_ptr<exec::Stream> stream;
  exec::DeviceBuffer scratch, workspace;
  std::unique_ptr<kernels::CudaContext> ctx;
  std::unique_ptr<kernels::CudaOps> ops;
  ~Env();
  // Waits for the stream. Returns the first error (a failed launch recorded by CudaOps, or the stream's),
  // and re-arms CudaOps so later checks still run.
  Status sync();
};

// The process-wide environment (budget in bytes), or nullptr with *why set when no usable GPU.
Env* env(std::string* why, uint64_t budget = 8ull << 30,
         const kernels::CudaScratchShape& shape = kernels::CudaScratchShape{});

// A host tensor that owns its bytes.
struct HostTensor {
  std::vector<uint8_t> bytes;
  TensorView view;
  HostTensor() = default;
  HostTensor(DType t, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, int64_t ne3 = 1);
  template <typename T>
  T* data() { return reinterpret_cast<T*>(bytes.data()); }
  template <typename T>
  const T* data() const { return reinterpret_cast<const T*>(bytes.data()); }
  int64_t n() const { return view.nelements(); }
};

// A device copy of a host tensor (same shape, contiguous); released when destroyed.
class DevTensor {
 public:
  DevTensor(Env& e, const HostTensor& h, bool upload = true);
  DevTensor(Env& e, DType t, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, int64_t ne3 = 1);
  ~DevTensor();
  DevTensor(const DevTensor&) = delete;
  DevTensor& operator=(const DevTensor&) = delete;
  TensorView view;
  void upload(const HostTensor& h);
  void download(HostTensor* h);          // h must have the same shape
  HostTensor download();
  void poison();                          // 0xff bytes: NaN in F32/F16/BF16

 private:
  Env& env_;
  exec::DeviceBuffer buf_;
};

void fill_uniform(std::mt19937& rng, float* x, int64_t n, float lo = -1.f, float hi = 1.f);
// Random weights of type t [K, N]: floats quantized with the reference quantizer.
HostTensor random_weights(std::mt19937& rng, DType t, int64_t K, int64_t N);
// The same weights in the split layout (tensor/repack.h; view.layout = kSplit).
HostTensor to_split(const HostTensor& w);

struct ErrStats {
  double nrmse = 0;     // ||got - ref|| / ||ref||
  double max_abs = 0;   // max |got - ref|
  double ref_max = 0;   // max |ref|
  int64_t non_finite = 0;
};
ErrStats compare(const float* got, const float* ref, int64_t n);
std::string describe(const ErrStats& s);

}  // namespace ferry::cudatest
