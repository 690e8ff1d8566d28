// Conversion kernels: weight rows -> F16 (before a cuBLAS GEMM), activations -> F16/BF16, embedding rows,
// row gathers and the greedy argmax. Quantized rows may be in ggml's or the split layout (tensor/repack.h). All memory-bound; one thread per 32 elements for the quantized
// types (dequant32 from quant_units.h, the code the host tests check), one per element otherwise.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/quant_chunks.h"
#include "tensor/repack.h"

namespace ferry::kernels::cuda {
namespace {

// ---- kernels -----------------------------------------------------------------------------------------

// Thread i dequantizes 32-group i of the whole matrix (rows are K = 32 * groups_per_row halves, so group i
// lands at halves [32i, 32i + 32) of the output). The 64 bytes of each thread go through shared memory so
// that the warp stores its 2 KiB as contiguous 16-byte pieces (coalesced), not 64-byte strides.
// Group g of a row: ggml layout (dequant32) or split layout (dequant32_split, rows of K = 32 * groups).
template <DType T, bool kSplit>
__device__ __forceinline__ void dequant_group(const uint8_t* row, int64_t groups_per_row, int g, float* v) {
  if constexpr (kSplit) {
    dequant32_split<T>(row, 32 * groups_per_row, g, v);
  } else {
    dequant32<T>(row, g, v);
  }
}

template <DType T, bool kSplit>
__global__ void __launch_bounds__(256) dequant_f16_kernel(const uint8_t* __restrict__ w, int64_t w_stride,
                                                          int64_t groups_per_row, int64_t total,
                                                          __half* __restrict__ out) {
  __shared__ uint4 stage[256 / kWarp][kWarp * 4];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total) {
    const int64_t r = i / groups_per_row;
    const int g = static_cast<int>(i % groups_per_row);
    float v[32];
    dequant_group<T, kSplit>(w + r * w_stride, groups_per_row, g, v);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      __half2 h[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) h[j] = __floats2half2_rn(v[8 * q + 2 * j], v[8 * q + 2 * j + 1]);
      stage[warp][lane * 4 + q] = *reinterpret_cast<uint4*>(h);
    }
  }
  __syncwarp();
  const int64_t first = i - lane;  // this warp's first group
  uint4* dst = reinterpret_cast<uint4*>(out) + first * 4;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int j = lane + kWarp * q;  // 16-byte piece j of the warp's span = group j / 4, quarter j % 4
    if (first + j / 4 < total) dst[j] = stage[warp][j];
  }
}

__global__ void convert_act_kernel(const float* __restrict__ x, int64_t x_stride, int64_t K, int64_t total,
                                   void* __restrict__ out, bool bf16) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t t = i / K, k = i % K;
  const float v = x[t * x_stride + k];
  if (bf16) {
    static_cast<uint16_t*>(out)[i] = float_to_bf16_bits(v);
  } else {
    static_cast<__half*>(out)[i] = __float2half_rn(v);
  }
}

template <DType T, bool kSplit>
__global__ void embed_quant_kernel(const uint8_t* __restrict__ table, int64_t table_stride, int64_t groups,
                                   int64_t vocab, const int32_t* __restrict__ tokens, int64_t n, float scale,
                                   float* __restrict__ out, int64_t out_stride) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * groups) return;
  const int64_t t = i / groups;
  const int g = static_cast<int>(i % groups);
  const int32_t id = tokens[t];
  float v[32];
  if (id >= 0 && id < vocab) {
    dequant_group<T, kSplit>(table + id * table_stride, groups, g, v);
  } else {
#pragma unroll
    for (int j = 0; j < 32; ++j) v[j] = 0.f;
  }
  float* dst = out + t * out_stride + static_cast<int64_t>(g) * 32;
#pragma unroll
  for (int j = 0; j < 32; ++j) dst[j] = v[j] * scale;
}

__global__ void embed_float_kernel(const uint8_t* __restrict__ table, int64_t table_stride, int64_t d,
                                   int64_t vocab, int type, const int32_t* __restrict__ tokens, int64_t n,
                                   float scale, float* __restrict__ out, int64_t out_stride) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * d) return;
  const int64_t t = i / d, k = i % d;
  const int32_t id = tokens[t];
  float v = 0.f;
  if (id >= 0 && id < vocab) {
    const uint8_t* row = table + id * table_stride;
    if (type == 0) {
      v = reinterpret_cast<const float*>(row)[k];
    } else if (type == 1) {
      v = __half2float(reinterpret_cast<const __half*>(row)[k]);
    } else {
      v = bf16_bits_to_float(reinterpret_cast<const uint16_t*>(row)[k]);
    }
  }
  out[t * out_stride + k] = v * scale;
}

constexpr int kGatherChunk = 64;
struct GatherRows {
  int32_t r[kGatherChunk];
};

// One block per output row; 16-byte copies when everything is aligned, bytes otherwise.
__global__ void gather_kernel(const uint8_t* __restrict__ x, int64_t x_stride, int64_t row_bytes, GatherRows rows,
                              uint8_t* __restrict__ out, int64_t out_stride, bool vec) {
  const uint8_t* src = x + static_cast<int64_t>(rows.r[blockIdx.x]) * x_stride;
  uint8_t* dst = out + static_cast<int64_t>(blockIdx.x) * out_stride;
  if (vec) {
    const int64_t n16 = row_bytes / 16;
    for (int64_t i = threadIdx.x; i < n16; i += blockDim.x)
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  } else {
    for (int64_t i = threadIdx.x; i < row_bytes; i += blockDim.x) dst[i] = src[i];
  }
}

// One block of 256 threads per token; NaN never wins; ties go to the lowest index.
__global__ void argmax_kernel(const float* __restrict__ x, int64_t x_stride, int64_t n, int32_t* __restrict__ out) {
  const float* row = x + static_cast<int64_t>(blockIdx.x) * x_stride;
  float best = -INFINITY;
  int64_t best_i = n;  // n = none seen yet
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = row[i];
    if (v > best || (best_i == n && v == v)) {
      best = v;
      best_i = i;
    }
  }
  __shared__ float sv[256 / kWarp];
  __shared__ int64_t si[256 / kWarp];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, best_i, o);
    if (oi != n && (best_i == n || ov > best || (ov == best && oi < best_i))) {
      best = ov;
      best_i = oi;
    }
  }
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) {
    sv[warp] = best;
    si[warp] = best_i;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < 256 / kWarp; ++w) {
      if (si[w] != n && (best_i == n || sv[w] > best || (sv[w] == best && si[w] < best_i))) {
        best = sv[w];
        best_i = si[w];
      }
    }
    out[blockIdx.x] = best_i == n ? 0 : static_cast<int32_t>(best_i);
  }
}

template <DType T, bool kSplit = false>
cudaError_t launch_dequant(const void* w, int64_t w_stride, int64_t K, int64_t rows, __half* out,
                           cudaStream_t stream) {
  const int64_t gpr = K / 32, total = rows * gpr;
  dequant_f16_kernel<T, kSplit><<<ceil_div(total, 256), 256, 0, stream>>>(static_cast<const uint8_t*>(w), w_stride,
                                                                           gpr, total, out);
  return cudaGetLastError();
}

template <DType T, bool kSplit = false>
cudaError_t launch_embed(const void* table, int64_t table_stride, int64_t d, int64_t vocab, const int32_t* tokens,
                         int64_t n, float scale, float* out, int64_t out_stride, cudaStream_t stream) {
  const int64_t groups = d / 32;
  embed_quant_kernel<T, kSplit><<<ceil_div(n * groups, 128), 128, 0, stream>>>(
      static_cast<const uint8_t*>(table), table_stride, groups, vocab, tokens, n, scale, out, out_stride);
  return cudaGetLastError();
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------------------

cudaError_t dequant_rows_f16(DType type, const void* w, int64_t w_stride, int64_t K, int64_t rows, __half* out,
                             cudaStream_t stream, bool split) {
  if (K % 32 != 0 || rows <= 0) return cudaErrorInvalidValue;
  if (split) {
    if (!split_layout_supported(type, K)) return cudaErrorInvalidValue;
    switch (type) {
      case DType::Q4_0: return launch_dequant<DType::Q4_0, true>(w, w_stride, K, rows, out, stream);
      case DType::Q4_1: return launch_dequant<DType::Q4_1, true>(w, w_stride, K, rows, out, stream);
      case DType::Q5_0: return launch_dequant<DType::Q5_0, true>(w, w_stride, K, rows, out, stream);
      case DType::Q5_1: return launch_dequant<DType::Q5_1, true>(w, w_stride, K, rows, out, stream);
      case DType::Q8_0: return launch_dequant<DType::Q8_0, true>(w, w_stride, K, rows, out, stream);
      case DType::Q2_K: return launch_dequant<DType::Q2_K, true>(w, w_stride, K, rows, out, stream);
      case DType::Q3_K: return launch_dequant<DType::Q3_K, true>(w, w_stride, K, rows, out, stream);
      case DType::Q6_K: return launch_dequant<DType::Q6_K, true>(w, w_stride, K, rows, out, stream);
      default: return cudaErrorInvalidValue;
    }
  }
  switch (type) {
    case DType::Q4_0: return launch_dequant<DType::Q4_0>(w, w_stride, K, rows, out, stream);
    case DType::Q4_1: return launch_dequant<DType::Q4_1>(w, w_stride, K, rows, out, stream);
    case DType::Q5_0: return launch_dequant<DType::Q5_0>(w, w_stride, K, rows, out, stream);
    case DType::Q5_1: return launch_dequant<DType::Q5_1>(w, w_stride, K, rows, out, stream);
    case DType::Q8_0: return launch_dequant<DType::Q8_0>(w, w_stride, K, rows, out, stream);
    case DType::Q2_K: return launch_dequant<DType::Q2_K>(w, w_stride, K, rows, out, stream);
    case DType::Q3_K: return launch_dequant<DType::Q3_K>(w, w_stride, K, rows, out, stream);
    case DType::Q4_K: return launch_dequant<DType::Q4_K>(w, w_stride, K, rows, out, stream);
    case DType::Q5_K: return launch_dequant<DType::Q5_K>(w, w_stride, K, rows, out, stream);
    case DType::Q6_K: return launch_dequant<DType::Q6_K>(w, w_stride, K, rows, out, stream);
    case DType::MXFP4: return launch_dequant<DType::MXFP4>(w, w_stride, K, rows, out, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t convert_activations(const float* x, int64_t x_stride, int64_t K, int64_t T, void* out, bool bf16,
                                cudaStream_t stream) {
  const int64_t total = K * T;
  if (total <= 0) return cudaErrorInvalidValue;
  convert_act_kernel<<<ceil_div(total, 256), 256, 0, stream>>>(x, x_stride, K, total, out, bf16);
  return cudaGetLastError();
}

cudaError_t embed_rows(DType type, const void* table, int64_t table_stride, int64_t d, int64_t vocab,
                       const int32_t* tokens, int64_t n, float scale, float* out, int64_t out_stride,
                       cudaStream_t stream, bool split) {
  if (n <= 0) return cudaSuccess;
  const auto* tp = static_cast<const uint8_t*>(table);
  if (split) {
    if (!split_layout_supported(type, d)) return cudaErrorInvalidValue;
    switch (type) {
      case DType::Q4_0: return launch_embed<DType::Q4_0, true>(table, table_stride, d, vocab, tokens, n, scale, out, out_stride, stream);
      case DType::Q4_1: return launch_embed<DType::Q4_1, true>(table, table_stride, d, vocab, tokens, n, scale, out, out_stride, stream);
      case DType::Q5_0: return launch_embed<DType::Q5_0, true>(table, table_stride, d, vocab, tokens, n, scale, out, out_stride, stream);
      case DType::Q5_1: return launch_embed<DType::Q5_1, true>(table, table_stride, d, vocab, tokens, n, scale, out, out_stride, stream);
      case DType::Q8_0: return launch_embed<DType::Q8_0, true>(table, table_stride, d, vocab, tokens, n, scale, out, out_stride, stream);
      case DType::Q2_K: return launch_embed<DType::Q2_K, true>(table, table_stride, d, vocab, tokens, n, scale, out, out_stride, stream);
      case DType::Q3_K: return launch_embed<DType::Q3_K, true>(table, table_stride, d, vocab, tokens, n, scale, out, out_stride, stream);
      case DType::Q6_K: return launch_embed<DType::Q6_K, true>(table, table_stride, d, vocab, tokens, n, scale, out, out_stride, stream);
      default: return cudaErrorInvalidValue;
    }
  }
  switch (type) {
    case DType::F32:
    case DType::F16:
    case DType::BF16: {
      const int code = type == DType::F32 ? 0 : (type == DType::F16 ? 1 : 2);
      embed_float_kernel<<<ceil_div(n * d, 256), 256, 0, stream>>>(tp, table_stride, d, vocab, code, tokens, n,
                                                                    scale, out, out_stride);
      return cudaGetLastError();
    }
    case DType::Q4_0: return launch_embed<DType::Q4_0>(table, table_stride, d, vocab, tokens, n, scale, out, out_stride, stream);
    case DType::Q4_1: return launch_embed<DType::Q4_1>(table, table_stride, d, vocab, tokens, n, scale, out, out_stride, stream);
    case DType::Q5_0: return launch_embed<DType::Q5_0>(table, table_stride, d, vocab, tokens, n, scale, out, out_stride, stream);
    case DType::Q5_1: return launch_embed<DType::Q5_1>(table, table_stride, d, vocab, tokens, n, scale, out, out_stride, stream);
    case DType::Q8_0: return launch_embed<DType::Q8_0>(table, table_stride, d, vocab, tokens, n, scale, out, out_stride, stream);
    case DType::Q2_K: return launch_embed<DType::Q2_K>(table, table_stride, d, vocab, tokens, n, scale, out, out_stride, stream);
    case DType::Q3_K: return launch_embed<DType::Q3_K>(table, table_stride, d, vocab, tokens, n, scale, out, out_stride, stream);
    case DType::Q4_K: return launch_embed<DType::Q4_K>(table, table_stride, d, vocab, tokens, n, scale, out, out_stride, stream);
    case DType::Q5_K: return launch_embed<DType::Q5_K>(table, table_stride, d, vocab, tokens, n, scale, out, out_stride, stream);
    case DType::Q6_K: return launch_embed<DType::Q6_K>(table, table_stride, d, vocab, tokens, n, scale, out, out_stride, stream);
    case DType::MXFP4: return launch_embed<DType::MXFP4>(table, table_stride, d, vocab, tokens, n, scale, out, out_stride, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t gather_rows(const void* x, int64_t x_stride, int64_t row_bytes, const int32_t* rows_host, int64_t n,
                        void* out, int64_t out_stride, cudaStream_t stream) {
  const bool vec = aligned16(x) && aligned16(out) && x_stride % 16 == 0 && out_stride % 16 == 0 && row_bytes % 16 == 0;
  // Indices travel as kernel parameters (no host buffer whose lifetime would outlive the call), in
  // chunks of kGatherChunk rows per launch.
  for (int64_t i0 = 0; i0 < n; i0 += kGatherChunk) {
    const int64_t m = n - i0 < kGatherChunk ? n - i0 : kGatherChunk;
    GatherRows r{};
    for (int64_t i = 0; i < m; ++i) r.r[i] = rows_host[i0 + i];
    gather_kernel<<<static_cast<unsigned>(m), 256, 0, stream>>>(static_cast<const uint8_t*>(x), x_stride, row_bytes, r,
                                                                static_cast<uint8_t*>(out) + i0 * out_stride,
                                                                out_stride, vec);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t argmax_rows(const float* x, int64_t x_stride, int64_t n, int64_t T, int32_t* out, cudaStream_t stream) {
  if (T <= 0) return cudaSuccess;
  argmax_kernel<<<static_cast<unsigned>(T), 256, 0, stream>>>(x, x_stride, n, out);
  return cudaGetLastError();
}

}  // namespace ferry::kernels::cuda
