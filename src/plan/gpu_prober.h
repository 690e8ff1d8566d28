// GpuProber: what the profiler needs from a GPU, as an interface, so src/plan stays free of CUDA.
// The CUDA implementation (wired by the executor / CLI, outside src/plan) times real copies from
// pinned host memory and real CudaOps kernels; an emulated device may implement it for tests.
// Every timing call blocks until the work is done and returns seconds of wall time.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "tensor/dtype.h"

namespace ferry::plan {

class GpuProber {
 public:
  virtual ~GpuProber() = default;

  virtual std::string name() const = 0;      // "NVIDIA H200"
  virtual std::string driver() const = 0;    // driver version, e.g. "550.54.15"
  virtual uint64_t memory_bytes() const = 0;  // total device memory
  // Device memory the process holds outside ferry's arena with a CUDA context, a cuBLAS handle and
  // streams (GpuProfile::context_bytes); 0 = not measured.
  virtual uint64_t context_bytes() { return 0; }
  // The largest copy the prober has room for (a prober inside a memory cap); the profiler's copies
  // are this size when it is below their usual one.
  virtual uint64_t copy_bytes_limit() { return UINT64_MAX; }

  // `reps` back-to-back copies of `bytes` (one buffer each side), synchronised at the end.
  virtual Expected<double> time_h2d(uint64_t bytes, int reps) = 0;           // from pinned memory
  virtual Expected<double> time_d2h(uint64_t bytes, int reps) = 0;           // to pinned memory
  virtual Expected<double> time_h2d_pageable(uint64_t bytes, int reps) = 0;  // from malloc'd memory
  virtual Expected<double> time_d2d(uint64_t bytes, int reps) = 0;           // device-to-device copy

  // `reps` matmuls out[rows, tokens] = W[rows, cols] x[cols, tokens] with W of dtype `t` resident
  // on the device, through the same kernels ferry runs (CudaOps::matmul).
  virtual Expected<double> time_matmul(DType t, int64_t rows, int64_t cols, int64_t tokens, int reps) = 0;
  // Average cost of launching one (empty or tiny) kernel, microseconds.
  virtual Expected<double> launch_overhead_us() = 0;

  // `reps` attention calls (CudaOps::attention: q [head_dim, n_head, n_tokens] over an F16 KV cache of
  // n_cells cells of one sequence, positions 0..n_cells-1) for n_tokens new tokens at the last positions
  // (causal): n_tokens = 1 is a decode step after n_cells - 1 cached tokens, more is a prefill chunk.
  // Seconds of device time. Default: kUnsupported (the profile then has no gpu.attention section).
  virtual Expected<double> time_attention(int n_head, int n_kv_head, int head_dim, int64_t n_cells, int64_t n_tokens,
                                          int reps) {
    (void)n_head, (void)n_kv_head, (void)head_dim, (void)n_cells, (void)n_tokens, (void)reps;
    return make_error(ErrorCode::kUnsupported, "this GPU prober does not time attention");
  }

  // Keeps H2D (h2d = true) or D2H copies of `chunk_bytes` running back to back on a copy stream
  // until stop_background_copies(), which returns the bytes copied and the seconds they took. Used to
  // measure CPU kernels while copies run (the combined host-memory rate H).
  virtual Status start_background_copies(bool h2d, uint64_t chunk_bytes) = 0;
  struct CopyStats {
    double bytes = 0;
    double seconds = 0;
  };
  virtual Expected<CopyStats> stop_background_copies() = 0;
};

}  // namespace ferry::plan
