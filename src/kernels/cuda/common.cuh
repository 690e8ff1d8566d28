// Device helpers shared by the kernel files: warp reductions, 16-byte vector types, bf16 conversion.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <utility>

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

__device__ __forceinline__ float bf16_bits_to_float(uint32_t bits16) { return __uint_as_float(bits16 << 16); }

// Round-to-nearest-even float -> bf16 bits (NaN kept quiet), the same rule as quant_blocks.h.
__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
  uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 64);
  return static_cast<uint16_t>((x + (0x7fffu + ((x >> 16) & 1u))) >> 16);
}

// Sum of v over a block of 256 threads (every thread gets it).
__device__ __forceinline__ float block256_sum(float v) {
  v = warp_sum(v);
  __shared__ float part[256 / kWarp];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int i = 0; i < 256 / kWarp; ++i) total += part[i];
  return total;
}

// quantize_q8's arithmetic on 32 values held as float4 by 8 consecutive lanes (lane % 8 == block lane):
// the same max, scale, rounding and integer sum, so the result is bit for bit quantize_q8's.
__device__ __forceinline__ void quantize_q8_by8(float4 v, int8_t* xq4, float2* xds_blk, bool writer) {
  const unsigned mask = 0xFFu << (threadIdx.x & 24u);  // this lane's group of 8 (the others may be idle)
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(mask, amax, o));
  const float d = amax / 127.f;
  const int q0 = amax > 0.f ? __float2int_rn(v.x / d) : 0;
  const int q1 = amax > 0.f ? __float2int_rn(v.y / d) : 0;
  const int q2 = amax > 0.f ? __float2int_rn(v.z / d) : 0;
  const int q3 = amax > 0.f ? __float2int_rn(v.w / d) : 0;
  int sum = q0 + q1 + q2 + q3;
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) sum += __shfl_xor_sync(mask, sum, o);
  const uint32_t packed = (static_cast<uint32_t>(q0) & 0xFFu) | ((static_cast<uint32_t>(q1) & 0xFFu) << 8) |
                          ((static_cast<uint32_t>(q2) & 0xFFu) << 16) | ((static_cast<uint32_t>(q3) & 0xFFu) << 24);
  *reinterpret_cast<uint32_t*>(xq4) = packed;
  if (writer) *xds_blk = make_float2(d, d * static_cast<float>(sum));
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
// the environment says FERRY_CUDA_PDL=0. Read once per process (a constant for the process's life).
inline bool pdl_default() {
  static const bool on = [] {
    const char* e = std::getenv("FERRY_CUDA_PDL");
    if (e != nullptr && e[0] == '0') return false;
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
// grid_dependency_wait() before it reads anything earlier work wrote (and should call allow_dependents()
// after it, so the chain is pre-launched one kernel deep, no deeper).
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
