// Scalar generic kernels (baseline x86-64 flags, or any other architecture): every weight type by
// unpacking one block at a time and taking integer dot products with the quantized activations, the
// same arithmetic the SIMD levels do. This level is the fallback and the tests' middle reference.
#include "kernels/cpu/generic_ops_impl.h"

namespace ferry::kernels::cpu {
namespace {

// out[c * os + r] for r < n_rows, c < n_cols: quantized weights against quantized acts.
template <typename T>
void direct_quant(const MatArgs& a) {
  constexpr int B = T::B, G = T::G, NG = B / G;
  const int64_t nb = a.K / B;
  uint8_t u[B];
  float sc[NG], mn[NG];
  ActView act[kMaxDirectCols];
  for (int c = 0; c < a.n_cols; ++c) act[c] = act_view(a.act + c * a.act_stride, a.K, G);
  for (int64_t r = 0; r < a.n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const typename T::BlockT*>(a.w + r * a.w_stride);
    float acc[kMaxDirectCols] = {0, 0, 0, 0};
    for (int64_t b = 0; b < nb; ++b) {
      T::unpack(blocks[b], u, sc, mn);
      for (int c = 0; c < a.n_cols; ++c) {
        const int8_t* q = act[c].q + b * B;
        for (int g = 0; g < NG; ++g) {
          int32_t isum = 0;
          for (int i = 0; i < G; ++i) isum += static_cast<int32_t>(u[g * G + i]) * q[g * G + i];
          const int64_t gi = b * NG + g;
          acc[c] += sc[g] * act[c].dx[gi] * static_cast<float>(isum) + mn[g] * act[c].sy[gi];
        }
      }
    }
    for (int c = 0; c < a.n_cols; ++c) a.out[c * a.out_stride + r] = acc[c];
  }
}

template <typename Conv>
void direct_float(const MatArgs& a) {
  for (int64_t r = 0; r < a.n_rows; ++r) {
    const uint8_t* w = a.w + r * a.w_stride;
    for (int c = 0; c < a.n_cols; ++c) {
      const float* x = reinterpret_cast<const float*>(a.act + c * a.act_stride);
      float acc = 0.f;
      for (int64_t k = 0; k < a.K; ++k) acc += Conv::get(w, k) * x[k];
      a.out[c * a.out_stride + r] = acc;
    }
  }
}
struct ConvF32 {
  static float get(const uint8_t* w, int64_t k) { return reinterpret_cast<const float*>(w)[k]; }
};
struct ConvF16 {
  static float get(const uint8_t* w, int64_t k) { return h2f(reinterpret_cast<const uint16_t*>(w)[k]); }
};
struct ConvBF16 {
  static float get(const uint8_t* w, int64_t k) { return bf2f(reinterpret_cast<const uint16_t*>(w)[k]); }
};

void set_direct(KernelTable* t, DType type, void (*fn)(const MatArgs&)) {
  MatKernel& m = t->mat[static_cast<uint32_t>(type)];
  m.direct = fn;
  m.direct_cols = kMaxDirectCols;
}

}  // namespace

void fill_scalar(KernelTable* t) {
  t->isa = CpuIsa::kScalar;
  set_quant_acts(t);
  set_direct(t, DType::Q4_0, direct_quant<TQ4_0>);
  set_direct(t, DType::Q4_1, direct_quant<TQ4_1>);
  set_direct(t, DType::Q5_0, direct_quant<TQ5_0>);
  set_direct(t, DType::Q5_1, direct_quant<TQ5_1>);
  set_direct(t, DType::Q8_0, direct_quant<TQ8_0>);
  set_direct(t, DType::MXFP4, direct_quant<TMXFP4>);
  set_direct(t, DType::Q2_K, direct_quant<TQ2_K>);
  set_direct(t, DType::Q3_K, direct_quant<TQ3_K>);
  set_direct(t, DType::Q4_K, direct_quant<TQ4_K>);
  set_direct(t, DType::Q5_K, direct_quant<TQ5_K>);
  set_direct(t, DType::Q6_K, direct_quant<TQ6_K>);

  struct FloatEntry {
    DType type;
    void (*quantize)(const float*, int64_t, void*);
    void (*direct)(const MatArgs&);
  };
  const FloatEntry floats[] = {{DType::F32, act_f32, direct_float<ConvF32>},
                               {DType::F16, act_f16_as_f32, direct_float<ConvF16>},
                               {DType::BF16, act_bf16_as_f32, direct_float<ConvBF16>}};
  for (const FloatEntry& f : floats) {
    MatKernel& m = t->mat[static_cast<uint32_t>(f.type)];
    m.group = 0;
    m.act_bytes = act_bytes_f32;
    m.quantize = f.quantize;
    set_direct(t, f.type, f.direct);
  }
  set_generic_ops(t);
}

}  // namespace ferry::kernels::cpu
