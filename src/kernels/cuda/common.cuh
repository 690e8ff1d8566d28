// Device helpers shared by the kernel files: warp reductions, 16-byte vector types, bf16 conversion.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <utility>

#include "kernels/cuda/launch_settings.h"

namespace ferry::kernels::cuda {

inline constexpr int kWarp = 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ int warp_sum_int(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The FFN activation of glu: 0 = silu g / (1 + e^-g), 1 = gelu (tanh approximation). glu_kernel and the
// matvec's fused epilogue (matvec_quant_glu) share it, so both give the same floats.
__device__ __forceinline__ float glu_act(float g, int act) {
  if (act == 0) return g / (1.f + expf(-g));
  const float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * g * (1.f + tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g)));
}

// glu's output for one (gate, up) pair: act 0 / 1 as glu_act times up; act 2 gpt-oss's clamped SwiGLU
// (ggml_swiglu_oai, alpha 1.702, limit 7): x = min(g, 7), v = clamp(u, -7, 7), x * sigmoid(1.702 x) * (v + 1),
// in RefOps' float order (x / (1 + e^(1.702 * -x))).
__device__ __forceinline__ float glu_value(float g, float u, int act) {
  if (act == 2) {
    const float x = fminf(g, 7.0f);
    const float v = fminf(fmaxf(u, -7.0f), 7.0f);
    return __fmul_rn(__fdiv_rn(x, __fadd_rn(1.f, expf(__fmul_rn(1.702f, -x)))), __fadd_rn(v, 1.f));
  }
  return glu_act(g, act) * u;
}

// quantize_q8's arithmetic on one 32-block held one value per lane (every lane calls it): d = max|y| / 127,
// q = round(y / d); the lane's q goes to *q, and lane 0 writes {d, d * sum(q)} to *ds.
__device__ __forceinline__ void quantize_q8_warp(float y, int8_t* q, float2* ds, int lane) {
  const float amax = warp_max(fabsf(y));
  const float d = amax / 127.f;
  const int qi = amax > 0.f ? __float2int_rn(y / d) : 0;
  const int sum = warp_sum_int(qi);
  *q = static_cast<int8_t>(qi);
  if (lane == 0) *ds = make_float2(d, d * static_cast<float>(sum));
}

__device__ __forceinline__ float bf16_bits_to_float(uint32_t bits16) { return __uint_as_float(bits16 << 16); }

// Round-to-nearest-even float -> bf16 bits (NaN kept quiet), the same rule as quant_blocks.h.
__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
  uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 64);
  return static_cast<uint16_t>((x + (0x7fffu + ((x >> 16) & 1u))) >> 16);
}

// Programmatic dependent launch (sm_90+; no-ops before, and when the launch did not ask for it):
// grid_dependency_wait() blocks until the preceding kernel of the stream has completed and its writes are
// visible; allow_dependents() lets the next kernel (launched with the PDL attribute) start early.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// The start of every kernel launched with PDL: wait for the previous kernel (its writes visible), then let
// the next one be scheduled, so the chain is pre-launched one kernel deep. Letting the next go before the
// wait (a chain as deep as the SMs have room for, each matvec loading weights during all the small
// kernels ahead of it) decodes slower (bench/RESULTS.md).
__device__ __forceinline__ void pdl_enter() {
  grid_dependency_wait();
  allow_dependents();
}

// Timing builds only (compiled with -DFERRY_CUDA_EMPTY_SMALL; results wrong): the small decode kernels
// (norms, rope, glu, attention, its combine, quantize_q8) return right after pdl_enter(), so a decode step
// keeps every launch and PDL hand-off but does none of their loads, arithmetic or stores. Against a normal
// build and FERRY_CUDA_ABLATE (no launch at all) it splits what those kernels cost into the hand-offs and
// the work.
#ifdef FERRY_CUDA_EMPTY_SMALL
#define FERRY_EMPTY_SMALL_RETURN() return
#else
#define FERRY_EMPTY_SMALL_RETURN() (void)0
#endif

// 16 bytes global -> shared without passing through registers (sm_80+: cp.async; only the first src_bytes
// (0..16) are read, the rest zero-filled; completes at cp_async_wait); older GPUs copy synchronously.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(gmem), "r"(src_bytes));
#else
  unsigned char* d = static_cast<unsigned char*>(smem);
  const unsigned char* g = static_cast<const unsigned char*>(gmem);
  for (int i = 0; i < 16; ++i) d[i] = i < src_bytes ? g[i] : 0;
#endif
}
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  cp_async16(smem, gmem, valid ? 16 : 0);
#else
  *reinterpret_cast<uint4*>(smem) = valid ? *reinterpret_cast<const uint4*>(gmem) : make_uint4(0, 0, 0, 0);
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// Whether the small decode kernels launch with programmatic dependent launch (launch_ex): sm_90+, unless
// LaunchSettings turn it off (an experiments build's FERRY_CUDA_PDL=0). A constant for the process's life.
inline bool pdl_default() {
  static const bool on = [] {
    if (!launch_settings().pdl) return false;
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return major >= 9;
  }();
  return on;
}

// kernel<<<grid, block, smem, stream>>>(args...), with programmatic stream serialization when pdl: the
// kernel may be scheduled while the stream's previous kernel still runs, so it must call
// grid_dependency_wait() before it reads anything earlier work wrote, and allow_dependents() (both:
// pdl_enter()).
template <typename... KArgs, typename... Args>
cudaError_t launch_ex(bool pdl, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                      Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  return e != cudaSuccess ? e : cudaGetLastError();
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

inline unsigned ceil_div(int64_t a, int64_t b) { return static_cast<unsigned>((a + b - 1) / b); }

}  // namespace ferry::kernels::cuda
