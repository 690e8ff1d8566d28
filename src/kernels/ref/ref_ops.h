// RefOps: the scalar, obviously-correct implementation of every Ops method: the golden version all
// other backends (CpuOps, CudaOps) are tested against. Plain loops, f32 storage, double accumulation
// in every reduction (dot products, norms, softmax), weights through the reference dequantizer.
// Host memory only; single-threaded; slow on purpose.
#pragma once

#include <memory>

#include "kernels/ops.h"

namespace ferry::kernels {

class RefOps final : public Ops {
 public:
  const char* name() const override { return "ref"; }

  void embed(const TensorView& table, const TensorView& tokens, float scale, TensorView out) override;
  void rms_norm(const TensorView& x, const TensorView& w, float eps, TensorView out) override;
  void matmul(const TensorView& w, const TensorView& x, TensorView out) override;
  void add(const TensorView& a, const TensorView& b, TensorView out) override;
  void scale(const TensorView& x, float s, TensorView out) override;
  void rope(TensorView x, const BatchMeta& batch, const RopeParams& p) override;
  void kv_store(const TensorView& k, const TensorView& v, const BatchMeta& batch, KvView kv) override;
  void attention(const TensorView& q, const KvView& kv, const BatchMeta& batch, const AttnParams& p,
                 TensorView out) override;
  void glu(const TensorView& gate, const TensorView& up, Activation act, TensorView out) override;
  void gather_rows(const TensorView& x, const int32_t* rows, TensorView out) override;
};

std::unique_ptr<Ops> make_ref_ops();

// The activations, exactly as the reference computes them (shared with tests and other backends'
// scalar tails): silu(x) = x / (1 + e^-x); gelu_tanh(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
float silu_ref(float x);
float gelu_tanh_ref(float x);

}  // namespace ferry::kernels
