// Matrix-vector kernels for decode (n_tokens <= 8): every weight byte is read once per call.
//   quantized W: x is first quantized to int8 blocks of 32 (quantize_q8), then one warp per weight row
//     walks the row's slices (quant_units.h): consecutive lanes take consecutive 32-bit words of a block,
//     so each load instruction of the warp reads one contiguous span of weights (and of activations);
//     dp4a integer dot products; a warp shuffle reduction per token.
//   F32/F16/BF16 W: one warp per row, 16-byte loads of W, x read as float4 (it stays in L1/L2).
//   v2 (matvec_*_v2): 16-byte weight loads, consecutive lanes on consecutive 16-byte chunks of a row's quant
//     plane (quant_units.h ChunkDec: split layout for Q4_0/Q8_0/Q6_K, ggml's for Q4_K/Q5_K; F32/F16/BF16),
//     U chunks per lane loaded before any is used, several rows per launch from up to 4 matrices, and
//     S warps per row (shared-memory reduction) when the rows alone would not fill the GPU.
// Bytes moved per call ~= N * row_bytes (+ the small x): bench_cuda_ops reports GB/s against a d2d copy.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/matvec_adapters.cuh"
#include "kernels/cuda/quant_chunks.h"
#include "tensor/repack.h"

#include <algorithm>
#include <type_traits>

namespace ferry::kernels::cuda {
namespace {

constexpr int kRowsPerBlock = 4;  // one warp per row, 4 warps per block

// ---- kernels -----------------------------------------------------------------------------------------

// One warp per block of 32 activations: d = max|x| / 127, q = round(x / d).
__global__ void quantize_q8_kernel(const float* __restrict__ x, int64_t x_stride, int64_t K, int64_t n_blocks,
                                   int8_t* __restrict__ xq, float2* __restrict__ xds) {
  pdl_enter();  // launched with PDL (launch_ex): x comes from the previous kernel
  FERRY_EMPTY_SMALL_RETURN();
  const int64_t wid = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int64_t per_token = K / 32;
  if (wid >= n_blocks) return;
  const int64_t t = wid / per_token;
  const int64_t b = wid % per_token;
  const float v = x[t * x_stride + b * 32 + lane];
  quantize_q8_warp(v, xq + t * K + b * 32 + lane, xds + t * per_token + b, lane);
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

// ---- v2 kernels ------------------------------------------------------------------------------------------

constexpr int kV2Warps = 8;  // warps per block: 8 / S row groups of S warps each
constexpr int kV2Threads = kV2Warps * kWarp;

// Where launch row n lives: its weight row and its out column (token 0). Compile-time indices only, so
// the set stays in the kernel's parameter bank (no local-memory copy).
struct RowRef {
  const uint8_t* w;
  float* out;
  int64_t out_stride;
};
__device__ __forceinline__ void store_out(float* p, float v, bool accumulate) { *p = accumulate ? *p + v : v; }

__device__ __forceinline__ RowRef row_ref(const MatvecSet& s, int64_t n) {
  const void* w = s.w[0];
  float* out = s.out[0];
  int64_t stride = s.w_stride[0], out_stride = s.out_stride[0], start = 0;
#pragma unroll
  for (int m = 1; m < kMatvecMaxMats; ++m) {
    if (m < s.n && n >= s.row_end[m - 1]) {
      w = s.w[m];
      out = s.out[m];
      stride = s.w_stride[m];
      out_stride = s.out_stride[m];
      start = s.row_end[m - 1];
    }
  }
  return RowRef{static_cast<const uint8_t*>(w) + (n - start) * stride, out + (n - start), out_stride};
}


// A NormFold consumer's row scale: the norm's s from the producer's group parts (the same loads and
// shuffles in every warp, so every row gets the same s); 1 without a fold, so those rows are unchanged.
// After the PDL wait (the parts are the previous kernel's output).
__device__ __forceinline__ float fold_scale(const NormFold& f, int lane) {
  if (f.part == nullptr) return 1.f;
  float s = 0.f;
  for (int i = lane; i < f.n_part; i += kWarp) s += f.part[i];
  return rsqrtf(warp_sum(s) / f.n + f.eps);
}

// Block = kV2Warps warps = (8 / S) row groups x S warps; a row group handles RPW consecutive launch rows,
// its S warps split the row's chunks (warp s takes chunks s*32 + lane + j*32*S). Each lane loads U chunks
// of every one of its RPW rows (U * RPW 16-byte loads in flight), then per token loads the chunks'
// activations once for the RPW rows and accumulates. With PDL the first weight loads are issued before
// grid_dependency_wait(), i.e. while quantize_q8 still runs; nothing before the wait reads x or writes.
template <class A, int NT, int RPW, int U>
__global__ void __launch_bounds__(kV2Threads, NT <= 2 ? A::kMinBlocks : 2)
    matvec_v2_kernel(MatvecSet set, int64_t N, int64_t K, int S, typename A::Act act, int T, bool accumulate,
                     NormFold fold) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int groups = kV2Warps / S;
  const int g = warp / S, sp = warp % S;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * groups + g) * RPW;
  const uint8_t* row[RPW];
#pragma unroll
  for (int r = 0; r < RPW; ++r) row[r] = row_ref(set, min(n0 + r, N - 1)).w;  // clamped rows are not stored
  const int n_chunks = static_cast<int>(K / A::kElems);
  const int step = kWarp * S;
  float acc[RPW][NT];
#pragma unroll
  for (int r = 0; r < RPW; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;

  // Chunks past the row's end are clamped to its last chunk (a cached reload) and their products dropped
  // by a select, so loads and dots need no branches and the compiler can issue all loads of a round first.
  typename A::W w[U][RPW];
  int c0 = sp * kWarp + lane;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = min(c0 + u * step, n_chunks - 1);
#pragma unroll
    for (int r = 0; r < RPW; ++r) A::load(row[r], K, c, w[u][r]);
  }
  pdl_enter();
  const float fs = fold_scale(fold, lane);
  for (;;) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < T) {  // uniform
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int c = min(c0 + u * step, n_chunks - 1);
          const bool valid = c0 + u * step < n_chunks;
          typename A::X x;
          A::load_x(c, act, t, x);
#pragma unroll
          for (int r = 0; r < RPW; ++r) {
            const float d = A::dot(w[u][r], c, x);
            acc[r][t] += valid ? d : 0.f;
          }
        }
      }
    }
    c0 += U * step;
    if (c0 >= n_chunks) break;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = min(c0 + u * step, n_chunks - 1);
#pragma unroll
      for (int r = 0; r < RPW; ++r) A::load(row[r], K, c, w[u][r]);
    }
  }

  __shared__ float red[kV2Warps][RPW * NT];
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < T) {
        const float v = warp_sum(acc[r][t]) * fs;
        if (lane == 0) {
          if (S == 1) {
            if (n0 + r < N) {
              const RowRef ref = row_ref(set, n0 + r);
              store_out(ref.out + t * ref.out_stride, v, accumulate);
            }
          } else {
            red[warp][r * NT + t] = v;
          }
        }
      }
    }
  }
  if (S > 1) {  // block-uniform
    __syncthreads();
    for (int i = threadIdx.x; i < groups * RPW * NT; i += kV2Threads) {
      const int gg = i / (RPW * NT), j = i % (RPW * NT), r = j / NT, t = j % NT;
      const int64_t n = (static_cast<int64_t>(blockIdx.x) * groups + gg) * RPW + r;
      if (t < T && n < N) {
        float v = 0.f;
        for (int s = 0; s < S; ++s) v += red[gg * S + s][j];
        const RowRef ref = row_ref(set, n);
        store_out(ref.out + t * ref.out_stride, v, accumulate);
      }
    }
  }
}

template <class A, int NT, int RPW, int U>
cudaError_t launch_v2(const MatvecSet& set, int64_t K, const typename A::Act& act, int T, const MatvecLaunch& l,
                      cudaStream_t stream) {
  const int64_t N = set.row_end[set.n - 1];
  const int n_chunks = static_cast<int>(K / A::kElems);
  const int64_t row_groups = (N + RPW - 1) / RPW;
  // Warps per row: enough warps to fill every SM's resident slots once (the register budget allows
  // kMinBlocks blocks per SM), as long as each warp keeps at least one full 32-chunk load instruction per
  // row. More warps than that only split rows further (fewer loads in flight per warp, more reductions).
  constexpr int kMinBlocks = NT <= 2 ? A::kMinBlocks : 2;
  const int64_t want_warps = static_cast<int64_t>(l.sm_count > 0 ? l.sm_count : 132) * kV2Warps * kMinBlocks;
  int S = 1;
  while (S < kV2Warps && row_groups * S < want_warps && n_chunks >= 2 * kWarp * S) S *= 2;
  const int groups = kV2Warps / S;
  return launch_ex(l.pdl, matvec_v2_kernel<A, NT, RPW, U>, dim3(ceil_div(row_groups, groups)), dim3(kV2Threads), 0,
                   stream, set, N, K, S, act, T, l.accumulate, l.fold);
}

// The v3 kernels' two steps on a tile (32 U chunks of a row, chunk c = 32 U round + lane + 32 u): issue its
// weight loads (chunks past the row's end clamped to its last one), and add its products with token t's
// activations to acc (the clamped chunks' dropped by a select).
template <class A, int U>
__device__ __forceinline__ void v3_load_tile(const uint8_t* row, int64_t K, int round, int n_chunks, int lane,
                                             typename A::W (&w)[U]) {
#pragma unroll
  for (int u = 0; u < U; ++u) A::load(row, K, min(round * kWarp * U + lane + u * kWarp, n_chunks - 1), w[u]);
}
template <class A, int U>
__device__ __forceinline__ float v3_dot_tile(const typename A::W (&w)[U], int round, int n_chunks, int lane,
                                             const typename A::Act& act, int t, float acc) {
  const int c0 = round * kWarp * U + lane;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = min(c0 + u * kWarp, n_chunks - 1);
    typename A::X x;
    A::load_x(c, act, t, x);
    const float d = A::dot(w[u], c, x);
    acc += c0 + u * kWarp < n_chunks ? d : 0.f;
  }
  return acc;
}

// ---- v3: persistent warps, weights of the next tile loaded while the current one is computed -----------
// A warp owns rows warp, warp + W, warp + 2W, ... (W warps in the grid, chosen so every warp gets the
// same number of rows, +-1) and walks them as tiles of 32 * U chunks (one "round" of a row). It issues the
// loads of tile j + 1 before it computes tile j, so each lane always has U 16-byte weight loads in flight;
// a v2 warp loads, waits, computes and exits (one round per warp for a 4096-wide Q4_0 row), and the
// memory system idles between its exit and the next block's first loads. T <= 2, one warp per row.
template <class A, int NT, int U, int MB>
__global__ void __launch_bounds__(kV2Threads, MB)
    matvec_v3_kernel(MatvecSet set, int64_t N, int64_t K, int64_t n_warps, typename A::Act act, int T,
                     bool accumulate, NormFold fold) {
  const int lane = threadIdx.x % kWarp;
  int64_t n = static_cast<int64_t>(blockIdx.x) * kV2Warps + threadIdx.x / kWarp;
  if (n >= N || n >= n_warps) return;
  const int n_chunks = static_cast<int>(K / A::kElems);
  constexpr int kTile = kWarp * U;
  const int rounds = (n_chunks + kTile - 1) / kTile;
  RowRef ref = row_ref(set, n);
  int round = 0;
  typename A::W w[U], wn[U];
  v3_load_tile<A, U>(ref.w, K, 0, n_chunks, lane, w);
  pdl_enter();
  const float fs = fold_scale(fold, lane);
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.f;
  for (;;) {
    // The next tile: the next round of this row, else round 0 of the warp's next row.
    int64_t n2 = n;
    int round2 = round + 1;
    if (round2 == rounds) {
      round2 = 0;
      n2 = n + n_warps;
    }
    const bool more = n2 < N;  // warp-uniform
    const RowRef ref2 = (more && n2 != n) ? row_ref(set, n2) : ref;
    if (more) v3_load_tile<A, U>(ref2.w, K, round2, n_chunks, lane, wn);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < T) acc[t] = v3_dot_tile<A, U>(w, round, n_chunks, lane, act, t, acc[t]);
    }
    if (round == rounds - 1) {
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t < T) {
          const float v = warp_sum(acc[t]) * fs;
          if (lane == 0) store_out(ref.out + t * ref.out_stride, v, accumulate);
        }
        acc[t] = 0.f;
      }
    }
    if (!more) break;
#pragma unroll
    for (int u = 0; u < U; ++u) w[u] = wn[u];
    n = n2;
    round = round2;
    ref = ref2;
  }
}

// Resident blocks per SM of a kernel launched with Threads threads a block (its register use decides), asked
// once per kernel; `fallback` (the kernel's __launch_bounds__ minimum) if the runtime cannot say.
template <auto Kernel, int Threads = kV2Threads>
int blocks_per_sm(int fallback) {
  static const int blocks = [fallback] {
    int b = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, Kernel, Threads, 0) != cudaSuccess || b < 1) {
      (void)cudaGetLastError();
      b = fallback;
    }
    return b;
  }();
  return blocks;
}

template <class A, int NT, int U, int MB>
cudaError_t launch_v3(const MatvecSet& set, int64_t K, const typename A::Act& act, int T, const MatvecLaunch& l,
                      cudaStream_t stream) {
  const int64_t N = set.row_end[set.n - 1];
  const int64_t max_warps = static_cast<int64_t>(l.sm_count > 0 ? l.sm_count : 132) * kV2Warps *
                            blocks_per_sm<matvec_v3_kernel<A, NT, U, MB>>(MB);
  const int64_t rows_per_warp = (N + max_warps - 1) / max_warps;
  const int64_t n_warps = (N + rows_per_warp - 1) / rows_per_warp;
  return launch_ex(l.pdl, matvec_v3_kernel<A, NT, U, MB>, dim3(ceil_div(n_warps, kV2Warps)), dim3(kV2Threads), 0, stream,
                   set, N, K, n_warps, act, T, l.accumulate, l.fold);
}

// ---- v3 row walks with a per-group epilogue (one token) ------------------------------------------------
// A warp's rows row_of(0), row_of(1), ..., row_of(n_rows - 1) of the set as v3 tiles: the next tile's loads
// (the next round of this row, else round 0 of the next row) are issued before this one is computed.
// entered() runs right after the PDL wait; done(i, sum, ref) gets row i's sum (every lane) and its RowRef.
template <class A, int U, class RowOf, class Entered, class Done>
__device__ __forceinline__ void v3_walk_rows(const MatvecSet& set, int64_t K, const typename A::Act& act, int n_rows,
                                             int lane, RowOf row_of, Entered entered, Done done) {
  const int n_chunks = static_cast<int>(K / A::kElems);
  constexpr int kTile = kWarp * U;
  const int rounds = (n_chunks + kTile - 1) / kTile;
  int i = 0, round = 0;
  RowRef ref = row_ref(set, row_of(0));
  typename A::W w[U], wn[U];
  v3_load_tile<A, U>(ref.w, K, 0, n_chunks, lane, w);
  pdl_enter();
  entered();
  float acc = 0.f;
  for (;;) {
    int i2 = i, round2 = round + 1;
    if (round2 == rounds) {
      round2 = 0;
      i2 = i + 1;
    }
    const bool more = i2 < n_rows;  // warp-uniform
    const RowRef ref2 = (more && i2 != i) ? row_ref(set, row_of(i2)) : ref;
    if (more) v3_load_tile<A, U>(ref2.w, K, round2, n_chunks, lane, wn);
    acc = v3_dot_tile<A, U>(w, round, n_chunks, lane, act, 0, acc);
    if (round == rounds - 1) {  // row i done
      done(i, warp_sum(acc), ref);
      acc = 0.f;
    }
    if (!more) break;
#pragma unroll
    for (int u = 0; u < U; ++u) w[u] = wn[u];
    i = i2;
    round = round2;
    ref = ref2;
  }
}

// ---- v3 with the FFN activation in its epilogue (one token) ------------------------------------------
// The set's matrices 0 and 1 are gate and up (F rows each, F % 32 == 0). Block b owns the 32-element groups
// b, b + gridDim.x, ...; in a group starting at e0, warp w computes gate rows e0 + 4w .. + 3, then up rows
// e0 + 4w .. + 3, as v3 tiles (the next tile's loads issued before this one is computed, across rows and
// groups), and puts act(gate) * up of its 4 elements in shared memory. At the block's barrier after each
// group, warp 0 writes the 32 results (F32, h) and quantizes them as quantize_q8 does (xq, xds): the
// matvec's sums and glu_kernel's arithmetic, bit for bit the unfused matvec + glu. The glu launch, its
// hand-off and its reads of gate / up go away (up is never written).
template <class A, int U, int MB>
__global__ void __launch_bounds__(kV2Threads, MB)
    matvec_v3_glu_kernel(MatvecSet set, int64_t F, int64_t K, typename A::Act act, int act_kind,
                         float* __restrict__ h, int8_t* __restrict__ hq, float2* __restrict__ hds, NormFold fold) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t n_groups = F / 32;
  if (blockIdx.x >= n_groups) return;  // the whole block: the barriers below stay block-uniform
  const int groups_here = static_cast<int>((n_groups - 1 - blockIdx.x) / gridDim.x + 1);
  auto row_of = [&](int i) {  // this warp's rows: 4 gate + 4 up per group
    const int64_t e = (blockIdx.x + static_cast<int64_t>(i / 8) * gridDim.x) * 32 + warp * 4 + (i & 3);
    return (i & 4) ? F + e : e;
  };
  __shared__ float hs[2][32];
  float fs = 1.f, g0 = 0.f, g1 = 0.f, g2 = 0.f, g3 = 0.f;
  auto entered = [&] { fs = fold_scale(fold, lane); };
  auto done = [&](int i, float sum, const RowRef&) {
    const float v = sum * fs;
    const int j = i & 7;
    if (j < 4) {
      g0 = j == 0 ? v : g0;
      g1 = j == 1 ? v : g1;
      g2 = j == 2 ? v : g2;
      g3 = j == 3 ? v : g3;
      return;
    }
    const float g = j == 4 ? g0 : (j == 5 ? g1 : (j == 6 ? g2 : g3));
    float* buf = hs[(i >> 3) & 1];
    if (lane == 0) buf[warp * 4 + j - 4] = glu_act(g, act_kind) * v;
    if (j == 7) {  // the group's last row for every warp of the block
      __syncthreads();
      if (warp == 0) {
        // Two buffers: a warp writes this one again two groups on, after one more barrier, which warp 0
        // reaches only once it has read this group.
        const float y = buf[lane];
        const int64_t e = (blockIdx.x + static_cast<int64_t>(i >> 3) * gridDim.x) * 32 + lane;
        h[e] = y;
        quantize_q8_warp(y, hq + e, hds + e / 32, lane);
      }
    }
  };
  v3_walk_rows<A, U>(set, K, act, 8 * groups_here, lane, row_of, entered, done);
}

struct GluArgs {
  const int8_t* xq;  // x as Q8
  const float2* xds;
  int act;       // glu_act's
  float* h;      // [F] act(gate) * up
  int8_t* hq;    // h as Q8
  float2* hds;
};

template <class A>
cudaError_t glu_with(const MatvecSet& set, int64_t K, const GluArgs& g, const MatvecLaunch& l, cudaStream_t stream) {
  constexpr int U = A::kV3Unroll, MB = A::kV3MinBlocks;
  const int64_t F = set.row_end[0];
  const int64_t slots =
      static_cast<int64_t>(l.sm_count > 0 ? l.sm_count : 132) * blocks_per_sm<matvec_v3_glu_kernel<A, U, MB>>(MB);
  const int64_t grid = std::min<int64_t>(F / 32, slots);
  const typename A::Act act{g.xq, g.xds, K};
  return launch_ex(l.pdl, matvec_v3_glu_kernel<A, U, MB>, dim3(static_cast<unsigned>(grid)), dim3(kV2Threads), 0,
                   stream, set, F, K, act, g.act, g.h, g.hq, g.hds, l.fold);
}

// ---- v3 producing a folded rms_norm (one token) --------------------------------------------------------
// The set's one matrix has N rows (N % 32 == 0) and its out is the residual h. A block of 32 warps owns the
// 32-row groups b, b + gridDim.x, ...; warp w computes row 32 g + w of each (v3 tiles, the next row's loads
// issued before this one is computed) and adds it into h; after the block's barrier warp 0 quantizes the
// group's h * nw as quantize_q8 does and writes the group's sum of h^2 (NormFold). 1024 threads at 64
// registers: one block fills an SM, and N = 4096 runs 4096 warps of one row each, as the plain v3 kernel.
constexpr int kNormThreads = 1024;
template <class A, int U>
__global__ void __launch_bounds__(kNormThreads, 1)
    matvec_v3_norm_kernel(MatvecSet set, int64_t N, int64_t K, typename A::Act act, const float* __restrict__ nw,
                          int8_t* __restrict__ hq, float2* __restrict__ hds, float* __restrict__ part) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t n_groups = N / 32;
  if (blockIdx.x >= n_groups) return;  // the whole block: the barriers below stay block-uniform
  const int n_rows = static_cast<int>((n_groups - 1 - blockIdx.x) / gridDim.x + 1);  // one per group
  auto group_of = [&](int i) { return blockIdx.x + static_cast<int64_t>(i) * gridDim.x; };
  auto row_of = [&](int i) { return group_of(i) * 32 + warp; };
  float nwv = warp == 0 ? nw[group_of(0) * 32 + lane] : 0.f;  // not an earlier kernel's output
  __shared__ float hs[2][32];
  auto done = [&](int i, float sum, const RowRef& ref) {  // every warp of the block finishes group i here
    float* buf = hs[i & 1];
    if (lane == 0) {
      const float y = *ref.out + sum;  // store_out's accumulate
      *ref.out = y;
      buf[warp] = y;
    }
    __syncthreads();
    if (warp == 0) {  // two buffers, as in matvec_v3_glu_kernel
      const int64_t e = group_of(i) * 32 + lane;
      const float y = buf[lane];
      if (i > 0) nwv = nw[e];
      quantize_q8_warp(y * nwv, hq + e, hds + e / 32, lane);
      const float ss = warp_sum(y * y);
      if (lane == 0) part[e / 32] = ss;
    }
  };
  v3_walk_rows<A, U>(set, K, act, n_rows, lane, row_of, [] {}, done);
}

struct NormArgs {
  const int8_t* xq;
  const float2* xds;
  const float* nw;
  int8_t* hq;
  float2* hds;
  float* part;
};

template <class A>
cudaError_t norm_with(const MatvecSet& set, int64_t K, const NormArgs& a, const MatvecLaunch& l, cudaStream_t stream) {
  constexpr int U = A::kV3Unroll;
  const int64_t N = set.row_end[0];
  const int per_sm = blocks_per_sm<matvec_v3_norm_kernel<A, U>, kNormThreads>(1);
  const int64_t grid = std::min<int64_t>(N / 32, static_cast<int64_t>(l.sm_count > 0 ? l.sm_count : 132) * per_sm);
  const typename A::Act act{a.xq, a.xds, K};
  return launch_ex(l.pdl, matvec_v3_norm_kernel<A, U>, dim3(static_cast<unsigned>(grid)), dim3(kNormThreads), 0,
                   stream, set, N, K, act, a.nw, a.hq, a.hds, a.part);
}

// v3 when asked for, T <= 2 and the rows alone fill the GPU (else v2 splits rows across warps).
template <class A>
bool v3_fits(const MatvecSet& set, int T, const MatvecLaunch& l) {
  if (l.kernel != 3 || T > 2) return false;
  const int64_t N = set.row_end[set.n - 1];
  return N >= static_cast<int64_t>(l.sm_count > 0 ? l.sm_count : 132) * kV2Warps;
}

// Token-count variants: 1 and 2 tokens one row per warp; 3..8 tokens two rows per warp (each activation
// load serves two rows: at 8 tokens the activation loads, not the weights, would otherwise bound L1) and
// half the unroll so the loads in flight per lane stay U.
template <class A>
cudaError_t launch_v2_tokens(const MatvecSet& set, int64_t K, const typename A::Act& act, int T,
                             const MatvecLaunch& l, cudaStream_t stream) {
  if (v3_fits<A>(set, T, l)) {
    if (T == 2) return launch_v3<A, 2, A::kUnroll, 2>(set, K, act, T, l, stream);
    if (l.v3_alt) {  // A/B benchmarks: 1 chunk a tile at 4 blocks per SM, or U at 2 where that is the default
      constexpr bool kOneAtFour = A::kV3Unroll == 1 && A::kV3MinBlocks == 4;
      if constexpr (kOneAtFour) return launch_v3<A, 1, A::kUnroll, 2>(set, K, act, T, l, stream);
      else return launch_v3<A, 1, 1, 4>(set, K, act, T, l, stream);
    }
    return launch_v3<A, 1, A::kV3Unroll, A::kV3MinBlocks>(set, K, act, T, l, stream);
  }
  if (T == 1) return launch_v2<A, 1, 1, 4>(set, K, act, T, l, stream);
  if (T == 2) return launch_v2<A, 2, 1, 4>(set, K, act, T, l, stream);
  if (T <= 4) return launch_v2<A, 4, 2, 2>(set, K, act, T, l, stream);
  return launch_v2<A, 8, 2, 2>(set, K, act, T, l, stream);
}

bool set_ok(const MatvecSet& set, int T) {
  if (T < 1 || T > 8 || set.n < 1 || set.n > kMatvecMaxMats) return false;
  int64_t prev = 0;
  for (int m = 0; m < set.n; ++m) {
    if (set.row_end[m] <= prev) return false;
    prev = set.row_end[m];
  }
  return true;
}


}  // namespace

cudaError_t quantize_q8(const float* x, int64_t x_stride, int64_t K, int T, int8_t* xq, float2* xds,
                        cudaStream_t stream) {
  if (K % 32 != 0 || T <= 0) return cudaErrorInvalidValue;
  const int64_t n_blocks = static_cast<int64_t>(T) * (K / 32);
  const int threads = 256;
  return launch_ex(pdl_default(), quantize_q8_kernel, dim3(ceil_div(n_blocks * kWarp, threads)), dim3(threads), 0, stream,
                   x, x_stride, K, n_blocks, xq, xds);
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
    case DType::MXFP4: return launch_quant<DType::MXFP4>(w, w_stride, K, N, xq, xds, T, rows_per_warp, out, out_stride, stream);
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

bool matvec_v2_supported(DType type, Layout layout, const void* w, int64_t w_stride, int64_t K) {
  if (!aligned16(w) || w_stride % 16 != 0 || K <= 0) return false;
  switch (type) {
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q6_K:
      return layout == Layout::kSplit && split_layout_supported(type, K);
    case DType::Q4_K:
    case DType::Q5_K:
      return layout == Layout::kGgml && K % 256 == 0;
    case DType::F32:
      return layout == Layout::kGgml && K % 4 == 0;
    case DType::F16:
    case DType::BF16:
      return layout == Layout::kGgml && K % 8 == 0;
    default:
      return false;
  }
}

cudaError_t matvec_quant_v2(DType type, const MatvecSet& set, int64_t K, const int8_t* xq, const float2* xds, int T,
                            const MatvecLaunch& launch, cudaStream_t stream) {
  if (!set_ok(set, T) || K % 64 != 0) return cudaErrorInvalidValue;
  if (ablated("matvec")) return cudaSuccess;
  return with_quant_adapter(type, launch, K, [&](auto adapter) {
    using A = decltype(adapter);
    return launch_v2_tokens<A>(set, K, {xq, xds, K}, T, launch, stream);
  });
}

cudaError_t matvec_float_v2(DType type, const MatvecSet& set, int64_t K, const float* x, int64_t x_stride, int T,
                            const MatvecLaunch& launch, cudaStream_t stream) {
  if (!set_ok(set, T) || !aligned16(x) || (x_stride * 4) % 16 != 0) return cudaErrorInvalidValue;
  if (ablated("matvec")) return cudaSuccess;
  switch (type) {
    case DType::F32:
      if (K % 4 != 0) return cudaErrorInvalidValue;
      return launch_v2_tokens<FloatAdapter<float>>(set, K, {x, x_stride}, T, launch, stream);
    case DType::F16:
      if (K % 8 != 0) return cudaErrorInvalidValue;
      return launch_v2_tokens<FloatAdapter<__half>>(set, K, {x, x_stride}, T, launch, stream);
    case DType::BF16:
      if (K % 8 != 0) return cudaErrorInvalidValue;
      return launch_v2_tokens<FloatAdapter<uint16_t>>(set, K, {x, x_stride}, T, launch, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

bool matvec_glu_fits(DType type, const MatvecSet& set, int T, const MatvecLaunch& l) {
  if (l.kernel != 3 || l.v3_alt || T != 1 || set.n != 2 || !traits(type).quantized || !set_ok(set, T)) return false;
  const int64_t F = set.row_end[0];
  return F % 32 == 0 && set.row_end[1] == 2 * F;
}

int64_t matvec_glu_slots(DType type, int64_t K, const MatvecLaunch& l) {
  int64_t slots = 0;
  (void)with_quant_adapter(type, l, K, [&](auto adapter) {
    using A = decltype(adapter);
    slots = static_cast<int64_t>(l.sm_count > 0 ? l.sm_count : 132) *
            blocks_per_sm<matvec_v3_glu_kernel<A, A::kV3Unroll, A::kV3MinBlocks>>(A::kV3MinBlocks);
    return cudaSuccess;
  });
  return slots;
}

bool matvec_norm_fits(DType type, const MatvecSet& set, int T, const MatvecLaunch& l) {
  if (l.kernel != 3 || l.v3_alt || T != 1 || set.n != 1 || !set_ok(set, T) || set.row_end[0] % 32 != 0) return false;
  // Types whose v3 tile fits 64 registers (4 blocks of 256 threads per SM): the 1024-thread block's budget.
  return type == DType::Q4_0 || (type == DType::Q4_K && l.q4k_wide);
}

cudaError_t matvec_quant_norm(DType type, const MatvecSet& set, int64_t K, const int8_t* xq, const float2* xds,
                              const float* nw, int8_t* hq, float2* hds, float* part, const MatvecLaunch& l,
                              cudaStream_t stream) {
  if (!matvec_norm_fits(type, set, 1, l) || K % 64 != 0) return cudaErrorInvalidValue;
  if (ablated("matvec")) return cudaSuccess;
  const NormArgs a{xq, xds, nw, hq, hds, part};
  return with_quant_adapter(type, l, K, [&](auto adapter) {
    using A = decltype(adapter);
    if constexpr (A::kV3MinBlocks == 4) return norm_with<A>(set, K, a, l, stream);
    else return cudaErrorInvalidValue;
  });
}

cudaError_t matvec_quant_glu(DType type, const MatvecSet& set, int64_t K, const int8_t* xq, const float2* xds,
                             int act, float* h, int8_t* hq, float2* hds, const MatvecLaunch& l,
                             cudaStream_t stream) {
  if (!matvec_glu_fits(type, set, 1, l) || K % 64 != 0 || (act != 0 && act != 1)) return cudaErrorInvalidValue;
  if (ablated("matvec")) return cudaSuccess;
  const GluArgs g{xq, xds, act, h, hq, hds};
  return with_quant_adapter(type, l, K,
                            [&](auto adapter) { return glu_with<decltype(adapter)>(set, K, g, l, stream); });
}

}  // namespace ferry::kernels::cuda
