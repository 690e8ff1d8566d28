// Mixture-of-experts kernels around the expert matvec (moe_matvec.cu), all without a host round trip:
//   moe_route    the router of kernels/moe_route.h (route_token) per token, one warp each
//   moe_plan     the routed (slot, token) pairs of one expert group sorted by expert into work items
//   moe_combine  one expert group's weighted sum of its slots' outputs, in slot order
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/moe_route.h"

#include <cfloat>
#include <climits>

namespace ferry::kernels::cuda {
namespace {

// ---- router --------------------------------------------------------------------------------------------
constexpr int kRouteWarps = 4;                                // tokens per block
constexpr int kRoutePerLane = kMoeRouteMaxExperts / kWarp;  // values a lane holds

// The larger of two candidates: higher value, then lower index (top_k_desc's order for non-NaN values).
__device__ __forceinline__ void better(float& v, int& i, float v2, int i2) {
  if (v2 > v || (v2 == v && i2 < i)) {
    v = v2;
    i = i2;
  }
}

// Token t's logits -> the k experts with the highest values (softmax of all, or the raw logits), largest
// first, and their weights; route_token's arithmetic: expf in float, sums in double (the softmax sum over
// all experts as lane partials and a tree; every sum over the k selected in slot order), 1 / sum rounded
// to float, the normalisation a float division by max(sum, kMoeMinWeightSum).
__global__ void __launch_bounds__(kRouteWarps * kWarp)
    moe_route_kernel(const float* __restrict__ logits, int64_t stride, int E, int T, int k, int gating, int normalize,
                     int32_t* __restrict__ ids, float* __restrict__ weights) {
  const int lane = threadIdx.x % kWarp;
  const int t = blockIdx.x * kRouteWarps + threadIdx.x / kWarp;
  if (t >= T) return;  // whole warps
  const float* l = logits + static_cast<int64_t>(t) * stride;
  float v[kRoutePerLane];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kRoutePerLane; ++i) {
    const int e = lane + i * kWarp;
    v[i] = e < E ? l[e] : -INFINITY;
    if (e < E) mx = fmaxf(mx, v[i]);
  }
  if (gating == 0) {  // softmax over every expert (softmax_row_ggml)
    mx = warp_max(mx);
    double sum = 0.0;
#pragma unroll
    for (int i = 0; i < kRoutePerLane; ++i) {
      if (lane + i * kWarp < E) {
        v[i] = expf(v[i] - mx);
        sum += static_cast<double>(v[i]);
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float inv = static_cast<float>(1.0 / sum);
#pragma unroll
    for (int i = 0; i < kRoutePerLane; ++i) v[i] = __fmul_rn(v[i], inv);
  }
  // Top k: k rounds of a warp argmax over the values not taken yet. Lane j keeps winner j.
  unsigned taken = 0;  // bit i: v[i] taken
  int my_id = 0;
  float my_v = 0.f;
  for (int j = 0; j < k; ++j) {
    float bv = -INFINITY;
    int bi = INT_MAX;
#pragma unroll
    for (int i = 0; i < kRoutePerLane; ++i) {
      const int e = lane + i * kWarp;
      if (e < E && !(taken & (1u << i))) better(bv, bi, v[i], e);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      better(bv, bi, ov, oi);
    }
    if (bi % kWarp == lane && bi < E) taken |= 1u << (bi / kWarp);
    if (lane == j) {
      my_id = bi;
      my_v = bv;
    }
  }
  float w = my_v;
  if (gating == 1) {  // softmax over the selected logits, in slot order
    const float smx = warp_max(lane < k ? my_v : -INFINITY);
    const float ex = lane < k ? expf(my_v - smx) : 0.f;
    double sum = 0.0;
    for (int j = 0; j < k; ++j) sum += static_cast<double>(__shfl_sync(0xffffffffu, ex, j));
    w = __fmul_rn(ex, static_cast<float>(1.0 / sum));
  }
  if (normalize) {  // ggml_sum_rows in slot order, clamp, div
    double sum = 0.0;
    for (int j = 0; j < k; ++j) sum += static_cast<double>(__shfl_sync(0xffffffffu, w, j));
    w = __fdiv_rn(w, fmaxf(static_cast<float>(sum), kMoeMinWeightSum));
  }
  if (lane < k) {
    ids[static_cast<int64_t>(t) * k + lane] = my_id;
    weights[static_cast<int64_t>(t) * k + lane] = w;
  }
}

// ---- plan ----------------------------------------------------------------------------------------------
constexpr int kPlanThreads = 1024;

// Three counts scanned together: active experts, their pairs, their work items.
struct Trio {
  int a, p, i;
};
__device__ __forceinline__ Trio operator+(Trio x, Trio y) { return Trio{x.a + y.a, x.p + y.p, x.i + y.i}; }
__device__ __forceinline__ Trio shfl_up(Trio v, int o) {
  return Trio{__shfl_up_sync(0xffffffffu, v.a, o), __shfl_up_sync(0xffffffffu, v.p, o),
              __shfl_up_sync(0xffffffffu, v.i, o)};
}

// Exclusive scan of v over the block (kPlanThreads threads); *total gets the sum. Two barriers.
__device__ Trio block_exclusive_scan(Trio v, Trio* total, Trio* warp_sums) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  Trio inc = v;
#pragma unroll
  for (int o = 1; o < kWarp; o <<= 1) {
    const Trio u = shfl_up(inc, o);
    if (lane >= o) inc = inc + u;
  }
  if (lane == kWarp - 1) warp_sums[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    Trio s = warp_sums[lane];  // kPlanThreads / kWarp == kWarp warps
    Trio si = s;
#pragma unroll
    for (int o = 1; o < kWarp; o <<= 1) {
      const Trio u = shfl_up(si, o);
      if (lane >= o) si = si + u;
    }
    warp_sums[lane] = Trio{si.a - s.a, si.p - s.p, si.i - s.i};  // exclusive
    if (lane == kWarp - 1) warp_sums[kWarp] = si;
  }
  __syncthreads();
  const Trio base = warp_sums[warp];
  *total = warp_sums[kWarp];
  return Trio{base.a + inc.a - v.a, base.p + inc.p - v.p, base.i + inc.i - v.i};
}

// One block. Counts the pairs per expert (shared-memory atomics), scans the counts in expert order into
// work items (each expert's pairs cut into items of at most item_pairs), then places every pair in its
// expert's range (atomics: the order of an expert's pairs varies from run to run, the results do not: each
// pair's output is computed on its own).
__global__ void __launch_bounds__(kPlanThreads)
    moe_plan_kernel(const int32_t* __restrict__ ids, int32_t begin, MoePlanShape s, int32_t* __restrict__ plan) {
  extern __shared__ int cursor[];  // [n_expert]
  __shared__ Trio warp_sums[kWarp + 1];
  const int E = s.n_expert;
  const int64_t P = s.n_pairs;
  for (int e = threadIdx.x; e < E; e += kPlanThreads) cursor[e] = 0;
  __syncthreads();
  for (int64_t p = threadIdx.x; p < P; p += kPlanThreads) {
    const unsigned e = static_cast<unsigned>(ids[p] - begin);
    if (e < static_cast<unsigned>(E)) atomicAdd(&cursor[e], 1);
  }
  __syncthreads();
  const MoePlanView v{plan, s};
  Trio carry{0, 0, 0};
  for (int e0 = 0; e0 < E; e0 += kPlanThreads) {  // block-uniform
    const int e = e0 + threadIdx.x;
    const int c = e < E ? cursor[e] : 0;
    const int items = (c + s.item_pairs - 1) / s.item_pairs;
    Trio total;
    const Trio x = block_exclusive_scan(Trio{c > 0 ? 1 : 0, c, items}, &total, warp_sums) + carry;
    for (int i = 0; i < items; ++i) {
      const int p0 = x.p + i * s.item_pairs;
      v.item_expert()[x.i + i] = e;
      v.item_begin()[x.i + i] = p0;
      v.item_end()[x.i + i] = min(p0 + s.item_pairs, x.p + c);
    }
    if (e < E) cursor[e] = x.p;
    carry = carry + total;
    __syncthreads();  // warp_sums reused by the next tile
  }
  if (threadIdx.x == 0) {
    plan[0] = carry.i;  // items
    plan[1] = carry.p;  // pairs held
  }
  __syncthreads();
  for (int64_t p = threadIdx.x; p < P; p += kPlanThreads) {
    const unsigned e = static_cast<unsigned>(ids[p] - begin);
    if (e < static_cast<unsigned>(E)) v.pairs()[atomicAdd(&cursor[e], 1)] = static_cast<int32_t>(p);
  }
}

// ---- combine -------------------------------------------------------------------------------------------
// Thread per (element, token): the group's slots of the token in order, each product rounded before its add
// (__fmul_rn / __fadd_rn: never contracted to an FMA), as moe_combine's scale then add.
__global__ void moe_combine_kernel(const float* __restrict__ y, int64_t y_s1, int64_t y_s2,
                                   const int32_t* __restrict__ ids, const float* __restrict__ w, int k, int64_t d,
                                   int32_t begin, int32_t E, int accumulate, float* __restrict__ out,
                                   int64_t out_stride) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t t = blockIdx.y;
  if (i >= d) return;
  float* o = out + t * out_stride + i;
  bool started = accumulate != 0;
  float acc = started ? *o : 0.f;
  for (int j = 0; j < k; ++j) {
    if (ids != nullptr && static_cast<unsigned>(__ldg(ids + t * k + j) - begin) >= static_cast<unsigned>(E)) continue;
    const float pr = __fmul_rn(__ldg(w + t * k + j), y[j * y_s1 + t * y_s2 + i]);
    acc = started ? __fadd_rn(acc, pr) : pr;
    started = true;
  }
  *o = started ? acc : 0.f;
}

// Grid (column blocks, slots): one thread per bias element.
__global__ void moe_add_bias_kernel(float* __restrict__ y, int64_t y_stride, int64_t n, const int32_t* __restrict__ ids,
                                    int32_t begin, int32_t E, const float* __restrict__ bias, int64_t bias_stride) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t s = blockIdx.y;
  if (i >= n) return;
  const int32_t e = __ldg(ids + s) - begin;
  if (static_cast<unsigned>(e) >= static_cast<unsigned>(E)) return;
  float* o = y + s * y_stride + i;
  *o = __fadd_rn(*o, __ldg(bias + e * bias_stride + i));
}

}  // namespace

cudaError_t moe_route(const float* logits, int64_t logits_stride, int E, int T, int k, int gating, bool normalize,
                      int32_t* ids, float* weights, cudaStream_t stream) {
  if (E < 1 || E > kMoeRouteMaxExperts || k < 1 || k > kMoeRouteMaxUsed || k > E || T < 0 ||
      (gating != 0 && gating != 1))
    return cudaErrorInvalidValue;
  if (T == 0) return cudaSuccess;
  moe_route_kernel<<<ceil_div(T, kRouteWarps), kRouteWarps * kWarp, 0, stream>>>(logits, logits_stride, E, T, k, gating,
                                                                                 normalize ? 1 : 0, ids, weights);
  return cudaGetLastError();
}

cudaError_t moe_plan(const int32_t* ids, int32_t expert_begin, const MoePlanShape& s, int32_t* plan,
                     cudaStream_t stream) {
  if (s.n_pairs < 0 || s.n_pairs > INT_MAX / 2 || s.n_expert < 1 || s.n_expert > kMoePlanMaxExperts ||
      s.item_pairs < 1)
    return cudaErrorInvalidValue;
  moe_plan_kernel<<<1, kPlanThreads, static_cast<size_t>(s.n_expert) * sizeof(int), stream>>>(ids, expert_begin, s,
                                                                                             plan);
  return cudaGetLastError();
}

cudaError_t moe_combine(const float* y, int64_t y_s1, int64_t y_s2, const int32_t* ids, const float* w, int k,
                        int64_t d, int T, int32_t expert_begin, int32_t n_expert, bool accumulate, float* out,
                        int64_t out_stride, cudaStream_t stream) {
  if (d <= 0 || T < 0 || k < 1) return cudaErrorInvalidValue;
  const int threads = 256;
  for (int t0 = 0; t0 < T; t0 += 65535) {  // grid.y's limit
    const int nt = T - t0 < 65535 ? T - t0 : 65535;
    moe_combine_kernel<<<dim3(ceil_div(d, threads), static_cast<unsigned>(nt)), threads, 0, stream>>>(
        y + t0 * y_s2, y_s1, y_s2, ids + static_cast<int64_t>(t0) * k, w + static_cast<int64_t>(t0) * k, k, d,
        expert_begin, n_expert, accumulate ? 1 : 0, out + t0 * out_stride, out_stride);
  }
  return cudaGetLastError();
}

cudaError_t moe_add_bias(float* y, int64_t y_stride, int64_t n, int64_t n_slots, const int32_t* ids,
                         int32_t expert_begin, int32_t n_expert, const float* bias, int64_t bias_stride,
                         cudaStream_t stream) {
  if (n < 0 || n_slots < 0 || n_expert < 0) return cudaErrorInvalidValue;
  if (n == 0 || n_slots == 0 || n_expert == 0) return cudaSuccess;
  const int threads = 256;
  for (int64_t s0 = 0; s0 < n_slots; s0 += 65535) {  // grid.y's limit
    const int64_t ns = n_slots - s0 < 65535 ? n_slots - s0 : 65535;
    moe_add_bias_kernel<<<dim3(static_cast<unsigned>(ceil_div(n, threads)), static_cast<unsigned>(ns)), threads, 0,
                          stream>>>(y + s0 * y_stride, y_stride, n, ids + s0, expert_begin, n_expert, bias, bias_stride);
  }
  return cudaGetLastError();
}

}  // namespace ferry::kernels::cuda
