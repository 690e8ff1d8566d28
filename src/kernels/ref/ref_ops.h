// RefOps: the scalar, obviously-correct implementation of every Ops method: the golden version all
// other backends (CpuOps, CudaOps) are tested against. Plain loops, f32 storage, double accumulation
// in every reduction (dot products, norms, softmax), weights through the reference dequantizer.
// Host memory only; single-threaded; slow on purpose.
//
// Two numerics (RefNumerics). kExact is the math as written. kLlamaCpp adds the rounding points of
// llama.cpp's CPU backend (ggml, flash attention off), each through the reference (de)quantizers:
// activations rounded to the weight type's dot partner before a matmul (Q8_0 / Q8_1 / Q8_K / F16 /
// BF16, see activation_type), q and the softmax probabilities rounded to F16 in attention, GELU
// through F16, float RoPE angles and norm scales. Why: with 8-bit activations a model is chaotic at
// the rounding boundaries — a 1-ulp change flips roundings and moves real models' logits by ~0.2x
// their spread — so matching llama.cpp closely needs its rounding points, not just its math. With
// them, tiny synthetic models match llama.cpp bit for bit or nearly.
#pragma once

#include <memory>

#include "kernels/ops.h"

namespace ferry::kernels {

enum class RefNumerics : uint8_t { kExact, kLlamaCpp };

// The type llama.cpp's CPU backend converts activations to before a dot product with weights of type
// w (ggml's vec_dot_type): Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the k-quants,
// F16 / BF16 for F16 / BF16, F32 for F32.
DType activation_type(DType w);

class RefOps final : public Ops {
 public:
  explicit RefOps(RefNumerics numerics = RefNumerics::kExact) : numerics_(numerics) {}
  RefNumerics numerics() const { return numerics_; }
  const char* name() const override { return numerics_ == RefNumerics::kExact ? "ref-exact" : "ref"; }

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
  void rope_multi(TensorView x, const TensorView& pos, const RopeParams& p) override;
  void attention_segments(const TensorView& q, const TensorView& k, const TensorView& v, const int32_t* bounds,
                          int32_t n_seg, float scale, TensorView out) override;

 private:
  bool llama() const { return numerics_ == RefNumerics::kLlamaCpp; }
  RefNumerics numerics_;
};

std::unique_ptr<Ops> make_ref_ops(RefNumerics numerics = RefNumerics::kExact);

// The activations, exactly as the reference computes them (shared with tests and other backends'
// scalar tails): silu(x) = x / (1 + e^-x); gelu_tanh(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
float silu_ref(float x);
float gelu_tanh_ref(float x);
// GELU as ggml's CPU backend computes it: 0 below -10, identity above 10, else the F16 table value
// at the F16-rounded input (the table holds the float formula rounded to F16).
float gelu_tanh_ggml(float x);

}  // namespace ferry::kernels
