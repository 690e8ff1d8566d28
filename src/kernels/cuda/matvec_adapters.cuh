// The decode matvec kernels' weight adapters (matvec.cu, moe_matvec.cu): one interface over the quantized
// chunk decoders of quant_chunks.h (activations as Q8) and the float weights (activations in F32).
//   W, load(row, K, c, w)    the register image of chunk c of a weight row
//   X, load_x(c, act, t, x)  token t's activations for chunk c
//   dot(w, c, x)             the chunk's dot product
//   Act, act_row(act, r)     the activations of all tokens, and the same with row r as token 0 (the MoE
//                            kernels gather their tokens' rows through it)
// Internal to kernels_cuda (device code; include after common.cuh).
#pragma once

#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/quant_chunks.h"

namespace ferry::kernels::cuda {
namespace {

// Adapters giving the quantized and the float weights one interface for the kernel: load (weights),
// load_x (token t's activations for a chunk), dot.
// MinBlocks: blocks per SM the register budget is set for (1-2 tokens; 3-8 tokens use 2): 3 = 80
// registers, 24 warps per SM; the k-quants with big chunk images keep 2 (128 registers, 16 warps), as 80
// spilled (ptxas -v; Q4_1 / Q5_0 / Q5_1 spill 4-12 bytes at 80, kept: occupancy is worth more).
// U: chunks per lane and v3 tile. V3U / V3MB: the 1-token v3 kernel's tile and blocks per SM (its
// register budget): Q4_0 runs 2 chunks a tile at 4 blocks per SM (64 registers, 32 warps per SM): its
// dot-product chains are short, and more warps hide their latency better than more chunks per lane do.
template <class Dec, int MinBlocks, int U = 4, int V3U = U, int V3MB = 2>
struct DecoderAdapter {
  using D = Dec;
  using W = typename D::W;
  using X = typename D::X;
  static constexpr int kElems = D::kElems;
  static constexpr int kMinBlocks = MinBlocks;
  static constexpr int kUnroll = U;
  static constexpr int kV3Unroll = V3U;
  static constexpr int kV3MinBlocks = V3MB;
  struct Act {
    const int8_t* xq;   // [T][K]
    const float2* xds;  // [T][K / 32]
    int64_t K;
  };
  __device__ __forceinline__ static Act act_row(const Act& a, int64_t r) {
    return Act{a.xq + r * a.K, a.xds + r * (a.K / 32), a.K};
  }
  __device__ __forceinline__ static void load(const uint8_t* row, int64_t K, int c, W& w) { D::load(row, K, c, w); }
  __device__ __forceinline__ static void load_x(int c, const Act& a, int t, X& x) {
    D::load_x(c, a.xq + t * a.K, a.xds + t * (a.K / 32), x);
  }
  __device__ __forceinline__ static float dot(const W& w, int c, const X& x) { return D::dot(w, c, x); }
};
template <DType Q>
using QuantAdapter = DecoderAdapter<ChunkDec<Q>, (Q == DType::Q2_K || Q == DType::Q3_K || Q == DType::Q5_K ||
                                                  Q == DType::Q6_K) ? 2 : 3, 4, Q == DType::Q4_0 ? 2 : 4,
                                    Q == DType::Q4_0 ? 4 : 2>;
// The 32-byte Q4_K chunks: 2 a tile per lane in v2, so a tile covers as many weights as ChunkDec<Q4_K>'s
// 4; the 1-token v3 kernel takes 1 a tile at 4 blocks per SM (64 registers), for the same reason as
// Q4_0: more warps per SM hide the chunk's latency.
using WideQ4KAdapter = DecoderAdapter<ChunkDecQ4KWide, 3, 2, 1, 4>;

// Q4_K for K % 2048 == 0 by lane pairs (quant_chunks.h ChunkDecQ4KPair, scale step q4k_pair_int).
using PairQ4KAdapter = DecoderAdapter<ChunkDecQ4KPair<>, 3, 2, 1, 4>;

// Float weights: a chunk is 16 bytes (8 F16/BF16 or 4 F32 values); products and sums in F32.
template <typename Wt>
struct FloatAdapter {
  static constexpr int kElems = 16 / static_cast<int>(sizeof(Wt));
  static constexpr int kMinBlocks = 3;
  static constexpr int kUnroll = 4;
  static constexpr int kV3Unroll = 4;
  static constexpr int kV3MinBlocks = 2;
  struct W {
    Q16 q;
  };
  struct X {
    float f[kElems];
  };
  struct Act {
    const float* x;  // [T][x_stride]
    int64_t stride;
  };
  __device__ __forceinline__ static Act act_row(const Act& a, int64_t r) { return Act{a.x + r * a.stride, a.stride}; }
  __device__ __forceinline__ static void load(const uint8_t* row, int64_t, int c, W& w) {
    w.q = ld_q16(row + 16 * static_cast<int64_t>(c));
  }
  __device__ __forceinline__ static void load_x(int c, const Act& a, int t, X& x) {
    const float4* p = reinterpret_cast<const float4*>(a.x + t * a.stride + static_cast<int64_t>(kElems) * c);
#pragma unroll
    for (int i = 0; i < kElems / 4; ++i) {
      const float4 v = __ldg(p + i);
      x.f[4 * i] = v.x;
      x.f[4 * i + 1] = v.y;
      x.f[4 * i + 2] = v.z;
      x.f[4 * i + 3] = v.w;
    }
  }
  __device__ __forceinline__ static float dot(const W& w, int, const X& x) {
    float wf[kElems];
    if constexpr (sizeof(Wt) == 4) {
#pragma unroll
      for (int i = 0; i < 4; ++i) wf[i] = __uint_as_float(w.q.w[i]);
    } else if constexpr (std::is_same_v<Wt, __half>) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w.q.w[i]));
        wf[2 * i] = f.x;
        wf[2 * i + 1] = f.y;
      }
    } else {  // BF16 bits
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        wf[2 * i] = __uint_as_float(w.q.w[i] << 16);
        wf[2 * i + 1] = __uint_as_float(w.q.w[i] & 0xffff0000u);
      }
    }
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kElems; ++i) s = fmaf(wf[i], x.f[i], s);
    return s;
  }
};

// ggml-layout rows of the quantized types through the v1 kernels' slices (quant_units.h dot_slice): chunk c is
// slice c % kSlices of block c / kSlices. The weights are read inside dot (no loads issued ahead), so it is
// slower than the chunk decoders: the MoE kernels' path for stacks those do not read (a Q6_K or Q8_0 expert
// width that the split layout does not take, e.g. 768).
template <DType Q>
struct SliceAdapter {
  static constexpr int kSlices = SliceTraits<Q>::kSlices;
  static constexpr int kBlockElems = SliceTraits<Q>::kElems;
  static constexpr int kElems = kBlockElems / kSlices;
  struct W {
    const uint8_t* b;
  };
  struct X {
    const int* x;
    const XDs* ds;
  };
  struct Act {
    const int8_t* xq;   // [T][K]
    const float2* xds;  // [T][K / 32]
    int64_t K;
  };
  __device__ __forceinline__ static Act act_row(const Act& a, int64_t r) {
    return Act{a.xq + r * a.K, a.xds + r * (a.K / 32), a.K};
  }
  __device__ __forceinline__ static void load(const uint8_t* row, int64_t, int c, W& w) {
    w.b = block_ptr<Q>(row, c / kSlices);
  }
  __device__ __forceinline__ static void load_x(int c, const Act& a, int t, X& x) {
    const int64_t blk = c / kSlices;
    x.x = reinterpret_cast<const int*>(a.xq + t * a.K) + blk * (kBlockElems / 4);
    x.ds = a.xds + t * (a.K / 32) + blk * (kBlockElems / 32);
  }
  __device__ __forceinline__ static float dot(const W& w, int c, const X& x) {
    return dot_slice<Q>(w.b, c % kSlices, x.x, x.ds);
  }
};

// f(adapter) with the decoder adapter of a quantized type (Q4_K: the 32-byte one with q4k_wide, the lane-pair
// one with q4k_pair too where K % 2048 == 0); only the adapter's type matters. cudaErrorInvalidValue for other types.
template <class Fn>
cudaError_t with_quant_adapter(DType type, const MatvecLaunch& l, int64_t K, Fn&& f) {
  switch (type) {
    case DType::Q4_0: return f(QuantAdapter<DType::Q4_0>{});
    case DType::Q4_1: return f(QuantAdapter<DType::Q4_1>{});
    case DType::Q5_0: return f(QuantAdapter<DType::Q5_0>{});
    case DType::Q5_1: return f(QuantAdapter<DType::Q5_1>{});
    case DType::Q8_0: return f(QuantAdapter<DType::Q8_0>{});
    case DType::Q2_K: return f(QuantAdapter<DType::Q2_K>{});
    case DType::Q3_K: return f(QuantAdapter<DType::Q3_K>{});
    case DType::Q5_K: return f(QuantAdapter<DType::Q5_K>{});
    case DType::Q6_K: return f(QuantAdapter<DType::Q6_K>{});
    case DType::Q4_K:
      if (l.q4k_wide && l.q4k_pair && K % 2048 == 0) return f(PairQ4KAdapter{});
      if (l.q4k_wide) return f(WideQ4KAdapter{});
      return f(QuantAdapter<DType::Q4_K>{});
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace
}  // namespace ferry::kernels::cuda
