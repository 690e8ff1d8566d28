// Matrix-vector kernels for decode (n_tokens <= 8): every weight byte is read once per call.
//   quantized W: x is first quantized to int8 blocks of 32 (quantize_q8), then one warp per weight row
//     walks the row's slices (quant_units.h): consecutive lanes take consecutive 32-bit words of a block,
//     so each load instruction of the warp reads one contiguous span of weights (and of activations);
//     dp4a integer dot products; a warp shuffle reduction per token.
//   F32/F16/BF16 W: one warp per row, 16-byte loads of W, x read as float4 (it stays in L1/L2).
// Bytes moved per call ~= N * row_bytes (+ the small x): bench_cuda_ops reports GB/s against a d2d copy.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/quant_units.h"

namespace ferry::kernels::cuda {
namespace {

constexpr int kRowsPerBlock = 4;  // one warp per row, 4 warps per block

// ---- kernels -----------------------------------------------------------------------------------------

// One warp per block of 32 activations: d = max|x| / 127, q = round(x / d).
__global__ void quantize_q8_kernel(const float* __restrict__ x, int64_t x_stride, int64_t K, int64_t n_blocks,
                                   int8_t* __restrict__ xq, float2* __restrict__ xds) {
  const int64_t wid = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int64_t per_token = K / 32;
  if (wid >= n_blocks) return;
  const int64_t t = wid / per_token;
  const int64_t b = wid % per_token;
  const float v = x[t * x_stride + b * 32 + lane];
  const float amax = warp_max(fabsf(v));
  const float d = amax / 127.f;
  const int q = amax > 0.f ? __float2int_rn(v / d) : 0;
  const int sum = warp_sum_int(q);
  xq[t * K + b * 32 + lane] = static_cast<int8_t>(q);
  if (lane == 0) xds[t * per_token + b] = make_float2(d, d * static_cast<float>(sum));
}

// RPW rows per warp: the activations a lane loads for a unit serve RPW rows (fewer load instructions per
// weight byte) and each lane has RPW units of weights in flight; fewer warps in total, though.
template <DType Q, int NT, int RPW>
__global__ void __launch_bounds__(kRowsPerBlock * kWarp)
    matvec_quant_kernel(const uint8_t* __restrict__ w, int64_t w_stride, int n_slices, int64_t N, int64_t K,
                        const int8_t* __restrict__ xq, const float2* __restrict__ xds, int T,
                        float* __restrict__ out, int64_t out_stride) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp) * RPW;
  if (n0 >= N) return;  // whole warps only: no block-level synchronization below
  const uint8_t* row[RPW];
#pragma unroll
  for (int r = 0; r < RPW; ++r) row[r] = w + min(n0 + r, N - 1) * w_stride;  // clamped rows are not stored
  float acc[RPW][NT];
#pragma unroll
  for (int r = 0; r < RPW; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;
  constexpr int S = SliceTraits<Q>::kSlices;
  constexpr int kBlockElems = SliceTraits<Q>::kElems;
  constexpr int kBlockBytes = sizeof(typename SliceTraits<Q>::Block);
#pragma unroll 4
  for (int g = lane; g < n_slices; g += kWarp) {
    const int blk = g / S, s = g % S;
#pragma unroll
    for (int r = 0; r < RPW; ++r) {
      const uint8_t* b = row[r] + static_cast<int64_t>(blk) * kBlockBytes;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t < T) {
          const int* xt = reinterpret_cast<const int*>(xq + t * K) + blk * (kBlockElems / 4);
          acc[r][t] += dot_slice<Q>(b, s, xt, xds + t * (K / 32) + blk * (kBlockElems / 32));
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float s = warp_sum(acc[r][t]);
      if (lane == 0 && t < T && n0 + r < N) out[t * out_stride + n0 + r] = s;
    }
  }
}

template <typename W>
__device__ __forceinline__ void load8(const W* p, float* f);
template <>
__device__ __forceinline__ void load8<__half>(const __half* p, float* f) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = __half22float2(h[i]);
    f[2 * i] = a.x;
    f[2 * i + 1] = a.y;
  }
}
template <>
__device__ __forceinline__ void load8<uint16_t>(const uint16_t* p, float* f) {  // BF16
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(u[i] << 16);
    f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
}
template <>
__device__ __forceinline__ void load8<float>(const float* p, float* f) {
  const float4 a = reinterpret_cast<const float4*>(p)[0];
  const float4 b = reinterpret_cast<const float4*>(p)[1];
  f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
  f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(uint16_t v) { return __uint_as_float(static_cast<uint32_t>(v) << 16); }
__device__ __forceinline__ float to_float(float v) { return v; }

// vec: rows and x are 16-byte aligned and K_vec (a multiple of 8) elements go through the vector path.
template <typename W, int NT>
__global__ void __launch_bounds__(kRowsPerBlock * kWarp)
    matvec_float_kernel(const uint8_t* __restrict__ w, int64_t w_stride, int64_t N, int64_t K, int64_t K_vec,
                        const float* __restrict__ x, int64_t x_stride, int T, float* __restrict__ out,
                        int64_t out_stride) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  if (n >= N) return;
  const W* row = reinterpret_cast<const W*>(w + n * w_stride);
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.f;
#pragma unroll 2
  for (int64_t k = 8 * lane; k < K_vec; k += 8 * kWarp) {
    float wf[8];
    load8<W>(row + k, wf);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < T) {
        float xf[8];
        load8<float>(x + t * x_stride + k, xf);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[t] = fmaf(wf[i], xf[i], acc[t]);
      }
    }
  }
  for (int64_t k = K_vec + lane; k < K; k += kWarp) {
    const float wk = to_float(row[k]);
#pragma unroll
    for (int t = 0; t < NT; ++t)
      if (t < T) acc[t] = fmaf(wk, x[t * x_stride + k], acc[t]);
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const float s = warp_sum(acc[t]);
    if (lane == 0 && t < T) out[t * out_stride + n] = s;
  }
}

// ---- launchers -------------------------------------------------------------------------------------

template <DType T>
cudaError_t launch_quant(const void* w, int64_t w_stride, int64_t K, int64_t N, const int8_t* xq,
                         const float2* xds, int nt, int rpw, float* out, int64_t out_stride, cudaStream_t stream) {
  const int n_slices = static_cast<int>(K / traits(T).block_elems) * SliceTraits<T>::kSlices;
  if (nt != 1) rpw = 1;
  const dim3 grid(ceil_div(N, kRowsPerBlock * rpw)), block(kRowsPerBlock * kWarp);
  const auto* wp = static_cast<const uint8_t*>(w);
  if (nt == 1 && rpw == 4) {
    matvec_quant_kernel<T, 1, 4><<<grid, block, 0, stream>>>(wp, w_stride, n_slices, N, K, xq, xds, nt, out, out_stride);
  } else if (nt == 1 && rpw == 2) {
    matvec_quant_kernel<T, 1, 2><<<grid, block, 0, stream>>>(wp, w_stride, n_slices, N, K, xq, xds, nt, out, out_stride);
  } else if (nt == 1) {
    matvec_quant_kernel<T, 1, 1><<<grid, block, 0, stream>>>(wp, w_stride, n_slices, N, K, xq, xds, nt, out, out_stride);
  } else if (nt == 2) {
    matvec_quant_kernel<T, 2, 1><<<grid, block, 0, stream>>>(wp, w_stride, n_slices, N, K, xq, xds, nt, out, out_stride);
  } else if (nt <= 4) {
    matvec_quant_kernel<T, 4, 1><<<grid, block, 0, stream>>>(wp, w_stride, n_slices, N, K, xq, xds, nt, out, out_stride);
  } else {
    matvec_quant_kernel<T, 8, 1><<<grid, block, 0, stream>>>(wp, w_stride, n_slices, N, K, xq, xds, nt, out, out_stride);
  }
  return cudaGetLastError();
}

template <typename W>
cudaError_t launch_float(const void* w, int64_t w_stride, int64_t K, int64_t N, const float* x, int64_t x_stride,
                         int nt, float* out, int64_t out_stride, cudaStream_t stream) {
  const bool vec = aligned16(w) && aligned16(x) && w_stride % 16 == 0 && (x_stride * 4) % 16 == 0;
  const int64_t K_vec = vec ? K / 8 * 8 : 0;
  const dim3 grid(ceil_div(N, kRowsPerBlock)), block(kRowsPerBlock * kWarp);
  const auto* wp = static_cast<const uint8_t*>(w);
  if (nt == 1) {
    matvec_float_kernel<W, 1><<<grid, block, 0, stream>>>(wp, w_stride, N, K, K_vec, x, x_stride, nt, out, out_stride);
  } else if (nt == 2) {
    matvec_float_kernel<W, 2><<<grid, block, 0, stream>>>(wp, w_stride, N, K, K_vec, x, x_stride, nt, out, out_stride);
  } else if (nt <= 4) {
    matvec_float_kernel<W, 4><<<grid, block, 0, stream>>>(wp, w_stride, N, K, K_vec, x, x_stride, nt, out, out_stride);
  } else {
    matvec_float_kernel<W, 8><<<grid, block, 0, stream>>>(wp, w_stride, N, K, K_vec, x, x_stride, nt, out, out_stride);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t quantize_q8(const float* x, int64_t x_stride, int64_t K, int T, int8_t* xq, float2* xds,
                        cudaStream_t stream) {
  if (K % 32 != 0 || T <= 0) return cudaErrorInvalidValue;
  const int64_t n_blocks = static_cast<int64_t>(T) * (K / 32);
  const int threads = 256;
  quantize_q8_kernel<<<ceil_div(n_blocks * kWarp, threads), threads, 0, stream>>>(x, x_stride, K, n_blocks, xq, xds);
  return cudaGetLastError();
}

cudaError_t matvec_quant(DType type, const void* w, int64_t w_stride, int64_t K, int64_t N, const int8_t* xq,
                         const float2* xds, int T, int rows_per_warp, float* out, int64_t out_stride,
                         cudaStream_t stream) {
  if (T < 1 || T > 8 || N <= 0) return cudaErrorInvalidValue;
  switch (type) {
    case DType::Q4_0: return launch_quant<DType::Q4_0>(w, w_stride, K, N, xq, xds, T, rows_per_warp, out, out_stride, stream);
    case DType::Q4_1: return launch_quant<DType::Q4_1>(w, w_stride, K, N, xq, xds, T, rows_per_warp, out, out_stride, stream);
    case DType::Q5_0: return launch_quant<DType::Q5_0>(w, w_stride, K, N, xq, xds, T, rows_per_warp, out, out_stride, stream);
    case DType::Q5_1: return launch_quant<DType::Q5_1>(w, w_stride, K, N, xq, xds, T, rows_per_warp, out, out_stride, stream);
    case DType::Q8_0: return launch_quant<DType::Q8_0>(w, w_stride, K, N, xq, xds, T, rows_per_warp, out, out_stride, stream);
    case DType::Q2_K: return launch_quant<DType::Q2_K>(w, w_stride, K, N, xq, xds, T, rows_per_warp, out, out_stride, stream);
    case DType::Q3_K: return launch_quant<DType::Q3_K>(w, w_stride, K, N, xq, xds, T, rows_per_warp, out, out_stride, stream);
    case DType::Q4_K: return launch_quant<DType::Q4_K>(w, w_stride, K, N, xq, xds, T, rows_per_warp, out, out_stride, stream);
    case DType::Q5_K: return launch_quant<DType::Q5_K>(w, w_stride, K, N, xq, xds, T, rows_per_warp, out, out_stride, stream);
    case DType::Q6_K: return launch_quant<DType::Q6_K>(w, w_stride, K, N, xq, xds, T, rows_per_warp, out, out_stride, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t matvec_float(DType type, const void* w, int64_t w_stride, int64_t K, int64_t N, const float* x,
                         int64_t x_stride, int T, float* out, int64_t out_stride, cudaStream_t stream) {
  if (T < 1 || T > 8 || N <= 0) return cudaErrorInvalidValue;
  switch (type) {
    case DType::F32: return launch_float<float>(w, w_stride, K, N, x, x_stride, T, out, out_stride, stream);
    case DType::F16: return launch_float<__half>(w, w_stride, K, N, x, x_stride, T, out, out_stride, stream);
    case DType::BF16: return launch_float<uint16_t>(w, w_stride, K, N, x, x_stride, T, out, out_stride, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace ferry::kernels::cuda
